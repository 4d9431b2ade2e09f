"""Adversarial rows for every built-in kernel against float64 references with torch's
semantics: masked prefixes, suffixes and strided masks (-inf), +-inf, NaN, values near
the dtype's largest finite value, subnormals, and the extreme scale, eps and theta the
validators accept. NaN positions and infinities are compared exactly (differential.py).

The conventions are on each kernel's page under docs/kernels/ ("Special values").
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from differential import (
    compare,
    rounded,
    run_fp8_quant,
    run_rmsnorm,
    run_rope,
    run_silu_mul,
    run_softmax,
)
from specdsl._spec.dtype import DType
from specdsl.kernels import (
    Fp8Quant,
    RMSNorm,
    RoPE,
    SiluMul,
    Softmax,
    fp8_quant,
    rmsnorm,
    rope,
    silu_mul,
    softmax,
)
from specdsl.kernels.case import TOLERANCE, from_bits, to_bits
from specdsl.kernels.rmsnorm import F32_MAX

#: (largest finite, smallest normal, smallest subnormal) of each input type.
LIMITS = {DType.BF16: ((2 - 2**-7) * 2.0**127, 2.0**-126, 2.0**-133),
          DType.F16: (65504.0, 2.0**-14, 2.0**-24),
          DType.F32: (F32_MAX, 2.0**-126, 2.0**-149)}


def adversarial_rows(n: int, dtype: DType, seed: int = 0) -> dict[str, np.ndarray]:
    """Rows of length `n`, by name, each exact in `dtype` (rounded once)."""
    largest, normal, subnormal = LIMITS[dtype]
    rng = np.random.default_rng(seed)
    normal_row = rng.standard_normal(n)
    rows = {"normal": normal_row}

    def masked(where) -> np.ndarray:
        row = rng.standard_normal(n)
        row[where] = -np.inf
        return row

    index = np.arange(n)
    rows["masked prefix 7/16"] = masked(index < 7 * n // 16 + 8)
    rows["masked prefix 1/2"] = masked(index < n // 2)
    rows["masked suffix"] = masked(index >= 3)
    rows["strided mask"] = masked(index % 2 == 1)
    rows["sparse"] = masked(index % 97 != 5)
    rows["all -inf"] = np.full(n, -np.inf)
    rows["one +inf"] = np.where(index == n // 3, np.inf, rng.standard_normal(n))
    rows["one -inf"] = masked(index == n - 1)
    rows["one NaN"] = np.where(index == n // 2, np.nan, rng.standard_normal(n))
    rows["all NaN"] = np.full(n, np.nan)
    rows["near largest"] = largest * rng.uniform(0.5, 0.95, n) * rng.choice([-1.0, 1.0], n)
    rows["one near largest"] = np.where(index == n // 5, 0.9 * largest, rng.standard_normal(n))
    rows["subnormal"] = subnormal * rng.integers(1, 64, n) * rng.choice([-1.0, 1.0], n)
    rows["smallest normal"] = normal * rng.uniform(1.0, 2.0, n)
    rows["zeros"] = np.zeros(n)
    with np.errstate(over="ignore", invalid="ignore"):
        return {name: from_bits(to_bits(row, dtype), dtype) for name, row in rows.items()}


def test_rows_are_exact_and_special():
    """The rows are exact in each dtype and hold what their names say (a row that lost
    its infinities or subnormals to rounding would test nothing)."""
    for dtype, (largest, _, subnormal) in LIMITS.items():
        rows = adversarial_rows(256, dtype)
        assert np.isneginf(rows["all -inf"]).all() and np.isnan(rows["all NaN"]).all()
        assert np.isposinf(rows["one +inf"]).sum() == 1
        assert np.isneginf(rows["masked prefix 1/2"][:128]).all()
        assert np.isfinite(rows["near largest"]).all()
        assert np.abs(rows["near largest"]).max() > 0.5 * largest
        assert 0 < np.abs(rows["subnormal"]).min() < LIMITS[dtype][1]
        for row in rows.values():
            np.testing.assert_array_equal(from_bits(to_bits(row, dtype), dtype), row)


def test_compare_catches_special_value_mismatches():
    """compare() fails on a NaN, an infinity or a sign of infinity the reference does not
    have, and on a finite row out of tolerance; it passes equal rows."""
    ref = np.array([[1.0, np.nan, np.inf, -np.inf, 0.5]])
    compare(ref.copy(), ref, DType.F32, 1e-6)
    for position, value in ((0, np.nan), (1, 0.0), (2, -np.inf), (3, 1.0), (4, 0.6)):
        out = ref.copy()
        out[0, position] = value
        with pytest.raises(AssertionError):
            compare(out, ref, DType.F32, 1e-6)


def test_compare_rounds_the_reference_for_overflow():
    """A reference beyond bf16's largest finite value must be inf in the kernel's output
    (the kernel rounds to bf16), and the largest finite value must stay finite."""
    largest = LIMITS[DType.BF16][0]
    compare(np.array([[np.inf, 1.0]]), np.array([[4e38, 1.0]]), DType.BF16, 1e-2)
    with pytest.raises(AssertionError, match=r"\+inf"):
        compare(np.array([[largest, 1.0]]), np.array([[4e38, 1.0]]), DType.BF16, 1e-2)
    assert rounded(np.array([largest]), DType.BF16)[0] == largest


def _matrix(rows: dict[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    return list(rows), np.stack(list(rows.values()))


# --- Softmax --------------------------------------------------------------------------

SOFTMAX = [
    ("bf16", 131072, 1, 1.0),                 # two passes (chunks), as in the issue
    ("bf16", 4096, 1, 1.0),                   # in registers
    ("f16", 4096, 1, -0.5),                   # the minimum path
    ("f16", 131072, 1, -1.0),                 # the minimum path, in chunks
    ("f32", 131072, 1, 0.0),                  # scale 0, in chunks
    ("f32", 8192, 1, 0.125),
    ("bf16", 65536, 4, 1.0),                  # a cluster of 4 CTAs a row
    ("bf16", 4096, 1, softmax._MAX_SCALE),    # the largest scale accepted
    ("f32", 4096, 1, -softmax._MAX_SCALE),
    ("bf16", 4096, 1, 2.5e-46),               # about the smallest accepted
    ("f32", 4096, 1, 1e-38),                  # near-largest values at a tiny scale
    ("bf16", 4097, 1, 1.0),                   # odd rows: one element a vector
    ("f16", 50257, 1, -0.5),                  # an odd vocabulary, in chunks, the minimum path
    ("f32", 4098, 1, 0.125),                  # 8-byte vectors
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,cols,split,scale", SOFTMAX)
def test_gpu_softmax_adversarial(gpu, dtype, cols, split, scale):
    """Softmax on adversarial rows matches torch.softmax's semantics in float64: -inf
    gives 0, NaN, +inf or a row of -inf only give NaN rows, no overflow elsewhere."""
    executor, torch = gpu
    spec = Softmax(cols=cols, scale=scale, dtype=dtype, split=split)
    names, x = _matrix(adversarial_rows(cols, spec.dtype, seed=cols))
    expected = softmax.reference(x, scale)
    # the reference's NaN rows are torch's (torch.softmax in float64, on the GPU)
    torch_y = torch.softmax(torch.from_numpy(x).cuda() * scale, dim=-1).cpu().numpy()
    np.testing.assert_array_equal(np.isnan(torch_y), np.isnan(expected))
    y = run_softmax(executor, torch, spec, x)
    for i, name in enumerate(names):
        compare(y[i:i + 1], expected[i:i + 1], spec.dtype, TOLERANCE[spec.dtype],
                f"{spec!r} row {name!r}")


# --- RMSNorm ----------------------------------------------------------------------------

RMSNORM = [
    ("bf16", 4096, False, 1e-6),
    ("f16", 4096, True, 1e-6),
    ("f32", 4096, False, 2.0**-149),          # the smallest eps (an f32 subnormal)
    ("bf16", 4096, True, F32_MAX),            # the largest eps
    ("f32", 8192, True, 1e-5),
    ("bf16", 4097, True, 1e-6),               # odd rows: one element a vector
    ("f16", 131073, False, 1e-6),             # odd and longer than the registers: chunks
    ("bf16", 131072, True, 1e-6),             # chunks: s written in pass 1, re-read in pass 2
    ("f32", 4098, True, 1e-5),                # 8-byte vectors
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,fused,eps", RMSNORM)
def test_gpu_rmsnorm_adversarial(gpu, dtype, hidden, fused, eps):
    """RMSNorm (and the fused residual add) on adversarial rows: mean(x^2) + eps in f32
    as torch; NaN and +-inf propagate as x / sqrt(inf) = 0, inf * 0 = NaN."""
    executor, torch = gpu
    spec = RMSNorm(hidden=hidden, eps=eps, dtype=dtype, fused_residual=fused)
    names, x = _matrix(adversarial_rows(hidden, spec.dtype, seed=hidden + 1))
    rng = np.random.default_rng(hidden)
    weight = from_bits(to_bits(rng.normal(1.0, 0.5, hidden), spec.dtype), spec.dtype)
    residual = None
    normed = x
    if fused:  # the residual: normal rows, except where it meets x's specials
        residual = from_bits(to_bits(rng.standard_normal(x.shape), spec.dtype), spec.dtype)
        residual[names.index("near largest")] = x[names.index("near largest")]  # overflows
        residual[names.index("one -inf")] *= -np.inf  # -inf + inf = NaN, +-inf elsewhere
        with np.errstate(over="ignore", invalid="ignore"):
            normed = rounded(x + residual, spec.dtype)
    out = run_rmsnorm(executor, torch, spec, x, weight, residual)
    if fused:
        np.testing.assert_array_equal(out["residual"], normed)
    expected = rmsnorm.reference(normed, weight, float(np.float32(eps)))
    for i, name in enumerate(names):
        compare(out["y"][i:i + 1], expected[i:i + 1], spec.dtype,
                TOLERANCE[spec.dtype], f"{spec!r} row {name!r}")


def test_rmsnorm_reference_overflows_like_f32():
    """The reference forms mean(x^2) + eps in f32's range, as torch: a sum of squares
    past the f32 maximum makes the row 0 (NaN at infinities)."""
    x = np.array([[3e38, 1.0, -np.inf], [1e18, 1.0, 2.0]])
    y = rmsnorm.reference(x, np.ones(3), 1e-6)
    np.testing.assert_array_equal(y[0], [0.0, 0.0, np.nan])
    np.testing.assert_allclose(y[1], x[1] / math.sqrt((1e36 + 5) / 3))


# --- Fp8Quant ---------------------------------------------------------------------------

FP8 = [
    ("bf16", 4096, 256, "dynamic", None),
    ("f16", 4096, 96, "dynamic", None),        # 3 warps: the block size
    ("f32", 4096, 160, "dynamic", None),       # 5 warps
    ("bf16", 4096, 256, "static_param", 2.0**-126),
    ("bf16", 4096, 256, "static_param", 2.0**126),
    ("f32", 4096, 256, "static_param", 0.05),
    ("f16", 4096, 256, "static_baked", 2.0**-126),
    ("bf16", 4096, 256, "static_baked", 2.0**126),
    ("bf16", 4097, 256, "dynamic", None),     # odd rows: one element, one code a vector
    ("f16", 131073, 1024, "dynamic", None),   # odd and longer than the registers: chunks
    ("f32", 4098, 256, "static_param", 0.05), # 8-byte vectors, 2-byte code stores
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,block,mode,scale", FP8)
def test_gpu_fp8_quant_adversarial(gpu, dtype, hidden, block, mode, scale):
    """Fp8Quant on adversarial rows: NaN codes for NaN (ignored by the dynamic row max),
    saturation to +-448 (infinities included), scale inf for a dynamic row with +-inf."""
    executor, torch = gpu
    spec = Fp8Quant(dtype=dtype, hidden=hidden, block=block, scale_mode=mode,
                    static_scale=scale if mode == "static_baked" else None)
    names, x = _matrix(adversarial_rows(hidden, spec.dtype, seed=block))
    out = run_fp8_quant(executor, torch, spec, x, scale if mode == "static_param" else None)
    if mode == "dynamic":
        quotient, expected_scale = fp8_quant.reference(x)
        np.testing.assert_allclose(out["scale"], expected_scale, rtol=1e-6, err_msg=str(names))
    else:
        quotient, _ = fp8_quant.reference(x, float(np.float32(scale)))
    for i, name in enumerate(names):
        compare(out["q"][i:i + 1], quotient[i:i + 1], DType.F8E4M3, TOLERANCE[DType.F8E4M3],
                f"{spec!r} row {name!r}")


# --- SiluMul ----------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_gpu_silu_mul_adversarial(gpu, dtype):
    """SiluMul with each adversarial row as the gate (up normal) and as up (gate normal):
    silu(-inf) = NaN, silu(+inf) = inf, 0 * inf = NaN, products past the largest are inf."""
    executor, torch = gpu
    spec = SiluMul(dtype=dtype, d=4096)
    gates = adversarial_rows(spec.d, spec.dtype, seed=1)
    ups = adversarial_rows(spec.d, spec.dtype, seed=2)
    names, rows = [], []
    for name in gates:
        names += [f"gate {name}", f"up {name}", f"both {name}"]
        rows += [np.concatenate([gates[name], ups["normal"]]),
                 np.concatenate([gates["normal"], ups[name]]),
                 np.concatenate([gates[name], ups[name]])]
    x = np.stack(rows)
    expected = silu_mul.reference(x, spec.d)
    t = torch.from_numpy(x).cuda()
    torch_out = (torch.nn.functional.silu(t[:, :spec.d]) * t[:, spec.d:]).cpu().numpy()
    np.testing.assert_array_equal(np.isnan(torch_out), np.isnan(expected))
    out = run_silu_mul(executor, torch, spec, x)
    for i, name in enumerate(names):
        compare(out[i:i + 1], expected[i:i + 1], spec.dtype, TOLERANCE[spec.dtype],
                f"{spec!r} row {name!r}")


# --- RoPE -------------------------------------------------------------------------------

ROPE = [
    ("bf16", "neox", 10000.0, None),
    ("f16", "gptj", 1e12, None),              # the largest theta
    ("f32", "neox", 1.0 + 2**-20, 64),        # theta just above 1, half the row rotated
    ("bf16", "gptj", 1e6, 96),
]


def _safe_position(theta: float, rotary: int) -> int | None:
    """A position where every pair's sin and cos are at least 1e-3 from 0 (so an
    infinity times them has the same sign in f32 as in float64), or None."""
    inv_freq = theta ** (-(2.0 * np.arange(rotary // 2)) / rotary)
    for p in range(1, 20000):
        angle = p * inv_freq
        if min(np.abs(np.sin(angle)).min(), np.abs(np.cos(angle)).min()) >= 1e-3:
            return p
    return None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,style,theta,rotary_dim", ROPE)
def test_gpu_rope_adversarial(gpu, dtype, style, theta, rotary_dim):
    """RoPE on adversarial head rows at positions 0, 1, 2^24 - 1 and others: NaN
    spreads to its pair, inf * sin(0) = NaN as in float64, no overflow at half the
    largest value, subnormals kept."""
    executor, torch = gpu
    spec = RoPE(dtype=dtype, q_heads=4, kv_heads=2, head_dim=128, rotary_dim=rotary_dim,
                theta=theta, style=style)
    rows = adversarial_rows(spec.head_dim, spec.dtype, seed=7)
    # past half the largest value a rotation may round past it: kept for position 0 only
    rows["half largest"] = from_bits(to_bits(rows["near largest"] * 0.5, spec.dtype), spec.dtype)
    safe = _safe_position(theta, spec.rotary)
    positions_any = [1, 2**24 - 1, 123457, 31, 2**20 + 3]
    tokens, positions, names = [], [], []
    for name, row in rows.items():
        special = name in ("near largest", "one near largest") or np.isinf(row).any()
        where = [0] + ([safe] if safe and name != "near largest" and special else [])
        if not special:
            where += positions_any
        for p in where:
            tokens.append(row)
            positions.append(p)
            names.append(f"{name} at {p}")
    heads = spec.q_heads + spec.kv_heads
    x = np.stack([np.tile(row, (heads, 1)) for row in tokens])  # every head the same row
    for h in range(1, heads):  # ... but each head a little different
        x[:, h] = np.roll(x[:, h], h, axis=-1)
    q, k = x[:, :spec.q_heads].copy(), x[:, spec.q_heads:].copy()
    positions = np.array(positions, dtype=np.int64)
    out_q, out_k = run_rope(executor, torch, spec, q, k, positions)
    args = dict(rotary_dim=spec.rotary, theta=theta, style=style)
    for out, ref_in, label in ((out_q, q, "q"), (out_k, k, "k")):
        expected = rope.reference(ref_in, positions, **args)
        for i, name in enumerate(names):
            compare(out[i], expected[i], spec.dtype, TOLERANCE[spec.dtype],
                    f"{spec!r} {label} token {name!r}")
