"""Rendering a request to PTX: a pure function of (spec, target)."""

from __future__ import annotations

import enum
import re
from typing import Any

import jinja2

from .._base.digest import source_digest
from .._spec.decorator import LAUNCH_NOT_IN_PTX, request_info, spec_info
from .._spec.dtype import DType
from .._spec.target import Target
from .._templating.environment import template_location, template_place
from ..errors import RenderError, SpecdslError, UnsupportedTargetError

__all__ = ["render", "render_context", "rendering_digest", "renders_from_key"]

# A PTX module must open with these directives (PTX ISA 11.1-11.2); nvJitLink's own error
# for a module without them ("does not match type NVJITLINK_INPUT_PTX") says nothing useful.
_VERSION = re.compile(r"^\s*\.version\s", re.MULTILINE)
_TARGET = re.compile(r"^\s*\.target\s", re.MULTILINE)
# Control characters besides tab and newline (PTX ISA 4.1: source modules are ASCII text).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def render_context(spec: Any, target: Target | str | int = "sm_90") -> dict[str, Any]:
    """The variables a template sees: the baked fields, ``target`` and ``entry``.

    Launch fields are deliberately absent: a template cannot depend on them.

    Raises:
        NotASpecError: ``spec`` is no request (a spec class, or no kernel spec).
    """
    info = request_info(spec)
    context = {name: getattr(spec, name) for name in info.baked}
    context["target"] = Target.parse(target)
    context["entry"] = info.entry
    return context


def render(spec: Any, target: Target | str | int = "sm_90") -> str:
    """Render the PTX module text of ``spec`` for ``target``.

    The result is deterministic: the same text for equal requests and targets in
    every process, whatever ``PYTHONHASHSEED``.

    Args:
        spec: a request (an instance of a :func:`kernel_spec` class).
        target: a :class:`Target`, a string such as ``"sm_90"`` or ``"sm_90a"``, or a
            compute capability as an int (``90``).

    Returns:
        PTX text, ending in a newline, holding ``.entry <entry>``.

    Raises:
        NotASpecError: ``spec`` is no request (a spec class, or no kernel spec; a
            ``TypeError`` too).
        TargetError: a malformed target string.
        RenderError: a value the PTX type cannot hold, a template's ``require(...)``
            failure, a printed value that is not one line of printable ASCII, a control
            character in the text, or any template error, an exception the template's
            code raised included (a ``ZeroDivisionError`` of ``{{ n // 0 }}``); the message
            names the request and template (and the line, where the error has one).
        UnsupportedTargetError: a template's ``require_target(...)`` failure: a request
            this target cannot run (a :class:`RenderError` too).
    """
    info = request_info(spec)
    context = render_context(spec, target)
    try:
        text = info.env.get_template(info.template).render(context)
    except UnsupportedTargetError as exc:
        raise UnsupportedTargetError(f"{spec!r} for {context['target']}: {exc}", exc.reason,
                                     request=spec, target=str(context['target'])) from None
    except RenderError as exc:  # a filter's or require()'s refusal
        raise RenderError(f"{spec!r} for {context['target']}: {_where(info, exc)}{exc}") from None
    except jinja2.TemplateError as exc:
        raise _template_error(spec, exc) from exc
    except SpecdslError:
        raise
    except Exception as exc:  # Python raised in the template's code: 1 // 0, 1 + 'x'
        raise RenderError(f"{spec!r} for {context['target']}: {_where(info, exc)}"
                          f"{type(exc).__name__}: {exc}") from exc
    bad = _CONTROL.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        raise RenderError(f"{spec!r}: template {info.template!r} renders the control character "
                          f"{bad.group()!r} on PTX line {line}; PTX source is printable ASCII "
                          "lines (a NUL would end the text nvJitLink compiles)")
    if not re.search(rf"\.entry\s+{re.escape(info.entry)}(?![\w$])", text):  # not .entry kk
        raise RenderError(f"{spec!r}: template {info.template!r} defines no '.entry {info.entry}'")
    if not (_VERSION.search(text) and _TARGET.search(text)):
        raise RenderError(f"{spec!r}: template {info.template!r} renders no .version/.target "
                          "directive: start it with {% include \"header.ptx.j2\" %}")
    return text if text.endswith("\n") else text + "\n"


def template_crashed(exc: RenderError) -> bool:
    """Whether ``exc`` wraps an exception the template's own code raised (its
    ``__cause__``: ``{{ n // 0 }}``'s ``ZeroDivisionError``), a bug of the template, rather
    than a refusal (``require()``, a value a filter cannot write) or a Jinja error."""
    cause = exc.__cause__
    return cause is not None and not isinstance(cause, (SpecdslError, jinja2.TemplateError))


def _where(info: Any, exc: BaseException) -> str:
    """``"template 'x.ptx.j2' line 4: "`` where ``exc`` was raised in a template's code, as
    its traceback says, else ``""``."""
    place = template_location(info.env, exc)
    return f"{template_place(info.template, *place)}: " if place else ""


# Jinja's StrictUndefined message for a variable the context lacks.
_UNDEFINED = re.compile(r"'(\w+)' is undefined")
# ... and for an attribute an object lacks: "'specdsl._spec.dtype.DType object' has no ..."
_NO_ATTRIBUTE = re.compile(r"'([\w.]+) object' has no attribute '(\w+)'")
#: What a template reads of the values specdsl gives it (docs/writing-specs.md), by the
#: full name Jinja gives the class (a user's own class named DType is not one of them).
_TEMPLATE_ATTRIBUTES = {
    f"{DType.__module__}.DType": (
        "DType", "ptx, storage, bits, size, vector_lanes, is_float and name"),
    f"{Target.__module__}.Target": (
        "Target", "sm, arch, suffix, ptx_isa, ptx_version and compute_capability")}


def _template_error(spec: Any, exc: jinja2.TemplateError) -> RenderError:
    """A Jinja error as a :class:`RenderError` naming the request, the template and the
    file and line it came from: a launch field read through a dynamic include (which
    the definition-time check cannot see) is called one."""
    info = spec_info(spec)
    # a syntax error names its file and line; another error's are in its traceback
    place = ((exc.name, exc.lineno) if isinstance(exc, jinja2.TemplateSyntaxError) else
             template_location(info.env, exc) or (None, None))
    where = template_place(info.template, *place)
    undefined = _UNDEFINED.fullmatch(str(exc))
    if isinstance(exc, jinja2.UndefinedError) and undefined and undefined[1] in info.launch:
        return RenderError(f"{spec!r}: {where} reads launch field "
                           f"{undefined[1]!r}; {LAUNCH_NOT_IN_PTX}")
    missing = _NO_ATTRIBUTE.fullmatch(str(exc))
    if isinstance(exc, jinja2.UndefinedError) and missing and missing[1] in _TEMPLATE_ATTRIBUTES:
        kind, reads = _TEMPLATE_ATTRIBUTES[missing[1]]
        return RenderError(f"{spec!r}: {where}: a {kind} has no attribute {missing[2]!r} (a "
                           f"template reads {reads})")
    return RenderError(f"{spec!r}: {where}: {exc}")


def rendering_digest() -> str:
    """A SHA-256 of specdsl's own Python sources (hex): :func:`specdsl._base.digest.source_digest`.

    A derived key covers the request, its templates, the target and the Jinja version;
    the rest of what decides the rendered text is specdsl's code (filters such as
    ``f32``, the context, ``DType`` and ``Target`` properties). Together with a derived
    key, this digest names a rendering exactly, so a rendered PTX may be stored under it
    (the disk cache does, to skip rendering in a warm process). Computed once a process.
    """
    return source_digest()


def renders_from_key(spec: Any) -> bool:
    """Whether ``spec``'s PTX is decided by its derived key and :func:`rendering_digest`.

    True when every baked value is plain data (int, float, str, bool, None, tuples of
    them) or a member of a specdsl enum (``DType``): templates can call methods of a
    field's value, and a user type's methods are code that neither digest covers.
    """
    return all(_plain(getattr(spec, name)) for name in spec_info(spec).baked)


def _plain(value: Any) -> bool:
    kind = type(value)
    if kind in (int, float, str, bool) or value is None:
        return True
    if kind is tuple:
        return all(_plain(item) for item in value)
    return isinstance(value, enum.Enum) and kind.__module__.split(".")[0] == "specdsl"

