"""Launches of the specdsl kernels and of their peers, one marked target at a time, for Nsight Compute.

Run under ncu by ``benchmarks/ncu_report.py`` (on the GPU machine, repository root), which
gives ncu its flags and prints the table::

    python3 benchmarks/ncu_report.py --out $OUT

or by hand (clocks left alone, as the Firecracker machines need; only the marked range)::

    ncu --clock-control none --profile-from-start off --target-processes application-only \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \\
        --csv --print-units base --log-file $OUT/ncu.csv \\
        python3 benchmarks/ncu_targets.py --manifest $OUT/ncu_targets.json [large] [norm] [small]

Groups: ``large`` (the default): every built-in (RMSNorm, fused add RMSNorm, Softmax, RoPE,
SiluMul, Fp8Quant) at 16384 tokens x 4096 and x 8192, bf16; ``norm``: RMSNorm 16384 x 4096 and
16384 x 8192, Softmax 16384 x 8192; ``small``: SiluMul at 1 and 16 tokens (d 4096); ``odd``:
RMSNorm and Fp8Quant at 4096 and 4097, Softmax at 50264 and 50257 (16384 tokens; issue 14's odd
lengths); ``fused``: fused add RMSNorm at 16384 x 4096 and x 8192; ``rows-256``: fused add
RMSNorm, SiluMul and Softmax (with and without ``keep_exponentials``) at 256 tokens x 8192;
``rope-small``: RoPE at 1 and 16 tokens x (32+8) x 128; ``quant-small``: SiluMulQuant with a
static scale at 16 tokens (d 14336 and 18432); ``quant-one``: the same at 1 token (d 4096,
14336 and 18432).

For each case, every implementation (specdsl, Liger-Kernel, torch.compile, torch eager:
``--impls``) is checked against the float64 reference (``harness.check_all``) and called
once more on fresh inputs outside the profiled range (compilation, autotuning, Triton JIT). Then, between ``cudaProfilerStart``
and ``cudaProfilerStop``, each implementation that passed runs once, after a **marker**: a
``vector_add`` launch of one element whose grid is ``(target id, 1, 1)``. Every kernel ncu
reports after a marker, up to the next, belongs to that target. ``--manifest`` receives the
targets (id, kernel, shape, implementation, ``bytes_moved``, or the reason one did not run),
rewritten after every case.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _path in (str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import cases_fused  # noqa: E402  (benchmarks/ is on sys.path)
import cases_norm  # noqa: E402
import cases_pointwise  # noqa: E402
import numpy as np  # noqa: E402
from harness import IMPLS, BenchCase, Launcher, check_all, describe_error, implementations  # noqa: E402

#: The name of the marker kernel's entry (``specdsl.kernels.VectorAdd``).
MARKER = "vector_add"
LARGE_TOKENS = 16384
LARGE_WIDTHS = (4096, 8192)


def _large(torch: Any) -> list[BenchCase]:
    found = []
    for width in LARGE_WIDTHS:
        found += [cases_norm._rmsnorm(torch, LARGE_TOKENS, width, False),
                  cases_norm._rmsnorm(torch, LARGE_TOKENS, width, True),
                  cases_norm._softmax(torch, LARGE_TOKENS, width),
                  cases_pointwise._rope(torch, LARGE_TOKENS, width),
                  cases_pointwise._silu_mul(torch, LARGE_TOKENS, width),
                  cases_pointwise._fp8_quant(torch, LARGE_TOKENS, width)]
    return found


GROUPS: dict[str, Callable[[Any], list[BenchCase]]] = {
    "large": _large,
    "norm": lambda torch: [cases_norm._rmsnorm(torch, 16384, 4096, False),
                           cases_norm._rmsnorm(torch, 16384, 8192, False),
                           cases_norm._softmax(torch, 16384, 8192)],
    "small": lambda torch: [cases_pointwise._silu_mul(torch, tokens, 4096) for tokens in (1, 16)],
    # issue 14: odd row lengths beside the nearest multiple of 8
    "odd": lambda torch: [cases_norm._rmsnorm(torch, 16384, 4096, False),
                          cases_norm._rmsnorm(torch, 16384, 4097, False),
                          cases_norm._softmax(torch, 16384, 50264),
                          cases_norm._softmax(torch, 16384, 50257),
                          cases_pointwise._fp8_quant(torch, 16384, 4096),
                          cases_pointwise._fp8_quant(torch, 16384, 4097)],
    # issue 15: fused add RMSNorm, where Liger is ahead
    "fused": lambda torch: [cases_norm._rmsnorm(torch, 16384, width, True) for width in LARGE_WIDTHS],
    # issue 15: 256 tokens x 8192, where Liger leads by graph replay (SiluMul, the residual,
    # Softmax with and without its exponentials kept)
    "rows-256": lambda torch: [cases_norm._rmsnorm(torch, 256, 8192, True),
                               cases_pointwise._silu_mul(torch, 256, 8192),
                               cases_norm._softmax(torch, 256, 8192, keep_exponentials=False),
                               cases_norm._softmax(torch, 256, 8192, keep_exponentials=True)],
    # issue 15: RoPE at 1 and 16 tokens x (32+8) x 128, where Liger leads by 0.04 to 0.08 us
    "rope-small": lambda torch: [cases_pointwise._rope(torch, tokens, 4096) for tokens in (1, 16)],
    # issue 15: SiluMulQuant with a static scale at 16 tokens (split over 8 CTAs a token),
    # where torch.compile leads by graph replay
    "quant-small": lambda torch: [cases_fused._silu_mul_quant(torch, 16, d, "static")
                                  for d in (14336, 18432)],
    # issue 15: 1 token with a static scale, where torch.compile leads by graph replay
    "quant-one": lambda torch: [cases_fused._silu_mul_quant(torch, 1, d, "static")
                                for d in (4096, 14336, 18432)],
    # chunked rows: two passes over each row through one CTA, against a cluster sharing it
    "long": lambda torch: [cases_norm._softmax(torch, 4096, 131072),
                           cases_norm._softmax(torch, 4096, 131072, split=2),
                           cases_norm._rmsnorm(torch, 4096, 131072, False)],
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see ``--help``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("groups", nargs="*", default=["large"],
                        help=f"case groups, some of {', '.join(GROUPS)} (default: large)")
    parser.add_argument("--impls", default=",".join(IMPLS),
                        help=f"comma-separated implementations (default: {','.join(IMPLS)})")
    parser.add_argument("--manifest", help="write the targets here (JSON)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.groups) - set(GROUPS))
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}: expected some of "
                     f"{', '.join(GROUPS)}")
    args.impls = tuple(dict.fromkeys(filter(None, args.impls.split(","))))
    wrong = sorted(set(args.impls) - set(IMPLS))
    if wrong:
        parser.error(f"unknown implementation(s) {', '.join(wrong)}: expected some of "
                     f"{', '.join(IMPLS)}")
    return args


class Marker:
    """Launches ``vector_add`` on one element with ``target`` CTAs: ncu's grid size names it."""

    def __init__(self, torch: Any, launcher: Launcher) -> None:
        from specdsl.kernels import VectorAdd

        self.launcher = launcher
        self.spec = VectorAdd()
        self.buffers = [torch.zeros(4, device="cuda") for _ in range(3)]

    def __call__(self, target: int) -> None:
        self.launcher.launch(self.spec, *self.buffers, np.uint64(1), grid=(target, 1, 1),
                             block=(self.spec.block, 1, 1))


def profile_case(torch: Any, case: BenchCase, launcher: Launcher, marker: Marker,
                 impls: tuple[str, ...], targets: list[dict]) -> list[dict]:
    """Check and warm up each implementation of ``case``, then run each once, marked,
    inside a profiled range; append one target per implementation to ``targets``, and
    return those."""
    first = len(targets)
    compile_skip = None if "compile" in impls else "left out: --impls"
    found = implementations(torch, case, launcher, compile_skip=compile_skip,
                            peers=any(name in impls for name in case.peers))
    passed, records = check_all(torch, case, {
        name: found.get(name, "n/a (no such implementation for this kernel)") for name in impls})
    ready = {}
    for name in impls:
        target = {"id": len(targets) + 1, "kernel": case.kernel, "tokens": case.tokens,
                  "series": case.series, "impl": name, "bytes_moved": case.bytes_moved}
        targets.append(target)
        if name not in passed:
            target["error"] = records[name]["error"]
            continue
        try:
            prepared = passed[name].prepare(case.make_inputs())
            passed[name].run(*prepared)  # warm: the profiled call is not the first
            ready[target["id"]] = (passed[name], prepared)
        except Exception as exc:  # report this implementation, keep the others
            target["error"] = describe_error(exc)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for target_id, (impl, prepared) in ready.items():
        marker(target_id)
        impl.run(*prepared)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    ready.clear()
    torch.cuda.empty_cache()
    return targets[first:]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.manual_seed(0)
    config = torch._dynamo.config  # one run_torch code object serves both widths
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), 64))
    launcher = Launcher(torch)
    marker = Marker(torch, launcher)
    targets: list[dict] = []
    for group in args.groups:
        for case in GROUPS[group](torch):
            done = profile_case(torch, case, launcher, marker, args.impls, targets)
            if args.manifest:
                Path(args.manifest).write_text(json.dumps(targets, indent=1) + "\n")
            print(f"{case.kernel} {case.shape}: " + ", ".join(
                f"{t['impl']} {t.get('error', 'ready')}" for t in done),
                flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
