"""The checks a spec class passes against its template when it is defined.

:func:`~specdsl._spec.decorator.kernel_spec` reads the template's facts here (a template
that is missing or does not parse is a :class:`SpecDefinitionError`), then checks the
names the templates read and warns of baked fields none of them reads.
"""

from __future__ import annotations

import warnings

import jinja2

from .._templating.environment import (
    CONTEXT_NAMES,
    TemplateFacts,
    template_facts,
    template_loader,
    template_place,
)
from ..errors import SpecDefinitionError, UnreadFieldWarning

__all__ = ["read_facts", "check_names", "warn_unread", "LAUNCH_NOT_IN_PTX"]

#: Why a template may not read a launch field, and what to do.
LAUNCH_NOT_IN_PTX = ("launch fields never reach the PTX (make it baked(...) if the PTX "
                     "depends on it)")


def read_facts(owner: str, env: jinja2.Environment, template: str) -> TemplateFacts:
    """The facts of ``template`` (:func:`~specdsl._templating.environment.template_facts`).

    Raises:
        SpecDefinitionError: the template, or one it reaches, is missing, does not parse
            or uses a filter or test that does not exist; the message names the file and
            line (an included file's as a render error does: ``template 'main.ptx.j2'
            ('inc.ptx.j2' line 2, reached from it)``).
    """
    try:
        return template_facts(env, template)
    except jinja2.TemplateNotFound as exc:
        raise SpecDefinitionError(
            f"{owner}: template {exc.name!r} not found (searched: "
            f"{', '.join(template_loader(env).searchpath)})") from None
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
