"""Launch geometry shared by the built-in kernels: ceiling division, the grid limit, and
the block policy of the row kernels (one CTA per row: RMSNorm, Softmax, Fp8Quant)."""

from __future__ import annotations

from ..dtype import DType
from ..errors import SpecError

__all__ = ["MAX_GRID_X", "cdiv", "row_block", "row_launch_dims", "check_whole_vectors", "threads_for"]

#: Largest grid.x of a launch (CUDA's limit for compute capability 3.0 and newer).
MAX_GRID_X = 2**31 - 1


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, ``b > 0``: the pieces of ``b`` that cover ``a`` (exact for
    any size, unlike ``math.ceil(a / b)``, which goes through a float)."""
    return -(-a // b)


def row_block(elements: int, dtype: DType, vectors_per_thread: int,
              preferred_threads: int = 512) -> int:
    """Threads per CTA for a row of ``elements`` of ``dtype`` held in registers.

    At most ``preferred_threads`` threads with at least two 16-byte vectors each, as
    many vectors as that takes up to ``vectors_per_thread``; more threads (up to 1024)
    only for rows longer than ``preferred_threads * vectors_per_thread`` vectors.
    Measured on the H200 (docs/kernels/rmsnorm.md, softmax.md): a 1024-thread CTA leaves
    one CTA per SM, whose reduction bubbles idle the memory system (about 70% of copy
    bandwidth against 93% with 512 threads at 16384 x 16384 RMSNorm); Softmax, with two
    CTA reductions a row, does best with 256 threads (cols 8192: 90.5% against 88.3%).
    """
    vectors = max(1, elements // dtype.vector_lanes)
    if vectors <= 32:
        return 32
    per_thread = min(vectors_per_thread, max(2, cdiv(vectors, preferred_threads)))
    return min(1024, max(32, threads_for(vectors, per_thread)))


def threads_for(vectors: int, per_thread: int) -> int:
    """The fewest threads, in whole warps of 32, holding ``vectors`` at ``per_thread`` each."""
    return cdiv(cdiv(vectors, per_thread), 32) * 32


def row_launch_dims(kernel: str, rows: int, block: int
                    ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """``(grid, block)`` for ``rows`` rows: one CTA of ``block`` threads per row.

    Raises:
        SpecError: ``rows`` is not an int from 1 to 2**31 - 1.
    """
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= MAX_GRID_X:
        raise SpecError(f"{kernel} rows = {rows!r} is invalid: expected an int from 1 "
                        f"to {MAX_GRID_X} (one CTA per row)")
    return (rows, 1, 1), (block, 1, 1)


def check_whole_vectors(elements: int, dtype: DType) -> None:
    """Refuse a row length that is not a positive number of 16-byte vectors of ``dtype``.

    Raises:
        ValueError: naming the multiple expected (the spec turns it into a SpecError).
    """
    lanes = dtype.vector_lanes
    if elements <= 0 or elements % lanes:
        raise ValueError(f"expected a positive multiple of {lanes} (one 16-byte vector of "
                         f"{dtype}: rows are loaded as whole vectors)")
