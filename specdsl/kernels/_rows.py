"""Launch geometry shared by the built-in kernels: ceiling division, the grid limit, and
the block policy of the row kernels (one CTA per row: RMSNorm, Softmax, Fp8Quant)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from .._spec.dtype import DType
from ..errors import SpecError
from ._checks import launch_count

__all__ = ["MAX_GRID_X", "ROW_REGISTERS", "cdiv", "vector_elements", "vector_registers",
           "windowed", "row_vectors",
           "most_vectors_per_thread", "row_block", "row_launch_dims", "check_length", "threads_for",
           "ROWS_PER_CTA", "check_rows_per_cta", "check_min_ctas_per_sm", "min_ctas_per_sm_field",
           "l2_evict_last_field",
           "register_cap", "ctas_per_sm",
           "min_ctas_for",
           "check_resident", "check_resident_block", "MAX_SPLIT", "check_split",
           "ONE_VECTOR_PART", "PART_VECTORS", "MIN_PART_VECTORS", "CTAS_PER_SM", "spread_split",
           "CLUSTER_ROWS_PER_SM", "cluster_split"]

#: Largest grid.x of a launch (CUDA's limit for compute capability 3.0 and newer).
MAX_GRID_X = 2**31 - 1


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, ``b > 0``: the pieces of ``b`` that cover ``a`` (exact for
    any size, unlike ``math.ceil(a / b)``, which goes through a float)."""
    return -(-a // b)


#: Registers a thread of a row kernel keeps its part of the row in: 8 vectors of 16
#: bytes, or 32 narrower vectors (one register each).
ROW_REGISTERS = 32


def vector_elements(length: int, dtype: DType) -> int:
    """Elements of ``dtype`` one vector load moves for rows of ``length`` elements.

    The largest power of two that divides ``length``, at most 16 bytes' worth (8 f16/bf16,
    4 f32): rows of a ``[rows, length]`` array are ``length`` elements apart, so only a
    width that divides the length keeps every row's start aligned to its vectors. A
    length that is a multiple of 8 (f16/bf16) or 4 (f32) gets 16-byte vectors; 4100 bf16
    gets 8-byte vectors; an odd length gets one element a load (templates/vector.ptx.j2's
    ``elements`` computes the same).
    """
    return min(dtype.vector_lanes, length & -length) if length > 0 else 1


def windowed(length: int, dtype: DType) -> bool:
    """Is a row of ``length`` elements walked in a window of 16-byte vectors
    (``templates/window.ptx.j2``)? Yes when the widest vector dividing ``length``
    (:func:`vector_elements`) is under 8 bytes: such rows start at different phases of a
    vector, so the kernel moves the aligned 16-byte vectors that cover each row and stores
    only the two edge vectors element by element. 8-byte vectors keep the 16-byte speed
    (RMSNorm 4100: 72.7 us against 72.4 at 4104, H200, docs/performance.md), so a length
    they divide keeps them."""
    return vector_elements(length, dtype) * dtype.size < 8


def row_vectors(length: int, dtype: DType, window: bool) -> tuple[int, int]:
    """``(elements a vector, vectors a CTA walks a row)`` for rows of ``length``: with
    ``window``, 16-byte vectors and the most a row at any phase touches,
    ``ceil((length + lanes - 1) / lanes)`` (templates/window.ptx.j2's ``vectors``);
    otherwise :func:`vector_elements` and ``length`` divided by it."""
    if window:
        lanes = dtype.vector_lanes
        return lanes, cdiv(length + lanes - 1, lanes)
    lanes = vector_elements(length, dtype)
    return lanes, length // lanes


def vector_registers(elements: int, dtype: DType) -> int:
    """32-bit registers one vector of ``elements`` elements of ``dtype`` occupies (one for
    a vector narrower than a register)."""
    return max(1, elements * dtype.size // 4)


def most_vectors_per_thread(elements: int, dtype: DType) -> int:
    """Vectors of ``elements`` elements a thread keeps in :data:`ROW_REGISTERS` registers:
    8 of 16 bytes, 16 of 8 bytes, 32 narrower ones."""
    return ROW_REGISTERS // vector_registers(elements, dtype)


def row_block(vectors: int, registers: int, preferred_threads: int = 512) -> int:
    """Threads per CTA for a row of ``vectors`` vectors of ``registers`` registers each.

    At most ``preferred_threads`` threads with at least two 16-byte vectors' worth each
    (two 16-byte vectors, four of 8 bytes, eight narrower ones), as many as that takes up
    to :data:`ROW_REGISTERS` registers a thread; more threads (up to 1024) only for
    longer rows. Measured on the H200 (docs/kernels/rmsnorm.md, softmax.md): a 1024-thread
    CTA leaves one CTA per SM, whose reduction bubbles idle the memory system (about 70%
    of copy bandwidth against 93% with 512 threads at 16384 x 16384 RMSNorm); Softmax,
    with two CTA reductions a row, does best with 256 threads (cols 8192: 90.5% against
    88.3%).
    """
    if vectors <= 32:
        return 32
    most = ROW_REGISTERS // registers
    per_thread = min(most, max(8 // registers, cdiv(vectors, preferred_threads)))
    return min(1024, max(32, threads_for(vectors, per_thread)))


def threads_for(vectors: int, per_thread: int) -> int:
    """The fewest threads, in whole warps of 32, holding ``vectors`` at ``per_thread`` each."""
    return cdiv(cdiv(vectors, per_thread), 32) * 32


def row_launch_dims(kernel: str, rows: int, block: int, rows_per_cta: int = 1, split: int = 1,
                    name: str = "rows") -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """``(grid, block)`` for ``rows`` rows: one CTA of ``block`` threads per
    ``rows_per_cta`` rows (the last CTA may hold fewer), or ``split`` CTAs a row (one
    cluster, consecutive along x).

    ``name`` is what the caller calls the count (``rows``, ``tokens``), for the message.

    Raises:
        SpecError: ``rows`` is not an int from 1 to 2**31 - 1, or ``rows * split`` CTAs
            exceed 2**31 - 1.
    """
    rows = launch_count(kernel, name, rows)
    if not 1 <= rows <= MAX_GRID_X:
        most = MAX_GRID_X // split
        per_cta = "one CTA per row" if split == 1 else f"{split} CTAs a row"
        raise SpecError(f"{kernel} {name} = {rows!r} is invalid: expected an int from 1 "
                        f"to {most} ({per_cta})")
    ctas = cdiv(rows, rows_per_cta)
    if ctas * split > MAX_GRID_X:
        raise SpecError(f"{kernel} {name} = {rows} is invalid: expected at most "
                        f"{MAX_GRID_X // split} {name} at split={split} ({split} CTAs a row)")
    return (ctas * split, 1, 1), (block, 1, 1)


#: Most CTAs of one cluster a row may be split over (Softmax's ``split``, SiluMulQuant's and
#: Fp8Quant's with the dynamic scale): the largest portable cluster (CUDA Programming Guide,
#: "Thread Block Clusters": 8 CTAs on every device that has clusters).
MAX_SPLIT = 8
#: :func:`check_split`'s ``cluster_why`` for the FP8 kernels, whose dynamic scale alone
#: splits over a cluster.
DYNAMIC_SCALE_CLUSTER = (" for the dynamic scale (the largest portable cluster; the static "
                         "and group scales take more)")


def check_split(field: str, length: int, dtype: DType, split: int, cluster: bool = True,
                group: int = 0, cluster_why: str = " (the largest portable cluster)") -> int:
    """Refuse a ``split`` (CTAs sharing a row of ``length`` elements, named ``field`` in the
    message) that does not cut the row into equal whole vectors of :func:`vector_elements`
    (and, with ``group``, into parts of whole groups of that many elements), or, for CTAs
    of one cluster (``cluster``), more than :data:`MAX_SPLIT`, the message then ending in
    ``cluster_why``. CTAs that share nothing (``cluster=False``) may be as many as the row
    has vectors. Returns the vectors of a part.

    Raises:
        ValueError: naming what is expected (the spec turns it into a SpecError).
    """
    if isinstance(split, bool) or not isinstance(split, int) or split < 1 \
            or (cluster and split > MAX_SPLIT):
        most = f"to {MAX_SPLIT} CTAs a row{cluster_why}" if cluster else "or more CTAs a row"
        raise ValueError(f"expected 1 (one CTA a row) {most}")
    lanes = vector_elements(length, dtype)
    part, rest = divmod(length // lanes, split)
    if rest or not part:
        raise ValueError(f"expected a split of the row into equal whole "
                         f"{lanes * dtype.size}-byte vectors ({field}={length} of {dtype} is "
                         f"{length // lanes} vectors)")
    if group and part * lanes % group:
        raise ValueError(f"expected a split into whole groups of {group} ({field}={length} is "
                         f"{length // group} groups)")
    return part


#: A CTA's part of a split row (SiluMulQuant's, Fp8Quant's) up to this many vectors is
#: loaded one vector a thread (the ``block`` defaults).
ONE_VECTOR_PART = 512
#: :func:`spread_split` gives parts of at most this many vectors (one vector a thread of 4
#: warps) where the SMs allow it (SiluMulQuant, measured best at 1 to 8 tokens of 14336
#: and 18432 on the H200).
PART_VECTORS = 128
#: :func:`spread_split` never leaves a part under a warp's worth of vectors.
MIN_PART_VECTORS = 32
#: :func:`spread_split` keeps ``tokens * split`` within this many CTAs an SM (SiluMulQuant
#: on the H200: 512 CTAs led 256 at 64 to 256 tokens).
CTAS_PER_SM = 4


def spread_split(vectors: int, tokens: int, sm_count: int, takes: Callable[[int], bool],
                 part_vectors: int = PART_VECTORS, ctas_per_sm: int = CTAS_PER_SM) -> int:
    """CTAs a row for few rows of ``vectors`` vectors, when the CTAs of a row share
    nothing (SiluMulQuant's and Fp8Quant's static and group scales).

    The fewest CTAs whose parts are at most ``part_vectors`` vectors, where ``tokens *
    split`` stays within ``ctas_per_sm`` CTAs an SM of the device's ``sm_count``; past
    that bound, the largest power of two within it; 1 where none is. Each split cuts the
    row into equal parts of at least :data:`MIN_PART_VECTORS` vectors that ``takes(split)``
    accepts (the kernel's own conditions: whole groups of 128, say). Measured on the H200:
    docs/kernels/silu_mul.md and fp8_quant.md, "Few tokens".
    """
    if tokens < 1:
        return 1
    most = min(ctas_per_sm * sm_count // tokens, vectors // MIN_PART_VECTORS)
    fewest = next((s for s in range(1, most + 1) if vectors <= s * part_vectors), most + 1)
    # past the bound, powers of two: fewer distinct requests (modules) over the row counts
    candidates = [*range(fewest, most + 1),
                  *(s for s in (64, 32, 16, 8, 4, 2) if s < fewest and s <= most)]
    return next((s for s in candidates if vectors % s == 0 and takes(s)), 1)


#: The most rows a cluster split of 8, 4 or 2 CTAs a row serves, as a fraction of the
#: device's SM count (33, 60 and 66 rows on an H200's 132 SMs): 8 CTAs a row pay while
#: the rows fill a quarter of the SMs, 4 while they fill 0.46 of them (best at 40 to 60
#: rows, and slower than 2 or 1 at 66), 2 to half. Measured on the H200 (bf16, graph
#: replay; ``benchmarks/variants.py split-bounds``, ``split-bounds-more``, 2026-12-02):
#: docs/kernels/softmax.md, "Rows split over a cluster", and silu_mul.md, "Few tokens".
CLUSTER_ROWS_PER_SM: Mapping[int, Fraction] = {
    8: Fraction(1, 4), 4: Fraction(46, 100), 2: Fraction(1, 2)}


def cluster_split(vectors: int, rows: int, sm_count: int, takes: Callable[[int], bool], *,
                  min_vectors: int,
                  rows_per_sm: Mapping[int, Fraction] = CLUSTER_ROWS_PER_SM) -> int:
    """CTAs a row for few rows (tokens) of ``vectors`` vectors whose CTAs meet in a cluster
    reduction (Softmax, SiluMulQuant's and Fp8Quant's dynamic scales).

    The largest split of ``rows_per_sm`` (8, 4 or 2) whose bound the rows keep within
    (``rows <= rows_per_sm[split] * sm_count``, ``sm_count`` the device's SM count), that
    cuts the row into equal parts of at least :data:`MIN_PART_VECTORS` vectors and that
    ``takes(split)`` accepts (the kernel's own conditions); 1 for rows of fewer than
    ``min_vectors`` vectors, where the cluster barrier costs more than the split saves, for
    no rows, and beyond every bound.
    """
    if rows < 1 or vectors < min_vectors:
        return 1
    return next((split for split, most in sorted(rows_per_sm.items(), reverse=True)
                 if rows <= most * sm_count and vectors % split == 0
                 and vectors // split >= MIN_PART_VECTORS and takes(split)), 1)


#: The values ``rows_per_cta`` may take (RMSNorm, Softmax): rows a CTA reduces together.
ROWS_PER_CTA = (1, 2, 4)


def check_rows_per_cta(value: int, chunks: int, per_thread: int, most: int) -> None:
    """Refuse a ``rows_per_cta`` other than 1, 2 or 4, or more rows than the registers hold
    together: ``value`` rows of ``per_thread`` vectors a thread, at most ``most``, and
    only rows that fit the registers (``chunks`` 1).

    Raises:
        ValueError: naming what is expected (the spec turns it into a SpecError).
    """
    if isinstance(value, bool) or value not in ROWS_PER_CTA:
        raise ValueError(f"expected one of {', '.join(map(str, ROWS_PER_CTA))} rows a CTA")
    if value > 1 and chunks > 1:
        raise ValueError("expected 1 for rows longer than the registers hold (chunks)")
    if value * per_thread > most:
        raise ValueError(f"expected at most {max(1, most // per_thread)}: {value} rows of "
                         f"{per_thread} vectors a thread exceed the {most} a thread holds")


def check_min_ctas_per_sm(value: int | None, block: int) -> None:
    """Refuse a ``min_ctas_per_sm`` (``.minnctapersm``) an SM of compute capability 9.0
    cannot hold: more than 32 CTAs or 2048 threads (CUDA Programming Guide, "Compute
    Capabilities", table of technical specifications).

    Raises:
        ValueError: naming what is expected.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 32 \
            or value * block > 2048:
        raise ValueError(f"expected None or 1 to {min(32, 2048 // block)} CTAs of {block} "
                         f"threads an SM (at most 2048 threads and 32 CTAs)")


def min_ctas_per_sm_field(instance: Any, attribute: Any, value: int | None) -> None:
    """attrs validator of a ``min_ctas_per_sm`` field: :func:`check_min_ctas_per_sm` with
    the spec's ``block`` (RMSNorm, RMSNormQuant, Softmax)."""
    check_min_ctas_per_sm(value, instance.block)


def l2_evict_last_field(instance: Any, attribute: Any, value: bool) -> None:
    """attrs validator of an ``l2_evict_last`` field (RMSNorm, RMSNormQuant, Softmax): True
    only for rows held in registers on one CTA (one chunk, no cluster split) in whole 16-byte
    vectors, the loads the policy is written for. A spec without ``chunks``, ``windowed`` or
    ``split`` (RMSNormQuant) always holds its row so.

    Raises:
        ValueError: (a ``SpecError`` naming the field, from attrs) True for a row split over
            a cluster, a row in chunks (whose two passes carry L2 policies of their own), a
            row in a window, or a row of 8-byte or narrower vectors.
    """
    if not value:
        return
    length = "hidden" if hasattr(instance, "hidden") else "cols"
    row = f"{length}={getattr(instance, length)} {instance.dtype.ptx}"
    split = getattr(instance, "split", 1)
    if split > 1:
        raise ValueError(f"expected False for {row} with split={split}: the policy applies to "
                         "rows on one CTA")
    windowed = getattr(instance, "windowed", False)
    if windowed or instance.vector_bytes != 16:
        moves = ("is walked in a window" if windowed else
                 f"moves in {instance.vector_bytes}-byte vectors")
        raise ValueError(f"expected False for {row}: the policy applies to rows of whole 16-byte "
                         f"vectors ({length} a multiple of {16 // instance.dtype.size}), and this "
                         f"row {moves}")
    chunks = getattr(instance, "chunks", 1)
    if chunks > 1:  # rows of 16-byte vectors, so the block holds `most` of them a thread
        lanes = 16 // instance.dtype.size
        held = instance.block * most_vectors_per_thread(lanes, instance.dtype) * lanes
        raise ValueError(f"expected False for {row}: the registers of {instance.block} threads "
                         f"hold at most {held} elements, and a longer row (this one takes "
                         f"{chunks} chunks) takes two passes with L2 policies of their own")


def register_cap(ctas: int, block: int) -> int:
    """Registers a thread that ``.minnctapersm ctas`` leaves a kernel of ``block`` threads
    on compute capability 9.0, which ptxas keeps to.

    An SM's 65536 registers are split among its 4 warp schedulers, 16384 each, and a CTA's
    warps are spread over them, so ``ceil(ctas * warps / 4)`` warps share one scheduler's
    registers; a thread's are counted in units of 8, at most 255 (CUDA C++ Programming
    Guide, "Compute Capabilities"). That is why 3 CTAs of 448 threads keep to 40 registers
    and not 48 (``65536 / 1344``): 42 warps put 11 on a scheduler. ptxas's ``-v`` report
    agrees for every block the built-ins use (tests/test_kernel_rmsnorm_quant.py).
    """
    per_scheduler = cdiv(ctas * cdiv(block, 32), 4)
    return min(255, 65536 // 4 // (per_scheduler * 32) // 8 * 8)


def ctas_per_sm(min_ctas_per_sm: int | None, block: int) -> int:
    """The CTAs an SM a ``min_ctas_per_sm`` field asks for: its value, or what ``None``
    means, ``1024 // block`` (``templates/rows.ptx.j2``'s ``min_ctas_directive`` alike)."""
    return min_ctas_per_sm or 1024 // block


def min_ctas_for(block: int, registers: int) -> int:
    """The ``.minnctapersm`` that holds at least 1024 threads an SM of compute capability
    9.0, ``ceil(1024 / block)`` CTAs, where ``registers`` a thread still fit
    (:func:`register_cap`); else ``1024 // block``, the most CTAs of at most 1024 threads.

    ``1024 // block`` alone leaves a block that does not divide 1024 short: 4 CTAs of 224
    threads are 896, where 5 fit in 56 registers a thread.
    """
    most = cdiv(1024, block)
    return most if register_cap(most, block) >= registers else max(1, 1024 // block)


def check_length(elements: int) -> None:
    """Refuse a row length that is not a positive int (any length is a whole number of
    vectors of :func:`vector_elements`).

    Raises:
        ValueError: naming what is expected (the spec turns it into a SpecError).
    """
    if isinstance(elements, bool) or not isinstance(elements, int) or elements <= 0:
        raise ValueError("expected a positive number of elements")


def check_resident(length: int, dtype: DType) -> None:
    """Refuse a row of ``length`` that 1024 threads cannot keep in registers (32 a thread:
    65536 f16/bf16 elements of 16-byte vectors, 32768 f32 or odd lengths), for kernels
    that hold the whole row (the fused FP8 epilogues, whose row max needs all of y).

    Raises:
        ValueError: a length that is not positive, or too long.
    """
    check_length(length)
    lanes = vector_elements(length, dtype)
    longest = 1024 * most_vectors_per_thread(lanes, dtype) * lanes
    if length > longest:
        raise ValueError(f"expected at most {longest} elements of {dtype} in "
                         f"{lanes * dtype.size}-byte vectors (this length's widest): the row "
                         f"stays in registers, {most_vectors_per_thread(lanes, dtype)} vectors "
                         f"a thread of 1024")


def check_resident_block(length: int, dtype: DType, block: int, split: int = 1) -> None:
    """Refuse a ``block`` too small to keep a row of ``length`` (its part, with ``split``
    CTAs a row) in registers.

    Raises:
        ValueError: naming the fewest threads that hold it.
    """
    lanes = vector_elements(length, dtype)
    vectors, most = length // lanes // split, most_vectors_per_thread(lanes, dtype)
    if vectors > block * most:
        of = "a row" if split == 1 else f"a CTA's part (split={split})"
        raise ValueError(f"expected at least {threads_for(vectors, most)} threads: {of} of "
                         f"{vectors} vectors, at most {most} a thread kept in registers")
