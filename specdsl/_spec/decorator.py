"""``@kernel_spec``: turns an annotated class into a frozen, typed, validated kernel spec."""

from __future__ import annotations

import difflib
import enum
import functools
import inspect
import keyword
import linecache
import sys
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import jinja2

from .._templating.environment import CONTEXT_NAMES, TemplateFacts, environment
from ..errors import NotASpecError, SpecArgumentError, SpecDefinitionError, SpecError
from .arrays import ArrayDeclarations, parse_arrays
from .checks import (
    LAUNCH_NOT_IN_PTX,
    check_defaults,
    check_entry,
    check_names,
    read_facts,
    warn_unread,
)
from .coerce import make_coercer
from .fields import (
    BAKED,
    CHOICES,
    CONVERTER,
    LAUNCH,
    NONFINITE,
    canonical,
    in_order,
    reason_of,
    refusal,
    role_of,
)

__all__ = ["kernel_spec", "SpecInfo", "spec_info", "request_info", "is_spec", "baked_values",
           "launch_values", "did_you_mean", "LAUNCH_NOT_IN_PTX"]

T = TypeVar("T", bound=type)

#: Field names a spec may not use: they are template context names or spec API.
RESERVED = frozenset(CONTEXT_NAMES | {"key", "require", "require_target", "arrays"})


@attrs.frozen
class SpecInfo:
    """Facts about one spec class, stored on it as ``__specdsl__``.

    Attributes:
        cls_name: ``module.QualName`` of the class, as it enters the derived key.
        template: the template name; ``entry``: the PTX ``.entry`` name.
        search_path: user template folders searched before the built-in ones.
        baked / launch: field names of each role, in declaration order.
        facts: what the template (with everything it reaches) reads, and its digest.
        env: the Jinja environment that renders it.
        has_key: whether the class defines a hand-written ``key()``.
        arrays: its parsed array declarations (the class attribute ``arrays``:
            :mod:`specdsl._spec.arrays`), or ``None`` without any.
    """

    cls_name: str
    template: str
    entry: str
    search_path: tuple[str, ...]
    baked: tuple[str, ...]
    launch: tuple[str, ...]
    facts: TemplateFacts
    env: jinja2.Environment = attrs.field(eq=False, repr=False)
    has_key: bool = False
    arrays: ArrayDeclarations | None = None


# PEP 681, for type checkers: a @kernel_spec class gets an __init__ taking its fields (by
# position or keyword; kw_only_default stays False, as the generated __init__ takes both) and
# is frozen. baked and launch are left out of field_specifiers on purpose: type checkers
# read a field specifier's default only from a `default=` keyword, and specs give it by
# position (`baked(256)`), so with them every such field would read as required. Without
# them each `= baked(...)` field counts as having a default: field keywords type-check, a
# misspelled keyword and an assignment to a field are errors, and a missing required
# field is left to the SpecArgumentError a call raises.
@typing.dataclass_transform(frozen_default=True)
def kernel_spec(template: str, entry: str, template_dir: str | Path | None = None
                ) -> Callable[[T], T]:
    """Class decorator: declare a kernel spec rendered by ``template`` with entry ``entry``.

    The class becomes a frozen, slotted, hashable attrs class. Every field must be
    declared with :func:`baked` or :func:`launch` and annotated with a supported type.
    Field values are coerced and validated at construction; equality and hashing
    use each value's canonical form (``0.0 != -0.0``), so equal requests render
    identical PTX.

    Args:
        template: template file name, e.g. ``"rmsnorm.ptx.j2"``.
        entry: the PTX ``.entry`` name the template defines (a C identifier).
        template_dir: a folder searched before the built-in ``templates/``; a relative
            path is taken from the folder of the module that defines the class.

    Making a request then raises :class:`SpecError` for a value a field refuses (its
    type, a validator, a converter, a baked ``str`` that is not one line of printable
    ASCII) and :class:`SpecArgumentError` for a bad call (a missing required field, an
    unknown one, too many positional values), naming the class and the field.

    Raises:
        SpecDefinitionError: at class definition, naming the class, template and
            variable: a class already made by ``@attrs.define``/``@attrs.frozen`` or
            ``@dataclass``, a field without a role or with an unsupported type, a reserved
            field name, a default its own field refuses (its type, converter or
            validator), a missing template, a template that does not parse, reads a
            launch field or a name that is neither a baked field nor
            ``target``/``entry``, or whose ``.entry`` declarations all name another
            kernel in literal text (:mod:`specdsl._spec.checks`), or an ``arrays``
            declaration that does not parse or names what it may not
            (:mod:`specdsl._spec.arrays`).

    A class attribute ``arrays`` declares each pointer parameter's element type and shape
    (``arrays = {"x": "dtype[rows, hidden]"}``, see ``docs/writing-specs.md``): launches
    then refuse an array of another element type, or one too small for what the launch
    touches.
    """
    if not isinstance(template, str) or not template:
        raise SpecDefinitionError(f"kernel_spec template must be a file name (got {template!r})")
    if not isinstance(entry, str) or not entry.isidentifier() or keyword.iskeyword(entry):
        raise SpecDefinitionError(f"kernel_spec entry must be an identifier (got {entry!r})")

    def wrap(cls: T) -> T:
        name = cls.__qualname__
        _refuse_made_classes(cls)
        search_path = _search_path(cls, template_dir)
        built = attrs.define(
            cls, frozen=True, slots=True, eq=True, order=False, cache_hash=True,
            field_transformer=lambda c, fields: in_order(
                name, [_transform(name, c, f) for f in fields]),
        )
        fields = attrs.fields(built)
        baked_names = tuple(f.name for f in fields if role_of(f) == BAKED)
        launch_names = tuple(f.name for f in fields if role_of(f) == LAUNCH)
        env = environment(search_path)
        facts = read_facts(name, env, template)
        check_names(name, template, facts, baked_names, launch_names)
        check_entry(name, template, entry, facts)
        check_defaults(built)
        warn_unread(name, template, facts, baked_names, stacklevel=2)
        info = SpecInfo(
            cls_name=f"{cls.__module__}.{name}", template=template, entry=entry,
            search_path=search_path, baked=baked_names, launch=launch_names, facts=facts,
            env=env, has_key=callable(getattr(built, "key", None)),
            arrays=_arrays(name, built, fields),
        )
        made: Any = built  # the attrs class, given specdsl's attribute and __init__
        made.__specdsl__ = info
        made.__init__ = _checked_init(built, made.__init__)
        return built

    return wrap


def _arrays(owner: str, cls: type, fields: tuple[attrs.Attribute[Any], ...]
            ) -> ArrayDeclarations | None:
    """The class's ``arrays`` declarations, parsed (``None`` without any)."""
    declared = getattr(cls, "arrays", None)
    if declared is None:
        return None
    hints = typing.get_type_hints(cls)
    return parse_arrays(owner, declared,
                        {f.name: (role_of(f) or "", hints.get(f.name)) for f in fields})


def _refuse_made_classes(cls: type) -> None:
    """A class that ``@attrs.define``, ``@attrs.frozen`` or ``@dataclass`` already made
    cannot be made again (attrs fails with its own internals: "cache_hash", "custom
    __setattr__"): say what to write instead."""
    maker = ("attrs" if "__attrs_attrs__" in cls.__dict__ else
             "dataclasses" if "__dataclass_fields__" in cls.__dict__ else None)
    if maker is not None:
        raise SpecDefinitionError(
            f"{cls.__qualname__} is already a class made by {maker}: @kernel_spec makes the "
            "frozen, slotted attrs class itself. Remove the @attrs.define / @attrs.frozen / "
            "@dataclass decorator and declare each field with baked(...) or launch(...), "
            "e.g. 'hidden: int = baked()'")


def _checked_init(cls: type, init: Callable[..., None]) -> Callable[..., None]:
    """``init`` (attrs' generated ``__init__``) behind a generated ``__init__`` of the same
    parameters that turns a bad call into a :class:`SpecArgumentError` naming the class
    and the fields: a missing required field (its default becomes a sentinel), unknown
    keywords (caught by ``**``) and too many positional values (caught by ``*``). One
    plain call on the good path; the diagnosis runs only on a bad call. A field given
    both by position and by keyword stays Python's ``TypeError`` (it names the field):
    catching it would cost every request a ``*args, **kwargs`` repacking.

    Generated as attrs generates ``__init__``, its source registered in ``linecache`` so
    that tracebacks show it.
    """
    parameters = list(inspect.signature(init).parameters.values())[1:]  # after self
    names: dict[str, Any] = {"_specdsl_init_": init, "_specdsl_missing_": _MISSING,
                             "_specdsl_refuse_": functools.partial(_refuse_call, cls)}
    positional, keyword, call, required = [], [], [], []
    for i, param in enumerate(parameters):
        if param.default is param.empty:
            default = "_specdsl_missing_"
            required.append(param.name)
        else:
            default = f"_specdsl_default_{i}_"
            names[default] = param.default
        if param.kind is param.KEYWORD_ONLY:
            keyword.append(f"{param.name}={default}")
            call.append(f"{param.name}={param.name}")
        else:
            positional.append(f"{param.name}={default}")
            call.append(param.name)
    signature = ", ".join(["self", *positional, "*_specdsl_extra_", *keyword,
                           "**_specdsl_unknown_"])
    bad = " or ".join(["_specdsl_extra_", "_specdsl_unknown_",
                       *(f"{n} is _specdsl_missing_" for n in required)])
    given = ", ".join(f"{n!r}: {n}" for n in required)
    source = (f"def __init__({signature}):\n"
              f"    if {bad}:\n"
              f"        _specdsl_refuse_({len(positional)}, _specdsl_extra_, "
              f"_specdsl_unknown_, {{{given}}})\n"
              f"    _specdsl_init_(self, {', '.join(call)})\n")
    filename = f"<specdsl __init__ {cls.__module__}.{cls.__qualname__} {id(cls):x}>"
    exec(compile(source, filename, "exec"), names)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    checked: Any = names["__init__"]
    checked.__qualname__ = f"{cls.__qualname__}.__init__"
    checked.__doc__ = init.__doc__
    checked.__wrapped__ = init  # inspect.signature(cls) shows attrs' own parameters
    result: Callable[..., None] = checked
    return result


class _Missing:
    """The default of a required field in the checked ``__init__``: nobody gave it."""

    def __repr__(self) -> str:
        return "<required>"


_MISSING = _Missing()


def _refuse_call(cls: type, n_positional: int, extra: tuple[Any, ...], unknown: dict[str, Any],
                 required: dict[str, Any]) -> None:
    """Raise the :class:`SpecArgumentError` for a bad call of ``cls``."""
    owner = cls.__qualname__
    fields = [f for f in attrs.fields(cls) if f.init]
    names = [getattr(f, "alias", None) or f.name.lstrip("_") for f in fields]
    if extra:
        by_position = [n for f, n in zip(fields, names, strict=True) if not f.kw_only]
        raise SpecArgumentError(
            f"{owner} takes at most {n_positional} field value(s) by position "
            f"({', '.join(by_position)}), got {n_positional + len(extra)}; name them: "
            f"{owner}({by_position[0] if by_position else 'field'}=...)")
    if unknown:
        raise SpecArgumentError(
            f"{owner} has no field {', '.join(map(repr, unknown))} (fields: "
            f"{', '.join(names)}){did_you_mean(unknown, names)}")
    roles = {n: role_of(f) for f, n in zip(fields, names, strict=True)}
    missing = [n for n, value in required.items() if value is _MISSING]
    raise SpecArgumentError(
        f"{owner} is missing required field(s) "
        f"{', '.join(f'{n!r} ({roles[n]})' for n in missing)} (no default): write "
        f"{owner}({', '.join(f'{n}=...' for n in missing)})")


def did_you_mean(unknown: Iterable[str], names: Sequence[str]) -> str:
    """``"; did you mean 'hidden'?"`` for each unknown name close to one of ``names``
    (:func:`difflib.get_close_matches`), or ``""``."""
    hints = [difflib.get_close_matches(name, names, n=1) for name in unknown]
    return "".join(f"; did you mean {hint[0]!r}?" for hint in hints if hint)


def _search_path(cls: type, template_dir: str | Path | None) -> tuple[str, ...]:
    if template_dir is None:
        return ()
    path = Path(template_dir)
    if not path.is_absolute():
        module_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
        path = (Path(module_file).parent if module_file else Path.cwd()) / path
    if not path.is_dir():
        raise SpecDefinitionError(f"{cls.__qualname__}: template_dir {str(path)!r} is not a folder")
    return (str(path.resolve()),)


def _transform(owner: str, cls: type, field: attrs.Attribute[Any]) -> attrs.Attribute[Any]:
    role = role_of(field)
    if role is None:
        raise SpecDefinitionError(
            f"{owner}.{field.name} has no role: declare it with baked(...) or launch(...)")
    if field.name in RESERVED:
        raise SpecDefinitionError(f"{owner}.{field.name}: the name is reserved "
                                  f"({', '.join(sorted(RESERVED))})")
    try:
        hints = typing.get_type_hints(cls)
    except NameError as exc:
        raise SpecDefinitionError(f"{owner}.{field.name}: annotation: {exc}") from None
    if field.name not in hints:
        default = field.default  # the annotation its default suggests, else float's
        kind = (type(default).__name__ if isinstance(default, (bool, int, float, str, enum.Enum))
                else "float")
        raise SpecDefinitionError(
            f"{owner}.{field.name} has no type annotation: write "
            f"'{field.name}: {kind} = {role}(...)' (int, float, bool, str, an Enum, ...)")
    try:
        coerce = make_coercer(owner, field.name, hints[field.name],
                              field.metadata.get(NONFINITE, False), ptx_text=role == BAKED,
                              choices=field.metadata.get(CHOICES))
    except TypeError as exc:  # the message already names owner.field
        raise SpecDefinitionError(str(exc)) from None
    user_converter: Any = field.converter
    # an attrs.Converter (takes_self / takes_field) is called with the instance and field
    in_context = CONVERTER is not None and isinstance(user_converter, CONVERTER)

    def convert(value: Any, instance: Any = None, attribute: Any = None) -> Any:
        try:
            value = (user_converter(value, instance, attribute) if in_context
                     else user_converter(value))
        except SpecError:
            raise
        except (ValueError, TypeError, AssertionError) as exc:
            raise refusal(cls, field.name, value, reason_of(exc)) from None
        return coerce(value)

    converter: Any = coerce if user_converter is None else convert
    if in_context and CONVERTER is not None:
        converter = CONVERTER(convert, takes_self=True, takes_field=True)
    # validators (made by baked()/launch()) raise SpecError themselves
    return field.evolve(converter=converter, eq=True, eq_key=canonical, hash=None)



def is_spec(obj: Any) -> bool:
    """True for a spec class made by :func:`kernel_spec` or an instance of one."""
    cls = obj if isinstance(obj, type) else type(obj)
    return isinstance(cls.__dict__.get("__specdsl__"), SpecInfo)


def spec_info(obj: Any) -> SpecInfo:
    """The :class:`SpecInfo` of a spec class or request.

    Raises:
        NotASpecError: ``obj`` is not a kernel spec (a ``TypeError`` too).
    """
    cls = obj if isinstance(obj, type) else type(obj)
    info = cls.__dict__.get("__specdsl__")
    if not isinstance(info, SpecInfo):
        raise NotASpecError(f"expected a @kernel_spec class or request, got {cls.__qualname__}")
    return info


def request_info(obj: Any) -> SpecInfo:
    """The :class:`SpecInfo` of a request: what every function that takes a request (render,
    the keys, the executor) asks first, so that each refuses the spec class alike.

    Raises:
        NotASpecError: ``obj`` is a spec class, not a request (``VectorAdd`` for
            ``VectorAdd()``: its fields would read as attrs' descriptors), or no kernel spec.
    """
    if isinstance(obj, type) and is_spec(obj):
        name = obj.__qualname__
        raise NotASpecError(f"{name} is a spec class; pass a request such as {name}(...)")
    return spec_info(obj)


def baked_values(spec: Any) -> dict[str, Any]:
    """``{name: value}`` of the request's baked fields, in declaration order.

    Raises:
        NotASpecError: ``spec`` is no request (a spec class, or no kernel spec).
    """
    return {name: getattr(spec, name) for name in request_info(spec).baked}


def launch_values(spec: Any) -> dict[str, Any]:
    """``{name: value}`` of the request's launch fields, in declaration order.

    Raises:
        NotASpecError: ``spec`` is no request (a spec class, or no kernel spec).
    """
    return {name: getattr(spec, name) for name in request_info(spec).launch}
