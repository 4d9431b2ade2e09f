"""RoPE: assembles with nvJitLink; golden PTX; exact angle reduction; refused values; GPU accuracy."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from golden import check_golden
from ptxcheck import assemble, assert_no_spills
from specdsl import DType, SpecError, render
from specdsl.kernels import RoPE
from specdsl.kernels.case import Output, from_bits, to_bits
from specdsl.kernels.rope import example, reference

#: Positions the accuracy tests cover: 0, 1, one below a power of two, 2^16, 2^17 - 1.
EDGE_POSITIONS = np.array([0, 1, 4095, 65536, 131071], dtype=np.int64)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_assembles(dtype, style):
    """Each dtype and style assembles for sm_90 without spills."""
    compiled = assemble(RoPE(dtype=dtype, style=style))
    assert_no_spills(compiled)


@pytest.mark.parametrize("kw", [
    dict(head_dim=128, rotary_dim=64, theta=1e6),             # partial rotary
    dict(head_dim=64, rotary_dim=36, style="gptj"),           # 2-element vectors... 4 bytes
    dict(head_dim=80, rotary_dim=20, dtype="bf16"),           # neox halves of 10: 2-element words
    dict(head_dim=6, rotary_dim=6, dtype="f32"),              # neox halves of 3: scalar f32
    dict(head_dim=256, q_heads=1, kv_heads=1, theta=1e12),
])
def test_assembles_odd_shapes(kw):
    """Narrow vectors, partial rotary dims and extreme bases assemble."""
    assemble(RoPE(**kw))


def test_golden_bf16():
    """The bf16 neox PTX (32 + 8 heads of 128) matches its golden file."""
    check_golden("rope_bf16_neox_sm_90.ptx", render(RoPE(dtype="bf16", style="neox")))


def _table(spec: RoPE) -> np.ndarray:
    """The (hi, lo) f32 pairs baked into the PTX, as a float64 array [R/2, 2]."""
    ptx = render(spec)
    body = ptx[ptx.index("rope_turns["):ptx.index("};")]
    words = re.findall(r"0f([0-9A-F]{8})", body)
    values = [struct.unpack(">f", bytes.fromhex(w))[0] for w in words]
    return np.array(values, dtype=np.float64).reshape(-1, 2)


@pytest.mark.parametrize("theta", [10000.0, 1e6])
def test_table_holds_turns_per_position(theta):
    """hi + lo equals inv_freq / (2 pi) to 2^-46 relative; hi carries 24 bits."""
    spec = RoPE(head_dim=128, theta=theta)
    table = _table(spec)
    want = theta ** (-(2.0 * np.arange(64)) / 128) / (2 * np.pi)
    np.testing.assert_allclose(table[:, 0] + table[:, 1], want, rtol=2.0**-46, atol=0)
    assert np.all(np.abs(table[:, 1]) <= np.abs(table[:, 0]) * 2.0**-23)


def _f32(x):
    return np.float32(x)


@pytest.mark.parametrize("theta", [10000.0, 1e6])
def test_angle_reduction_exact_enough(theta):
    """The kernel's f32 reduction (emulated step by step) gives sin/cos within 5e-7 at edge positions.

    Emulates the PTX sequence with the baked table: t = p*hi, e = fma(p, hi, -t),
    n = round(t), r = (t - n) + fma(p, lo, e), angle = 2 pi r; compares sin and cos of
    that f32 angle with float64 sin/cos of p * inv_freq. sin.approx adds at most
    2^-20.9 on [-pi, pi] (PTX ISA), which the GPU test covers.
    """
    table = _table(RoPE(head_dim=128, theta=theta))
    inv_freq = theta ** (-(2.0 * np.arange(64)) / 128)
    worst = 0.0
    for p in EDGE_POSITIONS:
        pf = float(_f32(p))
        for i, (hi, lo) in enumerate(table):
            t = float(_f32(pf * hi))
            e = pf * hi - t                                   # exact: fits 48 bits
            e = float(_f32(pf * lo + e))
            n = float(_f32(_f32(t + 12582912.0) - _f32(12582912.0)))
            r = float(_f32(_f32(t - n) + _f32(e)))
            angle = float(_f32(r * float(_f32(2 * np.pi))))
            assert abs(angle) <= np.pi + 1e-6
            true = p * inv_freq[i]
            worst = max(worst, abs(np.sin(angle) - np.sin(true)), abs(np.cos(angle) - np.cos(true)))
    assert worst < 5e-7, worst


def test_vector_width():
    """Chunks use the widest vector that tiles a rotary half (neox) or the rotary part (gptj)."""
    assert RoPE(dtype="bf16", head_dim=128).vector_bytes == 16
    assert RoPE(dtype="bf16", head_dim=80, rotary_dim=20).vector_elements == 2
    assert RoPE(dtype="f32", head_dim=6, style="neox").vector_elements == 1
    assert "ld.global.v4.b32" in render(RoPE(dtype="f16"))


def test_tasks_and_grid():
    """One thread per (token, head pair, chunk) with pair_heads: 20 pairs x 8 chunks for bf16
    neox head_dim 128; by default one thread per (token, head row, chunk): 40 x 8."""
    spec = RoPE(dtype="bf16", q_heads=32, kv_heads=8, head_dim=128, pair_heads=True, block=256)
    assert spec.tasks_per_token == 160 and spec.heads_per_thread == 2
    assert spec.grid(1) == (1, 1, 1) and spec.grid(4) == (3, 1, 1)
    assert RoPE(dtype="bf16", style="gptj", pair_heads=True).tasks_per_token == 320
    assert RoPE(dtype="bf16", q_heads=3, kv_heads=1).tasks_per_token == 32
    default = RoPE(dtype="bf16")
    assert (default.heads_per_thread, default.tasks_per_token, default.block) == (1, 320, 128)
    assert default.grid(4) == (10, 1, 1)


def test_grid_refuses_u32_overflow():
    """A launch needing 2^31 threads or more is refused."""
    with pytest.raises(SpecError, match=r"RoPE.grid: tokens=16777216 gives 5368709120 threads"):
        RoPE().grid(2**24)


def test_bytes_moved():
    """The rotary part of q and k is read and written once, plus 8 bytes of position per token."""
    assert RoPE(dtype="bf16", q_heads=32, kv_heads=8, head_dim=128, rotary_dim=64).bytes_moved(2) == \
        2 * 2 * 40 * 64 * 2 + 16


@pytest.mark.parametrize("kw, message", [
    (dict(head_dim=127), "RoPE.head_dim = 127 is invalid: expected an even number of elements from 2 to 1024"),
    (dict(head_dim=64, rotary_dim=128), r"RoPE.rotary_dim = 128 is invalid: expected an even number from 2 to head_dim \(64\)"),
    (dict(rotary_dim=31), "RoPE.rotary_dim = 31 is invalid: expected an even number"),
    (dict(theta=1.0), "RoPE.theta = 1.0 is invalid: expected a base greater than 1"),
    (dict(theta=1e13), "RoPE.theta = 10000000000000.0 is invalid: expected a base greater than 1 and at most 1e12"),
    (dict(q_heads=0), "RoPE.q_heads = 0 is invalid: expected a value from 1 to 1024"),
    (dict(dtype="bf16", rotary_dim=6, head_dim=64),
     "RoPE.style = 'neox' is invalid: neox style with bf16 needs rotary_dim a multiple of 4"),
    (dict(style="llama"), "RoPE.style must be one of 'neox', 'gptj'"),
])
def test_refused(kw, message):
    """Shapes and values the template cannot handle are refused, naming the field."""
    with pytest.raises(SpecError, match=message):
        RoPE(**kw)


def test_reference_position_zero_is_identity():
    """At position 0 every angle is 0: the rows come back unchanged."""
    x = np.random.default_rng(0).standard_normal((1, 2, 8))
    np.testing.assert_array_equal(reference(x, [0], rotary_dim=8, theta=1e4, style="neox"), x)


def test_reference_rotates_first_pair_by_position():
    """The first pair (frequency 1) turns by exactly `position` radians; dims past rotary_dim stay."""
    x = np.zeros((1, 1, 6))
    x[0, 0, :] = [1.0, 0.0, 0.0, 0.0, 5.0, 6.0]
    out = reference(x, [3], rotary_dim=4, theta=1e4, style="gptj")
    np.testing.assert_allclose(out[0, 0, :2], [np.cos(3.0), np.sin(3.0)], rtol=1e-15)
    np.testing.assert_array_equal(out[0, 0, 4:], [5.0, 6.0])


def test_reference_styles_are_permutations():
    """gptj on interleaved pairs equals neox on the same data laid out as halves."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 8))
    pos = [5, 77, 1000]
    halves = np.concatenate([x[..., 0:8:2], x[..., 1:8:2]], axis=-1)
    a = reference(x, pos, rotary_dim=8, theta=1e4, style="gptj")
    b = reference(halves, pos, rotary_dim=8, theta=1e4, style="neox")
    np.testing.assert_allclose(np.concatenate([a[..., 0:8:2], a[..., 1:8:2]], axis=-1), b, rtol=1e-13)


def test_example_case():
    """The example rotates q and k in place from their initial values."""
    spec = RoPE(dtype="f16", q_heads=2, kv_heads=1, head_dim=16)
    case = example(spec, np.random.default_rng(4), tokens=5, positions=EDGE_POSITIONS)
    args = dict(case.args)
    assert isinstance(args["q"], Output) and args["q"].shape == (5, 2, 16)
    want = reference(from_bits(args["q"].initial, DType.F16), EDGE_POSITIONS,
                     rotary_dim=16, theta=1e4, style="neox")
    np.testing.assert_array_equal(case.expected["q"], want)
    assert args["positions"].dtype == np.int64 and args["tokens"] == np.uint32(5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("kw", [
    dict(),
    dict(rotary_dim=64, theta=1e6),
    dict(q_heads=3, kv_heads=1, head_dim=64, rotary_dim=36),
])
def test_gpu_edge_positions(dtype, style, kw):
    """On the GPU, q and k match float64 RoPE at positions 0, 1, 4095, 65536 and 131071."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    spec = RoPE(dtype=dtype, style=style, **kw)
    rng = np.random.default_rng(7)
    case = example(spec, rng, tokens=len(EDGE_POSITIONS), positions=EDGE_POSITIONS)
    errors = run_case(Executor(), case, rng)
    assert errors["q"] <= case.tolerance and errors["k"] <= case.tolerance, errors


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 333])
def test_gpu_random_positions(tokens):
    """On the GPU, bf16 q and k match the reference at random positions below 131072."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    spec = RoPE(dtype="bf16", q_heads=32, kv_heads=8, head_dim=128, theta=1e6)
    rng = np.random.default_rng(tokens)
    case = example(spec, rng, tokens=tokens)
    errors = run_case(Executor(), case, rng)
    assert errors["q"] <= case.tolerance and errors["k"] <= case.tolerance, errors


# --- tuning: one head row a thread (benchmarks/variants.py copy-rate) --------------------

def test_one_head_a_thread_by_default():
    """RoPE rotates one head row a thread by default (pair_heads=False): twice the tasks a
    token of pair_heads=True, half the loads a thread, and no spills."""
    paired, single = RoPE(pair_heads=True), RoPE()
    assert (paired.heads_per_thread, single.heads_per_thread) == (2, 1)
    assert single.tasks_per_token == 2 * paired.tasks_per_token
    assert render(single).count("ld.global.v4.b32") == render(paired).count(
        "ld.global.v4.b32") // 2
    assert_no_spills(assemble(single))
    assert RoPE(q_heads=7, kv_heads=1, pair_heads=True).heads_per_thread == 1


@pytest.mark.gpu
@pytest.mark.parametrize("fields", [dict(pair_heads=False), dict(block=64),
                                    dict(pair_heads=False, block=128)])
@pytest.mark.parametrize("tokens", [16, 300])
def test_gpu_tuning_gives_the_default_output(fields, tokens):
    """On the GPU, one head a thread and smaller CTAs rotate q and k bit for bit as the
    default request (the same arithmetic per element)."""
    from differential import run_rope
    from specdsl import Executor

    torch = pytest.importorskip("torch")
    executor = Executor()
    rng = np.random.default_rng(tokens)
    default, tuned = RoPE(theta=1e6), RoPE(theta=1e6, **fields)
    q = from_bits(to_bits(rng.standard_normal((tokens, 32, 128)), DType.BF16), DType.BF16)
    k = from_bits(to_bits(rng.standard_normal((tokens, 8, 128)), DType.BF16), DType.BF16)
    positions = rng.integers(0, 131072, size=tokens)
    want = run_rope(executor, torch, default, q, k, positions)
    got = run_rope(executor, torch, tuned, q, k, positions)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])

