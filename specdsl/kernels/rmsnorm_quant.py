"""RMSNormQuant: RMSNorm (optionally after a fused residual add) with an FP8 E4M3 epilogue."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked
from . import fp8_quant, rmsnorm
from ._checks import FLOAT_DTYPES, block_size, count, one_of
from ._rows import (
    cdiv,
    check_resident,
    check_resident_block,
    ctas_per_sm,
    l2_evict_last_field,
    min_ctas_for,
    min_ctas_per_sm_field,
    row_launch_dims,
    threads_for,
    vector_elements,
)
from .case import TOLERANCE, KernelCase, Output, from_bits, to_bits

__all__ = ["RMSNormQuant", "reference", "example"]


#: Registers a thread that rows of 16-byte vectors need without spilling, by vectors a
#: thread (ptxas for sm_90, every mode, dtype and width of the variants): 2 fit in 40,
#: 3 or 4 in 56 (at 48, every mode spills 16 to 32 bytes: hidden 4096 and 8192, bf16 and f16),
#: 5 to 8 in 64 (at 56, hidden 14336 and 16384 spill 4 to 12 bytes in some modes).
ROW_REGISTERS_NEEDED = {1: 40, 2: 40, 3: 56, 4: 56, 5: 64, 6: 64, 7: 64, 8: 64}
#: Fewest threads a CTA of the default block has, without the residual (four warps).
LEAST_THREADS = 128
#: 16-byte vectors a thread of the default block holds, without the residual: 16 registers
#: of the 56 to 64 that :func:`default_min_ctas` leaves (7 or 8 ran slower at hidden 7168
#: and 8192, on 128 threads).
VECTORS_PER_THREAD = 4
#: Fewest threads of the default block for rows longer than 256 threads hold at
#: :data:`VECTORS_PER_THREAD`: such a row takes the fewest threads from 256 up that hold
#: it in whole sweeps of at most :data:`MOST_VECTORS_PER_THREAD`, at
#: :data:`LONG_ROW_CTAS` or more CTAs an SM (before: 2 or 3 CTAs of 320 to 512 threads).
LONG_ROW_THREADS = 256
#: Most 16-byte vectors a thread of a long row's default block holds: the most whose
#: registers :data:`ROW_REGISTERS_NEEDED` knows (64 at 8).
MOST_VECTORS_PER_THREAD = max(ROW_REGISTERS_NEEDED)
#: Fewest CTAs an SM a long row's default block must leave room for (with the 64 registers
#: :data:`ROW_REGISTERS_NEEDED` gives 5 to 8 vectors a thread, that is 256 to 320 threads).
LONG_ROW_CTAS = 3


def default_block(hidden: int, dtype: DType, fused_residual: bool,
                  scale_mode: str = "dynamic") -> int:
    """Threads per CTA for rows of ``hidden`` elements of ``dtype`` (the ``block`` default).

    With ``fused_residual``, or rows of narrower than 16-byte vectors (odd lengths): RMSNorm's
    (:func:`specdsl.kernels.rmsnorm.default_block`). Otherwise the fewest threads, at least
    :data:`LEAST_THREADS`, that hold the row at :data:`VECTORS_PER_THREAD` vectors a
    thread, and never more than RMSNorm's; ``hidden`` 4096 and 7168 (bf16): 128 and 224
    threads. A row that needs more than :data:`LONG_ROW_THREADS` threads at that rate takes
    the fewest threads from :data:`LONG_ROW_THREADS` up that hold it in whole sweeps of at
    most :data:`MOST_VECTORS_PER_THREAD` vectors at :data:`LONG_ROW_CTAS` or more CTAs an
    SM, where there are such (256, 288 or 320 threads): f16/bf16 hidden 10240, 12288, 14336
    and 16384 take 256 (5 to 8 vectors a thread, 4 CTAs an SM), 11520, 13824, 16128 and
    18432 take 288, 12800, 15360, 17920 and 20480 take 320 (3 CTAs); f32 at half those
    widths. The dynamic and static scales take that block only where it puts more CTAs on
    an SM than the block of 4 vectors a thread would: f16/bf16 11520 (and f32 5760, the
    same 1440 vectors) keeps 384 threads x 3 CTAs there, which ran 1.026x (dynamic) and
    1.021x (static) against 288 x 3 (H200,
    2026-12-01, ``variants.py quant-mode-block --rounds 3``, 16384 rows: 141.3 against
    145.0 us, 134.6 against 137.5), while the group mode ran 1.044x the other way
    (``quant-long-rows``). Measured on the H200 (``benchmarks/variants.py quant-block`` and
    ``quant-long-rows``, docs/kernels/rmsnorm.md), bf16, 16384 rows: 4096, dynamic scales,
    51.9 us with 128 threads against 58.1 us with 256 (RMSNorm's 512 ran 75.9); 7168, 95.0
    us with 224 against 108.9 us with RMSNorm's 448; 16384, 191.2 us with 256 against 207.5
    with 512 (2026-12-01); over every request the long rows' rule changed that was measured
    (bf16, f16 and f32, 8192 or 16384 rows), 0.975x to 1.266x. With the residual, which
    moves twice the bytes a row, fewer threads did not help (``residual-block``: 7168, 205.4
    us with 128 threads against 202.4 with 448; ``quant-long-rows``: 16384, 458.7 us with
    256 against 447.0 with 512).
    """
    plain = rmsnorm.default_block(hidden, dtype, window=False, fused_residual=fused_residual)
    lanes = vector_elements(hidden, dtype)
    if fused_residual or lanes * dtype.size < 16:
        return plain
    vectors = max(1, hidden // lanes)
    fewest = threads_for(vectors, VECTORS_PER_THREAD)
    before = min(plain, max(LEAST_THREADS, fewest))  # 4 vectors a thread, RMSNorm's at most
    # Fewer threads at no more CTAs an SM leave fewer warps to cover the row's barriers:
    # only the group mode, whose scales need more registers a thread, gains from them.
    least_ctas = LONG_ROW_CTAS if scale_mode == "group" else max(
        LONG_ROW_CTAS, ctas_per_sm(default_min_ctas(hidden, dtype, before), before) + 1)
    for threads in range(LONG_ROW_THREADS, fewest, 32):
        # Whole sweeps only (9216 at 4.5 vectors a thread on 256 ran 0.95x to 0.99x), and
        # at least LONG_ROW_CTAS CTAs an SM (2 CTAs of 384 threads: 0.96x to 1.04x by mode).
        sweeps, rest = divmod(vectors, threads)
        if (not rest and sweeps <= MOST_VECTORS_PER_THREAD
                and ctas_per_sm(default_min_ctas(hidden, dtype, threads), threads) >= least_ctas):
            return min(plain, threads)
    return before


def default_min_ctas(hidden: int, dtype: DType, block: int) -> int | None:
    """CTAs an SM must hold (``.minnctapersm``, the ``min_ctas_per_sm`` default) for rows
    of ``hidden`` elements of ``dtype`` on ``block`` threads.

    Rows of 16-byte vectors, at most 8 a thread: :func:`~specdsl.kernels._rows.min_ctas_for`
    with :data:`ROW_REGISTERS_NEEDED`, which is ``ceil(1024 / block)`` CTAs where their
    registers fit, and ``1024 // block`` otherwise: 5 CTAs of 224 threads (hidden 7168
    bf16), 6 of 192 (6144), 7 of 160 (5120), 4 of 256 (10240 to 16384, 5 to 8 vectors a
    thread), 3 of 288 (18432), 3 of 448 with the residual (7168 bf16). Other
    rows: None (``1024 // block``). Measured on the H200 (2026-12-01, 16384 rows, bf16,
    events, docs/kernels/rmsnorm.md): hidden 7168, dynamic scales, 93.5 us at 4 CTAs of
    224 against 88.3 at 5 (both with the packed row max); 6144, 79.5 against 76.4; 7168
    with the residual, 201.6 at 2 CTAs of 448 against 197.3 at 3 (the page's table gives
    the same requests against 5398c81). Where ``1024 / block`` is whole, nothing changes.
    """
    lanes = vector_elements(hidden, dtype)
    per_thread = cdiv(hidden // lanes, block)
    if lanes * dtype.size < 16 or per_thread not in ROW_REGISTERS_NEEDED:
        return None
    return min_ctas_for(block, ROW_REGISTERS_NEEDED[per_thread])


def _check_hidden(instance: Any, attribute: Any, hidden: int) -> None:
    check_resident(hidden, instance.dtype)


def _check_scale_mode(instance: Any, attribute: Any, mode: str) -> None:
    if mode == "group":
        fp8_quant.check_group(instance.hidden, "hidden")


def _check_block(instance: Any, attribute: Any, block: int) -> None:
    block_size(instance, attribute, block)
    check_resident_block(instance.hidden, instance.dtype, block)


@kernel_spec(template="rmsnorm_quant.ptx.j2", entry="rmsnorm_quant")
class RMSNormQuant:
    """RMSNorm, then FP8 E4M3 quantization of its output, in one kernel.

    ``y = rmsnorm(x) * weight`` exactly as :class:`~specdsl.kernels.RMSNorm` computes it
    (with ``fused_residual``: ``s = x + residual`` first, written back to ``residual``),
    rounded to ``dtype`` as RMSNorm writes it, then quantized as
    :class:`~specdsl.kernels.Fp8Quant` quantizes: ``q = satfinite(y * (1 / scale))``
    (``cvt.rn.satfinite.e4m3x2.f32``). Only ``q`` and the scales are written: ``y`` never
    reaches device memory (the unfused pair writes it and reads it back).

    ``scale_mode``:

    * ``"dynamic"``: ``scale[r] = max(max_j |y[r, j]| / 448, 2^-126)`` a row, written to
      ``scale`` ``[rows]``;
    * ``"static"``: one f32 read from ``scale`` at launch (vLLM's
      ``rms_norm_static_fp8_quant`` / ``fused_add_rms_norm_static_fp8_quant``);
    * ``"group"``: ``scale[r, g] = max(max |y| over the g-th 128 elements, 1e-10) / 448``,
      written to ``scale`` ``[rows, hidden / 128]`` row-major (DeepSeek-V3's blockwise
      activation scales, vLLM's ``per_token_group_quant_fp8``).

    With the same ``block`` as an RMSNorm, the sum of squares runs in the same order as
    that RMSNorm's, so the codes and scales are bit for bit those of that RMSNorm followed
    by Fp8Quant (or ``fp8_quant.kernel_codes`` of its ``y``).

    Kernel parameters (in order): ``x`` ``[rows, hidden]``; ``residual`` (only with
    ``fused_residual``); ``weight`` ``[hidden]``; ``q`` ``[rows, hidden]`` e4m3 bytes;
    ``scale`` (f32: output ``[rows]`` or ``[rows, hidden / 128]``, or the static input);
    ``rows`` (u32). Alignment: one vector (:attr:`vector_bytes`) for the ``dtype`` arrays,
    :attr:`vector` bytes for ``q``. One CTA per row (:meth:`launch_dims`). Needs sm_90, or
    sm_89 with PTX ISA 8.1 (``cvt...e4m3x2``).

    Fields:
        hidden (baked): row length, kept in registers: at most 65536 f16/bf16 elements
            of 16-byte vectors (32768 f32 or odd lengths); a multiple of 128 for ``group``.
        eps, dtype, fused_residual: as :class:`~specdsl.kernels.RMSNorm`.
        scale_mode (baked): ``"dynamic"``, ``"static"`` or ``"group"``.
        block (baked): threads per CTA; the default is :func:`default_block`'s.
        l2_evict_last (baked): as :class:`~specdsl.kernels.RMSNorm`'s: x (and residual)
            under an L2 evict_last policy, never demoted (16-byte vectors only).
        min_ctas_per_sm (baked): CTAs an SM must hold, rendered as ``.minnctapersm`` (as
            :class:`~specdsl.kernels.RMSNorm`'s); the default is :func:`default_min_ctas`'s,
            None is ``1024 / block``.

    Raises:
        SpecError: at construction, for a field outside the ranges above.
    """

    hidden: int = baked(validator=_check_hidden, doc="row length in elements")
    eps: float = baked(1e-6, validator=rmsnorm._check_eps, doc="added to mean(x^2); > 0")
    dtype: DType = baked(DType.BF16, validator=one_of(*FLOAT_DTYPES),
                         doc="element type of x, residual and weight: f32, f16 or bf16")
    fused_residual: bool = baked(False, doc="residual = x + residual first; y = rmsnorm(residual)")
    scale_mode: Literal["dynamic", "static", "group"] = baked(
        "dynamic", validator=_check_scale_mode,
        doc="a scale a row (dynamic), one read at launch (static), or a scale a group of 128")
    block: int = baked(attrs.Factory(
                           lambda self: default_block(self.hidden, self.dtype, self.fused_residual,
                                                      self.scale_mode),
                           takes_self=True),
                       validator=_check_block, doc="threads per CTA (one CTA per row)")
    l2_evict_last: bool = baked(False, validator=l2_evict_last_field,
                                doc="x (and residual) under an L2 evict_last policy, never demoted")
    min_ctas_per_sm: int | None = baked(
        attrs.Factory(lambda self: default_min_ctas(self.hidden, self.dtype, self.block),
                      takes_self=True),
        validator=min_ctas_per_sm_field, doc="CTAs an SM must hold (.minnctapersm); None: 1024 / block")

    #: the requests ``specdsl verify --variants`` compiles: each mode, with and without the
    #: residual, common widths, an odd row (static, dynamic) and DeepSeek-V3's 7168.
    variants = (
        [{"hidden": h, "dtype": d, "fused_residual": f, "scale_mode": m}
         for h in (4096, 8192) for d in ("bf16", "f16", "f32") for f in (False, True)
         for m in ("dynamic", "static", "group")]
        + [{"hidden": 4097, "scale_mode": m} for m in ("dynamic", "static")]
        + [{"hidden": 7168, "scale_mode": "group", "fused_residual": True},
           {"hidden": 16384, "scale_mode": "dynamic", "fused_residual": True}])

    #: What each pointer parameter points to (docs/writing-specs.md, "Array declarations").
    arrays = {"x": "dtype[rows, hidden]",
              "residual": "dtype[rows, hidden] if fused_residual else None",
              "weight": "dtype[hidden]", "q": "e4m3[rows, hidden]",
              "scale": "f32[rows] if scale_mode == 'dynamic' else "
                       "f32[rows, hidden / 128] if scale_mode == 'group' else f32[1]"}

    @property
    def vector(self) -> int:
        """Elements one load moves (see :attr:`RMSNorm.vector <specdsl.kernels.RMSNorm.vector>`)."""
        return vector_elements(self.hidden, self.dtype)

    @property
    def vector_bytes(self) -> int:
        """Bytes one load of x moves, the alignment x, residual and weight need."""
        return self.vector * self.dtype.size

    def launch_dims(self, rows: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``rows`` rows: one CTA of ``block`` threads per row.

        Raises:
            SpecError: ``rows`` is not an int from 1 to 2**31 - 1.
        """
        return row_launch_dims("RMSNormQuant", rows, self.block)

    def bytes_moved(self, rows: int) -> int:
        """Fewest bytes a launch must move: x, weight (and residual) read once, q (1 byte an
        element, and s) written once, and the scales (f32)."""
        rows = count("RMSNormQuant.bytes_moved", "rows", rows)
        arrays = 3 if self.fused_residual else 1  # x (+ residual in, s out)
        scales = {"dynamic": 4 * rows, "static": 4,
                  "group": 4 * rows * (self.hidden // fp8_quant.GROUP_SIZE)}[self.scale_mode]
        return (arrays * rows + 1) * self.hidden * self.dtype.size + rows * self.hidden + scales


def reference(x: Any, weight: Any, eps: float, dtype: DType, scale_mode: str,
              scale: float | None = None) -> tuple[Any, Any, Any]:
    """float64 RMSNorm of ``x``, rounded to ``dtype``, then quantized: ``(quotient, scales,
    y)``, the quotient clipped to +-448 (what decoded codes approach), the scales of
    ``scale_mode`` (``"static"``: ``scale``) and the rounded ``y`` they come from."""
    y = from_bits(to_bits(rmsnorm.reference(x, weight, eps), dtype), dtype)
    quotient, scales = fp8_quant.mode_reference(y, scale_mode, scale)
    return quotient, scales, y


def example(spec: RMSNormQuant, rng: Any, rows: int = 7) -> KernelCase:
    """A launch of ``spec`` on ``rows`` random rows (x, residual ~ N(0, 1), weight ~
    N(1, 0.5)); the static scale puts the largest |y| near 400. Expected: the float64
    quotients of :func:`reference` (decoded codes are compared with them, within
    ``TOLERANCE[F8E4M3]``), the scales, and with ``fused_residual`` the rounded sum."""
    import numpy as np

    shape = (rows, spec.hidden)
    args, expected, x64, w64 = rmsnorm.example_inputs(spec, rng, rows)
    eps = float(np.float32(spec.eps))
    static = None
    if spec.scale_mode == "static":
        y_max = np.abs(rmsnorm.reference(x64, w64, eps)).max()
        static = np.float32(y_max / 400.0)
    quotient, scales, _ = reference(x64, w64, eps, spec.dtype, spec.scale_mode,
                                    None if static is None else float(static))
    args.append(("q", Output(shape, DType.F8E4M3)))
    if static is None:
        args.append(("scale", Output(np.shape(scales), DType.F32)))
        expected["scale"] = scales
    else:
        args.append(("scale", np.array([static], dtype=np.float32)))
    args.append(("rows", np.uint32(rows)))
    expected["q"] = quotient
    grid, block = spec.launch_dims(rows)
    return KernelCase(spec=spec, args=tuple(args), grid=grid, block=block, expected=expected,
                      tolerance=TOLERANCE[DType.F8E4M3])
