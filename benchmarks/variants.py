"""Variant experiments: the same kernel at several baked or launch settings, in one call.

Run on the GPU machine from the repository root::

    python3 benchmarks/variants.py softmax-block rmsnorm-block silu-small [--compile silu-small] [--out DIR]

Each experiment is a list of :class:`harness.BenchCase` built with non-default fields
(``block``, ``unroll``); they are checked and timed exactly as ``benchmarks/kernels.py``
checks and times its cases (``harness.measure_case``: the float64 reference first, then
device events, median, rotated inputs larger than L2, a same-size copy beside each). ``--compile`` adds torch.compile to the named experiments. The notes in
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

for _path in (str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import cases_norm  # noqa: E402  (benchmarks/ is on sys.path)
import cases_pointwise  # noqa: E402
import numpy as np  # noqa: E402
from harness import BenchCase, Launcher, copy_bandwidth, host, implementations, measure_case  # noqa: E402


def _floor(torch: Any) -> list[BenchCase]:
    from specdsl.kernels import VectorAdd, vector_add

    spec = VectorAdd()
    n = 32

    def make_inputs() -> tuple:
        return tuple(torch.randn(n, device="cuda") for _ in range(3))

    def run_specdsl(launcher: Any, inputs: tuple) -> tuple:
        launcher.launch(spec, *inputs, np.uint64(n), grid=spec.grid(n), block=(spec.block, 1, 1))
        return (inputs[2],)

    def expected(inputs: tuple, rows: Any) -> tuple:
        return (vector_add.reference(host(inputs[0], rows), host(inputs[1], rows)),)

    return [BenchCase(kernel="VectorAdd", tokens=n, series="f32 elements (launch floor)",
                      bytes_moved=3 * 4 * n, make_inputs=make_inputs, run_specdsl=run_specdsl,
                      run_torch=lambda a, b: a + b, torch_args=lambda inputs: inputs[:2],
                      expected=expected, tolerance=1e-6)]


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
            skip = None if name in compiled_experiments else "not asked: --compile"
            impls = implementations(torch, case, launcher, compile_skip=skip, peers=False)
            impls = {k: v for k, v in impls.items() if k in ("specdsl", "compile")}
            record = measure_case(torch, case, impls, args.launches, graph=False)
            t = {k: v.get("event_us") for k, v in record["impls"].items()}
            if t["specdsl"] is None:
                row = (f"| {name} | {case.kernel} | {case.shape} | n/a: "
                       f"{record['impls']['specdsl']['error']} | - | - | - |")
            else:
                compiled = f"{t['compile']:.2f}" if t.get("compile") else "-"
                row = (f"| {name} | {case.kernel} | {case.shape} | {t['specdsl']:.2f} | "
                       f"{case.bytes_moved / (t['specdsl'] * 1e-6) / copy * 100:.1f} | "
                       f"{record['copy']['event_us']:.2f} | {compiled} |")
            lines.append(row)
            print(row, flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "variants.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
