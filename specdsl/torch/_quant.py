"""``scaled_fp8_quant``: :class:`~specdsl.kernels.Fp8Quant` as two torch ops (dynamic
per-token scales, one static scale), as vLLM splits it; ``per_token_group_quant_fp8``: its
per-group scales as a third. The codes' and scales' allocation is shared with the fused
epilogues (``_fused_quant.py``)."""


from typing import Any

import torch

from ..kernels.fp8_quant import GROUP_SIZE
from . import _eager, _runtime, _validate, specs

__all__ = ["scaled_fp8_quant", "per_token_group_quant_fp8", "FP8_DTYPE", "new_codes",
           "new_scales", "scales_shape"]

_OP_NAME = "specdsl.torch.scaled_fp8_quant"

#: The element type of the codes: OCP FP8 E4M3 (finite, largest 448).
FP8_DTYPE = torch.float8_e4m3fn


def _check(x: torch.Tensor, scale: torch.Tensor | None = None) -> None:
    _validate.float_tensor(_OP_NAME, "x", x)
    if scale is not None:
        _validate.static_scale(_OP_NAME, scale, x)


def _request(x: torch.Tensor, static: bool, rows: int = 0, sm_count: int = 0) -> Any:
    """The request for ``rows`` rows of ``x`` on a device of ``sm_count`` SMs (0 rows at
    trace time: the request's checks only)."""
    return _validate.request(_OP_NAME, "x", x, specs.scaled_fp8_quant,
                             x.shape[-1], x.dtype, static, rows, sm_count)


def scales_shape(x: torch.Tensor, mode: str = "dynamic", width: Any = None) -> tuple[Any, ...]:
    """The shape of the float32 scales for rows of ``x`` (of ``width`` elements, x's last
    dimension if None): ``[..., 1]`` a token (``"dynamic"``), ``[..., width / 128]`` a group
    (``"group"``)."""
    count = (x.shape[-1] if width is None else width) // GROUP_SIZE if mode == "group" else 1
    return (*x.shape[:-1], count)


def new_codes(x: torch.Tensor, width: Any = None) -> torch.Tensor:
    """New FP8 codes for rows of ``x``: x's shape, or ``width`` codes a row."""
    shape = x.shape if width is None else (*x.shape[:-1], width)
    return x.new_empty(shape, dtype=FP8_DTYPE)


def new_scales(x: torch.Tensor, mode: str = "dynamic", width: Any = None) -> torch.Tensor:
    """New float32 scales for rows of ``x``, shaped as :func:`scales_shape` says."""
    return x.new_empty(scales_shape(x, mode, width), dtype=torch.float32)


def _plan(x: torch.Tensor, scale: torch.Tensor | None, index: int) -> _validate.Plan:
    """Every check of a scaled_fp8_quant call, in order; the plan they settle for device
    ``index`` (few rows are split over CTAs by its SM count)."""
    _check(x, scale)
    _validate.on_cuda(_OP_NAME, "x", x)
    rows = _validate.rows(x)
    # the dynamic scale's CTAs of a row form a cluster (sm_90); a static scale's share nothing
    sms = _runtime.sm_count(index) if scale is not None else _runtime.cluster_sm_count(index)
    return _validate.plan(_request(x, scale is not None, rows, sms), rows, scales_shape(x))


_PLANS = _validate.Plans()


def _quantize(x: torch.Tensor, scale: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The implementation of both ops (and of their eager fast path): ``(q, scale)``, with
    new per-token scales when ``scale`` is None."""
    key: tuple[Any, ...]
    if scale is None:
        index = _validate.placed(x)
        key = (x.shape, x.dtype, index)
    else:
        index = _validate.placed(x, scale)
        key = (x.shape, x.dtype, scale.shape, scale.dtype, index)
    plan = _PLANS.get(key)
    if plan is None or index < 0:
        plan = _PLANS.keep(key, _plan(x, scale, index))
    (scales,) = plan.shapes
    q = torch.empty_like(x, dtype=FP8_DTYPE)
    if scale is None:
        scale = x.new_empty(scales, dtype=torch.float32)
    if plan.rows:
        _runtime.launch(plan, (x, q, scale), index)
    return q, scale


def _fake_check(x: torch.Tensor, scale: torch.Tensor | None) -> None:
    _check(x, scale)
    if _validate.concrete(x.shape[-1]):  # trace time: refuse what a call would refuse
        _request(x, scale is not None)


def _dynamic(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _quantize(x, None)


def _dynamic_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _fake_check(x, None)
    return new_codes(x), new_scales(x)


def _static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return _quantize(x, scale)[0]


def _static_fake(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    _fake_check(x, scale)
    return new_codes(x)


torch.library.custom_op("specdsl::dynamic_per_token_scaled_fp8_quant", _dynamic,
                        mutates_args=()).register_fake(_dynamic_fake)
torch.library.custom_op("specdsl::static_scaled_fp8_quant", _static,
                        mutates_args=()).register_fake(_static_fake)
_DYNAMIC_OP = torch.ops.specdsl.dynamic_per_token_scaled_fp8_quant.default
_STATIC_OP = torch.ops.specdsl.static_scaled_fp8_quant.default


def scaled_fp8_quant(x: torch.Tensor, scale: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to FP8 E4M3 codes with f32 scales: ``x ~ q.float() * scale``.

    ``q = saturate(x / scale)`` rounded to nearest even, saturating at +-448 (computed
    as ``x * (1 / scale)``), launching :class:`~specdsl.kernels.Fp8Quant` (with loads
    without L1 lines for launches moving 2 to 64 MiB, :func:`~specdsl.kernels.small_launch_loads`;
    the same codes and scales):

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
    if _eager.plain(x) if scale is None else _eager.plain(x, scale):
        return _quantize(x, scale)
    if scale is None:
        codes, scales = _DYNAMIC_OP(x)
        return codes, scales
    return _STATIC_OP(x, scale), scale


_GROUP_NAME = "specdsl.torch.per_token_group_quant_fp8"


def _group_request(x: torch.Tensor, rows: int = 0, sm_count: int = 0) -> Any:
    return _validate.request(_GROUP_NAME, "x", x, specs.per_token_group_quant_fp8,
                             x.shape[-1], x.dtype, rows, sm_count)


def _group_plan(x: torch.Tensor, index: int) -> _validate.Plan:
    """Every check of a per_token_group_quant_fp8 call, in order; the plan they settle for
    device ``index`` (few rows are split over CTAs by its SM count)."""
    _validate.float_tensor(_GROUP_NAME, "x", x)
    _validate.on_cuda(_GROUP_NAME, "x", x)
    rows = _validate.rows(x)
    return _validate.plan(_group_request(x, rows, _runtime.sm_count(index)), rows,
                          scales_shape(x, "group"))


_GROUP_PLANS = _validate.Plans()


def _group(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The implementation of ``specdsl::per_token_group_quant_fp8`` (and of its eager fast
    path)."""
    index = _validate.placed(x)
    key = (x.shape, x.dtype, index)
    plan = _GROUP_PLANS.get(key)
    if plan is None or index < 0:
        plan = _GROUP_PLANS.keep(key, _group_plan(x, index))
    (scales,) = plan.shapes
    q, scale = torch.empty_like(x, dtype=FP8_DTYPE), x.new_empty(scales, dtype=torch.float32)
    if plan.rows:
        _runtime.launch(plan, (x, q, scale), index)
    return q, scale


def _group_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _validate.float_tensor(_GROUP_NAME, "x", x)
    if _validate.concrete(x.shape[-1]):  # trace time: refuse what a call would refuse
        _group_request(x)
    return new_codes(x), new_scales(x, "group")


torch.library.custom_op("specdsl::per_token_group_quant_fp8", _group,
                        mutates_args=()).register_fake(_group_fake)
_GROUP_OP = torch.ops.specdsl.per_token_group_quant_fp8.default


def per_token_group_quant_fp8(x: torch.Tensor, group_size: int = GROUP_SIZE
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to FP8 E4M3 codes with one f32 scale a group of 128 elements along
    each row (DeepSeek-V3's 1 x 128 activation tiles), as vLLM's ``per_token_group_quant_fp8``
    (row-major scales, ``eps`` 1e-10): ``scale[..., g] = max(max |x[..., 128 g : 128 g +
    128]|, 1e-10) / 448`` and ``q = saturate(x * (1 / scale))``, launching
    :class:`~specdsl.kernels.Fp8Quant` with ``scale_mode="group"`` (op
    ``torch.ops.specdsl.per_token_group_quant_fp8``; loads as :func:`scaled_fp8_quant`'s).
    DeepGEMM wants the scales column-major: transpose them.

    Args:
        x: ``[..., hidden]``, contiguous, on a CUDA device; f32, f16 or bf16; ``hidden`` a
            multiple of 128. Every leading dimension is a token.
        group_size: 128, the only group the kernel has.

    Returns:
        ``(q, scale)``: ``q`` a new ``torch.float8_e4m3fn`` tensor of x's shape; ``scale`` a
        new float32 tensor ``x.shape[:-1] + (hidden / 128,)``.

    Raises:
        LaunchError: a wrong dtype or device, or a non-contiguous ``x``.
        SpecError: a ``group_size`` other than 128, or a row length the kernel does not
            take (not a multiple of 128).
    """
    _validate.scale_mode(_GROUP_NAME, None, group_size)
    if _eager.plain(x):
        return _group(x)
    codes, scales = _GROUP_OP(x)
    return codes, scales
