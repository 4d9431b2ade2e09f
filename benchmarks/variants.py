"""Variant experiments: the same kernel at several baked or launch settings, in one call.

Run on the GPU machine from the repository root::

    python3 benchmarks/variants.py softmax-block rmsnorm-block silu-small [--compile silu-small] [--out DIR]
    python3 benchmarks/variants.py copy-rate --rounds 2 --peers --out $OUT   # issue 15's candidates

Each experiment is a list of :class:`harness.BenchCase` built with non-default fields
(``block``, ``unroll``); they are checked and timed exactly as ``benchmarks/kernels.py``
checks and times its cases (``harness.measure_case``: the float64 reference first, then
device events, median, rotated inputs larger than L2, a same-size copy beside each). ``--compile`` adds torch.compile to the named experiments. The notes in
``docs/kernels/*.md`` cite the experiments by name. ``floor`` times a launch that does
almost nothing (VectorAdd of 32 f32): the fixed cost every row above includes.

Shapes of 256 tokens or fewer are also timed by CUDA-graph replay (the "graph us" column:
the kernel without the launch's fixed cost). ``--peers`` adds Liger-Kernel's time to the
rows of the default request (no candidate fields in the shape label). ``--rounds N`` runs
the experiments' cases N times, every other round in reverse order, so that a drift of the
machine over the run shows as a difference between rounds rather than between candidates.
``variants.md`` is written again after every row, so a run cut short keeps what it measured.
An experiment may also time an edit of a request's PTX text (``_edited``: ``quant-rcp``),
checked against the float64 reference as the request is, its row naming the edit after the
shape.

``copy-rate`` (issue 15, section 2): each candidate of RMSNorm, RMSNorm+residual, Softmax and
RoPE against the default request (the first row of each shape), bf16, at 16384 tokens x 4096
and 8192 and at 16 tokens: the tuning fields ``rows_per_cta``, ``min_ctas_per_sm`` and
``streaming_stores`` (RMSNorm), ``rows_per_cta``, ``min_ctas_per_sm`` and ``block`` (Softmax),
``block`` and ``pair_heads`` (RoPE). Switching a default to the winner is one line: the
``ROWS_PER_CTA`` constants of ``specdsl/kernels/rmsnorm.py`` and ``_softmax_layout.py``, a field's
``baked(...)`` default, or RoPE's ``block`` launch default.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _path in (str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import attrs  # noqa: E402
import cases_fused  # noqa: E402  (benchmarks/ is on sys.path)
import cases_norm  # noqa: E402
import cases_pointwise  # noqa: E402
import numpy as np  # noqa: E402
from harness import (  # noqa: E402
    BenchCase,
    Launcher,
    copy_bandwidth,
    events_and_graph,
    host,
    implementations,
    measure_case,
)

from specdsl import render  # noqa: E402
from specdsl.kernels import Fp8Quant, RMSNorm, SiluMulQuant, Softmax  # noqa: E402
from specdsl.kernels._checks import takes  # noqa: E402


def _ctas_candidates(kernel: type, **fields: Any) -> list[dict]:
    """The request ``kernel(**fields)`` as ``{}`` first, then ``min_ctas_per_sm`` at every
    other count its block can take from ``1024 // block`` (None) up to 2048 threads an SM:
    each CTA count once, whatever the default picks (RMSNorm's TWO_VECTOR_CTAS, Softmax's
    MORE_CTAS), so a sweep rerun after a default changed still times ``1024 // block``."""
    spec = kernel(**fields)
    counts = (None, *range(1024 // spec.block + 1, 2048 // spec.block + 1))
    return [{}] + [{"min_ctas_per_sm": ctas} for ctas in counts if ctas != spec.min_ctas_per_sm]


class _Swapped:
    """A launcher that launches ``spec`` whatever request it is handed: a case's own
    ``run_specdsl`` then runs an edited PTX text with the case's arguments and geometry."""

    def __init__(self, launcher: Any, spec: Any) -> None:
        self.launcher, self.spec = launcher, spec

    def launch(self, spec: Any, *args: Any, grid: tuple, block: tuple) -> None:
        self.launcher.launch(self.spec, *args, grid=grid, block=block)


@functools.cache
def _variants() -> Any:
    """The one :class:`cache_hints.Variants` of every edit: one spec class, so equal texts
    are equal requests."""
    from cache_hints import Variants

    return Variants(Path(tempfile.gettempdir()) / "specdsl-variants-ptx")


def _edited(case: BenchCase, label: str, edit: Callable[[str], str]) -> BenchCase:
    """``case`` with its request's PTX text edited (``edit``; :class:`cache_hints.Variants`
    makes the text a request of its own), ``label`` after the shape; the row's request is
    the one the edit started from. The case's float64 check still applies, so an edit
    that moves the output beyond the tolerance is reported, not timed."""
    shipped = render(case.spec)
    text = edit(shipped)
    if text == shipped:
        raise ValueError(f"{label}: the edit left {case.spec!r}'s PTX as it was")
    variant = _variants()(text)
    return attrs.evolve(case, detail=f"{case.detail} {label}",
                        run_specdsl=lambda launcher, inputs: case.run_specdsl(
                            _Swapped(launcher, variant), inputs))


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
                      expected=expected, tolerance=1e-6, spec=spec, outputs=(2,))]


#: issue 15's candidates: the fields each (kernel, width) tries besides its default ({}).
#: min_ctas_per_sm is absolute: 6 CTAs of 256 threads (hidden 4096) caps ptxas at 40
#: registers, 8 at 32; 3 of 512 (hidden 8192) at 40.
COPY_RATE_CANDIDATES: dict[tuple[str, int], list[dict]] = {
    ("RMSNorm", 4096): [{}, {"rows_per_cta": 2}, {"streaming_stores": True},
                        {"rows_per_cta": 2, "streaming_stores": True}],
    ("RMSNorm", 8192): [{}, {"rows_per_cta": 2}, {"streaming_stores": True}],
    ("RMSNorm+residual", 4096): [{}, {"min_ctas_per_sm": 6}, {"min_ctas_per_sm": 8},
                                 {"rows_per_cta": 2}, {"rows_per_cta": 2, "min_ctas_per_sm": 5},
                                 {"streaming_stores": True}],
    ("RMSNorm+residual", 8192): [{}, {"min_ctas_per_sm": 3}, {"rows_per_cta": 2},
                                 {"streaming_stores": True}],
    ("Softmax", 4096): [{}, {"rows_per_cta": 2}, {"rows_per_cta": 4}, {"min_ctas_per_sm": 8}],
    ("Softmax", 8192): [{}, {"rows_per_cta": 2}, {"min_ctas_per_sm": 6}],
    # RoPE's default is 128 threads, one head row a thread (pair_heads=False)
    ("RoPE", 4096): [{}, {"block": 64}, {"block": 256}, {"pair_heads": True},
                     {"pair_heads": True, "block": 64}],
    ("RoPE", 8192): [{}, {"block": 64}, {"pair_heads": True}],
}
#: At 16 tokens (CUDA-graph replay), width 4096: the latency-bound candidates.
COPY_RATE_SMALL: dict[str, list[dict]] = {
    "RMSNorm": [{}, {"rows_per_cta": 2}],
    "RMSNorm+residual": [{}, {"rows_per_cta": 2}, {"min_ctas_per_sm": 8}],
    "Softmax": [{}, {"rows_per_cta": 2}, {"block": 128}, {"block": 512}],
    "RoPE": [{}, {"block": 64}, {"pair_heads": True}, {"pair_heads": True, "block": 64}],
}


#: (dtype, hidden, tokens, other fields): RMSNormQuant rows of more than 256 threads' 4
#: vectors. Where some 256 to 320 threads hold the row in whole sweeps of 5 to 8 at 3 or
#: more CTAs an SM (the default since 2026-12-01), the other fields are the geometry of
#: before (4 or 5 vectors a thread, 2 or 3 CTAs of 320 to 512 threads); the last five
#: keep theirs and time the candidate not taken: 4.5 vectors a thread (9216), or 8 at 2
#: CTAs an SM (24576, 28672, f32 12288), and 288 threads x 3 at 11520, the group mode's
#: default, which the dynamic and static scales do not take (the block of before is theirs).
QUANT_LONG_ROWS = [
    ("bf16", 10240, 16384, {"block": 320, "min_ctas_per_sm": 3}),
    ("bf16", 12288, 16384, {"block": 384, "min_ctas_per_sm": 3}),
    ("bf16", 14336, 16384, {"block": 448, "min_ctas_per_sm": 2}),
    ("bf16", 16384, 16384, {"block": 512, "min_ctas_per_sm": 2}),
    ("f16", 16384, 16384, {"block": 512, "min_ctas_per_sm": 2}),
    ("bf16", 18432, 8192, {"block": 480, "min_ctas_per_sm": 2}),
    ("bf16", 20480, 8192, {"block": 512, "min_ctas_per_sm": 2}),
    ("f32", 5120, 16384, {"block": 320, "min_ctas_per_sm": 3}),
    ("f32", 6144, 16384, {"block": 384, "min_ctas_per_sm": 3}),
    ("f32", 7168, 16384, {"block": 448, "min_ctas_per_sm": 2}),
    ("f32", 8192, 16384, {"block": 512, "min_ctas_per_sm": 2}),
    ("f32", 9216, 8192, {"block": 480, "min_ctas_per_sm": 2}),
    ("f32", 10240, 8192, {"block": 512, "min_ctas_per_sm": 2}),
    # widths between the multiples of 2048: 288 or 320 threads at 5 to 7
    ("bf16", 11520, 16384, {"block": 384, "min_ctas_per_sm": 3}),
    ("bf16", 12800, 16384, {"block": 416, "min_ctas_per_sm": 2}),
    ("bf16", 13824, 16384, {"block": 448, "min_ctas_per_sm": 2}),
    ("bf16", 15360, 16384, {"block": 480, "min_ctas_per_sm": 2}),
    ("f16", 15360, 16384, {"block": 480, "min_ctas_per_sm": 2}),
    ("bf16", 16128, 16384, {"block": 512, "min_ctas_per_sm": 2}),
    ("bf16", 17920, 16384, {"block": 448, "min_ctas_per_sm": 2}),
    ("f32", 6400, 16384, {"block": 416, "min_ctas_per_sm": 2}),
    ("bf16", 9216, 16384, {"block": 256, "min_ctas_per_sm": 4}),
    ("bf16", 24576, 8192, {"block": 384, "min_ctas_per_sm": 2}),
    ("bf16", 28672, 8192, {"block": 448, "min_ctas_per_sm": 2}),
    ("f32", 12288, 8192, {"block": 384, "min_ctas_per_sm": 2}),
    ("bf16", 11520, 16384, {"block": 288, "min_ctas_per_sm": 3}),
]

#: (dtype, hidden) of QUANT_LONG_ROWS where the long rows' rule lost in the dynamic or static
#: mode while the group mode gained (``quant-long-rows``, 2026-12-01: bf16 11520 dynamic
#: 0.975x and static 0.977x, bf16 12288 static 0.988x, f32 static 0.980x to 0.998x). Three
#: rounds of ``quant-mode-block`` confirmed only 11520 (1.021x and 1.026x for the block of
#: before), whose dynamic and static scales keep that block since.
QUANT_MODE_LOSSES = [("bf16", 11520), ("bf16", 12288), ("f32", 5120), ("f32", 6144),
                     ("f32", 8192), ("f32", 10240)]

#: (dtype, hidden, other fields): RMSNorm's rows of 9216 to 15360. The packed rows (9992 to
#: 12288 f16/bf16, ``rmsnorm.packed_row_block``; 4 vectors a thread at 3 CTAs an SM, the
#: default since 2026-12-01) beside their block of before (448 to 512 threads at 3); the
#: others beside the candidates not taken: the same geometry for rows given 384 or 416
#: threads, for f32 and for rows at 4 vectors, and RMSNormQuant's long-row geometry (256
#: threads x 4 CTAs, whole sweeps of 5 to 7). Each is timed with and without the residual
#: (which keeps the general rule), where it differs from that mode's default.
RMSNORM_LONG_ROWS = [
    ("bf16", 9216, [{"block": 288, "min_ctas_per_sm": 3}]),
    ("bf16", 9728, [{"block": 320, "min_ctas_per_sm": 3}]),
    ("bf16", 9992, [{"block": 448}, {"block": 320, "min_ctas_per_sm": 3}]),
    ("bf16", 10240, [{"block": 448}, {"block": 320, "min_ctas_per_sm": 3},
                     {"block": 256, "min_ctas_per_sm": 4}]),
    ("bf16", 10752, [{"block": 448}, {"block": 352, "min_ctas_per_sm": 3}]),
    ("bf16", 11264, [{"block": 480}, {"block": 352, "min_ctas_per_sm": 3}]),
    ("bf16", 11776, [{"block": 512}, {"block": 384, "min_ctas_per_sm": 3}]),
    ("bf16", 12288, [{"block": 512}, {"block": 384, "min_ctas_per_sm": 3},
                     {"block": 256, "min_ctas_per_sm": 4}]),
    ("f16", 12288, [{"block": 512}, {"block": 384, "min_ctas_per_sm": 3}]),
    ("f32", 5120, [{"block": 320, "min_ctas_per_sm": 3}]),
    ("f32", 6144, [{"block": 384, "min_ctas_per_sm": 3}]),
    ("bf16", 14336, [{"block": 256, "min_ctas_per_sm": 4}]),
    ("bf16", 15360, [{"block": 320, "min_ctas_per_sm": 3}]),
]


def rmsnorm_long_rows(torch: Any) -> list[BenchCase]:
    """:data:`RMSNORM_LONG_ROWS`: per row and residual mode, the default request, then each
    other request (one that is the default in that mode is timed once)."""
    found = []
    for dtype, hidden, others in RMSNORM_LONG_ROWS:
        for fused in (False, True):
            def request(**fields: Any) -> RMSNorm:
                return RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused, **fields)
            found += [cases_norm._rmsnorm(torch, 16384, hidden, fused, dtype, **fields)
                      for fields in ({}, *others) if not fields or request(**fields) != request()]
    return found

def silu_quant_split_wide(torch: Any) -> list[BenchCase]:
    """SiluMulQuant's static and group scales at 1 to 32 tokens, split 8 to 144 ways (each
    split the request takes that keeps at most 264 CTAs, two an SM), beside the default."""
    found = []
    for d in (14336, 18432):
        for mode in ("static", "group"):
            for tokens in (1, 2, 4, 8, 16, 32):
                found.append(cases_fused._silu_mul_quant(torch, tokens, d, mode))
                for split in (8, 12, 16, 18, 24, 28, 32, 36, 48, 56, 64, 72, 112, 144):
                    if tokens * split <= 264 and takes(SiluMulQuant, d=d, scale_mode=mode,
                                                        split=split):
                        found.append(cases_fused._silu_mul_quant(torch, tokens, d, mode,
                                                                 split=split))
    return found


def _candidate(torch: Any, kernel: str, tokens: int, width: int, fields: dict) -> BenchCase:
    """The benchmark case of ``kernel`` at ``tokens`` x ``width`` with candidate ``fields``."""
    if kernel == "Softmax":
        return cases_norm._softmax(torch, tokens, width, **fields)
    if kernel == "RoPE":
        return cases_pointwise._rope(torch, tokens, width, **fields)
    return cases_norm._rmsnorm(torch, tokens, width, kernel == "RMSNorm+residual", **fields)


def copy_rate(torch: Any) -> list[BenchCase]:
    """issue 15's sweep: per kernel and shape, the default request first, then each candidate."""
    found = [_candidate(torch, kernel, 16384, width, fields)
             for (kernel, width), candidates in COPY_RATE_CANDIDATES.items()
             for fields in candidates]
    found += [_candidate(torch, kernel, 16, 4096, fields)
              for kernel, candidates in COPY_RATE_SMALL.items() for fields in candidates]
    return found


EXPERIMENTS: dict[str, Callable[[Any], list[BenchCase]]] = {
    "copy-rate": copy_rate,
    "floor": _floor,
    # threads per CTA (and so vectors per thread) of the register-resident Softmax rows
    "softmax-block": lambda torch: [
        cases_norm._softmax(torch, 16384, cols, block=block)
        for cols, blocks in ((4096, (128, 256, 512)), (8192, (128, 256, 512, 1024)))
        for block in blocks],
    "rmsnorm-block": lambda torch: [
        cases_norm._rmsnorm(torch, 16384, hidden, False, block=block)
        for hidden in (4096, 8192) for block in (128, 256, 512)],
    # RMSNormQuant's CTA size (vectors per thread), beside RMSNorm of the same rows
    "quant-block": lambda torch: [
        cases_fused._rmsnorm_quant(torch, 16384, hidden, False, mode, block=block)
        for hidden, blocks in ((4096, (128, 256, 512)), (7168, (128, 224, 448, 896)),
                               (8192, (128, 256, 512)))
        for mode in ("dynamic", "static") for block in blocks] + [
        cases_norm._rmsnorm(torch, 16384, hidden, False) for hidden in (4096, 7168)],
    # the rows QUANT_MODE_LOSSES names, dynamic and static scales: the default against the
    # geometry of before, alone (for more rounds than quant-long-rows takes)
    "quant-mode-block": lambda torch: [
        cases_fused._rmsnorm_quant(torch, tokens, hidden, False, mode, dtype, **fields)
        for dtype, hidden, tokens, other in QUANT_LONG_ROWS
        if (dtype, hidden) in QUANT_MODE_LOSSES
        for mode in ("dynamic", "static") for fields in ({}, other)],
    # RMSNormQuant's rows of more than 256 threads' 4 vectors (QUANT_LONG_ROWS): the
    # default against the geometry of before or the candidate not taken
    "quant-long-rows": lambda torch: [
        cases_fused._rmsnorm_quant(torch, tokens, hidden, False, mode, dtype, **fields)
        for dtype, hidden, tokens, other in QUANT_LONG_ROWS
        for mode in cases_fused.MODES for fields in (other, {})] + [
        # the same geometry for RMSNorm (with the residual: twice the bytes a row)
        cases_norm._rmsnorm(torch, 16384, hidden, fused, **fields)
        for hidden, fused in ((12288, False), (16384, False), (16384, True))
        for fields in ({}, {"block": 256, "min_ctas_per_sm": 4})] + [
        cases_fused._rmsnorm_quant(torch, 16384, 16384, True, "dynamic", **fields)
        for fields in ({}, {"block": 256, "min_ctas_per_sm": 4})],
    # Softmax's rows of 9216 to 16384 (256 threads at 4.5 to 8 vectors by default) against
    # 4 vectors a thread on more threads, RMSNorm's packed rows' geometry
    "softmax-long-rows": lambda torch: [
        cases_norm._softmax(torch, 16384, cols, **fields)
        for cols, blocks in ((9216, (288,)), (10240, (320,)), (12288, (384,)),
                             (14336, (448,)), (16384, (512,)))
        for fields in ({}, *({"block": block} for block in blocks),
                       # 3 CTAs an SM, up to 384 threads, where the default 1024 // block
                       # is not 3 already (the same PTX would be timed twice)
                       *({"block": block, "min_ctas_per_sm": 3} for block in blocks
                         if block <= 384 and 1024 // block != 3))],
    # RMSNorm's rows of 9216 to 15360 (RMSNORM_LONG_ROWS): the packed rows' default
    "rmsnorm-long-rows": rmsnorm_long_rows,
    # the packed rows' default requests, for --peers and --compile, and with l2_evict_last
    "rmsnorm-packed": lambda torch: [
        cases_norm._rmsnorm(torch, 16384, hidden, False, dtype, **fields)
        for dtype, hidden in (("bf16", 9992), ("bf16", 10240), ("bf16", 11264),
                              ("bf16", 12288), ("f16", 12288))
        for fields in ({}, {"l2_evict_last": True})],
    # x kept in L2 (l2_evict_last), against the default and (with --peers, --compile) Liger
    # and torch.compile (whose RMSNorm loads x under the same policy); at 8192 the field's
    # default takes 4 CTAs an SM, and min_ctas_per_sm=None is the policy alone (2)
    "evict-last": lambda torch: [
        cases_norm._rmsnorm(torch, 16384, hidden, False, **fields)
        for hidden in (4096, 8192, 10240, 12288)
        for fields in ({}, {"l2_evict_last": True},
                       *([{"l2_evict_last": True, "min_ctas_per_sm": None}]
                         if hidden == 8192 else []))] + [
        cases_norm._softmax(torch, 16384, cols, **fields)
        for cols in (4096, 8192, 12288, 16384) for fields in ({}, {"l2_evict_last": True})],
    # rows of 2 vectors a thread (256 to 512 threads) at every CTA count an SM from
    # 1024 // block up to 2048 threads, with and without l2_evict_last
    "two-vector-ctas": lambda torch: [
        cases_norm._rmsnorm(torch, 16384, hidden, False, dtype, **fields, **policy)
        for dtype, hidden in (*(("bf16", h) for h in range(4096, 8193, 512)),
                              ("f16", 8192), ("f32", 2560), ("f32", 3584))
        for policy in ({}, {"l2_evict_last": True})
        for fields in _ctas_candidates(RMSNorm, hidden=hidden, dtype=dtype, **policy)],
    # Softmax's rows of the same widths at every CTA count an SM up to 2048 threads
    "softmax-ctas": lambda torch: [
        cases_norm._softmax(torch, 16384, cols, **fields)
        for cols in range(4096, 8193, 512)
        for fields in _ctas_candidates(Softmax, cols=cols)],
    # the same with x kept in L2 (l2_evict_last): whether Softmax's CTA counts should read
    # the field, as RMSNorm's do at 8192 (KEPT_TWO_VECTOR_CTAS)
    "softmax-kept-ctas": lambda torch: [
        cases_norm._softmax(torch, 16384, cols, l2_evict_last=True, **fields)
        for cols in range(4096, 8193, 512)
        for fields in _ctas_candidates(Softmax, cols=cols, l2_evict_last=True)],
    # the rows softmax.MORE_CTAS gives more CTAs an SM, against the 1024 // block of before
    # (with --peers, --compile: Liger and torch.compile)
    "softmax-more-ctas": lambda torch: [
        cases_norm._softmax(torch, 16384, cols, **fields)
        for cols in (4096, 5120, 5632) for fields in ({}, {"min_ctas_per_sm": None})],
    # the rows TWO_VECTOR_CTAS gives more CTAs an SM, against the 1024 // block of before
    # (with --peers, --compile: Liger and torch.compile)
    "two-vector-rows": lambda torch: [
        cases_norm._rmsnorm(torch, 16384, hidden, False, dtype, **fields)
        for dtype in ("bf16", "f16") for hidden in (5120, 5632, 6656, 7168, 7680)
        for fields in ({}, {"min_ctas_per_sm": None})],
    # Fp8Quant's CTA size (its dynamic scale is a CTA max, as RMSNormQuant's is)
    "fp8-block": lambda torch: [
        cases_pointwise._fp8_quant(torch, 16384, hidden, block=block)
        for hidden in (4096, 8192) for block in (128, 256, 512)],
    # the fused residual's CTA size, RMSNorm's and RMSNormQuant's
    "residual-block": lambda torch: [
        cases_norm._rmsnorm(torch, 16384, hidden, True, block=block)
        for hidden in (4096, 8192) for block in (128, 256, 512)] + [
        cases_fused._rmsnorm_quant(torch, 16384, hidden, True, "dynamic", block=block)
        for hidden, blocks in ((4096, (128, 256)), (7168, (128, 448))) for block in blocks],
    # rows at any phase (window.ptx.j2): CTA sizes of the odd lengths, beside the aligned ones
    "odd-block": lambda torch: [
        cases_norm._rmsnorm(torch, 16384, hidden, False, block=block)
        for hidden, blocks in ((4096, (256,)), (4097, (256, 288, 512, 544))) for block in blocks] + [
        cases_norm._softmax(torch, 16384, cols, block=block)
        for cols, blocks in ((4096, (256,)), (4097, (192, 256)), (50264, (800, 928, 1024)),
                             (50257, (800, 928, 1024))) for block in blocks] + [
        cases_norm._softmax(torch, 16384, 4097, **fields)
        for fields in ({"block": 288}, {"block": 288, "min_ctas_per_sm": 7},
                       {"block": 192, "min_ctas_per_sm": 8})] + [
        cases_pointwise._fp8_quant(torch, 16384, hidden, block=block)
        for hidden, blocks in ((4096, (256,)), (4097, (256, 288))) for block in blocks],
    # rows of 5 to 8 vectors a thread in registers (hidden 24576 to 65536 bf16), which spilled
    "wide-rows": lambda torch: [
        cases_norm._rmsnorm(torch, 4096, hidden, fused)
        for hidden in (25600, 32768, 65536) for fused in (False, True)],
    # the latency-bound decode shapes: CTA size and vectors per thread
    "silu-small": lambda torch: [
        cases_pointwise._silu_mul(torch, tokens, 4096, unroll=unroll, block=block)
        for tokens in (1, 16) for unroll, block in ((1, 32), (1, 64), (1, 128), (2, 64), (1, 256))],
    # chunked rows (two passes through one CTA) and the longest register-resident ones:
    # CTA size, i.e. CTAs an SM holds to cover one another's gaps between chunks
    "long-rows": lambda torch: [
        cases_norm._softmax(torch, 4096, cols, block=block)
        for cols, blocks in ((131072, (256, 512, 1024)), (32768, (256, 512, 1024)))
        for block in blocks] + [
        cases_norm._rmsnorm(torch, 4096, 131072, fused, block=block)
        for fused in (False, True) for block in (256, 512, 1024)] + [
        cases_norm._softmax(torch, 4096, 131072, split=split, block=block)
        for split, blocks in ((2, (1024,)), (4, (512, 1024)), (8, (256, 512, 1024)))
        for block in blocks],
    # 256 tokens, where Liger and torch.compile lead by graph replay (Softmax, the residual,
    # SiluMul at 8192): 256 CTAs on 132 SMs, so a row's latency, not the bytes, sets the
    # time; more threads a row shorten each thread's share of it. Beside them the L2
    # policy that keeps x (l2_evict_last), which put specdsl level with torch.compile at
    # 16384 x 7168 to 8192
    "rows-256": lambda torch: [  # the exponentials computed twice, as first timed
        cases_norm._softmax(torch, 256, cols, keep_exponentials=False, **fields)
        for cols, blocks in ((4096, (128, 512, 1024)), (8192, (512, 1024)))
        for fields in ({}, *({"block": block} for block in blocks),
                       {"l2_evict_last": True})] + [
        cases_norm._rmsnorm(torch, 256, 8192, fused, **fields)
        for fused in (False, True)
        for fields in ({}, {"block": 256}, {"block": 512}, {"block": 1024},
                       {"l2_evict_last": True})] + [
        cases_pointwise._silu_mul(torch, 256, 8192, **fields)
        for fields in ({}, {"block": 64}, {"block": 256}, {"block": 512},
                       {"unroll": 2, "block": 256})],
    # SiluMul at 256 tokens in Liger's geometry (one 512-thread CTA a row, two vectors of each
    # half a thread) and between it and the default (one vector a thread, 128 threads)
    "silu-256": lambda torch: [
        cases_pointwise._silu_mul(torch, 256, 8192, **fields)
        for fields in ({}, {"unroll": 2, "block": 512}, {"unroll": 2, "block": 128},
                       {"unroll": 4, "block": 256}, {"unroll": 1, "block": 1024})],
    # each exponential kept from the sum to the store (one ex2 an element, not two) against
    # the default: few rows, where the SFU sets the time, and many, where it must not (cols
    # 12288 and 32768 keep too many for their default blocks' registers)
    "softmax-exps": lambda torch: [
        cases_norm._softmax(torch, tokens, cols, keep_exponentials=keep)
        for tokens, widths in ((256, (4096, 8192)), (16384, (4096, 5120, 6144, 8192)))
        for cols in widths for keep in (False, True)],
    # where keeping the exponentials stops paying: rows from half an H200's SMs to 16 a SM
    # (suggested_keep_exponentials), and f16 and f32 rows at and near its limit
    "softmax-kept-rows": lambda torch: [
        cases_norm._softmax(torch, tokens, cols, keep_exponentials=keep)
        for cols in (2048, 4096, 6144, 8192) for tokens in (64, 132, 264, 528, 1056, 2112)
        for keep in (False, True)] + [
        cases_norm._softmax(torch, tokens, cols, dtype, keep_exponentials=keep)
        for dtype, widths in (("f16", (8192,)), ("f32", (4096, 16384)))
        for cols in widths for tokens in (256, 1056, 2112) for keep in (False, True)],
    # SiluMulQuant at few tokens: one CTA a token against `split` CTAs sharing it (a
    # cluster for the dynamic scale), each mode (issue 15: torch.compile's static scale
    # was ahead at 16 tokens)
    "silu-quant-split": lambda torch: [
        cases_fused._silu_mul_quant(torch, tokens, d, mode, split=split)
        for d in (14336, 18432) for tokens in (1, 16, 64, 128, 256)
        for mode in cases_fused.MODES for split in (1, 2, 4, 8)] + [
        cases_fused._silu_mul_quant(torch, 16, d, mode, split=8, block=block)
        for d, blocks in ((14336, (128, 256)), (18432, (160, 320)))
        for mode in cases_fused.MODES for block in blocks],
    # the split's block: a part one vector a thread (the default up to 512 vectors) or two,
    # at the splits suggested_split gives, beside the unsplit request (torch.compile too)
    "silu-quant-split-block": lambda torch: [
        cases_fused._silu_mul_quant(torch, tokens, d, mode, **fields)
        for d in (14336, 18432) for mode in cases_fused.MODES
        for tokens, fields in ((16, {"split": 1}), (16, {}), (16, {"split": 4}),
                               (16, {"split": 4, "block": {14336: 224, 18432: 576}[d]}),
                               (32, {"split": 1}), (32, {}), (64, {"split": 1}), (64, {}))],
    # the static scale's reciprocal after the loads of x (SiluMulQuant) and the scale read
    # at the start (RMSNormQuant): the requests the torch ops make, torch.compile beside
    "quant-static-small": lambda torch: [
        cases_fused._silu_mul_quant(torch, tokens, d, "static")
        for d in (14336, 18432) for tokens in (1, 16, 32, 64, 256)] + [
        cases_fused._rmsnorm_quant(torch, tokens, hidden, fused, "static")
        for fused in (False, True) for hidden in (4096, 8192) for tokens in (1, 16, 256)],
    # more than 8 CTAs a token for the scales that need no cluster (issue 15: torch.compile
    # ahead at 1 token of 18432 with the static scale, 1.46 against 1.22 us at split 8)
    "silu-quant-split-wide": silu_quant_split_wide,
    # suggested_split's rule for those scales (parts of 128 vectors within 4 CTAs an SM)
    # against 1 to 16 CTAs a token, 1 to 256 tokens
    "silu-quant-split-rule": lambda torch: [
        cases_fused._silu_mul_quant(torch, tokens, d, mode, **fields)
        for d in (4096, 14336, 18432) for mode in ("static", "group")
        for tokens in (1, 4, 16, 32, 64, 128, 256)
        for fields in ({}, *({"split": s} for s in (1, 2, 4, 8, 16) if tokens * s <= 528
                             and takes(SiluMulQuant, d=d, scale_mode=mode, split=s)))],
    # the same rule for Fp8Quant's static and group scales, against 1 to 16 CTAs a token
    "fp8-split-rule": lambda torch: [
        cases_fused._fp8_quant(torch, tokens, hidden, mode, **fields)
        for hidden in (4096, 7168, 18432) for mode in ("static", "group")
        for tokens in (1, 4, 16, 32, 64, 128, 256)
        for fields in ({}, *({"split": s} for s in (1, 2, 4, 8, 16) if tokens * s <= 528
                             and takes(Fp8Quant, hidden=hidden, split=s, scale_mode=(
                                 "static_param" if mode == "static" else mode))))],
    # SiluMulQuant's dynamic scale over a cluster of 1 to 8 CTAs a token, 1 to 32 tokens
    "silu-dynamic-split": lambda torch: [
        cases_fused._silu_mul_quant(torch, tokens, d, "dynamic", split=split)
        for d in (14336, 18432) for tokens in (1, 4, 16, 32) for split in (1, 2, 4, 8)],
    # Fp8Quant's dynamic scale over a cluster of 1 to 8 CTAs a token, 1 to 64 tokens
    "fp8-dynamic-split": lambda torch: [
        cases_fused._fp8_quant(torch, tokens, hidden, "dynamic", **fields)
        for hidden in (4096, 7168, 8192, 14336, 18432) for tokens in (1, 4, 16, 32, 64)
        for fields in ({}, *({"split": s} for s in (1, 2, 4, 8)
                             if takes(Fp8Quant, hidden=hidden, split=s)))],
    # the split rules' requests, as specdsl.torch makes them, beside torch.compile
    "split-defaults": lambda torch: [
        cases_fused._silu_mul_quant(torch, tokens, d, mode)
        for d in (14336, 18432) for mode in ("static", "group")
        for tokens in (1, 4, 16, 32, 64, 128)] + [
        cases_fused._fp8_quant(torch, tokens, hidden, mode)
        for hidden in (7168, 18432) for mode in ("static", "group")
        for tokens in (1, 4, 16, 32, 64, 128)],
    # few long rows: one CTA a row against a cluster of `split` CTAs sharing it
    "softmax-split": lambda torch: [
        cases_norm._softmax(torch, tokens, cols, split=split)
        for cols in (32768, 131072) for tokens in (1, 16, 256) for split in (1, 4, 8)] + [
        cases_norm._softmax(torch, tokens, 131072, split=8, block=1024) for tokens in (1, 16)],
    # the bounds of the cluster splits' rules, after the pushed reduction (2026-12-02):
    # SiluMulQuant's dynamic scale around 33 and 66 tokens (4 and 2 CTAs a token fill the
    # SMs there), Softmax's shorter rows and more rows than suggested_split splits
    "split-bounds": lambda torch: [
        cases_fused._silu_mul_quant(torch, tokens, d, "dynamic", split=split)
        for d in (4096, 11008, 14336, 18432, 28672)
        for tokens in (16, 24, 33, 34, 48, 56, 66, 67, 80, 96, 132)
        for split in (1, 2, 4, 8) if takes(SiluMulQuant, d=d, scale_mode="dynamic", split=split)
    ] + [
        cases_norm._softmax(torch, tokens, cols, split=split)
        for cols in (8192, 16384, 32768, 65536, 128256, 131072)
        for tokens in (1, 4, 16, 33, 48, 66, 80, 100, 132)
        for split in (1, 2, 4, 8) if takes(Softmax, cols=cols, split=split)],
    # SiluMulQuant's static scale at few tokens, where torch.compile led by 0.02 to 0.09 us:
    # the shipped reciprocal of the scale (rcp.rn.f32, IEEE, with its slow-path branch)
    # against an approximate one (rcp.approx.ftz.f32, as Inductor's division compiles)
    "quant-rcp": lambda torch: [
        case for d in (14336, 18432) for tokens in (1, 4, 16)
        for case in (cases_fused._silu_mul_quant(torch, tokens, d, "static"),
                     _edited(cases_fused._silu_mul_quant(torch, tokens, d, "static"),
                             "rcp.approx", lambda text: text.replace(
                                 "rcp.rn.f32          %inv", "rcp.approx.ftz.f32  %inv")))],
    # the same at 1 to 16 tokens and shorter rows (where a split starts to pay), and at the
    # row counts between the measured bounds
    "split-bounds-more": lambda torch: [
        cases_fused._silu_mul_quant(torch, tokens, d, "dynamic", split=split)
        for d in (2048, 4096, 5120, 7168, 8192, 11008, 14336) for tokens in (1, 4, 8, 16)
        for split in (1, 2, 4, 8) if takes(SiluMulQuant, d=d, scale_mode="dynamic", split=split)
    ] + [
        cases_fused._fp8_quant(torch, tokens, hidden, "dynamic", split=split)
        for hidden in (4096, 7168, 8192, 14336, 18432, 28672) for tokens in (1, 4, 16, 33, 48)
        for split in (1, 2, 4, 8) if takes(Fp8Quant, hidden=hidden, split=split)
    ] + [
        cases_norm._softmax(torch, tokens, cols, split=split)
        for cols in (32768, 65536, 131072) for tokens in (40, 56, 60, 72)
        for split in (1, 2, 4, 8) if takes(Softmax, cols=cols, split=split)],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiments", nargs="+", choices=sorted(EXPERIMENTS))
    parser.add_argument("--compile", default="",
                        help="comma-separated experiments to also time under torch.compile")
    parser.add_argument("--launches", type=int, default=50,
                        help="timed launches per case and implementation (default 50)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the cases this many times, every other round reversed")
    parser.add_argument("--peers", action="store_true",
                        help="also time Liger-Kernel on the default request's rows")
    parser.add_argument("--out", default=os.environ.get("OUT", "."),
                        help="folder for variants.md (default $OUT, else the working folder)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: expected at least 1")

    import torch

    torch.manual_seed(0)
    config = torch._dynamo.config  # one run_torch code object serves many shapes
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), 256))
    compiled_experiments = set(filter(None, args.compile.split(",")))
    launcher = Launcher(torch)
    copy = copy_bandwidth(torch)
    lines = [f"Device: {torch.cuda.get_device_name()}; 1 GiB copy {copy / 1e12:.2f} TB/s", "",
             "| round | experiment | kernel | shape | specdsl us | graph us | % copy | "
             "% same-size copy | same-size copy us (graph) | liger us (graph) | compile us (graph) "
             "| request |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    print(lines[0], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    chosen = [(name, case) for name in args.experiments for case in experiment_cases(name, torch)]
    for number in range(1, args.rounds + 1):
        for name, case in chosen if number % 2 else reversed(chosen):
            skip = None if name in compiled_experiments else "not asked: --compile"
            peers = args.peers and is_default(case)
            impls = implementations(torch, case, launcher, compile_skip=skip, peers=peers)
            impls = {k: v for k, v in impls.items() if k in ("specdsl", "compile", "liger")}
            record = measure_case(torch, case, impls, args.launches, graph=case.tokens <= 256)
            row = f"| {number} | {name} | {row_cells(record, copy)}"
            lines.append(row)
            print(row, flush=True)
            (Path(args.out) / "variants.md").write_text("\n".join(lines) + "\n")
    return 0


def experiment_cases(name: str, torch: Any) -> list[BenchCase]:
    """The cases of experiment ``name``, each request once: a candidate that a default has
    come to equal (RMSNormQuant 11520's ``block=384 min_ctas_per_sm=3``, the dynamic and
    static scales' default again) is the same PTX at the same shape, so only its first case
    is timed; its row's request says what ran."""
    found: dict[tuple, BenchCase] = {}
    for case in EXPERIMENTS[name](torch):
        what = case.series if case.spec is None else case.spec
        found.setdefault((case.kernel, case.tokens, case.detail, what), case)
    return list(found.values())


def is_default(case: BenchCase) -> bool:
    """True for a case of a kernel's default request (no fields named in its series)."""
    return "=" not in case.series.split(" ", 1)[1] if " " in case.series else True


def row_cells(record: dict, copy: float) -> str:
    """The table cells after the round and experiment: kernel, shape, the times (event and
    graph), % of the 1 GiB copy's rate and of a same-size copy, Liger's and compile's times
    (their graph replay in parentheses where the case took it), and the request timed (its
    baked fields, defaults resolved: the shape names only the fields the case gives)."""
    impls, same = record["impls"], record["copy"]

    def us(name: str, key: str = "event_us") -> str:
        entry = impls.get(name, {})
        return f"{entry[key]:.2f}" if key in entry else "-"

    shape = f"tokens={record['tokens']} {record['series']}{record['detail']}"
    mine = impls["specdsl"]
    if "event_us" not in mine:
        return (f"{record['kernel']} | {shape} | n/a: {mine.get('error')} | - | - | - | - | - "
                f"| - | {record.get('request', '')} |")
    seconds = mine["event_us"] * 1e-6
    return (f"{record['kernel']} | {shape} | {mine['event_us']:.2f} | {us('specdsl', 'graph_us')} "
            f"| {record['bytes_moved'] / seconds / copy * 100:.1f} | "
            f"{same['event_us'] / mine['event_us'] * 100:.1f} | {events_and_graph(same)} | "
            f"{events_and_graph(impls.get('liger', {}))} | "
            f"{events_and_graph(impls.get('compile', {}))} | {record.get('request', '')} |")


if __name__ == "__main__":
    sys.exit(main())
