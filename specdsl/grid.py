"""A spec's grid: the requests worth compiling, reviewing and checking in.

``specdsl verify --grid`` and ``specdsl render --grid --out DIR`` walk it. A spec
class names its grid with an optional ``variants`` class attribute or classmethod
(``grid`` is taken: spec classes use it for launch geometry, ``VectorAdd.grid(n)``).
``variants`` may be, or return:

- a mapping ``{field: [values, ...]}``: the cartesian product of those values, every
  other field at its default;
- an iterable of requests of the class, or of mappings ``{field: value}`` (keyword
  arguments; other fields take their defaults).

Without ``variants`` the grid is the default request with every baked ``bool``,
``Enum``, ``Literal[...]`` (and ``T | None`` of those) field run over all its
members: the cartesian product, members the field's validator refuses left out.
Fields of other types keep their defaults. Launch fields never vary: they cannot
change the PTX.
"""

from __future__ import annotations

import enum
import itertools
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

from .errors import SpecDefinitionError, SpecError
from .fields import canonical
from .spec import spec_info

__all__ = ["GRID_ATTRIBUTE", "MAX_GRID", "spec_grid", "default_request", "pinned_grid",
           "field_members", "representative_request"]

#: The class attribute or classmethod that names a spec's grid.
GRID_ATTRIBUTE = "variants"
#: Most requests a grid may hold; a larger one is refused, never cut short.
MAX_GRID = 4096


def default_request(cls: type) -> Any:
    """The request with every field at its default.

    Raises:
        SpecError: a field has no default (naming it), or a default is invalid.
    """
    missing = [f.name for f in attrs.fields(cls) if f.default is attrs.NOTHING]
    if missing:
        raise SpecError(
            f"{cls.__qualname__} has no default request: field(s) {', '.join(missing)} have "
            f"no default; name a request (SPEC {missing[0]}=...) or give the class a "
            f"'{GRID_ATTRIBUTE}' attribute")
    return cls()


def representative_request(cls: type) -> Any:
    """The request that stands for ``cls`` when none is named (``specdsl verify rmsnorm``).

    The default request; for a class with a field that has no default, the first
    request of its declared ``variants``.

    Raises:
        SpecError: a field has no default and the class declares no ``variants``.
    """
    if any(f.default is attrs.NOTHING for f in attrs.fields(cls)) and (
            getattr(cls, GRID_ATTRIBUTE, None) is not None):
        return spec_grid(cls)[0]
    return default_request(cls)


def field_members(tp: Any) -> tuple[Any, ...] | None:
    """Every value of a field type that has finitely many, or ``None``.

    ``bool`` -> ``(False, True)``; an ``Enum`` -> its members; ``Literal[a, b]`` ->
    ``(a, b)``; ``T | None`` -> ``T``'s members and ``None``.
    """
    if tp is bool:
        return (False, True)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tuple(tp)
    origin = typing.get_origin(tp)
    if origin is Literal:
        return typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and len(args) == 2:
            members = field_members(inner[0])
            return None if members is None else members + (None,)
    return None


def _dedupe(requests: Iterable[Any]) -> tuple[Any, ...]:
    seen: set[tuple] = set()
    kept = []
    for request in requests:
        identity = tuple(canonical(getattr(request, f.name)) for f in attrs.fields(type(request)))
        if identity not in seen:
            seen.add(identity)
            kept.append(request)
    return tuple(kept)


def _check_size(cls: type, size: int) -> None:
    if size > MAX_GRID:
        raise SpecDefinitionError(
            f"{cls.__qualname__}'s grid has {size} requests, more than MAX_GRID={MAX_GRID}: "
            f"give the class a '{GRID_ATTRIBUTE}' attribute listing the requests to review")


def _fallback(cls: type) -> tuple[Any, ...]:
    base = default_request(cls)
    hints = typing.get_type_hints(cls)
    axes: list[tuple[str, tuple[Any, ...]]] = []
    for name in spec_info(cls).baked:
        members = field_members(hints[name])
        if members is not None:
            default = getattr(base, name)
            # the default first, so the grid starts with the default request
            ordered = (default,) + tuple(m for m in members if canonical(m) != canonical(default))
            axes.append((name, ordered))
    size = 1
    for _, members in axes:
        size *= len(members)
    _check_size(cls, size)
    requests = []
    for combination in itertools.product(*(members for _, members in axes)):
        try:
            requests.append(attrs.evolve(base, **dict(zip((n for n, _ in axes), combination))))
        except SpecError:
            continue  # the field's validator refuses this member for this kernel
    return _dedupe(requests)


def _declared(cls: type, declared: Any) -> tuple[Any, ...]:
    where = f"{cls.__qualname__}.{GRID_ATTRIBUTE}"
    if isinstance(declared, Mapping):
        names = list(declared)
        for name in names:
            if not isinstance(declared[name], Iterable) or isinstance(declared[name], str):
                raise SpecDefinitionError(
                    f"{where}[{name!r}] must be a list of values (got {declared[name]!r})")
        axes = [tuple(declared[name]) for name in names]
        size = 1
        for axis in axes:
            size *= len(axis)
        _check_size(cls, size)
        items: Iterable[Any] = (dict(zip(names, values)) for values in itertools.product(*axes))
    elif isinstance(declared, Iterable) and not isinstance(declared, str):
        items = declared
    else:
        raise SpecDefinitionError(
            f"{where} must be a mapping {{field: [values]}} or an iterable of requests or "
            f"{{field: value}} mappings (got {declared!r})")
    requests = []
    for index, item in enumerate(items):
        if isinstance(item, cls):
            requests.append(item)
        elif isinstance(item, Mapping):
            try:
                requests.append(cls(**item))
            except TypeError as exc:  # an unknown or missing field
                raise SpecDefinitionError(f"{where} item {index} {dict(item)!r}: {exc}") from None
            except SpecError as exc:
                raise SpecError(f"{where} item {index}: {exc}") from None
        else:
            raise SpecDefinitionError(
                f"{where} item {index} must be a {cls.__qualname__} request or a "
                f"{{field: value}} mapping (got {item!r})")
        _check_size(cls, len(requests))
    if not requests:
        raise SpecDefinitionError(f"{where} is empty")
    return _dedupe(requests)


def spec_grid(cls: type) -> tuple[Any, ...]:
    """Every request of ``cls``'s grid, in a deterministic order, duplicates removed.

    Args:
        cls: a :func:`~specdsl.kernel_spec` class.

    Returns:
        A non-empty tuple of requests.

    Raises:
        TypeError: ``cls`` is not a kernel spec.
        SpecDefinitionError: a malformed ``variants`` or a grid over ``MAX_GRID``.
        SpecError: a ``variants`` item with an invalid value, or (without
            ``variants``) a field with no default.
    """
    spec_info(cls)
    declared = getattr(cls, GRID_ATTRIBUTE, None)
    if declared is None:
        return _fallback(cls)
    if callable(declared):
        declared = declared()
    return _declared(cls, declared)


def pinned_grid(cls: type, pinned: Mapping[str, Any]) -> tuple[Any, ...]:
    """The grid of ``cls`` with the fields in ``pinned`` set to the given values.

    ``specdsl verify rmsnorm hidden=8192 --grid`` reviews every grid request at
    ``hidden=8192``. Requests the pinned values make invalid are left out.

    Raises:
        SpecError: no grid request is valid with the pinned values (the last
            validator message says why).
    """
    if not pinned:
        return spec_grid(cls)
    requests, last_error = [], None
    for request in spec_grid(cls):
        try:
            requests.append(attrs.evolve(request, **pinned))
        except SpecError as exc:
            last_error = exc
    if not requests:
        raise SpecError(f"no request of {cls.__qualname__}'s grid is valid with "
                        f"{pinned!r}: {last_error}")
    return _dedupe(requests)
