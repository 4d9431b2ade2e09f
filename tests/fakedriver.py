"""A driver seam with no GPU behind it, for ``Executor(driver=...)`` in CPU tests.

One device with the default limits (an H100/H200's), kernels "loaded" as stand-ins, and
every launch recorded instead of made: ``core_calls`` holds cuda.core's ``launch(stream,
config, kernel, *values)`` arguments, ``driver_calls`` those of ``cuLaunchKernel``, from
Python (the plain-Python path) or from C (the compiled path calls the C function at
``launch_kernel_address``, here a ctypes callback into this object), each as
``(function, gx, gy, gz, bx, by, bz, shared_mem, stream, params)`` with ``params`` the
parameters' bytes as the driver would copy them: one ``bytes`` per ``kernelParams``
pointer (up to the next parameter's start, the last one 8 bytes; both launch paths end the
array with NULL).
"""

from __future__ import annotations

import ctypes
from typing import Any

from specdsl._runtime.driver import LoadedKernel, OpenedDevice
from specdsl._runtime.geometry import DeviceLimits
from specdsl._runtime.streams import Streams
from specdsl.errors import LaunchError

#: The stand-in kernel's CUkernel handle, and the default stream's handle.
FUNCTION, DEFAULT_STREAM = 1234, 7


class CUresult(int):
    """A driver error code with the name cuda.bindings' enum gives it."""

    def __new__(cls, value: int, name: str) -> CUresult:
        result = super().__new__(cls, value)
        result.name = name
        return result


class FakeDriver:
    """Keeps :class:`specdsl._runtime.driver.Driver`'s contract without CUDA.

    Args:
        core: whether it has cuda.core's ``launch`` (without it every kernel launches
            through ``cuLaunchKernel``).
        stream_devices: the device of each stream handle it is asked about; any other
            handle is one the driver does not know.
        core_error: an exception cuda.core's ``launch`` raises, or ``None``.
        driver_error: a ``CUresult`` that ``cuLaunchKernel`` returns, or ``None``.
    """

    def __init__(self, *, core: bool = True, stream_devices: dict[int, int] | None = None,
                 core_error: Exception | None = None, driver_error: CUresult | None = None,
                 c_entry: bool = True):
        self.core_calls: list[tuple[Any, ...]] = []
        self.driver_calls: list[tuple[Any, ...]] = []
        self.asked: list[int] = []  # stream handles asked about
        self.stream_devices = stream_devices or {}
        self.core_error, self.driver_error = core_error, driver_error
        self.core_launch = self._core_launch if core else None
        self.launch_kernel = self._launch_kernel
        # the C entry point the compiled path calls (kept alive with this object)
        self._c_launch = _C_LAUNCH(self._c_launch_kernel)
        self.launch_kernel_address = (ctypes.cast(self._c_launch, ctypes.c_void_p).value
                                      if c_entry else 0)
        self.opted_in: list[int] = []

    @property
    def launches(self) -> list[tuple[tuple[int, int, int], tuple[int, int, int], tuple[int, ...]]]:
        """Every launch made, through cuda.core or the driver (whichever the launch path
        took): ``(grid, block, values)``, each value as the int of its first (up to) 8
        bytes, little endian (cuda.core's values as given)."""
        made = [(call[1][1], call[1][2], tuple(call[3:])) for call in self.core_calls]
        made += [(call[1:4], call[4:7],
                  tuple(int.from_bytes(value[:8], "little") for value in call[9]))
                 for call in self.driver_calls]
        return made

    def open_device(self, ordinal: int) -> OpenedDevice:
        core_stream = "stream" if self.core_launch is not None else None
        return OpenedDevice(f"device {ordinal}", (9, 0), DeviceLimits(),
                            Streams(DEFAULT_STREAM, core_stream))

    def load(self, cubin: bytes, entry: str) -> LoadedKernel:
        return LoadedKernel("kernel", FUNCTION, 1024, 0, (1, 1, 1))

    def _core_launch(self, *args: Any) -> None:
        if self.core_error is not None:
            raise self.core_error
        self.core_calls.append(args)

    def _launch_kernel(self, function, gx, gy, gz, bx, by, bz, smem, stream, params,
                       extra) -> tuple[int]:
        self.driver_calls.append((function, gx, gy, gz, bx, by, bz, smem, stream,
                                  _parameters(params)))
        return (self.driver_error or 0,)

    def _c_launch_kernel(self, function, gx, gy, gz, bx, by, bz, smem, stream, params,
                         extra) -> int:
        self.driver_calls.append((function or 0, gx, gy, gz, bx, by, bz, smem, stream or 0,
                                  _parameters(params)))
        return int(self.driver_error or 0)

    def result(self, code: int) -> Any:
        if self.driver_error is not None and code == self.driver_error:
            return self.driver_error
        return CUresult(code, f"CUDA_ERROR_{code}")

    def launch_config(self, grid: tuple[int, int, int], block: tuple[int, int, int],
                      shared_mem: int) -> Any:
        return ("config", grid, block)

    def core_stream(self, stream: Any, handle: int) -> Any:
        return None if self.core_launch is None else f"stream {handle:#x}"

    def is_core_stream(self, stream: Any) -> bool:
        return False

    def stream_device(self, handle: int) -> int | None:
        self.asked.append(handle)
        if handle not in self.stream_devices:
            raise LaunchError(f"stream {handle:#x} is not a stream the driver knows")
        return self.stream_devices[handle]

    def opt_in_shared(self, function: int, size: int, device_id: int) -> None:
        self.opted_in.append(size)

    def make_current(self, device_id: int) -> None:
        pass

    def lacks_context(self, error: Any) -> bool:
        return False


# cuLaunchKernel's C signature: CUresult (int), CUfunction, 7 unsigned ints, CUstream,
# void **kernelParams, void **extra
_C_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def _parameters(address: int | None) -> tuple[bytes, ...]:
    """The bytes each pointer of a NULL-terminated kernelParams array points at: up to the
    next pointer (a parameter and its padding), 8 bytes for the last."""
    if not address:
        return ()
    pointers = []
    array = ctypes.cast(address, ctypes.POINTER(ctypes.c_void_p))
    while array[len(pointers)]:
        pointers.append(array[len(pointers)])
    if not pointers:
        return ()
    ends = [*pointers[1:], pointers[-1] + 8]
    return tuple(ctypes.string_at(start, end - start)
                 for start, end in zip(pointers, ends, strict=True))


def compiled_launcher(packer: Any, driver: FakeDriver) -> Any:
    """The compiled launch path's launcher of ``packer``'s kernel (a ``DriverLaunch``,
    calling ``driver``'s C entry point), as an executor on device ``packer.device_id``
    makes it; ``None`` where the extension is not built."""
    from specdsl._runtime.arraychecks import ELEMENT_NAMES
    from specdsl._runtime.readers import buffer_type, tensor_type
    from specdsl._runtime.speedups import speedups

    built = speedups()
    if built is None:
        return None
    return built.DriverLaunch(packer.driver_plan(), packer.values, packer.size,
                              driver.launch_kernel_address, FUNCTION, driver.result,
                              buffer_type(), tensor_type(), ELEMENT_NAMES, packer.device_id)
