"""What a thread block cluster costs a small launch: Fp8Quant's dynamic-scale split (a
cluster reduction of the row max), reduced three ways, against the same split with a static
scale (plain CTAs), step by step (GPU, measurement only).

Run on the GPU machine from the repository root (under a minute)::

    python3 benchmarks/cluster_cost.py --out $OUT [--rounds 3]

For bf16 rows of 4096 and 18432 at 1 and 16 tokens and splits of 2 and 8, these PTX texts
are timed by CUDA-graph replay (``harness.graph_seconds``, four input sets, median of the
rounds, each round in the other order):

* ``static, 1 CTA`` and ``static, split``: ``Fp8Quant(scale_mode="static_param")``;
* ``+ cluster launch``: the split's text with ``.reqnctapercluster split, 1, 1`` added (the
  launch then carries the cluster shape; the CTAs still share nothing);
* ``+ cluster barrier``: that, and one cluster barrier (``barrier.cluster.arrive.release``,
  ``wait.acquire``) before ``ret``;
* ``dynamic, 1 CTA``: ``Fp8Quant(scale_mode="dynamic")`` unsplit;
* ``dynamic, CTA max only``: the split without its cluster reduction (each CTA scales by
  its own part's max: wrong scales, a time only);
* ``dynamic, remote reads``: the reduction before 2026-12-02: each CTA publishes its max in
  its own slot, a cluster barrier, lane i reads CTA i's slot (``ld.shared::cluster``), and
  a last cluster barrier before ``ret`` keeps the slot until all have read it;
* ``dynamic, mbarrier, no guard``: thread i stores the CTA's max into CTA i's slot array
  (``st.shared::cluster``) and arrives on CTA i's mbarrier
  (``mbarrier.arrive.release.cluster``; set up at the start for ``split`` arrivals), and
  each CTA waits on its own (``try_wait.parity.acquire.cluster``): no cluster barrier
  after the loads;
* ``dynamic, mbarrier``: that, and a relaxed cluster arrive after the wait, waited on
  before ``ret`` (no CTA leaves while an arrival it sent may be on its way);
* ``dynamic, pushed`` (what the template renders, ``reduce.ptx.j2``'s
  ``cluster_allreduce``): the maxima pushed as above (a relaxed cluster arrive at the
  start, waited on after the loads, says every CTA has started), then one cluster barrier,
  and each CTA reads its own slots.

The other dynamic texts are edits of the rendered one; each that computes the true row max
is checked against its output (codes and scales, bit for bit) before it is timed. Writes
``cluster_cost.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from pathlib import Path
from typing import Any

for _path in (str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import harness  # noqa: E402  (benchmarks/ is on sys.path)
from cache_hints import Variants  # noqa: E402

from specdsl import render  # noqa: E402
from specdsl.kernels import Fp8Quant  # noqa: E402

SHAPES = [(tokens, hidden) for hidden in (4096, 18432) for tokens in (1, 16)]
SPLITS = (2, 8)
SETS = 4
CALLS = 200


def texts(hidden: int, split: int) -> dict[str, tuple[str, Any]]:
    """``{label: (PTX text, the request it was rendered from)}`` for one row and split."""
    static = Fp8Quant(hidden=hidden, scale_mode="static_param", split=split)
    plain = render(static)
    launch = plain.replace(".reqntid", f".reqnctapercluster {split}, 1, 1\n.reqntid", 1)
    barrier = "    barrier.cluster.arrive.release.aligned;\n" \
              "    barrier.cluster.wait.acquire.aligned;\n    ret;"
    dynamic = Fp8Quant(hidden=hidden, split=split)
    shipped = render(dynamic)
    return {"static, 1 CTA": (render(Fp8Quant(hidden=hidden, scale_mode="static_param")),
                              Fp8Quant(hidden=hidden, scale_mode="static_param")),
            "static, split": (plain, static), "+ cluster launch": (launch, static),
            "+ cluster barrier": (barrier.join(launch.rsplit("    ret;", 1)), static),
            "dynamic, 1 CTA": (render(Fp8Quant(hidden=hidden)), Fp8Quant(hidden=hidden)),
            "dynamic, CTA max only": (_edit(shipped, "", ""), dynamic),
            "dynamic, remote reads": (_edit(shipped, "", _remote_reads(split),
                                            "    barrier.cluster.wait.acquire.aligned;\n"),
                                      dynamic),
            "dynamic, mbarrier, no guard": (_edit(shipped, _MBARRIER_SETUP.format(split=split),
                                                  _mbarrier(split)), dynamic),
            "dynamic, mbarrier": (_edit(shipped, _MBARRIER_SETUP.format(split=split),
                                        _mbarrier(split) + _RELAXED_ARRIVE,
                                        "    barrier.cluster.wait.aligned;\n"), dynamic),
            "dynamic, pushed": (shipped, dynamic)}


#: The texts that compute the true row max: checked against the rendered kernel's output.
SAME_AS_SHIPPED = ("dynamic, remote reads", "dynamic, mbarrier, no guard", "dynamic, mbarrier")

_RELAXED_ARRIVE = "    barrier.cluster.arrive.relaxed.aligned;\n"
_MBARRIER_SETUP = ("    setp.eq.u32         %p3, %r1, 0;\n"
                   "    @%p3 mbarrier.init.shared::cta.b64 [cluster_bar], {split};\n"
                   "    fence.mbarrier_init.release.cluster;\n" + _RELAXED_ARRIVE)

_SETUP = re.compile(r"    barrier\.cluster\.arrive\.relaxed\.aligned; +// this CTA has started[^\n]*\n")
_REDUCTION = re.compile(r"    // cluster umax-reduce.*?// end of cluster umax-reduce\n", re.S)
_RET = "    ret;\n}"


def _edit(shipped: str, setup: str, reduction: str, before_ret: str = "") -> str:
    """The rendered dynamic split with its setup and cluster reduction replaced, and
    ``before_ret`` put before its ``ret`` (an mbarrier text also declares one)."""
    text = _SETUP.sub(lambda _: setup, shipped, count=1)
    text = _REDUCTION.sub(lambda _: reduction, text, count=1)
    if "cluster_bar" in setup:
        text = text.replace("    .shared .align 4 .b32 cluster_amax",
                            "    .shared .align 8 .b64 cluster_bar;\n"
                            "    .shared .align 4 .b32 cluster_amax", 1)
    return (before_ret + _RET).join(text.rsplit(_RET, 1)) if before_ret else text


def _remote_reads(split: int) -> str:
    """The cluster reduction before 2026-12-02 (its slot: entry 0 of the slot array)."""
    return f"""    setp.eq.u32         %p3, %r1, 0;
    @%p3 st.shared.b32  [cluster_amax], %f8;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    min.u32             %r11, %r2, {split - 1};
    mov.u32             %r10, cluster_amax;
    mapa.shared::cluster.u32 %r10, %r10, %r11;
    setp.lt.u32         %p3, %r2, {split};
    mov.b32             %f8, 0f00000000;
    @%p3 ld.shared::cluster.b32 %f8, [%r10];
    redux.sync.max.u32  %f8, %f8, 0xffffffff;
    barrier.cluster.arrive.release.aligned;
"""


def _mbarrier(split: int) -> str:
    """The maxima pushed, each store followed by an arrival on the receiving CTA's mbarrier;
    each CTA waits on its own, then reads its slots."""
    return f"""    barrier.cluster.wait.aligned;
    setp.lt.u32         %p3, %r1, {split};
    min.u32             %r11, %r1, {split - 1};
    mov.u32             %r10, cluster_amax;
    mad.lo.u32          %r10, %r8, 4, %r10;
    mapa.shared::cluster.u32 %r10, %r10, %r11;
    @%p3 st.shared::cluster.b32 [%r10], %f8;
    mov.u32             %r10, cluster_bar;
    mapa.shared::cluster.u32 %r10, %r10, %r11;
    @%p3 mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r10];
CLUSTER_WAIT:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p3, [cluster_bar], 0;
    @!%p3 bra           CLUSTER_WAIT;
    setp.lt.u32         %p3, %r2, {split};
    min.u32             %r11, %r2, {split - 1};
    mov.u32             %r10, cluster_amax;
    mad.lo.u32          %r10, %r11, 4, %r10;
    mov.b32             %f8, 0f00000000;
    @%p3 ld.shared.b32  %f8, [%r10];
    redux.sync.max.u32  %f8, %f8, 0xffffffff;
"""


def check(torch: Any, launcher: Any, cases: dict, inputs: tuple) -> None:
    """Raise unless each of :data:`SAME_AS_SHIPPED` writes the rendered kernel's codes and
    scales bit for bit."""
    def run(label: str) -> tuple:
        spec, (grid, block) = cases[label]
        q, scale = torch.zeros_like(inputs[1]), torch.zeros_like(inputs[2])
        launcher.launch(spec, inputs[0], q, scale, grid=grid, block=block)
        torch.cuda.synchronize()
        return q.view(torch.uint8).cpu(), scale.cpu()

    want = run("dynamic, pushed")
    for label in SAME_AS_SHIPPED:
        got = run(label)
        if not (torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])):
            raise SystemExit(f"{label}: codes or scales differ from the rendered kernel's")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)

    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = Variants(out / "cluster_cost_ptx")
    launcher = harness.Launcher(torch)
    labels = list(texts(4096, 2))
    lines = ["| tokens x hidden | split | " + " | ".join(labels) + " |",
             "|---|---|" + "---:|" * len(labels)]
    for tokens, hidden in SHAPES:
        sets = [(torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda"),
                 torch.empty(tokens, hidden, dtype=torch.float8_e4m3fn, device="cuda"),
                 torch.full((tokens,), 0.05, dtype=torch.float32, device="cuda"))
                for _ in range(SETS)]
        for split in SPLITS:
            cases = {label: (variants(text), request.launch_dims(tokens))
                     for label, (text, request) in texts(hidden, split).items()}
            check(torch, launcher, cases, sets[0])
            times: dict[str, list[float]] = {label: [] for label in cases}
            for number in range(args.rounds):
                order = list(cases.items())
                for label, (spec, (grid, block)) in order if number % 2 == 0 else order[::-1]:
                    def call(i: int, spec: Any = spec, grid: Any = grid, block: Any = block) -> None:
                        launcher.launch(spec, *sets[i], grid=grid, block=block)

                    times[label].append(harness.graph_seconds(torch, call, SETS, CALLS) * 1e6)
            cells = " | ".join(f"{statistics.median(t):.2f}" for t in times.values())
            lines.append(f"| {tokens} x {hidden} | {split} | {cells} |")
            print(lines[-1], flush=True)
    (out / "cluster_cost.md").write_text(
        f"Device: {torch.cuda.get_device_name()}; CUDA-graph replay, us a launch, median of "
        f"{args.rounds} rounds\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
