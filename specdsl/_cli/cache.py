"""``specdsl cache info|clear|prune``: the disk cache folder from the command line.

The folder is ``--dir``, else ``SPECDSL_CACHE_DIR``, else the per-user default; it is
checked as every specdsl cache folder is (:func:`specdsl._base.cachedir.prepare_folder`)
before anything is read or removed. The work is :mod:`specdsl._base.eviction`'s; this module
only parses and prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._base import eviction
from .._base.cachedir import prepare_folder
from ..config import Knobs, bare_cap_problem, knobs, parse_size
from ..errors import CacheDirError, ConfigError
from .folders import folder_argument

__all__ = ["add_arguments", "command_cache", "format_size"]


def format_size(size: int) -> str:
    """``size`` bytes for people: ``"812 B"``, ``"40.3 KiB"``, ``"1.0 GiB"``, ``"4.0 TiB"``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _cap(text: str) -> int:
    try:
        size = parse_size("--max-bytes", text)
    except ConfigError:
        size, off = None, ""
    else:  # parse_size's None is an off word: no cap in SPECDSL_CACHE_MAX_BYTES, so say so
        off = ("; 0, off and none mean no cap in SPECDSL_CACHE_MAX_BYTES: to remove every "
               "entry, use 'cache clear'") if size is None else ""
    problem = bare_cap_problem(text, size, off=False)  # 4, meant as 4G, would empty the cache
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{problem}; to remove every entry, use 'cache clear'")
    if size is None:
        raise argparse.ArgumentTypeError(f"must be a size in bytes such as 1073741824, 512M "
                                         f"or 4G, a whole number (got {text!r}){off}")
    return size


def _folder_path(text: str) -> Path:
    return Path(folder_argument(text))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``info``, ``clear`` and ``prune`` actions to the ``cache`` verb's parser.

    ``--dir``, ``--max-bytes`` and ``--strict`` are taken before the action as well as after
    it (options go anywhere); ``--max-bytes`` means something to ``prune`` only, and
    :func:`command_cache` refuses it with the others.
    """
    dir_help = "the cache folder (default: SPECDSL_CACHE_DIR or ~/.cache/specdsl)"
    cap_help = "prune only: the cap, e.g. 512M (default: SPECDSL_CACHE_MAX_BYTES, 1G)"
    parser.add_argument("--dir", type=_folder_path, default=None, metavar="DIR", help=dir_help)
    parser.add_argument("--max-bytes", type=_cap, default=None, metavar="SIZE", help=cap_help)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                    help="info, clear or prune")
    info = actions.add_parser("info", help="location, size, entries and toolchain",
                              description="Print the cache folder, its size and entries, "
                                          "the size cap and the toolchain in the keys.")
    clear = actions.add_parser("clear", help="remove every entry",
                               description="Remove every entry (writes in flight are kept).")
    prune = actions.add_parser(
        "prune", help="remove the entries read least recently, down to the cap",
        description="Remove the entries read least recently until the cache fits the cap.")
    for action in (info, clear, prune):
        # every error after the action is named says which one: "specdsl cache prune: error"
        action.set_defaults(verb_parser=action)
        # SUPPRESS: an option given before the action is not reset by the action's default
        action.add_argument("--strict", action="store_true", default=argparse.SUPPRESS,
                            help="an UnreadFieldWarning (a baked field no template reads) "
                                 "is an error (exit 2), for CI")
        action.add_argument("--dir", type=_folder_path, default=argparse.SUPPRESS, metavar="DIR",
                            help=dir_help)
        action.add_argument("--max-bytes", type=_cap, default=argparse.SUPPRESS,
                            metavar="SIZE",
                            help=cap_help if action is prune else argparse.SUPPRESS)


def _folder(args: argparse.Namespace) -> tuple[Path, bool]:
    """The cache folder, checked, and whether it exists yet."""
    root = args.dir if args.dir is not None else knobs.cache_dir
    if root is None:
        raise CacheDirError(f"the disk cache is off ({Knobs.cache_dir.name}="
                            f"{Knobs.cache_dir.raw()}); name a folder with --dir")
    root = root.absolute()  # the folder a relative name means here, as the caches use it
    try:
        prepare_folder(root, create=False)
    except FileNotFoundError:
        return root, False
    except CacheDirError:
        raise
    except OSError as exc:
        raise CacheDirError(f"cannot use the cache folder {str(root)!r}: {exc}") from None
    return root, True


def _toolchain() -> str:
    import platform

    import jinja2

    try:
        from .._runtime.compile import toolchain_version
        from .._runtime.cudacore import load as load_cuda_core

        load_cuda_core()
        from cuda.core import __version__ as cuda_core_version

        nvjitlink = f"nvJitLink {toolchain_version()}; cuda.core {cuda_core_version}"
    except Exception as exc:  # no cuda-python or no nvJitLink: say so, keep the rest
        nvjitlink = f"nvJitLink unavailable ({type(exc).__name__}: {exc})"
    return f"{nvjitlink}; Jinja {jinja2.__version__}; Python {platform.python_version()}"


#: How a count of more than one entry of a kind reads ("2 cubins"; PTX and facts stay).
_PLURALS = {"cubin": "cubins", "compiled template": "compiled templates", "entry": "entries",
            "file": "files"}


def _count(n: int, kind: str) -> str:
    return f"{n} {kind if n == 1 else _PLURALS.get(kind, kind)}"


def _info(root: Path, exists: bool) -> None:
    usage = eviction.usage(root) if exists else None
    cap = knobs.cache_max_bytes
    print(f"location   {root}{'' if exists else ' (not created yet)'}")
    if usage is not None:
        print(f"size       {format_size(usage.bytes)} in {_count(usage.entries, 'entry')} "
              f"(cap {format_size(cap) if cap is not None else 'none'})")
        order = [*eviction.KINDS.values(), "other"]
        kinds = ", ".join(_count(usage.kinds[kind], kind) for kind in order if kind in usage.kinds)
        print(f"entries    {kinds or 'none'}")
        if "other" in usage.kinds:
            print("           (other: never read: an older specdsl's entries or damaged "
                  "ones, which clear removes, or files not specdsl's, which it keeps)")
        print(f"temp       {_count(usage.temp_files, 'file')} ({format_size(usage.temp_bytes)})"
              + (f"; {_count(usage.foreign_temp_files, 'file')} in tmp/ not specdsl's, kept"
                 if usage.foreign_temp_files else ""))
    print(f"toolchain  {_toolchain()}")


def command_cache(args: argparse.Namespace) -> int:
    """``specdsl cache info|clear [--dir DIR]`` and ``specdsl cache prune [--max-bytes SIZE]
    [--dir DIR]``.

    Returns:
        0.

    Raises:
        UsageError: ``--max-bytes`` given to ``info`` or ``clear`` (from the verb's parser).
        CacheDirError: the cache is off, or the folder is refused or unusable, or ``clear``
            or ``prune`` could not remove entries it was to remove (after the summary line;
            the message names the folder, the count and the first OS error).
        ConfigError: ``SPECDSL_CACHE_DIR`` or ``SPECDSL_CACHE_MAX_BYTES`` is malformed.
    """
    if args.max_bytes is not None and args.action != "prune":  # raises main's UsageError
        args.verb_parser.error(f"--max-bytes is an option of 'cache prune' only "
                               f"('cache {args.action}' takes --dir DIR)")
    root, exists = _folder(args)
    if args.action == "info":
        _info(root, exists)
        return 0
    cap = 0
    if args.action == "prune":
        limit = args.max_bytes if args.max_bytes is not None else knobs.cache_max_bytes
        if limit is None:
            print(f"no cap ({Knobs.cache_max_bytes.name}={Knobs.cache_max_bytes.raw()}): "
                  f"nothing to prune; give one with --max-bytes", file=sys.stderr)
            return 0
        cap = limit
    if not exists:
        print(f"{root}: no cache folder yet, nothing to remove")
        return 0
    done = eviction.prune(root, cap)
    print(f"removed {_count(done.entries, 'entry')} ({format_size(done.bytes)}) from {root}; "
          f"{_count(done.left_entries, 'entry')} ({format_size(done.left_bytes)}) left"
          + (f", cap {format_size(cap)}" if args.action == "prune" else ""))
    if done.failed:  # a read-only disk or folder: not done, whatever the summary counts
        raise CacheDirError(f"could not remove {_count(done.failed, 'entry')} from the cache "
                            f"folder {str(root)!r}: {done.error}")
    return 0
