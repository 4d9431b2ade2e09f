"""Types of the compiled launch path, specdsl._runtime._speedups (built from _speedups.pyx)."""

from collections.abc import Callable
from typing import Any

from ._driverlaunch import DriverLaunch as DriverLaunch
from .launching import Launcher

#: What specdsl._runtime.speedups checks before using a build.
INTERFACE: int
#: ``{(named tuple, field): position}`` of the fields the compiled code reads by position.
FIELDS: dict[tuple[str, str], int]

class BoundLaunch:
    """``bound(*args)``: a :class:`DriverLaunch` with its stream and geometry fixed (the
    stream read on each call through ``current(device)`` where one is given)."""

    module: Any
    stream: Any
    grid: Any
    block: Any
    shared_mem: Any
    def __init__(self, launch: DriverLaunch, handle: int, geometry: tuple[Any, ...],
                 on_error: Callable[[Any, tuple[Any, ...]], None],
                 current: Callable[[int], int] | None = None,
                 device: int | None = None) -> None: ...
    def __call__(self, *args: Any) -> None: ...

class LaunchPath:
    """``Executor.launch``, compiled: the hot path over a Launcher's slow paths."""

    @property
    def hits(self) -> int: ...
    def __init__(self, launcher: Launcher) -> None: ...
    def launch(self, spec: Any, *args: Any, grid: Any, block: Any, stream: Any = None,
               shared_mem: int = 0, key: str | None = None) -> None: ...
