"""Importing the user modules a command names: by module name or by file path.

Whatever a user module does while it is imported (a syntax error, a failing import, an
error or warning-turned-error at class definition, ``sys.exit()``) comes back as one
:class:`~specdsl.errors.SpecError` line naming the module, the error and where it was
raised. Nothing in the working folder shadows another module (:mod:`specdsl._cli.working_folder`),
and neither does a file named by its path, nor the package it lies in.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
import types
from pathlib import Path

from .._review.requests import MODULE_FILES
from ..errors import SpecError
from .working_folder import in_working_folder, working_folder_searched

__all__ = ["load_module", "is_file_name", "file_module_name", "describe_exception",
           "in_specdsl"]

def is_file_name(name: str) -> bool:
    """Whether a MODULE word names a file (``./kernels.py``) rather than a module."""
    return name.endswith(".py") or "/" in name or os.sep in name


def load_module(name: str) -> types.ModuleType:
    """Import a module by name (``pkg.mod``) or from a file (``./kernels.py``).

    A name is looked up on ``sys.path``; one found nowhere there is imported from the
    working folder (see :mod:`specdsl._cli.working_folder`: nothing there ever shadows the
    standard library or an installed package). A file is imported under the name the
    application gives it, so its spec classes get the same qualified names (and derived
    keys): a file in a package (its folder holds ``__init__.py``) under its package-qualified
    name (``a/b/c.py`` is ``a.b.c``, its packages' ``__init__`` run first; see
    :func:`file_module_name`), any other file under its stem (``kernels``), as its neighbours
    would import it. While a module from the working folder or a file runs, its folder (for
    a file in a package, the folder above the top package) is searched, last, for its own
    imports.

    Raises:
        SpecError: no such module or file; a folder named as a file; a name that is no
            module name (``""``, ``".mod"``, ``"pkg..mod"``); a file whose stem names
            another module already imported (a ``json.py`` never replaces the standard
            library's ``json``); a file in a package whose top package names another
            module, or whose package-qualified name is imported from another file; or
            any exception the module, or a package ``__init__`` above it, raises while it
            runs (a syntax error, a failing import, an error at class definition): one
            line naming the module (and the package that failed), the error and where it
            was raised.
    """
    if is_file_name(name):
        return _load_file(name)
    if "" in name.split("."):  # importlib: "Empty module name", or a relative import
        raise SpecError(f"cannot import module {name!r}: not a module name (expected "
                        "package.module, or a file such as ./kernels.py)")
    top = name.partition(".")[0]
    try:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != top or not top.isidentifier() or not in_working_folder(top):
                raise
        with working_folder_searched():
            return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise SpecError(f"cannot import module {name!r}: no module named {exc.name!r} "
                            "(is it installed, or in the working folder?)") from None
        raise SpecError(f"cannot import module {name!r}: {describe_exception(exc)}") from None
    except (Exception, SystemExit) as exc:  # the module's own code failed: one line
        raise SpecError(f"cannot import module {name!r}: {describe_exception(exc)}") from None


def _load_file(name: str) -> types.ModuleType:
    path = Path(name)
    if path.is_dir():
        raise SpecError(f"cannot import {name!r}: that is a folder, not a Python file (name "
                        "a file such as path/file.py, or a package by its module name)")
    if not path.is_file():
        with_py = f"{name}.py"
        hint = f"; did you mean {with_py!r}?" if Path(with_py).is_file() else ""
        raise SpecError(f"cannot import {name!r}: no such file{hint}")
    resolved = path.resolve()  # what the file is; named by where it is named (a symlink's)
    given = Path(os.path.abspath(path))
    stem = given.stem
    if not stem.isidentifier():
        raise SpecError(f"cannot import {name!r}: {stem!r} is not a valid module name")
    module_name, root = file_module_name(given)
    if root != given.parent:
        return _load_in_package(name, resolved, module_name, root)
    other = _other_module(stem, resolved)
    if other is not None:
        raise SpecError(f"cannot import {name!r} as module {stem!r}: that is the name of "
                        f"another module ({other}); rename the file")
    if stem in sys.modules:
        return sys.modules[stem]
    MODULE_FILES[stem] = name
    module_spec = importlib.util.spec_from_file_location(stem, resolved)
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"cannot import {name!r}: not a Python source file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[stem] = module
    try:
        with working_folder_searched(resolved.parent):
            module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(stem, None)
        MODULE_FILES.pop(stem, None)
        raise SpecError(f"cannot import {name!r}: {describe_exception(exc)}") from None
    return module


def file_module_name(path: Path) -> tuple[str, Path]:
    """``(module name, folder it is imported from)`` for the source file ``path``.

    Walks up through the folders that hold ``__init__.py`` (and are named as modules):
    ``root/a/b/c.py``, with ``a/__init__.py`` and ``a/b/__init__.py``, is ``("a.b.c",
    root)`` (``root/a/b/__init__.py`` is ``("a.b", root)``); a file outside a package is
    ``(stem, its folder)``.
    """
    parts = [path.stem]
    folder = path.parent
    while folder.name.isidentifier() and (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) > 1 and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts), folder


def _load_in_package(name: str, path: Path, module_name: str, root: Path) -> types.ModuleType:
    """Import the file ``path`` as ``module_name``, its top package found in ``root``,
    as the application that runs from ``root`` imports it: the packages first."""
    label = f"cannot import {name!r} as module {module_name!r}"
    top = module_name.partition(".")[0]
    other = _other_module(top, root / top / "__init__.py")
    if other is not None:
        raise SpecError(f"{label}: its package {top!r} is another module ({other}); import "
                        f"it by its module name, or rename the package")
    loaded = sys.modules.get(module_name)
    if loaded is None:
        MODULE_FILES[module_name] = name
        try:
            with working_folder_searched(root):
                loaded = importlib.import_module(module_name)
        except (Exception, SystemExit) as exc:
            MODULE_FILES.pop(module_name, None)
            parts = module_name.split(".")
            failed = next((p for i in range(1, len(parts) + 1)
                           if (p := ".".join(parts[:i])) not in sys.modules), module_name)
            package = f"its package {failed!r} failed: " if failed != module_name else ""
            raise SpecError(f"{label}: {package}{describe_exception(exc)}") from None
    where = getattr(loaded, "__file__", None)
    if not where or Path(where).resolve() != path:
        if MODULE_FILES.get(module_name) == name:
            MODULE_FILES.pop(module_name)
        raise SpecError(f"{label}: that name is imported from another file "
                        f"({where or 'built in'})")
    return loaded


def _other_module(stem: str, path: Path) -> str | None:
    """Where a module named ``stem`` other than the file ``path`` is imported or found."""
    loaded = sys.modules.get(stem)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where and Path(where).resolve() == path:
            return None
        return where or ("a namespace package" if hasattr(loaded, "__path__") else "built in")
    try:
        found = importlib.util.find_spec(stem)
    except (ImportError, ValueError):
        return None
    if found is None or (found.origin and Path(found.origin).resolve() == path):
        return None
    return found.origin or "a namespace package"


def describe_exception(exc: BaseException) -> str:
    """``"Type: message (at file:line)"``: one line for an exception a user's code raised.

    The place is the innermost frame of the traceback outside specdsl (the user's
    module, or a library it called), else the innermost frame; a ``SyntaxError``'s
    message holds its own file and line.
    """
    message = str(exc).strip()
    text = f"{type(exc).__name__}: {message.splitlines()[0]}" if message else type(exc).__name__
    if isinstance(exc, SyntaxError):
        return text
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<")]  # importlib's frozen frames say nothing
    outside = [f for f in frames if not in_specdsl(f.filename)]
    where = (outside or frames)[-1:]
    if where:
        text += f" (at {where[0].filename}:{where[0].lineno})"
    return text


_PACKAGE = Path(__file__).resolve().parent.parent  # the specdsl package


def in_specdsl(filename: str) -> bool:
    """Whether a source file belongs to the specdsl package itself."""
    try:
        return Path(filename).resolve().is_relative_to(_PACKAGE)
    except (OSError, ValueError):
        return False
