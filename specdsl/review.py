"""The review workflow: ``specdsl diff``, ``specdsl verify`` and ``specdsl render --out``.

Each command turns requests into PTX (and, for ``verify``, cubins) without a GPU,
so it can run on a laptop or in CI. Request words follow the CLI's grammar: a
``SPEC`` (built-in name or ``package.module:ClassName``) followed by its
``field=value`` assignments; a word without ``=`` starts the next spec.
"""

from __future__ import annotations

import argparse
import difflib
import enum
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Sequence

import attrs

from .compile import CompileOptions, compile_ptx
from .errors import CompileError, ConfigError, RenderError, SpecError, UnsupportedTargetError
from .grid import pinned_grid, representative_request, spec_grid
from .keys import derived_key
from .render import render
from .requests import builtin_specs, format_request, parse_request, resolve_spec, spec_name
from .resources import Resources
from .spec import spec_info
from .target import Target

__all__ = ["command_diff", "command_verify", "write_renders", "split_requests",
           "collect_requests", "request_label", "render_file_name", "render_file_text",
           "Verified", "verify_request"]


# --- requests from words -------------------------------------------------------------------

def split_requests(words: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Group CLI words into ``[(SPEC, [field=value, ...]), ...]``.

    A word holding ``=`` assigns a field of the spec named before it; any other
    word names the next spec.

    Raises:
        SpecError: an assignment before any spec.
    """
    groups: list[tuple[str, list[str]]] = []
    for word in words:
        if "=" in word:
            if not groups:
                raise SpecError(f"{word!r} assigns a field before any SPEC was named")
            groups[-1][1].append(word)
        else:
            groups.append((word, []))
    return groups


def _dedupe_by_key(requests: list[Any], target: Target) -> list[Any]:
    seen: set[str] = set()
    kept = []
    for request in requests:
        key = derived_key(request, target)
        if key not in seen:
            seen.add(key)
            kept.append(request)
    return kept


def _pinned_values(cls: type, assignments: list[str]) -> dict[str, Any]:
    """``{field: value}`` of the assigned fields, parsed and checked by the field's type."""
    if not assignments:
        return {}
    names = [item.partition("=")[0].strip() for item in assignments]
    # fields without a default that the words leave open take the grid's first value,
    # only so that one whole request can be built to parse and check the others
    first = None
    filled = []
    for f in attrs.fields(cls):
        if f.default is attrs.NOTHING and f.name not in names:
            first = first if first is not None else spec_grid(cls)[0]
            filled.append(f"{f.name}={_value_word(getattr(first, f.name))}")
    named = parse_request(cls, filled + list(assignments))
    return {name: getattr(named, name) for name in names}


def collect_requests(words: Sequence[str], *, grid: bool, target: Target) -> list[Any]:
    """The requests named by CLI words, or each grid with those fields pinned.

    A SPEC without field words stands for its default request (or, for a class with
    a field that has no default, the first request of its ``variants``).

    Requests that share a derived key (they differ only in launch fields) are kept
    once, the first in order.

    Raises:
        SpecError: an unknown spec or field, or an invalid value.
    """
    requests: list[Any] = []
    for name, assignments in split_requests(words):
        cls = resolve_spec(name)
        if grid:
            requests.extend(pinned_grid(cls, _pinned_values(cls, assignments)))
        elif assignments:
            requests.append(parse_request(cls, assignments))
        else:
            requests.append(representative_request(cls))
    return _dedupe_by_key(requests, target)


def _value_word(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(_value_word(v) for v in value)
    if value is None:
        return "none"
    return repr(value) if isinstance(value, float) else str(value)


def request_label(spec: Any) -> str:
    """The request as CLI words with its baked fields only: ``vectoradd dtype=f16``.

    Launch fields are left out: they never change the PTX or the cubin.
    """
    info = spec_info(spec)
    words = [spec_name(type(spec))]
    words += [f"{name}={_value_word(getattr(spec, name))}" for name in info.baked]
    return " ".join(words)


def _json_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, (str, int)) else value.name
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


# --- render --out --------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]+")
#: File names longer than this drop their field part (the digest keeps them unique).
MAX_NAME = 120


def render_file_name(spec: Any, key: str) -> str:
    """A readable, unique file name: ``vectoradd-dtype_f16-3f1c2a9b4d5e.ptx``.

    The class name, each baked field as ``name_value``, and the first 12 hex digits
    of the derived key's digest (the full key is in the file's header).
    """
    info = spec_info(spec)
    digest = key.rsplit("-", 1)[-1][:12]
    parts = [f"{name}_{_UNSAFE.sub('_', _value_word(getattr(spec, name)))}"
             for name in info.baked]
    stem = type(spec).__name__.lower()
    name = "-".join([stem, *parts, digest]) + ".ptx"
    if len(name) > MAX_NAME:
        name = f"{stem}-{digest}.ptx"
    return name


def render_file_text(spec: Any, target: Target, ptx: str, key: str) -> str:
    """The PTX with a header comment naming the spec, its baked fields, target and key."""
    info = spec_info(spec)
    lines = [
        "// Rendered by `specdsl render --out` for review; regenerate it, do not edit it.",
        f"// request:     {request_label(spec)}",
        f"// spec class:  {info.cls_name} (template {info.template}, entry {info.entry})",
        f"// target:      {target.sm} (PTX ISA {target.ptx_isa})",
        f"// derived key: {key}",
        "",
    ]
    return "\n".join(lines) + ptx


def write_renders(args: argparse.Namespace) -> int:
    """``specdsl render SPEC [field=value ...] [SPEC ...] [--grid] --out DIR``.

    Writes one ``.ptx`` file per distinct derived key into ``DIR`` (created if
    missing) and prints each path written, in request order. The output is a pure
    function of the requests, the templates and the target: rerunning it rewrites
    identical files, so a template change shows up as a diff in code review.

    Returns:
        0.

    Raises:
        SpecError: ``--grid`` without ``--out``, an unknown spec or field, or an invalid
            value.
        RenderError: a request that does not render.
    """
    if not args.out:
        raise SpecError("render --grid writes one file per request: give --out DIR")
    target = Target.parse(args.target)
    requests = collect_requests([args.spec, *args.fields], grid=args.grid, target=target)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for request in requests:
        key = derived_key(request, target)
        path = out / render_file_name(request, key)
        try:
            ptx = render(request, target)
        except UnsupportedTargetError as exc:  # a request this target cannot run
            print(f"skipped {request_label(request)}: {exc.reason}", file=sys.stderr)
            continue
        text = render_file_text(request, target, ptx, key)
        with open(path, "w", newline="\n") as stream:
            stream.write(text)
        print(os.fspath(path))
    return 0


# --- diff ----------------------------------------------------------------------------------

def _diff_words(args: argparse.Namespace) -> tuple[str, list[str], list[str] | None, Target,
                                                    Target | None]:
    """SPEC, A's and B's assignments (None: no '--'), target A and target B from the words."""
    target, target_b = args.target, args.target_b
    words = list(args.words)
    a_words: list[str] = []
    b_words: list[str] | None = None
    spec = None
    i = 0
    while i < len(words):
        word = words[i]
        option, eq, inline = word.partition("=")
        if option in ("--target", "--target-b"):
            if eq:
                text = inline
            elif i + 1 < len(words):
                i += 1
                text = words[i]
            else:
                raise SpecError(f"{option} needs a value such as sm_90")
            parsed = Target.parse(text)
            if option == "--target":
                target = parsed
            else:
                target_b = parsed
        elif word == "--" and b_words is None:
            b_words = []
        elif word.startswith("-"):
            raise SpecError(f"unknown option {word!r} (diff takes --target and --target-b)")
        elif spec is None:
            if "=" in word:
                raise SpecError(f"diff needs SPEC before its fields (got {word!r})")
            spec = word
        elif "=" not in word:
            raise SpecError(f"expected field=value (got {word!r}); diff compares one SPEC")
        elif b_words is None:
            a_words.append(word)
        else:
            b_words.append(word)
        i += 1
    if spec is None:
        raise SpecError("diff needs a SPEC: specdsl diff SPEC a=1 -- a=2")
    return spec, a_words, b_words, Target.parse(target), (
        Target.parse(target_b) if target_b is not None else None)


def command_diff(args: argparse.Namespace) -> int:
    """``specdsl diff SPEC [field=value ...] -- [field=value ...]``: PTX of two requests.

    Request B starts from request A's values and applies B's assignments, so
    ``diff rmsnorm hidden=4096 -- hidden=8192`` changes one field. With
    ``--target-b`` (B's target; default ``--target``) one request is compared
    across two targets. Prints a unified diff headed by the two derived keys, or one
    ``identical`` line.

    Returns:
        0 when the two renders are identical, 1 when they differ.

    Raises:
        SpecError: no request B (neither ``--`` nor ``--target-b``), an unknown spec
            or field, or an invalid value.
        RenderError: a request that does not render.
    """
    name, a_words, b_words, target_a, target_b = _diff_words(args)
    if b_words is None and target_b is None:
        raise SpecError("diff needs request B: give its fields after '--' "
                        "(SPEC a=1 -- a=2) or a second target (--target-b sm_90a)")
    cls = resolve_spec(name)
    spec_a = parse_request(cls, a_words)
    overridden = {word.partition("=")[0].strip() for word in b_words or []}
    kept = [word for word in a_words if word.partition("=")[0].strip() not in overridden]
    spec_b = parse_request(cls, kept + (b_words or []))
    target_b = target_b or target_a
    ptx_a, ptx_b = render(spec_a, target_a), render(spec_b, target_b)
    key_a, key_b = derived_key(spec_a, target_a), derived_key(spec_b, target_b)
    about_a = f"{key_a} ({format_request(spec_a)}, {target_a.sm})"
    about_b = f"{key_b} ({format_request(spec_b)}, {target_b.sm})"
    if ptx_a == ptx_b:
        if key_a == key_b:
            print(f"identical: {format_request(spec_a)} and {format_request(spec_b)} render "
                  f"the same PTX for {target_a.sm} (derived key {key_a})")
        else:
            print(f"identical: {about_a} and {about_b} render the same PTX")
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        ptx_a.splitlines(True), ptx_b.splitlines(True), about_a, about_b))
    return 1


# --- verify --------------------------------------------------------------------------------

@attrs.frozen
class Verified:
    """One request compiled by ``verify``.

    Attributes:
        request: the request; ``target``: what it was compiled for.
        key: its derived key.
        resources: one record per ``.entry`` of the module (empty on error).
        seconds: nvJitLink wall-clock time, in seconds (0.0 on error).
        violations: why the request fails the run's limits (empty: it passes).
        error: the render or compile error message, or ``None``.
        skipped: why the target cannot run the request (its template's
            ``require_target``), or ``None``; a skipped request neither passes nor fails.
    """

    request: Any
    target: Target
    key: str
    resources: tuple[Resources, ...]
    seconds: float
    violations: tuple[str, ...]
    error: str | None = None
    skipped: str | None = None


def verify_request(request: Any, target: Target | str, *, no_spills: bool = False,
                   max_registers: int | None = None,
                   compile_options: CompileOptions | None = None) -> Verified:
    """Render and compile ``request`` for ``target`` with nvJitLink; check the limits.

    A render or compile failure is returned (``error`` and one violation), not
    raised, so a grid run reports every failing request. ``compile_options`` are
    nvJitLink's (``-lineinfo``, ``-maxrregcount``, ``-g``); none by default.

    Raises:
        CompileError: nvJitLink's log has no resource report for the spec's entry.
    """
    target = Target.parse(target)
    key = derived_key(request, target)
    try:
        compiled = compile_ptx(render(request, target), target, spec=request,
                               options=compile_options)
    except UnsupportedTargetError as exc:
        return Verified(request, target, key, (), 0.0, (), skipped=exc.reason)
    except (RenderError, CompileError) as exc:
        message = str(exc)
        return Verified(request, target, key, (), 0.0,
                        (f"{type(exc).__name__}: {message.splitlines()[0]}",), message)
    found = compiled.resources()
    entry = spec_info(request).entry
    if entry not in found:
        raise CompileError(f"nvJitLink's info log for {request!r} has no resource report "
                           f"for entry {entry!r}:\n{compiled.log}", log=compiled.log,
                           spec=request)
    violations = []
    for item in found.values():
        if no_spills and item.spills and item.spills_reported:
            violations.append(f"{item.entry} spills {item.spill_stores} bytes (stores) and "
                              f"{item.spill_loads} bytes (loads) per thread (--no-spills)")
        elif no_spills and item.spills:
            violations.append(f"{item.entry} has a {item.stack_frame}-byte stack frame per "
                              f"thread, counted as spills: nvJitLink's log gave no spill "
                              f"figures (--no-spills)")
        if max_registers is not None and item.registers > max_registers:
            violations.append(f"{item.entry} uses {item.registers} registers, more than "
                              f"--max-registers {max_registers}")
    return Verified(request, target, key, tuple(found.values()), compiled.seconds,
                    tuple(violations))


_COLUMNS = ("regs", "spill-st", "spill-ld", "stack", "smem", "cmem", "compile")


def _table(results: list[Verified]) -> list[str]:
    rows = []
    for result in results:
        label = request_label(result.request)
        if result.error is not None:
            rows.append((label, "-", ("error",) + ("",) * (len(_COLUMNS) - 1)))
        if result.skipped is not None:
            rows.append((label, "-", ("skipped",) + ("",) * (len(_COLUMNS) - 1)))
        for item in result.resources:
            rows.append((label, item.entry, (
                str(item.registers), *((str(item.spill_stores), str(item.spill_loads))
                                       if item.spills_reported else ("?", "?")),
                str(item.stack_frame), str(item.shared_memory), str(item.constant_memory),
                f"{result.seconds * 1000:.0f} ms")))
    width = max([len("request")] + [len(r[0]) for r in rows])
    entry_width = max([len("entry")] + [len(r[1]) for r in rows])
    widths = [max([len(c)] + [len(r[2][i]) for r in rows]) for i, c in enumerate(_COLUMNS)]

    def line(label: str, entry: str, cells: Sequence[str]) -> str:
        text = f"{label:<{width}}  {entry:<{entry_width}}"
        text += "".join(f"  {cell:>{w}}" for cell, w in zip(cells, widths))
        return text.rstrip()
    return [line("request", "entry", _COLUMNS)] + [line(*row) for row in rows]


def _as_json(result: Verified) -> dict[str, Any]:
    request = result.request
    return {
        "spec": spec_name(type(request)),
        "request": request_label(request),
        "fields": {f.name: _json_value(getattr(request, f.name))
                   for f in attrs.fields(type(request))},
        "derived_key": result.key,
        "target": result.target.sm,
        "resources": [item.as_dict() for item in result.resources],
        "compile_seconds": result.seconds,
        "violations": list(result.violations),
        "error": result.error,
        "skipped": result.skipped,
    }


def command_verify(args: argparse.Namespace) -> int:
    """``specdsl verify [SPEC [field=value ...] ...] [--grid]``: compile and report.

    Compiles each request with nvJitLink for ``--target`` (no GPU needed) and prints
    one table row per entry: registers, spill stores and loads, stack frame (bytes
    per thread), static shared memory (bytes per CTA), constant memory (bytes) and
    compile time. Without SPEC, every built-in spec's default request (or grid).
    ``--no-spills`` and ``--max-registers N`` turn resource usage into failures,
    each printed as ``FAIL <request>: <why>``. A request the target cannot run (its
    template's ``require_target``, e.g. bf16 arithmetic on sm_80) is reported as
    ``SKIP <request>: <why>`` and neither passes nor fails. With ``--json``, a JSON array with
    one object per request instead. On a terminal, ``[i/n]`` progress goes to stderr.

    Returns:
        0 when every request compiles within the limits, else 1.

    Raises:
        SpecError: an unknown spec or field, an invalid value, or a bad limit.
        ConfigError: a bad ``--maxrregcount``.
    """
    target = Target.parse(args.target)
    try:
        options = CompileOptions(lineinfo=args.lineinfo, max_registers=args.maxrregcount,
                                 debug=args.debug)
    except ConfigError as exc:
        raise ConfigError(f"--maxrregcount {args.maxrregcount}: {exc}") from None
    if args.max_registers is not None and args.max_registers < 1:
        raise SpecError(f"--max-registers must be a positive int (got {args.max_registers})")
    words = list(args.specs) or list(builtin_specs())
    requests = collect_requests(words, grid=args.grid, target=target)
    progress = len(requests) > 1 and sys.stderr.isatty()
    results = []
    for index, request in enumerate(requests, 1):
        if progress:
            print(f"[{index}/{len(requests)}] {request_label(request)}", file=sys.stderr,
                  flush=True)
        results.append(verify_request(request, target, no_spills=args.no_spills,
                                      max_registers=args.max_registers,
                                      compile_options=options))
    failed = [r for r in results if r.violations]
    if args.json:
        json.dump([_as_json(r) for r in results], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 1 if failed else 0
    print(f"verify: {len(results)} request(s) for {target.sm} "
          "(stack, spills: bytes per thread; smem: bytes per CTA; cmem: bytes)")
    for line in _table(results):
        print(line)
    for result in failed:
        for violation in result.violations:
            print(f"FAIL {request_label(result.request)}: {violation}")
        if result.error is not None:  # the whole nvJitLink log and PTX excerpt, indented
            for line in result.error.splitlines()[1:]:
                print(f"    {line}")
    skipped = [r for r in results if r.skipped is not None]
    for result in skipped:
        print(f"SKIP {request_label(result.request)}: {result.skipped}")
    summary = f"{len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed"
    if skipped:
        summary += f", {len(skipped)} skipped (not for {target.sm})"
    print(summary)
    return 1 if failed else 0
