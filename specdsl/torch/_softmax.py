"""``softmax``: :class:`~specdsl.kernels.Softmax` over the last dimension as a torch op."""

from typing import Any

import torch

from . import _eager, _runtime, _validate, specs

__all__ = ["softmax"]

_OP_NAME = "specdsl.torch.softmax"


def _request(x: torch.Tensor, scale: float, split: int, l2_evict_last: bool,
             keep_exponentials: bool = False) -> Any:
    return _validate.request(_OP_NAME, "x", x, specs.softmax, x.shape[-1], scale, x.dtype,
                             split, l2_evict_last, keep_exponentials)


def _plan(x: torch.Tensor, scale: float, l2_evict_last: bool, index: int) -> _validate.Plan:
    """Every check of a softmax call, in order; the plan they settle for device ``index``
    (the split of a row over a cluster, and whether rows are few enough to keep their
    exponentials, depend on the device's SM count)."""
    _validate.float_tensor(_OP_NAME, "x", x)
    _validate.on_cuda(_OP_NAME, "x", x)
    cols = x.shape[-1]
    rows = _validate.rows(x)
    # the L2 policy is written for rows on one CTA, so a call asking for it never splits
    split = 1 if l2_evict_last else specs.softmax_split(
        cols, x.dtype, rows, _runtime.cluster_sm_count(index))
    keep = specs.softmax_keeps_exponentials(cols, x.dtype, rows, _runtime.sm_count(index),
                                            split, l2_evict_last)
    return _validate.plan(_request(x, scale, split, l2_evict_last, keep), rows)


_PLANS = _validate.Plans()


def _softmax(x: torch.Tensor, scale: float = 1.0, *, l2_evict_last: bool = False
             ) -> torch.Tensor:
    """The implementation of ``specdsl::softmax`` (and of its eager fast path)."""
    index = _validate.placed(x)
    key = (x.shape, x.dtype, scale, l2_evict_last, index)
    plan = _PLANS.get(key)
    if plan is None or index < 0:
        plan = _PLANS.keep(key, _plan(x, scale, l2_evict_last, index))
    out = torch.empty_like(x)
    if plan.rows:
        _runtime.launch(plan, (x, out, plan.rows), index)
    return out


def _softmax_fake(x: torch.Tensor, scale: float = 1.0, *, l2_evict_last: bool = False
                  ) -> torch.Tensor:
    _validate.float_tensor(_OP_NAME, "x", x)
    if _validate.concrete(x.shape[-1], scale):  # trace time: refuse what a call would refuse
        _request(x, scale, 1, l2_evict_last)
    return torch.empty_like(x)


torch.library.custom_op("specdsl::softmax", _softmax, mutates_args=()).register_fake(_softmax_fake)
_SOFTMAX_OP = torch.ops.specdsl.softmax.default


def softmax(x: torch.Tensor, scale: float = 1.0, *, l2_evict_last: bool = False
            ) -> torch.Tensor:
    """Softmax of ``x * scale`` over the last dimension (the maximum subtracted first).

    The op ``torch.ops.specdsl.softmax``, launching :class:`~specdsl.kernels.Softmax`
    (f32 arithmetic, one rounding to the dtype). Few long rows (decode over a large
    vocabulary) are shared by a thread block cluster of CTAs on sm_90 and newer, as
    :func:`~specdsl.kernels.softmax.suggested_split` chooses; up to 8 rows an SM keep
    each exponential in a register (``keep_exponentials``, the same results bit for bit),
    as :func:`~specdsl.kernels.softmax.suggested_keep_exponentials` chooses.

    Args:
        x: ``[..., cols]``, contiguous, on a CUDA device; f32, f16 or bf16. Every
            leading dimension is a row.
        scale: multiplies ``x`` first (e.g. ``1 / sqrt(head_dim)``); finite.
        l2_evict_last: load ``x`` under an L2 evict_last policy (the spec field of that
            name; the same results, bit for bit): faster alone at some widths, and the
            next kernel finds less of its data in L2 (docs/kernels/softmax.md, "Keeping
            x in L2"). For rows of whole 16-byte vectors held in registers on one CTA:
            ``cols`` a multiple of 8 up to 65536 (f16/bf16), or of 4 up to 32768 (f32).
            Such a call never shares a row over a cluster, however few the rows.

    Returns:
        A new tensor shaped and typed like ``x``; each row sums to 1.

    Raises:
        LaunchError: a wrong dtype or device, or a non-contiguous tensor.
        SpecError: a row length the kernel does not take, a bad ``scale``, an
            ``l2_evict_last`` that is not a bool, or True for a row it does not apply to.
    """
    _validate.flag(_OP_NAME, "l2_evict_last", l2_evict_last)
    if _eager.plain(x) and type(scale) is float:
        return _softmax(x, scale, l2_evict_last=l2_evict_last)
    out: torch.Tensor = _SOFTMAX_OP(x, scale, l2_evict_last=l2_evict_last)
    return out
