"""Field roles (baked, launch), their validators, and canonical values (coercion: coerce.py).

A field's role lives in attrs' ``metadata`` (the sanctioned home for a third
party's facts about a field) and is read back through ``attrs.fields(cls)``.
"""

from __future__ import annotations

import enum
import inspect
import struct
from collections.abc import Callable
from typing import Any, cast

import attrs

from ..errors import SpecDefinitionError, SpecdslError, SpecError

__all__ = ["baked", "launch", "role_of", "canonical", "is_factory", "in_order",
           "is_bool_like", "BAKED", "LAUNCH"]

ROLE = "specdsl.role"
NONFINITE = "specdsl.allow_nonfinite"
DOC = "specdsl.doc"
#: The values a field's validators allow, where one says (``attrs.validators.in_`` or a
#: check with a ``choices`` attribute): a refused enum value's message lists only these.
CHOICES = "specdsl.choices"
BAKED = "baked"
LAUNCH = "launch"
#: attrs' converter wrapper (attrs >= 24.1), or None on older attrs.
CONVERTER: type | None = getattr(attrs, "Converter", None)

_NOTHING = attrs.NOTHING


def _field(role: str, default: Any, validator: Any, converter: Any,
           allow_nonfinite: bool, doc: str | None, factory: Any = None) -> Any:
    if factory is not None:  # attrs.field's spelling of attrs.Factory(factory)
        if default is not _NOTHING:
            raise SpecDefinitionError(f"{role}(...) takes a default or a factory, not both "
                                      f"(got {default!r} and {factory!r})")
        if not callable(factory):
            raise SpecDefinitionError(f"{role}(factory=...) must be callable (got {factory!r})")
        default = attrs.Factory(factory)
    choices = _choices_of(validator if isinstance(validator, (list, tuple)) else [validator])
    if isinstance(validator, (list, tuple)):
        validator = [_adapt_validator(v) for v in validator]
    elif validator is not None:
        validator = _adapt_validator(validator)
    if isinstance(converter, (list, tuple)):  # as attrs >= 24.1 does; 23.1 takes no list
        converter = attrs.converters.pipe(*converter)
    return attrs.field(
        default=default, validator=validator, converter=converter,
        metadata={ROLE: role, NONFINITE: allow_nonfinite, DOC: doc, CHOICES: choices},
    )


#: The class of ``attrs.validators.in_(...)`` validators (private in attrs), for its ``options``.
_IN_VALIDATOR: type = type(attrs.validators.in_(()))


def _choices_of(validators: Any) -> tuple[Any, ...] | None:
    """The values the first of ``validators`` that names them allows, or ``None``."""
    for validator in validators:
        choices = getattr(validator, "choices", None)
        if choices is None and isinstance(validator, _IN_VALIDATOR):
            choices = getattr(validator, "options", None)
        if isinstance(choices, (tuple, list, frozenset, set)):
            return tuple(choices)
    return None


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
          factory: Any = None, allow_nonfinite: bool = False, doc: str | None = None) -> Any:
    """Declare a field that is rendered into the PTX and so is part of the derived key.

    Args:
        default: the value when the caller gives none; ``attrs.Factory(f)`` computes it
            for each request (``attrs.Factory(f, takes_self=True)`` from the fields
            declared before it).
        validator: a check, or a list of checks run in order: an attrs validator such
            as ``attrs.validators.ge(1)``, any ``check(instance, attribute, value)``, or
            a plain ``check(value)``. A check accepts the value by returning ``None`` or
            ``True``; it refuses it by raising ``ValueError`` or ``TypeError``, or by
            returning ``False`` (a NumPy bool counts as a bool). An ``AssertionError`` is
            a refusal too, but never validate with ``assert``: ``python -O`` strips it
            and the value is accepted. Any other return, such as ``0`` or a regex
            match, is refused as ambiguous. Every refusal is a :class:`SpecError`
            naming the field, the value and the check's reason. For an enum field, the
            members an ``attrs.validators.in_`` (or a check's ``choices`` attribute)
            allows are the ones an unknown value's message lists.
        converter: applied before specdsl's own type coercion: a callable
            ``f(value)``, an ``attrs.Converter`` (attrs >= 24.1; ``takes_self=True``
            passes the instance, whose earlier fields are set, and ``takes_field=True``
            the field), or a list of these run in order (``attrs.converters.pipe``
            alike). A ``ValueError``, ``TypeError`` or ``AssertionError`` it raises is a
            :class:`SpecError`.
        factory: ``f``, as attrs spells ``default=attrs.Factory(f)`` (not with a default).
        allow_nonfinite: let a ``float`` field hold NaN and infinity (refused by default,
            since a template usually cannot render them meaningfully).
        doc: one line for ``specdsl list`` and the docs.

    A ``str`` value (alone or inside a tuple) of a baked field must be one line of
    printable ASCII: it is written into the PTX, where a newline would start a new
    statement and a NUL would end the text nvJitLink compiles.

    Returns:
        An attrs field definition, to be assigned in a :func:`kernel_spec` class body.
    """
    return _field(BAKED, default, validator, converter, allow_nonfinite, doc, factory)


def launch(default: Any = _NOTHING, validator: Any = None, converter: Any = None, *,
           factory: Any = None, allow_nonfinite: bool = False, doc: str | None = None) -> Any:
    """Declare a launch-only field (block size, grid policy): never visible to the template.

    Launch fields are typed and validated like baked ones but never enter the derived
    key, so two requests differing only in launch fields share one module. Arguments
    as for :func:`baked`.
    """
    return _field(LAUNCH, default, validator, converter, allow_nonfinite, doc, factory)


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


def in_order(owner: str, fields: list[attrs.Attribute[Any]]) -> list[attrs.Attribute[Any]]:
    """``fields`` with each computed default (``attrs.Factory(f, takes_self=True)``) and each
    converter given the instance (``attrs.Converter(f, takes_self=True)``) made to say what
    went wrong when it fails. attrs sets the fields in declaration order and runs every
    validator at the end, so such a function sees only the fields before it, not yet
    validated: reading a later field (a bare ``AttributeError``, "'K' object has no
    attribute 'b'") or a name that is no field is a :class:`SpecDefinitionError`; any other
    exception is first put down to an earlier field its own validator refuses (``block=0``
    rather than the ``ZeroDivisionError`` it causes), else a :class:`SpecError` naming the
    field and the values it was computed from."""
    names = [field.name for field in fields]
    for index, field in enumerate(fields):
        guard = _Guard(owner, field.name, tuple(fields[:index]), frozenset(names[index + 1:]))
        default: Any = field.default
        if is_factory(default) and default.takes_self:
            compute = guard.wrap("computed default", default.factory, 0)
            field = field.evolve(default=attrs.Factory(compute, takes_self=True))
        converter: Any = field.converter
        if CONVERTER is not None and isinstance(converter, CONVERTER):
            wrapped: Any = converter  # an attrs.Converter (attrs >= 24.1)
            if wrapped.takes_self:
                convert = guard.wrap("converter", wrapped.converter, 1)
                field = field.evolve(converter=CONVERTER(
                    convert, takes_self=True, takes_field=wrapped.takes_field))
        fields[index] = field
    return fields


@attrs.frozen
class _Guard:
    """What :func:`in_order` needs to explain a failure of field ``name``'s function."""

    owner: str
    name: str
    earlier: tuple[attrs.Attribute[Any], ...]
    later: frozenset[str]

    def wrap(self, what: str, call: Callable[..., Any], instance_at: int) -> Callable[..., Any]:
        """``call``, explaining its failures; the instance is its argument ``instance_at``."""
        def guarded(*args: Any) -> Any:
            try:
                return call(*args)
            except SpecdslError:
                raise
            except Exception as exc:
                instance = args[instance_at] if len(args) > instance_at else None
                if instance is None:  # called outside a request (a converter given no self)
                    raise
                misread = self.misread(what, exc, instance)
                if misread is not None:
                    raise misread from None
                refused = self.earlier_refusal(instance)
                if refused is not None:  # block=0 rather than the ZeroDivisionError it causes
                    refused.add_note(f"(found computing {self.owner}.{self.name}'s {what}, "
                                     f"which raised {type(exc).__name__}: {exc})")
                    raise refused from None
                values = ", ".join(f"{f.name}={getattr(instance, f.name, '<unset>')!r}"
                                   for f in self.earlier)
                raise SpecError(f"{self.owner}.{self.name}: its {what} failed ({values}): "
                                f"{type(exc).__name__}: {exc}") from exc
        return guarded

    def misread(self, what: str, exc: Exception, instance: Any) -> SpecDefinitionError | None:
        """The class's error where ``exc`` is the function reading, on the instance, its own
        field, a field declared after it, or a name the class does not have at all (a
        property's own ``AttributeError`` is the property's name, which the class has: that
        is a failure of the request); else None."""
        if not (isinstance(exc, AttributeError) and exc.obj is instance and exc.name):
            return None
        name = exc.name
        if name == self.name:
            where = "itself, which is not set while its default is computed"
        elif name in self.later:
            where = (f"{name!r}, which is declared after it; it sees only the fields declared "
                     f"before it (attrs sets them in order): declare {self.name!r} after "
                     f"{name!r}")
        elif inspect.getattr_static(type(instance), name, None) is None:  # (a field is a slot)
            where = f"{name!r}, which is no field of the class"
        else:
            return None
        return SpecDefinitionError(f"{self.owner}.{self.name}: its {what} reads {where}")

    def earlier_refusal(self, instance: Any) -> SpecError | None:
        """The refusal of the first earlier field its own validator refuses (attrs runs the
        validators only after every field is set), or None."""
        for field in self.earlier:
            if field.validator is not None:
                try:
                    field.validator(instance, field, getattr(instance, field.name))
                except SpecError as refused:
                    return refused
                except AttributeError:  # a field not set yet (a class's stand-in request)
                    continue
        return None
