"""Array readers: the device address of a launch argument, read by the argument's type.

A pointer parameter takes a cuda.core ``Buffer``, a torch tensor, any object with
``__cuda_array_interface__`` or DLPack (read through cuda.core's ``StridedMemoryView``),
or a NumPy integer holding an address. Each reader answers ``(address, device or None,
problem or "")``; the converter of :mod:`specdsl._runtime.params` turns a problem into a
:class:`~specdsl.errors.LaunchError`. Readers are chosen once per type (:data:`READERS`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["Reader", "READERS", "reader_for", "read_int_like", "read_buffer", "read_torch",
           "read_view", "buffer_type", "tensor_type"]

#: ``reader(value, stream) -> (address, device or None, problem or "")``.
Reader = Callable[[Any, int], "tuple[int, int | None, str]"]
#: The reader of each argument type met so far.
READERS: dict[type, Reader] = {}


def read_int_like(value: Any, stream: int) -> tuple[int, int | None, str]:
    return int(value), None, ""


def read_buffer(value: Any, stream: int) -> tuple[int, int | None, str]:
    address = int(value.handle)
    if address == 0:
        return 0, None, "the Buffer is closed or empty"
    if not value.is_device_accessible:
        return 0, None, "the Buffer is not device-accessible"
    device = value.device_id
    return address, device if device >= 0 else None, ""


def read_torch(value: Any, stream: int) -> tuple[int, int | None, str]:
    # torch's DLPack and CAI exports cost microseconds; data_ptr() reads the same address.
    if not value.is_cuda:
        return 0, None, f"the tensor is on {value.device}, not a CUDA device"
    if not value.is_contiguous():
        return 0, None, "the tensor is not contiguous"
    return value.data_ptr(), value.get_device(), ""


def read_view(value: Any, stream: int) -> tuple[int, int | None, str]:
    """Any DLPack or ``__cuda_array_interface__`` object, through cuda.core's
    ``StridedMemoryView``: device-accessible and C-contiguous, or a problem."""
    from cuda.core.utils import StridedMemoryView

    try:
        view = StridedMemoryView.from_any_interface(value, stream_ptr=stream)
    except Exception as exc:  # the producer refused the export
        return 0, None, f"its array interface failed: {exc}"
    if not view.is_device_accessible:
        return 0, None, "the array is in host memory"
    strides = view.strides
    if strides is not None and view.size > 1:
        expected, step = [], 1
        for extent in reversed(view.shape):
            expected.append(step)
            step *= extent
        if tuple(s for s, n in zip(strides, view.shape, strict=True) if n > 1) != tuple(
                s for s, n in zip(reversed(expected), view.shape, strict=True) if n > 1):
            return 0, None, "the array is not C-contiguous"
    return view.ptr, view.device_id, ""


def reader_for(kind: type) -> Reader | None:
    """The reader of arguments of type ``kind`` (remembered in :data:`READERS`), or
    ``None`` for a type no reader takes."""
    module = kind.__module__ or ""
    if kind is bool:
        return None
    if module == "numpy" and kind.__name__.startswith(("int", "uint")):
        reader: Reader | None = read_int_like  # a NumPy integer scalar holding an address
    elif module.startswith("cuda.core") and kind.__name__ == "Buffer":
        reader = read_buffer
    elif module.startswith("torch") and hasattr(kind, "data_ptr") and hasattr(kind, "is_cuda"):
        reader = read_torch
    elif hasattr(kind, "__cuda_array_interface__") or hasattr(kind, "__dlpack__"):
        reader = read_view
    else:
        reader = None
    if reader is not None:
        READERS[kind] = reader
    return reader


def buffer_type() -> type | None:
    """cuda.core's ``Buffer`` class (``None`` without cuda.core: no Buffer can reach a packer)."""
    try:
        from cuda.core import Buffer
    except ImportError:
        return None
    buffer: type = Buffer
    return buffer


def tensor_type() -> type | None:
    """``torch.Tensor`` where torch is already imported (specdsl never imports it: without
    it, no tensor can reach a packer, and one made later takes the converter's path)."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)
