"""Streams: the ``CUstream`` handle and the device of the stream objects users pass.

A stream is a cuda.core ``Stream``, any object with ``__cuda_stream__`` or a
``torch.cuda.Stream``; a raw int is refused, since it says nothing of its device. A
:class:`StreamResolver` turns each into the :class:`Streams` a launch takes, once it has
checked that the stream belongs to the executor's device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from ..errors import LaunchError
from .params import describe

__all__ = ["Streams", "StreamDriver", "StreamResolver", "stream_handle", "stream_device"]


class Streams(NamedTuple):
    """A launch's stream, as the two launch functions take it.

    Attributes:
        handle: the ``CUstream`` handle, as an int (``cuLaunchKernel``'s).
        core: what cuda.core's ``launch`` takes for it (a cuda.core ``Stream``; ``None``
            for a driver without cuda.core).
    """

    handle: int
    core: Any


class StreamDriver(Protocol):
    """The part of the driver seam (:class:`~specdsl._runtime.driver.Driver`) that
    streams need."""

    def stream_device(self, handle: int) -> int | None:
        """The device a stream handle belongs to (``cuStreamGetDevice``), or ``None`` when
        the driver cannot tell.

        Raises:
            LaunchError: a handle the driver does not know.
        """

    def core_stream(self, stream: Any, handle: int) -> Any:
        """What cuda.core's launch takes for the stream ``handle``, which ``stream`` gave:
        ``stream`` itself when it is a cuda.core ``Stream`` (``None`` for a driver
        without cuda.core)."""

    def is_core_stream(self, stream: Any) -> bool:
        """Whether ``stream`` is a cuda.core ``Stream`` (the launch then takes it as it is)."""

# type -> (handle reader, whether the type has cuda.core's is_closed)
_STREAMS: dict[type, tuple[Callable[[Any], int], bool]] = {}


def stream_handle(stream: Any) -> int:
    """The ``CUstream`` handle of a stream object, as an int.

    Accepts a cuda.core ``Stream``, any object with ``__cuda_stream__`` (returning
    ``(version, handle)``), and objects with an int ``cuda_stream`` attribute
    (``torch.cuda.Stream``).

    Raises:
        LaunchError: anything else (a raw int is refused: it says nothing of its device),
            a closed stream, or a stream object whose handle cannot be read.
    """
    kind = type(stream)
    entry = _STREAMS.get(kind)
    if entry is None:
        reader: Callable[[Any], int]
        if isinstance(getattr(stream, "cuda_stream", None), int):
            # torch.cuda.Stream: its cuda_stream int reads faster than its __cuda_stream__()
            def reader(s: Any) -> int:
                return int(s.cuda_stream)
        elif hasattr(kind, "__cuda_stream__"):
            def reader(s: Any) -> int:
                return int(s.__cuda_stream__()[1])
        else:
            raise LaunchError(
                f"stream must be a cuda.core Stream, an object with __cuda_stream__ or a "
                f"torch.cuda.Stream (got {describe(stream)})")
        entry = _STREAMS[kind] = (reader, hasattr(kind, "is_closed"))
    reader, closable = entry
    if closable and stream.is_closed is True:  # a closed cuda.core Stream reads handle 0
        raise LaunchError(f"stream {describe(stream)} is closed")
    try:
        return reader(stream)
    except Exception as exc:  # a closed stream, a producer that refuses
        raise LaunchError(f"stream {describe(stream)} gave no handle: {exc}") from None


def stream_device(stream: Any) -> int | None:
    """The ordinal of the device a stream object says it belongs to, or ``None``.

    Read from what the common stream types carry: a cuda.core ``Stream``'s ``device``,
    a ``torch.cuda.Stream``'s ``device_index``, a CuPy stream's ``device_id``. Other
    objects say nothing here (the executor then asks the driver).
    """
    device = getattr(stream, "device_index", None)  # torch.cuda.Stream
    if type(device) is int:
        return device
    device = getattr(stream, "device_id", None)  # CuPy
    if type(device) is int:
        return device
    device = getattr(getattr(stream, "device", None), "device_id", None)  # cuda.core
    return device if type(device) is int else None


class StreamResolver:
    """The :class:`Streams` of the stream objects a launch is given, for one device.

    The last stream object checked is remembered, so a loop on one stream checks it once;
    a new object for the same handle on the same device (``torch.cuda.current_stream()``
    makes one per call) is the same stream.

    Args:
        device_id: the executor's device; a stream of another device is refused.
        driver: asked for a stream's device when the object names none, and for what
            cuda.core's launch takes.
    """

    def __init__(self, device_id: int, driver: StreamDriver) -> None:
        self.device_id = device_id
        self.driver = driver
        # (stream object, its Streams, its device) last checked
        self._last: tuple[Any, Streams, int | None] = (None, Streams(-1, None), None)  # none yet

    def resolve(self, stream: Any) -> Streams:
        """The :class:`Streams` of ``stream``, once its device is checked to be this one.

        Raises:
            LaunchError: not a stream object, a closed stream, a stream of another device
                or one the driver does not know.
        """
        handle = stream_handle(stream)
        last_stream, last, last_device = self._last
        if last.handle == handle and last_stream is stream:
            return last
        device = stream_device(stream)
        # a new object for the last stream (torch.cuda.current_stream() makes one per call):
        # the same handle on the same device is the same stream
        if last.handle == handle and device is not None and device == last_device and \
                not self.driver.is_core_stream(stream):
            self._last = (stream, last, device)
            return last
        # 0, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) name the calling thread's
        # current context's stream: they belong to no device of their own
        if device is None and handle not in (0, 1, 2):
            device = self.driver.stream_device(handle)
        if device is not None and device != self.device_id:
            raise LaunchError(f"stream {handle:#x} belongs to device {device}; this executor "
                              f"launches on device {self.device_id}")
        streams = Streams(handle, self.driver.core_stream(stream, handle))
        self._last = (stream, streams, device)
        return streams
