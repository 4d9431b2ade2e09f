"""The measured defaults of RMSNorm's geometry: threads per CTA (``block``) and CTAs an SM
(``min_ctas_per_sm``) for a row length and dtype, re-exported by
:mod:`specdsl.kernels.rmsnorm` (RMSNormQuant builds its own on :func:`default_block`)."""

from __future__ import annotations

from .._spec.dtype import DType
from ._rows import (
    cdiv,
    row_block,
    row_vectors,
    threads_for,
    vector_elements,
    vector_registers,
    windowed,
)

__all__ = ["default_block", "default_min_ctas", "packed_row_block", "PACKED_ROW_THREADS",
           "PACKED_ROW_VECTORS", "PACKED_ROW_CTAS", "TWO_VECTOR_CTAS", "KEPT_TWO_VECTOR_CTAS"]

#: f16/bf16 rows of 16-byte vectors without the residual that the general rule
#: (:func:`~specdsl.kernels._rows.row_block`) gives this many threads or more at 3 vectors
#: a thread (hidden 9992 to 12288: 448 to 512 threads, ``.minnctapersm`` 2) take the fewest
#: warps that hold them at :data:`PACKED_ROW_VECTORS`, with :data:`PACKED_ROW_CTAS` CTAs an SM
#: (320 to 384 threads). Rows given 384 or 416 threads at 3 (9216, 9728) ran level either
#: way, so they keep theirs, as do rows at 2 (8192: 512 threads).
PACKED_ROW_THREADS = 448
#: 16-byte vectors a thread of a packed row's default block (ptxas for sm_90: 56 to 64
#: registers, no spills; 5 or 6 on 256 threads, 4 CTAs an SM, ran 1.5 and 0.8% slower at
#: 10240 and 12288).
PACKED_ROW_VECTORS = 4
#: CTAs an SM a packed row's default block must hold (``.minnctapersm``, the
#: ``min_ctas_per_sm`` default for that block).
PACKED_ROW_CTAS = 3

#: CTAs an SM for f16/bf16 rows of 16-byte vectors without the residual, one a CTA, that
#: ``block`` threads hold at exactly 2 vectors a thread, by block, where more CTAs than the
#: 40 registers such a kernel takes allow ran faster: ptxas then keeps to 32 registers,
#: without spills only where no thread's second vector is guarded (a row between, 4616 to
#: 5112 on 320 threads say, spills 16 bytes: tests/test_kernel_rmsnorm.py).
#: Measured on the H200 (``benchmarks/variants.py two-vector-ctas``, 2026-12-01, bf16,
#: 16384 rows, three rounds, us): hidden 5120 on 320 threads 87.4 -> 84.4 at 5 (6: 84.3);
#: 5632 on 352, 92.7 -> 92.0 at 5; 6656 on 416, 114.3 -> 107.1 at 4; 7168 on 448, 120.8
#: -> 115.5 at 4; 7680 on 480, 125.8 -> 123.9 at 4. The other blocks of 2 vectors gained
#: nothing or lost: 4096 on 256 (5 to 8 CTAs: 0.98x to 1.00x), 4608 on 288 (4 to 7: 0.99x
#: to 1.00x), 6144 on 384 (3 to 5: 0.99x to 1.00x), 8192 on 512 (4: 0.99x; with
#: ``l2_evict_last``, 1.02x: :data:`KEPT_TWO_VECTOR_CTAS`); f32 rows too (2560 and 3584).
TWO_VECTOR_CTAS = {320: 5, 352: 5, 416: 4, 448: 4, 480: 4}
#: :data:`TWO_VECTOR_CTAS` for rows loaded with ``l2_evict_last``: the same, and 4 CTAs of
#: 512 threads (hidden 8192), where the policy gains only beside them. Measured on the H200
#: (``benchmarks/variants.py two-vector-ctas``, 2026-12-01, 16384 rows, us; six rounds bf16,
#: three of them an earlier experiment's, and three f16, from that experiment, whose cases
#: the sweep's f16 8192 row now times): 8192 with the field, bf16 131.2 to 131.4 at 2 CTAs
#: (``1024 // block``) against 128.8 to 129.0 at 4, f16 131.3 to 131.4 against 128.8 to
#: 129.0; without the field 4 CTAs ran 0.995x (bf16) and 0.997x (f16). With the field the
#: other blocks of 2 vectors ran no faster at other counts (4096, 4608, 6144: 0.99x to 1.00x).
KEPT_TWO_VECTOR_CTAS = {**TWO_VECTOR_CTAS, 512: 4}


def default_block(hidden: int, dtype: DType, window: bool = True,
                  fused_residual: bool = False) -> int:
    """Threads per CTA for rows of ``hidden`` elements of ``dtype`` (the ``block`` default).

    See :func:`specdsl.kernels._rows.row_block`: up to 512 threads with 2 to 8 16-byte
    vectors a thread, 1024 for rows longer than that, which then take chunks. A length
    that is not a whole number of 16-byte vectors counts the vectors of its window;
    ``window=False``: of the widest vector dividing ``hidden`` (RMSNormQuant, whose rows
    move in those). f16/bf16 rows of 16-byte vectors without ``fused_residual`` that this
    gives :data:`PACKED_ROW_THREADS` threads or more at 3 vectors a thread take
    :func:`packed_row_block` instead (hidden 10240: 320 threads, not 448; 12288: 384, not
    512).

    Measured on the H200 (``benchmarks/variants.py rmsnorm-long-rows``, two rounds,
    16384 rows, bf16, docs/kernels/rmsnorm.md "Packed rows"): hidden 10240, 164.0 us on 320
    threads x 3 CTAs against 179.5 on 448 (88.3% of the copy rate to 96.7%); 12288, 198.8
    against 204.9. With the residual, which moves twice the bytes a row, the same blocks
    ran 0.6 to 1.4% slower, so those rows keep theirs.
    """
    packed = None if fused_residual else packed_row_block(hidden, dtype)
    if packed is not None:
        return packed
    lanes, vectors = row_vectors(hidden, dtype, window and windowed(hidden, dtype))
    return row_block(vectors, vector_registers(lanes, dtype))


def packed_row_block(hidden: int, dtype: DType) -> int | None:
    """The block of an f16/bf16 row of ``hidden`` elements in 16-byte vectors that
    :func:`~specdsl.kernels._rows.row_block` gives :data:`PACKED_ROW_THREADS` threads or more
    at 3 vectors a thread: the fewest warps that hold it at
    :data:`PACKED_ROW_VECTORS` (hidden 9992 to 12288: 320 to 384 threads). None for other
    rows (f32, narrower vectors, or any other length); rows in a window spilled 12 bytes
    on such blocks (10241 on 352 threads), so they are not packed rows either."""
    if not _sixteen_byte(hidden, dtype):
        return None
    lanes = vector_elements(hidden, dtype)
    vectors = hidden // lanes
    plain = row_block(vectors, vector_registers(lanes, dtype))
    if plain < PACKED_ROW_THREADS or cdiv(vectors, plain) != PACKED_ROW_VECTORS - 1:
        return None
    return threads_for(vectors, PACKED_ROW_VECTORS)


def default_min_ctas(hidden: int, dtype: DType, block: int, fused_residual: bool,
                     rows_per_cta: int = 1, l2_evict_last: bool = False) -> int | None:
    """CTAs an SM must hold (``.minnctapersm``, the ``min_ctas_per_sm`` default), without
    the residual:

    * :data:`PACKED_ROW_CTAS` for a packed row (:func:`packed_row_block`) on the packed
      block, given or defaulted (so that naming the default block gives the default
      request; ``1024 // block`` would give its 352 and 384 threads 2, and the rule's
      blocks were measured at 3);
    * :data:`TWO_VECTOR_CTAS` for an f16/bf16 row of exactly 2 16-byte vectors a thread,
      one a CTA, on the blocks it names (hidden 5120, 5632, 6656, 7168, 7680 on their
      default blocks), or with ``l2_evict_last`` :data:`KEPT_TWO_VECTOR_CTAS` (8192 too);
    * else None (``1024 // block``).
    """
    if fused_residual:
        return None
    if packed_row_block(hidden, dtype) == block:
        return PACKED_ROW_CTAS
    two_whole_vectors = (rows_per_cta == 1 and _sixteen_byte(hidden, dtype)
                         and hidden * dtype.size // 16 == 2 * block)
    table = KEPT_TWO_VECTOR_CTAS if l2_evict_last else TWO_VECTOR_CTAS
    return table.get(block) if two_whole_vectors else None


def _sixteen_byte(hidden: int, dtype: DType) -> bool:
    """f16/bf16 rows that move in whole 16-byte vectors (``hidden`` a multiple of 8)."""
    return dtype.size == 2 and vector_elements(hidden, dtype) * dtype.size == 16
