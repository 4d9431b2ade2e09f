"""The on-disk cubin cache: a cold process loads yesterday's cubins instead of compiling.

Built on cuda.core's ``FileStreamProgramCache`` (atomic ``os.replace`` writes, safe to
share between processes). Each entry is framed and read back through
:mod:`specdsl._base.cachefiles`: a corrupt, truncated, foreign or planted file is a miss (and
is recompiled), never a crash and never a wrong kernel.

The disk key (:func:`disk_key`) is one SHA-256 over labelled, length-prefixed fields:
a schema, the request's *derived* key (always, even when the module key is
hand-written: a hand-written key names a module only within one process's ledger, so
it must never pick a cubin from disk), the SHA-256 of the PTX, the target, each
nvJitLink option (:func:`specdsl._runtime.compile.link_options`) and nvJitLink's full version.

Rendered PTX is kept too, so that a warm process skips rendering: an entry framed the
same way with the tag ``b"SPECDSL-PTX/1\\n\\0\\0"`` and UTF-8 PTX text, stored under
:func:`ptx_key` (the derived key and :func:`specdsl._render.render.rendering_digest`, the
digest of specdsl's own code). Only requests whose PTX those two decide are stored
(:func:`specdsl._render.render.renders_from_key`). The cubin's key still hashes the PTX read
back, so a PTX entry can never pair with a cubin compiled from other text.

Where: the ``cache_dir`` argument, else ``SPECDSL_CACHE_DIR``, else
``$XDG_CACHE_HOME/specdsl`` (default ``~/.cache/specdsl``); ``off`` turns it off. Every
folder specdsl uses there (the root, ``entries/`` and each of its subfolders, ``tmp/``,
``jinja/``) must be a private folder of this user
(:func:`specdsl._base.cachedir.prepare_folder`). A folder that cannot be created or written
is a :class:`~specdsl.errors.CacheWarning`, and the process carries on without writing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .._base.cachedir import Writes, prepare_folder, warn_unusable
from .._base.cachefiles import MAGIC, PTX_MAGIC, frame, read_entry, unframe, warn_once
from .._base.digest import labelled_sha256
from ..config import knobs
from ..errors import CacheDirError
from .cudacore import load as load_cuda_core

__all__ = ["DiskCache", "disk_key", "ptx_key", "open_disk_cache", "DISK_SCHEMA"]

#: Bump when the disk key's inputs or the entry layout change.
DISK_SCHEMA = "specdsl-disk-key/2"


def disk_key(*, derived_key: str, ptx_sha256: str, target: str, options: Sequence[str],
             toolchain: str) -> bytes:
    """The 32-byte SHA-256 a cubin is stored under.

    Args:
        derived_key: the request's derived key (never a hand-written one).
        ptx_sha256: hex SHA-256 of the PTX compiled.
        target: the target name, e.g. ``"sm_90"``.
        options: the nvJitLink options, one string each
            (:func:`specdsl._runtime.compile.link_options`).
        toolchain: nvJitLink's full version (:func:`specdsl._runtime.compile.toolchain_version`).
    """
    return labelled_sha256([
        ("schema", DISK_SCHEMA), ("derived", derived_key), ("ptx", ptx_sha256),
        ("target", target), ("options", str(len(options))),
        *(("option", option) for option in options), ("toolchain", toolchain)])


def ptx_key(*, derived_key: str, rendering: str) -> bytes:
    """The 32-byte SHA-256 a rendered PTX is stored under.

    Args:
        derived_key: the request's derived key (it covers the templates, the target,
            the Jinja version and every baked value).
        rendering: :func:`specdsl._render.render.rendering_digest`.
    """
    return labelled_sha256([("schema", DISK_SCHEMA + "/ptx"), ("derived", derived_key),
                            ("rendering", rendering)])


def open_disk_cache(path: Path) -> DiskCache | None:
    """A :class:`DiskCache` on ``path``, or ``None`` (with a warning) where the folder
    cannot be created at all.

    Raises:
        CacheDirError: the folder is refused (see :func:`prepare_folder`).
        ConfigError: ``SPECDSL_CACHE_MAX_BYTES`` is not a size.
    """
    try:
        return DiskCache(path)
    except CacheDirError:
        raise
    except OSError as exc:
        warn_unusable(path, exc)
        return None


class DiskCache:
    """Validated cubins and rendered PTX in a folder shared by processes.

    Args:
        path: the folder (created with mode 0700 if missing); a relative one is made
            absolute here, against the working folder.

    Attributes:
        path: the folder, absolute.
        rejected: entries refused as corrupt, truncated, foreign or not plain files.

    Raises:
        CacheDirError: the folder, ``entries/`` or ``tmp/`` is refused (another user's,
            a link, not a folder).
        OSError: one of them does not exist and cannot be created.
        ConfigError: ``SPECDSL_CACHE_MAX_BYTES`` is not a size.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        load_cuda_core()
        from cuda.core.utils import FileStreamProgramCache

        # absolute once: a later os.chdir must not move the folder entries are written to
        self.path = Path(path).absolute()
        self._writes = Writes(self.path, f"disk cache {str(self.path)!r}", knobs.cache_max_bytes)
        self.rejected = 0
        # before cuda.core, which makes entries/ with the default mode (0775 under umask 002)
        for folder in (self.path, self.path / "entries", self.path / "tmp"):
            prepare_folder(folder)
        self._store = FileStreamProgramCache(self.path)
        self._private: set[Path] = set()  # entries/xx folders checked in this process

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

    def entry_path(self, key: bytes) -> Path:
        """Where the entry for ``key`` lives: cuda.core's layout, asked of the store that
        writes it (``entries/`` + the SHA-256 of the key)."""
        return Path(self._store._path_for_key(key))

    def _folder_ok(self, folder: Path, *, create: bool) -> bool:
        # the entries/xx folder an entry sits in: cuda.core makes it with the default
        # mode (0775 under umask 002), so specdsl makes it, private, before cuda.core
        if folder in self._private:
            return True
        try:
            prepare_folder(folder, create=create)
        except CacheDirError as exc:
            warn_once(folder, "refused", f"specdsl: {exc}; its entries are not used",
                      stacklevel=5)
            return False
        except OSError:
            if create:  # it cannot be made: the write fails, with its warning
                raise
            return False  # missing (or unreadable): a miss
        self._private.add(folder)
        return True

    def _read(self, key: bytes, magic: bytes) -> bytes | None:
        path = self.entry_path(key)
        if not self._folder_ok(path.parent, create=False):
            return None
        try:
            data = read_entry(path)
        except FileNotFoundError:
            return None
        payload = None if data is None else unframe(key, data, magic)
        if payload is None:
            self.rejected += 1
        return payload

    def _write(self, key: bytes, entry: bytes) -> None:
        def put() -> None:
            if self._folder_ok(self.entry_path(key).parent, create=True):
                self._store[key] = entry  # removes its temp file if the write fails
        self._writes.write(len(entry), put)

    @property
    def writable(self) -> bool:
        """False once a write failed (read-only or full disk): entries are still read."""
        return self._writes.on

    @property
    def max_bytes(self) -> int | None:
        """The size cap (``SPECDSL_CACHE_MAX_BYTES``), or ``None`` for none."""
        return self._writes.max_bytes

    def close(self) -> None:
        """Release the underlying cache."""
        self._store.close()
