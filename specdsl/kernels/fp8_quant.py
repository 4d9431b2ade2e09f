"""Fp8Quant: per-token (or static) quantization to OCP FP8 E4M3 with f32 scales."""

from __future__ import annotations

from typing import Any, Literal

from ..dtype import DType
from ..errors import SpecError
from ..fields import baked
from ..spec import kernel_spec
from ._case import TOLERANCE, KernelCase, Output, from_bits, to_bits
from ._checks import FLOAT_DTYPES, block_size, one_of

__all__ = ["Fp8Quant", "reference", "example", "E4M3_MAX", "MIN_SCALE"]

#: Largest finite OCP FP8 E4M3 value (OCP 8-bit Floating Point Specification, 2023).
E4M3_MAX = 448.0
#: The dynamic scale's floor: the smallest normal f32, 2^-126. An all-zero row gets this
#: scale (and zero codes); 1/scale stays finite.
MIN_SCALE = 2.0**-126
#: Most 16-byte vectors one thread keeps in registers.
_MAX_VECTORS_PER_THREAD = 8


def _hidden_check(instance: Any, attribute: Any, value: int) -> None:
    lanes = instance.dtype.vector_lanes
    if value <= 0 or value % lanes:
        raise ValueError(f"expected a positive multiple of {lanes} (one 16-byte vector of "
                         f"{instance.dtype})")
    most = _MAX_VECTORS_PER_THREAD * instance.block * lanes
    if value > most:
        raise ValueError(f"expected at most {most} elements with block={instance.block} "
                         f"({_MAX_VECTORS_PER_THREAD} vectors per thread are kept in registers)")


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

    Kernel parameters (in order): ``x`` (``dtype``, 16-byte aligned), ``q`` (e4m3 bytes,
    ``[tokens, hidden]``), then ``scale`` (f32) except for ``static_baked``. Grid:
    one CTA per token.

    Special values: NaN inputs give NaN codes (0x7F/0xFF) and are ignored by the row
    max; values whose quotient is beyond +-448, infinities included, saturate to +-448;
    a dynamic row holding +-inf gets scale ``inf`` (finite elements quantize to 0, the
    infinities to NaN). See docs/kernels/fp8_quant.md, "Special values".

    Fields:
        dtype (baked): f32, f16 or bf16.
        hidden (baked): elements per row, a multiple of 16 bytes' worth, at most
            8 * block * (16 / element size): 8 vectors per thread, kept in registers.
        block (baked): threads per CTA (the PTX unrolls the row over them), a multiple
            of 32 up to 1024.
        scale_mode (baked): ``"dynamic"``, ``"static_baked"`` or ``"static_param"``.
        static_scale (baked): the scale for ``static_baked``, else None.
    """

    dtype: DType = baked(DType.BF16, validator=one_of(*FLOAT_DTYPES),
                         doc="input element type: f32, f16 or bf16")
    block: int = baked(256, validator=block_size, doc="threads per CTA (baked: the PTX unrolls over it)")
    hidden: int = baked(4096, validator=_hidden_check, doc="elements per row")
    scale_mode: Literal["dynamic", "static_baked", "static_param"] = baked(
        "dynamic", doc="dynamic per-token scales, or one static scale (baked or passed)")
    static_scale: float | None = baked(None, validator=_static_scale_check,
                                       doc="the scale of static_baked, else None")

    #: the requests `specdsl verify --grid` compiles
    variants = (
        [{"dtype": dt, "hidden": h} for dt in ("f32", "f16", "bf16") for h in (4096, 8192)]
        + [{"scale_mode": "static_param"}, {"scale_mode": "static_baked", "static_scale": 0.05}]
    )

    @property
    def lanes(self) -> int:
        """Elements per 16-byte input vector."""
        return self.dtype.vector_lanes

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
