"""Fp8Quant: per-token (or static) quantization to OCP FP8 E4M3 with f32 scales."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ..dtype import DType
from ..errors import SpecError
from ..fields import baked
from ..spec import kernel_spec
from ._case import TOLERANCE, KernelCase, Output, from_bits, to_bits
from ._checks import FLOAT_DTYPES, block_size, one_of
from ._rows import cdiv, check_length, most_vectors_per_thread, threads_for, vector_elements

__all__ = ["Fp8Quant", "reference", "example", "default_block", "E4M3_MAX", "MIN_SCALE",
           "DEFAULT_BLOCK", "MAX_HIDDEN"]

#: Largest finite OCP FP8 E4M3 value (OCP 8-bit Floating Point Specification, 2023).
E4M3_MAX = 448.0
#: The dynamic scale's floor: the smallest normal f32, 2^-126. An all-zero row gets this
#: scale (and zero codes); 1/scale stays finite.
MIN_SCALE = 2.0**-126
#: Threads per CTA for rows of up to 256 threads x 8 16-byte vectors (measured best at
#: hidden 4096 and 8192, docs/kernels/fp8_quant.md); longer rows get more threads.
DEFAULT_BLOCK = 256


#: Longest row: 2^20 elements (rows longer than the registers hold take two passes).
MAX_HIDDEN = 2**20


def default_block(hidden: int, dtype: DType) -> int:
    """Threads per CTA for rows of ``hidden`` elements (the ``block`` default):
    :data:`DEFAULT_BLOCK`, or the fewest whole warps that hold a longer row in registers
    (``Fp8Quant(hidden=18432)``: 288 threads; 28672: 448), 1024 for rows longer than
    that (which then take chunks)."""
    lanes = vector_elements(hidden, dtype)
    vectors, most = max(1, hidden // lanes), most_vectors_per_thread(lanes, dtype)
    return min(1024, max(DEFAULT_BLOCK, threads_for(vectors, most)))


def _hidden_check(instance: Any, attribute: Any, value: int) -> None:
    check_length(value)
    if value > MAX_HIDDEN:
        raise ValueError(f"expected at most {MAX_HIDDEN} elements")


def _static_scale_check(instance: Any, attribute: Any, value: float | None) -> None:
    if instance.scale_mode == "static_baked":
        if value is None or not 2.0**-126 <= value <= 2.0**126:
            raise ValueError("scale_mode static_baked needs a scale from 2^-126 to 2^126 "
                             "(its reciprocal is baked as an f32)")
    elif value is not None:
        raise ValueError(f"expected None: only scale_mode static_baked bakes a scale "
                         f"(scale_mode is {instance.scale_mode!r})")


@kernel_spec(template="fp8_quant.ptx.j2", entry="fp8_quant")
class Fp8Quant:
    """Quantize ``x`` ``[tokens, hidden]`` to OCP FP8 E4M3 codes ``q`` with f32 scales.

    ``q[t, j] = saturate(x[t, j] / scale)`` (round to nearest even, saturating at
    +-448: ``cvt.rn.satfinite.e4m3x2.f32``, PTX ISA "cvt": sm_90 or newer, or sm_89 with
    PTX ISA 8.1, ``Target(89, ptx_version=(8, 1))``), computed as ``x * (1 / scale)``
    with an IEEE reciprocal. Dequantize with ``q * scale``. The row max is one CTA
    reduction (``templates/reduce.ptx.j2``), right for every ``block``.

    ``scale_mode``:

    * ``"dynamic"``: per token, ``scale[t] = max(max_j |x[t, j]| / 448, 2^-126)``,
      written to the ``scale`` output ``[tokens]``. The floor (:data:`MIN_SCALE`) makes an
      all-zero row quantize to zeros with scale 2^-126.
    * ``"static_baked"``: one scale, ``static_scale``, baked into the PTX.
    * ``"static_param"``: one scale read from the ``scale`` pointer (one f32) at launch.
      A zero or non-finite scale there is the caller's error (not checked).

    Kernel parameters (in order): ``x`` (``dtype``, aligned to one vector,
    :attr:`vector_bytes`), ``q`` (e4m3 bytes, ``[tokens, hidden]``, aligned to
    :attr:`vector` bytes), then ``scale`` (f32) except for ``static_baked``. Grid: one
    CTA per token.

    Any row length: a row moves in vectors of :attr:`vector` elements, the largest power
    of two dividing ``hidden`` up to 16 bytes (so every row starts aligned), down to one
    element for odd lengths. A row that ``block`` threads hold in registers (32 registers
    a thread: 65536 f16/bf16 elements at 1024 threads with 16-byte vectors, 32768 f32 or
    odd-length ones) is read once; a longer one (:attr:`chunks` > 1) is walked in
    chunks, twice for a dynamic scale (the row max, then the quantization; the first
    pass keeps x in L2 with an evict_last policy), once for a static scale.

    Special values: NaN inputs give NaN codes (0x7F/0xFF) and are ignored by the row
    max; values whose quotient is beyond +-448, infinities included, saturate to +-448;
    a dynamic row holding +-inf gets scale ``inf`` (finite elements quantize to 0, the
    infinities to NaN). See docs/kernels/fp8_quant.md, "Special values".

    Fields:
        dtype (baked): f32, f16 or bf16.
        hidden (baked): elements per row, 1 to 2^20.
        block (baked): threads per CTA (the PTX unrolls the row over them), a multiple
            of 32 up to 1024; the default follows ``hidden`` (:func:`default_block`).
        scale_mode (baked): ``"dynamic"``, ``"static_baked"`` or ``"static_param"``.
        static_scale (baked): the scale for ``static_baked``, else None.
    """

    dtype: DType = baked(DType.BF16, validator=one_of(*FLOAT_DTYPES),
                         doc="input element type: f32, f16 or bf16")
    hidden: int = baked(4096, validator=_hidden_check, doc="elements per row")
    scale_mode: Literal["dynamic", "static_baked", "static_param"] = baked(
        "dynamic", doc="dynamic per-token scales, or one static scale (baked or passed)")
    static_scale: float | None = baked(None, validator=_static_scale_check,
                                       doc="the scale of static_baked, else None")
    block: int = baked(attrs.Factory(lambda self: default_block(self.hidden, self.dtype),
                                     takes_self=True),
                       validator=block_size, doc="threads per CTA (baked: the PTX unrolls over it)")

    #: the requests `specdsl verify --variants` compiles: common widths, DeepSeek-V3's MLP
    #: width (18432: 288 threads), odd rows (4097, one element a vector), 8-byte vectors
    #: (4100), rows longer than the registers (131073, 65540 f32: chunks), the static modes.
    variants = (
        [{"dtype": dt, "hidden": h} for dt in ("f32", "f16", "bf16")
         for h in (4096, 8192, 18432, 4097, 4100)]
        + [{"dtype": "bf16", "hidden": 131073}, {"dtype": "f32", "hidden": 65540},
           {"dtype": "bf16", "hidden": 131073, "scale_mode": "static_param"}]
        + [{"scale_mode": "static_param"}, {"scale_mode": "static_baked", "static_scale": 0.05}]
    )

    @property
    def lanes(self) -> int:
        """Elements per 16-byte input vector (the widest load)."""
        return self.dtype.vector_lanes

    @property
    def vector(self) -> int:
        """Elements (and codes) one load moves: the largest power of two dividing
        ``hidden``, at most 16 bytes of input (see
        :func:`~specdsl.kernels._rows.vector_elements`)."""
        return vector_elements(self.hidden, self.dtype)

    @property
    def vector_bytes(self) -> int:
        """Bytes of ``x`` one load moves, the alignment ``x`` needs."""
        return self.vector * self.dtype.size

    @property
    def chunks(self) -> int:
        """Pieces a row is processed in: 1 when ``block`` threads hold it in registers (x
        read once), else the number of chunks each of the two passes walks."""
        vectors = self.hidden // self.vector
        most = most_vectors_per_thread(self.vector, self.dtype)
        return 1 if vectors <= self.block * most else cdiv(vectors, self.block * most)

    def grid(self, tokens: int) -> tuple[int, int, int]:
        """One CTA per token.

        Raises:
            SpecError: ``tokens`` is not from 1 to 2^31 - 1 (the grid's x limit).
        """
        if not 1 <= tokens < 2**31:
            raise SpecError(f"Fp8Quant.grid: expected 1 to {2**31 - 1} tokens (got {tokens})")
        return (tokens, 1, 1)

    def launch_dims(self, tokens: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``tokens`` rows: one CTA of ``block`` threads per row."""
        return self.grid(tokens), (self.block, 1, 1)

    def bytes_moved(self, tokens: int) -> int:
        """Fewest bytes a launch must move: x read once, q written once (1 byte per
        element), and one f32 scale per token (dynamic) or one in total (static_param)."""
        scales = {"dynamic": 4 * tokens, "static_param": 4, "static_baked": 0}[self.scale_mode]
        return tokens * self.hidden * (self.dtype.size + 1) + scales


def reference(x: Any, scale: Any = None) -> tuple[Any, Any]:
    """float64 quantization of ``x`` ``[tokens, hidden]``: ``(x / scale clipped to +-448, scale)``.

    ``scale=None`` computes the dynamic per-token scales ``max(amax / 448, 2^-126)``,
    shape ``[tokens]``; otherwise ``scale`` is one number. The first result is the
    exact (unrounded) quotient: E4M3 rounding is what a comparison must tolerate.

    Special values, as the kernel (docs/kernels/fp8_quant.md, "Special values"): the
    row max ``amax`` ignores NaN (as vLLM's ``fmaxf``); a NaN quotient stays NaN (the
    E4M3 NaN code); quotients beyond +-448, infinities included, saturate to +-448. A
    row holding +-inf gets scale ``inf``: its finite elements give 0, its infinities
    ``inf / inf = NaN``.
    """
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        if scale is None:
            amax = np.fmax.reduce(np.abs(x), axis=-1, initial=0.0)
            scale = np.maximum(amax / E4M3_MAX, MIN_SCALE)
            quotient = x / scale[:, None]
        else:
            scale = np.float64(scale)
            quotient = x / scale
        return np.clip(quotient, -E4M3_MAX, E4M3_MAX), scale


def example(spec: Fp8Quant, rng, tokens: int = 37, zero_rows: tuple[int, ...] = (0,)) -> KernelCase:
    """A launch of ``spec`` on ``tokens`` random rows; rows in ``zero_rows`` are all zero.

    Rows are N(0, 1) times a per-row magnitude from 2^-8 to 2^8. Static scales are
    chosen so that some elements saturate. Expected ``q`` is the float64 quotient
    (decoded codes are compared with it). E4M3 keeps 3 mantissa bits: each code is
    within 2^-4 relative of the quotient, about 2.7e-2 in the L2 norm over normal
    data; the tolerance is ``TOLERANCE[F8E4M3]`` (4e-2, :data:`~specdsl.kernels._case.TOLERANCE`),
    far under what a wrong scale or exponent gives.
    """
    import numpy as np

    magnitude = 2.0 ** rng.uniform(-8, 8, size=(tokens, 1))
    x_real = rng.standard_normal((tokens, spec.hidden)) * magnitude
    for row in zero_rows:
        if row < tokens:
            x_real[row] = 0.0
    x = to_bits(x_real, spec.dtype)
    xf = from_bits(x, spec.dtype)
    args: list[tuple[str, Any]] = [("x", x), ("q", Output((tokens, spec.hidden), DType.F8E4M3))]
    expected: dict[str, Any] = {}
    if spec.scale_mode == "dynamic":
        quotient, scale = reference(xf)
        args.append(("scale", Output((tokens,), DType.F32)))
        expected["scale"] = scale
    elif spec.scale_mode == "static_param":
        static = np.float32(np.abs(xf).max() / 300.0 if np.abs(xf).max() > 0 else 1.0)
        quotient, _ = reference(xf, float(static))
        args.append(("scale", np.array([static], dtype=np.float32)))
    else:
        quotient, _ = reference(xf, spec.static_scale)
    expected["q"] = quotient
    return KernelCase(
        spec=spec, args=tuple(args), grid=spec.grid(tokens), block=(spec.block, 1, 1),
        expected=expected, tolerance=TOLERANCE[DType.F8E4M3],
    )
