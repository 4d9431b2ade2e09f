"""The checks a spec class passes when it is defined: against its template, and its defaults.

:func:`~specdsl._spec.decorator.kernel_spec` reads the template's facts here (a template
that is missing or does not parse is a :class:`SpecDefinitionError`), then checks the
names the templates read and the ``.entry`` they declare, warns of baked fields none of
them reads, and refuses a default its own field refuses.
"""

from __future__ import annotations

import warnings
from typing import Any

import attrs
import jinja2

from .._templating.environment import (
    CONTEXT_NAMES,
    TemplateFacts,
    TemplateUnreadable,
    template_facts,
    template_loader,
    template_place,
)
from ..errors import SpecDefinitionError, SpecError, UnreadFieldWarning
from .fields import CONVERTER, is_factory

__all__ = ["read_facts", "check_names", "check_entry", "warn_unread", "check_defaults",
           "LAUNCH_NOT_IN_PTX"]

#: Why a template may not read a launch field, and what to do.
LAUNCH_NOT_IN_PTX = ("launch fields never reach the PTX (make it baked(...) if the PTX "
                     "depends on it)")


def read_facts(owner: str, env: jinja2.Environment, template: str) -> TemplateFacts:
    """The facts of ``template`` (:func:`~specdsl._templating.environment.template_facts`).

    Raises:
        SpecDefinitionError: the template, or one it reaches, is missing, cannot be read
            (it or its folder: permission denied), does not parse or uses a filter or test
            that does not exist; the message names the file and line (an included file's
            as a render error does: ``template 'main.ptx.j2' ('inc.ptx.j2' line 2, reached
            from it)``).
    """
    try:
        return template_facts(env, template)
    except jinja2.TemplateNotFound as exc:
        raise SpecDefinitionError(
            f"{owner}: template {exc.name!r} not found (searched: "
            f"{', '.join(template_loader(env).searchpath)})") from None
    except TemplateUnreadable as exc:
        raise SpecDefinitionError(f"{owner}: {exc}") from None
    except jinja2.TemplateSyntaxError as exc:
        hint = ""
        if "unknown tag" in (exc.message or ""):
            hint = (" (a PTX vector operand '{%r1, ...}' opens a Jinja tag: "
                    "write it with a space, '{ %r1, ... }')")
        raise SpecDefinitionError(
            f"{owner}: {template_place(template, exc.name, exc.lineno)}: "
            f"{exc.message}{hint}") from None


def check_names(owner: str, template: str, facts: TemplateFacts,
                baked_names: tuple[str, ...], launch_names: tuple[str, ...]) -> None:
    """Refuse a template (or one it reaches) that reads a launch field or a name that is
    neither a baked field nor a context name, naming the file that reads it."""
    for variable in sorted(facts.names):
        readers = facts.read_by(variable) or (template,)
        where = (f"template {template!r}" if readers == (template,) else
                 f"template {' and '.join(map(repr, readers))} (reached from {template!r})")
        if variable in launch_names:
            raise SpecDefinitionError(
                f"{owner}: {where} reads launch field {variable!r}; {LAUNCH_NOT_IN_PTX}")
        if variable not in baked_names and variable not in CONTEXT_NAMES:
            raise SpecDefinitionError(
                f"{owner}: {where} reads {variable!r}, which is neither a baked "
                f"field ({', '.join(baked_names) or 'none'}) nor a context name "
                f"({', '.join(sorted(CONTEXT_NAMES))})")


def warn_unread(owner: str, template: str, facts: TemplateFacts,
                baked_names: tuple[str, ...], stacklevel: int) -> None:
    """Warn (:class:`UnreadFieldWarning`) of baked fields no template reached reads; a
    dynamic include could read any, so then nothing is said."""
    unread = [f for f in baked_names if f not in facts.names]
    if unread and not facts.dynamic:
        warnings.warn(UnreadFieldWarning(
            f"{owner}: template {template!r} never reads baked field(s) "
            f"{', '.join(unread)}: each value compiles identical PTX under its own key "
            "(make them launch(...) fields, or read them in the template)"),
            stacklevel=stacklevel + 1)


def check_entry(owner: str, template: str, entry: str, facts: TemplateFacts) -> None:
    """Refuse a template whose ``.entry`` declarations all name, in literal text, another
    kernel than the spec's ``entry`` (a render would find no ``.entry <entry>``).

    Read from the sources, without rendering (:func:`~specdsl._templating.environment.
    declared_entries`): a declaration whose name an expression makes (``.entry
    {{ entry }}``), a dynamic include, or templates without any declaration leave the
    check to render time.
    """
    names = [name for _, name in facts.entries]
    if facts.dynamic or not names or None in names or entry in names:
        return
    files = sorted({file for file, _ in facts.entries})
    where = (f"template {template!r}" if files == [template] else
             f"template {' and '.join(map(repr, files))} (reached from {template!r})")
    declared = " and ".join(f"'.entry {name}'" for name in dict.fromkeys(names))
    raise SpecDefinitionError(
        f"{owner}: {where} declares {declared}, but the spec's entry is {entry!r}: write "
        f"'.entry {{{{ entry }}}}' in the template, or entry={names[0]!r}")



def check_defaults(cls: type) -> None:
    """Refuse a default that its own field refuses (its type, converter or validators),
    which every request leaving the field out would otherwise meet.

    Each default goes through its field's converter, then its validators, as in a
    request: on a stand-in request that holds the defaults (a validator comparing
    defaults sees them). What cannot be judged without a request is left to requests:
    a factory default, and a converter or validator that reads a field without a default
    (an ``AttributeError`` here).

    Raises:
        SpecDefinitionError: naming the field, the default and what was expected.
    """
    stand_in: Any = object.__new__(cls)  # frozen: set fields as attrs' __init__ does
    checked = []
    for field in attrs.fields(cls):
        if field.default is attrs.NOTHING or is_factory(field.default):
            continue
        try:
            value = _convert(field, field.default, stand_in)
        except AttributeError:  # reads a field without a default: only a request can tell
            continue
        except SpecError as exc:
            raise _refused(cls, field, exc) from None
        object.__setattr__(stand_in, field.name, value)
        checked.append((field, value))
    for field, value in checked:  # validators run once every value is set, as in __init__
        try:
            if field.validator is not None:
                field.validator(stand_in, field, value)
        except AttributeError:
            continue
        except SpecError as exc:
            raise _refused(cls, field, exc) from None


def _refused(cls: type, field: attrs.Attribute[Any], exc: SpecError) -> SpecDefinitionError:
    return SpecDefinitionError(f"{cls.__qualname__}.{field.name}: the default "
                               f"{field.default!r} is refused: {exc}")


def _convert(field: attrs.Attribute[Any], value: Any, instance: Any) -> Any:
    """``value`` through ``field``'s converter, as attrs' ``__init__`` calls it."""
    converter: Any = field.converter
    if converter is None:
        return value
    if CONVERTER is None or not isinstance(converter, CONVERTER):
        return converter(value)
    wrapped: Any = converter  # an attrs.Converter: given the instance and field it asks for
    extra = ([instance] if wrapped.takes_self else []) + (
        [field] if wrapped.takes_field else [])
    return wrapped.converter(value, *extra)
