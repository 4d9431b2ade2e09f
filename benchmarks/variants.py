"""Variant experiments: the same kernel at several baked or launch settings, in one call.

Run on the GPU machine from the repository root::

    python3 benchmarks/variants.py softmax-block rmsnorm-block silu-small [--compile silu-small] [--out DIR]

Each experiment is a list of :class:`kernels.BenchCase` built with non-default fields
(``block``, ``unroll``); they are timed exactly as ``benchmarks/kernels.py`` times its
cases (device events, median, rotated inputs larger than L2, a same-size copy beside
each). ``--compile`` adds torch.compile to the named experiments. The notes in
``docs/kernels/*.md`` cite the experiments by name. ``floor`` times a launch that does
almost nothing (VectorAdd of 32 f32): the fixed cost every row above includes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases_norm
import cases_pointwise
import numpy as np
from kernels import BenchCase, Launcher, copy_bandwidth, measure


def _floor(torch: Any) -> list[BenchCase]:
    from specdsl.kernels import VectorAdd

    spec = VectorAdd()
    n = 32

    def make_inputs() -> tuple:
        return tuple(torch.randn(n, device="cuda") for _ in range(3))

    def run_specdsl(launcher: Any, inputs: tuple) -> None:
        launcher.launch(spec, *inputs, np.uint64(n), grid=spec.grid(n), block=(spec.block, 1, 1))

    return [BenchCase(kernel="VectorAdd", shape="n=32 (launch floor)", bytes_moved=3 * 4 * n,
                      make_inputs=make_inputs, run_specdsl=run_specdsl,
                      run_torch=lambda a, b, c: torch.add(a, b, out=c))]


EXPERIMENTS: dict[str, Callable[[Any], list[BenchCase]]] = {
    "floor": _floor,
    # threads per CTA (and so vectors per thread) of the register-resident Softmax rows
    "softmax-block": lambda torch: [
        cases_norm._softmax(torch, 16384, cols, block=block)
        for cols, blocks in ((4096, (128, 256, 512)), (8192, (128, 256, 512, 1024)))
        for block in blocks],
    "rmsnorm-block": lambda torch: [
        cases_norm._rmsnorm(torch, 16384, hidden, False, block=block)
        for hidden in (4096, 8192) for block in (128, 256, 512)],
    # the latency-bound decode shapes: CTA size and vectors per thread
    "silu-small": lambda torch: [
        cases_pointwise._silu_mul(torch, tokens, 4096, unroll=unroll, block=block)
        for tokens in (1, 16) for unroll, block in ((1, 32), (1, 64), (1, 128), (2, 64), (1, 256))],
    # few long rows: one CTA a row against a cluster of `split` CTAs sharing it
    "softmax-split": lambda torch: [
        cases_norm._softmax(torch, tokens, cols, split=split)
        for cols in (32768, 131072) for tokens in (1, 16, 256) for split in (1, 4, 8)] + [
        cases_norm._softmax(torch, tokens, 131072, split=8, block=1024) for tokens in (1, 16)],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("experiments", nargs="+", choices=sorted(EXPERIMENTS))
    parser.add_argument("--compile", default="",
                        help="comma-separated experiments to also time under torch.compile")
    parser.add_argument("--launches", type=int, default=50)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)

    import torch

    torch.manual_seed(0)
    config = torch._dynamo.config  # one run_torch code object serves many shapes
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), 256))
    compiled_experiments = set(filter(None, args.compile.split(",")))
    launcher = Launcher(torch)
    copy = copy_bandwidth(torch)
    lines = [f"Device: {torch.cuda.get_device_name()}; 1 GiB copy {copy / 1e12:.2f} TB/s", "",
             "| experiment | kernel | shape | specdsl us | % copy | same-size copy us | "
             "compile us |", "|---|---|---|---|---|---|---|"]
    print(lines[0], flush=True)
    for name in args.experiments:
        for case in EXPERIMENTS[name](torch):
            t = measure(torch, case, launcher, name in compiled_experiments, args.launches)
            compiled = f"{t['compile'] * 1e6:.2f}" if "compile" in t else "-"
            row = (f"| {name} | {case.kernel} | {case.shape} | {t['specdsl'] * 1e6:.2f} | "
                   f"{case.bytes_moved / t['specdsl'] / copy * 100:.1f} | "
                   f"{t['copy'] * 1e6:.2f} | {compiled} |")
            lines.append(row)
            print(row, flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "variants.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
