"""The static and sampled proof of hand-written ``key()`` methods (``specdsl check-keys``).

Static proof: the baked fields a spec's template reads (its Jinja AST, following
includes, imports and macros; a dynamic include counts as reading every field) against
the fields ``key()`` reads, observed by calling it on a recording stand-in. A field the
template reads but the key does not is an *incomplete* key; a field the key reads but the
template does not is an *over-specified* key (requests differing only there compile the
same PTX twice).

Sampled proof: pairs of valid requests that agree on ``key()`` but differ in one baked
field, drawn from each field's type, default and validators, are rendered and compared;
a pair with different PTX is a counterexample, printed as two requests a user can paste.

Keys passed at call sites (``key=`` strings) are not visible here: the run-time ledger
(:mod:`specdsl.ledger`) proves those.
"""

from __future__ import annotations

import argparse
import enum
import functools
import importlib
import inspect
import random
import threading
import time
import types
import typing
from typing import Any, Iterable, Literal

import attrs

from .errors import RenderError, SpecDefinitionError, SpecdslError, SpecError
from .fields import canonical
from .render import render
from .requests import format_request, resolve_spec, spec_name
from .spec import is_spec, spec_info
from .target import Target

__all__ = [
    "KeyReport", "Counterexample", "Samples", "template_fields", "key_reads", "candidates",
    "sampled_proof", "analyze_class", "spec_classes", "check_keys", "command_check_keys",
    "TIME_LIMIT_S", "OBSERVED_REQUESTS",
]

#: Wall-clock bound of the sampled proof of one spec class, in seconds.
TIME_LIMIT_S = 10.0
#: How many valid requests ``key()`` is observed on (the defaults first, then samples).
OBSERVED_REQUESTS = 8
#: Attempts to build a valid request before giving up on one (validators may refuse).
_ATTEMPTS = 64


@attrs.frozen
class Counterexample:
    """Two valid requests with the same hand-written key and different PTX.

    Attributes:
        key: the hand-written key both produce.
        field: the one baked field in which they differ.
        first, second: the two requests.
        target: the target both were rendered for.
    """

    key: str
    field: str
    first: Any
    second: Any
    target: Target


@attrs.frozen
class Samples:
    """What the sampled proof of one class did.

    Attributes:
        counterexamples: at most one per field.
        pairs: pairs of valid requests built (each differing in one baked field).
        shared: of those, pairs whose hand-written keys agreed (these were rendered).
        skipped: pairs not compared because a request could not be rendered.
        render_failure: the first render failure that was not a :class:`RenderError`
            (a template bug such as a division by zero), as ``"request: error"``; or "".
    """

    counterexamples: tuple[Counterexample, ...] = ()
    pairs: int = 0
    shared: int = 0
    skipped: int = 0
    render_failure: str = ""


@attrs.frozen
class KeyReport:
    """What ``check-keys`` found for one spec class.

    Attributes:
        cls: the spec class.
        has_key: whether it defines ``key()`` (without one there is nothing to prove).
        template_fields: baked fields the template reads (all of them for a dynamic include).
        key_fields: fields ``key()`` read on every observed request.
        key_fields_any: fields ``key()`` read on at least one observed request.
        missing: template fields the key did not read (on some request): incomplete.
        extra: fields the key read that the template never reads: over-specified.
        samples: what the sampled proof did and found (see :class:`Samples`).
        note: why the key could only be observed on an unvalidated stand-in, if so.
    """

    cls: type
    has_key: bool
    template_fields: frozenset[str] = frozenset()
    key_fields: frozenset[str] = frozenset()
    key_fields_any: frozenset[str] = frozenset()
    missing: frozenset[str] = frozenset()
    extra: frozenset[str] = frozenset()
    samples: Samples = Samples()
    note: str = ""

    @property
    def counterexamples(self) -> tuple[Counterexample, ...]:
        """The sampled proof's counterexamples."""
        return self.samples.counterexamples

    @property
    def incomplete(self) -> bool:
        """True when a baked field the PTX depends on may be missing from the key."""
        return bool(self.missing or self.counterexamples)


# ---------------------------------------------------------------------------------------
# What the template reads, what key() reads
# ---------------------------------------------------------------------------------------


def template_fields(cls: type) -> frozenset[str]:
    """The baked fields of ``cls`` its template (with everything it reaches) reads.

    A dynamic include or import (a template name computed at render time) could read
    anything, so it counts as reading every baked field.
    """
    info = spec_info(cls)
    if info.facts.dynamic:
        return frozenset(info.baked)
    return frozenset(info.facts.names) & frozenset(info.baked)


_recording = threading.local()


@functools.cache
def _recording_class(cls: type) -> type:
    """A subclass of ``cls`` whose instances note each field read while recording is on."""
    names = frozenset(a.name for a in attrs.fields(cls))
    base_getattribute = cls.__getattribute__

    def __getattribute__(self: Any, name: str) -> Any:
        reads = getattr(_recording, "reads", None)
        if reads is not None and name in names:
            reads.add(name)
        return base_getattribute(self, name)

    return type(cls.__name__, (cls,), {"__slots__": (), "__getattribute__": __getattribute__,
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


class _StandIn:
    """A duck-typed stand-in for a request that could not be built (validators refused).

    Field reads return the given plausible values; properties and methods of the spec
    class run against the stand-in, so their reads are recorded too.
    """

    def __init__(self, cls: type, values: dict[str, Any], reads: set[str]) -> None:
        object.__setattr__(self, "_cls", cls)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            object.__getattribute__(self, "_reads").add(name)
            return values[name]
        cls = object.__getattribute__(self, "_cls")
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, property):
            return attr.fget(self)
        if isinstance(attr, functools.cached_property):
            return attr.func(self)
        if isinstance(attr, (staticmethod, classmethod)):
            return getattr(cls, name)
        if inspect.isfunction(attr):
            return types.MethodType(attr, self)
        return getattr(cls, name)


def _call_key(cls: type, subject: Any) -> str:
    try:
        value = cls.key(subject)
    except Exception as exc:
        raise SpecDefinitionError(
            f"{cls.__qualname__}.key() raised {type(exc).__name__}: {exc} "
            f"(called on {subject!r})") from exc
    if not isinstance(value, str) or not value:
        raise SpecDefinitionError(
            f"{cls.__qualname__}.key() must return a non-empty str (got {value!r})")
    return value


def key_reads(request: Any) -> frozenset[str]:
    """The fields ``key()`` reads when called on (a recording copy of) ``request``.

    Raises:
        SpecDefinitionError: ``key()`` raised, or returned something other than a str.
    """
    cls = type(request)
    copy = _recording_class(cls)(**{a.name: getattr(request, a.name)
                                    for a in attrs.fields(cls) if a.init})
    reads: set[str] = set()
    _recording.reads = reads
    try:
        _call_key(cls, copy)
    finally:
        _recording.reads = None
    return frozenset(reads)


def _stand_in_reads(cls: type, values: dict[str, Any]) -> frozenset[str]:
    reads: set[str] = set()
    _call_key(cls, _StandIn(cls, values, reads))
    return frozenset(reads)


# ---------------------------------------------------------------------------------------
# Values and requests
# ---------------------------------------------------------------------------------------


def _unique(values: Iterable[Any]) -> list[Any]:
    seen: set = set()
    out = []
    for value in values:
        try:
            form = canonical(value)
        except TypeError:
            form = ("repr", repr(value))
        if form not in seen:
            seen.add(form)
            out.append(value)
    return out


def candidates(tp: Any, default: Any = attrs.NOTHING) -> list[Any]:
    """Plausible values of a field of type ``tp``: the default first, then values around it.

    Used to draw requests; validators decide which of them are valid. ``int`` fields get
    powers of two, neighbours and multiples of the default; ``float`` fields its tenfold
    and tenth, its negation, ``0.0``, ``-0.0`` and common epsilons; enums, ``Literal`` and
    ``bool`` every value; ``T | None`` adds ``None``; tuples vary one item at a time.
    """
    has_default = default is not attrs.NOTHING
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    head = [default] if has_default else []
    if origin in (typing.Union, types.UnionType):
        inner = next(a for a in args if a is not type(None))
        inner_default = default if has_default and default is not None else attrs.NOTHING
        return _unique(head + [None] + candidates(inner, inner_default))
    if origin is Literal:
        return _unique(head + list(args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _unique(head + list(tp))
    if tp is bool:
        return _unique(head + [False, True])
    if tp is int:
        base = default if has_default and isinstance(default, int) and default > 0 else 64
        pool = [base, base * 2, base // 2, base + 1, base - 1, base + 8, base * 4, 0, 1, 2,
                8, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192]
        return _unique(head + pool)
    if tp is float:
        base = default if has_default and isinstance(default, float) and default else 1.0
        pool = [base, base * 10, base / 10, base * 2, base / 2, -base, 0.0, -0.0, 1.0, 0.5,
                2.0, 1e-5, 1e-6, 1e-3]
        return _unique(head + pool)
    if tp is str:
        return _unique(head + ["a", "b"])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            base = tuple(default) if has_default and default else (1,)
            item = [v for v in candidates(args[0]) if v is not None][:6]
            variants = [base[:i] + (v,) + base[i + 1:] for i in range(len(base)) for v in item]
            return _unique(head + [base, base[:-1], base + base[-1:]] + variants)
        pools = [candidates(a) for a in args]
        base = tuple(default) if has_default else tuple(p[0] for p in pools)
        variants = [base[:i] + (v,) + base[i + 1:] for i, pool in enumerate(pools) for v in pool]
        return _unique(head + [base] + variants)
    return head


@functools.cache
def _field_candidates(cls: type) -> dict[str, list[Any]]:
    hints = typing.get_type_hints(cls)
    out = {}
    for a in attrs.fields(cls):
        if not a.init:
            continue
        default = a.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = attrs.NOTHING  # computed by the class: see _factory_fields
        out[a.name] = candidates(hints[a.name], default)
    return out


@functools.cache
def _factory_fields(cls: type) -> frozenset[str]:
    """Fields whose default the class computes (``attrs.Factory``), often from other fields."""
    return frozenset(a.name for a in attrs.fields(cls)
                     if a.init and isinstance(a.default, attrs.Factory))  # type: ignore[arg-type]


def _build(cls: type, values: dict[str, Any]) -> Any | None:
    try:
        return cls(**values)
    except (SpecdslError, ValueError, TypeError):
        return None


def _default_request(cls: type) -> Any | None:
    pools, computed = _field_candidates(cls), _factory_fields(cls)
    return _build(cls, {name: pool[0] for name, pool in pools.items()
                        if pool and name not in computed})


def _random_request(cls: type, rng: random.Random) -> Any | None:
    """A valid request with each field, independently, at its default or a drawn value."""
    pools, computed = _field_candidates(cls), _factory_fields(cls)
    for _ in range(_ATTEMPTS):
        values = {}
        for name, pool in pools.items():
            if not pool or (name in computed and rng.random() < 0.5):
                continue  # leave a computed default to the class half the time
            values[name] = pool[0] if rng.random() < 0.4 else rng.choice(pool)
        request = _build(cls, values)
        if request is not None:
            return request
    return _default_request(cls)


def _variant(request: Any, field: str, rng: random.Random) -> Any | None:
    """``request`` with ``field`` changed to another valid value, or ``None`` if none is."""
    pool = list(_field_candidates(type(request))[field])
    rng.shuffle(pool)
    current = canonical(getattr(request, field))
    for value in pool:
        try:
            if canonical(value) == current:
                continue
        except TypeError:
            pass
        try:
            changed = attrs.evolve(request, **{field: value})
        except (SpecdslError, ValueError, TypeError):
            continue
        if canonical(getattr(changed, field)) != current:
            return changed
    return None


# ---------------------------------------------------------------------------------------
# The proofs
# ---------------------------------------------------------------------------------------


def sampled_proof(cls: type, *, samples: int = 200, seed: int = 0,
                  target: Target | str = "sm_90", fields: Iterable[str] | None = None,
                  time_limit: float = TIME_LIMIT_S) -> Samples:
    """Search for two valid requests with equal ``key()`` and different PTX.

    Each sample takes a random valid request and changes one baked field (round-robin
    over ``fields``, by default every field the template reads) to another valid value.
    Pairs whose keys agree are rendered for ``target`` and compared. Stops after
    ``samples`` pairs or ``time_limit`` seconds; a field with a counterexample is not
    sampled again. Deterministic for a given ``seed``.

    Returns:
        A :class:`Samples`. A request that cannot be rendered (a :class:`RenderError`,
        or any other exception from the template) skips its pair.

    Raises:
        SpecDefinitionError: ``key()`` raised or returned something other than a str.
    """
    target = Target.parse(target)
    order = sorted(template_fields(cls) if fields is None else fields)
    rng = random.Random(f"{seed}:{spec_info(cls).cls_name}")
    renders: dict[Any, str | None] = {}
    failures: list[str] = []

    def ptx(request: Any) -> str | None:
        if request not in renders:
            try:
                renders[request] = render(request, target)
            except RenderError:
                renders[request] = None
            except Exception as exc:  # a template bug: report it, keep proving keys
                renders[request] = None
                failures.append(f"{request!r}: {type(exc).__name__}: {exc}")
        return renders[request]

    found: dict[str, Counterexample] = {}
    pairs = shared = skipped = 0
    deadline = time.monotonic() + time_limit
    for i in range(samples):
        open_fields = [f for f in order if f not in found]
        if not open_fields or time.monotonic() > deadline:
            break
        field = open_fields[i % len(open_fields)]
        first = _random_request(cls, rng)
        second = None if first is None else _variant(first, field, rng)
        if second is None:
            continue
        pairs += 1
        key = _call_key(cls, first)
        if _call_key(cls, second) != key:
            continue
        shared += 1
        a, b = ptx(first), ptx(second)
        if a is None or b is None:
            skipped += 1
            continue
        if a != b:
            found[field] = Counterexample(key, field, first, second, target)
    return Samples(tuple(found[f] for f in order if f in found), pairs, shared, skipped,
                   failures[0] if failures else "")


def analyze_class(cls: type, *, samples: int = 200, seed: int = 0,
                  target: Target | str = "sm_90") -> KeyReport:
    """The static and sampled proof of one spec class's ``key()``.

    Raises:
        TypeError: ``cls`` is not a kernel spec class.
        SpecDefinitionError: ``key()`` raised or returned something other than a str.
    """
    info = spec_info(cls)
    if not info.has_key:
        return KeyReport(cls, has_key=False)
    read_by_template = template_fields(cls)
    rng = random.Random(f"observe:{seed}:{info.cls_name}")
    observed: list[frozenset[str]] = []
    note = ""
    first = _default_request(cls) or _random_request(cls, rng)
    if first is None:
        values = {name: pool[0] for name, pool in _field_candidates(cls).items() if pool}
        observed.append(_stand_in_reads(cls, values))
        note = ("no valid request could be built from the defaults and drawn values, so "
                "key() was observed on an unvalidated stand-in and not sampled")
    else:
        observed.append(key_reads(first))
        for _ in range(OBSERVED_REQUESTS - 1):
            request = _random_request(cls, rng)
            if request is not None:
                observed.append(key_reads(request))
    every = frozenset.intersection(*observed)
    some = frozenset.union(*observed)
    fields = frozenset(info.baked) | frozenset(info.launch)
    missing = read_by_template - every
    extra = (some & fields) - read_by_template
    sampled = Samples()
    if first is not None and samples > 0:
        sampled = sampled_proof(cls, samples=samples, seed=seed, target=target)
    return KeyReport(cls, True, read_by_template, every, some, missing, extra, sampled, note)


def spec_classes(names: Iterable[str]) -> list[type]:
    """The spec classes named: every one a module defines or imports, or ``pkg.mod:Class``.

    Raises:
        SpecError: a module cannot be imported, a class does not exist, or a module holds
            no kernel spec classes.
    """
    found: list[type] = []
    for name in names:
        if ":" in name:
            classes = [resolve_spec(name)]
        else:
            try:
                module = importlib.import_module(name)
            except ImportError as exc:
                raise SpecError(f"cannot import module {name!r}: {exc}") from None
            classes = [v for v in vars(module).values() if isinstance(v, type) and is_spec(v)]
            if not classes:
                raise SpecError(f"module {name!r} defines no @kernel_spec classes")
        found.extend(c for c in classes if c not in found)
    return found


def check_keys(names: Iterable[str], *, samples: int = 200, seed: int = 0,
               target: Target | str = "sm_90") -> list[KeyReport]:
    """:func:`analyze_class` for every spec class named (see :func:`spec_classes`)."""
    return [analyze_class(cls, samples=samples, seed=seed, target=target)
            for cls in spec_classes(names)]


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------


def _names(fields: Iterable[str]) -> str:
    return ", ".join(sorted(fields))


def _cli_words(request: Any) -> str:
    return format_request(request).split(" ", 1)[1] if attrs.fields(type(request)) else ""


def format_report(report: KeyReport) -> list[str]:
    """The lines ``specdsl check-keys`` prints for one class."""
    cls = report.cls
    title = f"{cls.__module__}.{cls.__qualname__}"
    if not report.has_key:
        return [f"ok          {title}: derived key (no key() to prove)"]
    info = spec_info(cls)
    status = "INCOMPLETE " if report.incomplete else (
        "OVER-KEYED " if report.extra else "ok         ")
    lines = [f"{status} {title}: key() reads {_names(report.key_fields_any) or 'no field'}; "
             f"template {info.template!r} reads {_names(report.template_fields) or 'no field'}"]
    if report.missing:
        lines.append(
            f"    incomplete: the template reads {_names(report.missing)} but key() does "
            "not: a request differing only there would silently run the first request's "
            "kernel")
    for example in report.counterexamples:
        name = spec_name(cls)
        lines += [
            f"    counterexample: key {example.key!r} for both, different PTX for "
            f"{example.target} (they differ in {example.field}):",
            f"        {format_request(example.first)}",
            f"        {format_request(example.second)}",
            f"        specdsl diff {name} {_cli_words(example.first)} -- "
            f"{_cli_words(example.second)}",
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
                     (f", {sampled.skipped} not renderable" if sampled.skipped else ""))
        if sampled.render_failure:
            lines.append(f"    template error (not a key problem) on {sampled.render_failure}")
    return lines


def command_check_keys(args: argparse.Namespace) -> int:
    """``specdsl check-keys [MODULE ...]``: exit 1 on an incomplete key, 0 otherwise.

    ``args``: ``modules`` (names; default ``specdsl.kernels``), ``samples``, ``seed``,
    ``target``. The CLI puts the current folder first on ``sys.path`` (as ``python -m``
    does), so ``specdsl check-keys mykernels`` works from a project's root.
    """
    names = args.modules or ["specdsl.kernels"]
    reports = check_keys(names, samples=args.samples, seed=args.seed, target=args.target)
    for report in reports:
        for line in format_report(report):
            print(line)
    keyed = [r for r in reports if r.has_key]
    incomplete = [r for r in keyed if r.incomplete]
    over = [r for r in keyed if r.extra]
    classes = "spec class" if len(reports) == 1 else "spec classes"
    print(f"checked {len(reports)} {classes} in {', '.join(names)}: {len(keyed)} with a "
          f"hand-written key(), {len(incomplete)} incomplete, {len(over)} over-specified")
    return 1 if incomplete else 0
