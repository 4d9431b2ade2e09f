"""The on-disk cubin cache: a cold process loads yesterday's cubins instead of compiling.

Built on cuda.core's ``FileStreamProgramCache`` (atomic ``os.replace`` writes, safe to
share between processes). specdsl frames each entry so that it can be validated on
read: a corrupt, truncated or foreign file is a miss (and is recompiled), never a crash
and never a wrong kernel.

Entry layout (all integers big-endian)::

    b"SPECDSL-CUBIN/1\\n"   16 bytes, the format
    disk key              32 bytes, the SHA-256 the entry was stored under
    SHA-256 of the cubin  32 bytes
    cubin length           8 bytes
    cubin                  an ELF image (starts with b"\\x7fELF")

The disk key (:func:`disk_key`) is one SHA-256 over labelled, length-prefixed fields:
a schema, the request's *derived* key (always, even when the module key is
hand-written: a hand-written key names a module only within one process's ledger, so
it must never pick a cubin from disk), the SHA-256 of the PTX, the target, the
nvJitLink options and the nvJitLink version.

Where: the ``cache_dir`` argument, else ``SPECDSL_CACHE_DIR``, else
``$XDG_CACHE_HOME/specdsl`` (default ``~/.cache/specdsl``), created with mode 0700.
``SPECDSL_CACHE_DIR=off`` (or ``cache_dir="off"``) turns the disk cache off.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import warnings
from pathlib import Path
from typing import Any

from .errors import SpecdslError

__all__ = ["DiskCache", "disk_key", "resolve_cache_dir", "prepare_folder", "DISK_SCHEMA",
           "ENV_VAR", "MAGIC"]

#: Bump when the disk key's inputs or the entry layout change.
DISK_SCHEMA = "specdsl-disk-key/1"
#: The environment variable naming the cache folder, or ``off``.
ENV_VAR = "SPECDSL_CACHE_DIR"
MAGIC = b"SPECDSL-CUBIN/1\n"
_HEADER = struct.Struct(">16s32s32sQ")
_ELF = b"\x7fELF"
_OFF = ("off", "0", "none", "false", "no")


class CacheDirError(SpecdslError, OSError):
    """The disk cache folder cannot be used (not a folder, or unsafe)."""


def _field(h: Any, label: str, value: str) -> None:
    data = value.encode()
    h.update(f"{label}:{len(data)}:".encode())
    h.update(data)


def disk_key(*, derived_key: str, ptx_sha256: str, target: str, options: str,
             toolchain: str) -> bytes:
    """The 32-byte SHA-256 a cubin is stored under.

    Args:
        derived_key: the request's derived key (never a hand-written one).
        ptx_sha256: hex SHA-256 of the PTX compiled.
        target: the target name, e.g. ``"sm_90"``.
        options: the nvJitLink options (:func:`specdsl.compile.link_options`).
        toolchain: the nvJitLink version (:func:`specdsl.compile.toolchain_version`).
    """
    h = hashlib.sha256()
    _field(h, "schema", DISK_SCHEMA)
    _field(h, "derived", derived_key)
    _field(h, "ptx", ptx_sha256)
    _field(h, "target", target)
    _field(h, "options", options)
    _field(h, "toolchain", toolchain)
    return h.digest()


def _default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specdsl"


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path | None:
    """The folder the disk cache uses, or ``None`` when it is turned off.

    ``cache_dir`` wins, then ``SPECDSL_CACHE_DIR``, then the per-user default; the
    value ``"off"`` (also ``0``, ``none``, ``false``, ``no``) turns the cache off.
    """
    chosen: Any = cache_dir if cache_dir is not None else os.environ.get(ENV_VAR)
    if chosen is None or (isinstance(chosen, str) and chosen.strip() == ""):
        return _default_dir()
    if isinstance(chosen, str) and chosen.strip().lower() in _OFF:
        return None
    return Path(chosen).expanduser()


def prepare_folder(path: Path) -> None:
    """Create ``path`` (mode 0700) and check with ``lstat`` that it is our own folder.

    Raises:
        CacheDirError: it cannot be created, is a link or not a folder, or belongs to
            another user.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise CacheDirError(f"cannot create the disk cache folder {str(path)!r}: {exc}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise CacheDirError(f"disk cache path {str(path)!r} is not a folder (or is a link)")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise CacheDirError(f"disk cache folder {str(path)!r} belongs to another user "
                            f"(uid {info.st_uid}); set {ENV_VAR} to a folder of your own")


class DiskCache:
    """Validated cubins in a folder shared by processes.

    Args:
        path: the folder (created with mode 0700 if missing).

    Raises:
        CacheDirError: the folder cannot be created, is not a folder, is a symbolic link
            or belongs to another user.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from cuda.core.utils import FileStreamProgramCache

        self.path = Path(path)
        prepare_folder(self.path)
        self._store = FileStreamProgramCache(self.path)
        self.rejected = 0
        self._warned = False

    def get(self, key: bytes) -> bytes | None:
        """The cubin stored under ``key``, or ``None`` for a missing or invalid entry."""
        try:
            data = self._store.get(key)
        except OSError:
            return None
        if data is None:
            return None
        cubin = unframe(key, data)
        if cubin is None:
            self.rejected += 1
        return cubin

    def put(self, key: bytes, cubin: bytes) -> None:
        """Store ``cubin`` under ``key``; a failed write (full disk, permissions) only warns."""
        try:
            self._store[key] = frame(key, cubin)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                warnings.warn(f"specdsl: cannot write to the disk cache {str(self.path)!r}: "
                              f"{exc}", RuntimeWarning, stacklevel=3)

    def entry_path(self, key: bytes) -> Path:
        """Where the entry for ``key`` lives (for tools and tests)."""
        return self._store._path_for_key(key)

    def close(self) -> None:
        """Release the underlying cache."""
        self._store.close()


def frame(key: bytes, cubin: bytes) -> bytes:
    """An entry: the header (format, key, digest, length) followed by the cubin."""
    return _HEADER.pack(MAGIC, key, hashlib.sha256(cubin).digest(), len(cubin)) + cubin


def unframe(key: bytes, data: bytes) -> bytes | None:
    """The cubin inside an entry, or ``None`` if the entry is not a valid one for ``key``.

    Refused: a foreign format, an entry written for another key, a length or digest
    mismatch (truncated or corrupt), and a payload that is not an ELF image.
    """
    if len(data) < _HEADER.size:
        return None
    magic, stored_key, digest, length = _HEADER.unpack_from(data)
    cubin = data[_HEADER.size:]
    if magic != MAGIC or stored_key != key or length != len(cubin):
        return None
    if cubin[:4] != _ELF or hashlib.sha256(cubin).digest() != digest:
        return None
    return cubin
