"""Host-side cost of one kernel launch: specdsl's Executor against the ways around it.

Run on the GPU machine from the repository root::

    python3 benchmarks/launch_overhead.py [--batch 100] [--batches 40] [--repeats 7] [--out DIR]

Every method launches the same tiny problem (VectorAdd, n = 1024 f32: one CTA of 256
threads; the CuPy row loads the very cubin specdsl built, the torch and Triton rows run
their own add kernels).

Method (host submission): a batch of ``--batch`` back-to-back launches is timed with
``time.perf_counter`` around the loop alone, after a device synchronize, so the launch
queue starts empty and a batch is far shorter than the queue: nothing in the batch waits
for the GPU, and the time is what the host spends submitting. Per method and round the
median over ``--batches`` batches is taken, in microseconds per launch; the methods take
turns for ``--repeats`` rounds and the median round is reported, with the spread
(max - min) beside it. A second column gives the sustained rate of the earlier version
of this benchmark (``--sustained`` launches until a device synchronize, per launch): it
reads the GPU's rate, not the host's, once the queue fills, and is kept for comparison.

Rows (every one also as a ratio to the driver floor):
  driver floor                ``cuLaunchKernel`` called in a C loop (benchmarks/driver_floor.c,
                              built here with gcc): the driver's own cost
  raw cuLaunchKernel          cuda.bindings driver call from Python, pre-packed parameters
  cuda.core launch            ``cuda.core.launch(stream, config, kernel, *buffers, n)``
  Executor.launch (off)       spec reused, key checking off, cuda.core Buffers
  Executor.launch (on)        spec reused, key checking on
  Executor.launch (ints)      device pointers as ints instead of Buffers, checking on
  Executor.launch (hand key)  spec with a hand-written key(), checking on (ledger hit)
  Executor.launch (new spec)  ``VectorAdd(...)`` built on every call, checking on
  Executor.bind launcher      ``executor.bind(spec, grid=, block=)`` once, then ``bound(*args)``
  ... torch args              the same with torch tensors (issue 16's goals: bind <= 0.85x,
                              launch <= 1.0x cuda.core launch)
  ... TORCH_CURRENT_STREAM    launch on torch's current stream read as a handle (goal <= 1.05x)
  ... current_stream()        the same, with ``stream=torch.cuda.current_stream()`` (a new
                              stream object per call, as an application writes it)
  specdsl.torch.rms_norm      the functional op (one row of 4096 bf16; a plain eager call,
                              which skips torch's dispatcher), against
  ... op path                 ``torch.ops.specdsl.rms_norm``, the registered op itself, and
  F.rms_norm                  ``torch.nn.functional.rms_norm`` on the same tensors (issue 14)
  CuPy RawKernel              ``RawModule(path=cubin).get_function(...)(grid, block, args)``
  torch eager                 ``torch.add(a, b, out=c)``
  Triton                      a ``@triton.jit`` add kernel, BLOCK = 1024
Where the time goes (host submission only, no GPU work for the first three):
  Python no-op call           ``f()`` of an empty function: the loop's own cost
  compiled checks + packing   the module's compiled launcher packing into bytes, no launch
  Python checks, no launch    the generated check function with a no-op in place of launch
  Executor driver path        the generated launcher of kernels with ``.b8`` aggregate
                              parameters: checks, ``struct`` packing, ``cuLaunchKernel``
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

N = 1024

from specdsl import DType, baked, kernel_spec  # noqa: E402  (after the sys.path insert)
from specdsl import launch as launch_field  # noqa: E402


@kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
class KeyedAdd:
    """VectorAdd under a (complete) hand-written key."""

    dtype: DType = baked(DType.F32)
    block: int = launch_field(256)

    def key(self) -> str:
        return f"vadd-{self.dtype.value}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=100,
                        help="launches per timed batch (far below the launch queue's depth)")
    parser.add_argument("--batches", type=int, default=40, help="batches per method and round")
    parser.add_argument("--sustained", type=int, default=5000,
                        help="launches per sustained-rate sample (0: skip that column)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()

    import numpy as np
    from cuda.bindings import driver
    from cuda.core import LaunchConfig, launch

    from specdsl import TORCH_CURRENT_STREAM, DType, Executor, key_checking
    from specdsl._runtime.launchers import core_launcher, driver_launcher
    from specdsl.kernels import VectorAdd
    from specdsl.speedups import PURE_PYTHON_ENV, compiled

    executor = Executor(0, cache_dir=tempfile.mkdtemp())
    device = executor.device
    stream = device.default_stream
    spec = VectorAdd()
    keyed = KeyedAdd()
    module = executor.ensure_module(spec)
    grid, block = spec.grid(N), (spec.block, 1, 1)
    bufs = [device.allocate(N * 4, stream=stream) for _ in range(3)]
    for buf in bufs:
        buf.fill(0, stream=stream)
    a, b, out = bufs
    n64 = np.uint64(N)
    config = LaunchConfig(grid=grid, block=block)
    kernel = module.kernel

    # raw driver call: parameters packed once, outside the loop
    params = bytearray(32)
    struct.pack_into("<4Q", params, 0, int(a.handle), int(b.handle), int(out.handle), N)
    base = ctypes.addressof((ctypes.c_char * 32).from_buffer(params))
    pointers = (ctypes.c_void_p * 4)(base, base + 8, base + 16, base + 24)
    params_address = ctypes.addressof(pointers)
    function, handle = int(kernel.handle), int(stream.handle)
    cu_launch = driver.cuLaunchKernel

    def raw():
        cu_launch(function, grid[0], 1, 1, 256, 1, 1, 0, handle, params_address, 0)

    floor = _driver_floor(executor.driver.launch_kernel_address, function, grid[0], handle,
                          params_address, args.batch)

    def core():
        launch(stream, config, kernel, a, b, out, n64)

    ex_launch = executor.launch

    def specdsl_reused():
        ex_launch(spec, a, b, out, N, grid=grid, block=block)

    pointers_as_ints = (int(a.handle), int(b.handle), int(out.handle))

    def specdsl_ints():
        ex_launch(spec, *pointers_as_ints, N, grid=grid, block=block)

    def specdsl_keyed():
        ex_launch(keyed, a, b, out, N, grid=grid, block=block)

    def specdsl_new():
        ex_launch(VectorAdd(dtype=DType.F32, block=256), a, b, out, N, grid=grid, block=block)

    bound = executor.bind(spec, grid=grid, block=block)

    def specdsl_bound():
        bound(a, b, out, N)

    # the plain-Python launch path, where the compiled one is built (specdsl.speedups): an
    # executor made with it set launches as one in an install without the extension does
    os.environ[PURE_PYTHON_ENV] = "1"
    try:
        pure = Executor(0, cache_dir=executor.disk_cache.path)
        pure_launch, pure_bound = pure.launch, pure.bind(spec, grid=grid, block=block)
    finally:
        del os.environ[PURE_PYTHON_ENV]

    def python_reused():
        pure_launch(spec, a, b, out, N, grid=grid, block=block)

    def python_bound():
        pure_bound(a, b, out, N)

    methods: dict[str, tuple] = {
        **({FLOOR: (floor, None)} if floor is not None else {}),
        "raw cuLaunchKernel (pre-packed)": (raw, None),
        "cuda.core launch": (core, None),
        "Executor.launch, checking off": (specdsl_reused, False),
        "Executor.launch, checking on": (specdsl_reused, True),
        "Executor.launch, int pointers, on": (specdsl_ints, True),
        "Executor.launch, hand key, on": (specdsl_keyed, True),
        "Executor.launch, new spec/call": (specdsl_new, True),
        "Executor.bind launcher, Buffers": (specdsl_bound, True),
    }
    if compiled():
        methods.update({
            "Python path: Executor.launch, checking off": (python_reused, False),
            "Python path: Executor.launch, checking on": (python_reused, True),
            "Python path: Executor.bind launcher": (python_bound, True),
        })
    notes = []
    try:
        import torch

        ta, tb, tc = (torch.rand(N, device="cuda") for _ in range(3))

        def specdsl_torch():
            ex_launch(spec, ta, tb, tc, N, grid=grid, block=block)

        def torch_add():
            torch.add(ta, tb, out=tc)

        def specdsl_torch_stream():
            ex_launch(spec, ta, tb, tc, N, grid=grid, block=block,
                      stream=torch.cuda.current_stream())

        def specdsl_torch_current():
            ex_launch(spec, ta, tb, tc, N, grid=grid, block=block, stream=TORCH_CURRENT_STREAM)

        bound_torch = executor.bind(spec, grid=grid, block=block)

        def specdsl_bound_torch():
            bound_torch(ta, tb, tc, N)

        methods["Executor.bind launcher, torch args"] = (specdsl_bound_torch, True)
        methods["Executor.launch, torch args"] = (specdsl_torch, True)
        methods["Executor.launch, torch args, TORCH_CURRENT_STREAM"] = (specdsl_torch_current,
                                                                        True)
        methods["Executor.launch, torch args, current_stream()"] = (specdsl_torch_stream, True)
        methods["torch eager add"] = (torch_add, None)
        methods.update(_norm_rows(torch))
    except Exception as exc:  # report, do not hide
        notes.append(f"torch unavailable: {exc}")
    try:
        import cupy as cp

        cubin = Path(tempfile.mkdtemp()) / "vector_add.cubin"
        cubin.write_bytes(module.cubin)
        raw_kernel = cp.RawModule(path=str(cubin)).get_function("vector_add")
        ca, cb, cc = (cp.zeros(N, cp.float32) for _ in range(3))

        def cupy_launch():
            raw_kernel(grid, block, (ca, cb, cc, n64))

        methods["CuPy RawKernel"] = (cupy_launch, None)
    except Exception as exc:
        notes.append(f"CuPy unavailable: {exc}")
    try:
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def add_kernel(x, y, z, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            tl.store(z + offsets, tl.load(x + offsets, mask=mask) + tl.load(y + offsets, mask=mask),
                     mask=mask)

        def triton_launch():
            add_kernel[(1,)](ta, tb, tc, N, BLOCK=1024)

        triton_launch()
        methods["Triton kernel"] = (triton_launch, None)
    except Exception as exc:
        notes.append(f"Triton unavailable: {exc}")

    # where the time goes: the loop itself, specdsl's checks alone, the driver path
    def nothing():
        pass

    streams, geometry = (handle, stream), (*grid, *block, 0, config)
    checks_only = core_launcher(module.packer, lambda *_: None, kernel)

    def specdsl_checks():
        checks_only((a, b, out, N), streams, geometry)

    driver_fire = driver_launcher(module.packer, cu_launch, function)  # kernels with .b8 params

    def specdsl_driver_path():
        driver_fire((a, b, out, N), streams, geometry)

    diagnostics = {"Python no-op call": (nothing, None)}
    if compiled():
        pack = module.fire.pack
        packed_args = (a, b, out, N)

        def compiled_checks():
            pack(packed_args)

        diagnostics["compiled checks + packing, no launch"] = (compiled_checks, True)
    diagnostics.update({
        "Python checks, no launch": (specdsl_checks, True),
        "Executor driver path (checks, packing, cuLaunchKernel)": (specdsl_driver_path, True),
    })
    methods.update(diagnostics)

    def timed(fn, count, drain):
        """Seconds for ``count`` launches from an empty queue; with ``drain``, until the GPU
        has run them all too (the sustained rate), else host submission alone. The driver
        floor makes ``args.batch`` launches a call."""
        calls = max(1, count // args.batch) if fn is floor else count
        device.sync()  # the queue starts empty: a short batch never waits for the GPU
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if drain:
            device.sync()
        return (time.perf_counter() - start) * count / (calls * (args.batch if fn is floor
                                                                 else 1))

    def measure(fn, checking, sample):
        with key_checking(True if checking is None else checking):
            return sample(fn)

    def host_sample(fn):
        return statistics.median(timed(fn, args.batch, False) / args.batch
                                 for _ in range(args.batches)) * 1e6

    def sustained_sample(fn):
        return timed(fn, args.sustained, True) / args.sustained * 1e6

    for fn, checking in methods.values():  # warm-up: JIT, module loads, caches
        measure(fn, checking, lambda f: timed(f, 2000, True))
    submit: dict[str, list[float]] = {name: [] for name in methods}
    rate: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(args.repeats):
        for name, (fn, checking) in methods.items():
            submit[name].append(measure(fn, checking, host_sample))
            if args.sustained and name not in diagnostics:
                rate[name].append(measure(fn, checking, sustained_sample))

    # correctness of the measured path: the last Executor launch computed a + b
    a_host = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    b_host = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    pinned = __import__("cuda.core", fromlist=["LegacyPinnedMemoryResource"]) \
        .LegacyPinnedMemoryResource()
    host = pinned.allocate(N * 4)
    view = np.frombuffer((ctypes.c_float * N).from_address(int(host.handle)), np.float32)
    view[:] = a_host
    a.copy_from(host, stream=stream)
    view[:] = b_host
    b.copy_from(host, stream=stream)
    out.fill(0xFF, stream=stream)
    specdsl_reused()
    host.copy_from(out, stream=stream)
    stream.sync()
    exact = bool(np.array_equal(view, a_host + b_host))

    core_us = statistics.median(submit["cuda.core launch"])
    floor_us = statistics.median(submit[FLOOR]) if FLOOR in submit else float("nan")

    def cell(values: list[float]) -> str:
        if not values:
            return "- | -"
        return f"{statistics.median(values):.2f} | {max(values) - min(values):.2f}"

    lines = [
        f"# Launch overhead: VectorAdd n={N}; host submission over batches of {args.batch} "
        f"launches ({args.batches} batches x {args.repeats} rounds)",
        "",
        f"device: {device.name}; launch path: "
        f"{'compiled (specdsl._runtime._speedups)' if compiled() else 'plain Python'}. "
        "host us: per launch, median round of per-round medians "
        f"(spread = max - min over rounds). sustained us: {args.sustained} launches until a "
        "device sync, per launch (the GPU's rate once the queue fills).",
        "",
        "| method | host us | spread | vs cuda.core launch | vs driver floor | sustained us "
        "| spread |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in methods:
        median = statistics.median(submit[name])
        lines.append(f"| {name} | {cell(submit[name])} | {median / core_us:.2f}x | "
                     f"{median / floor_us:.2f}x | {cell(rate[name])} |")
    lines += ["", f"Executor.launch result equals NumPy's float32 a + b: {exact}"]
    lines += [f"note: {n}" for n in notes]
    text = "\n".join(lines)
    print(text)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "launch_overhead.md").write_text(text + "\n")
    return 0 if exact else 1


FLOOR = "driver floor: cuLaunchKernel in a C loop"


def _driver_floor(launch_kernel: int, function: int, grid_x: int, stream: int,
                  params: int, batch: int):
    """A function making ``batch`` launches from C (benchmarks/driver_floor.c, compiled here
    with gcc), or ``None`` where gcc or the driver's address is missing (then no floor row)."""
    if not launch_kernel:
        return None
    library = Path(tempfile.mkdtemp()) / "driver_floor.so"
    try:
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(library),
                        str(ROOT / "benchmarks" / "driver_floor.c")], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"note: no driver floor row ({exc})", file=sys.stderr)
        return None
    loop = ctypes.CDLL(str(library)).launch_loop
    loop.restype = ctypes.c_int
    loop.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint,
                     ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    call = (launch_kernel, function, grid_x, 256, stream, params, batch)

    def floor():
        err = loop(*call)
        if err:
            raise RuntimeError(f"cuLaunchKernel failed in the C loop: CUresult {err}")
    return floor


def _norm_rows(torch):
    """The functional-op rows: specdsl.torch.rms_norm against torch.nn.functional.rms_norm
    on one row of 4096 bf16 (issue 14: an op call costs no more host time than torch's)."""
    import specdsl.torch as ops

    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    weight = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    functional = torch.nn.functional.rms_norm

    op = torch.ops.specdsl.rms_norm.default

    def specdsl_rms_norm():  # a plain eager call: the op's implementation, directly
        ops.rms_norm(x, weight, 1e-6)

    def specdsl_op():  # the registered op, through torch's dispatcher
        op(x, weight, 1e-6)

    def torch_rms_norm():
        functional(x, (4096,), weight, 1e-6)

    torch.testing.assert_close(ops.rms_norm(x, weight, 1e-6),
                               functional(x, (4096,), weight, 1e-6), atol=2e-2, rtol=2e-2)
    return {"specdsl.torch.rms_norm (1 x 4096 bf16)": (specdsl_rms_norm, True),
            "torch.ops.specdsl.rms_norm (same, op path)": (specdsl_op, True),
            "torch.nn.functional.rms_norm (same)": (torch_rms_norm, None)}


if __name__ == "__main__":
    sys.exit(main())
