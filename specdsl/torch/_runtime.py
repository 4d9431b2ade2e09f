"""Where the ops meet the executor: one :class:`~specdsl.Executor` per device, torch's
current stream, and the launch.

Every op launches through :func:`launch`: a launcher bound once per (plan, device)
(``Executor.bind``; a plan is one request and geometry, see ``_validate``) on
``stream=TORCH_CURRENT_STREAM``, which reads torch's current stream as a handle on each
call, with no stream object made. An op call then pays for one dictionary lookup (keyed
by the plan's identity) and the bound launcher's checks and driver call.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from .._runtime.executor import Executor
from .._runtime.streams import TORCH_CURRENT_STREAM
from ..errors import LaunchError
from ._validate import Plan

__all__ = ["executor", "use_executor", "launch", "current_stream", "cluster_sm_count"]

_executors: dict[int, Executor] = {}
_lock = threading.Lock()
# (plan, device) -> its bound launcher (a plan is one request and geometry, and hashes
# by identity); past this many the memo starts over (modules stay cached)
_bound: dict[tuple[Plan, int], Callable[..., None]] = {}
_BOUND_LIMIT = 4096


def _index(device: Any) -> int:
    """A CUDA device ordinal from a torch.device, a string such as ``"cuda:1"``, an int or None.

    Raises:
        LaunchError: not a CUDA device, or no such device (none at all on a CPU-only torch).
    """
    index: int | None
    if device is None:
        index = None
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        try:
            device = torch.device(device)
        except (TypeError, RuntimeError):
            raise LaunchError(f"device = {device!r} is invalid: expected a torch.device, a "
                              f"string such as 'cuda:0', an ordinal or None") from None
        if device.type != "cuda":
            raise LaunchError(f"device = {device} is invalid: expected a CUDA device")
        index = device.index
    # counted before torch's current device is asked for: on a CPU-only torch (or with no
    # device visible) current_device() fails with torch's own AssertionError or RuntimeError
    count = torch.cuda.device_count()
    if index is None:
        if not count:
            raise LaunchError(f"device = {device} (torch's current device) is invalid: "
                              f"expected a CUDA device (no CUDA device is visible)")
        index = torch.cuda.current_device()
    if not 0 <= index < count:
        seen = f"ordinals 0 to {count - 1} are visible" if count else "no CUDA device is visible"
        raise LaunchError(f"device = {index} is invalid: expected a CUDA device ({seen})")
    return index


def executor(device: Any = None) -> Executor:
    """The :class:`~specdsl.Executor` the ops launch on for ``device``, made on first use.

    One per device per process, shared by every op and thread; made with the default
    disk cache (``SPECDSL_CACHE_DIR`` or the per-user folder), unless :func:`use_executor`
    gave one first. Making it leaves torch's current device as it was.

    Args:
        device: a torch.device, ``"cuda:N"``, an ordinal, or None for torch's current device.

    Raises:
        LaunchError: not a CUDA device, or no such device.
    """
    index = _index(device)
    found = _executors.get(index)
    if found is not None:
        return found
    with _lock:
        found = _executors.get(index)
        if found is None:
            # the Executor makes its device's context current; torch's current device is
            # restored on leaving, so tensors made with device="cuda" stay where they were
            with torch.cuda.device(index):
                found = _executors[index] = Executor(index)
    return found


def use_executor(executor: Executor) -> Executor | None:
    """Make the ops launch on ``executor`` for its device; returns the one it replaces.

    For an executor with its own ``cache_dir`` or ledger. Modules the replaced executor
    loaded stay with it.

    Raises:
        LaunchError: a compile-only executor (``device=None``).
    """
    if not isinstance(executor, Executor) or executor.device_id is None:
        raise LaunchError(f"executor = {executor!r} is invalid: expected an Executor with a "
                          f"device (not a compile-only one)")
    with _lock:
        previous = _executors.get(executor.device_id)
        _executors[executor.device_id] = executor
        _bound.clear()  # launchers bound to the replaced executor
    return previous


def current_stream(index: int) -> Any:
    """torch's current stream on device ``index`` (what the ops launch on)."""
    return torch.cuda.current_stream(index)


def launch(plan: Plan, args: tuple[Any, ...], index: int, writes: tuple[int, ...] = ()) -> None:
    """Launch ``plan``'s request with ``args`` (in ``.param`` order) and its geometry, on
    torch's current stream of CUDA device ``index``.

    The launch runs with that device current (the kernel is launched in the current
    context), and torch's current device is left as it was.

    A row walked in a window (``plan.realign``: odd lengths) needs 16-byte aligned
    tensors, where the narrow vectors it replaced took any element-aligned one (a row
    slice such as ``logits[1:]``): a tensor that is not aligned is copied into one that
    is, and ``args[i]`` for ``i`` in ``writes`` (written in place) copied back after.

    Raises:
        LaunchError: an argument, the geometry or the stream is refused (see
            ``Executor.launch``).
        RenderError, CompileError: the first launch of a request cannot build its module.
    """
    bound = _bound.get((plan, index))
    if bound is None:
        bound = _bind(plan, index)
    copies: list[tuple[torch.Tensor, torch.Tensor]] = []
    if plan.realign and any(isinstance(a, torch.Tensor) and a.data_ptr() % plan.realign
                            for a in args):
        args, copies = _realigned(args, plan.realign, writes)
    if torch._C._cuda_getDevice() == index:  # torch.cuda.current_device(), less its checks
        bound(*args)
    else:
        with torch.cuda.device(index):
            bound(*args)
    for original, copy in copies:  # on the launch's stream: after the kernel
        original.copy_(copy)


def _realigned(args: tuple[Any, ...], align: int, writes: tuple[int, ...]
               ) -> tuple[tuple[Any, ...], list[tuple[torch.Tensor, torch.Tensor]]]:
    """``args`` with each tensor not aligned to ``align`` bytes replaced by a copy (torch's
    allocator aligns to far more), and the (original, copy) pairs of those in ``writes``."""
    found, back = list(args), []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.data_ptr() % align:
            found[i] = a.clone()
            if i in writes:
                back.append((a, found[i]))
    return tuple(found), back


def _bind(plan: Plan, index: int) -> Callable[..., None]:
    """The launcher of ``plan`` on device ``index``, bound once and kept."""
    run = _executors.get(index) or executor(index)
    grid, block = plan.dims
    bound = run.bind(plan.spec, grid=grid, block=block, stream=TORCH_CURRENT_STREAM)
    if len(_bound) >= _BOUND_LIMIT:
        _bound.clear()
    _bound[(plan, index)] = bound
    return bound


@functools.cache
def sm_count(index: int) -> int:
    """Device ``index``'s SM count (132 on an H200)."""
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


@functools.cache
def cluster_sm_count(index: int) -> int:
    """Device ``index``'s SM count if it has thread block clusters (sm_90 or newer), else 0."""
    return sm_count(index) if torch.cuda.get_device_properties(index).major >= 9 else 0
