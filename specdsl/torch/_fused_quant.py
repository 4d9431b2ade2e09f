"""The fused FP8 epilogues as torch ops: ``rms_norm_quant``, ``fused_add_rms_norm_quant``
(:class:`~specdsl.kernels.RMSNormQuant`) and ``silu_and_mul_quant``
(:class:`~specdsl.kernels.SiluMulQuant`), each as three ops, one a scale mode (dynamic per
token, static, per group of 128), as ``scaled_fp8_quant`` splits its modes."""

from typing import Any

import torch

from . import _activation, _eager, _norm, _runtime, _validate, specs
from ._quant import FP8_DTYPE, new_codes, new_scales, scales_shape

__all__ = ["rms_norm_quant", "fused_add_rms_norm_quant", "silu_and_mul_quant"]

_RMS = "specdsl.torch.rms_norm_quant"
_FUSED = "specdsl.torch.fused_add_rms_norm_quant"
_SILU = "specdsl.torch.silu_and_mul_quant"
_increment_version = torch.autograd.graph.increment_version


def _norm_request(op: str, x: torch.Tensor, eps: float, fused: bool, mode: str,
                  l2_evict_last: bool) -> Any:
    return _validate.request(op, "x", x, specs.rms_norm_quant, x.shape[-1], eps, x.dtype,
                             fused, mode, l2_evict_last)


def _norm_checks(op: str, x: torch.Tensor, residual: torch.Tensor | None,
                 weight: torch.Tensor, scale: torch.Tensor | None) -> None:
    _norm.check(op, x, weight, residual)
    if scale is not None:
        _validate.static_scale(op, scale, x)


def _norm_plan(op: str, x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
               eps: float, scale: torch.Tensor | None, mode: str, l2_evict_last: bool
               ) -> _validate.Plan:
    """Every check of an RMSNorm epilogue call, in order; the plan they settle."""
    _norm_checks(op, x, residual, weight, scale)
    _validate.on_cuda(op, "x", x)
    if residual is not None:
        _validate.disjoint(op, "x", x, "residual", residual)
    spec = _norm_request(op, x, eps, residual is not None, mode, l2_evict_last)
    return _validate.plan(spec, _validate.rows(x), scales_shape(x, mode))


_NORM_PLANS = _validate.Plans()


def _norm_quant(op: str, x: torch.Tensor, residual: torch.Tensor | None,
                weight: torch.Tensor, eps: float, scale: torch.Tensor | None,
                mode: str, l2_evict_last: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The implementation of the six RMSNorm ops (and of their eager fast path):
    ``(q, scale)``."""
    tensors: tuple[torch.Tensor, ...] = (x, weight) if residual is None else (x, weight, residual)
    if scale is not None:  # given exactly in static mode
        tensors += (scale,)
    key = (op, mode, eps, l2_evict_last, *[(t.shape, t.dtype) for t in tensors])
    plan, index = _NORM_PLANS.get(key), _validate.placed(*tensors)
    if plan is None or index < 0 or (residual is not None and _validate.overlap(x, residual)):
        plan = _NORM_PLANS.keep(key, _norm_plan(op, x, residual, weight, eps, scale, mode,
                                                l2_evict_last))
    (scales,) = plan.shapes
    q = torch.empty_like(x, dtype=FP8_DTYPE)
    if scale is None:
        scale = x.new_empty(scales, dtype=torch.float32)
    if plan.rows:
        inputs = (x, weight) if residual is None else (x, residual, weight)
        _runtime.launch(plan, (*inputs, q, scale, plan.rows), index)
    return q, scale


def _norm_fake(op: str, x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
               eps: float, scale: torch.Tensor | None, mode: str, l2_evict_last: bool
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The fake implementation: the same checks, then outputs shaped as the real ones
    (the static ops return the codes alone)."""
    _norm_checks(op, x, residual, weight, scale)
    if _validate.concrete(x.shape[-1], eps):  # trace time: refuse what a call would refuse
        _norm_request(op, x, eps, residual is not None, mode, l2_evict_last)
    return new_codes(x), new_scales(x, mode) if scale is None else scale


@torch.library.custom_op("specdsl::rms_norm_quant_dynamic", mutates_args=())
def _rms_dynamic(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                 l2_evict_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _norm_quant(_RMS, x, None, weight, eps, None, "dynamic", l2_evict_last)


@_rms_dynamic.register_fake
def _rms_dynamic_fake(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                      l2_evict_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _norm_fake(_RMS, x, None, weight, eps, None, "dynamic", l2_evict_last)


@torch.library.custom_op("specdsl::rms_norm_quant_static", mutates_args=())
def _rms_static(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, eps: float, *,
                l2_evict_last: bool = False) -> torch.Tensor:
    return _norm_quant(_RMS, x, None, weight, eps, scale, "static", l2_evict_last)[0]


@_rms_static.register_fake
def _rms_static_fake(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, eps: float,
                     *, l2_evict_last: bool = False) -> torch.Tensor:
    return _norm_fake(_RMS, x, None, weight, eps, scale, "static", l2_evict_last)[0]


@torch.library.custom_op("specdsl::rms_norm_quant_group", mutates_args=())
def _rms_group(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
               l2_evict_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _norm_quant(_RMS, x, None, weight, eps, None, "group", l2_evict_last)


@_rms_group.register_fake
def _rms_group_fake(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                    l2_evict_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _norm_fake(_RMS, x, None, weight, eps, None, "group", l2_evict_last)


@torch.library.custom_op("specdsl::fused_add_rms_norm_quant_dynamic", mutates_args=("residual",))
def _fused_dynamic(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *,
                   l2_evict_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _norm_quant(_FUSED, x, residual, weight, eps, None, "dynamic", l2_evict_last)


@_fused_dynamic.register_fake
def _fused_dynamic_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                        eps: float, *, l2_evict_last: bool = False
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    return _norm_fake(_FUSED, x, residual, weight, eps, None, "dynamic", l2_evict_last)


@torch.library.custom_op("specdsl::fused_add_rms_norm_quant_static", mutates_args=("residual",))
def _fused_static(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  scale: torch.Tensor, eps: float, *, l2_evict_last: bool = False
                  ) -> torch.Tensor:
    return _norm_quant(_FUSED, x, residual, weight, eps, scale, "static", l2_evict_last)[0]


@_fused_static.register_fake
def _fused_static_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       scale: torch.Tensor, eps: float, *, l2_evict_last: bool = False
                       ) -> torch.Tensor:
    return _norm_fake(_FUSED, x, residual, weight, eps, scale, "static", l2_evict_last)[0]


@torch.library.custom_op("specdsl::fused_add_rms_norm_quant_group", mutates_args=("residual",))
def _fused_group(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, *,
                 l2_evict_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _norm_quant(_FUSED, x, residual, weight, eps, None, "group", l2_evict_last)


@_fused_group.register_fake
def _fused_group_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                      eps: float, *, l2_evict_last: bool = False
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    return _norm_fake(_FUSED, x, residual, weight, eps, None, "group", l2_evict_last)


def _silu_request(x: torch.Tensor, mode: str, rows: int = 0, sm_count: int = 0) -> Any:
    return _validate.request(_SILU, "x", x, specs.silu_and_mul_quant, x.shape[-1] // 2,
                             x.dtype, mode, rows, sm_count)


def _silu_checks(x: torch.Tensor, scale: torch.Tensor | None) -> None:
    _activation.check(x, _SILU)
    if scale is not None:
        _validate.static_scale(_SILU, scale, x)


def _silu_plan(x: torch.Tensor, scale: torch.Tensor | None, mode: str, index: int
               ) -> _validate.Plan:
    """Every check of a silu_and_mul_quant call, in order; the plan they settle for device
    ``index`` (a few rows are each split over several CTAs by the device's SM count: a
    cluster for the dynamic scale)."""
    _silu_checks(x, scale)
    _validate.on_cuda(_SILU, "x", x)
    rows = _validate.rows(x)
    # the dynamic scale's CTAs of a row form a cluster (sm_90); the others share nothing
    sms = _runtime.cluster_sm_count(index) if mode == "dynamic" else _runtime.sm_count(index)
    spec = _silu_request(x, mode, rows, sms)
    d = x.shape[-1] // 2
    return _validate.plan(spec, rows, (*x.shape[:-1], d),
                          scales_shape(x, mode, d))


_SILU_PLANS = _validate.Plans()


def _silu_quant(x: torch.Tensor, scale: torch.Tensor | None, mode: str
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The implementation of the three SwiGLU ops (and of their eager fast path):
    ``(q, scale)``, ``q`` ``[..., d]``."""
    key: tuple[Any, ...]
    if scale is None:
        index = _validate.placed(x)
        key = (mode, x.shape, x.dtype, index)
    else:  # given exactly in static mode
        index = _validate.placed(x, scale)
        key = (mode, x.shape, x.dtype, scale.shape, scale.dtype, index)
    plan = _SILU_PLANS.get(key)
    if plan is None or index < 0:
        plan = _SILU_PLANS.keep(key, _silu_plan(x, scale, mode, index))
    (codes, scales) = plan.shapes
    q = x.new_empty(codes, dtype=FP8_DTYPE)
    if scale is None:
        scale = x.new_empty(scales, dtype=torch.float32)
    if plan.rows:
        _runtime.launch(plan, (x, q, scale, plan.rows), index)
    return q, scale


def _silu_fake(x: torch.Tensor, scale: torch.Tensor | None, mode: str
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The fake implementation (the static op returns the codes alone)."""
    _silu_checks(x, scale)
    if _validate.concrete(x.shape[-1]):  # trace time: refuse what a call would refuse
        _silu_request(x, mode)
    d = x.shape[-1] // 2
    return new_codes(x, d), new_scales(x, mode, d) if scale is None else scale


@torch.library.custom_op("specdsl::silu_and_mul_quant_dynamic", mutates_args=())
def _silu_dynamic(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _silu_quant(x, None, "dynamic")


@_silu_dynamic.register_fake
def _silu_dynamic_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _silu_fake(x, None, "dynamic")


@torch.library.custom_op("specdsl::silu_and_mul_quant_static", mutates_args=())
def _silu_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return _silu_quant(x, scale, "static")[0]


@_silu_static.register_fake
def _silu_static_fake(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return _silu_fake(x, scale, "static")[0]


@torch.library.custom_op("specdsl::silu_and_mul_quant_group", mutates_args=())
def _silu_group(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _silu_quant(x, None, "group")


@_silu_group.register_fake
def _silu_group_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _silu_fake(x, None, "group")


_OPS = torch.ops.specdsl


def rms_norm_quant(x: torch.Tensor, weight: torch.Tensor, eps: float,
                   scale: torch.Tensor | None = None, group_size: int | None = None, *,
                   l2_evict_last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of each row of ``x``, then FP8 E4M3 codes of the result, in one kernel.

    ``y = x / sqrt(mean(x^2) + eps) * weight`` rounded to x's dtype (as :func:`rms_norm`
    writes it), then ``q = saturate(y * (1 / scale))``, launching
    :class:`~specdsl.kernels.RMSNormQuant`: the codes and scales are those of
    :func:`rms_norm` followed by :func:`scaled_fp8_quant` (or
    :func:`per_token_group_quant_fp8`), without ``y`` going through device memory. Where
    the fused kernel's CTA size is not RMSNorm's (rows of 16-byte vectors,
    :func:`specdsl.kernels.rmsnorm_quant.default_block`), its sum of squares runs in
    another order, so ``rstd`` may differ by one f32 rounding: a ``y`` element may then
    round to the neighbouring value of x's dtype, and its code move one E4M3 step.

    * neither ``scale`` nor ``group_size``: a scale a token, ``max(max |y| / 448, 2^-126)``,
      returned ``[..., 1]`` (op ``specdsl::rms_norm_quant_dynamic``);
    * ``scale`` (one float32 value on x's device, read at launch): static, returned as given
      (op ``specdsl::rms_norm_quant_static``; vLLM's ``rms_norm_static_fp8_quant``);
    * ``group_size=128``: a scale a group of 128, ``max(amax, 1e-10) / 448``, returned
      ``[..., hidden / 128]`` row-major (op ``specdsl::rms_norm_quant_group``).

    Args:
        x: ``[..., hidden]``, contiguous, on a CUDA device; f32, f16 or bf16; at most 65536
            f16/bf16 elements a row (32768 f32 or odd lengths): the row stays in registers.
        weight: ``[hidden]``, x's dtype and device.
        eps: added to the mean square; a float > 0.
        scale: None, or a static scale as above.
        group_size: None, or 128 for per-group scales (``hidden`` a multiple of 128).
        l2_evict_last: load ``x`` under an L2 evict_last policy
            (:func:`fused_add_rms_norm_quant`: ``x`` and ``residual``), as :func:`rms_norm`:
            the same codes and scales; on the H200 level alone without the residual, 1.3%
            faster with it. ``hidden`` a multiple of 8 (f16/bf16) or of 4 (f32).

    Returns:
        ``(q, scale)``: ``q`` a new ``torch.float8_e4m3fn`` tensor of x's shape, and the
        scales (new float32) or the static scale given.

    Raises:
        LaunchError: a wrong dtype, shape or device, a non-contiguous tensor, a ``scale``
            that is not one float32 value, or both ``scale`` and ``group_size``.
        SpecError: a row length or ``eps`` the kernel does not take, a ``group_size``
            other than 128, an ``l2_evict_last`` that is not a bool, or True for a row of
            narrower vectors.
    """
    mode = _validate.scale_mode(_RMS, scale, group_size)
    _validate.flag(_RMS, "l2_evict_last", l2_evict_last)
    if (_eager.plain(x, weight) if scale is None else _eager.plain(x, weight, scale)) and type(
            eps) is float:
        return _norm_quant(_RMS, x, None, weight, eps, scale, mode, l2_evict_last)
    if scale is not None:  # mode "static"
        return _OPS.rms_norm_quant_static.default(x, weight, scale, eps,
                                                  l2_evict_last=l2_evict_last), scale
    codes, scales = getattr(_OPS, f"rms_norm_quant_{mode}").default(x, weight, eps,
                                                                    l2_evict_last=l2_evict_last)
    return codes, scales


def fused_add_rms_norm_quant(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                             eps: float, scale: torch.Tensor | None = None,
                             group_size: int | None = None, *, l2_evict_last: bool = False
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual += x`` (in place), then :func:`rms_norm_quant` of the new ``residual``.

    As :func:`fused_add_rms_norm` (the sum rounded to the dtype once, written into
    ``residual``), with the FP8 codes of the normalized sum instead of the sum itself:
    vLLM's ``fused_add_rms_norm_static_fp8_quant`` for a static ``scale``; a scale a token
    or a group of 128 otherwise (ops ``specdsl::fused_add_rms_norm_quant_dynamic``,
    ``_static``, ``_group``; each declares that it mutates ``residual``).

    Args:
        x: ``[..., hidden]``, contiguous, on a CUDA device; f32, f16 or bf16.
        residual: x's shape, dtype and device, contiguous; overwritten with ``x + residual``.
            It must not overlap ``x``.
        weight, eps, scale, group_size, l2_evict_last: as :func:`rms_norm_quant`.

    Returns:
        ``(q, scale)`` as :func:`rms_norm_quant`.

    Raises:
        LaunchError: as :func:`rms_norm_quant`, or ``x`` and ``residual`` overlapping.
        SpecError: as :func:`rms_norm_quant`.
    """
    mode = _validate.scale_mode(_FUSED, scale, group_size)
    _validate.flag(_FUSED, "l2_evict_last", l2_evict_last)
    if (_eager.plain(x, residual, weight) if scale is None
            else _eager.plain(x, residual, weight, scale)) and type(eps) is float:
        _increment_version(residual)  # as the op's ADInplaceOrView kernel does first
        return _norm_quant(_FUSED, x, residual, weight, eps, scale, mode, l2_evict_last)
    if scale is not None:  # mode "static"
        return _OPS.fused_add_rms_norm_quant_static.default(x, residual, weight, scale, eps,
                                                            l2_evict_last=l2_evict_last), scale
    codes, scales = getattr(_OPS, f"fused_add_rms_norm_quant_{mode}").default(
        x, residual, weight, eps, l2_evict_last=l2_evict_last)
    return codes, scales


def silu_and_mul_quant(x: torch.Tensor, scale: torch.Tensor | None = None,
                       group_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The SwiGLU gate, then FP8 E4M3 codes of it, in one kernel: the codes and scales of
    :func:`silu_and_mul` followed by :func:`scaled_fp8_quant` (or
    :func:`per_token_group_quant_fp8`), bit for bit, without ``silu(gate) * up`` going
    through device memory (:class:`~specdsl.kernels.SiluMulQuant`; vLLM's
    ``silu_and_mul_quant`` for a static ``scale``). Modes as :func:`rms_norm_quant` (ops
    ``specdsl::silu_and_mul_quant_dynamic``, ``_static``, ``_group``); loads as
    :func:`scaled_fp8_quant`'s. Each of few rows is shared by several CTAs
    (:func:`~specdsl.kernels.silu_mul_quant.suggested_split` for the device's SM count;
    the same bits): with the dynamic scale up to 8, a thread block cluster, on sm_90 and
    newer only.

    Args:
        x: ``[..., 2 * d]``, contiguous, on a CUDA device; f32, f16 or bf16: the gate
            projection, then the up projection, in each row; at most 65536 f16/bf16
            outputs a row (32768 f32).
        scale: None, or a static scale (one float32 value on x's device).
        group_size: None, or 128 for per-group scales (``d`` a multiple of 128).

    Returns:
        ``(q, scale)``: ``q`` a new ``torch.float8_e4m3fn`` tensor ``[..., d]``, and the
        scales (``[..., 1]`` or ``[..., d / 128]`` float32) or the static scale given.

    Raises:
        LaunchError: a wrong dtype or device, an odd last dimension, a non-contiguous
            tensor, a bad ``scale``, or both ``scale`` and ``group_size``.
        SpecError: a ``d`` the kernel does not take, or a ``group_size`` other than 128.
    """
    mode = _validate.scale_mode(_SILU, scale, group_size)
    if _eager.plain(x) if scale is None else _eager.plain(x, scale):
        return _silu_quant(x, scale, mode)
    if scale is not None:  # mode "static"
        return _OPS.silu_and_mul_quant_static.default(x, scale), scale
    codes, scales = getattr(_OPS, f"silu_and_mul_quant_{mode}").default(x)
    return codes, scales
