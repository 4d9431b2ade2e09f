"""``scaled_fp8_quant``: :class:`~specdsl.kernels.Fp8Quant` as two torch ops (dynamic
per-token scales, one static scale), as vLLM splits it."""


from typing import Any

import torch

from ..errors import LaunchError
from . import _runtime, _validate, specs

__all__ = ["scaled_fp8_quant", "FP8_DTYPE"]

_OP_NAME = "specdsl.torch.scaled_fp8_quant"

#: The element type of the codes: OCP FP8 E4M3 (finite, largest 448).
FP8_DTYPE = torch.float8_e4m3fn


def _check(x: torch.Tensor, scale: torch.Tensor | None = None) -> None:
    _validate.float_tensor(_OP_NAME, "x", x)
    if scale is not None:
        _validate.tensor(_OP_NAME, "scale", scale)
        if scale.dtype != torch.float32 or scale.numel() != 1:
            raise LaunchError(f"{_OP_NAME}: scale is a {scale.dtype} tensor of shape "
                              f"{tuple(scale.shape)}; expected one torch.float32 value (a "
                              f"static scale; leave scale=None for dynamic per-token scales)")
        _validate.same_device(_OP_NAME, x=x, scale=scale)


def _request(x: torch.Tensor, static: bool) -> Any:
    return _validate.request(_OP_NAME, "x", x, specs.scaled_fp8_quant,
                             x.shape[-1], x.dtype, static)


def _codes(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=FP8_DTYPE, device=x.device)


def _scales(x: torch.Tensor) -> torch.Tensor:
    return torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)


def _quantize(x: torch.Tensor, scale: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The real implementation of both ops: ``(q, scale)``, with new per-token scales when
    ``scale`` is None."""
    static = scale is not None
    _check(x, scale)
    _validate.on_cuda(_OP_NAME, "x", x)
    spec = _request(x, static)
    q = _codes(x)
    if scale is None:
        scale = _scales(x)
    tokens = x.numel() // x.shape[-1]
    if tokens:
        _runtime.launch(spec, (x, q, scale), spec.launch_dims(tokens), x.device)
    return q, scale


def _fake_check(x: torch.Tensor, scale: torch.Tensor | None) -> None:
    _check(x, scale)
    if _validate.concrete(x.shape[-1]):  # trace time: refuse what a call would refuse
        _request(x, scale is not None)


@torch.library.custom_op("specdsl::dynamic_per_token_scaled_fp8_quant", mutates_args=())
def _dynamic(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _quantize(x, None)


@_dynamic.register_fake
def _dynamic_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _fake_check(x, None)
    return _codes(x), _scales(x)


@torch.library.custom_op("specdsl::static_scaled_fp8_quant", mutates_args=())
def _static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return _quantize(x, scale)[0]


@_static.register_fake
def _static_fake(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    _fake_check(x, scale)
    return _codes(x)


_DYNAMIC_OP = torch.ops.specdsl.dynamic_per_token_scaled_fp8_quant.default
_STATIC_OP = torch.ops.specdsl.static_scaled_fp8_quant.default


def scaled_fp8_quant(x: torch.Tensor, scale: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to FP8 E4M3 codes with f32 scales: ``x ~ q.float() * scale``.

    ``q = saturate(x / scale)`` rounded to nearest even, saturating at +-448 (computed
    as ``x * (1 / scale)``), launching :class:`~specdsl.kernels.Fp8Quant`:

    * ``scale=None``: dynamic, per token (per row):
      ``scale[..., 0] = max(max |x[..., :]| / 448, 2^-126)``, returned with shape
      ``x.shape[:-1] + (1,)``: ``[tokens, 1]`` for 2-D ``x``, exactly the shape vLLM's
      ``scaled_fp8_quant(x, use_per_token_if_dynamic=True)`` returns
      (op ``torch.ops.specdsl.dynamic_per_token_scaled_fp8_quant``). One difference: vLLM
      floors the scale at ``1 / (448 * 512)``, so for a row whose largest magnitude is
      below 1/512 its codes are coarser than these; an all-zero row gets scale 2^-126
      here and zero codes in both.
    * ``scale`` given: static, one float32 value (shape ``[1]`` or ``[]``) on x's device,
      read at launch (so a CUDA graph replays with the value the tensor holds then); it
      is returned as given, as vLLM does (op ``torch.ops.specdsl.static_scaled_fp8_quant``).
      A zero or non-finite scale is the caller's error, as in vLLM: it is not checked.

    vLLM's per-tensor dynamic mode (``scale=None`` without per-token scales) has no
    kernel here.

    Args:
        x: ``[..., hidden]``, contiguous, on a CUDA device; f32, f16 or bf16. Every
            leading dimension is a token.
        scale: None, or a static scale as above.

    Returns:
        ``(q, scale)``: ``q`` a new ``torch.float8_e4m3fn`` tensor of x's shape, and the
        scales (new, ``x.shape[:-1] + (1,)`` float32) or the given static scale.

    Raises:
        LaunchError: a wrong dtype or device, a non-contiguous ``x``, or a ``scale`` that
            is not one float32 value.
        SpecError: a row length the kernel does not take.
    """
    if scale is None:
        codes, scales = _DYNAMIC_OP(x)
        return codes, scales
    return _STATIC_OP(x, scale), scale
