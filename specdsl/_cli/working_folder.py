"""The working folder and ``sys.path``: user modules found there, nothing shadowed.

A file in the working folder must never stand in for the standard library or an installed
package: a planted ``difflib.py`` or ``cuda/__init__.py`` would run as the user. Putting the
folder last on ``sys.path`` is not enough: a regular package anywhere on the path wins over
a namespace package such as ``cuda`` (cuda-python's), wherever that one is. So:

- ``python -m specdsl`` starts with the working folder first on ``sys.path`` (Python puts
  it there for ``-m``); importing this module, which ``specdsl/__init__.py`` does before
  anything else, takes it off. The console script never has it.
- A user module named on the command line (``mymod:MySpec``) that is found nowhere else is
  imported from the working folder (:func:`working_folder_searched`), and only while it is
  imported is the folder searched, last, for its own imports.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
from collections.abc import Iterator

__all__ = ["run_as_main", "forget_working_folder", "in_working_folder",
           "working_folder_searched"]


def run_as_main(argv: list[str] | None = None) -> bool:
    """Whether this process was started as ``python [options] -m specdsl[.module]``.

    Reads ``sys.orig_argv`` (the interpreter's own command line) unless ``argv`` is given.
    """
    argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
    words = iter(argv[1:])
    for word in words:
        if word == "-m":
            return next(words, "").split(".")[0] == "specdsl"
        if word.startswith("-m"):
            return word[2:].split(".")[0] == "specdsl"
        if word in ("-W", "-X", "--check-hash-based-pycs"):
            next(words, None)  # the option's value
        elif not word.startswith("-") or word in ("-c", "-"):
            return False  # a script, -c or standard input runs, not a module
    return False


def forget_working_folder() -> None:
    """Take the entry ``python -m`` put first on ``sys.path`` (``""`` or the working
    folder) off it; under ``python -P`` (``sys.flags.safe_path``) there is none."""
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return
    if sys.path[0] in ("", os.getcwd()):
        del sys.path[0]


def in_working_folder(name: str) -> bool:
    """Whether the working folder holds a top-level module or package ``name``."""
    return importlib.machinery.PathFinder.find_spec(name, [os.getcwd()]) is not None


@contextlib.contextmanager
def working_folder_searched(folder: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Search ``folder`` (default: the working folder), after everything else on
    ``sys.path``, inside the block only."""
    here = os.fspath(folder) if folder is not None else os.getcwd()
    if here in sys.path or (folder is None and "" in sys.path):
        yield
        return
    sys.path.append(here)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(here)


# Importing this module is the fix: specdsl/__init__.py imports it before anything else.
if run_as_main():
    forget_working_folder()
