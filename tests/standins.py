"""Stand-ins for the arrays launches take, for CPU tests: cuda.core Buffers, torch tensors
(with torch-like dtypes), DLPack and ``__cuda_array_interface__`` objects.

:func:`use_stand_ins` makes the launch paths take :class:`StandInBuffer` and
:class:`StandInTensor` where they take cuda.core's ``Buffer`` and ``torch.Tensor`` (their
inline paths test exact types). :class:`DLPackArray` exports a real DLPack capsule that
cuda.core's ``StridedMemoryView`` reads without a driver.
"""

from __future__ import annotations

import ctypes
from typing import Any


class StandInBuffer:
    """Stands in for cuda.core's Buffer (both paths test its exact type); a closed one's
    properties raise, as cuda.core's do."""

    def __init__(self, handle: int, device_id: int = 0, closed: bool = False,
                 size: int = 4096) -> None:
        self._handle, self._device_id, self.closed, self._size = handle, device_id, closed, size
        self.is_device_accessible = True

    def _open(self, value: int) -> int:
        if self.closed:
            raise RuntimeError("Buffer has been closed")
        return value

    handle = property(lambda self: self._open(self._handle))
    device_id = property(lambda self: self._open(self._device_id))
    size = property(lambda self: self._open(self._size))

    def __repr__(self) -> str:
        return (f"StandInBuffer({self._handle:#x}, device {self._device_id}, closed "
                f"{self.closed}, {self._size} bytes)")


class DType:
    """Stands in for a torch dtype: a class named 'dtype' of module 'torch' (element names
    are read from those), compared by identity."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


DType.__module__, DType.__name__, DType.__qualname__ = "torch", "dtype", "dtype"
FLOAT32, BFLOAT16, INT64, INT32 = (DType(n) for n in ("float32", "bfloat16", "int64", "int32"))


class StandInTensor:
    """Stands in for a torch tensor: ``device`` -1 is the CPU; ``address`` None makes
    data_ptr() raise (a tensor without storage)."""

    def __init__(self, address: int | None, device: int = 0, contiguous: bool = True,
                 dtype: DType = FLOAT32, numel: int = 1024) -> None:
        self.address, self.index, self.contiguous = address, device, contiguous
        self.is_cuda = device >= 0
        self.device = f"cuda:{device}" if device >= 0 else "cpu"
        self.dtype, self.count = dtype, numel

    def get_device(self) -> int:
        return self.index

    def is_contiguous(self) -> bool:
        return self.contiguous

    def numel(self) -> int:
        return self.count

    def data_ptr(self) -> int:
        if self.address is None:
            raise RuntimeError("The tensor has a non-zero number of elements, but its data "
                               "is not allocated yet")
        return self.address

    def __repr__(self) -> str:
        return (f"StandInTensor({self.address}, {self.device}, contiguous {self.contiguous}, "
                f"{self.dtype}, {self.count} elements)")



def use_stand_ins(monkeypatch: Any) -> None:
    """StandInBuffer and StandInTensor take the places of cuda.core's Buffer and
    torch.Tensor, for launch paths made after this call."""
    import cuda.core

    from specdsl._runtime import launchers, launching, readers

    monkeypatch.setattr(cuda.core, "Buffer", StandInBuffer)
    for module in (launchers, launching, readers):
        monkeypatch.setattr(module, "tensor_type", lambda: StandInTensor)
    monkeypatch.setitem(readers.READERS, StandInBuffer, readers.read_buffer)
    monkeypatch.setitem(readers.READERS, StandInTensor, readers.read_torch)


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                     ("deleter", _DELETER)]
_capsule = ctypes.pythonapi.PyCapsule_New
_capsule.restype = ctypes.py_object
_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


@_DELETER
def _no_delete(tensor: Any) -> None:
    """The exported tensor's memory is its DLPackArray's (kept alive there)."""


#: DLPack's type codes (dlpack.h): (code, bits) of each element type name
DLPACK = {"float32": (2, 32), "float16": (2, 16), "bfloat16": (4, 16), "int64": (0, 64),
          "int32": (0, 32), "uint16": (1, 16), "uint8": (1, 8)}


class DLPackArray:
    """A device array exported through DLPack (``kDLCUDA``, device 0): what cuda.core's
    ``StridedMemoryView`` reads from torch, JAX or CuPy, made by hand."""

    def __init__(self, address: int, shape: tuple[int, ...], element: str = "float32",
                 device: int = 0) -> None:
        self.address, self.shape, self.element, self.device = address, shape, element, device
        self._exports: list[Any] = []  # the structures a capsule points into

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device)

    def __dlpack__(self, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        code, bits = DLPACK[self.element]
        managed = _Managed(_Tensor(self.address, _Device(2, self.device), len(self.shape),
                                   _DataType(code, bits, 1), shape, None, 0), None, _no_delete)
        self._exports.append((managed, shape))
        return _capsule(ctypes.addressof(managed), b"dltensor", None)

    def __repr__(self) -> str:
        return f"DLPackArray({self.address:#x}, {self.shape}, {self.element})"
