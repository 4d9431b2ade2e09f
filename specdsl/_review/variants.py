"""A spec's variants: the requests worth compiling, reviewing and checking in.

``specdsl verify --variants`` and ``specdsl render --variants --out DIR`` walk them. A
spec class declares its variants with an optional ``variants`` class attribute or
classmethod, which may be, or return:

- a mapping ``{field: [values, ...]}``: the cartesian product of those values, every
  other field at its default;
- an iterable of requests of the class, or of mappings ``{field: value}`` (keyword
  arguments; other fields take their defaults).

Without ``variants`` they are the default request with every baked ``bool``, ``Enum``,
``Literal[...]`` (and ``T | None`` of those) field run over all its members: the
cartesian product, members the field's validator refuses left out. Fields of other
types keep their defaults. Launch fields never vary: they cannot change the PTX.

Each variant is kept as the field values it names, and built again when fields are
pinned (:func:`pinned_variants`): a default computed from other fields (an
``attrs.Factory(takes_self=True)``, such as RMSNorm's ``block`` from ``hidden``) is
computed from the pinned values, exactly as the application's own request would be.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._base.wording import with_article
from .._spec.decorator import spec_info
from .._spec.fields import CHOICES, is_factory
from .._spec.values import field_members, unique, value_identity
from ..errors import SpecDefinitionError, SpecError

__all__ = ["VARIANTS_ATTRIBUTE", "MAX_VARIANTS", "spec_variants", "pinned_variants",
           "split_pinned_variants", "PinnedVariants", "Refused", "default_request",
           "representative_request", "field_members", "has_finite_baked_field"]

#: The class attribute or classmethod that declares a spec's variants.
VARIANTS_ATTRIBUTE = "variants"
#: Most requests a spec's variants may hold; more are refused, never cut short.
MAX_VARIANTS = 4096

Values = dict[str, Any]


def default_request(cls: type) -> Any:
    """The request with every field at its default.

    Raises:
        SpecError: a field has no default (naming it), or a default is invalid.
    """
    _require_defaults(cls, {})
    return cls()


def _require_defaults(cls: type, given: Mapping[str, Any]) -> None:
    """Raise a :class:`SpecError` naming the fields without a default that ``given`` lacks."""
    missing = [f.name for f in attrs.fields(cls)
               if f.default is attrs.NOTHING and f.name not in given]
    if missing:
        raise SpecError(
            f"{cls.__qualname__} has no default request: field(s) {', '.join(missing)} have "
            f"no default; name a request (SPEC {missing[0]}=...) or give the class a "
            f"'{VARIANTS_ATTRIBUTE}' attribute")


def representative_request(cls: type) -> Any:
    """The request that stands for ``cls`` when none is named (``specdsl verify rmsnorm``).

    The default request; for a class with a field that has no default, the first
    request of its declared ``variants``.

    Raises:
        SpecError: a field has no default and the class declares no ``variants``.
    """
    if any(f.default is attrs.NOTHING for f in attrs.fields(cls)) and (
            getattr(cls, VARIANTS_ATTRIBUTE, None) is not None):
        return spec_variants(cls)[0]
    return default_request(cls)


def _check_size(cls: type, size: int) -> None:
    if size > MAX_VARIANTS:
        raise SpecDefinitionError(
            f"{cls.__qualname__} has {size} variants, more than MAX_VARIANTS={MAX_VARIANTS}: "
            f"give the class a '{VARIANTS_ATTRIBUTE}' attribute listing the requests to review")


def _product(cls: type, axes: list[tuple[str, tuple[Any, ...]]]) -> list[Values]:
    size = 1
    for _, values in axes:
        size *= len(values)
    _check_size(cls, size)
    names = [name for name, _ in axes]
    return [dict(zip(names, combination, strict=True))
            for combination in itertools.product(*(values for _, values in axes))]


def _fallback(cls: type, pinned: Values) -> list[Values]:
    """Each finite baked field over its members (the default first), but those its
    validator's declared choices leave out (``attrs.validators.in_``, a check's ``choices``:
    never a variant, so never counted as one the pins refuse); pinned fields stay."""
    fields = {f.name: f for f in attrs.fields(cls)}
    defaults = {f.name: f.converter(f.default) if callable(f.converter) else f.default
                for f in fields.values()
                if f.default is not attrs.NOTHING and not is_factory(f.default)}
    hints = typing.get_type_hints(cls)
    axes: list[tuple[str, tuple[Any, ...]]] = []
    for name in spec_info(cls).baked:
        members = field_members(hints[name])
        if members is None or name in pinned:
            continue
        members = _allowed(fields[name], members)
        first = (defaults[name],) if name in defaults else ()
        # the default first, so the first variant is the default request
        axes.append((name, tuple(unique(first + members))))
    return _product(cls, axes)


def has_finite_baked_field(cls: type) -> bool:
    """Whether a baked field of ``cls`` has a finite set of values (a bool, an enum, a
    ``Literal``), which a spec without ``variants`` has its variants go through."""
    hints = typing.get_type_hints(cls)
    return any(field_members(hints[name]) is not None for name in spec_info(cls).baked)


def _allowed(field: attrs.Attribute[Any], members: tuple[Any, ...]) -> tuple[Any, ...]:
    """``members`` that the field's declared choices (:data:`~specdsl._spec.fields.CHOICES`)
    hold, tested as ``attrs.validators.in_`` tests a converted value (``member in
    choices``: an ``IntEnum`` member is in ``[1, 2]``); all of them without declared
    choices."""
    choices = field.metadata.get(CHOICES)
    if not choices:
        return members
    return tuple(m for m in members if _member_in(m, choices))


def _member_in(member: Any, choices: Any) -> bool:
    try:
        return member in choices
    except TypeError:  # a choices container that cannot test this member
        return True


def _declared(cls: type, declared: Any) -> list[Values | Any]:
    """The declared variants, as ``{field: value}`` mappings or requests of ``cls``."""
    where = f"{cls.__qualname__}.{VARIANTS_ATTRIBUTE}"
    if isinstance(declared, Mapping):
        for name, values in declared.items():
            if not isinstance(values, Iterable) or isinstance(values, str):
                raise SpecDefinitionError(
                    f"{where}[{name!r}] must be a list of values (got {values!r})")
        return list(_product(cls, [(name, tuple(values)) for name, values in declared.items()]))
    if not isinstance(declared, Iterable) or isinstance(declared, str):
        raise SpecDefinitionError(
            f"{where} must be a mapping {{field: [values]}} or an iterable of requests or "
            f"{{field: value}} mappings (got {declared!r})")
    items = []
    for index, item in enumerate(declared):
        if not isinstance(item, (cls, Mapping)):
            raise SpecDefinitionError(
                f"{where} item {index} must be {with_article(cls.__qualname__)} request or a "
                f"{{field: value}} mapping (got {item!r})")
        items.append(item)
        _check_size(cls, len(items))
    if not items:
        raise SpecDefinitionError(f"{where} is empty")
    return items


def _named_values(request: Any) -> Values:
    """The field values a request names: each field, except those whose default the class
    computes (``attrs.Factory``) and that still hold the computed value."""
    cls = type(request)
    values = {}
    for f in attrs.fields(cls):
        if not f.init:
            continue
        value = getattr(request, f.name)
        default = f.default
        if is_factory(default):
            computed = default.factory(request) if default.takes_self else default.factory()
            if callable(f.converter):
                computed = f.converter(computed)
            if value_identity(computed) == value_identity(value):
                continue
        values[f.name] = value
    return values


def spec_variants(cls: type) -> tuple[Any, ...]:
    """Every variant of ``cls``, in a deterministic order, duplicates removed.

    Args:
        cls: a :func:`~specdsl.kernel_spec` class.

    Returns:
        A non-empty tuple of requests.

    Raises:
        TypeError: ``cls`` is not a kernel spec.
        SpecDefinitionError: a malformed ``variants``, or more than ``MAX_VARIANTS``.
        SpecError: a ``variants`` item with an invalid value, or (without
            ``variants``) a field with no default.
    """
    return pinned_variants(cls, {})


def pinned_variants(cls: type, pinned: Mapping[str, Any]) -> tuple[Any, ...]:
    """The variants of ``cls`` with the fields in ``pinned`` set to the given values.

    ``specdsl verify rmsnorm hidden=8192 --variants`` reviews every variant at
    ``hidden=8192``. Each variant is built again from the values it names and the pinned
    ones, so defaults computed from other fields follow the pinned values. A spec without
    ``variants`` varies its finite baked fields other than the pinned ones, and a pinned
    value may supply a field that has no default. Variants the pinned values make invalid
    are left out (:func:`split_pinned_variants` also gives those and why).

    Args:
        cls: a :func:`~specdsl.kernel_spec` class.
        pinned: ``{field: value}``, values as a constructor takes them.

    Returns:
        A non-empty tuple of requests, in the order of the variants, duplicates removed.

    Raises:
        TypeError: ``cls`` is not a kernel spec.
        SpecError: no variant is valid with the pinned values (the first validator message
            says why); a declared variant with an invalid value (when nothing is pinned);
            or, without ``variants``, a field with no default that is not pinned.
        SpecDefinitionError: a malformed ``variants``, or more than ``MAX_VARIANTS``.
    """
    return split_pinned_variants(cls, pinned).requests


@attrs.frozen
class Refused:
    """A variant left out: the field values tried (the variant's with the pins applied)
    and the validator's message."""

    values: Mapping[str, Any]
    message: str


@attrs.frozen
class PinnedVariants:
    """The variants of a spec with fields pinned, split into those kept and those left out.

    Attributes:
        requests: the valid requests, in the order of the variants, duplicates removed.
        refused: the variants found invalid, in order.
        total: how many distinct variants there were with the pins applied (two variants
            that differ only in a pinned field are one), before any was left out.
    """

    requests: tuple[Any, ...]
    refused: tuple[Refused, ...]
    total: int


def split_pinned_variants(cls: type, pinned: Mapping[str, Any]) -> PinnedVariants:
    """:func:`pinned_variants`, with the variants it leaves out and why.

    Args:
        cls: a :func:`~specdsl.kernel_spec` class.
        pinned: ``{field: value}``, values as a constructor takes them.

    Returns:
        The requests :func:`pinned_variants` returns, the variants invalid with the pinned
        values (without ``variants``, also the members a field's validator refuses), and
        the number of variants.

    Raises:
        TypeError, SpecError, SpecDefinitionError: as :func:`pinned_variants`.
    """
    spec_info(cls)
    where = f"{cls.__qualname__}.{VARIANTS_ATTRIBUTE}"
    declared = getattr(cls, VARIANTS_ATTRIBUTE, None)
    items: list[Values | Any]
    if declared is None:
        _require_defaults(cls, pinned)
        items = list(_fallback(cls, dict(pinned)))
    else:
        items = _declared(cls, declared() if callable(declared) else declared)
        if pinned:
            items = [_named_values(i) if isinstance(i, cls) else i for i in items]
    # a declared variant that is invalid as written is a broken declaration; one that the
    # pinned values (or, without variants, the field's validator) refuse is left out
    strict = declared is not None and not pinned
    requests, refused, tried = [], [], set()
    for index, item in enumerate(items):
        if isinstance(item, cls):
            tried.add(item)
            requests.append(item)
            continue
        values = {**item, **pinned}
        combination = tuple(sorted((name, value_identity(v)) for name, v in values.items()))
        if combination in tried:  # the pins made it another variant's twin
            continue
        tried.add(combination)
        try:
            requests.append(cls(**values))
        except TypeError as exc:  # an unknown or missing field
            raise SpecDefinitionError(f"{where} item {index} {dict(item)!r}: {exc}") from None
        except SpecError as exc:
            if strict:
                raise SpecError(f"{where} item {index}: {exc}") from None
            refused.append(Refused(values, str(exc)))
    if not requests:
        with_pins = f" with {dict(pinned)!r}" if pinned else ""
        raise SpecError(f"no variant of {cls.__qualname__} is valid{with_pins} ({len(refused)} "
                        f"refused), e.g. {refused[0].message}")
    return PinnedVariants(tuple(unique(requests, key=lambda r: r)), tuple(refused), len(tried))
