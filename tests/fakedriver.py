"""A driver seam with no GPU behind it, for ``Executor(driver=...)`` in CPU tests.

One device with the default limits (an H100/H200's), kernels "loaded" as stand-ins, and
every launch recorded instead of made: ``core_calls`` holds cuda.core's ``launch(stream,
config, kernel, *values)`` arguments, ``driver_calls`` those of ``cuLaunchKernel``.
"""

from __future__ import annotations

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
                 core_error: Exception | None = None, driver_error: CUresult | None = None):
        self.core_calls: list[tuple[Any, ...]] = []
        self.driver_calls: list[tuple[Any, ...]] = []
        self.asked: list[int] = []  # stream handles asked about
        self.stream_devices = stream_devices or {}
        self.core_error, self.driver_error = core_error, driver_error
        self.core_launch = self._core_launch if core else None
        self.launch_kernel = self._launch_kernel
        self.opted_in: list[int] = []

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

    def _launch_kernel(self, *args: Any) -> tuple[int]:
        self.driver_calls.append(args)
        return (self.driver_error or 0,)

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
