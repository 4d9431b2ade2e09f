"""Requests from text and back: ``rmsnorm hidden=4096 eps=1e-6`` <-> ``RMSNorm(...)``.

Used by the CLI and by proofs that print counterexamples a user can paste.
"""

from __future__ import annotations

import enum
import importlib
import typing
from typing import Any, Literal

import attrs

from .errors import SpecError
from .spec import is_spec, spec_info

__all__ = ["builtin_specs", "resolve_spec", "parse_request", "format_request", "spec_name"]


def builtin_specs() -> dict[str, type]:
    """``{name: class}`` of the built-in kernels, by lower-case class name (``"rmsnorm"``)."""
    from . import kernels

    return {cls.__name__.lower(): cls for cls in kernels.ALL}


def spec_name(cls: type) -> str:
    """The name that :func:`resolve_spec` takes back: ``"rmsnorm"`` or ``"pkg.mod:Class"``."""
    builtin = builtin_specs()
    if builtin.get(cls.__name__.lower()) is cls:
        return cls.__name__.lower()
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_spec(name: str) -> type:
    """A spec class from a built-in name (``"rmsnorm"``) or ``"package.module:ClassName"``.

    Raises:
        SpecError: no such built-in, module or class, or the object is not a kernel spec.
    """
    builtin = builtin_specs()
    if ":" not in name:
        cls = builtin.get(name.lower())
        if cls is None:
            raise SpecError(f"unknown spec {name!r}: built-in specs are "
                            f"{', '.join(sorted(builtin))}, or give 'package.module:ClassName'")
        return cls
    module_name, _, qualname = name.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"cannot import module {module_name!r} for spec {name!r}: {exc}") from None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise SpecError(f"module {module_name!r} has no {qualname!r}")
    if not (isinstance(obj, type) and is_spec(obj)):
        raise SpecError(f"{name!r} is not a @kernel_spec class")
    return obj


def _parse_value(owner: str, name: str, tp: Any, text: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        if text.lower() == "none":
            return None
        return _parse_value(owner, name, next(a for a in args if a is not type(None)), text)
    if origin is tuple:
        items = [t for t in text.strip("()[] ").split(",") if t.strip()]
        item_types = [args[0]] * len(items) if args[1:] == (Ellipsis,) else list(args)
        return tuple(_parse_value(owner, name, t, s.strip()) for t, s in zip(item_types, items))
    if origin is Literal:
        for option in args:
            if str(option) == text:
                return option
        return text
    if tp is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise SpecError(f"{owner}.{name} must be a bool (true/false) (got {text!r})")
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
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return text  # the field's coercer accepts member names and values
    return text


def parse_request(cls: type, assignments: list[str]) -> Any:
    """Build a request of ``cls`` from ``["field=value", ...]``.

    Raises:
        SpecError: a malformed assignment, an unknown or missing field, or a bad value
            (naming the field, the value and what was expected).
    """
    info = spec_info(cls)
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in attrs.fields(cls)}
    values: dict[str, Any] = {}
    for item in assignments:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SpecError(f"expected field=value (got {item!r})")
        if name not in fields:
            raise SpecError(f"{cls.__qualname__} has no field {name!r} "
                            f"(fields: {', '.join(info.baked + info.launch)})")
        if name in values:
            raise SpecError(f"{cls.__qualname__}.{name} is given twice ({item!r}); give each "
                            "field once")
        values[name] = _parse_value(cls.__qualname__, name, hints[name], text.strip())
    return cls(**values)  # a missing required field: SpecArgumentError, naming the class


def _format_value(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, tuple):
        return ",".join(_format_value(v) for v in value)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def format_request(spec: Any) -> str:
    """The request as CLI words: ``rmsnorm hidden=4096 eps=1e-06 block=256``."""
    cls = type(spec)
    words = [spec_name(cls)]
    for f in attrs.fields(cls):
        words.append(f"{f.name}={_format_value(getattr(spec, f.name))}")
    return " ".join(words)
