"""The static and sampled proof of hand-written ``key()`` methods (``specdsl check-keys``).

Static proof: the baked fields a spec's template reads (its Jinja AST, following
includes, imports and macros; a dynamic include counts as reading every field) against
the fields ``key()`` reads, observed by calling it on a recording stand-in. A field the
template reads but the key does not is an *incomplete* key; a field the key reads but the
template does not is an *over-specified* key (requests differing only there compile the
same PTX twice).

Sampled proof (:mod:`specdsl._proof.sampling`): pairs of valid requests that agree on ``key()``
but differ in one baked field, drawn from each field's type, default and validators, are
rendered and compared; a pair with different PTX is a counterexample.

This module returns data (:class:`KeyReport`); ``specdsl check-keys`` prints it.

Keys passed at call sites (``key=`` strings) are not visible here: the run-time ledger
(:mod:`specdsl._proof.ledger`) proves those.
"""

from __future__ import annotations

import functools
import inspect
import random
import threading
import types
from collections.abc import Callable
from typing import Any, cast

import attrs

from .._spec.decorator import spec_info
from .._spec.target import Target
from .._spec.values import candidates
from .sampling import (
    TIME_LIMIT_S,
    Counterexample,
    Samples,
    call_key,
    field_candidates,
    random_request,
    sampled_proof,
    template_fields,
    valid_default_request,
)

__all__ = [
    "KeyReport", "Counterexample", "Samples", "template_fields", "key_reads", "candidates",
    "sampled_proof", "analyze_class", "TIME_LIMIT_S",
    "OBSERVED_REQUESTS",
]

#: How many valid requests ``key()`` is observed on (the defaults first, then samples).
OBSERVED_REQUESTS = 8


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
    samples: Samples = attrs.field(factory=Samples)
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


_recording = threading.local()


@functools.cache
def _recording_class(cls: type) -> type:
    """A subclass of ``cls`` whose instances note each field read while recording is on."""
    names = frozenset(a.name for a in attrs.fields(cls))
    base_getattribute = cast(Callable[[Any, str], Any], cls.__getattribute__)

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
        if isinstance(attr, property) and attr.fget is not None:
            return attr.fget(self)
        if isinstance(attr, functools.cached_property):
            return attr.func(self)
        if isinstance(attr, (staticmethod, classmethod)):
            return getattr(cls, name)
        if inspect.isfunction(attr):
            return types.MethodType(attr, self)
        return getattr(cls, name)


def key_reads(request: Any) -> frozenset[str]:
    """The fields ``key()`` reads when called on (a recording copy of) ``request``.

    Raises:
        SpecDefinitionError: ``key()`` raised, or returned something other than a str.
    """
    cls: Any = type(request)  # a spec class, hashable (functools.cache)
    copy = _recording_class(cls)(**{a.name: getattr(request, a.name)
                                    for a in attrs.fields(cls) if a.init})
    reads: set[str] = set()
    _recording.reads = reads
    try:
        call_key(cls, copy)
    finally:
        _recording.reads = None
    return frozenset(reads)


def _stand_in_reads(cls: type, values: dict[str, Any]) -> frozenset[str]:
    reads: set[str] = set()
    call_key(cls, _StandIn(cls, values, reads))
    return frozenset(reads)


# ---------------------------------------------------------------------------------------
# The proofs
# ---------------------------------------------------------------------------------------


def analyze_class(cls: type, *, samples: int = 200, seed: int = 0,
                  target: Target | str | int = "sm_90") -> KeyReport:
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
    first = valid_default_request(cls) or random_request(cls, rng)
    if first is None:
        values = {name: pool[0] for name, pool in field_candidates(cls).items() if pool}
        observed.append(_stand_in_reads(cls, values))
        note = ("no valid request could be built from the defaults and drawn values, so "
                "key() was observed on an unvalidated stand-in and not sampled")
    else:
        observed.append(key_reads(first))
        for _ in range(OBSERVED_REQUESTS - 1):
            request = random_request(cls, rng)
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
