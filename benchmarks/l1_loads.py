"""Loads without L1 lines (the ``l1_no_allocate`` field) against the plain loads, by launch
size: the study behind ``specdsl.kernels.suggested_l1_no_allocate`` (GPU).

Run on the GPU machine from the repository root (about a minute)::

    python3 benchmarks/l1_loads.py --out $OUT [--rounds 3]

For SiluMul (bf16, d 4096 and 8192), Fp8Quant (dynamic, hidden 4096 and 8192) and
SiluMulQuant (dynamic, d 4096) from 1 to 16384 tokens, each request is timed with the field
off and on, in alternating rounds in one process (which of the two goes first alternates
too): median CUDA-event time, and CUDA-graph replay up to 1024 tokens (``harness``), input
sets rotating through more than the L2 and outputs allocated at each call, as ``kernels.py``
times them. SiluMul takes the geometry of ``suggested_geometry``. Both requests write the
same bits (``tests/test_kernel_streaming_loads.py`` checks that on the GPU). Writes
``l1_loads.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

for _path in (str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import cases_fused  # noqa: E402  (benchmarks/ is on sys.path)
import cases_pointwise  # noqa: E402
import harness  # noqa: E402

TOKENS = (1, 16, 256, 1024, 4096, 16384)
LAUNCHES = 50


def pairs(torch: Any) -> list[tuple[harness.BenchCase, harness.BenchCase]]:
    """``(field off, field on)`` for every case timed (no device work until one runs)."""
    makers = [lambda t, on: cases_pointwise._silu_mul(torch, t, 4096, l1_no_allocate=on),
              lambda t, on: cases_pointwise._silu_mul(torch, t, 8192, l1_no_allocate=on),
              lambda t, on: cases_pointwise._fp8_quant(torch, t, 4096, l1_no_allocate=on),
              lambda t, on: cases_pointwise._fp8_quant(torch, t, 8192, l1_no_allocate=on),
              lambda t, on: cases_fused._silu_mul_quant(torch, t, 4096, "dynamic",
                                                        l1_no_allocate=on)]
    return [(make(tokens, False), make(tokens, True)) for make in makers for tokens in TOKENS]


def row(torch: Any, off: harness.BenchCase, on: harness.BenchCase, launcher: harness.Launcher,
        rounds: int) -> str:
    """One table row: the case, then each round's time with the field off and on."""
    sets = harness._input_sets(off, off.make_inputs())
    graph = off.tokens <= 1024
    times: dict[bool, list[str]] = {False: [], True: []}
    for number in range(rounds):
        order = ((False, off), (True, on))
        for field, case in order if number % 2 == 0 else order[::-1]:  # each first in turn
            def call(i: int, case: harness.BenchCase = case) -> Any:
                return case.run_specdsl(launcher, harness.fresh_outputs(torch, sets[i],
                                                                         case.outputs))
            timed = harness._time(torch, call, len(sets), LAUNCHES, graph)
            times[field].append(harness.events_and_graph(timed))
    mb = off.bytes_moved / 1e6
    shape = off.shape.replace(" l1_no_allocate=False", "")  # the row holds both
    return (f"| {off.kernel} | {shape} | {mb:.1f} | " + " / ".join(times[False]) + " | "
            + " / ".join(times[True]) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for l1_loads.md")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds a case")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be 1 or more (got {args.rounds})")
    import torch

    torch.manual_seed(0)
    launcher = harness.Launcher(torch)
    lines = ["| kernel | shape | MB moved | plain loads, us | loads without L1 lines, us |",
             "|---|---|---:|---:|---:|"]
    for off, on in pairs(torch):
        lines.append(row(torch, off, on, launcher, args.rounds))
        torch.cuda.empty_cache()
        print(lines[-1], flush=True)
    harness.write_report(args.out, "l1_loads.md", "Events (graph replay, up to 1024 tokens) in "
                         "us, one entry a round.\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
