"""Field roles (baked, launch), value coercion and canonical values.

A field's role lives in attrs' ``metadata`` (the sanctioned home for a third
party's facts about a field) and is read back through ``attrs.fields(cls)``.
"""

from __future__ import annotations

import enum
import inspect
import math
import numbers
import struct
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, cast

import attrs

from .._base.wording import with_article
from .._templating.immediates import is_ptx_text
from ..errors import SpecError

__all__ = ["baked", "launch", "role_of", "canonical", "make_coercer", "is_factory",
           "is_bool_like", "BAKED", "LAUNCH"]

ROLE = "specdsl.role"
NONFINITE = "specdsl.allow_nonfinite"
DOC = "specdsl.doc"
BAKED = "baked"
LAUNCH = "launch"

_NOTHING = attrs.NOTHING


def _field(role: str, default: Any, validator: Any, converter: Any,
           allow_nonfinite: bool, doc: str | None) -> Any:
    if isinstance(validator, (list, tuple)):
        validator = [_adapt_validator(v) for v in validator]
    elif validator is not None:
        validator = _adapt_validator(validator)
    if isinstance(converter, (list, tuple)):  # as attrs >= 24.1 does; 23.1 takes no list
        converter = attrs.converters.pipe(*converter)
    return attrs.field(
        default=default, validator=validator, converter=converter,
        metadata={ROLE: role, NONFINITE: allow_nonfinite, DOC: doc},
    )


def _adapt_validator(validator: Any) -> Callable[[Any, Any, Any], None]:
    """``validator`` as attrs calls it, ``check(instance, attribute, value)``, reading its
    verdict: returning ``None`` or ``True`` accepts the value; returning ``False``
    refuses it, as raising ``ValueError``, ``TypeError`` or ``AssertionError`` does; any
    other return (``0``, ``""``, a regex match) is refused as ambiguous rather than
    guessed at. Every refusal is a :class:`SpecError` naming the class, the field and the
    value. Takes plain ``check(value)`` functions too."""
    try:
        parameters = inspect.signature(validator).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume the attrs protocol
        value_only = False
    else:
        positional = [p for p in parameters
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        value_only = len(positional) == 1 and not any(
            p.kind is p.VAR_POSITIONAL for p in parameters)
    name = getattr(validator, "__qualname__", None) or repr(validator)

    def check(instance: Any, attribute: Any, value: Any) -> None:
        try:
            verdict = validator(value) if value_only else validator(instance, attribute, value)
        except SpecError:
            raise
        except (ValueError, TypeError, AssertionError) as exc:
            reason = (f"validator {name} failed an assert" if isinstance(exc, AssertionError)
                      and not exc.args else reason_of(exc))
            raise refusal(type(instance), attribute.name, value, reason) from None
        if verdict is None or verdict is True or (is_bool_like(verdict) and verdict):
            return
        reason = (f"validator {name} returned False" if is_bool_like(verdict) else
                  f"validator {name} returned {verdict!r}; a validator accepts by returning "
                  "None or True and refuses by returning False or raising")
        raise refusal(type(instance), attribute.name, value, reason)

    check.__name__ = getattr(validator, "__name__", "check")
    return check


def refusal(cls: type, field: str, value: Any, reason: str) -> SpecError:
    """The :class:`SpecError` refusing ``value`` for ``cls.field``, with ``reason``."""
    return SpecError(f"{cls.__qualname__}.{field} = {value!r} is invalid: {reason}")


def reason_of(exc: Exception) -> str:
    """A validator's or converter's exception as a reason: attrs' validators raise
    ``ValueError(message, attribute, expected, value)``, of which the message is kept."""
    first = exc.args[0] if exc.args else ""
    text = first if isinstance(first, str) and len(exc.args) > 1 else str(exc)
    return text or f"{type(exc).__name__} without a message"


def baked(default: Any = _NOTHING, validator: Any = None, converter: Any = None, *,
          allow_nonfinite: bool = False, doc: str | None = None) -> Any:
    """Declare a field that is rendered into the PTX and so is part of the derived key.

    Args:
        default: the value when the caller gives none.
        validator: a check, or a list of checks run in order: an attrs validator such
            as ``attrs.validators.ge(1)``, any ``check(instance, attribute, value)``, or
            a plain ``check(value)``. A check accepts the value by returning ``None`` or
            ``True``; it refuses it by raising ``ValueError`` or ``TypeError``, or by
            returning ``False`` (a NumPy bool counts as a bool). An ``AssertionError`` is
            a refusal too, but never validate with ``assert``: ``python -O`` strips it
            and the value is accepted. Any other return, such as ``0`` or a regex
            match, is refused as ambiguous. Every refusal is a :class:`SpecError`
            naming the field, the value and the check's reason.
        converter: applied before specdsl's own type coercion: a callable
            ``f(value)``, an ``attrs.Converter`` (attrs >= 24.1; ``takes_self=True``
            passes the instance, whose earlier fields are set, and ``takes_field=True``
            the field), or a list of these run in order (``attrs.converters.pipe``
            alike). A ``ValueError``, ``TypeError`` or ``AssertionError`` it raises is a
            :class:`SpecError`.
        allow_nonfinite: let a ``float`` field hold NaN and infinity (refused by default,
            since a template usually cannot render them meaningfully).
        doc: one line for ``specdsl list`` and the docs.

    A ``str`` value (alone or inside a tuple) of a baked field must be one line of
    printable ASCII: it is written into the PTX, where a newline would start a new
    statement and a NUL would end the text nvJitLink compiles.

    Returns:
        An attrs field definition, to be assigned in a :func:`kernel_spec` class body.
    """
    return _field(BAKED, default, validator, converter, allow_nonfinite, doc)


def launch(default: Any = _NOTHING, validator: Any = None, converter: Any = None, *,
           allow_nonfinite: bool = False, doc: str | None = None) -> Any:
    """Declare a launch-only field (block size, grid policy): never visible to the template.

    Launch fields are typed and validated like baked ones but never enter the derived
    key, so two requests differing only in launch fields share one module. Arguments
    as for :func:`baked`.
    """
    return _field(LAUNCH, default, validator, converter, allow_nonfinite, doc)


def role_of(attribute: attrs.Attribute[Any]) -> str | None:
    """``"baked"``, ``"launch"``, or ``None`` for a field declared without a role."""
    return attribute.metadata.get(ROLE)


def _enum_name(kind: type) -> str:
    """An enum class's name in canonical forms: ``module.QualName``, or the name it declares
    as ``__specdsl_key_name__`` (specdsl's own enums: their keys outlive a move)."""
    name = kind.__dict__.get("__specdsl_key_name__")
    return name if isinstance(name, str) else f"{kind.__module__}.{kind.__qualname__}"


def canonical(value: Any) -> tuple[Any, ...]:
    """A value's canonical form: equal forms render identically, distinct forms may not.

    Floats compare by their exact bits (``0.0`` and ``-0.0`` differ, NaN equals
    itself), bools never equal ints, enums compare by class and member name. Used
    as the attrs ``eq`` key of every spec field and as the derived key's input.

    Raises:
        TypeError: a value of a type the key cannot see exactly.
    """
    # Exact types first: coerced field values are plain ints, floats, enum members...
    # and this runs for every field each time a request is hashed or compared.
    kind = type(value)
    if kind is int:
        return ("int", value)
    if kind is float:
        return ("float", _pack_f64(value).hex())
    cached = _ENUM_FORMS.get(id(value))  # members are singletons: cache by identity
    if cached is not None and cached[0] is value:
        return cached[1]
    if isinstance(value, enum.Enum):  # before int and str: IntEnum and StrEnum are both
        form = ("enum", _enum_name(kind), value.name)
        if value.name is None:  # a Flag combination without a name of its own: by value
            form = form[:2] + ("value", canonical(value.value))
        _ENUM_FORMS[id(value)] = (value, form)
        return form
    if value is None:
        return ("none",)
    if isinstance(value, bool):
        return ("bool", int(value))
    if isinstance(value, int):
        return ("int", int(value))
    if isinstance(value, float):
        return ("float", _pack_f64(float(value)).hex())
    if isinstance(value, str):
        return ("str", str(value))
    if isinstance(value, tuple):
        return ("tuple",) + tuple(canonical(item) for item in value)
    raise TypeError(f"no canonical form for {kind.__name__} value {value!r}")


_pack_f64 = struct.Struct(">d").pack
_ENUM_FORMS: dict[int, tuple[enum.Enum, tuple[Any, ...]]] = {}


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
                 ptx_text: bool = True) -> Coercer:
    """Build the converter that checks and normalizes one field's value for type ``tp``.

    Supported annotations: ``int``, ``float``, ``bool``, ``str``, enum classes (members,
    their value/name strings, and whatever the enum's own ``_missing_`` lookup accepts:
    ``DType``'s aliases and torch/NumPy dtypes), ``Literal[...]``, ``tuple[T, ...]``,
    ``tuple[T1, T2]`` and ``T | None``. Lists become tuples; other containers are refused.
    With ``ptx_text`` (a baked field's values are written into the PTX) a ``str`` must be
    one line of printable ASCII (see :func:`is_ptx_text`); a ``str`` subclass is taken as
    its plain text.

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
        inner = make_coercer(owner, name, members[0], allow_nonfinite, ptx_text)
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
            raise SpecError(f"{fail(v, with_article(_describe(tp)))}{reason}")
        return enum_

    raise TypeError(f"{label}: unsupported field type {tp!r} (use int, float, bool, str, "
                    "an Enum, Literal[...], tuple[...] or T | None)")


#: attrs.Factory as the class it is at run time (attrs' stubs declare a function).
_FACTORY = cast(type, attrs.Factory)


def is_factory(default: Any) -> bool:
    """Whether a field's default is an ``attrs.Factory`` (computed for each request)."""
    return isinstance(default, _FACTORY)


def is_bool_like(v: Any) -> bool:
    """True for Python bools and NumPy's bool scalars (without importing NumPy; NumPy 2
    names the type ``bool``, NumPy 1 ``bool_``)."""
    kind = type(v)
    return isinstance(v, bool) or (
        kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"))


def _try_canonical(v: Any) -> tuple[Any, ...] | None:
    try:
        return canonical(v)
    except TypeError:
        return None
