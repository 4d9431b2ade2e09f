"""The values a field type can take, for the tools that build requests by themselves.

One pool serves the spec's variants (:func:`field_members`: the finite types, every
member), the sampled key proof (:func:`candidates`: plausible values around the default)
and the test strategies; :func:`unique` is the one order-keeping de-duplication they share.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Literal, TypeVar

import attrs

from .fields import canonical

__all__ = ["field_members", "candidates", "unique", "value_identity"]

T = TypeVar("T")


def value_identity(value: Any) -> Hashable:
    """A field value's canonical form (:func:`specdsl._spec.fields.canonical`), or for a value
    that has none, its type and ``repr``: equal identities are the same value to a key."""
    try:
        return canonical(value)
    except TypeError:
        return ("repr", type(value).__qualname__, repr(value))


def unique(items: Iterable[T], key: Callable[[T], Hashable] = value_identity) -> list[T]:
    """``items`` without repeats, in first-seen order; ``key(item)`` says which are equal.

    The default compares field values by their canonical form (``0.0`` and ``-0.0``
    differ, ``1`` and ``True`` differ). Requests compare that way already, so pass
    ``key=lambda r: r`` for them, or ``key=derived_key`` to keep one request per module.
    """
    seen: set[Hashable] = set()
    kept = []
    for item in items:
        identity = key(item)
        if identity not in seen:
            seen.add(identity)
            kept.append(item)
    return kept


def _optional(tp: Any) -> Any | None:
    """``T`` for an annotation ``T | None`` (or ``Optional[T]``), else ``None``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and len(args) == 2:
            return inner[0]
    return None


def field_members(tp: Any) -> tuple[Any, ...] | None:
    """Every value of a field type that has finitely many, or ``None``.

    ``bool`` -> ``(False, True)``; an ``Enum`` -> its members; ``Literal[a, b]`` ->
    ``(a, b)``; ``T | None`` -> ``T``'s members and ``None``.
    """
    if tp is bool:
        return (False, True)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tuple(tp)
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    inner = _optional(tp)
    if inner is not None:
        members = field_members(inner)
        return None if members is None else members + (None,)
    return None


def candidates(tp: Any, default: Any = attrs.NOTHING) -> list[Any]:
    """Plausible values of a field of type ``tp``: the default first, then values around it.

    Used to draw requests; validators decide which of them are valid. Types with
    ``T | None`` adds ``None`` to ``T``'s candidates; types with finitely many values
    give every one (:func:`field_members`); ``int`` fields get powers of two, neighbours and
    multiples of the default; ``float`` fields its tenfold and tenth, its negation,
    ``0.0``, ``-0.0`` and common epsilons; ``str`` two letters; tuples vary one item at
    a time. Other types offer their default alone.
    """
    has_default = default is not attrs.NOTHING
    head = [default] if has_default else []
    inner = _optional(tp)
    if inner is not None:
        inner_default = default if has_default and default is not None else attrs.NOTHING
        return unique(head + [None] + candidates(inner, inner_default))
    members = field_members(tp)
    if members is not None:
        return unique(head + list(members))
    if tp is int:
        base = default if has_default and isinstance(default, int) and default > 0 else 64
        pool = [base, base * 2, base // 2, base + 1, base - 1, base + 8, base * 4, 0, 1, 2,
                8, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192]
        return unique(head + pool)
    if tp is float:
        scale = default if has_default and isinstance(default, float) and default else 1.0
        floats = [scale, scale * 10, scale / 10, scale * 2, scale / 2, -scale, 0.0, -0.0, 1.0,
                  0.5, 2.0, 1e-5, 1e-6, 1e-3]
        return unique(head + floats)
    if tp is str:
        return unique(head + ["a", "b"])
    if typing.get_origin(tp) is tuple:
        return unique(head + _tuple_candidates(typing.get_args(tp), default, has_default))
    return head


def _tuple_candidates(args: tuple[Any, ...], default: Any, has_default: bool) -> list[Any]:
    if len(args) == 2 and args[1] is Ellipsis:
        base = tuple(default) if has_default and default else (1,)
        item = [v for v in candidates(args[0]) if v is not None][:6]
        varied = [base[:i] + (v,) + base[i + 1:] for i in range(len(base)) for v in item]
        return [base, base[:-1], base + base[-1:]] + varied
    pools = [candidates(a) for a in args]
    base = tuple(default) if has_default else tuple(p[0] for p in pools)
    return [base] + [base[:i] + (v,) + base[i + 1:] for i, pool in enumerate(pools) for v in pool]
