"""The verbs of the command line about specs and keys: ``list``, ``key``, ``check-keys``.

Each prints text, or with ``--json`` one JSON document whose schema ``docs/cli.md``
states. The facts come from the library: the spec's fields (attrs), the derived key's
inputs (:func:`specdsl._render.keys.key_inputs`) and the key proofs
(:mod:`specdsl._proof.analysis`).
"""

from __future__ import annotations

import argparse
import enum
import typing
from collections.abc import Iterable
from typing import Any

import attrs

from .._proof.analysis import KeyReport, analyze_class
from .._render.keys import derived_key, hand_key, key_inputs
from .._review.requests import builtin_specs, format_request, parse_request, spec_name
from .._spec.decorator import spec_info
from .._spec.fields import DOC, is_factory, role_of
from ..errors import SpecDefinitionError
from .main import FOUND, OK, UsageError
from .output import json_value, print_json, request_fields
from .specs import names_a_spec, resolve_spec, spec_classes

__all__ = ["command_list", "command_key", "command_check_keys", "format_report"]


# --- list ----------------------------------------------------------------------------------

def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _default(field: attrs.Attribute[Any]) -> tuple[str, Any]:
    """``("required", None)``, ``("computed", None)`` or ``("value", default)``."""
    if field.default is attrs.NOTHING:
        return "required", None
    if is_factory(field.default):
        return "computed", None
    convert = field.converter
    return "value", convert(field.default) if callable(convert) else field.default


def _fields(cls: type) -> list[dict[str, Any]]:
    hints = typing.get_type_hints(cls)
    described = []
    for f in attrs.fields(cls):
        kind, default = _default(f)
        described.append({"name": f.name, "role": role_of(f), "type": _type_name(hints[f.name]),
                          "default_kind": kind, "default": default,
                          "computed_from_fields": kind == "computed" and f.default.takes_self,
                          "doc": f.metadata.get(DOC) or ""})
    return described


def _shown(value: Any) -> str:
    """A default as Python source names it: an enum member by its class and name
    (``DType.F32``, ``Mode.FMA``), anything else by ``repr``."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(_shown, value)) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def _field_line(item: dict[str, Any]) -> str:
    if item["default_kind"] == "required":
        default = " (required)"
    elif item["default_kind"] == "computed":
        default = (" = (computed from the other fields)" if item["computed_from_fields"]
                   else " = (computed)")
    else:
        default = f" = {_shown(item['default'])}"
    doc = f"  {item['doc']}" if item["doc"] else ""
    return f"    {item['role']:6s} {item['name']}: {item['type']}{default}{doc}"


def command_list(args: argparse.Namespace) -> int:
    """``specdsl list [SPEC ...] [-v] [--json]``: the built-in specs (name, template, entry);
    with ``-v``, or for the SPECs named, each field's role, type, default and doc."""
    named = bool(args.specs)
    classes = ([(spec_name(resolve_spec(name)), resolve_spec(name)) for name in args.specs]
               if named else sorted(builtin_specs().items()))
    if args.json:
        print_json([{
            "spec": name, "class": spec_info(cls).cls_name, "template": spec_info(cls).template,
            "entry": spec_info(cls).entry, "has_key_method": spec_info(cls).has_key,
            "fields": [{**item, "default": json_value(item["default"])}
                       for item in _fields(cls)],
        } for name, cls in classes])
        return OK
    # columns as wide as the longest name and template (at least as wide as the built-ins')
    name_width = max([10, *(len(name) for name, _ in classes)])
    template_width = max([22, *(len(spec_info(cls).template) for _, cls in classes)])
    for name, cls in classes:
        info = spec_info(cls)
        print(f"{name:{name_width}s} {info.template:{template_width}s} entry {info.entry}")
        if named or args.verbose:
            for item in _fields(cls):
                print(_field_line(item))
    return OK


# --- key -----------------------------------------------------------------------------------

def command_key(args: argparse.Namespace) -> int:
    """``specdsl key SPEC [field=value ...] [--explain] [--json]``: the derived key (and the
    hand-written one); ``--explain`` adds each input the derived key hashes."""
    cls = resolve_spec(args.request[0])  # a first word that is no spec is the error to report
    second = next((word for word in args.request[1:] if names_a_spec(word)), None)
    if second is not None:
        raise UsageError(args.verb_parser.prog, "key takes one request: give its SPEC once, "
                                                f"then field=value words (got {second!r})")
    spec = parse_request(cls, args.request[1:])
    target = args.target
    key, written = derived_key(spec, target), hand_key(spec)
    inputs = key_inputs(spec, target)
    sources = spec_info(spec).facts.sources
    if args.json:
        print_json({
            "spec": spec_name(type(spec)), "request": format_request(spec),
            "fields": request_fields(spec), "target": target.sm, "derived_key": key,
            "hand_written_key": written,
            "inputs": [{"label": label, "value": value} for label, value in inputs],
            "templates": [{"name": name, "sha256": digest} for name, digest in sources],
        })
        return OK
    print(f"derived: {key}")
    if args.explain:
        print("  SHA-256 over these labelled, length-prefixed inputs (the key keeps the "
              "first 40 hex digits):")
        width = max(len(label) for label, _ in inputs)
        for label, value in inputs:
            print(f"    {label:<{width}}  {value}")
            if label == "templates":
                print("      (one SHA-256 over the name and source SHA-256 of each template "
                      "reached:)")
                name_width = max(len(name) for name, _ in sources)
                for name, digest in sources:
                    print(f"        {name:<{name_width}}  {digest}")
    if written is not None:
        print(f"hand-written: {written}")
    return OK


# --- check-keys ----------------------------------------------------------------------------

def _names(fields: Iterable[str]) -> str:
    return ", ".join(sorted(fields))


# The static proof counts a field as read by key() only where key() reads it on every
# observed request (KeyReport.key_fields): one read on some requests only (behind an `if`)
# leaves the others keyed without it. The lines say which is which.
def _key_reads(report: KeyReport) -> str:
    """``factor, and offset only on some requests``: what key() reads, and how often."""
    every, some = report.key_fields, report.key_fields_any - report.key_fields
    if not some:
        return _names(every) or "no field"
    sometimes = f"{_names(some)} only on some requests"
    return f"{_names(every)}, and {sometimes}" if every else sometimes


def _not_read(report: KeyReport) -> str:
    """``key() does not`` (read the missing fields), or how it falls short of them."""
    never = report.missing - report.key_fields_any
    sometimes = report.missing & report.key_fields_any
    if not sometimes:
        return "key() does not"
    reads = f"reads {_names(sometimes)} only on some requests"
    return f"key() does not read {_names(never)} and {reads}" if never else f"key() {reads}"


def _status(report: KeyReport) -> str:
    if not report.has_key:
        return "derived"
    return "incomplete" if report.incomplete else ("over-keyed" if report.extra else "ok")


def _diff_command(example: Any) -> str:
    def words(request: Any) -> str:
        return format_request(request).partition(" ")[2]

    return (f"specdsl diff {spec_name(type(example.first))} {words(example.first)} -- "
            f"{words(example.second)}")


def format_report(report: KeyReport) -> list[str]:
    """The lines ``specdsl check-keys`` prints for one class."""
    cls = report.cls
    title = f"{cls.__module__}.{cls.__qualname__}"
    if not report.has_key:
        return [f"ok          {title}: derived key (no key() to prove)"]
    info = spec_info(cls)
    status = {"incomplete": "INCOMPLETE ", "over-keyed": "OVER-KEYED "}.get(
        _status(report), "ok         ")
    lines = [f"{status} {title}: key() reads {_key_reads(report)}; "
             f"template {info.template!r} reads {_names(report.template_fields) or 'no field'}"]
    if report.missing:
        lines.append(
            f"    incomplete: the template reads {_names(report.missing)} but "
            f"{_not_read(report)}: a request differing only there would silently run the "
            "first request's kernel")
    for example in report.counterexamples:
        lines += [
            f"    counterexample: key {example.key!r} for both, different PTX for "
            f"{example.target} (they differ in {example.field}):",
            f"        {format_request(example.first)}",
            f"        {format_request(example.second)}",
            f"        {_diff_command(example)}",
            f"        Python: {example.first!r}",
            f"                {example.second!r}",
        ]
    if report.extra:
        lines.append(
            f"    over-specified: key() reads {_names(report.extra)}, which the template "
            "never reads: requests differing only there compile the same PTX again")
    if report.note:
        lines.append(f"    note: {report.note}")
    elif report.samples.pairs:
        sampled = report.samples
        pairs = "pair" if sampled.pairs == 1 else "pairs"
        lines.append(f"    sampled: {sampled.pairs} {pairs} differing in one baked field, "
                     f"{sampled.shared} shared a key, {len(sampled.counterexamples)} "
                     f"rendered different PTX" +
                     (f", {sampled.skipped} not renderable" if sampled.skipped else "") +
                     # so that fewer pairs than --samples do not look like a cut-short run
                     (" (a field is not sampled again once it has a counterexample)"
                      if sampled.counterexamples else ""))
        if sampled.render_failure:
            lines.append(f"    template error (not a key problem) on {sampled.render_failure}")
    return lines


def _report_json(report: KeyReport) -> dict[str, Any]:
    cls, sampled = report.cls, report.samples
    return {
        "class": f"{cls.__module__}.{cls.__qualname__}", "spec": spec_name(cls),
        "status": _status(report), "has_key_method": report.has_key,
        "template": spec_info(cls).template,
        "template_fields": sorted(report.template_fields),
        "key_fields": sorted(report.key_fields), "key_fields_any": sorted(report.key_fields_any),
        "missing": sorted(report.missing), "over_specified": sorted(report.extra),
        "counterexamples": [{
            "key": example.key, "field": example.field, "target": example.target.sm,
            "first": format_request(example.first), "second": format_request(example.second),
            "diff_command": _diff_command(example),
        } for example in report.counterexamples],
        "samples": {"pairs": sampled.pairs, "shared": sampled.shared,
                    "skipped": sampled.skipped, "render_failure": sampled.render_failure or None},
        "note": report.note or None,
        "error": None,
    }


@attrs.frozen
class _Failed:
    """A spec class whose ``key()`` could not be proven: it raised, or returned no str."""

    cls: type
    error: str

    def lines(self) -> list[str]:
        return [f"ERROR       {self.cls.__module__}.{self.cls.__qualname__}: {self.error}"]

    def as_json(self) -> dict[str, Any]:
        cls = self.cls
        return {"class": f"{cls.__module__}.{cls.__qualname__}", "spec": spec_name(cls),
                "status": "error", "has_key_method": True,
                "template": spec_info(cls).template, "error": self.error}


def _analyze(cls: type, args: argparse.Namespace) -> KeyReport | _Failed:
    try:
        return analyze_class(cls, samples=args.samples, seed=args.seed, target=args.target)
    except SpecDefinitionError as exc:  # key() raised: this class's problem, not the run's
        return _Failed(cls, str(exc))


def command_check_keys(args: argparse.Namespace) -> int:
    """``specdsl check-keys [MODULE ...]``: exit 1 on an incomplete key or a ``key()`` that
    raised (an ``ERROR`` line; the other classes are still checked), 0 otherwise.

    ``MODULE`` is a module, a file (``./kernels.py``) or either with ``:ClassName``
    (default ``specdsl.kernels``). ``--json``: one object a class.
    """
    names = args.modules or ["specdsl.kernels"]
    results = [_analyze(cls, args) for cls in spec_classes(names)]
    reports = [r for r in results if isinstance(r, KeyReport)]
    failed = [r for r in results if isinstance(r, _Failed)]
    keyed = [r for r in reports if r.has_key]
    incomplete = [r for r in keyed if r.incomplete]
    status = FOUND if incomplete or failed else OK
    if args.json:
        print_json([r.as_json() if isinstance(r, _Failed) else _report_json(r)
                    for r in results])
        return status
    for result in results:
        for line in result.lines() if isinstance(result, _Failed) else format_report(result):
            print(line)
    over = [r for r in keyed if r.extra]
    classes = "spec class" if len(results) == 1 else "spec classes"
    print(f"checked {len(results)} {classes} in {', '.join(names)}: "
          f"{len(keyed) + len(failed)} with a hand-written key(), {len(incomplete)} "
          f"incomplete, {len(over)} over-specified"
          + (f", {len(failed)} failed" if failed else ""))
    return status
