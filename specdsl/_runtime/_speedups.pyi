"""Types of the compiled launch path, specdsl._runtime._speedups (built from _speedups.pyx)."""

from collections.abc import Callable, Sequence
from typing import Any

from .launching import Launcher

#: What specdsl._runtime.speedups checks before using a build.
INTERFACE: int
#: ``{(named tuple, field): position}`` of the fields the compiled code reads by position.
FIELDS: dict[tuple[str, str], int]

class CoreLaunch:
    """Checks one kernel's arguments and launches it through cuda.core's ``launch``."""

    def __init__(self, plan: list[tuple[Any, ...]], values: Callable[..., Any],
                 core_launch: Callable[..., Any], kernel: Any, buffer_type: type | None,
                 tensor_type: type | None, device_id: int | None) -> None: ...
    def fire(self, args: Sequence[Any], streams: tuple[Any, ...],
             geometry: tuple[Any, ...]) -> Exception | None: ...
    def __call__(self, args: Sequence[Any], streams: tuple[Any, ...],
                 geometry: tuple[Any, ...]) -> Exception | None: ...

class BoundCoreLaunch:
    """``bound(*args)``: a :class:`CoreLaunch` with its stream and ``LaunchConfig`` fixed."""

    module: Any
    stream: Any
    grid: Any
    block: Any
    shared_mem: Any
    def __init__(self, launch: CoreLaunch, streams: tuple[Any, ...], config: Any,
                 on_error: Callable[[Any, tuple[Any, ...]], None]) -> None: ...
    def __call__(self, *args: Any) -> None: ...

class LaunchPath:
    """``Executor.launch``, compiled: the hot path over a Launcher's slow paths."""

    @property
    def hits(self) -> int: ...
    def __init__(self, launcher: Launcher) -> None: ...
    def launch(self, spec: Any, *args: Any, grid: Any, block: Any, stream: Any = None,
               shared_mem: int = 0, key: str | None = None) -> None: ...
