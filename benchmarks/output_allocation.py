"""How specdsl's outputs are allocated, against the peers' way: the study behind harness.py's
rule that every implementation allocates its outputs at each call (GPU).

Run on the GPU machine from the repository root (about a minute)::

    python3 benchmarks/output_allocation.py --out $OUT [--rounds 2] [--residual-only]

For RMSNorm (with and without the residual), SiluMul and Softmax (its exponentials computed
twice and kept) at 256 and 16384 tokens x 8192, bf16, specdsl's kernel is timed three ways,
by CUDA events and graph replay (``harness``), with input sets rotating through more than
the L2 as always:

* **one output a set**: each input set holds its own outputs (how ``harness.py`` timed
  specdsl before 2026-12-02);
* **one output for all calls**: every call writes the first set's outputs;
* **allocated at each call**: ``torch.empty_like`` at each call (``harness.fresh_outputs``),
  as Liger-Kernel, torch.compile and ``specdsl.torch`` allocate theirs; the caching
  allocator hands the same block back, so at small shapes it stays in L2 between calls.

Beside them, Liger-Kernel's op as ``kernels.py`` times it, and a copy of half the case's
bytes into a destination per set and into a new one at each call.

A second table is about the residual, which specdsl's fused RMSNorm updates in place (as
vLLM's ``fused_add_rms_norm`` does) where Liger and ``kernels.py``'s torch.compile function
write the sum to a new tensor. At 256 tokens x 4096 and 8192 (bf16, y allocated at each call):
specdsl with the residual in its input set (as ``kernels.py`` times it) and with one residual
for all calls; torch.compile of the sum into a new tensor (as ``kernels.py``) and of the
same math with the sum written in place into the set's residual (``residual.add_(x)``);
Liger. Writes ``output_allocation.md`` under ``--out``.
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

import cases_norm  # noqa: E402  (benchmarks/ is on sys.path)
import cases_pointwise  # noqa: E402
import harness  # noqa: E402

TOKENS = (256, 16384)
WIDTH = 8192
LAUNCHES = 50


def cases(torch: Any) -> list[harness.BenchCase]:
    """The cases timed, 256 tokens first (no device work until one runs)."""
    return [case for tokens in TOKENS for case in (
        cases_norm._rmsnorm(torch, tokens, WIDTH, True),
        cases_norm._rmsnorm(torch, tokens, WIDTH, False),
        cases_pointwise._silu_mul(torch, tokens, WIDTH),
        cases_norm._softmax(torch, tokens, WIDTH, keep_exponentials=False),
        cases_norm._softmax(torch, tokens, WIDTH, keep_exponentials=True))]


def one_output_for_all(sets: list[tuple], positions: tuple[int, ...]) -> list[tuple]:
    """``sets`` with the tensors at ``positions`` replaced by the first set's."""
    return [tuple(sets[0][i] if i in positions else value for i, value in enumerate(s))
            for s in sets]


def measure(torch: Any, case: harness.BenchCase, launcher: harness.Launcher) -> str:
    """One table row for ``case``: events (graph replay) in us for each way."""
    sets = harness._input_sets(case, case.make_inputs())
    count, graph = len(sets), case.tokens <= 256
    shared = one_output_for_all(sets, case.outputs)

    def time(fn: Any, n: int = count) -> str:
        return harness.events_and_graph(harness._time(torch, fn, n, LAUNCHES, graph))

    cells = [time(lambda i: case.run_specdsl(launcher, sets[i])),
             time(lambda i: case.run_specdsl(launcher, shared[i])),
             time(lambda i: case.run_specdsl(
                 launcher, harness.fresh_outputs(torch, sets[i], case.outputs)))]
    peer = harness.implementations(torch, case, launcher, compile_skip="not timed").get("liger")
    # the kept Softmax's peer is the one timed on the row before it
    if isinstance(peer, harness.Impl) and not getattr(case.spec, "keep_exponentials", False):
        prepared = [peer.prepare(s) for s in sets]
        cells.append(time(lambda i: peer.run(*prepared[i])))
    else:
        cells.append("-")
    half = case.bytes_moved // 2
    sources = [torch.randint(0, 255, (half,), dtype=torch.uint8, device="cuda")
               for _ in range(count)]
    targets = [torch.empty_like(s) for s in sources]
    cells += [time(lambda i: targets[i].copy_(sources[i])),
              time(lambda i: torch.empty_like(sources[i]).copy_(sources[i]))]
    return f"| {case.kernel} | {case.shape} | " + " | ".join(cells) + " |"


RESIDUAL_WIDTHS = (4096, 8192)


def residual_row(torch: Any, hidden: int, launcher: harness.Launcher) -> str:
    """One row of the residual table: RMSNorm + residual at 256 tokens x ``hidden``."""
    case = cases_norm._rmsnorm(torch, 256, hidden, True)
    sets = harness._input_sets(case, case.make_inputs())
    count = len(sets)
    shared = one_output_for_all(sets, (1,))  # (x, residual, weight, y): one residual

    def time(fn: Any) -> str:
        return harness.events_and_graph(harness._time(torch, fn, count, LAUNCHES, True))

    def fresh(inputs: tuple) -> tuple:
        return harness.fresh_outputs(torch, inputs, case.outputs)

    def in_place(x: Any, residual: Any, weight: Any) -> Any:
        residual.add_(x)
        return torch.nn.functional.rms_norm(residual, (hidden,), weight, cases_norm.EPS)

    compiled_new = torch.compile(case.run_torch, dynamic=False)
    compiled_in_place = torch.compile(in_place, dynamic=False)
    liger = harness.implementations(torch, case, launcher, compile_skip="not timed")["liger"]
    cells = [time(lambda i: case.run_specdsl(launcher, fresh(sets[i]))),
             time(lambda i: case.run_specdsl(launcher, fresh(shared[i]))),
             time(lambda i: compiled_new(*sets[i][:3])),
             time(lambda i: compiled_in_place(*sets[i][:3]))]
    if isinstance(liger, harness.Impl):
        prepared = [liger.prepare(s) for s in sets]
        cells.append(time(lambda i: liger.run(*prepared[i])))
    else:
        cells.append(str(liger))
    return f"| {case.shape} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."),
                        help="folder for output_allocation.md")
    parser.add_argument("--rounds", type=int, default=1, help="times through the cases")
    parser.add_argument("--residual-only", action="store_true",
                        help="only the second table (the residual updated in place or not)")
    args = parser.parse_args(argv)
    import torch

    torch.manual_seed(0)
    launcher = harness.Launcher(torch)
    lines = ["| kernel | shape | one output a set | one for all calls | allocated at each call "
             "| Liger | copy, a destination a set | copy, a new one at each call |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for _ in range(0 if args.residual_only else args.rounds):
        for case in cases(torch):
            lines.append(measure(torch, case, launcher))
            torch.cuda.empty_cache()  # the case's sets are gone with measure's frame
            print(lines[-1], flush=True)
    residual = ["| RMSNorm + residual, 256 tokens | specdsl, residual in its set | specdsl, one "
                "residual for all calls | torch.compile, sum to a new tensor | torch.compile, "
                "sum in place | Liger |", "|---|---:|---:|---:|---:|---:|"]
    for _ in range(args.rounds):
        for hidden in RESIDUAL_WIDTHS:
            residual.append(residual_row(torch, hidden, launcher))
            torch.cuda.empty_cache()
            print(residual[-1], flush=True)
    first = "" if args.residual_only else (  # the first table, unless only the residual ran
        "Events (graph replay) in us; graph replay at 256 tokens only.\n\n"
        + "\n".join(lines) + "\n\n")
    harness.write_report(args.out, "output_allocation.md", first + "The residual, events "
                         "(graph replay) in us:\n\n" + "\n".join(residual) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
