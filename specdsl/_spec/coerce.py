"""Field values checked and normalized: the converter each spec field gets from its type
annotation (int, float, bool, str, an Enum, ``Literal[...]``, tuples, ``T | None``)."""

from __future__ import annotations

import enum
import math
import numbers
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

from .._base.wording import with_article
from .._templating.immediates import is_ptx_text
from ..errors import SpecError
from .fields import canonical, is_bool_like

__all__ = ["Coercer", "make_coercer"]


def _describe(tp: Any) -> str:
    """A field type as messages say it: ``int``, ``tuple of int``, ``tuple (int, float)``,
    ``DType ('f32', ...)`` (an enum with its values)."""
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return f"{tp.__name__} ({', '.join(repr(m.value) for m in tp)})"
        return tp.__name__
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and args:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"tuple of {_describe(args[0])}"
        return f"tuple ({', '.join(map(_describe, args))})"
    return str(tp).replace("typing.", "")


def _items_of(owner: str, name: str, tp: Any, allow_nonfinite: bool,
              ptx_text: bool) -> Callable[[Any], tuple[Any, ...]]:
    """The coercer of a ``tuple[tp, ...]`` field's items (a tuple or list of them).

    One item coercer serves every index; on a refusal the refused item is coerced again
    by a coercer labelled with its index, so the error names it (``K.dims[1]``) while
    the good path builds nothing per item.
    """
    item = make_coercer(owner, f"{name}[]", tp, allow_nonfinite, ptx_text)

    def items(v: Any) -> tuple[Any, ...]:
        try:
            return tuple(map(item, v))
        except SpecError:
            for index, x in enumerate(v):
                make_coercer(owner, f"{name}[{index}]", tp, allow_nonfinite, ptx_text)(x)
            raise  # no item refused a second time: the first refusal stands
    return items


Coercer = Callable[[Any], Any]


def make_coercer(owner: str, name: str, tp: Any, allow_nonfinite: bool,
                 ptx_text: bool = True, choices: tuple[Any, ...] | None = None) -> Coercer:
    """Build the converter that checks and normalizes one field's value for type ``tp``.

    Supported annotations: ``int``, ``float``, ``bool``, ``str``, enum classes (members,
    their value/name strings, and whatever the enum's own ``_missing_`` lookup accepts:
    ``DType``'s aliases and torch/NumPy dtypes), ``Literal[...]``, ``tuple[T, ...]``,
    ``tuple[T1, T2]`` and ``T | None``. Lists become tuples; other containers are refused.
    With ``ptx_text`` (a baked field's values are written into the PTX) a ``str`` must be
    one line of printable ASCII (see :func:`is_ptx_text`); a ``str`` subclass is taken as
    its plain text. ``choices``, the members a field's validator allows, narrows the list
    an unknown enum value's message gives (``DType, one of 'f32', 'f16', 'bf16'``).

    Raises:
        SpecDefinitionError: (from the caller) for an unsupported annotation, via TypeError.
    """
    label = f"{owner}.{name}"

    def fail(value: Any, expected: str) -> SpecError:
        return SpecError(f"{label} must be {expected} (got {value!r}, "
                         f"{with_article(type(value).__name__)})")

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) != 1 or len(args) != 2:
            raise TypeError(f"{label}: only 'T | None' unions are supported (got {tp})")
        inner = make_coercer(owner, name, members[0], allow_nonfinite, ptx_text, choices)
        return lambda v: None if v is None else inner(v)

    if origin is Literal:
        allowed = args

        def literal(v: Any) -> Any:
            for option in allowed:
                if canonical(option) == _try_canonical(v):
                    return option
            raise fail(v, "one of " + ", ".join(repr(a) for a in allowed))
        return literal

    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _items_of(owner, name, args[0], allow_nonfinite, ptx_text)
            arity = None
        else:
            items = [make_coercer(owner, f"{name}[{i}]", a, allow_nonfinite, ptx_text)
                     for i, a in enumerate(args)]
            arity = len(items)

        def tuple_(v: Any) -> tuple[Any, ...]:
            if not isinstance(v, (tuple, list)):
                raise fail(v, with_article(_describe(tp)))
            if arity is None:
                return item(v)
            if len(v) != arity:
                raise fail(v, f"a tuple of {arity} items ({', '.join(map(_describe, args))})")
            return tuple(c(x) for c, x in zip(items, v, strict=True))
        return tuple_

    if tp is bool:
        def bool_(v: Any) -> bool:
            if is_bool_like(v):
                return bool(v)
            raise fail(v, "a bool (True or False)")
        return bool_

    if tp is int:
        def int_(v: Any) -> int:
            if isinstance(v, numbers.Integral) and not is_bool_like(v):
                return int(v)
            raise fail(v, "an int")
        return int_

    if tp is float:
        def float_(v: Any) -> float:
            if is_bool_like(v) or not isinstance(v, numbers.Real):
                raise fail(v, "a float")
            x = float(v)
            if not allow_nonfinite and not math.isfinite(x):
                raise fail(v, "a finite float (NaN and infinity cannot be baked)")
            return x
        return float_

    if tp is str:
        def str_(v: Any) -> str:
            if not isinstance(v, str):
                raise fail(v, "a str")
            text = str.__str__(v)  # the plain text of a str subclass, not its __str__
            if ptx_text and not is_ptx_text(text):
                raise fail(v, "one line of printable ASCII text (a baked str is written "
                              "into the PTX)")
            return text
        return str_

    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        own_lookup = any("_missing_" in c.__dict__ for c in tp.__mro__
                         if c not in (enum.Enum, enum.IntEnum, enum.Flag, enum.IntFlag))
        narrowed = [c for c in choices or () if isinstance(c, tp)]
        expected = (f"{with_article(tp.__name__)}, one of "
                    f"{', '.join(repr(m.value) for m in narrowed)}" if narrowed
                    else with_article(_describe(tp)))

        def enum_(v: Any) -> enum.Enum:
            if isinstance(v, tp):
                return v
            if isinstance(v, str):
                for member in tp:
                    if v in (member.value, member.name, member.name.lower()):
                        return member
            reason = ""
            if own_lookup:  # the enum's own lookup (DType: aliases, torch/NumPy dtypes)
                try:
                    return tp(v)
                except SpecError as exc:
                    reason = f": {exc}"
                except (ValueError, TypeError):
                    pass
            raise SpecError(f"{fail(v, expected)}{reason}")
        return enum_

    raise TypeError(f"{label}: unsupported field type {tp!r} (use int, float, bool, str, "
                    "an Enum, Literal[...], tuple[...] or T | None)")


def _try_canonical(v: Any) -> tuple[Any, ...] | None:
    try:
        return canonical(v)
    except TypeError:
        return None
