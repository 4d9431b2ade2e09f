"""Types of a kernel's compiled launcher, specdsl._runtime._driverlaunch (_driverlaunch.pyx)."""

from collections.abc import Callable, Sequence
from typing import Any

class DriverLaunch:
    """Checks one kernel's arguments, packs them and calls ``cuLaunchKernel``."""

    def __init__(self, plan: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]],
                 values: Callable[..., Any], size: int, launch_kernel: int, function: int,
                 result: Callable[[int], Any], buffer_type: type | None,
                 tensor_type: type | None, element_names: dict[Any, str],
                 device_id: int | None) -> None: ...
    def fire(self, args: Sequence[Any], streams: tuple[Any, ...],
             geometry: tuple[Any, ...]) -> Any: ...
    def __call__(self, args: Sequence[Any], streams: tuple[Any, ...],
                 geometry: tuple[Any, ...]) -> Any: ...
    def pack(self, args: Sequence[Any], stream: int = 0,
             grid: tuple[int, int, int] = (1, 1, 1)) -> bytes: ...
