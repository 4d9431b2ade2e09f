"""Array readers: the device address of a launch argument, read by the argument's type.

A pointer parameter takes a cuda.core ``Buffer``, a torch tensor, any object with
``__cuda_array_interface__`` or DLPack (read through cuda.core's ``StridedMemoryView``),
a CuPy array, or a NumPy integer holding an address. Each reader answers an
:class:`~specdsl._runtime.arraychecks.ArrayFacts`: the address, the device (or ``None``), a
problem (or ``""``), and the element type and size where the argument carries them; the
converter of :mod:`specdsl._runtime.params` turns a problem into a
:class:`~specdsl.errors.LaunchError`, and checks the element type and size against the
spec's array declarations. Readers are chosen once per type (:data:`READERS`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .arraychecks import ArrayFacts, element_name
from .cudacore import load as load_cuda_core

__all__ = ["Reader", "READERS", "reader_for", "read_int_like", "read_buffer", "read_torch",
           "read_cupy", "read_view", "buffer_type", "tensor_type"]

#: ``reader(value, stream) -> ArrayFacts``.
Reader = Callable[[Any, int], ArrayFacts]
#: The reader of each argument type met so far.
READERS: dict[type, Reader] = {}


def read_int_like(value: Any, stream: int) -> ArrayFacts:
    return ArrayFacts(int(value), None, "")


def read_buffer(value: Any, stream: int) -> ArrayFacts:
    address = int(value.handle)
    if address == 0:
        return ArrayFacts(0, None, "the Buffer is closed or empty")
    if not value.is_device_accessible:
        return ArrayFacts(0, None, "the Buffer is not device-accessible")
    device = value.device_id
    return ArrayFacts(address, device if device >= 0 else None, "", nbytes=int(value.size))


def read_torch(value: Any, stream: int) -> ArrayFacts:
    # torch's DLPack and CAI exports cost microseconds; data_ptr() reads the same address.
    if not value.is_cuda:
        return ArrayFacts(0, None, f"the tensor is on {value.device}, not a CUDA device")
    if not value.is_contiguous():
        return ArrayFacts(0, None, "the tensor is not contiguous")
    return ArrayFacts(value.data_ptr(), value.get_device(), "", element_name(value.dtype),
                      value.numel())


def read_cupy(value: Any, stream: int) -> ArrayFacts:
    """A ``cupy.ndarray`` (always device memory): its own attributes, no DLPack export."""
    if not value.flags.c_contiguous:
        return ArrayFacts(0, None, "the array is not C-contiguous")
    return ArrayFacts(value.data.ptr, value.device.id, "", element_name(value.dtype),
                      value.size)


def read_view(value: Any, stream: int) -> ArrayFacts:
    """Any DLPack or ``__cuda_array_interface__`` object, through cuda.core's
    ``StridedMemoryView``: device-accessible and C-contiguous, or a problem."""
    load_cuda_core()
    from cuda.core.utils import StridedMemoryView

    try:
        view = StridedMemoryView.from_any_interface(value, stream_ptr=stream)
    except Exception as exc:  # the producer refused the export
        return ArrayFacts(0, None, f"its array interface failed: {exc}")
    if not view.is_device_accessible:
        return ArrayFacts(0, None, "the array is in host memory")
    strides = view.strides
    if strides is not None and view.size > 1:
        expected, step = [], 1
        for extent in reversed(view.shape):
            expected.append(step)
            step *= extent
        if tuple(s for s, n in zip(strides, view.shape, strict=True) if n > 1) != tuple(
                s for s, n in zip(reversed(expected), view.shape, strict=True) if n > 1):
            return ArrayFacts(0, None, "the array is not C-contiguous")
    try:
        element = element_name(view.dtype)
    except Exception as exc:  # a type cuda.core cannot name (bfloat16 without ml_dtypes)
        element = f"unnamed ({exc})"
    return ArrayFacts(view.ptr, view.device_id, "", element, view.size)


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
    elif module.startswith("cupy") and kind.__name__ == "ndarray":
        reader = read_cupy
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
        load_cuda_core()
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
