"""The review verbs of the command line: ``render``, ``diff``, ``verify`` and ``run``.

Request words follow one grammar: a ``SPEC`` (built-in name, ``package.module:ClassName``
or ``path/file.py:ClassName``) followed by its ``field=value`` assignments; a word
without ``=`` starts the next spec. The work is done by the review library
(:mod:`specdsl.review`); this module turns words into requests and prints what it returns.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._render.keys import derived_key
from .._render.render import render
from .._review.renders import diff_requests, write_renders
from .._review.requests import (
    build_request,
    builtin_specs,
    format_request,
    format_value,
    parse_assignments,
    parse_request,
    spec_name,
)
from .._review.variants import (
    VARIANTS_ATTRIBUTE,
    PinnedVariants,
    has_finite_baked_field,
    representative_request,
    split_pinned_variants,
)
from .._review.verify import Verified, verify_request
from .._runtime.compile import MAX_REGISTERS, MIN_REGISTERS, CompileOptions
from .._spec.target import Target
from .._spec.values import unique
from ..errors import LaunchError, SpecError
from .main import B_WORDS, FOUND, OK, UsageError
from .output import print_json, request_fields, table
from .specs import names_a_spec, resolve_spec

__all__ = ["split_requests", "collect_requests", "named_requests", "command_render", "command_diff",
           "command_verify", "command_run"]


def split_requests(words: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Group CLI words into ``[(SPEC, [field=value, ...]), ...]``.

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


def collect_requests(words: Sequence[str], *, variants: bool,
                     target: Target) -> tuple[list[Any], list[str]]:
    """The requests named by CLI words, or with ``variants`` each spec's variants with
    those fields pinned (:func:`specdsl._review.variants.split_pinned_variants`), and the
    notes to print: one a spec whose pinned fields leave variants out.

    A SPEC without field words stands for :func:`~specdsl._review.variants.representative_request`.
    Requests that share a derived key (they differ only in launch fields) are kept once,
    the first in order.

    Raises:
        SpecError: an unknown spec or field, or an invalid value.
    """
    requests: list[Any] = []
    notes: list[str] = []
    for name, assignments in split_requests(words):
        cls = resolve_spec(name)
        if variants:
            pinned = parse_assignments(cls, assignments)
            split = split_pinned_variants(cls, pinned)
            requests.extend(split.requests)
            if pinned and split.refused:
                notes.append(_left_out_note(cls, pinned, split, target))
            elif (getattr(cls, VARIANTS_ATTRIBUTE, None) is None
                  and not has_finite_baked_field(cls)):
                notes.append(_one_variant_note(cls, pinned))
        else:
            requests.append(_request(cls, assignments))
    return unique(requests, key=lambda request: derived_key(request, target)), notes


def named_requests(words: Sequence[str]) -> list[Any]:
    """One request per SPEC in the CLI words, in order, none left out (``run``, where
    requests that share a derived key still launch differently): its field words, or
    without any, :func:`~specdsl._review.variants.representative_request`.

    Raises:
        SpecError: an unknown spec or field, or an invalid value.
    """
    return [_request(resolve_spec(name), assignments)
            for name, assignments in split_requests(words)]


def _request(cls: type, assignments: list[str]) -> Any:
    return parse_request(cls, assignments) if assignments else representative_request(cls)


def _request_words(cls: type, pinned: dict[str, Any]) -> str:
    words = [spec_name(cls)] + [f"{name}={format_value(value)}" for name, value in pinned.items()]
    return " ".join(shlex.quote(word) for word in words)


def _left_out_note(cls: type, pinned: dict[str, Any], split: PinnedVariants,
                   target: Target) -> str:
    """``rmsnorm l2_evict_last=true --variants: 22 of 42 variants left out as invalid,
    e.g. <the first validator message>``, and where the variants kept share derived keys
    (the pins made them equal but for launch fields or defaults), how many requests they are."""
    note = (f"{_request_words(cls, pinned)} --variants: {len(split.refused)} of {split.total} "
            f"variants left out as invalid, e.g. {split.refused[0].message}")
    kept = split.total - len(split.refused)
    distinct = len(unique(split.requests, key=lambda request: derived_key(request, target)))
    if distinct < kept:
        note += f"; the other {kept} are {distinct} distinct requests (one a derived key)"
    return note


def _one_variant_note(cls: type, pinned: dict[str, Any]) -> str:
    """A spec without ``variants`` and without a baked field of finite values: --variants is
    the one request, which its author may have taken for every variant."""
    return (f"{_request_words(cls, pinned)} --variants: one request, as {cls.__qualname__} "
            f"declares no '{VARIANTS_ATTRIBUTE}' and has no bool, enum or Literal baked field "
            f"to go through")


def _label(request: Any) -> str:
    return format_request(request, baked_only=True)


# --- render --------------------------------------------------------------------------------

def command_render(args: argparse.Namespace) -> int:
    """``specdsl render SPEC [field=value ...]``: print the PTX of one request; with
    ``--out DIR``, write one file per request (:func:`specdsl._review.renders.write_renders`) and
    print each path; a request the target cannot run is a ``skipped`` line on stderr."""
    prog = args.verb_parser.prog
    if not args.out:
        if args.variants:
            raise UsageError(prog, "render --variants writes one file per request: give --out DIR")
        cls = resolve_spec(args.request[0])  # a first word that is no spec is the error
        second = next((word for word in args.request[1:] if names_a_spec(word)), None)
        if second is not None:
            raise UsageError(prog, "render of several requests writes one file per request: "
                                   f"give --out DIR ({second!r} starts a second request)")
        sys.stdout.write(render(parse_request(cls, args.request[1:]), args.target))
        return OK
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(prog, f"--out {args.out!r} is a file: give a folder (made if missing)")
    requests, notes = collect_requests(args.request, variants=args.variants,
                                       target=args.target)
    for note in notes:
        print(f"{prog}: note: {note}", file=sys.stderr)
    try:  # the folder is made only now, once every request is understood
        written = write_renders(requests, args.target, Path(args.out))
    except OSError as exc:
        raise _out_error(prog, args.out, exc) from None
    for item in written:
        if item.path is None:
            print(f"skipped {_label(item.request)}: {item.skipped}", file=sys.stderr)
        else:
            print(os.fspath(item.path))
    return OK


def _out_error(prog: str, out: str, exc: OSError) -> Exception:
    """The error to raise for ``exc`` from writing the renders into ``--out DIR``: a
    UsageError naming ``--out``, the folder it could not make or the file it could not
    write, and why; ``exc`` itself where it concerns neither."""
    if exc.filename is None:
        return exc
    path, folder = Path(exc.filename), Path(out)
    if path == folder or path in folder.parents:
        what = "create folder"
    elif path.parent == folder:
        what = "write file"
    else:
        return exc
    return UsageError(prog, f"--out {out!r}: cannot {what} {exc.filename!r}: "
                            f"{exc.strerror or exc}")


# --- diff ----------------------------------------------------------------------------------

def command_diff(args: argparse.Namespace) -> int:
    """``specdsl diff SPEC [field=value ...] -- [field=value ...]``: exit 0 when the two
    requests render identical PTX (one ``identical`` line), 1 with a unified diff headed
    by both derived keys. Request B starts from A's values and applies B's words."""
    prog = args.verb_parser.prog
    words = list(args.request)
    split = words.index(B_WORDS) if B_WORDS in words else len(words)
    a_words, b_words = words[:split], words[split + 1:]
    if not a_words:
        raise UsageError(prog, "diff needs a SPEC: specdsl diff SPEC a=1 -- a=2")
    name = a_words.pop(0)
    if "=" in name:
        raise UsageError(prog, f"diff needs SPEC before its fields (got {name!r})")
    for word in a_words + b_words:
        if "=" not in word:
            raise UsageError(prog, f"expected field=value (got {word!r}); diff compares one SPEC")
    if split == len(words) and args.target_b is None:
        raise UsageError(prog, "diff needs request B: give its fields after '--' "
                               "(SPEC a=1 -- a=2) or a second target (--target-b sm_90a)")
    cls = resolve_spec(name)
    values = parse_assignments(cls, a_words)
    first = build_request(cls, values)
    second = build_request(cls, {**values, **parse_assignments(cls, b_words)})
    diff = diff_requests(first, second, args.target, args.target_b)
    about_a = f"{diff.key_a} ({format_request(first)}, {diff.target_a.sm})"
    about_b = f"{diff.key_b} ({format_request(second)}, {diff.target_b.sm})"
    if diff.identical:
        if diff.key_a == diff.key_b:
            print(f"identical: {format_request(first)} and {format_request(second)} render "
                  f"the same PTX for {diff.target_a.sm} (derived key {diff.key_a})")
        else:
            print(f"identical: {about_a} and {about_b} render the same PTX")
        return OK
    sys.stdout.writelines(difflib.unified_diff(
        diff.ptx_a.splitlines(True), diff.ptx_b.splitlines(True), about_a, about_b))
    return FOUND


# --- verify --------------------------------------------------------------------------------

_COLUMNS = ("regs", "spill-st", "spill-ld", "stack", "smem", "cmem", "compile")


def _rows(results: list[Verified]) -> list[list[str]]:
    rows = []
    for result in results:
        label = _label(result.request)
        for status in ("error",) * (result.error is not None) + ("skipped",) * (
                result.skipped is not None):
            rows.append([label, "-", status] + [""] * (len(_COLUMNS) - 1))
        for item in result.resources:
            spills = ([str(item.spill_stores), str(item.spill_loads)]
                      if item.spills_reported else ["?", "?"])
            rows.append([label, item.entry, str(item.registers), *spills, str(item.stack_frame),
                         str(item.shared_memory), str(item.constant_memory),
                         f"{result.seconds * 1000:.0f} ms"])
    return rows


def _as_json(result: Verified) -> dict[str, Any]:
    request = result.request
    return {
        "spec": spec_name(type(request)),
        "request": _label(request),
        "fields": request_fields(request),
        "derived_key": result.key,
        "target": result.target.sm,
        "resources": [item.as_dict() for item in result.resources],
        "compile_seconds": result.seconds,
        "violations": list(result.violations),
        "notes": list(result.notes),
        "error": result.error,
        "skipped": result.skipped,
    }


def command_verify(args: argparse.Namespace) -> int:
    """``specdsl verify [SPEC [field=value ...] ...] [--variants]``: compile and report.

    One table row per entry (registers, spill stores and loads, stack frame in bytes per
    thread, static shared memory in bytes per CTA, constant memory in bytes, compile
    time), a ``FAIL <request>: <why>`` line per violation, a ``NOTE <request>: <what>`` line
    per note (an entry above ``--maxrregcount``) and ``SKIP <request>: <why>`` per request
    the target cannot run; ``--json``: a JSON array, one object a request.
    On a terminal, ``[i/n]`` progress goes to stderr. Exit 1 when a request fails.
    """
    if args.max_registers is not None and args.max_registers < 1:
        raise UsageError(args.verb_parser.prog, "--max-registers must be a positive int "
                                                f"(got {args.max_registers})")
    count = args.maxrregcount
    if count is not None and not MIN_REGISTERS <= count <= MAX_REGISTERS:
        raise UsageError(args.verb_parser.prog, f"--maxrregcount must be from {MIN_REGISTERS} "
                                                f"to {MAX_REGISTERS} registers per thread "
                                                f"(got {count}); to fail a request above N "
                                                "registers instead, give --max-registers N")
    options = CompileOptions(lineinfo=args.lineinfo, max_registers=count, debug=args.debug)
    target = args.target
    words = list(args.request) or list(builtin_specs())
    requests, notes = collect_requests(words, variants=args.variants, target=target)
    for note in notes:
        print(f"{args.verb_parser.prog}: note: {note}", file=sys.stderr)
    progress = len(requests) > 1 and sys.stderr.isatty()
    results = []
    for index, request in enumerate(requests, 1):
        if progress:
            print(f"[{index}/{len(requests)}] {_label(request)}", file=sys.stderr, flush=True)
        results.append(verify_request(request, target, no_spills=args.no_spills,
                                      max_registers=args.max_registers,
                                      compile_options=options))
    failed = [r for r in results if r.violations]
    status = FOUND if failed else OK
    if args.json:
        print_json([_as_json(r) for r in results])
        return status
    print(f"verify: {len(results)} request(s) for {target.sm} "
          "(stack, spills: bytes per thread; smem: bytes per CTA; cmem: bytes)")
    for line in table(("request", "entry") + _COLUMNS, _rows(results), right_from=2):
        print(line)
    for result in failed:
        for violation in result.violations:
            print(f"FAIL {_label(result.request)}: {violation}")
        if result.error is not None:  # the whole nvJitLink log and PTX excerpt, indented
            for line in result.error.splitlines()[1:]:
                print(f"    {line}")
    for result in results:
        for note in result.notes:
            print(f"NOTE {_label(result.request)}: {note}")
    skipped = [r for r in results if r.skipped is not None]
    for result in skipped:
        print(f"SKIP {_label(result.request)}: {result.skipped}")
    summary = f"{len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed"
    if skipped:
        summary += f", {len(skipped)} skipped (not for {target.sm})"
    print(summary)
    return status


# --- run -----------------------------------------------------------------------------------

def command_run(args: argparse.Namespace) -> int:
    """``specdsl run [SPEC [field=value ...] ...] [--tokens N] [--device D] [--seed S]``:
    each request named (default: every built-in's representative request) on the GPU
    against its float64 reference, through its module's ``example(spec, rng, tokens)``;
    one table row each; exit 1 if one fails.

    The requests and their cases are made before the device is opened, so a request error
    is reported on a machine without a GPU too.

    Raises:
        SpecError: an unknown spec or field, a bad value, a spec whose module has no
            usable ``example()`` (the CLI prints one line and exits 2).
        LaunchError: no CUDA device (the CLI prints one line and exits 2).
    """
    import numpy as np

    from .._review.demo import builtin_cases, request_cases, run_cases
    from .._runtime.executor import Executor

    rng = np.random.default_rng(args.seed)
    if args.request:
        cases = request_cases(named_requests(args.request), rng, args.tokens)
    else:
        cases = builtin_cases(rng, args.tokens)
    try:
        executor = Executor(device=args.device)
    except LaunchError:  # no device: the examples that failed are still said (FAIL rows there)
        for name, case, problem in cases:
            if case is None:
                print(f"FAIL {name}: {problem}", file=sys.stderr)
        raise
    runs = run_cases(executor, cases)
    rows = []
    for run in runs:
        verdict = "PASS" if run.passed else (f"FAIL ({run.problem})" if run.problem else "FAIL")
        rows.append([run.name, "-" if run.request is None else format_request(run.request),
                     run.shape, "-" if run.problem else
                     ", ".join(f"{k}={v:.2e}" for k, v in run.errors.items()),
                     "-" if run.tolerance is None else f"{run.tolerance:.1e}", verdict])
    header = ("kernel", "request", "shape", "rel error", "tolerance", "result")
    for line in table(header, rows):
        print(line)
    failed = sum(not run.passed for run in runs)
    print(f"{len(runs) - failed}/{len(runs)} passed on device {args.device} "
          f"({executor.target.sm})", file=sys.stderr if failed else sys.stdout)
    return FOUND if failed else OK
