"""RMSNorm: root-mean-square layer normalization, optionally fused with a residual add."""

from __future__ import annotations

from typing import Any

import attrs

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked
from .._templating import immediates
from ._checks import FLOAT_DTYPES, count, one_of
from ._rmsnorm_geometry import (
    KEPT_TWO_VECTOR_CTAS,
    PACKED_ROW_CTAS,
    PACKED_ROW_THREADS,
    PACKED_ROW_VECTORS,
    TWO_VECTOR_CTAS,
    default_block,
    default_min_ctas,
    packed_row_block,
)
from ._rows import (
    cdiv,
    check_length,
    check_rows_per_cta,
    l2_evict_last_field,
    min_ctas_per_sm_field,
    most_vectors_per_thread,
    row_launch_dims,
    row_vectors,
    windowed,
)
from .case import TOLERANCE, KernelCase, Output, from_bits, to_bits

__all__ = ["RMSNorm", "reference", "example", "MAX_VECTORS_PER_THREAD", "MAX_HIDDEN", "F32_MAX",
           "ROWS_PER_CTA", "default_block", "default_min_ctas", "packed_row_block", "PACKED_ROW_THREADS",
           "PACKED_ROW_VECTORS", "PACKED_ROW_CTAS", "TWO_VECTOR_CTAS",
           "KEPT_TWO_VECTOR_CTAS"]

#: Most 16-byte vectors of a row one thread keeps in registers (32 registers; narrower
#: vectors: 16 of 8 bytes, 32 of 4 or 2). A row longer than ``block`` threads hold is
#: processed in chunks (:attr:`RMSNorm.chunks`).
MAX_VECTORS_PER_THREAD = 8
#: Longest row: 2^20 elements (4 MiB of f32; the chunk loop has no limit of its own).
MAX_HIDDEN = 2**20
#: The ``rows_per_cta`` default: rows a CTA normalizes together (candidates 2 and 4 are
#: timed by ``benchmarks/variants.py copy-rate``; see docs/kernels/rmsnorm.md).
ROWS_PER_CTA = 1


def _geometry(hidden: int, dtype: DType, block: int, fused: bool,
              rows_per_cta: int = 1) -> tuple[int, int, int, int]:
    """(elements a vector, vectors a row, vectors a thread holds at a time, chunks a row),
    as templates/norm.ptx.j2 computes them. A row that fits ``block`` threads at
    :func:`~specdsl.kernels._rows.most_vectors_per_thread` is one chunk; a longer one is
    walked in chunks of that many vectors a thread (half of it with the fused residual,
    which holds x and residual at once). One row a CTA of a length that is not a whole
    number of 16-byte vectors is walked in a window (:func:`~specdsl.kernels._rows.row_vectors`);
    with the residual it stays in registers only at half that many vectors a thread
    (a window's edges need registers of their own: 50257 spilled at 8)."""
    window = rows_per_cta == 1 and windowed(hidden, dtype)
    lanes, vectors = row_vectors(hidden, dtype, window)
    most = most_vectors_per_thread(lanes, dtype)
    if vectors <= block * (most // 2 if window and fused else most):
        return lanes, vectors, cdiv(vectors, block), 1
    per_thread = most // 2 if fused else most
    return lanes, vectors, per_thread, cdiv(vectors, block * per_thread)


def _check_hidden(instance: Any, attribute: Any, hidden: int) -> None:
    check_length(hidden)
    if hidden > MAX_HIDDEN:
        raise ValueError(f"expected at most {MAX_HIDDEN} elements")


def _check_eps(instance: Any, attribute: Any, eps: float) -> None:
    if not eps > 0:
        raise ValueError("expected a float > 0")
    immediates.f32(eps)  # an eps that rounds to 0 or overflows in f32 is refused here


def _check_block(instance: Any, attribute: Any, block: int) -> None:
    if not (32 <= block <= 1024 and block % 32 == 0):
        raise ValueError("expected a multiple of 32 from 32 to 1024 threads per CTA")


def _rows_geometry(spec: Any, rows_per_cta: int) -> tuple[int, int, int]:
    """(vectors a thread holds of a row, most vectors of several rows a thread may hold,
    chunks a row) at ``rows_per_cta`` rows a CTA: several rows share the registers with
    the weight's vectors, so half of :func:`~specdsl.kernels._rows.most_vectors_per_thread`
    (more spill)."""
    lanes, _, per_thread, chunks = _geometry(spec.hidden, spec.dtype, spec.block,
                                             spec.fused_residual, rows_per_cta)
    return per_thread, most_vectors_per_thread(lanes, spec.dtype) // 2, chunks


def _check_rows_per_cta(instance: Any, attribute: Any, value: int) -> None:
    per_thread, most, chunks = _rows_geometry(instance, value)
    check_rows_per_cta(value, chunks, per_thread, most if value > 1 else per_thread)


def _default_min_ctas(spec: Any) -> int | None:
    """:func:`default_min_ctas` of the spec's fields (None where a field is refused: its own
    validator says why)."""
    if not isinstance(spec.hidden, int) or spec.hidden < 1 or not isinstance(spec.block, int):
        return None
    return default_min_ctas(spec.hidden, spec.dtype, spec.block, spec.fused_residual,
                            spec.rows_per_cta, spec.l2_evict_last)


def _default_rows_per_cta(spec: Any) -> int:
    """:data:`ROWS_PER_CTA`, or fewer where the registers cannot hold that many rows."""
    if not isinstance(spec.hidden, int) or spec.hidden < 1:
        return 1  # hidden is refused: its own validator says why
    if windowed(spec.hidden, spec.dtype):
        return 1  # a row at any phase is walked in a window, one row a CTA
    per_thread, most, chunks = _rows_geometry(spec, 1)
    fits = [r for r in (4, 2, 1) if r <= ROWS_PER_CTA and r * per_thread <= most]
    return fits[0] if chunks == 1 and fits else 1


@kernel_spec(template="rmsnorm_tuned.ptx.j2", entry="rmsnorm")
class RMSNorm:
    """RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization").

    ``y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight`` for each row ``r``,
    accumulated in f32, rounded to ``dtype`` once.

    With ``fused_residual`` (as vLLM's ``fused_add_rms_norm``): the kernel first forms
    ``s = x + residual`` rounded to ``dtype`` (``add.rn.bf16x2``/``add.rn.f16x2``/
    ``add.rn.f32``: one rounding), writes ``s`` back into ``residual`` (in place: the
    next layer's residual) and normalizes ``s``: ``y = rmsnorm(s)``.

    Kernel parameters (in order): ``x`` ``[rows, hidden]``; ``residual`` ``[rows,
    hidden]`` (read, then overwritten with ``s``; only when ``fused_residual``);
    ``weight`` ``[hidden]``; ``y`` ``[rows, hidden]``; ``rows`` (u32). Arrays are
    row-major, contiguous, ``dtype``, aligned to one vector (:attr:`vector_bytes`: 16
    bytes when ``hidden`` is a multiple of 16 bytes' worth). ``x`` is read through the
    non-coherent path (``ld.global.nc``), so ``y`` must not overlap ``x``.

    Any row length: a row moves in the widest vector dividing ``hidden`` (:attr:`vector`),
    16 or 8 bytes. A ``hidden`` no such vector divides is walked in a window of 16-byte
    vectors (:attr:`windowed`, ``templates/window.ptx.j2``): rows start at different phases
    of a vector, the kernel moves the aligned vectors that cover each row, stores the two
    edge vectors element by element, loads those of x whole (their bytes outside the row
    being the neighbour rows') and those of the residual element by element (other CTAs
    write the bytes beside a row), and reads the weight funnel-shifted from two aligned
    vectors or element by element. Several rows a CTA (``rows_per_cta`` > 1) of such a
    length move in the narrower vector (one element for odd lengths). Rows that fit
    ``block`` threads' registers (:attr:`chunks` == 1) are read once; longer rows take two
    passes in chunks: the sum of squares (with ``fused_residual``: forming ``s`` and writing
    it back), then the row again for ``y``: ``s`` from ``residual``, or without the residual
    every chunk of ``x`` but the last, which pass 1 leaves in the registers.

    Launch: :meth:`launch_dims` (one CTA of ``block`` threads per row). ``rsqrt.approx.f32``:
    the PTX ISA ("rsqrt") bounds its relative error by 2^-22.9, about one f32 ulp.

    Fields:
        hidden (baked): row length, 1 to 2^20 elements.
        eps (baked): added to the mean square, a float > 0, rendered as an f32 immediate.
        dtype (baked): f32, f16 or bf16 for x, residual, weight and y.
        fused_residual (baked): add ``residual`` first and write the sum back.
        block (baked): threads per CTA (the PTX is unrolled for it); the default comes
            from :func:`default_block`.
        rows_per_cta (baked): rows a CTA normalizes together, 1, 2 or 4 (register-resident
            rows only, at most 4 16-byte vectors a thread in all, beside the weight's): their sums of squares
            meet in one CTA reduction (one barrier) and the weight is loaded once for all.
            Default :data:`ROWS_PER_CTA` where the registers hold it, else 1.
        streaming_stores (baked): store y (and s) with ``st.global.cs`` (cache streaming,
            evict first: PTX ISA "Cache Operators") instead of a plain ``st.global``.
        l2_evict_last (baked): x (and residual) load under an L2 evict_last policy (PTX ISA
            "createpolicy"), never demoted, as torch.compile's RMSNorm does: 1.3 to 3.7%
            faster without the residual on the H200 (hidden 4096 to 12288; at 8192 beside 4
            CTAs an SM, which ``min_ctas_per_sm`` then defaults to), but the next kernel
            finds less of its data in L2 (docs/kernels/rmsnorm.md, "Keeping x in L2"). Rows
            in registers in whole 16-byte vectors; sm_80 or newer.
        min_ctas_per_sm (baked): CTAs an SM must hold, rendered as ``.minnctapersm`` (PTX
            ISA "Performance-Tuning Directives"): ptxas then keeps to
            :func:`~specdsl.kernels._rows.register_cap` registers a thread (the PTX comment
            says how many); None: ``1024 // block``. The default is None, or
            :data:`PACKED_ROW_CTAS` for a packed row on the packed block, or
            :data:`TWO_VECTOR_CTAS` for f16/bf16 hidden 5120, 5632, 6656, 7168 and 7680
            (exactly 2 vectors a thread on 320 to 480 threads: 1.008x to 1.064x on the H200),
            and with ``l2_evict_last`` 8192 too (4 CTAs of 512: 1.02x), without the residual
            (:func:`default_min_ctas`). Declared last: its default reads the other fields.

    Raises:
        SpecError: at construction, for a field outside the ranges above.
    """

    hidden: int = baked(validator=_check_hidden, doc="row length in elements")
    eps: float = baked(1e-6, validator=_check_eps, doc="added to mean(x^2); > 0")
    dtype: DType = baked(DType.BF16, validator=one_of(*FLOAT_DTYPES),
                         doc="element type: f32, f16 or bf16")
    fused_residual: bool = baked(False, doc="residual = x + residual first; y = rmsnorm(residual)")
    block: int = baked(attrs.Factory(lambda self: default_block(
                           self.hidden, self.dtype, fused_residual=self.fused_residual),
                                     takes_self=True),
                       validator=_check_block, doc="threads per CTA (one CTA per row)")
    rows_per_cta: int = baked(attrs.Factory(_default_rows_per_cta, takes_self=True),
                              validator=_check_rows_per_cta,
                              doc="rows a CTA normalizes together (one barrier for all)")
    streaming_stores: bool = baked(False, doc="store y (and s) with st.global.cs")
    l2_evict_last: bool = baked(False, validator=l2_evict_last_field,
                                doc="x (and residual) under an L2 evict_last policy, never demoted")
    # Last: an attrs default sees only the fields declared before it, and this one reads
    # the geometry and l2_evict_last.
    min_ctas_per_sm: int | None = baked(
        attrs.Factory(_default_min_ctas, takes_self=True), validator=min_ctas_per_sm_field,
        doc="CTAs an SM must hold (.minnctapersm); None: 1024 / block")

    #: The requests ``specdsl verify --variants`` / ``render --variants`` walk: common
    #: sizes, a row of 2 whole vectors a thread at more CTAs an SM (7168, DeepSeek-V3's), a
    #: row of 8-byte vectors (4100), odd rows (4097, one element a vector) and rows longer
    #: than the registers (131072, 131073: chunks).
    variants = {"hidden": [4096, 8192, 7168, 4100, 4097, 131072, 131073],
                "dtype": ["bf16", "f16", "f32"], "fused_residual": [False, True]}

    #: What each pointer parameter points to (docs/writing-specs.md, "Array declarations").
    arrays = {"x": "dtype[rows, hidden]",
              "residual": "dtype[rows, hidden] if fused_residual else None",
              "weight": "dtype[hidden]", "y": "dtype[rows, hidden]"}

    @property
    def lanes(self) -> int:
        """Elements per 16-byte vector (the widest load)."""
        return self.dtype.vector_lanes

    @property
    def vector(self) -> int:
        """Elements one load moves: the largest power of two dividing ``hidden`` up to 16
        bytes, or 16 bytes' worth in a window (:func:`~specdsl.kernels._rows.row_vectors`)."""
        return _geometry(self.hidden, self.dtype, self.block, self.fused_residual,
                         self.rows_per_cta)[0]

    @property
    def windowed(self) -> bool:
        """Are rows walked in a window of 16-byte vectors (``templates/window.ptx.j2``: a
        ``hidden`` no vector of 8 bytes or more divides)? Arrays then need 16-byte alignment."""
        return self.hidden % self.vector != 0

    @property
    def vector_bytes(self) -> int:
        """Bytes one load moves, the alignment every array needs (at least 4 as declared)."""
        return self.vector * self.dtype.size

    @property
    def vectors_per_thread(self) -> int:
        """Vectors of a row (of a chunk, for a chunked row) each thread keeps in registers."""
        return _geometry(self.hidden, self.dtype, self.block, self.fused_residual,
                         self.rows_per_cta)[2]

    @property
    def chunks(self) -> int:
        """Pieces a row is processed in: 1 when it fits the registers (x is read once),
        else the two passes walk this many chunks."""
        return _geometry(self.hidden, self.dtype, self.block, self.fused_residual,
                         self.rows_per_cta)[3]

    def launch_dims(self, rows: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``rows`` rows: one CTA of ``block`` threads per
        :attr:`rows_per_cta` rows.

        Raises:
            SpecError: ``rows`` is not an int from 1 to 2**31 - 1.
        """
        return row_launch_dims("RMSNorm", rows, self.block, self.rows_per_cta)

    def bytes_moved(self, rows: int) -> int:
        """Fewest bytes a launch must move: x, weight (and residual) read once, y (and s) written once."""
        rows = count("RMSNorm.bytes_moved", "rows", rows)
        arrays = 4 if self.fused_residual else 2  # x, y (+ residual in, s out)
        return (arrays * rows + 1) * self.hidden * self.dtype.size


#: Largest finite f32: the kernel (as torch and vLLM) forms mean(x^2) + eps in f32.
F32_MAX = (2 - 2**-23) * 2.0**127
#: Where a value rounds to f32 infinity (to nearest even: the largest value's half ulp up).
F32_OVERFLOW = 2.0**128 - 2.0**103


def reference(x: Any, weight: Any, eps: float) -> Any:
    """float64 RMSNorm of each row of ``x`` ``[rows, hidden]`` times ``weight`` ``[hidden]``.

    With torch's semantics (``torch.nn.functional.rms_norm`` computes in f32 for f16,
    bf16 and f32 inputs; vLLM's kernels accumulate in f32): where ``sum(x^2)`` or
    ``mean(x^2) + eps`` exceeds the f32 range, it is ``inf``, so ``rstd = 0``: the row
    becomes 0 (NaN where x is +-inf, and where x is NaN). Pass ``eps`` as the f32 the
    kernel bakes (``float(numpy.float32(eps))``) when it matters at that precision.
    """
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        sum_square = np.sum(x * x, axis=-1, keepdims=True)
        denominator = sum_square / x.shape[-1] + eps
        denominator = np.where((sum_square >= F32_OVERFLOW) | (denominator >= F32_OVERFLOW),
                               np.inf, denominator)
        return x / np.sqrt(denominator) * np.asarray(weight, dtype=np.float64)


def example(spec: RMSNorm, rng: Any, rows: int = 7) -> KernelCase:
    """A launch of ``spec`` on ``rows`` random rows (x, residual ~ N(0, 1), weight ~ N(1, 0.5)).

    The reference normalizes the rounded inputs in float64; with ``fused_residual``
    the expected ``residual`` is ``x + residual`` rounded to ``dtype`` once, and ``y``
    is the float64 RMSNorm of that rounded sum.
    """
    import numpy as np

    args, expected, x64, w64 = example_inputs(spec, rng, rows)
    args += [("y", Output((rows, spec.hidden), spec.dtype)), ("rows", np.uint32(rows))]
    expected["y"] = reference(x64, w64, spec.eps)
    grid, block = spec.launch_dims(rows)
    return KernelCase(spec=spec, args=tuple(args), grid=grid, block=block,
                      expected=expected, tolerance=TOLERANCE[spec.dtype])


def example_inputs(spec: Any, rng: Any, rows: int) -> tuple[list, dict, Any, Any]:
    """The inputs of an RMSNorm-shaped example (RMSNorm, RMSNormQuant): ``(args, expected,
    source, weight)`` with ``args`` = x, [residual], weight (x, residual ~ N(0, 1), weight
    ~ N(1, 0.5), rounded to ``spec.dtype``), ``expected`` holding the written-back residual
    (``x + residual`` rounded once) under ``fused_residual``, ``source`` the float64 row
    that is normalized (x or that sum) and ``weight`` as float64."""
    shape = (rows, spec.hidden)
    x = to_bits(rng.standard_normal(shape), spec.dtype)
    weight = to_bits(rng.normal(1.0, 0.5, spec.hidden), spec.dtype)
    x64, w64 = from_bits(x, spec.dtype), from_bits(weight, spec.dtype)
    args: list[tuple[str, Any]] = [("x", x)]
    expected: dict[str, Any] = {}
    if spec.fused_residual:
        residual = to_bits(rng.standard_normal(shape), spec.dtype)
        summed = from_bits(to_bits(x64 + from_bits(residual, spec.dtype), spec.dtype), spec.dtype)
        args.append(("residual", Output(shape, spec.dtype, initial=residual)))
        expected["residual"] = summed
        x64 = summed
    args.append(("weight", weight))
    return args, expected, x64, w64
