"""FP8 E4M3 conventions :class:`~specdsl.kernels.Fp8Quant` and the fused FP8 epilogues
share (the largest code, the scales' floors, the group size), its float64 references, the
f32 emulation of the codes it writes, and its example launch: the tests' and ``specdsl
run``'s oracle. Re-exported by :mod:`specdsl.kernels.fp8_quant`."""

from __future__ import annotations

from typing import Any

from .._spec.dtype import DType
from .case import TOLERANCE, KernelCase, Output, from_bits, to_bits

__all__ = ["reference", "group_reference", "mode_reference", "kernel_codes", "example",
           "E4M3_MAX", "MIN_SCALE", "GROUP_SIZE", "GROUP_EPS"]

#: Largest finite OCP FP8 E4M3 value (OCP 8-bit Floating Point Specification, 2023).
E4M3_MAX = 448.0
#: The dynamic scale's floor: the smallest normal f32, 2^-126. An all-zero row gets this
#: scale (and zero codes); 1/scale stays finite.
MIN_SCALE = 2.0**-126
#: Elements a group of scale_mode "group" (DeepSeek-V3's blockwise activation scales:
#: DeepSeek-V3 technical report, 2024, section 3.3.2, "1x128 tiles").
GROUP_SIZE = 128
#: The group amax's floor, as vLLM's ``per_token_group_quant_fp8`` (its ``eps``, 1e-10):
#: an all-zero group gets scale 1e-10 / 448 and zero codes.
GROUP_EPS = 1e-10


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


def group_reference(x: Any, group: int = GROUP_SIZE) -> tuple[Any, Any]:
    """float64 per-group quantization of ``x`` ``[tokens, hidden]``: ``(quotient clipped to
    +-448, scales [tokens, hidden / group])``, ``scale = max(amax, 1e-10) / 448`` a group.

    As :func:`reference`: NaN is ignored by the group max, a group holding +-inf gets
    scale ``inf``.
    """
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    groups = x.reshape(x.shape[0], -1, group)
    with np.errstate(invalid="ignore", divide="ignore"):
        amax = np.fmax.reduce(np.abs(groups), axis=-1, initial=0.0)
        scale = np.maximum(amax, GROUP_EPS) / E4M3_MAX
        quotient = (groups / scale[..., None]).reshape(x.shape)
    return np.clip(quotient, -E4M3_MAX, E4M3_MAX), scale


def mode_reference(y: Any, scale_mode: str, scale: float | None = None) -> tuple[Any, Any]:
    """:func:`reference` (``"dynamic"``, or ``"static"`` with ``scale``) or
    :func:`group_reference` (``"group"``) of ``y``: ``(quotient clipped to +-448, scales)``."""
    if scale_mode == "group":
        return group_reference(y)
    return reference(y, None if scale_mode == "dynamic" else scale)


def kernel_codes(x: Any, scale_mode: str = "dynamic", scale: float | None = None) -> tuple[Any, Any]:
    """The codes and scales the kernel produces for ``x`` ``[tokens, hidden]`` (values exact
    in f32), computed in f32 as the PTX does: ``amax`` exact, ``scale`` by an IEEE f32
    division (``div.rn.f32``) and the mode's floor, ``inv`` the IEEE f32 reciprocal
    (``rcp.rn.f32``), ``x * inv`` rounded to f32 (``mul.rn.f32``), then to E4M3 (nearest
    even, saturating at +-448; NaN gives 0x7F with x's sign).

    ``scale_mode``: ``"dynamic"``, ``"group"``, or ``"static"`` with ``scale`` the f32
    scale (baked or passed). Returns ``(codes uint8 [tokens, hidden], scales f32)``:
    ``[tokens]``, ``[tokens, hidden / 128]`` or the one static scale. Use it to check that a
    fused kernel quantizes exactly as the unfused pair.
    """
    import numpy as np

    x32 = np.asarray(x, dtype=np.float32)
    f32 = np.float32
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if scale_mode == "dynamic":
            amax = np.fmax.reduce(np.abs(x32), axis=-1, initial=f32(0))
            scales = np.maximum(amax / f32(E4M3_MAX), f32(MIN_SCALE)).astype(f32)
            inv = (f32(1) / scales)[:, None]
        elif scale_mode == "group":
            groups = x32.reshape(x32.shape[0], -1, GROUP_SIZE)
            amax = np.fmax.reduce(np.abs(groups), axis=-1, initial=f32(0))
            scales = (np.maximum(amax, f32(GROUP_EPS)) / f32(E4M3_MAX)).astype(f32)
            inv = np.repeat(f32(1) / scales, GROUP_SIZE, axis=-1)
        else:
            scales = f32(scale)
            inv = f32(1) / scales
        product = (x32 * inv).astype(f32)
    codes = to_bits(np.nan_to_num(product, nan=0.0), DType.F8E4M3)
    nan = np.isnan(product)
    codes = np.where(nan, np.where(np.signbit(product), 0xFF, 0x7F), codes).astype(np.uint8)
    return codes, scales


def example(spec: Any, rng: Any, tokens: int = 37,
            zero_rows: tuple[int, ...] = (0,)) -> KernelCase:
    """A launch of ``spec`` (an :class:`~specdsl.kernels.Fp8Quant`) on ``tokens`` random rows
    (``tokens * split`` CTAs: :meth:`~specdsl.kernels.Fp8Quant.launch_dims`); rows in
    ``zero_rows`` are all zero.

    Rows are N(0, 1) times a per-row magnitude from 2^-8 to 2^8. Static scales are
    chosen so that some elements saturate. Expected ``q`` is the float64 quotient
    (decoded codes are compared with it). E4M3 keeps 3 mantissa bits: each code is
    within 2^-4 relative of the quotient, about 2.7e-2 in the L2 norm over normal
    data; the tolerance is ``TOLERANCE[F8E4M3]`` (4e-2, :data:`~specdsl.kernels.case.TOLERANCE`),
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
    elif spec.scale_mode == "group":
        quotient, scale = group_reference(xf)
        args.append(("scale", Output(scale.shape, DType.F32)))
        expected["scale"] = scale
    elif spec.scale_mode == "static_param":
        static = np.float32(np.abs(xf).max() / 300.0 if np.abs(xf).max() > 0 else 1.0)
        quotient, _ = reference(xf, float(static))
        args.append(("scale", np.array([static], dtype=np.float32)))
    else:
        quotient, _ = reference(xf, spec.static_scale)
    expected["q"] = quotient
    grid, block = spec.launch_dims(tokens)  # split CTAs a token
    return KernelCase(spec=spec, args=tuple(args), grid=grid, block=block, expected=expected,
                      tolerance=TOLERANCE[DType.F8E4M3])
