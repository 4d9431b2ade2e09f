"""Softmax: numerically stable row-wise softmax of ``x * scale``."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import attrs

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked
from .._templating import immediates
from ..errors import RenderError, SpecError
from ._checks import FLOAT_DTYPES, count, one_of
from ._rows import (
    CLUSTER_ROWS_PER_SM,
    check_length,
    check_rows_per_cta,
    check_split,
    cluster_split,
    l2_evict_last_field,
    min_ctas_per_sm_field,
    most_vectors_per_thread,
    row_launch_dims,
    threads_for,
    vector_elements,
)
from ._softmax_layout import (
    KEPT_EXPONENTIALS_MARGIN,
    KEPT_MORE_CTAS,
    MAX_SPLIT,
    MORE_CTAS,
    MOST_CHUNKS,
    ROWS_PER_CTA,
    count_chunks,
    default_block,
    default_block_of,
    default_min_ctas,
    default_rows_per_cta,
    exponentials_refusal,
    layout,
    resident_geometry,
)
from ._softmax_reference import example, reference

__all__ = ["Softmax", "reference", "example", "suggested_split", "suggested_keep_exponentials",
           "default_block", "MAX_COLS", "MAX_SPLIT", "ROWS_PER_CTA", "MORE_CTAS", "KEPT_MORE_CTAS",
           "KEPT_EXPONENTIALS_MARGIN", "KEPT_EXPONENTIALS_ROWS_PER_SM", "LONG_PART_VECTORS"]

#: :func:`suggested_keep_exponentials` keeps the exponentials of at most this many rows an
#: SM (1056 on an H200's 132). Measured on the H200 (``benchmarks/variants.py
#: softmax-kept-rows``, two runs, 2026-12-02; bf16 cols 2048 to 8192, f16 8192, f32 4096 and
#: 16384): from 64 to 1056 rows 1.003x to 1.094x by events and 1.031x to 1.101x by CUDA-graph
#: replay, but 64 rows of 2048 (0.95x by graph replay, 1.00x to 1.02x by events); at 2112 rows
#: 0.995x to 1.046x; at 16384 rows 0.99x to 1.01x (docs/kernels/softmax.md, "How many rows").
KEPT_EXPONENTIALS_ROWS_PER_SM = 8

#: Longest row (8 chunks of 1024 threads x 8 vectors would allow 524288 f16/bf16;
#: one limit for every dtype, set when every chunk was unrolled and the PTX grew with the row).
MAX_COLS = 262144

#: Range of a nonzero |scale|: 2 * scale * log2(e), baked as one f32, must neither
#: overflow nor round to zero (about 2.4e-46 to 1.1793e38).
_MIN_SCALE = 2.0**-150 / (2 * math.log2(math.e))
_MAX_SCALE = (2 - 2**-23) * 2.0**127 / (2 * math.log2(math.e))


def _check_cols(instance: Any, attribute: Any, cols: int) -> None:
    check_length(cols)
    if cols > MAX_COLS:
        raise ValueError(f"expected at most {MAX_COLS} columns")


def _check_scale(instance: Any, attribute: Any, scale: float) -> None:
    # the PTX holds 2 * scale * log2(e) as one f32 immediate (see templates/softmax.ptx.j2)
    if not math.isfinite(2 * scale * math.log2(math.e)):
        raise ValueError("expected 2 * scale * log2(e) to be finite")
    if scale != 0.0:
        try:
            immediates.f32(2 * scale * math.log2(math.e))
        except RenderError:
            raise ValueError(f"expected 2 * scale * log2(e) to be a nonzero finite f32 "
                             f"(|scale| above {_MIN_SCALE:.3g} and up to {_MAX_SCALE:.5g}, "
                             f"or 0)") from None


def _check_split(instance: Any, attribute: Any, split: int) -> None:
    slice_vectors = check_split("cols", instance.cols, instance.dtype, split)
    if split > 1:
        most = 1024 * most_vectors_per_thread(vector_elements(instance.cols, instance.dtype),
                                              instance.dtype)
        if slice_vectors > most:
            raise ValueError(f"expected each CTA's slice to fit its registers (at most "
                             f"{most} vectors; this is {slice_vectors})")


def _check_block(instance: Any, attribute: Any, block: int) -> None:
    if not (32 <= block <= 1024 and block % 32 == 0):
        raise ValueError("expected a multiple of 32 from 32 to 1024 threads per CTA")
    lanes, vectors = layout(instance.cols, instance.dtype, instance.split, instance.rows_per_cta)
    most = most_vectors_per_thread(lanes, instance.dtype)
    if instance.split > 1:
        if count_chunks(vectors, most, block) > 1:
            least = threads_for(vectors, most)
            raise ValueError(f"expected at least {least} threads with split={instance.split}: "
                             f"each CTA holds its slice of {vectors} vectors in registers, "
                             f"{most} a thread")
    elif count_chunks(vectors, most, block) > MOST_CHUNKS:
        least = threads_for(vectors, MOST_CHUNKS * most)
        raise ValueError(f"expected at least {least} threads: a row of {vectors} vectors is "
                         f"held in at most {MOST_CHUNKS} chunks of {most} vectors a thread")


def _check_rows_per_cta(instance: Any, attribute: Any, value: int) -> None:
    per_thread, most, n_chunks = resident_geometry(instance, value)
    check_rows_per_cta(value, n_chunks, per_thread, most)
    if value > 1 and instance.split > 1:
        raise ValueError("expected 1 with split > 1 (a cluster shares one row)")


def _check_keep_exponentials(instance: Any, attribute: Any, value: bool) -> None:
    why = exponentials_refusal(instance) if value is True else None
    if why is not None:
        raise ValueError(why)


@kernel_spec(template="softmax.ptx.j2", entry="softmax")
class Softmax:
    """Row-wise softmax of ``x * scale`` over the last dimension.

    ``y[r, i] = exp(scale * x[r, i] - m_r) / sum_k exp(scale * x[r, k] - m_r)`` with
    ``m_r = max_k scale * x[r, k]`` (subtracting the maximum keeps every exponential
    in (0, 1]: no overflow). The kernel works in base 2 on the raw row: with
    ``M = max x`` (``min x`` for ``scale < 0``), ``2^(c (x - M))``, ``c = scale * log2 e``,
    formed as ``fma(x, 1/2, -M/2) * 2c`` so that no intermediate overflows for any
    finite x and accepted scale (``2c`` is one f32 constant, rounded once), by
    ``ex2.approx.ftz.f32`` (the PTX ISA, "ex2", bounds its relative error near 2^-22;
    subnormal results flush to zero, i.e. probabilities under 2^-126), accumulation in
    f32, one ``rcp.rn.f32`` per row, output rounded to ``dtype`` once.

    Special values give what ``torch.softmax(x * scale)`` gives: ``-inf`` elements (a
    mask, with ``scale > 0``) give 0; a row holding NaN, or ``+inf`` (``scale > 0``), or
    no finite element at all (a fully masked row) gives NaN everywhere (see
    docs/kernels/softmax.md, "Special values").

    Rows that 1024 threads x 32 registers hold (65536 f16/bf16 values, 32768 f32)
    live in registers: x is read once. Longer rows
    (:attr:`chunks` > 1) make two passes: pass 1 keeps a running maximum and a
    rescaled running sum per thread (online softmax, Milakov & Gimelshein 2018,
    "Online normalizer calculation for softmax"), pass 2 writes y, reading every
    chunk but the last again. Pass 1 loads with an L2 ``evict_last`` policy so the second read is
    mostly served by L2, and ends on the last chunk, which pass 2 finds still in the
    registers; device memory then sees x once and y once, but the kernel issues every
    chunk's loads but the last one's twice (:meth:`bytes_read`).

    With ``split > 1`` a row is shared by a thread block cluster of ``split`` CTAs
    (sm_90 and newer; PTX ``.reqnctapercluster``), each holding one slice in registers;
    the CTAs combine their maxima and sums through distributed shared memory. A row
    then spreads over ``split`` SMs: for few long rows (decode) the launch runs ``split``
    times wider and reads x once where one CTA would read a long row again but for its
    last chunk. The grid
    must then be ``split * rows`` CTAs along x (:meth:`launch_dims`); the executor refuses
    a grid that is not a whole number of clusters.

    Kernel parameters (in order): ``x`` ``[rows, cols]``, ``y`` ``[rows, cols]``
    (row-major, contiguous, ``dtype``, aligned to one vector, :attr:`vector_bytes`; ``y``
    must not overlap ``x``, which is read through ``ld.global.nc``), ``rows`` (u32).

    Any row length: a row moves in the widest vector dividing ``cols`` (:attr:`vector`),
    16 or 8 bytes; a ``cols`` no such vector divides (a 50257-token vocabulary, 4097
    attention scores) is walked in a window of 16-byte vectors, its two edge vectors
    stored element by element (:attr:`windowed`, ``templates/window.ptx.j2``), except a split
    row or several rows a CTA, which take the narrower vector.

    Fields:
        cols (baked): row length, 1 to 262144.
        scale (baked): multiplies x before the softmax (e.g. ``1/sqrt(d)``); 0, or any
            value whose product with 2 log2(e) is a nonzero finite f32 (``|scale|`` from
            about 2.43e-46 to 1.1793e38), negative values included.
        dtype (baked): f32, f16 or bf16 for x and y.
        split (baked): CTAs per row, 1 to 8 (one cluster); the row must split into equal
            slices of whole vectors, each at most 8192 vectors. Needs sm_90 or newer.
        block (baked): threads per CTA; the default comes from :func:`default_block`
            applied to one slice (``cols / split``).
        rows_per_cta (baked): rows a CTA takes at once, 1, 2 or 4 (register-resident
            rows, split 1, at most 8 16-byte vectors a thread in all): their maxima meet in
            one CTA reduction and their sums in another. Default :data:`ROWS_PER_CTA`
            where the registers hold it, else 1.
        l2_evict_last (baked): x loads under an L2 evict_last policy (PTX ISA
            "createpolicy") with ``.L1::no_allocate``, never demoted: up to 2.4% faster on the
            H200, but the next kernel finds less of its data in L2 (docs/kernels/softmax.md,
            "Keeping x in L2"). Rows in registers on one CTA (one chunk, split 1) in 16-byte
            vectors.
        keep_exponentials (baked): compute each exponential once and keep it in a register
            from the sum to the store, instead of again from x: half the ``ex2`` (the SFU
            does 16 a clock an SM), at one f32 register an element. For few rows, where the
            SFU sets the time: H200, bf16, one process, 256 rows of 6144 to 8192 1.059x to
            1.069x by CUDA-graph replay (8192: 4.70 against 5.02 us); 16384 rows 0.991x to
            0.998x (8192: 134.0 against 132.8 us), so the default is False
            (:func:`suggested_keep_exponentials` says where to set it, and
            ``specdsl.torch.softmax`` follows it). Rows in
            registers (one chunk) whose exponentials and
            :data:`KEPT_EXPONENTIALS_MARGIN` more registers fit what ``min_ctas_per_sm``
            leaves (cols 8192 bf16: yes; 4096 at 7 CTAs an SM: no, at its default with the
            field, None: yes).
        min_ctas_per_sm (baked): CTAs an SM must hold (``.minnctapersm``): ptxas then keeps
            to :func:`~specdsl.kernels._rows.register_cap` registers; None: ``1024 // block``
            (a window of up to 3 vectors a thread adds ``.maxnreg 40``). The default is
            None, or :data:`MORE_CTAS` for f16/bf16 cols 4096, 5120 and 5632 (unsplit, one
            row a CTA, the default block: 1.004x to 1.037x on the H200, bf16 timed); with
            ``l2_evict_last``, :data:`KEPT_MORE_CTAS`, which adds cols 7680 (1.010x). With
            ``keep_exponentials`` the default is None: the field is for few rows, where more
            CTAs an SM buy nothing, and its exponentials need the registers.

    Raises:
        SpecError: at construction, for a field outside the ranges above.
    """

    cols: int = baked(validator=_check_cols, doc="row length in elements")
    scale: float = baked(1.0, validator=_check_scale, doc="x is multiplied by scale first")
    dtype: DType = baked(DType.BF16, validator=one_of(*FLOAT_DTYPES),
                         doc="element type: f32, f16 or bf16")
    split: int = baked(1, validator=_check_split,
                       doc="CTAs per row: 1, or a cluster of up to 8 sharing the row (sm_90)")
    block: int = baked(attrs.Factory(default_block_of, takes_self=True),
                       validator=_check_block, doc="threads per CTA")
    rows_per_cta: int = baked(attrs.Factory(default_rows_per_cta, takes_self=True),
                              validator=_check_rows_per_cta,
                              doc="rows a CTA takes at once (their reductions share barriers)")
    l2_evict_last: bool = baked(False, validator=l2_evict_last_field,
                                doc="x under an L2 evict_last policy, never demoted")
    keep_exponentials: bool = baked(False, validator=_check_keep_exponentials,
                                    doc="each exponential computed once, kept in a register")
    min_ctas_per_sm: int | None = baked(attrs.Factory(default_min_ctas, takes_self=True),
                                        validator=min_ctas_per_sm_field,
                                        doc="CTAs an SM must hold (.minnctapersm); None: 1024 / block")

    #: The requests ``specdsl verify --variants`` / ``render --variants`` walk: resident,
    #: chunked and split rows, and rows at any phase (a window): 4097 attention scores,
    #: a 50257-token vocabulary (chunked in f32), 131073 (chunked).
    variants = (
        [{"cols": c, "dtype": d, "split": s} for c in (4096, 32768, 131072)
         for d in ("bf16", "f16", "f32") for s in (1, 8)]
        + [{"cols": c, "dtype": d} for c in (4097, 4100, 50257, 131073)
           for d in ("bf16", "f16", "f32")]
        # each exponential kept: resident rows, a window, 2 rows a CTA and a cluster split
        + [{"cols": 8192, "dtype": d, "keep_exponentials": True} for d in ("bf16", "f16", "f32")]
        + [{"cols": 2081, "keep_exponentials": True},
           {"cols": 4096, "rows_per_cta": 2, "keep_exponentials": True},
           {"cols": 32768, "split": 8, "keep_exponentials": True}])

    #: What each pointer parameter points to (docs/writing-specs.md, "Array declarations").
    arrays = {"x": "dtype[rows, cols]", "y": "dtype[rows, cols]"}

    @property
    def lanes(self) -> int:
        """Elements per 16-byte vector (the widest load)."""
        return self.dtype.vector_lanes

    @property
    def vector(self) -> int:
        """Elements one load moves: the largest power of two dividing ``cols`` up to 16 bytes,
        or 16 bytes' worth in a window (:func:`~specdsl.kernels._rows.row_vectors`)."""
        return layout(self.cols, self.dtype, self.split, self.rows_per_cta)[0]

    @property
    def windowed(self) -> bool:
        """Are rows walked in a window of 16-byte vectors (``templates/window.ptx.j2``: a
        ``cols`` no vector of 8 bytes or more divides)? Arrays then need 16-byte alignment."""
        return self.cols % self.vector != 0

    @property
    def vector_bytes(self) -> int:
        """Bytes one load moves, the alignment x and y need."""
        return self.vector * self.dtype.size

    @property
    def chunks(self) -> int:
        """Register-sized pieces a CTA's part of a row is processed in (1: x is read once)."""
        return resident_geometry(self, self.rows_per_cta)[2]

    def launch_dims(self, rows: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``rows`` rows: ``split`` CTAs of ``block`` threads per row,
        or one CTA per :attr:`rows_per_cta` rows.

        Raises:
            SpecError: ``rows`` is not an int from 1 to 2**31 - 1, or ``rows * split``
                CTAs exceed 2**31 - 1.
        """
        return row_launch_dims("Softmax", rows, self.block, self.rows_per_cta, self.split)

    def bytes_moved(self, rows: int) -> int:
        """Fewest bytes a launch must move through device memory: x read once, y written once."""
        rows = count("Softmax.bytes_moved", "rows", rows)
        return 2 * rows * self.cols * self.dtype.size

    def bytes_read(self, rows: int) -> int:
        """Bytes the kernel's loads request: ``x`` once, and when :attr:`chunks` > 1 every
        chunk but the last again (``block`` threads x the vectors a thread holds, each of
        :attr:`vector_bytes`; pass 2 finds the last chunk in the registers). The first
        term is the row's own bytes: a window's edge vectors, loaded whole, also touch
        bytes of the neighbouring rows, which are not counted."""
        rows = count("Softmax.bytes_read", "rows", rows)
        per_thread, _, chunks = resident_geometry(self, self.rows_per_cta)
        again = (chunks - 1) * self.block * per_thread * self.vector_bytes
        return rows * (self.cols * self.dtype.size + again)


def _positive_ints(function: str, **values: Any) -> None:
    """Refuse, naming ``function`` and the argument, any of ``values`` that is no positive
    int (a bool neither)."""
    for name, value in values.items():
        if type(value) is not int or value < 1:
            raise SpecError(f"{function}: {name} = {value!r} is invalid: expected a positive "
                            f"int")


#: Softmax's rows split over a cluster where 8 CTAs each get more than this many vectors
#: (rows longer than 65536 of bf16) take 8 CTAs a row up to half the SMs in rows, not a
#: quarter: rows of 131072 ran fastest at 8 up to 66 rows on an H200, rows of 65536 at 4
#: from 48 (``benchmarks/variants.py split-bounds``).
LONG_PART_VECTORS = 1024


def suggested_split(cols: int, dtype: DType | str, rows: int, sm_count: int = 132) -> int:
    """The ``split`` to use for ``rows`` rows of ``cols``: a cluster a row when rows are few.

    Rows longer than one 256-thread CTA holds (more than 2048 16-byte vectors: longer than
    cols 16384 of bf16; 8192 narrower vectors) are split over a cluster of 8, 4 or 2 CTAs
    that cuts the row into parts held in registers, by the bounds of
    :func:`~specdsl.kernels._rows.cluster_split` in rows (``sm_count``, the device's SM
    count: 132 on an H200): 8 CTAs a row up to a quarter of the SMs in rows (33 on an
    H200; up to half, 66, where each CTA's part is longer than :data:`LONG_PART_VECTORS`),
    4 up to 0.46 of them (60), 2 up to half (66); 1 beyond.

    Measured on the H200 (``benchmarks/variants.py split-bounds`` and
    ``split-bounds-more``, 2026-12-02, two rounds each, bf16, graph replay, us; cols 8192
    to 131072, 1 to 132 rows, splits 1, 2, 4 and 8): 131072, 1 row 11.83 unsplit and 4.25
    at 8; 33 rows 13.36, 8.91 at 8 (10.61 at 4); 48 rows 13.59, 10.64 at 8 (11.41 at 4);
    66 rows 13.80, 13.00 at 8 (15.84 at 4); 72 rows 14.18 unsplit against 13.88 at 8; 132
    rows 20.88 unsplit, 23.95 at 8. 32768, 33 rows 5.42 unsplit, 4.54 at 8; 48 rows 4.99
    at 4 (5.12 at 2); 66 rows 5.67 at 2 (5.88 at 4); 100 rows 6.95 unsplit. 65536, 60 rows
    7.65 at 4 (8.25 at 2, 9.14 unsplit). 16384 ran 0.12 to 0.18 us faster at 8 at 1 to 4
    rows and slower from 16, and stays unsplit; 8192 ran slower at every split. It assumes
    every cluster size up to 8 can be scheduled, as on a whole H100/H200; on a MIG slice or
    another part with smaller GPCs, check with ``cuOccupancyMaxActiveClusters`` first (a
    cluster that cannot be placed fails the launch with ``CUDA_ERROR_CLUSTER_OUT_OF_RESOURCES``,
    raised as a ``LaunchError``).

    Raises:
        SpecError: ``dtype`` is not f32, f16 or bf16, or ``cols``, ``rows`` or
            ``sm_count`` is not a positive int.
    """
    try:
        dtype = DType.parse(dtype)
    except ValueError as exc:
        raise SpecError(f"suggested_split: {exc}") from None
    if dtype not in FLOAT_DTYPES:
        raise SpecError(f"suggested_split: dtype = {dtype} is invalid: Softmax takes f32, "
                        f"f16 or bf16")
    _positive_ints("suggested_split", cols=cols, rows=rows, sm_count=sm_count)
    lanes = vector_elements(cols, dtype)
    vectors, most = cols // lanes, most_vectors_per_thread(lanes, dtype)
    bounds = dict(CLUSTER_ROWS_PER_SM)
    if vectors // MAX_SPLIT > LONG_PART_VECTORS:
        bounds[MAX_SPLIT] = Fraction(1, 2)
    # each CTA's part held in registers: 1024 threads of `most` vectors at most
    return cluster_split(vectors, rows, sm_count, lambda split: vectors // split <= 1024 * most,
                         min_vectors=256 * most + 1, rows_per_sm=bounds)


def suggested_keep_exponentials(cols: int, dtype: DType | str, rows: int,
                                 sm_count: int = 132, *, split: int = 1,
                                 l2_evict_last: bool = False) -> bool:
    """Whether ``rows`` rows of ``cols`` should keep their exponentials
    (``Softmax(keep_exponentials=True)``): when rows are few, an SM's 16 ``ex2`` a clock
    set the time, and computing each exponential once instead of twice pays.

    True where ``rows`` is at most :data:`KEPT_EXPONENTIALS_ROWS_PER_SM` times ``sm_count``
    (the device's SM count: 132 on an H200), the row is not split over a cluster (``split``
    1: not measured split), and the request with these fields and the others at their
    defaults accepts the field (its exponentials fit the registers; see
    :class:`Softmax`). False otherwise, also for arguments a :class:`Softmax` refuses.

    Raises:
        SpecError: ``rows`` or ``sm_count`` is not a positive int.
    """
    _positive_ints("suggested_keep_exponentials", rows=rows, sm_count=sm_count)
    if split != 1 or rows > KEPT_EXPONENTIALS_ROWS_PER_SM * sm_count:
        return False
    try:
        Softmax(cols=cols, dtype=dtype, l2_evict_last=l2_evict_last, keep_exponentials=True)
    except SpecError:
        return False
    return True
