"""Checks of the tensors the ops take, shared by the real and the fake implementations.

Each check raises :class:`~specdsl.LaunchError` naming the op, the argument, what it
got and what it expects, before anything is allocated or launched. The fake (meta)
implementations run the same checks, so ``torch.compile`` refuses at trace time what
eager refuses at call time. Only what needs real memory (a CUDA device, overlapping
storage) is checked by the real implementations alone.

The real implementations run the checks once per combination of dtypes, shapes and
values, and keep what they settled (the request, the rows, the launch geometry, the
outputs' shapes) as a :class:`Plan` in the op's :class:`Plans`. A later call with that
combination asks only what can change from one call to the next, with :func:`placed`
(devices, contiguity) and :func:`overlap`; where an answer is no, the full checks run
again, so every refusal comes from them, in their order, with their message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import torch

from ..errors import LaunchError, SpecError
from ..kernels.fp8_quant import GROUP_SIZE

__all__ = ["FLOAT_DTYPES", "float_tensor", "same_dtype", "same_device", "on_cuda",
           "disjoint", "overlap", "concrete", "request", "static_scale", "scale_mode", "flag",
           "Plan", "Plans", "plan", "placed"]

#: The element types of the built-in kernels' activations.
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)

R = TypeVar("R")


def tensor(op: str, name: str, value: Any) -> None:
    """``value`` is a tensor."""
    if not isinstance(value, torch.Tensor):
        raise LaunchError(f"{op}: {name} must be a torch.Tensor (got {type(value).__name__})")


def contiguous(op: str, name: str, t: torch.Tensor, *, in_place: bool = False) -> None:
    """``t`` is C-contiguous (the kernels index rows as ``row * length``)."""
    if not t.is_contiguous():
        how = ("it is updated in place, so pass a contiguous tensor (a copy would not be "
               "updated)" if in_place else "call .contiguous() first")
        raise LaunchError(f"{op}: {name} is not contiguous (shape {tuple(t.shape)}, strides "
                          f"{tuple(t.stride())}); expected a contiguous tensor: {how}")


def float_tensor(op: str, name: str, t: Any, *, in_place: bool = False) -> None:
    """``t`` is a contiguous f32, f16 or bf16 tensor of at least one dimension."""
    tensor(op, name, t)
    if t.dtype not in FLOAT_DTYPES:
        raise LaunchError(f"{op}: {name} has dtype {t.dtype}; expected torch.float32, "
                          f"torch.float16 or torch.bfloat16")
    if t.dim() == 0:
        raise LaunchError(f"{op}: {name} is a 0-d tensor; expected at least one dimension "
                          f"(the last one is the row)")
    contiguous(op, name, t, in_place=in_place)


def same_dtype(op: str, name: str, t: torch.Tensor, like: str, ref: torch.Tensor) -> None:
    """``t`` has ``ref``'s dtype (the kernels take one element type for all their arrays)."""
    if t.dtype != ref.dtype:
        raise LaunchError(f"{op}: {name} has dtype {t.dtype}; expected {ref.dtype}, the "
                          f"dtype of {like}")


def static_scale(op: str, scale: Any, x: torch.Tensor) -> None:
    """``scale`` is one float32 value (a static FP8 scale) on ``x``'s device."""
    tensor(op, "scale", scale)
    if scale.dtype != torch.float32 or scale.numel() != 1:
        raise LaunchError(f"{op}: scale is a {scale.dtype} tensor of shape "
                          f"{tuple(scale.shape)}; expected one torch.float32 value (a "
                          f"static scale; leave scale=None for dynamic per-token scales)")
    same_device(op, x=x, scale=scale)


def flag(op: str, name: str, value: Any) -> None:
    """``value`` is True or False. Checked before the op's dispatcher, which would take 1,
    None or a one-element tensor for a bool argument, and before the plans, whose keys
    cannot tell 1 from True.

    Raises:
        SpecError: anything else.
    """
    if type(value) is not bool:
        raise SpecError(f"{op}: {name} = {value!r} is invalid: expected True or False")


def scale_mode(op: str, scale: Any, group_size: Any) -> str:
    """The FP8 scale mode a call asks for: ``"static"`` (a ``scale`` given), ``"group"``
    (``group_size`` given: 128, DeepSeek-V3's 1 x 128 tiles) or ``"dynamic"`` (neither).

    Raises:
        LaunchError: both given.
        SpecError: a ``group_size`` other than 128.
    """
    if group_size is None:
        return "dynamic" if scale is None else "static"
    if scale is not None:
        raise LaunchError(f"{op}: scale and group_size are both given; expected one of them: "
                          f"a static scale, or group_size={GROUP_SIZE} for a scale a group")
    if isinstance(group_size, bool) or group_size != GROUP_SIZE:
        raise SpecError(f"{op}: group_size = {group_size!r} is invalid: expected {GROUP_SIZE} "
                        f"(one scale a group of {GROUP_SIZE} elements) or None")
    return "group"


def same_device(op: str, **tensors: torch.Tensor | None) -> None:
    """Every tensor given (``None`` skipped) is on the first one's device."""
    named = [(name, t) for name, t in tensors.items() if t is not None]
    first, device = named[0][0], named[0][1].device
    for name, t in named[1:]:
        if t.device != device:
            raise LaunchError(f"{op}: {name} is on {t.device}; expected {device}, the device "
                              f"of {first}")


def on_cuda(op: str, name: str, t: torch.Tensor) -> None:
    """``t`` lives on a CUDA device (checked by the real implementations only)."""
    if not t.is_cuda:
        raise LaunchError(f"{op}: {name} is on {t.device}; expected a CUDA device (the "
                          f"kernels run on NVIDIA GPUs)")


def overlap(t: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether ``t`` and ``other`` (both contiguous) share a byte."""
    start, other_start = t.data_ptr(), other.data_ptr()
    size, other_size = t.nbytes, other.nbytes
    return bool(size and other_size and start < other_start + other_size
                and other_start < start + size)


def disjoint(op: str, name: str, t: torch.Tensor, other_name: str, other: torch.Tensor) -> None:
    """``t`` and ``other`` (both contiguous) share no bytes: a kernel writes one of them
    while it reads the other through the non-coherent path."""
    if overlap(t, other):
        raise LaunchError(f"{op}: {name} and {other_name} overlap in memory; expected "
                          f"separate tensors ({other_name} is written while {name} is read)")


def concrete(*values: Any) -> bool:
    """Whether every value is a plain number (not a symbolic size of a traced shape)."""
    return not any(isinstance(v, _SYMBOLIC) for v in values)


def rows(t: torch.Tensor) -> int:
    """The rows of ``t``: the product of every dimension but the last (0 where the last is
    0, a row of no elements, which the request then refuses)."""
    return t.numel() // t.shape[-1] if t.shape[-1] else 0


def request(op: str, name: str, t: torch.Tensor, build: Callable[..., R], *key: Any) -> R:
    """``build(*key)``, the request; a refusal names the op and the shape of the tensor
    ``name`` it came from (the message is only formatted on a refusal).

    Raises:
        SpecError: the kernel does not take these shapes or values.
    """
    try:
        return build(*key)
    except SpecError as exc:
        raise SpecError(f"{op}: {name} of shape {tuple(t.shape)}: {exc}") from None


@attrs.frozen(eq=False)
class Plan:
    """What an op's checks settled for one combination of dtypes, shapes and values.
    Compared and hashed by identity (``_runtime`` keeps its bound launchers by plan)."""

    #: The request (spec instance) to launch.
    spec: Any
    #: Rows (tokens) to launch over; 0 launches nothing.
    rows: int
    #: ``(grid, block)`` for ``rows``; None for no rows (typed Any: read only with rows).
    dims: Any
    #: The shapes of the outputs not shaped like the op's input, in the op's order.
    shapes: tuple[tuple[int, ...], ...]
    #: The alignment (bytes) a row walked in a window needs of every tensor; 0 where the
    #: request declares its own (see ``_runtime.launch``).
    realign: int = 0


def plan(spec: Any, rows: int, *shapes: tuple[int, ...]) -> Plan:
    """The :class:`Plan` launching ``spec`` over ``rows`` rows, allocating ``shapes``."""
    realign = spec.vector_bytes if getattr(spec, "windowed", False) else 0
    return Plan(spec, rows, spec.launch_dims(rows) if rows else None, shapes, realign)


#: Combinations an op remembers before its memo starts over (plans are rebuilt, and the
#: requests and modules stay cached): far more than the shapes of one model's calls.
_PLANS_KEPT = 4096


class Plans(dict[Any, Plan]):
    """One op's plans, keyed by every dtype, shape and value its checks read that are not
    asked again on each call (the same key, the same answers)."""

    def keep(self, key: Any, found: Plan) -> Plan:
        """Remember ``found`` for ``key``; returns it."""
        if len(self) >= _PLANS_KEPT:
            self.clear()
        self[key] = found
        return found


def placed(first: torch.Tensor, *others: torch.Tensor) -> int:
    """The ordinal of ``first``'s CUDA device where ``first`` and every one of ``others``
    are contiguous tensors on that device, else -1: the part of the checks that a call
    with a combination seen before must still ask. Each op's full checks refuse whatever
    this refuses, so a call they pass has its device ordinal here."""
    if not (first.is_cuda and first.is_contiguous()):
        return -1
    index: int = first.get_device()  # typed where torch's stubs are absent
    for t in others:
        if not (t.is_cuda and t.get_device() == index and t.is_contiguous()):
            return -1
    return index
