"""Spec classes named on the command line: built-in names, ``pkg.mod:Class``, modules, files."""

from __future__ import annotations

import ast
import importlib.machinery
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._review.requests import builtin_specs, target_hint
from .._spec.decorator import did_you_mean, is_spec
from ..errors import SpecError
from .user_modules import is_file_name, load_module
from .working_folder import in_working_folder

__all__ = ["resolve_spec", "spec_classes", "declared_specs"]



def resolve_spec(name: str) -> type:
    """A spec class from a built-in name (``"rmsnorm"``), ``"package.module:ClassName"``
    or ``"path/to/file.py:ClassName"``.

    A file or a working-folder module named without ``:ClassName``, or a class named
    with a dot (``mykernels.Scale``), is refused with the names to use (``did you mean
    'saxpy.py:Saxpy'?``, ``did you mean 'mykernels:Scale'?``); a class the module lacks
    with the closest spec class it holds (``did you mean 'ResidualAdd'?``).

    Raises:
        SpecError: no such built-in, module, file or class, a module that fails to import
            (see :func:`~specdsl._cli.user_modules.load_module`), or an object that is not a
            kernel spec.
    """
    builtin = builtin_specs()
    if ":" not in name:
        cls = builtin.get(name.lower())
        if cls is None and is_file_name(name):
            raise SpecError(f"unknown spec {name!r}: name a class in a file after a colon, "
                            f"as 'path/file.py:ClassName'{_class_hint(name)}")
        if cls is None:
            hint = (_class_hint(name) or target_hint(name)
                    or did_you_mean([name.lower()], sorted(builtin)))
            raise SpecError(f"unknown spec {name!r}: built-in specs are "
                            f"{', '.join(sorted(builtin))}, or give 'package.module:ClassName'"
                            f"{hint}")
        return cls
    module_name, _, qualname = name.rpartition(":")
    if not module_name or "" in qualname.split("."):
        raise SpecError(f"expected MODULE:ClassName or path/file.py:ClassName (got {name!r})")
    obj: Any = load_module(module_name)
    parts = qualname.split(".")
    for i, part in enumerate(parts):
        owner, obj = obj, getattr(obj, part, None)
        if obj is None:
            within = ".".join(parts[:i] + [""])  # "" or "Outer."
            classes = [within + n for n, v in getattr(owner, "__dict__", {}).items()
                       if isinstance(v, type) and (is_spec(v) or i < len(parts) - 1)]
            hint = did_you_mean(['.'.join(parts[:i + 1])], classes) or (
                f" (its spec classes: {', '.join(sorted(classes))})" if classes else "")
            raise SpecError(f"module {module_name!r} has no {qualname!r}{hint}")
    if not (isinstance(obj, type) and is_spec(obj)):
        raise SpecError(f"{name!r} is not a @kernel_spec class")
    return obj


def _builtin_hint(name: str) -> str:
    """``"; 'rmsnorm' is a built-in spec: its module is specdsl.kernels ..."`` for a built-in
    spec's name where a module goes (``check-keys rmsnorm``), or ``""``."""
    cls = builtin_specs().get(name.lower())
    if cls is None:
        return ""
    return (f"; {name!r} is a built-in spec: its module is specdsl.kernels "
            f"(specdsl.kernels:{cls.__qualname__})")


def names_a_spec(word: str) -> bool:
    """Whether a word among field words names a spec (a built-in name, ``MODULE:Class``):
    a second request, not a malformed field word."""
    return "=" not in word and (word.lower() in builtin_specs() or ":" in word)


def _class_hint(name: str) -> str:
    """``"; did you mean 'saxpy.py:Saxpy'?"`` for a file or working-folder module named
    without its class, or a class named after a dot (:func:`_colon_hint`), or ``""``. A
    file named by its path is imported (the user named it); a module is only read
    (:func:`declared_specs`), never run, unless it was imported already."""
    if is_file_name(name):
        if Path(name).is_dir():
            return "; that is a folder, not a Python file"
        if not Path(name).is_file():
            return "; there is no such file"
        module = load_module(name)
        names = [cls.__qualname__ for cls in _defined(module)
                 if cls.__module__ == module.__name__]
    elif not all(part.isidentifier() for part in name.split(".")):
        return ""
    elif hint := _colon_hint(name):
        return hint
    elif in_working_folder(name.partition(".")[0]):
        names = declared_specs(Path.cwd().joinpath(*name.split(".")))
    else:
        return ""
    if not names:
        return f"; {name!r} defines no @kernel_spec classes"
    return f"; did you mean {' or '.join(repr(f'{name}:{n}') for n in names)}?"


def _colon_hint(name: str) -> str:
    """``"; did you mean 'mykernels:Scale'?"`` where the part of ``name`` after its last
    dot names a spec class of the module before it, or ``""``. The module is looked at
    where :func:`~specdsl._cli.user_modules.load_module` would find it, without running
    it: imported already (``specdsl.kernels``, whose classes are re-exported), or read."""
    module, _, last = name.rpartition(".")
    if not module:
        return ""
    loaded = sys.modules.get(module)
    if loaded is not None:
        found = is_spec(getattr(loaded, last, None))
    else:
        source = _source_file(module)
        found = source is not None and last in _declared_in(source)
    return f"; did you mean {f'{module}:{last}'!r}?" if found else ""


def _source_file(module: str) -> Path | None:
    """The source file of ``module`` (``mod.py`` or ``pkg/__init__.py``) on ``sys.path``,
    else in the working folder; ``None`` where there is none. Nothing is imported."""
    for roots in (sys.path, [os.getcwd()]):
        locations: list[str] = list(roots)
        found = None
        for part in module.split("."):
            found = importlib.machinery.PathFinder.find_spec(part, locations)
            if found is None:
                break
            locations = list(found.submodule_search_locations or [])
        if found is not None and found.origin and found.origin.endswith(".py"):
            return Path(found.origin)
    return None


def declared_specs(module: Path) -> list[str]:
    """The classes a module's source decorates with ``kernel_spec`` (``@kernel_spec(...)``,
    ``@specdsl.kernel_spec(...)``), read from ``module.py`` or ``module/__init__.py``
    without running it; ``[]`` for a file that cannot be read or parsed."""
    for path in (module.with_name(module.name + ".py"), module / "__init__.py"):
        if path.is_file():
            return _declared_in(path)
    return []


def _declared_in(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)
            and any(_names_kernel_spec(d) for d in node.decorator_list)]


def _names_kernel_spec(node: ast.expr) -> bool:
    if isinstance(node, ast.Call):
        node = node.func
    return (isinstance(node, ast.Name) and node.id == "kernel_spec") or (
        isinstance(node, ast.Attribute) and node.attr == "kernel_spec")


def _defined(module: Any) -> list[type]:
    return [v for v in vars(module).values() if isinstance(v, type) and is_spec(v)]


def spec_classes(names: Iterable[str]) -> list[type]:
    """The spec classes named: every one a module defines or imports, or ``pkg.mod:Class``.

    A name is a module (``pkg.mod``), a file (``./kernels.py``), or either followed by
    ``:ClassName``; see :func:`~specdsl._cli.user_modules.load_module`.

    Raises:
        SpecError: a module cannot be imported (or fails while it runs), a class does not
            exist, or a module holds no kernel spec classes.
    """
    found: list[type] = []
    for name in names:
        if ":" in name and not (is_file_name(name) and name.endswith(".py")):
            classes = [resolve_spec(name)]
        else:
            try:
                module = load_module(name)
            except SpecError as exc:  # mykernels.Scale: did you mean 'mykernels:Scale'?
                hint = "" if is_file_name(name) else (_colon_hint(name) or _builtin_hint(name))
                if not hint:
                    raise
                raise SpecError(f"{exc}{hint}") from None
            classes = _defined(module)
            if not classes:
                raise SpecError(f"module {name!r} defines no @kernel_spec classes")
        found.extend(c for c in classes if c not in found)
    return found
