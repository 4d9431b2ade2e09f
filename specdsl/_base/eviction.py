"""The cache folder's size: what it holds, a cap with least-recently-used eviction, clearing.

Entries live in ``entries/`` (cubins and rendered PTX, cuda.core's layout) and ``jinja/``
(compiled templates and template facts). Every successful read sets an entry's access
time (:func:`specdsl._base.cachefiles.read_entry`), so eviction by oldest access time removes
the entries used least recently. Files being written sit in ``tmp/`` until an atomic
``os.replace`` publishes them: eviction and clearing never touch a temp file younger
than an hour (another process may be writing it), and before removing an entry they
check that it is still the file they measured (inode, size, modification time), so an
entry another process has just rewritten survives.

The cap is checked on a process's first write to a folder and on every
:data:`PRUNE_EVERY`-th write after: a scan of the folder, never on a launch or a read.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs

from .cachefiles import (
    BYTECODE_MAGIC,
    FACTS_MAGIC,
    HEADER_SIZE,
    MAGIC,
    PTX_MAGIC,
    TEMP_PREFIX,
)

__all__ = ["CacheUsage", "Removed", "usage", "prune", "clear", "wrote", "scan", "PRUNE_EVERY",
           "STALE_TEMP_SECONDS"]

#: A process checks the cap on its first write to a folder and every this many writes after.
PRUNE_EVERY = 64
#: A temp file older than this (in seconds) belongs to a writer that died: clearing and
#: pruning remove it. The same age as cuda.core's FileStreamProgramCache uses.
STALE_TEMP_SECONDS = 3600
#: The folders that hold entries, and the kinds of entry by format tag.
ENTRY_FOLDERS = ("entries", "jinja")
#: How every entry file of every specdsl version starts (each kind's magic number does).
OUR_PREFIX = b"SPECDSL-"
KINDS = {MAGIC: "cubin", PTX_MAGIC: "PTX", BYTECODE_MAGIC: "compiled template",
         FACTS_MAGIC: "template facts"}


@attrs.frozen
class CacheUsage:
    """What a cache folder holds.

    Attributes:
        entries: entry files.
        bytes: their total size, in bytes.
        kinds: entry count by kind (``"cubin"``, ``"PTX"``, ``"compiled template"``,
            ``"template facts"``, ``"other"`` for files of older specdsl versions).
        temp_files: specdsl's files in ``tmp/`` (named :data:`TEMP_PREFIX`: writes in
            flight, or left by a crashed writer).
        temp_bytes: their total size, in bytes.
        foreign_temp_files: other files in ``tmp/``, which specdsl neither wrote nor removes
            (a folder named as the cache by mistake).
    """

    entries: int
    bytes: int
    kinds: dict[str, int]
    temp_files: int
    temp_bytes: int
    foreign_temp_files: int = 0


@attrs.frozen
class Removed:
    """What a :func:`prune` or :func:`clear` removed and left.

    Attributes:
        entries: entry files removed.
        bytes: their size, in bytes.
        left_entries: entry files left.
        left_bytes: their size, in bytes.
        failed: entry files that were to go but could not be removed (a read-only disk, a
            folder without write permission).
        error: the OS error of the first of those, or ``None``.
    """

    entries: int
    bytes: int
    left_entries: int
    left_bytes: int
    failed: int = 0
    error: OSError | None = attrs.field(default=None, eq=False)


def _files(folder: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every non-folder under ``folder`` with its ``lstat``, without following links."""
    for top, _, names in os.walk(folder):
        for name in names:
            path = Path(top, name)
            with contextlib.suppress(OSError):
                yield path, os.lstat(path)


def scan(root: Path) -> list[tuple[Path, os.stat_result]]:
    """Every entry file under ``root`` with its ``lstat``, as one scan sees them."""
    return [item for sub in ENTRY_FOLDERS for item in _files(root / sub)]


def _unchanged(path: Path, before: os.stat_result) -> bool:
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (now.st_ino, now.st_size, now.st_mtime_ns) == \
        (before.st_ino, before.st_size, before.st_mtime_ns)


def _head(path: Path, info: os.stat_result, size: int) -> bytes:
    """The first ``size`` bytes of the regular file ``path`` (not following a link), or
    ``b""`` for anything else or a file that cannot be read."""
    if not stat.S_ISREG(info.st_mode):
        return b""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return b""
    try:
        return os.read(fd, size)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _kind(path: Path, info: os.stat_result) -> str:
    if info.st_size < HEADER_SIZE:
        return "other"
    return KINDS.get(_head(path, info, 16), "other")


def _ours(path: Path, info: os.stat_result) -> bool:
    """Whether ``path`` is an entry some specdsl wrote: a regular file that starts with
    :data:`OUR_PREFIX` (this version's kinds, an older version's, a damaged one's)."""
    return _head(path, info, len(OUR_PREFIX)) == OUR_PREFIX


def usage(root: Path) -> CacheUsage:
    """What the cache folder ``root`` holds (nothing, if it does not exist)."""
    entries = scan(root)
    kinds: dict[str, int] = {}
    for path, info in entries:
        kind = _kind(path, info)
        kinds[kind] = kinds.get(kind, 0) + 1
    in_tmp = list(_files(root / "tmp"))
    temps = [(path, info) for path, info in in_tmp if path.name.startswith(TEMP_PREFIX)]
    return CacheUsage(len(entries), sum(info.st_size for _, info in entries), kinds,
                      len(temps), sum(info.st_size for _, info in temps),
                      len(in_tmp) - len(temps))


def _remove(path: Path, before: os.stat_result) -> bool:
    if not _unchanged(path, before):  # rewritten by another process since it was measured
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _sweep_stale_temps(root: Path) -> None:
    cutoff = time.time() - STALE_TEMP_SECONDS
    for path, info in _files(root / "tmp"):
        # only specdsl's own temp files (cachefiles.write_entry's): a folder named as the
        # cache by mistake keeps whatever else its tmp/ holds
        if info.st_mtime < cutoff and path.name.startswith(TEMP_PREFIX):
            with contextlib.suppress(OSError):
                _remove(path, info)


def prune(root: Path, max_bytes: int) -> Removed:
    """Remove the entries read least recently until ``root``'s entries fit ``max_bytes``.

    Never removes a temp file younger than :data:`STALE_TEMP_SECONDS` (a write in flight),
    nor an entry rewritten since the scan, nor a file that is not one of specdsl's (an entry
    of any version starts with :data:`OUR_PREFIX`, a temp file's name with
    :data:`TEMP_PREFIX`): a folder named as the cache by mistake loses nothing of its own.
    Entries that cannot be removed (a read-only folder) are left, and counted in
    :attr:`Removed.failed`.

    Args:
        root: the cache folder.
        max_bytes: the cap, in bytes (0 removes every entry).
    """
    _sweep_stale_temps(root)
    entries = sorted(((path, info) for path, info in scan(root) if _ours(path, info)),
                     key=lambda item: item[1].st_atime_ns)
    total = sum(info.st_size for _, info in entries)
    removed = freed = failed = 0
    error: OSError | None = None
    for path, info in entries:
        if total <= max_bytes:
            break
        try:
            gone = _remove(path, info)
        except OSError as exc:  # left in place: the caller says so (specdsl cache exits 2)
            failed, error = failed + 1, exc if error is None else error
            continue
        total -= info.st_size
        if gone:
            removed, freed = removed + 1, freed + info.st_size
    if max_bytes == 0:
        _remove_empty_folders(root)
    left = scan(root)
    return Removed(removed, freed, len(left), sum(info.st_size for _, info in left),
                   failed, error)


def clear(root: Path) -> Removed:
    """Remove every entry of ``root`` (and stale temp files; see :func:`prune`)."""
    return prune(root, 0)


def _remove_empty_folders(root: Path) -> None:
    for sub in ENTRY_FOLDERS:
        for top, _, _ in os.walk(root / sub, topdown=False):
            if Path(top) != root / sub:
                with contextlib.suppress(OSError):
                    os.rmdir(top)


_writes: dict[Path, int] = {}
_writes_lock = threading.Lock()


def wrote(root: Path, max_bytes: int | None) -> None:
    """Count one entry written to ``root``; prune to ``max_bytes`` when a check is due
    (the process's first write to ``root``, then every :data:`PRUNE_EVERY` writes)."""
    with _writes_lock:
        count = _writes.get(root, 0)
        _writes[root] = count + 1
    if max_bytes is not None and count % PRUNE_EVERY == 0:
        prune(root, max_bytes)
