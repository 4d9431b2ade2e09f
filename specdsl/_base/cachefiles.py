"""Cache entry files: framed, digest-checked, read only when they are plain files of ours.

Every specdsl cache (cubins, rendered PTX, compiled templates, template facts) stores
its entries through this module, so one set of rules decides what a damaged, foreign
or planted file does: it is a miss, never a wrong kernel and never a crash.

Entry layout (all integers big-endian)::

    format tag      16 bytes   b"SPECDSL-CUBIN/1\\n", b"SPECDSL-PTX/1\\n\\0\\0", ...
    key             32 bytes   the SHA-256 the entry is stored under
    payload SHA-256 32 bytes
    payload length   8 bytes
    payload                    at most MAX_ENTRY_BYTES

A file is read only when ``lstat`` says it is a regular file owned by this user, that
no one else can write, of at most :data:`MAX_ENTRY_BYTES`; it is opened with
``O_NOFOLLOW | O_NONBLOCK`` (a link or a FIFO swapped in after the ``lstat`` neither
follows nor blocks) and checked again with ``fstat`` before a byte is read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import struct
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from ..errors import CacheWarning

__all__ = ["MAGIC", "PTX_MAGIC", "BYTECODE_MAGIC", "FACTS_MAGIC", "MAX_ENTRY_BYTES",
           "HEADER_SIZE", "TEMP_PREFIX", "frame", "unframe", "read_entry", "write_entry", "refusal",
           "warn_once"]

MAGIC = b"SPECDSL-CUBIN/1\n"
PTX_MAGIC = b"SPECDSL-PTX/1\n\0\0"
BYTECODE_MAGIC = b"SPECDSL-JINJA/1\n"
FACTS_MAGIC = b"SPECDSL-FACTS/1\n"
#: The largest entry read or written, in bytes (64 MiB): a cubin of specdsl's kernels is
#: 5-40 KB, so this bounds what a planted or runaway file can make a process allocate.
MAX_ENTRY_BYTES = 64 << 20

_HEADER = struct.Struct(">16s32s32sQ")
HEADER_SIZE = _HEADER.size
#: The name prefix of a temp file an entry is written to (``tmp/``) before it is renamed.
TEMP_PREFIX = "entry-"
_ELF = b"\x7fELF"
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))


def _is_text(payload: bytes) -> bool:
    try:
        payload.decode()
    except UnicodeDecodeError:
        return False
    return True


# What a payload of each format must also be, beyond its digest.
_PAYLOAD_CHECK: dict[bytes, Callable[[bytes], bool]] = {
    MAGIC: lambda payload: payload[:4] == _ELF,
    PTX_MAGIC: _is_text,
    FACTS_MAGIC: _is_text,
    BYTECODE_MAGIC: lambda payload: True,
}


def frame(key: bytes, payload: bytes, magic: bytes = MAGIC) -> bytes:
    """An entry: the header (format, key, digest, length) followed by the payload."""
    return _HEADER.pack(magic, key, hashlib.sha256(payload).digest(), len(payload)) + payload


def unframe(key: bytes, data: bytes, magic: bytes = MAGIC) -> bytes | None:
    """The payload inside an entry, or ``None`` if it is not a valid entry for ``key``.

    Refused: another format (a PTX entry where a cubin is asked for, or the reverse), an
    entry written for another key (a file copied or planted under this key's path), a
    length or digest mismatch (truncated or corrupt), a cubin that is not an ELF image,
    and PTX or template facts that are not UTF-8.
    """
    if len(data) < _HEADER.size:
        return None
    stored_magic, stored_key, digest, length = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if stored_magic != magic or stored_key != key or length != len(payload):
        return None
    if hashlib.sha256(payload).digest() != digest:
        return None
    return payload if _PAYLOAD_CHECK[magic](payload) else None


def refusal(info: os.stat_result, *, folder: bool) -> str | None:
    """Why a cache file or folder with this ``lstat`` result must not be trusted, or ``None``.

    Refused: a symbolic link, a file where a folder is expected (or the reverse, or a FIFO,
    socket or device), anything owned by another user, and anything others (its group or
    everyone) can write. The last is the one a caller may mend, on a folder of its own.
    """
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if folder and not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if not folder and not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        return f"belongs to another user (uid {info.st_uid})"
    if info.st_mode & _OTHERS_WRITE:
        return f"can be written by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def read_entry(path: Path, limit: int = MAX_ENTRY_BYTES) -> bytes | None:
    """The bytes of the entry file ``path``, or ``None`` where it is not to be trusted.

    ``None`` for anything :func:`refusal` refuses, a file over ``limit`` bytes, and a file
    that changed while it was read. A successful read marks the file used (its access
    time is set to now, its modification time kept): eviction removes the entries read
    least recently first.

    Raises:
        FileNotFoundError: there is no file at ``path`` (a plain miss).
    """
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError:
        return None
    if refusal(before, folder=False) is not None or before.st_size > limit:
        return None
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError:  # ELOOP: a link swapped in after the lstat
        return None
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino) or \
                refusal(info, folder=False) is not None or info.st_size > limit:
            return None
        chunks, left = [], info.st_size + 1  # one byte more: a file that grew is refused
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) != info.st_size:
            return None
        with contextlib.suppress(OSError):  # a read-only folder: eviction falls back to FIFO
            os.utime(fd, ns=(time.time_ns(), info.st_mtime_ns))
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def write_entry(target: Path, data: bytes, tmp: Path) -> None:
    """Write ``data`` to ``target`` atomically: a private temp file in ``tmp`` (on the same
    disk), then ``os.replace``. Readers see the old file or the whole new one.

    Raises:
        OSError: the write failed (full disk, read-only folder); the temp file is removed.
    """
    fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=tmp)  # mode 0600
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)
        fd = -1
        os.replace(name, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def warn_once(folder: Path | str, problem: str, message: str, stacklevel: int = 3) -> None:
    """Issue a :class:`CacheWarning` once per process for each ``(folder, problem)``."""
    slot = (os.fspath(folder), problem)
    with _warned_lock:
        if slot in _warned:
            return
        _warned.add(slot)
    warnings.warn(message, CacheWarning, stacklevel=stacklevel)
