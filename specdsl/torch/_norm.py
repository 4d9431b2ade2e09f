"""``rms_norm`` and ``fused_add_rms_norm``: :class:`~specdsl.kernels.RMSNorm` as torch ops."""

from typing import Any

import torch

from ..errors import LaunchError
from . import _eager, _runtime, _validate, specs

__all__ = ["rms_norm", "fused_add_rms_norm"]

_RMS_NORM = "specdsl.torch.rms_norm"
_FUSED = "specdsl.torch.fused_add_rms_norm"
_increment_version = torch.autograd.graph.increment_version


def check(op: str, x: torch.Tensor, weight: torch.Tensor,
          residual: torch.Tensor | None = None) -> None:
    """The arguments of an RMSNorm op (also of the rms_norm_quant family)."""
    _validate.float_tensor(op, "x", x)
    _validate.float_tensor(op, "weight", weight)
    _validate.same_dtype(op, "weight", weight, "x", x)
    if tuple(weight.shape) != (x.shape[-1],):
        raise LaunchError(f"{op}: weight has shape {tuple(weight.shape)}; expected "
                          f"({x.shape[-1]},), the length of x's last dimension")
    if residual is not None:
        _validate.float_tensor(op, "residual", residual, in_place=True)
        _validate.same_dtype(op, "residual", residual, "x", x)
        if residual.shape != x.shape:
            raise LaunchError(f"{op}: residual has shape {tuple(residual.shape)}; expected "
                              f"{tuple(x.shape)}, the shape of x")
    _validate.same_device(op, x=x, weight=weight, residual=residual)


def _request(op: str, x: torch.Tensor, eps: float, fused: bool, l2_evict_last: bool) -> Any:
    return _validate.request(op, "x", x, specs.rms_norm,
                             x.shape[-1], eps, x.dtype, fused, l2_evict_last)


def _fake_request(op: str, x: torch.Tensor, eps: float, fused: bool, l2_evict_last: bool) -> None:
    if _validate.concrete(x.shape[-1], eps):  # trace time: refuse what a call would refuse
        _request(op, x, eps, fused, l2_evict_last)


def _plan(op: str, x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None,
          eps: float, l2_evict_last: bool) -> _validate.Plan:
    """Every check of an RMSNorm call, in order; the plan they settle."""
    check(op, x, weight, residual)
    _validate.on_cuda(op, "x", x)
    if residual is not None:
        _validate.disjoint(op, "x", x, "residual", residual)
    return _validate.plan(_request(op, x, eps, residual is not None, l2_evict_last),
                          _validate.rows(x))


_RMS_NORM_PLANS = _validate.Plans()
_FUSED_PLANS = _validate.Plans()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
              l2_evict_last: bool = False) -> torch.Tensor:
    """The implementation of ``specdsl::rms_norm``, which :func:`rms_norm` also calls
    directly (see ``_eager``)."""
    key = (x.shape, x.dtype, weight.shape, weight.dtype, eps, l2_evict_last)
    plan, index = _RMS_NORM_PLANS.get(key), _validate.placed(x, weight)
    if plan is None or index < 0:
        plan = _RMS_NORM_PLANS.keep(key, _plan(_RMS_NORM, x, weight, None, eps, l2_evict_last))
    out = torch.empty_like(x)
    if plan.rows:
        _runtime.launch(plan, (x, weight, out, plan.rows), index)
    return out


def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                   l2_evict_last: bool = False) -> torch.Tensor:
    check(_RMS_NORM, x, weight)
    _fake_request(_RMS_NORM, x, eps, False, l2_evict_last)
    return torch.empty_like(x)


def _fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                        eps: float, *, l2_evict_last: bool = False) -> torch.Tensor:
    """The implementation of ``specdsl::fused_add_rms_norm`` (and of its eager fast path)."""
    key = (x.shape, x.dtype, residual.shape, residual.dtype, weight.shape, weight.dtype, eps,
           l2_evict_last)
    plan, index = _FUSED_PLANS.get(key), _validate.placed(x, residual, weight)
    if plan is None or index < 0 or _validate.overlap(x, residual):
        plan = _FUSED_PLANS.keep(key, _plan(_FUSED, x, weight, residual, eps, l2_evict_last))
    out = torch.empty_like(x)
    if plan.rows:
        _runtime.launch(plan, (x, residual, weight, out, plan.rows), index, writes=(1,))
    return out


def _fused_add_rms_norm_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                             eps: float, *, l2_evict_last: bool = False) -> torch.Tensor:
    check(_FUSED, x, weight, residual)
    _fake_request(_FUSED, x, eps, True, l2_evict_last)
    return torch.empty_like(x)


torch.library.custom_op("specdsl::rms_norm", _rms_norm, mutates_args=()
                        ).register_fake(_rms_norm_fake)
torch.library.custom_op("specdsl::fused_add_rms_norm", _fused_add_rms_norm,
                        mutates_args=("residual",)).register_fake(_fused_add_rms_norm_fake)
_RMS_NORM_OP = torch.ops.specdsl.rms_norm.default
_FUSED_OP = torch.ops.specdsl.fused_add_rms_norm.default


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
             l2_evict_last: bool = False) -> torch.Tensor:
    """RMSNorm of each row of ``x``: ``x / sqrt(mean(x^2) + eps) * weight``.

    The op ``torch.ops.specdsl.rms_norm``, launching :class:`~specdsl.kernels.RMSNorm`
    (accumulation in f32, one rounding to the dtype) on torch's current stream.

    Args:
        x: ``[..., hidden]``, contiguous, on a CUDA device; f32, f16 or bf16. Every
            leading dimension is a row.
        weight: ``[hidden]``, x's dtype and device.
        eps: added to the mean square; a float > 0.
        l2_evict_last: load ``x`` under an L2 evict_last policy (the spec field of that
            name; the same results, bit for bit): faster alone, and the next kernel finds
            less of its data in L2 (docs/kernels/rmsnorm.md, "Keeping x in L2"). For
            rows of whole 16-byte vectors held in registers: ``hidden`` a multiple of 8
            up to 65536 (f16/bf16), or of 4 up to 32768 (f32).

    Returns:
        A new tensor shaped and typed like ``x``, from torch's caching allocator.

    Raises:
        LaunchError: a wrong dtype, shape or device, or a non-contiguous tensor.
        SpecError: a row length the kernel does not take, a bad ``eps``, an
            ``l2_evict_last`` that is not a bool, or True for a row it does not apply to.
    """
    _validate.flag(_RMS_NORM, "l2_evict_last", l2_evict_last)
    if _eager.plain(x, weight) and type(eps) is float:
        return _rms_norm(x, weight, eps, l2_evict_last=l2_evict_last)
    out: torch.Tensor = _RMS_NORM_OP(x, weight, eps, l2_evict_last=l2_evict_last)
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float, *, l2_evict_last: bool = False) -> torch.Tensor:
    """``residual += x`` (in place), then RMSNorm of the new ``residual``, as vLLM's op.

    The sum ``s = x + residual`` is rounded to the dtype once and written into
    ``residual`` (the next layer's residual stream); the result is
    ``s / sqrt(mean(s^2) + eps) * weight``. Unlike vLLM's ``fused_add_rms_norm``, which
    writes the result over ``x``, ``x`` is left as it was and the result is a new tensor.
    The op is ``torch.ops.specdsl.fused_add_rms_norm`` (it declares that it mutates
    ``residual``, so ``torch.compile`` orders it correctly).

    Args:
        x: ``[..., hidden]``, contiguous, on a CUDA device; f32, f16 or bf16.
        residual: x's shape, dtype and device, contiguous; overwritten with ``x + residual``.
            It must not overlap ``x``.
        weight: ``[hidden]``, x's dtype and device.
        eps: added to the mean square; a float > 0.
        l2_evict_last: load ``x`` and ``residual`` under an L2 evict_last policy, as
            :func:`rms_norm` (with the residual, 0 to 1.6% faster alone on the H200).

    Returns:
        The normalized sum, a new tensor shaped and typed like ``x``.

    Raises:
        LaunchError: a wrong dtype, shape or device, a non-contiguous tensor, or ``x``
            and ``residual`` overlapping.
        SpecError: as :func:`rms_norm`.
    """
    _validate.flag(_FUSED, "l2_evict_last", l2_evict_last)
    if _eager.plain(x, residual, weight) and type(eps) is float:
        _increment_version(residual)  # as the op's ADInplaceOrView kernel does first
        return _fused_add_rms_norm(x, residual, weight, eps, l2_evict_last=l2_evict_last)
    out: torch.Tensor = _FUSED_OP(x, residual, weight, eps, l2_evict_last=l2_evict_last)
    return out
