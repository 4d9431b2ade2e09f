"""The Jinja environments that render PTX, and static facts about templates.

One ``Environment`` per template search path (the built-in ``templates/`` alone,
or a spec's ``template_dir`` before it), built once and never mutated after.
Each template file is read once per process and pinned (``auto_reload=False``,
unbounded cache, a loader that keeps the text), so the source a derived key
digests is exactly the source that renders. A template or folder that cannot be
read is a :class:`TemplateUnreadable`, never "not found".
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import jinja2
from jinja2 import meta

from ..errors import RenderError, TemplatesMissingError, UnsupportedTargetError
from . import cache as templatecache
from . import immediates
from .immediates import is_ptx_text

__all__ = ["builtin_template_dir", "environment", "template_loader", "TemplateUnreadable",
           "TemplateFacts",
           "template_facts", "template_path", "template_location", "template_place",
           "declared_entries",
           "CONTEXT_NAMES"]

#: Names every template may read besides the spec's baked fields.
CONTEXT_NAMES = frozenset({"target", "entry"})


def builtin_template_dir() -> Path:
    """The folder of specdsl's own templates: inside the wheel, or the checkout's ``templates/``.

    Raises:
        TemplatesMissingError: neither folder exists (a broken install).
    """
    here = Path(__file__).resolve().parent.parent  # the specdsl package
    for candidate in (here / "_templates", here.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise TemplatesMissingError(
        f"specdsl's templates are missing (looked in {here / '_templates'} and "
        f"{here.parent / 'templates'}): reinstall specdsl")


def _require(condition: Any, message: str) -> str:
    """Template global: ``{{ require(hidden % 8 == 0, "hidden must be a multiple of 8") }}``."""
    if not condition:
        raise RenderError(message)
    return ""


def _require_target(condition: Any, message: str) -> str:
    """Template global for what the target must support:
    ``{{ require_target(target.arch >= 90, "add.rn.bf16x2 needs sm_90 or newer") }}``
    raises :class:`UnsupportedTargetError` (a request this target cannot run)."""
    if not condition:
        raise UnsupportedTargetError(message)
    return ""


def _finalize(value: Any) -> Any:
    # A raw float would print as "1e-06", which is no PTX immediate; a bool as "True".
    if isinstance(value, bool):
        raise RenderError(f"template printed the bool {value!r}; test it with {{% if %}} instead")
    if isinstance(value, float):
        raise RenderError(f"template printed the raw float {value!r}; "
                          "write it through an immediate filter such as |f32 or |f64")
    if isinstance(value, str):  # a macro's output may span lines; nothing may hold controls
        bad = _NOT_TEXT.search(value)
        if bad:
            raise RenderError(f"template printed {value!r}, which holds {bad.group()!r}: PTX "
                              "source is printable ASCII text in lines")
        return value
    text = str(value)  # an object's text (an enum member's, a user type's) is one line
    if not is_ptx_text(text):
        raise RenderError(f"template printed {value!r} as {text!r}, which is not one line of "
                          "printable ASCII: PTX source is ASCII, one statement a line")
    return text


# Anything but printable ASCII, tab and newline (PTX ISA 4.1 "Source Format").
_NOT_TEXT = re.compile(r"[^\t\n\x20-\x7e]")


def _int_filter(ptx_type: str) -> Callable[[Any], str]:
    return lambda value: immediates.integer(value, ptx_type)


class _Template(jinja2.Template):
    """A Template whose render lets a refused immediate name its baked field
    (:func:`specdsl._templating.immediates.rendering`)."""

    def render(self, *args: Any, **kwargs: Any) -> str:
        with immediates.rendering(dict(*args, **kwargs)):
            return super().render(*args, **kwargs)


class TemplateUnreadable(jinja2.TemplateError):
    """A template file, or a folder of the search path, that exists but cannot be read.

    Attributes:
        name: the template; ``path``: the file or folder; ``reason``: ``permission denied``.
    """

    def __init__(self, name: str, path: str, reason: str, folder: bool = False) -> None:
        self.name, self.path, self.reason = name, path, reason
        super().__init__(f"cannot read template {name!r} ({'folder' if folder else 'file'} "
                         f"{path!r}): {reason}")


_DENIED = (errno.EACCES, errno.EPERM)


class _PinnedLoader(jinja2.FileSystemLoader):
    """A FileSystemLoader that reads each template once per process and keeps that text.

    The source a derived key digests is then always the source that renders, even if
    the file is edited while the process runs (the edit is seen by the next process).
    A file or folder that cannot be read is a :class:`TemplateUnreadable`: Jinja's loader
    raises a bare ``PermissionError`` for the one and skips the other (the template is
    then "not found", or found in a later folder, silently).
    """

    def __init__(self, searchpath: list[str]) -> None:
        super().__init__(searchpath)
        self._pinned: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def get_source(self, environment: jinja2.Environment, template: str
                   ) -> tuple[str, str, Callable[[], bool]]:
        with self._lock:
            pinned = self._pinned.get(template)
            if pinned is None:
                self._check_folders(template)
                try:
                    source, filename, _ = super().get_source(environment, template)
                except jinja2.TemplateNotFound:  # an OSError too
                    raise
                except OSError as exc:
                    reason = "permission denied" if exc.errno in _DENIED else exc.strerror
                    raise TemplateUnreadable(template, str(exc.filename), str(reason)) from None
                pinned = self._pinned[template] = (source, filename)
        return pinned[0], pinned[1], lambda: True

    def _check_folders(self, template: str) -> None:
        """Refuse a folder that cannot be searched, up to the one that holds ``template``."""
        pieces = jinja2.loaders.split_template_path(template)
        for folder in self.searchpath:
            for piece in pieces:
                try:
                    os.stat(os.path.join(folder, piece))
                except OSError as exc:
                    if exc.errno in _DENIED:
                        raise TemplateUnreadable(template, folder, "permission denied",
                                                 folder=True) from None
                    break
                folder = os.path.join(folder, piece)
            else:
                return  # found here


def template_loader(env: jinja2.Environment) -> jinja2.FileSystemLoader:
    """The loader of one of :func:`environment`'s Environments (its search path, pinned).

    Raises:
        TypeError: ``env`` is not one of them.
    """
    loader = env.loader
    if not isinstance(loader, jinja2.FileSystemLoader):
        raise TypeError(f"{env!r} is not a specdsl template environment")
    return loader


@functools.cache
def environment(search_path: tuple[str, ...] = ()) -> jinja2.Environment:
    """The shared Environment for ``search_path`` folders searched before the built-in ones.

    Filters: ``f32``, ``f64`` (exact ``0f``/``0d`` immediates), ``f16``, ``bf16``
    (``0xXXXX`` bit patterns), ``u32``, ``s32``, ``u64``, ``s64`` (range-checked
    decimals); a float filter's refusal names the baked field holding the value
    (:func:`~specdsl._templating.immediates.naming_field`). Globals:
    ``require(condition, message)`` raises :class:`RenderError`;
    ``require_target(condition, message)`` raises :class:`UnsupportedTargetError`.
    Printing a raw float or bool is a :class:`RenderError`, and so is printing text that
    holds a character other than printable ASCII, tab and newline, or an object whose
    text is not one line of printable ASCII (PTX ISA 4.1: source is ASCII lines). A
    baked ``str`` is one line by construction (see :func:`specdsl._spec.fields.baked`).
    """
    env = jinja2.Environment(
        loader=_PinnedLoader([*search_path, str(builtin_template_dir())]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
        cache_size=-1,
        finalize=_finalize,
        bytecode_cache=templatecache.bytecode_cache(),  # verified, or None when off
    )
    env.template_class = _Template  # before any template loads
    env.filters.update(
        **{name: immediates.naming_field(getattr(immediates, name))
           for name in ("f32", "f64", "f16", "bf16")},
        **{name: _int_filter(name) for name in ("u32", "s32", "u64", "s64")},
    )
    env.globals["require"] = _require
    env.globals["require_target"] = _require_target
    return env


@attrs.frozen
class TemplateFacts:
    """What a template and everything it includes or imports reads and is made of.

    Attributes:
        names: every variable the templates read that they do not define themselves.
        sources: ``(template name, sha256 of its source)`` for each template reached.
        dynamic: True where an include or import names its template at render time;
            then ``sources`` covers every template on the search path.
        digest: one sha256 over ``sources``.
        readers: ``(name, templates that read it)`` for each name in ``names``, sorted:
            which file to blame for a name it may not read.
        entries: ``(template, name)`` for each ``.entry`` declaration in the templates'
            text, sorted: ``name`` is the literal PTX name (``.entry scale(``), or ``None``
            where an expression makes it (``.entry {{ entry }}``). See :func:`declared_entries`.
    """

    names: frozenset[str]
    sources: tuple[tuple[str, str], ...]
    dynamic: bool
    digest: str
    readers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    entries: tuple[tuple[str, str | None], ...] = ()

    def read_by(self, name: str) -> tuple[str, ...]:
        """The templates (names, as included) that read ``name``, in sorted order."""
        return dict(self.readers).get(name, ())


@functools.cache
def _file_facts(env: jinja2.Environment, name: str
                ) -> tuple[str, frozenset[str], tuple[str | None, ...]]:
    # One template file's (source digest, undeclared names, referenced templates). Files
    # are pinned per environment, so this is computed once however many specs share them.
    source, filename, _ = template_loader(env).get_source(env, name)
    digest = hashlib.sha256(source.encode()).hexdigest()
    cached = templatecache.load_facts(digest)
    if cached is not None:
        return (digest, *cached)
    tree = env.parse(source, name, filename)
    try:
        names = frozenset(meta.find_undeclared_variables(tree))
    except jinja2.TemplateAssertionError as exc:
        # meta compiles the tree under the name "<introspection>": an unknown filter or
        # test found there would name no file. Give it this template's name and file.
        raise jinja2.TemplateAssertionError(exc.message or str(exc), exc.lineno, name,
                                            filename) from None
    refs = tuple(meta.find_referenced_templates(tree))
    templatecache.store_facts(digest, names, refs)
    return digest, names, refs


# ".entry", the name after it (a PTX identifier) and the character after that.
_ENTRY = re.compile(r"(?<![\w$.])\.entry(?![\w$])[ \t]*"
                    r"(?P<name>[A-Za-z_$%][\w$]*)?(?P<next>[\s\S]?)")
_JINJA_COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)


def declared_entries(source: str) -> tuple[str | None, ...]:
    """The ``.entry`` declarations in a template's source, read as text, without rendering.

    Each is the literal PTX name (``.entry scale(`` gives ``"scale"``) or ``None`` where
    the name is not all literal text (``.entry {{ entry }}``, ``.entry k_{{ n }}``).
    Declarations in Jinja comments and after a PTX ``//`` on their line are left out.
    """
    found: list[str | None] = []
    text = _JINJA_COMMENT.sub("", source)
    for match in _ENTRY.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if "//" in text[line_start:match.start()]:
            continue
        literal = match["name"] and match["next"] != "{"  # "{{"/"{%": the name goes on
        found.append(match["name"] if literal else None)
    return tuple(found)


def template_facts(env: jinja2.Environment, name: str) -> TemplateFacts:
    """Walk ``name`` and the templates it includes, imports or extends.

    Reads each one through ``env``'s pinned loader, so later renders use exactly the
    digested sources. Templates are compiled lazily, at their first render.

    Raises:
        jinja2.TemplateNotFound: ``name`` or a template it references does not exist.
        jinja2.TemplateSyntaxError: a template does not parse, or uses a filter or test
            the environment lacks outside an ``{% if %}`` (a ``TemplateAssertionError``);
            its ``name`` and ``lineno`` are the file's own, an included one's too.
    """
    names: set[str] = set()
    sources: dict[str, str] = {}
    readers: dict[str, set[str]] = {}
    dynamic = False
    pending = [name]
    while pending:
        current = pending.pop()
        if current in sources:
            continue
        sources[current], read, references = _file_facts(env, current)
        names |= read
        for variable in read:
            readers.setdefault(variable, set()).add(current)
        for ref in references:
            if ref is None:
                dynamic = True
            else:
                pending.append(ref)
    if dynamic:  # cannot know which template renders: cover them all
        for other in env.list_templates():
            if other not in sources:
                source, _, _ = template_loader(env).get_source(env, other)
                sources[other] = hashlib.sha256(source.encode()).hexdigest()
    names -= set(env.globals)
    ordered = tuple(sorted(sources.items()))
    digest = hashlib.sha256()
    for item_name, item_digest in ordered:
        digest.update(f"{len(item_name)}:{item_name}={item_digest};".encode())
    return TemplateFacts(frozenset(names), ordered, dynamic, digest.hexdigest(),
                         tuple(sorted((n, tuple(sorted(readers[n]))) for n in names)),
                         _entries(env, [n for n, _ in ordered]))


def _entries(env: jinja2.Environment, names: list[str]) -> tuple[tuple[str, str | None], ...]:
    """``(template, entry name or None)`` of each ``.entry`` in the named templates."""
    loader = template_loader(env)
    return tuple((name, entry) for name in names
                 for entry in declared_entries(loader.get_source(env, name)[0]))


def template_location(env: jinja2.Environment, exc: BaseException) -> tuple[str, int] | None:
    """``(template name, line)`` of the innermost template frame in ``exc``'s traceback
    (Jinja gives a template's code the template's file and line numbers), or ``None``."""
    loader = env.loader
    if not isinstance(loader, _PinnedLoader):
        return None
    with loader._lock:
        files = {filename: name for name, (_, filename) in loader._pinned.items()}
    found = None
    tb = exc.__traceback__
    while tb is not None:
        name = files.get(tb.tb_frame.f_code.co_filename)
        if name is not None:
            found = (name, tb.tb_lineno)
        tb = tb.tb_next
    return found


def template_place(template: str, name: str | None, line: int | None) -> str:
    """Where in a spec's ``template`` an error is, as messages say it: ``template
    'vec.ptx.j2' line 4``, or in a file it reaches, ``template 'vec.ptx.j2' ('inc.ptx.j2'
    line 2, reached from it)``; without a ``line``, ``template 'vec.ptx.j2'``."""
    if not line:
        return f"template {template!r}"
    if name is None or name == template:
        return f"template {template!r} line {line}"
    return f"template {template!r} ({name!r} line {line}, reached from it)"


def template_path(env: jinja2.Environment, name: str) -> str:
    """The file a template name resolves to on ``env``'s search path."""
    _, filename, _ = template_loader(env).get_source(env, name)
    return os.fspath(filename)
