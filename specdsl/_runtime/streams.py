"""Streams: the ``CUstream`` handle and the device of the stream objects users pass.

A stream is a cuda.core ``Stream``, any object with ``__cuda_stream__`` or a
``torch.cuda.Stream``; a raw int is refused, since it says nothing of its device.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import LaunchError
from .params import describe

__all__ = ["stream_handle", "stream_device"]

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
