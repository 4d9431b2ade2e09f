"""The CTA and cluster reductions of every template, run in a model of the CTA
(tests/ptxsim.py): right for every block size each kernel accepts, with the extreme
value in every warp (or CTA) in turn, whatever order the warps run in."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ptxsim import SimError, check_cluster_protocol, run, segments, shared_arrays
from specdsl import DType, SpecError, render
from specdsl._templating.environment import environment
from specdsl.kernels import Fp8Quant, RMSNorm, SiluMulQuant, Softmax

BLOCKS = range(32, 1025, 32)
OPS = ("add", "max", "min", "umax")
EXTREME = {"add": 1000.0, "max": 1000.0, "min": -1000.0, "umax": 1000.0}

#: Kernels whose PTX reduces across a CTA (or a cluster), each over every block size.
REDUCING = {
    "rmsnorm": lambda block: RMSNorm(hidden=2048, block=block),
    "rmsnorm-f32-fused": lambda block: RMSNorm(hidden=1024, dtype="f32", fused_residual=True,
                                               block=block),
    "softmax": lambda block: Softmax(cols=4096, block=block),
    "softmax-negative-scale": lambda block: Softmax(cols=2000, scale=-0.5, dtype="f16",
                                                    block=block),
    "softmax-chunked": lambda block: Softmax(cols=131072, block=block),
    "softmax-split": lambda block: Softmax(cols=65536, split=4, block=block),
    "fp8quant": lambda block: Fp8Quant(hidden=2048, block=block),
    "silumulquant": lambda block: SiluMulQuant(d=4096, block=block),
    "silumulquant-split": lambda block: SiluMulQuant(d=14336, split=8, block=block),
    # odd rows (one element a vector), chunked where the block is small
    "rmsnorm-odd": lambda block: RMSNorm(hidden=2047, block=block),
    "softmax-odd": lambda block: Softmax(cols=4097, scale=-1.0, block=block),
    "fp8quant-odd": lambda block: Fp8Quant(hidden=2047, dtype="f32", block=block),
    # several rows a CTA: their sums (maxima) reduced side by side behind one barrier
    "rmsnorm-rows2": lambda block: RMSNorm(hidden=2048, rows_per_cta=2, block=block),
    "rmsnorm-fused-rows4": lambda block: RMSNorm(hidden=1000, dtype="f16", fused_residual=True,
                                                 rows_per_cta=4, block=block),
    "softmax-rows2": lambda block: Softmax(cols=4096, rows_per_cta=2, block=block),
    "softmax-rows4-odd": lambda block: Softmax(cols=2047, scale=-1.0, rows_per_cta=4,
                                               block=block),
}


def _cases(units: int, per_unit: int) -> list[tuple[int, int]]:
    """(unit, lane) of the extreme value in each case: every unit (warp or CTA), at lane
    0, the last lane and one between."""
    return [(u, lane) for u in range(units)
            for lane in sorted({0, per_unit - 1, (7 * u + 3) % per_unit})]


def _inputs(op: str, threads: int, cases: list[tuple[int, int]], per_unit: int, seed: int):
    """Per-thread values (small integers, so sums are exact) with one extreme per case."""
    rng = np.random.default_rng(seed)
    values = rng.integers(-8, 9, size=(len(cases), threads)).astype(np.float64)
    if op == "umax":   # values that are never negative (the largest |x| of a thread)
        values = np.abs(values)
    for i, (unit, lane) in enumerate(cases):
        values[i, unit * per_unit + lane] = EXTREME[op]
    return values


def _expected(op: str, values: np.ndarray) -> np.ndarray:
    return {"add": np.sum, "max": np.max, "min": np.min, "umax": np.max}[op](values, axis=1)


def _check_cta(facts: dict[str, str], lines: list[str], block: int, shared: dict[str, int],
               orders=("forward", "reverse")) -> None:
    """Run one marked CTA reduction for a CTA of `block` threads; every thread must end
    with the reduction of all threads' values (of each register, for several reduced
    side by side, each with its own values)."""
    warps = block // 32
    accs = facts["acc"].split(",")
    assert int(facts["count"]) == warps, f"reduction over {facts['count']} warps, CTA has {warps}"
    if warps > 1:
        assert shared.get(facts["smem"], 0) >= warps * len(accs), (
            f".shared {facts['smem']} holds {shared.get(facts['smem'])} entries, {warps} warps "
            f"x {len(accs)} values")
    op = facts["op"]
    cases = _cases(warps, 32)
    values = {acc: _inputs(op, block, cases[k:] + cases[:k], 32, seed=block + k)
              for k, acc in enumerate(accs)}
    thread = np.broadcast_to(np.arange(block), values[accs[0]].shape)
    for order in orders:
        registers = {**values, facts["lane"]: thread % 32, facts["warp"]: thread // 32}
        out = run(lines, ctas=1, threads=block, registers=registers, shared=shared, order=order)
        for acc in accs:
            np.testing.assert_array_equal(out[acc], np.repeat(
                _expected(op, values[acc])[:, None], block, axis=1),
                err_msg=f"{op} of {acc} over {warps} warps, {order} order")


@pytest.mark.parametrize("op", OPS)
def test_cta_allreduce_every_block_size(op):
    """reduce.ptx.j2's cta_allreduce, rendered for 1 to 32 warps, gives every thread the
    reduction of the whole CTA with the extreme in any warp and lane, in either warp order."""
    template = environment().from_string(
        '{% import "reduce.ptx.j2" as r %}'
        '{{ r.cta_allreduce(op, "%acc", "%tmp", "smem", warps, "%lane", "%warp", "%p", "%a") }}')
    for block in BLOCKS:
        ptx = template.render(op=op, warps=block // 32)
        [(facts, lines)] = segments(ptx)
        # reverse: later warps run first, so a load the barrier does not order fails
        orders = ("forward", "reverse") if block in (32, 96, 512, 1024) else ("reverse",)
        _check_cta(facts, lines, block, {"smem": block // 32}, orders)


@pytest.mark.parametrize("count", [2, 4])
def test_cta_allreduce_of_several_registers(count):
    """cta_allreduce of several registers (one barrier, a slice of the shared array each)
    gives every thread each register's own reduction, at 1 to 32 warps."""
    template = environment().from_string(
        '{% import "reduce.ptx.j2" as r %}'
        '{{ r.cta_allreduce("add", accs, "%tmp", "smem", warps, "%lane", "%warp", "%p", "%a") }}')
    accs = [f"%acc{2 * k}" for k in range(count)]
    for block in (32, 96, 256, 1024):
        ptx = template.render(accs=accs, warps=block // 32)
        assert ptx.count("bar.sync") == (block > 32)
        [(facts, lines)] = segments(ptx)
        assert facts["acc"] == ",".join(accs)
        _check_cta(facts, lines, block, {"smem": count * block // 32}, ("forward", "reverse"))


def test_model_catches_a_missing_barrier():
    """The model fails a reduction whose loads may run before the stores (no bar.sync)."""
    template = environment().from_string(
        '{% import "reduce.ptx.j2" as r %}'
        '{{ r.cta_allreduce("max", "%acc", "%tmp", "smem", 3, "%lane", "%warp", "%p", "%a") }}')
    [(facts, lines)] = segments(template.render())
    lines = [line for line in lines if "bar.sync" not in line]
    with pytest.raises(SimError, match="before any thread stored it"):
        _check_cta(facts, lines, 96, {"smem": 3}, orders=("reverse",))


def test_model_catches_too_few_warps_or_entries():
    """The model fails a reduction rendered for fewer warps than the CTA has (it misses
    the last warp's value) and one whose shared array is too small (it reads past it):
    the two faults of Fp8Quant's reduction before (block=96 and block=160)."""
    template = environment().from_string(
        '{% import "reduce.ptx.j2" as r %}'
        '{{ r.cta_allreduce("max", "%acc", "%tmp", "smem", 2, "%lane", "%warp", "%p", "%a") }}')
    [(facts, lines)] = segments(template.render())
    facts = dict(facts, count="3")  # claim 3 warps: the check runs a 96-thread CTA
    with pytest.raises(AssertionError, match="max of %acc over 3 warps"):
        _check_cta(facts, lines, 96, {"smem": 3}, orders=("forward",))
    template = environment().from_string(
        '{% import "reduce.ptx.j2" as r %}'
        '{{ r.cta_allreduce("max", "%acc", "%tmp", "smem", 5, "%lane", "%warp", "%p", "%a") }}')
    [(facts, lines)] = segments(template.render())
    with pytest.raises(SimError, match=r"outside \.shared smem\[4\]"):
        run(lines, ctas=1, threads=160, shared={"smem": 4}, registers={
            "%acc": np.zeros((1, 160)), "%lane": np.arange(160)[None] % 32,
            "%warp": np.arange(160)[None] // 32})


def _accepted(name: str) -> list[tuple[int, object]]:
    requests = []
    for block in BLOCKS:
        try:
            requests.append((block, REDUCING[name](block)))
        except SpecError:
            continue
    return requests


@pytest.mark.parametrize("name", REDUCING)
def test_kernel_reductions_every_accepted_block(name):
    """Each reducing kernel, at every block size its validator accepts: the PTX touches
    shared memory and barriers only inside the marked reductions, each reduces over
    block / 32 warps in an array that large, and runs right in the model."""
    accepted = _accepted(name)
    assert accepted, f"{name}: no block size accepted"
    for block, spec in accepted:
        ptx = render(spec)
        shared = shared_arrays(ptx)
        marked = segments(ptx) + segments(ptx, "cluster")
        inside = {line for _, lines in marked for line in lines}
        stray = [line for line in ptx.splitlines()
                 if re.search(r"\b(bar\.sync|ld\.shared|st\.shared|mapa)\b", line)
                 and line not in inside]
        assert not stray, f"{spec!r}: shared memory used outside a marked reduction: {stray}"
        found = segments(ptx)
        assert found, f"{spec!r}: no CTA reduction found"
        for facts, lines in found:
            # every size keeps its parameters; the model runs a spread of sizes in full
            if block in (32, 96, 160, 224, 288, 544, 992, 1024) or block == accepted[0][0]:
                _check_cta(facts, lines, block, shared, orders=("reverse",))
            else:
                assert int(facts["count"]) == block // 32
                assert block == 32 or shared[facts["smem"]] >= block // 32


#: The cluster reductions: (the request of `split` CTAs a row, the ops it reduces with).
CLUSTERS = {
    "softmax": (lambda split, op: Softmax(cols=8 * 64 * split, scale=-0.5 if op == "min" else 1.0,
                                          split=split, block=64), ("max", "min", "add")),
    "silumulquant": (lambda split, op: SiluMulQuant(d=8 * 64 * split, split=split, block=64),
                     ("umax",)),
    "fp8quant": (lambda split, op: Fp8Quant(hidden=8 * 64 * split, split=split, block=64),
                 ("umax",)),
}


@pytest.mark.parametrize("split", [2, 3, 8])
@pytest.mark.parametrize("kernel,op", [(k, op) for k, (_, ops) in CLUSTERS.items() for op in ops])
def test_cluster_reduction(kernel, split, op):
    """Softmax's, SiluMulQuant's and Fp8Quant's cluster reductions give every thread of
    every CTA the reduction of the CTAs' values, with the extreme in any CTA, in either
    order: each CTA's value pushed into every CTA's slots before one cluster barrier, in
    ptxsim.check_cluster_protocol's order."""
    spec = CLUSTERS[kernel][0](split, op)
    ptx = render(spec)
    found = [seg for seg in segments(ptx, "cluster") if seg[0]["op"] == op]
    assert len(found) == 1 and int(found[0][0]["count"]) == split
    facts, lines = found[0]
    assert check_cluster_protocol(ptx) == (2 if kernel == "softmax" else 1)
    for order in ("forward", "reverse"):
        out = _run_cluster(spec, ptx, facts, lines, op, split, order)
        np.testing.assert_array_equal(out, np.repeat(
            _expected(op, _cluster_inputs(op, split))[:, None], split * spec.block, 1))


def _cluster_inputs(op, split):
    return _inputs(op, split, _cases(split, 1), 1, seed=split)  # extreme in CTA k, case k


def _run_cluster(spec, ptx, facts, lines, op, split, order="forward"):
    """The model's result of one cluster reduction segment (``acc`` of every thread)."""
    threads = spec.block
    values = np.repeat(_cluster_inputs(op, split), threads, axis=1)  # equal within a CTA
    thread = np.broadcast_to(np.tile(np.arange(threads), split), values.shape)
    rank = np.broadcast_to(np.repeat(np.arange(split), threads), values.shape)
    out = run(lines, ctas=split, threads=threads, order=order, shared=shared_arrays(ptx),
              registers={facts["acc"]: values, facts["tid"]: thread,
                          facts["lane"]: thread % 32, facts["rank"]: rank})
    return out[facts["acc"]]


def test_cluster_model_catches_a_missing_barrier_or_push():
    """The model fails a cluster reduction that reads its slots before the barrier that
    makes the pushes visible, or whose slots no CTA pushed; the protocol check fails a
    reduction with its barrier, or the setup's arrive, left out."""
    spec = Fp8Quant(hidden=8 * 64 * 4, split=4, block=64)
    ptx = render(spec)
    facts, lines = segments(ptx, "cluster")[0]
    for dropped in ("barrier.cluster.wait.acquire", "st.shared::cluster"):
        with pytest.raises(SimError, match=r"reads cluster_amax of CTA 0 before any thread "
                                            r"stored it"):
            _run_cluster(spec, ptx, facts, [line for line in lines if dropped not in line],
                         "umax", 4)
    for dropped in ("barrier.cluster.wait.acquire", "barrier.cluster.arrive.relaxed"):
        with pytest.raises(SimError, match=r"cluster protocol: expected"):
            check_cluster_protocol("\n".join(line for line in ptx.splitlines()
                                             if dropped not in line))


# --- on the GPU: every accepted block size, the extreme value in each warp in turn -----

_DTYPES = ("bf16", "f16", "f32")


def _sweep_spec(kind: str, block: int):
    """The request the GPU sweep runs for `kind` at `block` threads: every thread holds
    one or two vectors (the second sweep guarded for the last 8), so every warp holds part
    of the row; the dtype turns with the block size (all three in the sweep)."""
    dtype = _DTYPES[(block // 32) % 3]
    lanes = 16 // {"bf16": 2, "f16": 2, "f32": 4}[dtype]
    slice_vectors = 2 * block - 8
    odd = lanes * slice_vectors + 1  # rows at every phase (a window), the second sweep guarded
    if kind == "rmsnorm-tail":
        return RMSNorm(hidden=odd, dtype=dtype, block=block)
    if kind == "softmax-tail":
        return Softmax(cols=odd, dtype=dtype, block=block)
    if kind == "fp8quant-tail":
        return Fp8Quant(hidden=odd, dtype=dtype, block=block)
    if kind == "rmsnorm":
        return RMSNorm(hidden=lanes * slice_vectors, dtype=dtype, block=block)
    if kind == "softmax":
        return Softmax(cols=lanes * slice_vectors, dtype=dtype, block=block)
    if kind == "softmax-chunked":  # 2 full chunks of 8 vectors a thread, then a partial one
        return Softmax(cols=lanes * (19 * block - 8), dtype=dtype, block=block)
    if kind == "softmax-split":
        return Softmax(cols=4 * lanes * slice_vectors, dtype=dtype, split=4, block=block)
    return Fp8Quant(hidden=lanes * slice_vectors, dtype=dtype, block=block)


def _extreme_rows(spec, cols: int, extreme: float, seed: int) -> np.ndarray:
    """Rows of N(0, 1), row r holding `extreme` (sign alternating for fp8) in the slice of
    warp r % warps (of CTA r // warps for a split row), at a lane, vector and element
    that turn with r; one more row without an extreme. Exact in the spec's dtype."""
    from specdsl.kernels.case import from_bits, to_bits

    split = getattr(spec, "split", 1)
    warps, lanes = spec.block // 32, spec.vector
    slice_vectors = cols // lanes // split
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((split * warps + 1, cols))
    for r in range(split * warps):
        cta, thread = r // warps, 32 * (r % warps) + (7 * r + 3) % 32
        sign = -1.0 if isinstance(spec, Fp8Quant) and r % 2 else 1.0
        if cols % lanes:  # a window (templates/window.ptx.j2): row r starts at its phase
            phase = r * cols % lanes
            owned = [j for j in range(cols) if (j + phase) // lanes % spec.block == thread]
            x[r, owned[r % len(owned)]] = sign * extreme
            continue
        owned = range(thread, slice_vectors, spec.block)  # vectors thread, thread + block, ...
        vector = cta * slice_vectors + owned[r % len(owned)]
        x[r, lanes * vector + r % lanes] = sign * extreme
    return from_bits(to_bits(x, spec.dtype), spec.dtype)


SWEEP = [(kind, block) for kind in ("rmsnorm", "softmax", "softmax-chunked", "softmax-split",
                                    "fp8quant", "rmsnorm-tail", "softmax-tail", "fp8quant-tail")
         for block in BLOCKS]


def test_sweep_requests_are_valid():
    """Every request of the GPU sweep is accepted and renders (all 32 block sizes of
    each reducing kernel)."""
    for kind, block in SWEEP:
        assert f".reqntid {block}" in render(_sweep_spec(kind, block))


@pytest.mark.parametrize("kind", ["rmsnorm", "softmax-chunked", "softmax-split", "fp8quant",
                                  "rmsnorm-tail", "softmax-tail", "fp8quant-tail"])
def test_sweep_rows_place_the_extreme_in_each_warp(kind):
    """Row r of the sweep holds its extreme in a vector that warp r % warps loads (of CTA
    r // warps for a split row)."""
    for block in (32, 96, 160, 1024):
        spec = _sweep_spec(kind, block)
        cols = getattr(spec, "cols", None) or spec.hidden
        x = _extreme_rows(spec, cols, 1000.0, seed=block)
        split, warps, lanes = getattr(spec, "split", 1), block // 32, spec.vector
        slice_vectors = cols // lanes // split
        for r in range(split * warps):
            vector = int(np.argmax(np.abs(x[r]))) // lanes
            cta, offset = divmod(vector, slice_vectors)
            assert (cta, offset % block // 32) == (r // warps, r % warps), (spec, r)


@pytest.mark.gpu
@pytest.mark.parametrize("kind,block", SWEEP, ids=[f"{k}-{b}" for k, b in SWEEP])
def test_gpu_block_sweep(gpu, kind, block):
    """On the GPU, a reducing kernel at this block size matches the float64 reference on
    rows whose extreme value sits in each warp in turn (and each CTA of a split row): a
    warp left out of the reduction, or a read past its array, shows in that row."""
    from differential import compare, run_fp8_quant, run_rmsnorm, run_softmax
    from specdsl.kernels import fp8_quant, rmsnorm, softmax
    from specdsl.kernels.case import TOLERANCE

    executor, torch = gpu
    spec = _sweep_spec(kind, block)
    if isinstance(spec, RMSNorm):
        x = _extreme_rows(spec, spec.hidden, 1000.0, block)
        weight = np.ones(spec.hidden)
        y = run_rmsnorm(executor, torch, spec, x, weight)["y"]
        compare(y, rmsnorm.reference(x, weight, float(np.float32(spec.eps))), spec.dtype,
                TOLERANCE[spec.dtype], repr(spec))
    elif isinstance(spec, Softmax):
        # 100 above the rest: a maximum left out overflows 2^(c (x - M)) to inf
        x = _extreme_rows(spec, spec.cols, 100.0, block)
        compare(run_softmax(executor, torch, spec, x), softmax.reference(x, spec.scale),
                spec.dtype, TOLERANCE[spec.dtype], repr(spec))
    else:
        x = _extreme_rows(spec, spec.hidden, 50.0, block)
        out = run_fp8_quant(executor, torch, spec, x)
        quotient, scale = fp8_quant.reference(x)
        np.testing.assert_allclose(out["scale"], scale, rtol=1e-6, err_msg=repr(spec))
        compare(out["q"], quotient, DType.F8E4M3, TOLERANCE[DType.F8E4M3], repr(spec))
