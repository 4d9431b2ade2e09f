"""The cache-folder policy: where specdsl's caches live, and which folders they may use.

Every cache (the cubin and PTX disk cache, the compiled-template store) lives in one folder:
the ``cache_dir`` argument, else ``SPECDSL_CACHE_DIR``, else ``$XDG_CACHE_HOME/specdsl``
(default ``~/.cache/specdsl``); ``off`` turns them off (:func:`resolve_cache_dir`). Each
folder used there must be a private folder of this user (:func:`prepare_folder`). A folder
that is refused or cannot be created, and a write that fails, are a
:class:`~specdsl.errors.CacheWarning`: the process carries on without the cache, or reads
it without writing (:class:`Writes`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from ..config import Knobs, knobs, parse_folder
from ..errors import CacheDirError, ConfigError
from .cachefiles import MAX_ENTRY_BYTES, refusal, warn_once
from .wording import with_article

__all__ = ["resolve_cache_dir", "prepare_folder", "warn_refused", "warn_unusable", "Writes",
           "ENV_VAR"]

#: The environment variable naming the cache folder, or ``off``.
ENV_VAR = Knobs.cache_dir.name


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path | None:
    """The folder the disk cache uses, as an absolute path, or ``None`` when it is turned off.

    ``cache_dir`` wins, then ``SPECDSL_CACHE_DIR``, then the per-user default; an off word
    (``off``, ``0``, ``false``, ``no``, ``none``) turns the cache off. A relative folder is
    made absolute against the working folder now, so a later ``os.chdir`` does not move the
    cache.

    Raises:
        ConfigError: ``SPECDSL_CACHE_DIR`` (or ``cache_dir``) is a switch-on word such
            as ``1`` or ``yes`` where a folder was meant, ``cache_dir`` is neither a
            ``str`` nor an ``os.PathLike`` naming one (``cache_dir=1``), or it is an empty
            or blank name (``cache_dir=""``).
    """
    if cache_dir is None:
        path = knobs.cache_dir
    else:
        text = os.fspath(cache_dir) if isinstance(cache_dir, (str, os.PathLike)) else None
        if not isinstance(text, str):
            raise ConfigError(f"cache_dir must be a folder (a str or os.PathLike), \"off\" "
                              f"or None (got {cache_dir!r}, "
                              f"{with_article(type(cache_dir).__name__)})")
        if not text.strip():  # an unset variable, most likely: never the default in disguise
            raise ConfigError(f"cache_dir must name a folder ('.' for the working folder), "
                              f"be \"off\", or be None for {ENV_VAR} or the default folder "
                              f"(got {text!r}, an empty name)")
        path = parse_folder("cache_dir", text, f"None for {ENV_VAR} or the default folder") \
            if isinstance(cache_dir, str) \
            else Path(text).expanduser()
    # absolute(), not resolve(): a link stays a link, for prepare_folder's lstat to refuse
    return None if path is None else path.absolute()


def prepare_folder(path: Path, *, create: bool = True) -> None:
    """Make sure ``path`` is a private folder of this user, creating it (mode 0700) if asked.

    Checked with ``lstat``: a folder, not a link, owned by this user. One that others can
    write (group- or world-writable) is made private (``chmod 0700``) with a
    :class:`~specdsl.errors.CacheWarning`, as Jinja does with its own bytecode folder.

    Raises:
        CacheDirError: refused: a link, a file (or anything else not a folder), a path
            under a file, another user's, or others can write it and it cannot be made
            private.
        OSError: it does not exist and cannot be created (``create=False``: it does not
            exist); a read-only or full disk, no permission to create it.
    """
    try:
        if create:
            # a file (or a dangling link) at ``path`` raises FileExistsError here: lstat
            # below says which it is
            with contextlib.suppress(FileExistsError):
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except NotADirectoryError:
        raise CacheDirError(f"specdsl cache folder {str(path)!r} is under a file "
                            f"({str(_file_above(path))!r}): give a folder") from None
    problem = refusal(info, folder=True)
    if problem is None:
        return
    if problem.startswith("can be written by others"):
        try:
            os.chmod(path, 0o700)
        except OSError as exc:
            raise CacheDirError(f"specdsl cache folder {str(path)!r} {problem} and cannot be "
                                f"made private: {exc}") from None
        warn_once(path, "made private", f"specdsl: cache folder {str(path)!r} {problem}: "
                                        f"made private (mode 0700)", stacklevel=4)
        return
    hint = f"; set {ENV_VAR} to a folder of your own" if "another user" in problem else ""
    if stat.S_ISLNK(info.st_mode):  # a link could be swapped for another: name its target
        hint = (f" (to {os.readlink(path)!r}): links are refused, as their target can "
                f"change; give the folder it points to, {str(path.resolve())!r}")
    raise CacheDirError(f"specdsl cache folder {str(path)!r} {problem}{hint}")


def _file_above(path: Path) -> Path:
    """The nearest parent of ``path`` that exists and is not a folder (``path`` itself
    when none is found)."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return path


def warn_refused(path: Path, exc: CacheDirError) -> None:
    """Warn (once per folder) that a refused cache folder is not used."""
    warn_once(path, "refused", f"{exc}; carrying on without the cache", stacklevel=5)


def warn_unusable(path: Path, exc: OSError) -> None:
    """Warn (once per folder) that a cache folder that cannot be created is not used."""
    warn_once(path, "unusable", f"specdsl: cannot use the cache folder {str(path)!r} "
                                f"({exc}); carrying on without the cache", stacklevel=5)


class Writes:
    """Whether a cache still writes: on until a write fails (a read-only or a full disk),
    then off for the rest of the process, with one :class:`~specdsl.errors.CacheWarning`.

    Args:
        root: the cache folder (each successful write counts toward its size check).
        what: the cache and its folder, for the warning.
        max_bytes: the folder's size cap, or ``None``.
    """

    def __init__(self, root: Path, what: str, max_bytes: int | None) -> None:
        self.root, self.what, self.max_bytes = root, what, max_bytes
        self.on = True

    def write(self, size: int, action: Callable[[], None]) -> None:
        """Run ``action``, which writes one entry of ``size`` bytes, unless writes are off
        or the entry is over :data:`~specdsl.cachefiles.MAX_ENTRY_BYTES`."""
        if not self.on or size > MAX_ENTRY_BYTES:
            return
        try:
            action()
        except OSError as exc:
            self.fail(exc)
            return
        from . import eviction  # on writes only: a warm process never imports it

        eviction.wrote(self.root, self.max_bytes)

    def fail(self, exc: OSError) -> None:
        """Turn writes off, warning once."""
        self.on = False
        warn_once(self.root, "read-only", f"specdsl: cannot write to the {self.what} ({exc}); "
                                          f"reading it without writing", stacklevel=6)


