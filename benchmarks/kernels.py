"""Kernel bandwidth benchmark: specdsl kernels against torch eager and torch.compile (GPU).

Run on the GPU machine from the repository root::

    python3 benchmarks/kernels.py [--only RMSNorm,Softmax] [--no-compile] [--out DIR]

For every case it prints, and writes as markdown to ``$OUT/kernels.md`` (or ``--out``):
the median device time of one launch, the bytes a launch must move (each input read
once, each output written once), the achieved TB/s, and that rate as a fraction of a
large device-to-device copy measured in the same run; the same for torch eager and
torch.compile.

Plug-in interface
-----------------
Every module ``benchmarks/cases_*.py`` defines ``cases(torch) -> list[BenchCase]``.
A :class:`BenchCase` holds:

* ``kernel``: the kernel's name (``"RMSNorm"``); ``shape``: a label (``"tokens=16 hidden=4096"``);
* ``bytes_moved``: bytes one launch must move through device memory (an int);
* ``make_inputs()``: builds one fresh set of device tensors (random, never zeros) and
  returns it as a tuple; the harness makes as many sets as needed to exceed the L2
  (rotating among them, so no launch finds its inputs in cache);
* ``run_specdsl(launcher, inputs)``: launches the specdsl kernel on one set through
  :class:`Launcher` (``launcher.launch(spec, *args, grid=, block=)``, args as torch
  tensors and NumPy scalars in ``.param`` order);
* ``run_torch(*inputs)``: the same computation in torch, a pure function of the tensors
  in ``inputs`` (extra tensors such as preallocated outputs are ignored by it); it is
  timed eagerly and under ``torch.compile(dynamic=False)`` (compiled and warmed up
  outside the timed region).

Timing: after a warm-up, the GPU is kept busy with a sleep kernel while the host queues
``--launches`` launches, each between two CUDA events, so the events measure device time
only (no host launch gaps); the median over all of them is reported.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Inputs of all rotated sets together are at least this many bytes (H200 L2: 60 MB).
ROTATE_BYTES = 256 * 2**20


@attrs.frozen
class BenchCase:
    """One benchmark case (see the module docstring for the plug-in interface)."""

    kernel: str
    shape: str
    bytes_moved: int
    make_inputs: Callable[[], tuple]
    run_specdsl: Callable[[Launcher, tuple], None]
    run_torch: Callable[..., Any]
    torch_args: Callable[[tuple], tuple] = attrs.field(default=lambda inputs: inputs)


class Launcher:
    """Compiles specdsl requests with nvJitLink and launches them with cuda.core on torch's stream.

    Independent of :class:`specdsl.Executor` so the benchmark measures the kernels alone.
    """

    def __init__(self, torch: Any) -> None:
        from cuda.core import Device, Stream

        self.torch = torch
        self.device = Device(torch.cuda.current_device())
        self.device.set_current()
        self.stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
        self.kernels: dict[Any, Any] = {}
        self.logs: dict[Any, str] = {}

    def kernel(self, spec: Any) -> Any:
        """The loaded kernel of ``spec`` (compiled on first use)."""
        found = self.kernels.get(spec)
        if found is None:
            from cuda.core import ObjectCode

            from specdsl._render.render import render
            from specdsl._runtime.compile import compile_ptx
            from specdsl._spec.decorator import spec_info

            compiled = compile_ptx(render(spec, "sm_90"), "sm_90", spec=spec)
            module = ObjectCode.from_cubin(compiled.cubin)
            found = self.kernels[spec] = module.get_kernel(spec_info(spec).entry)
            self.logs[spec] = compiled.log
        return found

    def launch(self, spec: Any, *args: Any, grid: tuple, block: tuple) -> None:
        """Launch ``spec`` with ``args`` (torch tensors become device pointers)."""
        from cuda.core import LaunchConfig, launch

        values = [a.data_ptr() if hasattr(a, "data_ptr") else a for a in args]
        launch(self.stream, LaunchConfig(grid=grid, block=block), self.kernel(spec), *values)


def load_cases(torch: Any, only: set[str] | None) -> list[BenchCase]:
    """Every case of every ``benchmarks/cases_*.py``, optionally only the named kernels."""
    found: list[BenchCase] = []
    for path in sorted(glob.glob(str(Path(__file__).parent / "cases_*.py"))):
        spec = importlib.util.spec_from_file_location(Path(path).stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found += [c for c in module.cases(torch) if only is None or c.kernel in only]
    return found


def device_times(torch: Any, fn: Callable[[int], Any], sets: int, launches: int) -> list[float]:
    """Device seconds of ``launches`` calls ``fn(i)`` (input set ``i % sets``), host gaps hidden."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(launches)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(launches)]
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # ~25 ms of device work while the host queues the launches
    for i in range(launches):
        starts[i].record()
        fn(i % sets)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends, strict=True)]


def copy_bandwidth(torch: Any) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (bytes read plus bytes written)."""
    n = 2**30
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = device_times(torch, lambda i: dst.copy_(src), 1, 20)
    return 2 * n / statistics.median(times)


def measure(torch: Any, case: BenchCase, launcher: Launcher, compile_torch: bool,
            launches: int) -> dict[str, float]:
    """Median seconds per launch of specdsl, torch eager, (optionally) torch.compile, and
    a device-to-device copy moving the same bytes (``"copy"``: its fixed launch cost
    bounds what any kernel of this size can reach)."""
    first = case.make_inputs()
    per_set = sum(t.numel() * t.element_size() for t in first if hasattr(t, "numel"))
    sets = [first] + [case.make_inputs() for _ in range(max(1, -(-ROTATE_BYTES // per_set)) - 1)]
    sets = sets[: max(2, min(len(sets), 64))]
    out: dict[str, float] = {}
    half = max(1, case.bytes_moved // 2)
    copies = [(torch.empty(half, dtype=torch.uint8, device="cuda"),
               torch.randint(0, 255, (half,), dtype=torch.uint8, device="cuda"))
              for _ in range(max(2, min(64, -(-ROTATE_BYTES // half))))]
    runners: dict[str, Callable[[int], Any]] = {
        "specdsl": lambda i: case.run_specdsl(launcher, sets[i]),
        "eager": lambda i: case.run_torch(*case.torch_args(sets[i])),
        "copy": lambda i: copies[i % len(copies)][0].copy_(copies[i % len(copies)][1]),
    }
    if compile_torch:
        compiled = torch.compile(case.run_torch, dynamic=False)
        runners["compile"] = lambda i: compiled(*case.torch_args(sets[i]))
    for name, fn in runners.items():
        for i in range(3):  # warm-up: module load, compilation, autotuning
            fn(i % len(sets))
        torch.cuda.synchronize()
        out[name] = statistics.median(device_times(torch, fn, len(sets), launches))
    runners.clear()  # the closures hold the input sets: free them before the next case
    sets.clear()
    copies.clear()
    torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated kernel names (default: all)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--compile-match", default="",
                        help="run torch.compile only for shapes containing one of these "
                             "comma-separated texts (e.g. 'tokens=16384 '; default: all)")
    parser.add_argument("--launches", type=int, default=100, help="timed launches per variant")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for kernels.md")
    args = parser.parse_args(argv)

    import torch

    torch.manual_seed(0)
    # Each kernel's torch function is one code object compiled for every shape; dynamo's
    # default recompile limit (8) would silently fall back to eager for the last ones.
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(getattr(config, name), 256))
    launcher = Launcher(torch)
    copy = copy_bandwidth(torch)
    only = set(args.only.split(",")) if args.only else None
    header = ("| kernel | shape | MB moved | specdsl us | TB/s | % copy | same-size copy us "
              "| eager us | % copy | compile us | % copy | vs eager | vs compile |")
    lines = [f"Device: {torch.cuda.get_device_name()}; device-to-device copy: "
             f"{copy / 1e12:.2f} TB/s (read + write, 1 GiB)", "", header,
             "|" + "---|" * (header.count("|") - 1)]
    print(lines[0], flush=True)
    out_path = Path(args.out) / "kernels.md"
    for case in load_cases(torch, only):
        started = time.perf_counter()
        matches = args.compile_match.split(",")
        compile_torch = not args.no_compile and any(m in case.shape + " " for m in matches)
        t = measure(torch, case, launcher, compile_torch, args.launches)

        def cell(name: str) -> tuple[str, str]:
            if name not in t:
                return "-", "-"
            return f"{t[name] * 1e6:.2f}", f"{case.bytes_moved / t[name] / copy * 100:.1f}"

        spec_us, spec_pct = cell("specdsl")
        eager_us, eager_pct = cell("eager")
        comp_us, comp_pct = cell("compile")
        speed_eager = f"{t['eager'] / t['specdsl']:.2f}x"
        speed_comp = f"{t['compile'] / t['specdsl']:.2f}x" if "compile" in t else "-"
        row = (f"| {case.kernel} | {case.shape} | {case.bytes_moved / 1e6:.2f} | {spec_us} | "
               f"{case.bytes_moved / t['specdsl'] / 1e12:.2f} | {spec_pct} | "
               f"{t['copy'] * 1e6:.2f} | {eager_us} | "
               f"{eager_pct} | {comp_us} | {comp_pct} | {speed_eager} | {speed_comp} |")
        lines.append(row)
        print(row, f"({time.perf_counter() - started:.1f} s)", flush=True)
        out_path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
