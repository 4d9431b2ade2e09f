"""Softmax: numerically stable row-wise softmax of ``x * scale``."""

from __future__ import annotations

import math
from typing import Any

import attrs

from .. import immediates
from ..dtype import DType
from ..fields import baked
from ..spec import kernel_spec
from ._case import KernelCase, Output, from_bits, to_bits
from ._rows import check_whole_vectors, row_block, row_launch_dims
from ._checks import one_of

__all__ = ["Softmax", "reference", "example", "MAX_COLS"]

#: Longest row (8 chunks of 1024 threads x 8 vectors would allow 524288 f16/bf16;
#: one limit for every dtype, set when every chunk was unrolled and the PTX grew with the row).
MAX_COLS = 262144

#: Most 16-byte vectors of a row one thread holds in registers at a time (32 words).
VECTORS_PER_THREAD = 8


def default_block(cols: int, dtype: DType) -> int:
    """Threads per CTA for rows of ``cols`` elements of ``dtype`` (the ``block`` default).

    See :func:`specdsl.kernels._rows.row_block`: at most 256 threads with at least two
    16-byte vectors each, up to :data:`VECTORS_PER_THREAD` (cols 8192 bf16: 256 x 4;
    32768: 512 x 8).
    """
    return row_block(cols, dtype, VECTORS_PER_THREAD, preferred_threads=256)


def _check_cols(instance: Any, attribute: Any, cols: int) -> None:
    check_whole_vectors(cols, instance.dtype)
    if cols > MAX_COLS:
        raise ValueError(f"expected at most {MAX_COLS} columns")


def _check_scale(instance: Any, attribute: Any, scale: float) -> None:
    if not math.isfinite(scale * math.log2(math.e)):
        raise ValueError("expected scale * log2(e) to be finite")
    if scale != 0.0:
        immediates.f32(scale * math.log2(math.e))  # overflow or underflow in f32 is refused


def _check_block(instance: Any, attribute: Any, block: int) -> None:
    if not (32 <= block <= 1024 and block % 32 == 0):
        raise ValueError("expected a multiple of 32 from 32 to 1024 threads per CTA")
    if _chunks(instance.cols, instance.dtype, block) > 8:
        raise ValueError(f"expected enough threads to hold the row in 8 chunks of "
                         f"{VECTORS_PER_THREAD} vectors a thread")


def _per_thread(cols: int, dtype: DType, block: int) -> int:
    vectors = cols // dtype.vector_lanes
    return min(VECTORS_PER_THREAD, -(-vectors // block))


def _chunks(cols: int, dtype: DType, block: int) -> int:
    vectors = cols // dtype.vector_lanes
    return -(-vectors // (block * _per_thread(cols, dtype, block)))


@kernel_spec(template="softmax.ptx.j2", entry="softmax")
class Softmax:
    """Row-wise softmax of ``x * scale`` over the last dimension.

    ``y[r, i] = exp(scale * x[r, i] - m_r) / sum_k exp(scale * x[r, k] - m_r)`` with
    ``m_r = max_k scale * x[r, k]`` (subtracting the maximum keeps every exponential
    in (0, 1]: no overflow). The kernel works in base 2: ``t = x * (scale * log2 e)``
    (one f32 constant, rounded once), ``2^(t - max t)`` by ``ex2.approx.ftz.f32``
    (the PTX ISA, "ex2", bounds its relative error near 2^-22; subnormal results
    flush to zero, i.e. probabilities under 2^-126), accumulation in f32, one
    ``rcp.rn.f32`` per row, output rounded to ``dtype`` once.

    Rows of up to ``1024 * 32`` values live in registers: x is read once. Longer rows
    (:attr:`chunks` > 1) make two passes: pass 1 keeps a running maximum and a
    rescaled running sum per thread (online softmax, Milakov & Gimelshein 2018,
    "Online normalizer calculation for softmax"), pass 2 reads the row again and
    writes y. Pass 1 loads with an L2 ``evict_last`` policy so the second read is
    mostly served by L2; device memory then sees x once and y once, but the kernel
    issues ``2 * rows * cols`` element reads (:meth:`bytes_read`).

    Kernel parameters (in order): ``x`` ``[rows, cols]``, ``y`` ``[rows, cols]``
    (row-major, contiguous, ``dtype``, 16-byte aligned; ``y`` must not overlap ``x``,
    which is read through ``ld.global.nc``), ``rows`` (u32).

    Fields:
        cols (baked): row length, a multiple of 8 (f16/bf16) or 4 (f32), at most 262144.
        scale (baked): multiplies x before the softmax (e.g. ``1/sqrt(d)``); any finite
            value whose product with log2(e) is a normal f32 (or 0).
        dtype (baked): f32, f16 or bf16 for x and y.
        block (baked): threads per CTA; the default comes from :func:`default_block`.

    Raises:
        SpecError: at construction, for a field outside the ranges above.
    """

    cols: int = baked(validator=_check_cols, doc="row length in elements")
    scale: float = baked(1.0, validator=_check_scale, doc="x is multiplied by scale first")
    dtype: DType = baked(DType.BF16, validator=one_of(DType.F32, DType.F16, DType.BF16),
                         doc="element type: f32, f16 or bf16")
    block: int = baked(attrs.Factory(lambda self: default_block(self.cols, self.dtype),
                                     takes_self=True),
                       validator=_check_block, doc="threads per CTA (one CTA per row)")

    #: The requests ``specdsl verify --grid`` / ``render --grid`` walk (see specdsl.grid).
    variants = {"cols": [4096, 32768, 131072], "dtype": ["bf16", "f16", "f32"]}

    @property
    def lanes(self) -> int:
        """Elements per 16-byte vector."""
        return self.dtype.vector_lanes

    @property
    def chunks(self) -> int:
        """Register-sized pieces a row is processed in (1: x is read once)."""
        return _chunks(self.cols, self.dtype, self.block)

    def launch_dims(self, rows: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``rows`` rows: one CTA of ``block`` threads per row.

        Raises:
            SpecError: ``rows`` is not an int from 1 to 2**31 - 1.
        """
        return row_launch_dims("Softmax", rows, self.block)

    def bytes_moved(self, rows: int) -> int:
        """Fewest bytes a launch must move through device memory: x read once, y written once."""
        return 2 * rows * self.cols * self.dtype.size

    def bytes_read(self, rows: int) -> int:
        """Bytes the kernel's loads request: ``x`` once, or twice when :attr:`chunks` > 1."""
        return (2 if self.chunks > 1 else 1) * rows * self.cols * self.dtype.size


def reference(x: Any, scale: float) -> Any:
    """float64 softmax of ``x * scale`` along the last axis (maximum subtracted first)."""
    import numpy as np

    t = np.asarray(x, dtype=np.float64) * scale
    t = t - np.max(t, axis=-1, keepdims=True)
    e = np.exp(t)
    return e / np.sum(e, axis=-1, keepdims=True)


#: Largest allowed ||out - ref|| / ||ref||: a few roundings of the output to dtype.
TOLERANCE = {DType.F32: 1e-5, DType.F16: 2e-3, DType.BF16: 1e-2}


def example(spec: Softmax, rng: Any, rows: int = 5) -> KernelCase:
    """A launch of ``spec`` on ``rows`` random rows (x ~ N(0, 4), so rows are peaked)."""
    import numpy as np

    shape = (rows, spec.cols)
    x = to_bits(rng.normal(0.0, 2.0, shape), spec.dtype)
    grid, block = spec.launch_dims(rows)
    return KernelCase(
        spec=spec,
        args=(("x", x), ("y", Output(shape, spec.dtype)), ("rows", np.uint32(rows))),
        grid=grid, block=block,
        expected={"y": reference(from_bits(x, spec.dtype), spec.scale)},
        tolerance=TOLERANCE[spec.dtype],
    )
