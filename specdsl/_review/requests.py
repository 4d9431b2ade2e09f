"""Requests from text and back: ``rmsnorm hidden=4096 eps=1e-6`` <-> ``RMSNorm(...)``.

Used by the CLI, by render files and by proofs that print counterexamples a user can
paste. A spec is named by a built-in name, ``package.module:ClassName`` or
``path/to/file.py:ClassName`` (the command line imports user modules:
:mod:`specdsl._cli.user_modules`, which records here the files it imported). Text and
request round-trip: ``parse_request(cls, format_request(r).split()[1:]) == r``.
"""

from __future__ import annotations

import enum
import re
import shlex
import types
import typing
from typing import Any, Literal

import attrs

from .._spec.decorator import did_you_mean, spec_info
from .._spec.fields import role_of
from ..errors import SpecArgumentError, SpecError

__all__ = ["builtin_specs", "spec_name", "target_hint", "MODULE_FILES", "parse_assignments",
           "build_request", "parse_request", "format_value", "format_request"]

#: ``{module name: the path it was named by}`` for user modules imported from a file (the
#: command line's module loader fills it), so that their classes are named by that file.
MODULE_FILES: dict[str, str] = {}


#: A word shaped like a compile target (``sm_90``, ``sm_90a``).
_TARGET_SHAPE = re.compile(r"sm_\d+[a-z]?")


def target_hint(word: str) -> str:
    """``"; a target is given as --target sm_80a"`` for a word shaped like a compile target
    where a spec or a field goes (``render sm_90 rmsnorm``, ``render rmsnorm sm_90``);
    ``""`` otherwise. The shape is enough: a malformed target (``sm_80a``) is what --target
    itself explains."""
    if _TARGET_SHAPE.fullmatch(word.lower()):
        return f"; a target is given as --target {word.lower()}"
    return ""


def builtin_specs() -> dict[str, type]:
    """``{name: class}`` of the built-in kernels, by lower-case class name (``"rmsnorm"``)."""
    from .. import kernels

    return {cls.__name__.lower(): cls for cls in kernels.ALL}


def spec_name(cls: type) -> str:
    """The name the command line takes back: ``"rmsnorm"``, ``"pkg.mod:Class"``, or for a
    class from a file imported by path, ``"path/file.py:Class"``."""
    builtin = builtin_specs()
    if builtin.get(cls.__name__.lower()) is cls:
        return cls.__name__.lower()
    return f"{MODULE_FILES.get(cls.__module__) or cls.__module__}:{cls.__qualname__}"


def _tuple_items(owner: str, name: str, text: str) -> list[str]:
    """The items of a tuple's text: comma-separated, blanks around each ignored, no
    brackets, no empty item; ``""`` is the empty tuple."""
    if not text.strip():
        return []
    items = [item.strip() for item in text.split(",")]
    if text.strip()[:1] in "([" or text.strip()[-1:] in ")]" or "" in items:
        raise SpecError(f"{owner}.{name} must be comma-separated values without brackets "
                        f"or empty items, such as 1,2 (got {text!r})")
    return items


def _parse_value(owner: str, name: str, tp: Any, text: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if text.lower() == "none":
            return None
        return _parse_value(owner, name, next(a for a in args if a is not type(None)), text)
    if origin is tuple:
        items = _tuple_items(owner, name, text)
        item_types = [args[0]] * len(items) if args[1:] == (Ellipsis,) else list(args)
        if len(item_types) != len(items):  # never drop or invent an item
            raise SpecError(f"{owner}.{name} must be {len(item_types)} comma-separated "
                            f"values (got {text!r})")
        return tuple(_parse_value(owner, f"{name}[{i}]", t, s)  # an error names the item
                     for i, (t, s) in enumerate(zip(item_types, items, strict=True)))
    if origin is Literal:
        for option in args:
            if text in (format_value(option), str(option)):
                return option
        return text
    if tp is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise SpecError(f"{owner}.{name} must be a bool: true or false (or 1/0, yes/no, "
                        f"on/off, in any case; got {text!r})")
    if tp is int:
        try:
            return int(text, 0)
        except ValueError:
            raise SpecError(f"{owner}.{name} must be an int (got {text!r})") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise SpecError(f"{owner}.{name} must be a float (got {text!r})") from None
    return text  # str fields; enum fields' coercers take member names and values


def parse_assignments(cls: type, assignments: list[str]) -> dict[str, Any]:
    """``{field: value}`` from ``["field=value", ...]``, each value parsed by its field's type.

    The values are not yet checked together: building the request does that.

    Raises:
        SpecError: a malformed assignment, an unknown field (a
            :class:`~specdsl.errors.SpecArgumentError` with the closest name), a field given
            twice, or a value its type cannot parse (naming the field, the value and what
            was expected). A tuple's text is comma-separated values (``dims=1,2``), without
            brackets or empty items.
    """
    info = spec_info(cls)
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in attrs.fields(cls)}
    values: dict[str, Any] = {}
    for item in assignments:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SpecError(f"expected field=value (got {item!r}){target_hint(item)}")
        if name not in fields:
            names = info.baked + info.launch
            raise SpecArgumentError(f"{cls.__qualname__} has no field {name!r} (fields: "
                                    f"{', '.join(names)}){did_you_mean([name], names)}")
        if name in values:
            raise SpecError(f"{cls.__qualname__}.{name} is given twice ({item!r}); give each "
                            "field once")
        values[name] = _parse_value(cls.__qualname__, name, hints[name], text.strip())
    return values


def build_request(cls: type, values: dict[str, Any]) -> Any:
    """``cls(**values)``.

    Raises:
        SpecError: a value a field refuses, or a missing required field (a
            :class:`~specdsl.errors.SpecArgumentError`, which names the class and field
            and how to give it as text: ``hidden=VALUE``).
    """
    missing = [f for f in attrs.fields(cls)
               if f.init and f.default is attrs.NOTHING and f.name not in values]
    if missing:
        raise SpecArgumentError(
            f"{cls.__qualname__} is missing required field(s) "
            f"{', '.join(f'{f.name!r} ({role_of(f)})' for f in missing)} (no default): "
            f"give {' '.join(f'{f.name}=VALUE' for f in missing)}")
    return cls(**values)


def parse_request(cls: type, assignments: list[str]) -> Any:
    """Build a request of ``cls`` from ``["field=value", ...]``.

    Raises:
        SpecError: a malformed assignment, an unknown or missing field, or a bad value
            (naming the field, the value and what was expected).
    """
    return build_request(cls, parse_assignments(cls, assignments))


def format_value(value: Any) -> str:
    """A field value as the CLI word that parses back to it: ``bf16``, ``1e-06``, ``none``.

    Enum members by value when it is a str (``DType.BF16`` -> ``bf16``), else by name;
    bools as ``true``/``false``; tuples comma-separated; floats by ``repr`` (exact).
    """
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, str) else value.name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(format_value(v) for v in value)
    if value is None:
        return "none"
    return repr(value) if isinstance(value, float) else str(value)


def format_request(spec: Any, *, baked_only: bool = False) -> str:
    """The request as command-line words that name it again: ``rmsnorm hidden=4096 ...``.

    Every field in declaration order, or with ``baked_only`` the baked fields alone
    (launch fields never change the PTX: ``vectoradd dtype=f16``). Each word is quoted
    for a POSIX shell where it needs it, so the text can be pasted after ``specdsl diff``.
    """
    cls = type(spec)
    names = spec_info(spec).baked if baked_only else tuple(f.name for f in attrs.fields(cls))
    words = [spec_name(cls)] + [f"{name}={format_value(getattr(spec, name))}" for name in names]
    return " ".join(shlex.quote(word) for word in words)
