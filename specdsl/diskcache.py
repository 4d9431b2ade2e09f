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

Rendered PTX is kept too, so that a warm process skips rendering: an entry framed the
same way with the magic ``b"SPECDSL-PTX/1\n\0\0"`` and UTF-8 PTX text, stored under
:func:`ptx_key` (the derived key and :func:`specdsl.render.rendering_digest`, the
digest of specdsl's own code). Only requests whose PTX those two decide are stored
(:func:`specdsl.render.renders_from_key`). The cubin's key still hashes the PTX read
back, so a PTX entry can never pair with a cubin compiled from other text.

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

from .errors import CacheDirError  # defined with every other error; re-exported here

__all__ = ["DiskCache", "disk_key", "ptx_key", "resolve_cache_dir", "prepare_folder",
           "DISK_SCHEMA", "ENV_VAR", "MAGIC", "PTX_MAGIC"]

#: Bump when the disk key's inputs or the entry layout change.
DISK_SCHEMA = "specdsl-disk-key/1"
#: The environment variable naming the cache folder, or ``off``.
ENV_VAR = "SPECDSL_CACHE_DIR"
MAGIC = b"SPECDSL-CUBIN/1\n"
PTX_MAGIC = b"SPECDSL-PTX/1\n\0\0"
_HEADER = struct.Struct(">16s32s32sQ")
_ELF = b"\x7fELF"
_OFF = ("off", "0", "none", "false", "no")


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


def ptx_key(*, derived_key: str, rendering: str) -> bytes:
    """The 32-byte SHA-256 a rendered PTX is stored under.

    Args:
        derived_key: the request's derived key (it covers the templates, the target,
            the Jinja version and every baked value).
        rendering: :func:`specdsl.render.rendering_digest`.
    """
    h = hashlib.sha256()
    _field(h, "schema", DISK_SCHEMA + "/ptx")
    _field(h, "derived", derived_key)
    _field(h, "rendering", rendering)
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
        return self._read(key, MAGIC)

    def put(self, key: bytes, cubin: bytes) -> None:
        """Store ``cubin`` under ``key``; a failed write (full disk, permissions) only warns."""
        self._write(key, frame(key, cubin))

    def get_ptx(self, key: bytes) -> str | None:
        """The PTX text stored under ``key``, or ``None`` for a missing or invalid entry."""
        data = self._read(key, PTX_MAGIC)
        return None if data is None else data.decode()

    def put_ptx(self, key: bytes, ptx: str) -> None:
        """Store rendered ``ptx`` under ``key`` (see :func:`ptx_key`); a failed write only warns."""
        self._write(key, frame(key, ptx.encode(), PTX_MAGIC))

    def _read(self, key: bytes, magic: bytes) -> bytes | None:
        try:
            data = self._store.get(key)
        except OSError:
            return None
        if data is None:
            return None
        payload = unframe(key, data, magic)
        if payload is None:
            self.rejected += 1
        return payload

    def _write(self, key: bytes, entry: bytes) -> None:
        try:
            self._store[key] = entry
        except OSError as exc:
            if not self._warned:
                self._warned = True
                warnings.warn(f"specdsl: cannot write to the disk cache {str(self.path)!r}: "
                              f"{exc}", RuntimeWarning, stacklevel=4)

    def entry_path(self, key: bytes) -> Path:
        """Where the entry for ``key`` lives (for tools and tests)."""
        return self._store._path_for_key(key)

    def close(self) -> None:
        """Release the underlying cache."""
        self._store.close()


def frame(key: bytes, payload: bytes, magic: bytes = MAGIC) -> bytes:
    """An entry: the header (format, key, digest, length) followed by the payload."""
    return _HEADER.pack(magic, key, hashlib.sha256(payload).digest(), len(payload)) + payload


def unframe(key: bytes, data: bytes, magic: bytes = MAGIC) -> bytes | None:
    """The payload inside an entry, or ``None`` if it is not a valid entry for ``key``.

    Refused: another format (a PTX entry where a cubin is asked for, or the reverse), an
    entry written for another key, a length or digest mismatch (truncated or corrupt), a
    cubin that is not an ELF image, and PTX that is not UTF-8.
    """
    if len(data) < _HEADER.size:
        return None
    stored_magic, stored_key, digest, length = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if stored_magic != magic or stored_key != key or length != len(payload):
        return None
    if hashlib.sha256(payload).digest() != digest:
        return None
    if magic == MAGIC and payload[:4] != _ELF:
        return None
    if magic == PTX_MAGIC:
        try:
            payload.decode()
        except UnicodeDecodeError:
            return None
    return payload
