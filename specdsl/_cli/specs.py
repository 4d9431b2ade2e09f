"""Spec classes named on the command line: built-in names, ``pkg.mod:Class``, modules, files."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._review.requests import builtin_specs
from .._spec.decorator import is_spec
from ..errors import SpecError
from .user_modules import is_file_name, load_module

__all__ = ["resolve_spec", "spec_classes"]


def resolve_spec(name: str) -> type:
    """A spec class from a built-in name (``"rmsnorm"``), ``"package.module:ClassName"``
    or ``"path/to/file.py:ClassName"``.

    Raises:
        SpecError: no such built-in, module, file or class, a module that fails to import
            (see :func:`~specdsl._cli.user_modules.load_module`), or an object that is not a
            kernel spec.
    """
    builtin = builtin_specs()
    if ":" not in name:
        cls = builtin.get(name.lower())
        if cls is None:
            raise SpecError(f"unknown spec {name!r}: built-in specs are "
                            f"{', '.join(sorted(builtin))}, or give 'package.module:ClassName'")
        return cls
    module_name, _, qualname = name.rpartition(":")
    obj: Any = load_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise SpecError(f"module {module_name!r} has no {qualname!r}")
    if not (isinstance(obj, type) and is_spec(obj)):
        raise SpecError(f"{name!r} is not a @kernel_spec class")
    return obj


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
            module = load_module(name)
            classes = [v for v in vars(module).values() if isinstance(v, type) and is_spec(v)]
            if not classes:
                raise SpecError(f"module {name!r} defines no @kernel_spec classes")
        found.extend(c for c in classes if c not in found)
    return found
