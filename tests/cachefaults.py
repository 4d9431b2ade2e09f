"""Faults for the cache tests: a full disk, folders whose modes bind, another user's files."""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest


def _under(fd: int, folder: Path) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder))
    except OSError:
        return False


def full_disk(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make the disk of ``folder`` full: a write to a file under it stores half its bytes,
    then fails with ENOSPC (``os.write``), and ``os.fsync`` (which cuda.core's cache calls
    before publishing an entry) fails with ENOSPC. Other files are untouched."""
    real_write, real_fsync = os.write, os.fsync

    def write(fd: int, data) -> int:
        if not _under(fd, folder):
            return real_write(fd, data)
        if len(data) > 1:
            real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fsync(fd: int) -> None:
        if _under(fd, folder):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)


@contextlib.contextmanager
def binding_modes() -> Iterator[Path]:
    """A fresh folder owned by a user whom mode bits bind, acting as that user.

    The current user, unless it is root (whom a mode of 0500 does not stop): then the body
    runs with the effective uid and gid of ``nobody`` and the folder belongs to nobody.
    """
    # imported before the switch: as nobody, an interpreter under root's home cannot read them
    import cuda.core.utils  # noqa: F401

    from specdsl._runtime.compile import toolchain_version

    toolchain_version()
    from specdsl._templating import cache as templatecache

    base = Path(tempfile.mkdtemp(prefix="specdsl-modes-"))
    os.chmod(base, 0o755)
    root = os.geteuid() == 0
    # the process's template cache (the user's folder) is off for the block, so that the
    # user switched to does not try to write there
    saved = os.environ.get("SPECDSL_CACHE_DIR")
    os.environ["SPECDSL_CACHE_DIR"] = "off"
    templatecache.store.cache_clear()
    if root:
        nobody = pwd.getpwnam("nobody")
        os.chown(base, nobody.pw_uid, nobody.pw_gid)
        os.setegid(nobody.pw_gid)
        os.seteuid(nobody.pw_uid)
    try:
        yield base
    finally:
        if root:
            os.seteuid(0)
            os.setegid(0)
        if saved is None:
            del os.environ["SPECDSL_CACHE_DIR"]
        else:
            os.environ["SPECDSL_CACHE_DIR"] = saved
        templatecache.store.cache_clear()
        for top, dirs, _ in os.walk(base):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(top, name), 0o700)
        shutil.rmtree(base, ignore_errors=True)


def owned_by_another(monkeypatch: pytest.MonkeyPatch, *paths: Path, mode: int | None = None,
                     uid: int | None = None) -> None:
    """``os.lstat`` of ``paths`` reports another owner (``uid``, by default this user's + 1)
    and, if given, ``mode``'s permission bits; the files themselves are unchanged."""
    real = os.lstat
    chosen = {os.fspath(p) for p in paths}
    other = os.geteuid() + 1 if uid is None else uid

    def lstat(path, *args, **kwargs):
        info = real(path, *args, **kwargs)
        if os.fspath(path) not in chosen:
            return info
        fields = {name: getattr(info, name) for name in dir(info) if name.startswith("st_")}
        fields["st_uid"] = other
        if mode is not None:
            fields["st_mode"] = (info.st_mode & ~0o7777) | mode
        return types.SimpleNamespace(**fields)

    monkeypatch.setattr(os, "lstat", lstat)


# (first byte, end) of each part of a cache entry: format tag, key, digest, length, payload
PARTS = {"format tag": (0, 16), "key": (16, 48), "digest": (48, 80), "length": (80, 88),
         "payload": (88, None)}
#: Every kind of damage the tests apply: three flipped bytes in one part, or a cut.
DAMAGE = [*PARTS, *(f"cut {n}" for n in (0, 1, 15, 16, 47, 48, 87, 88, -1))]


def damage(path: Path, how: str) -> None:
    """Damage the entry file ``path``: ``"cut N"`` keeps its first N bytes (-1: all but the
    last); a part's name flips a bit in its first, middle and last byte."""
    data = bytearray(path.read_bytes())
    if how.startswith("cut "):
        path.write_bytes(bytes(data[:int(how[4:])]))
        return
    start, end = PARTS[how]
    end = len(data) if end is None else end
    for position in (start, (start + end) // 2, end - 1):
        data[position] ^= 0x10
    path.write_bytes(bytes(data))
