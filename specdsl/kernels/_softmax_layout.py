"""How a Softmax row maps onto CTAs: the vector a row moves in, the threads of a CTA, the
chunks a row is walked in and the rows a CTA holds (``templates/softmax.ptx.j2`` renders
the same layout; ``specdsl.kernels.softmax`` checks a spec's fields against it)."""

from __future__ import annotations

from typing import Any

from .._spec.dtype import DType
from ._rows import (
    MAX_SPLIT,
    cdiv,
    ctas_per_sm,
    most_vectors_per_thread,
    register_cap,
    row_block,
    row_vectors,
    vector_elements,
    vector_registers,
    windowed,
)

__all__ = ["MOST_CHUNKS", "VECTORS_PER_THREAD", "MAX_SPLIT", "ROWS_PER_CTA", "MORE_CTAS",
           "KEPT_MORE_CTAS", "KEPT_EXPONENTIALS_MARGIN", "exponentials_refusal",
           "default_block", "layout", "count_chunks", "resident_geometry", "default_block_of",
           "default_rows_per_cta", "default_min_ctas"]

#: Chunks a CTA may walk a row in (templates/softmax.ptx.j2 requires it).
MOST_CHUNKS = 8

#: Most 16-byte vectors of a row one thread holds in registers at a time (32 words;
#: narrower vectors: 16 of 8 bytes, 32 of 4 or 2, see ``_rows.most_vectors_per_thread``).
VECTORS_PER_THREAD = 8

#: The ``rows_per_cta`` default (rows of one CTA, split 1): candidates 2 and 4 are timed by
#: ``benchmarks/variants.py copy-rate`` (docs/kernels/softmax.md).
ROWS_PER_CTA = 1
#: CTAs an SM for f16/bf16 rows of these lengths on their default block (unsplit, one a
#: CTA), where more CTAs than the registers left room for ran faster, without spills
#: (ptxas keeps to 32 registers at 256 threads x 7, 40 at 224 or 256 x 6). Measured on the
#: H200 (``benchmarks/variants.py softmax-ctas``, 2026-12-01, bf16, 16384 rows, two rounds,
#: us): cols 4096 (256 threads) 70.3 -> 69.1 at 7; 5120 (224) 87.1 -> 84.1 at 6; 5632
#: (256) 92.9 -> 92.1 at 6. At every other multiple of 512 from 4608 to 8192 more CTAs ran
#: 0.81x to 1.00x.
MORE_CTAS = {4096: 7, 5120: 6, 5632: 6}
#: :data:`MORE_CTAS` with ``l2_evict_last``, where x stays in L2: cols 7680 (256 threads)
#: takes 6 CTAs an SM too (40 registers, no spills). Measured on the H200
#: (``benchmarks/variants.py softmax-kept-ctas --rounds 3``, 2026-12-01, bf16, 16384 rows,
#: us, the range over the rounds): 121.8 to 122.1 at 4 CTAs, 120.6 to 120.8 at 6 (1.010x);
#: without the field 6 ran 0.99x (``softmax-ctas``). The other rows of MORE_CTAS gain as
#: without it; every other multiple of 512 from 4608 to 8192 ran at most 0.6% faster at
#: another count.
KEPT_MORE_CTAS = {**MORE_CTAS, 7680: 6}


def default_block(cols: int, dtype: DType) -> int:
    """Threads per CTA for rows of ``cols`` elements of ``dtype`` (the ``block`` default).

    See :func:`specdsl.kernels._rows.row_block`: at most 256 threads with at least two
    16-byte vectors each, up to :data:`VECTORS_PER_THREAD` (cols 8192 bf16: 256 x 4;
    32768: 512 x 8; a window's vectors, :func:`~specdsl.kernels._rows.row_vectors`).
    """
    return _block_for(*layout(cols, dtype, 1, 1), dtype)


def layout(cols: int, dtype: DType, split: int, rows_per_cta: int) -> tuple[int, int]:
    """(elements a vector, vectors of a CTA's part of a row), as softmax.ptx.j2: a window
    (split 1, a row a CTA, 8 chunks at most), else the widest vector dividing ``cols``."""
    if split == 1 and rows_per_cta == 1 and windowed(cols, dtype):
        lanes, vectors = row_vectors(cols, dtype, True)
        if vectors <= MOST_CHUNKS * 1024 * VECTORS_PER_THREAD:  # else too long a window
            return lanes, vectors
    lanes = vector_elements(cols, dtype)
    return lanes, cols // split // lanes


def count_chunks(vectors: int, most: int, block: int) -> int:
    """Chunks of ``block`` threads x up to ``most`` vectors that cover ``vectors``."""
    return cdiv(vectors, block * min(most, cdiv(vectors, block)))


def resident_geometry(spec: Any, rows_per_cta: int) -> tuple[int, int, int]:
    """(vectors a thread holds, most it may hold, chunks) of a CTA's part of a row."""
    lanes, vectors = layout(spec.cols, spec.dtype, spec.split, rows_per_cta)
    most = most_vectors_per_thread(lanes, spec.dtype)
    return min(most, cdiv(vectors, spec.block)), most, count_chunks(vectors, most, spec.block)


def default_block_of(spec: Any) -> int:
    """The ``block`` default of a spec being built (its ``cols``, ``dtype`` and ``split``)."""
    # a split out of range or not into whole vectors is refused by its validator: size the
    # block for the whole row (rows_per_cta, set after block, is taken as 1, its default)
    split = spec.split if 1 <= spec.split <= MAX_SPLIT else 1
    split = 1 if spec.cols % (vector_elements(spec.cols, spec.dtype) * split) else split
    return _block_for(*layout(spec.cols, spec.dtype, split, 1), spec.dtype)


def default_rows_per_cta(spec: Any) -> int:
    """:data:`ROWS_PER_CTA`, or fewer where the registers cannot hold that many rows (and
    1 for split or chunked rows, and rows walked in a window)."""
    if not (isinstance(spec.cols, int) and spec.cols >= 1 and 1 <= spec.split <= MAX_SPLIT) \
            or spec.cols % (vector_elements(spec.cols, spec.dtype) * spec.split):
        return 1  # cols or split is refused: its own validator says why
    per_thread, most, n_chunks = resident_geometry(spec, 1)
    fits = [r for r in (4, 2, 1) if r <= ROWS_PER_CTA and r * per_thread <= most]
    plain = n_chunks == 1 and spec.split == 1 and not windowed(spec.cols, spec.dtype)
    return fits[0] if plain else 1


#: Registers a thread needs besides its kept exponentials (``keep_exponentials``): with 24,
#: none of 433 requests (every dtype, cols 1024 to 32768, blocks 64 to 1024, 1 or 2 rows a
#: CTA, 4 to 8 CTAs an SM) spills under nvJitLink 13 for sm_90; with 16, those whose
#: exponentials left exactly 16 registers of the cap spilled 16 to 28 bytes.
KEPT_EXPONENTIALS_MARGIN = 24


def exponentials_refusal(spec: Any) -> str | None:
    """Why a spec being validated cannot keep its exponentials (``keep_exponentials``), or
    None: its rows must be held in registers (one chunk), and its exponentials a thread
    (rows a CTA x vectors a thread x elements a vector, f32 each) and
    :data:`KEPT_EXPONENTIALS_MARGIN` more must fit the registers its CTAs an SM leave
    (:func:`~specdsl.kernels._rows.register_cap`; a window of up to 3 vectors a thread
    without ``min_ctas_per_sm`` keeps to 40, its ``.maxnreg``)."""
    per_thread, _, chunks = resident_geometry(spec, spec.rows_per_cta)
    row = f"cols={spec.cols} {spec.dtype.ptx}"
    if chunks > 1:
        return (f"expected False for {row}: the row takes {chunks} chunks, whose exponentials "
                "pass 2 computes again from x")
    ctas = ctas_per_sm(spec.min_ctas_per_sm, spec.block)
    cap = register_cap(ctas, spec.block)
    if spec.windowed and spec.min_ctas_per_sm is None and per_thread <= 3:
        cap = min(cap, 40)  # the template's .maxnreg for such a window
    kept = spec.rows_per_cta * per_thread * spec.vector
    if kept + KEPT_EXPONENTIALS_MARGIN > cap:
        return (f"expected False for {row} on {spec.block} threads: {kept} exponentials a "
                f"thread and {KEPT_EXPONENTIALS_MARGIN} more registers exceed the {cap} that "
                f"{ctas} CTAs an SM leave (fewer min_ctas_per_sm, or fewer rows a CTA, leave "
                "room)")
    return None


def default_min_ctas(spec: Any) -> int | None:
    """The ``min_ctas_per_sm`` default of a spec being built: :data:`MORE_CTAS` (with
    ``l2_evict_last``, :data:`KEPT_MORE_CTAS`) for an f16/bf16 row it names, unsplit, one a
    CTA, on its default block, without ``keep_exponentials``; else None (``1024 // block``)."""
    if spec.keep_exponentials:  # for few rows, where more CTAs an SM buy nothing
        return None
    table = KEPT_MORE_CTAS if spec.l2_evict_last else MORE_CTAS
    ctas = table.get(spec.cols) if isinstance(spec.cols, int) else None
    if ctas is None or spec.dtype.size != 2 or (spec.split, spec.rows_per_cta) != (1, 1):
        return None
    return ctas if spec.block == default_block(spec.cols, spec.dtype) else None


def _block_for(lanes: int, vectors: int, dtype: DType) -> int:
    return row_block(vectors, vector_registers(lanes, dtype), preferred_threads=256)
