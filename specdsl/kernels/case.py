"""Runnable examples of built-in kernels: inputs, outputs, launch geometry, float64 reference.

Each kernel module offers ``example(spec, rng, count) -> KernelCase``, the count its third
parameter (``tokens``, ``rows``, or VectorAdd's ``n``) with a default; ``specdsl run``
(``--tokens`` passes the count), the GPU tests and the benchmarks all drive kernels through
these cases, so one description of a kernel's arguments serves every caller.

NumPy has no bf16 or fp8 types: such arrays travel as their bit patterns
(``uint16``, ``uint8``), converted with :func:`to_bits` / :func:`from_bits`.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._spec.dtype import DType

__all__ = ["Output", "KernelCase", "TOLERANCE", "to_bits", "from_bits", "relative_error"]

#: The largest :func:`relative_error` a built-in kernel's output may have against its
#: float64 reference, by output dtype: the one table every kernel's ``example`` and the
#: GPU tests use. Each is a few times the error of rounding the reference to the dtype
#: once (unit roundoff u = 2^-p, p the significand bits), with room for the f32 steps
#: before that rounding:
#:
#: * f32, 1e-5: u = 2^-24 (6e-8); the kernels' approximate instructions reach about
#:   2^-22 (PTX ISA "ex2", "rcp", "rsqrt": ex2.approx 2^-22, rsqrt.approx 2^-22.9) and sums
#:   over rows of up to 2^18 elements add more; measured on an H200: 6e-8 (RMSNorm),
#:   below 1e-6 (Softmax, RoPE, SiluMul).
#: * f16, 2e-3: u = 2^-11 (4.9e-4), so about 4u; measured 2.1e-4 (RMSNorm).
#: * bf16, 1e-2: u = 2^-8 (3.9e-3), so about 2.5u; measured 1.7e-3 (RMSNorm).
#: * f8e4m3, 4e-2: u = 2^-4 (6.3e-2): each code is within u of its quotient, and over
#:   normal data the relative L2 error is about 2.7e-2 (measured: 2.6e-2 to 2.7e-2,
#:   docs/kernels/fp8_quant.md), far below what a wrong scale or exponent gives.
#:
#: Where rounding the reference alone costs more (outputs in f16's subnormal range),
#: a test allows twice that rounding error instead (see ``softmax.example``).
TOLERANCE = {DType.F32: 1e-5, DType.F16: 2e-3, DType.BF16: 1e-2, DType.F8E4M3: 4e-2}


@attrs.frozen
class Output:
    """A device array the kernel writes: its shape and element type (poisoned before launch).

    Attributes:
        shape: the array's shape, in elements.
        dtype: its element type.
        initial: for in-place arguments, the NumPy array (bit patterns for bf16/fp8)
            the kernel reads and overwrites; ``None`` for pure outputs.
    """

    shape: tuple[int, ...]
    dtype: DType
    initial: Any = None


@attrs.frozen
class KernelCase:
    """One launch of a built-in kernel with its expected results.

    Attributes:
        spec: the request.
        args: ``(name, value)`` in the kernel's ``.param`` order. A value is a NumPy
            array (an input, copied to the device), an :class:`Output`, or a NumPy
            scalar (passed by value, its NumPy type matching the ``.param`` type).
        grid, block: launch geometry in CTAs and threads per CTA.
        shared_mem: dynamic shared memory per CTA, in bytes.
        expected: ``{output name: float64 reference array}``.
        tolerance: the largest allowed ``||out - ref|| / ||ref||`` per output.
        decode: ``{output name: DType}`` for outputs stored as bit patterns, to be
            turned into float64 with :func:`from_bits` before comparison.
    """

    spec: Any
    args: tuple[tuple[str, Any], ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    expected: dict[str, Any]
    tolerance: float
    shared_mem: int = 0


def to_bits(values: Any, dtype: DType) -> Any:
    """Round float64 ``values`` to ``dtype`` (nearest even) and return NumPy storage.

    f32/f16/f64 return that NumPy float type; bf16 returns ``uint16`` bit patterns;
    f8e4m3 returns ``uint8`` (OCP FP8 E4M3, saturating at +-448, no infinities).

    Raises:
        ValueError: an unsupported dtype.
    """
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    if dtype in (DType.F32, DType.F16, DType.F64):
        return x.astype(dtype.numpy)
    if dtype is DType.BF16:
        f32 = x.astype(np.float32).view(np.uint32)  # nearest even to f32, then to bf16
        rounding = ((f32 >> 16) & 1) + 0x7FFF
        return ((f32 + rounding) >> 16).astype(np.uint16)
    if dtype is DType.F8E4M3:
        table = from_bits(np.arange(256, dtype=np.uint8), DType.F8E4M3)
        finite = np.flatnonzero(np.isfinite(table) & (np.arange(256) < 128))
        magnitudes = table[finite]
        order = np.argsort(magnitudes)
        magnitudes, codes = magnitudes[order], finite[order]
        clipped = np.minimum(np.abs(x), 448.0)
        hi = np.clip(np.searchsorted(magnitudes, clipped), 1, len(magnitudes) - 1)
        lo = hi - 1
        pick_hi = (magnitudes[hi] - clipped < clipped - magnitudes[lo]) | (
            (magnitudes[hi] - clipped == clipped - magnitudes[lo]) & (codes[hi] % 2 == 0))
        code = np.where(pick_hi, codes[hi], codes[lo]).astype(np.uint8)
        return np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)
    raise ValueError(f"to_bits: unsupported dtype {dtype}")


def from_bits(stored: Any, dtype: DType) -> Any:
    """Decode NumPy storage of ``dtype`` (as made by :func:`to_bits`) into float64."""
    import numpy as np

    a = np.asarray(stored)
    if dtype in (DType.F32, DType.F16, DType.F64):
        return a.astype(np.float64)
    if dtype is DType.BF16:
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype is DType.F8E4M3:  # 1 sign, 4 exponent (bias 7), 3 mantissa; S.1111.111 is NaN
        b = a.astype(np.int64)
        sign = np.where(b & 0x80, -1.0, 1.0)
        exp, man = (b >> 3) & 0xF, b & 0x7
        value = np.where(exp == 0, man / 8.0 * 2.0**-6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))
        return np.where((b & 0x7F) == 0x7F, np.nan, sign * value)
    if dtype is DType.F8E5M2:  # 1 sign, 5 exponent (bias 15), 2 mantissa, IEEE-like
        return (a.astype(np.uint16) << 8).view(np.float16).astype(np.float64)
    raise ValueError(f"from_bits: unsupported dtype {dtype}")


def relative_error(out: Any, ref: Any) -> float:
    """``||out - ref||_2 / ||ref||_2`` in float64; ``inf`` if ``out`` holds NaN or infinity."""
    import numpy as np

    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"shape {out.shape} does not match the reference's {ref.shape}")
    if not np.all(np.isfinite(out)):
        return float("inf")
    scale = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (scale if scale > 0 else 1.0))
