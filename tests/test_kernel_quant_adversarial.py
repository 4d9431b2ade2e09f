"""Adversarial rows through the fused FP8 epilogues (RMSNormQuant, SiluMulQuant): their
codes and scales must be, bit for bit, those of the unfused kernel's output quantized by
``fp8_quant.kernel_codes`` (Fp8Quant's f32 steps), special values included: a NaN element
is left out of the row and group maxima (as max.f32 leaves it out), an infinity makes the
scale inf, subnormal and zero elements count as themselves.

The row maxima reduce f16/bf16 pairs with max.bf16x2 / max.f16x2 before widening to f32
(templates/quant.ptx.j2, ``amax``), and each warp's row max is a redux.sync.max.u32 of the
bits; these rows are where either could part from max.f32.
"""

from __future__ import annotations

import numpy as np
import pytest

from differential import run_quantized, run_rmsnorm, run_silu_mul, to_device
from specdsl._spec.dtype import DType
from specdsl.kernels import RMSNorm, RMSNormQuant, SiluMul, SiluMulQuant
from specdsl.kernels.case import from_bits, to_bits
from specdsl.kernels.fp8_quant import kernel_codes
from test_kernel_adversarial import LIMITS, adversarial_rows

#: (dtype, scale_mode, width): every mode in every dtype, rows of 16-byte vectors and an odd
#: row (one element a vector, no pairs to pack).
CASES = [("bf16", "dynamic", 4096), ("f16", "dynamic", 7168), ("f32", "dynamic", 4096),
         ("bf16", "group", 7168), ("f16", "group", 4096), ("f32", "group", 4096),
         ("bf16", "static", 4096), ("bf16", "dynamic", 4097)]
#: SiluMul, the unfused side, takes whole 16-byte vectors only.
SILU_CASES = [case for case in CASES if case[2] % 8 == 0]
#: Static scale: the largest finite y quantizes to about 448 for rows of N(0, 1) scale.
STATIC_SCALE = 0.01


def _special_weight(width: int, dtype: DType, rng: np.random.Generator) -> np.ndarray:
    """A weight around 1 with NaN, zero and subnormal elements at fixed columns: every row's
    y then holds a NaN (left out of the maxima) beside finite values in the same pair."""
    weight = rng.normal(1.0, 0.5, width)
    weight[5] = np.nan
    weight[width // 2 + 1] = np.nan
    weight[9] = 0.0
    weight[200] = LIMITS[dtype][2]   # the smallest subnormal
    return from_bits(to_bits(weight, dtype), dtype)


def _expected(y: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    codes, scales = kernel_codes(y, mode, STATIC_SCALE if mode == "static" else None)
    return from_bits(codes, DType.F8E4M3), np.asarray(scales, dtype=np.float64)


def _check(out: dict, y: np.ndarray, mode: str, names: list[str], spec: object) -> None:
    q, scales = _expected(y, mode)
    for i, name in enumerate(names):
        np.testing.assert_array_equal(out["q"][i], q[i], err_msg=f"{spec!r} row {name!r}")
        if mode != "static":
            np.testing.assert_array_equal(out["scale"][i], scales[i],
                                          err_msg=f"{spec!r} row {name!r}")


def _scales(mode: str, rows: int, width: int) -> tuple[int, ...] | float:
    return {"dynamic": (rows,), "group": (rows, width // 128)}.get(mode, STATIC_SCALE)


#: Group scales of f16/bf16 rows are worked out 4 sweeps at a time, each lane of a group
#: dividing for one (norm.ptx.j2's spread_groups): (dtype, hidden, block) with 1 sweep a
#: thread, 3, 3 with the last one partial (640 vectors on 256 threads), 6 (a batch of 4 and
#: one of 2: hidden 12288's default block) and 8 (two batches).
SPREAD_CASES = [("bf16", 1024, 128), ("f16", 3072, 128), ("bf16", 5120, 256),
                ("f16", 12288, 256), ("bf16", 65536, 1024)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,mode,hidden", CASES)
def test_gpu_rmsnorm_quant_adversarial(gpu, dtype, mode, hidden):
    """RMSNormQuant on adversarial rows, with NaN, zero and subnormal weight elements:
    codes and scales bit for bit those of RMSNorm (same block) then kernel_codes."""
    _check_rmsnorm_quant(gpu, RMSNormQuant(hidden=hidden, dtype=dtype, scale_mode=mode))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,block", SPREAD_CASES)
def test_gpu_rmsnorm_quant_group_sweeps(gpu, dtype, hidden, block):
    """Group scales at 1, 3 (the last partial), 6 and 8 sweeps a thread, as above."""
    spec = RMSNormQuant(hidden=hidden, dtype=dtype, scale_mode="group", block=block)
    sweeps = -(-hidden // spec.vector // block)
    assert sweeps == {1024: 1, 3072: 3, 5120: 3, 12288: 6, 65536: 8}[hidden]
    _check_rmsnorm_quant(gpu, spec)


def _check_rmsnorm_quant(gpu, spec: RMSNormQuant) -> None:
    executor, torch = gpu
    hidden, dtype, mode = spec.hidden, spec.dtype, spec.scale_mode
    plain = RMSNorm(hidden=hidden, dtype=dtype, block=spec.block)
    names, x = zip(*adversarial_rows(hidden, spec.dtype, seed=hidden).items(), strict=True)
    x = np.stack(x)
    weight = _special_weight(hidden, spec.dtype, np.random.default_rng(hidden))
    y = run_rmsnorm(executor, torch, plain, x, weight, None)["y"]
    inputs = [to_device(torch, to_bits(a, spec.dtype), spec.dtype) for a in (x, weight)]
    out = run_quantized(executor, torch, spec, inputs, len(names), hidden,
                        _scales(mode, len(names), hidden))
    _check(out, y, mode, list(names), spec)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,mode,d", SILU_CASES)
def test_gpu_silu_mul_quant_adversarial(gpu, dtype, mode, d):
    """SiluMulQuant with each adversarial row as the gate and as up (the other normal):
    codes and scales bit for bit those of SiluMul then kernel_codes."""
    executor, torch = gpu
    spec = SiluMulQuant(d=d, dtype=dtype, scale_mode=mode)
    gates = adversarial_rows(d, spec.dtype, seed=1)
    ups = adversarial_rows(d, spec.dtype, seed=2)
    names, rows = [], []
    for name in gates:
        names += [f"gate {name}", f"up {name}"]
        rows += [np.concatenate([gates[name], ups["normal"]]),
                 np.concatenate([gates["normal"], ups[name]])]
    x = np.stack(rows)
    y = run_silu_mul(executor, torch, SiluMul(d=d, dtype=dtype), x)
    inputs = [to_device(torch, to_bits(x, spec.dtype), spec.dtype)]
    out = run_quantized(executor, torch, spec, inputs, len(names), d, _scales(mode, len(names), d))
    _check(out, y, mode, names, spec)
