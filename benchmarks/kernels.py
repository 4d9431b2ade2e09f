"""Kernel bandwidth benchmark: specdsl against Liger-Kernel, torch.compile and torch eager (GPU).

Run on the GPU machine from the repository root::

    python3 benchmarks/kernels.py --out $OUT [--plot] [--quick] [--kernels RMSNorm,Softmax]

Every case (``benchmarks/cases_*.py``: RMSNorm, fused add RMSNorm, Softmax, RoPE, SiluMul and
Fp8Quant in bf16, tokens 1 to 16384 at hidden sizes 4096 and 8192, Softmax also at cols
32768 and 131072) is first checked, for each implementation, against the float64
reference of the kernel's module; a wrong result or an exception becomes ``n/a`` with its
reason, and the run goes on. Then each implementation is timed (``harness.py``): the median
CUDA-event time of single launches, and the kernel-only time from CUDA-graph replay, beside
a device-to-device copy of the same bytes. Bandwidth is the spec's ``bytes_moved`` over the
event time, also as a percentage of a 1 GiB device-to-device copy measured first in the same
process (bytes read plus written).

Written under ``--out``: ``kernels.json`` (after every case, so a run cut short keeps what
it measured), ``kernels.md`` (the tables, also printed last) and, with ``--plot``, one
PNG per kernel page (``rmsnorm.png``, ``softmax.png``, ``rope.png``, ``silu_mul.png``,
``fp8_quant.png``; matplotlib from the ``bench`` extra). ``--from-json kernels.json``
prints the tables again from a results file, without a GPU, and with ``--plot`` writes
the charts alone under ``--out`` (``--out docs/kernels/img`` gets the PNGs, nothing else).

Opt-in groups run only where ``--kernels`` names them (their modules set ``OPT_IN``): the
fused FP8 epilogues against the unfused specdsl pair and torch.compile of the same math
(``RMSNormQuant``, ``RMSNormQuant+residual``, ``SiluMulQuant``, ``Fp8Quant-group``,
``RMSNormQuant-long``:
``cases_fused.py``), and row lengths that are not a multiple of 8 beside the nearest one,
and rows longer than the registers (``RMSNorm-odd``, ``Softmax-odd``, ``Fp8Quant-odd``,
``RMSNorm-long``: ``cases_lengths.py``).

Time: a full run (without the opt-in groups) is meant to fit in about 4 minutes on an H200. torch.compile
(``dynamic=False``, one compile per shape) should be most of it; it is left out for shapes
reached after ``--compile-budget-s`` seconds (the cell says so), and the shapes run largest
first, so the budget spends itself on the shapes the bandwidth goals are about.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (str(ROOT), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import bench_report  # noqa: E402  (benchmarks/ is on sys.path)
import liger_peers  # noqa: E402
from harness import BenchCase, Launcher, copy_bandwidth, implementations, measure_case  # noqa: E402

#: ``--quick``: these token counts, and the first series (hidden size) of each kernel.
QUICK_TOKENS = (16, 16384)
#: Past this many seconds into the run, no new shape is compiled with torch.compile.
COMPILE_BUDGET_S = 200.0


def case_modules() -> list[Any]:
    """Every ``benchmarks/cases_*.py`` module (each defines ``KERNELS`` and ``cases(torch)``)."""
    names = sorted(Path(p).stem for p in glob.glob(str(Path(__file__).parent / "cases_*.py")))
    return [importlib.import_module(name) for name in names]


def kernel_names() -> tuple[str, ...]:
    """The kernels ``--kernels`` may name."""
    return tuple(name for module in case_modules() for name in module.KERNELS)


def opt_in_kernels() -> tuple[str, ...]:
    """The kernels that run only where ``--kernels`` names them (modules with ``OPT_IN``)."""
    return tuple(name for module in case_modules() if getattr(module, "OPT_IN", False)
                 for name in module.KERNELS)


def parse_kernels(text: str | None, known: tuple[str, ...]) -> tuple[str, ...] | None:
    """The kernels named in ``text`` (comma-separated, any case; ``None``: all).

    Raises:
        ValueError: a name that is not one of ``known``.
    """
    if not text:
        return None
    by_lower = {name.lower(): name for name in known}
    chosen, unknown = [], []
    for word in filter(None, (w.strip() for w in text.split(","))):
        (chosen if word.lower() in by_lower else unknown).append(by_lower.get(word.lower(), word))
    if unknown:
        raise ValueError(f"unknown kernel(s) {', '.join(unknown)}: expected some of "
                         f"{', '.join(known)}")
    return tuple(dict.fromkeys(chosen))


def parse_args(argv: list[str] | None = None, known: tuple[str, ...] | None = None
               ) -> argparse.Namespace:
    """The command line (see ``--help``); ``known``: the kernel names ``--kernels`` accepts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", "--only", dest="kernels",
                        help="comma-separated kernels (default: all but the opt-in groups "
                             + ", ".join(opt_in_kernels()) + "): "
                             + ", ".join(known or kernel_names()))
    parser.add_argument("--quick", action="store_true",
                        help=f"tokens {', '.join(map(str, QUICK_TOKENS))} at the first hidden "
                             f"size of each kernel, 50 launches")
    parser.add_argument("--launches", type=int, default=None,
                        help="timed launches per implementation (default 100; 50 with --quick)")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--compile-tokens", default="",
                        help="compile only at these comma-separated token counts (default: all)")
    parser.add_argument("--compile-match", default="",
                        help="compile only shapes whose label holds one of these "
                             "comma-separated texts, e.g. 'tokens=16384 ' (default: all)")
    parser.add_argument("--compile-budget-s", type=float, default=COMPILE_BUDGET_S,
                        help="no new torch.compile after this many seconds into the run "
                             f"(default {COMPILE_BUDGET_S:.0f})")
    parser.add_argument("--no-liger", action="store_true", help="leave Liger-Kernel out")
    parser.add_argument("--no-graph", action="store_true", help="no CUDA-graph replay timing")
    parser.add_argument("--plot", action="store_true",
                        help="also write one PNG per kernel page (needs matplotlib)")
    parser.add_argument("--from-json", metavar="FILE",
                        help="no GPU: print the tables (and write the --plot charts) from a "
                             "kernels.json")
    parser.add_argument("--out", default=os.environ.get("OUT", "."),
                        help="folder for kernels.json, kernels.md and the PNGs")
    args = parser.parse_args(argv)
    try:
        args.kernels = parse_kernels(args.kernels, known or kernel_names())
        args.compile_tokens = {int(t) for t in args.compile_tokens.split(",") if t.strip()}
    except ValueError as exc:
        parser.error(str(exc))
    if args.launches is None:
        args.launches = 50 if args.quick else 100
    if args.launches < 1:
        parser.error(f"--launches {args.launches}: expected at least 1")
    return args


def select(cases: list[BenchCase], kernels: tuple[str, ...] | None,
           quick: bool, opt_in: tuple[str, ...] = ()) -> list[BenchCase]:
    """The cases of ``kernels`` (if ``None``: all but those of ``opt_in``); with ``quick``,
    only :data:`QUICK_TOKENS` at the first series of each kernel."""
    chosen = [c for c in cases if c.kernel in kernels] if kernels is not None else [
        c for c in cases if c.kernel not in opt_in]
    if quick:
        first = {}
        for case in chosen:
            first.setdefault(case.kernel, case.series)
        chosen = [c for c in chosen if c.tokens in QUICK_TOKENS and c.series == first[c.kernel]]
    return chosen


def measure_order(case: BenchCase) -> tuple:
    """Largest token counts first (what the compile budget should reach first)."""
    return (-case.tokens,)


def compile_skip(args: argparse.Namespace, case: BenchCase, elapsed: float) -> str | None:
    """Why torch.compile is left out of ``case``, or ``None`` to compile it."""
    if args.no_compile:
        return "torch.compile left out: --no-compile"
    if args.compile_tokens and case.tokens not in args.compile_tokens:
        return "not compiled at this token count: --compile-tokens"
    matches = [m for m in args.compile_match.split(",") if m]
    if matches and not any(m in case.shape + " " for m in matches):
        return "not compiled for this shape: --compile-match"
    if elapsed > args.compile_budget_s:
        return f"not compiled: the run had passed --compile-budget-s {args.compile_budget_s:.0f}"
    return None


def progress(record: dict) -> str:
    """One line per measured case: each implementation's event time or failure."""
    parts = []
    for name, entry in record["impls"].items():
        parts.append(f"{name} {entry['event_us']:.2f} us" if "event_us" in entry
                     else f"{name} n/a")
    return (f"{record['kernel']} tokens={record['tokens']} {record['series']}: "
            f"{', '.join(parts)} ({record['seconds']:.1f} s)")


def finish(results: dict, out: Path, plot: bool, tables_file: bool = True) -> int:
    """Write ``kernels.md`` (unless ``tables_file`` is False) and the charts, then print the
    tables last."""
    text = bench_report.markdown(results)
    if tables_file:
        (out / "kernels.md").write_text(text)
    if plot:
        try:
            for path in bench_report.plot(results, out):
                print(f"wrote {path}")
        except ImportError as exc:
            print(f"--plot: no charts, matplotlib cannot be imported ({exc}); "
                  f"install the bench extra: pip install -e '.[bench]'")
    print(text)
    return 0


def _triton_version() -> str:
    try:
        import triton
    except Exception as exc:  # not installed, or cannot load
        return f"unavailable ({type(exc).__name__})"
    return triton.__version__


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        try:
            results = bench_report.read_json(args.from_json)
        except (OSError, ValueError) as exc:  # a missing file, not JSON, not a results object
            print(f"kernels.py: error: --from-json {args.from_json}: {exc}", file=sys.stderr)
            return 2
        return finish(results, out, args.plot, tables_file=False)

    started = time.perf_counter()
    import torch

    torch.manual_seed(0)
    # Each kernel's torch function is one code object compiled for every shape; dynamo's
    # default recompile limit (8) would silently fall back to eager for the last ones.
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), 256))
    launcher = Launcher(torch)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": _triton_version(), "liger": liger_peers.version(),
        "date": datetime.date.today().isoformat(), "argv": sys.argv[1:] if argv is None else argv,
        "copy_bytes_per_s": copy_bandwidth(torch), "cases": []}
    print(bench_report.header_lines(results)[1], flush=True)
    cases = [case for module in case_modules() for case in module.cases(torch)]
    for case in sorted(select(cases, args.kernels, args.quick, opt_in_kernels()),
                       key=measure_order):
        case_started = time.perf_counter()
        impls = implementations(torch, case, launcher,
                                compile_skip=compile_skip(args, case, case_started - started),
                                peers=not args.no_liger)
        record = measure_case(torch, case, impls, args.launches, graph=not args.no_graph)
        record["seconds"] = time.perf_counter() - case_started
        results["cases"].append(record)
        results["elapsed_s"] = time.perf_counter() - started
        bench_report.write_json(results, out / "kernels.json")
        print(progress(record), flush=True)
    return finish(results, out, args.plot)


if __name__ == "__main__":
    sys.exit(main())
