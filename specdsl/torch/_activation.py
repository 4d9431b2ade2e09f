"""``silu_and_mul``: :class:`~specdsl.kernels.SiluMul` (the SwiGLU gate) as a torch op."""

from typing import Any

import torch

from ..errors import LaunchError
from . import _eager, _runtime, _validate, specs

__all__ = ["silu_and_mul"]

_OP_NAME = "specdsl.torch.silu_and_mul"


def check(x: torch.Tensor, op: str = _OP_NAME) -> None:
    """``x`` holds a gate half and an up half in each row (also for silu_and_mul_quant)."""
    _validate.float_tensor(op, "x", x)
    if x.shape[-1] % 2:
        raise LaunchError(f"{op}: x has shape {tuple(x.shape)}; expected an even last "
                          f"dimension (the gate half, then the up half)")


def _request(x: torch.Tensor, rows: int = 0) -> Any:
    """The request for ``rows`` rows of ``x`` (0 at trace time: the request's checks only)."""
    return _validate.request(_OP_NAME, "x", x, specs.silu_and_mul,
                             x.shape[-1] // 2, x.dtype, rows)


def _out_shape(x: torch.Tensor) -> tuple[Any, ...]:
    return (*x.shape[:-1], x.shape[-1] // 2)


def _plan(x: torch.Tensor) -> _validate.Plan:
    """Every check of a silu_and_mul call, in order; the plan they settle."""
    check(x)
    _validate.on_cuda(_OP_NAME, "x", x)
    rows = _validate.rows(x)
    return _validate.plan(_request(x, rows), rows, _out_shape(x))


_PLANS = _validate.Plans()


def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """The implementation of ``specdsl::silu_and_mul`` (and of its eager fast path)."""
    key = (x.shape, x.dtype)
    plan, index = _PLANS.get(key), _validate.placed(x)
    if plan is None or index < 0:
        plan = _PLANS.keep(key, _plan(x))
    (shape,) = plan.shapes
    out = x.new_empty(shape)
    if plan.rows:
        _runtime.launch(plan, (x, out, plan.rows), index)
    return out


def _silu_and_mul_fake(x: torch.Tensor) -> torch.Tensor:
    check(x)
    if _validate.concrete(x.shape[-1]):  # trace time: refuse what a call would refuse
        _request(x)
    return x.new_empty(_out_shape(x))


torch.library.custom_op("specdsl::silu_and_mul", _silu_and_mul,
                        mutates_args=()).register_fake(_silu_and_mul_fake)
_SILU_AND_MUL_OP = torch.ops.specdsl.silu_and_mul.default


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """The SwiGLU gate: ``silu(x[..., :d]) * x[..., d:]`` with ``silu(a) = a * sigmoid(a)``.

    The op ``torch.ops.specdsl.silu_and_mul``, launching :class:`~specdsl.kernels.SiluMul`
    (f32 arithmetic, one rounding to the dtype), as vLLM's ``silu_and_mul`` (which writes
    into an ``out`` it is given; this op allocates it). The request follows the rows of the
    call: one vector a thread below 1024 rows
    (:func:`~specdsl.kernels.silu_mul.suggested_geometry`), loads without L1 lines for
    launches moving 2 to 64 MiB (:func:`~specdsl.kernels.small_launch_loads`); the same
    results, bit for bit.

    Args:
        x: ``[..., 2 * d]``, contiguous, on a CUDA device; f32, f16 or bf16: the gate
            projection, then the up projection, in each row.

    Returns:
        A new tensor ``[..., d]`` of x's dtype.

    Raises:
        LaunchError: a wrong dtype or device, an odd last dimension, or a non-contiguous
            tensor.
        SpecError: a ``d`` the kernel does not take.
    """
    if _eager.plain(x):
        return _silu_and_mul(x)
    out: torch.Tensor = _SILU_AND_MUL_OP(x)
    return out
