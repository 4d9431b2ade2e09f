"""The sampled proof of hand-written ``key()`` methods: requests drawn, rendered, compared.

Pairs of valid requests that agree on ``key()`` but differ in one baked field, drawn from
each field's type, default and validators (:func:`specdsl._spec.values.candidates`), are
rendered and compared; a pair with different PTX is a :class:`Counterexample`. This
catches what reading ``key()`` cannot: a key that reads ``eps`` but rounds it away.
:mod:`specdsl._proof.analysis` runs it after the static proof.
"""

from __future__ import annotations

import functools
import random
import time
import typing
from collections.abc import Callable, Iterable
from typing import Any, cast

import attrs

from .._render.keys import checked_hand_key
from .._render.render import render, template_crashed
from .._spec.decorator import spec_info
from .._spec.fields import canonical, is_factory
from .._spec.target import Target
from .._spec.values import candidates
from ..errors import RenderError, SpecDefinitionError, SpecdslError

__all__ = ["Counterexample", "Samples", "sampled_proof", "template_fields", "call_key",
           "valid_default_request", "random_request", "field_candidates", "TIME_LIMIT_S"]

#: Wall-clock bound of the sampled proof of one spec class, in seconds.
TIME_LIMIT_S = 10.0
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
        render_failure: the first template crash (a :class:`RenderError` wrapping an
            exception the template's own code raised, such as a division by zero:
            :func:`~specdsl._render.render.template_crashed`), as its message, which names
            the request; or "".
    """

    counterexamples: tuple[Counterexample, ...] = ()
    pairs: int = 0
    shared: int = 0
    skipped: int = 0
    render_failure: str = ""


def template_fields(cls: type) -> frozenset[str]:
    """The baked fields of ``cls`` its template (with everything it reaches) reads.

    A dynamic include or import (a template name computed at render time) could read
    anything, so it counts as reading every baked field.
    """
    info = spec_info(cls)
    if info.facts.dynamic:
        return frozenset(info.baked)
    return frozenset(info.facts.names) & frozenset(info.baked)


def call_key(cls: type, subject: Any) -> str:
    """``cls.key(subject)``, checked: a non-blank str (:func:`checked_hand_key`).

    Raises:
        SpecDefinitionError: ``key()`` raised, or returned something other than a
            non-blank str.
    """
    try:
        value = cast(Any, cls).key(subject)  # a spec class with a key() method
    except Exception as exc:
        raise SpecDefinitionError(
            f"{cls.__qualname__}.key() raised {type(exc).__name__}: {exc} "
            f"(called on {subject!r})") from exc
    return checked_hand_key(cls, value)


@functools.cache
def field_candidates(cls: type) -> dict[str, list[Any]]:
    """``{field: candidates}`` for each init field (computed defaults left out of the pool)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for a in attrs.fields(cls):
        if not a.init:
            continue
        default = a.default
        if is_factory(default):
            default = attrs.NOTHING  # computed by the class: see _factory_fields
        out[a.name] = candidates(hints[a.name], default)
    return out


@functools.cache
def _factory_fields(cls: type) -> frozenset[str]:
    """Fields whose default the class computes (``attrs.Factory``), often from other fields."""
    return frozenset(a.name for a in attrs.fields(cls)
                     if a.init and is_factory(a.default))


def _build(cls: type, values: dict[str, Any]) -> Any | None:
    try:
        return cls(**values)
    except (SpecdslError, ValueError, TypeError):
        return None


def valid_default_request(cls: type) -> Any | None:
    """The request with every field at its default (computed ones left to the class), or
    ``None`` when the class has no valid one."""
    pools, computed = field_candidates(cls), _factory_fields(cls)
    return _build(cls, {name: pool[0] for name, pool in pools.items()
                        if pool and name not in computed})


def random_request(cls: type, rng: random.Random) -> Any | None:
    """A valid request with each field, independently, at its default or a drawn value
    (the default request when no draw is valid; ``None`` when that is not either)."""
    pools, computed = field_candidates(cls), _factory_fields(cls)
    for _ in range(_ATTEMPTS):
        values = {}
        for name, pool in pools.items():
            if not pool or (name in computed and rng.random() < 0.5):
                continue  # leave a computed default to the class half the time
            values[name] = pool[0] if rng.random() < 0.4 else rng.choice(pool)
        request = _build(cls, values)
        if request is not None:
            return request
    return valid_default_request(cls)


def _variant(request: Any, field: str, rng: random.Random) -> Any | None:
    """``request`` with ``field`` changed to another valid value, or ``None`` if none is."""
    cls: Any = type(request)  # a spec class, hashable (functools.cache)
    pool = list(field_candidates(cls)[field])
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


def _field_default(request: Any, name: str) -> Any:
    """The value field ``name`` takes when ``request``'s other fields are given and it is
    left out (its default, or the one the class computes); ``attrs.NOTHING`` when it has
    none or that request is refused."""
    cls = type(request)
    values = {a.name: getattr(request, a.name) for a in attrs.fields(cls)
              if a.init and a.name != name}
    built = _build(cls, values)
    return attrs.NOTHING if built is None else getattr(built, name)


def _toward_defaults(example: Counterexample, ptx: Callable[[Any], str | None],
                     deadline: float) -> Counterexample:
    """``example`` moved toward the default request, one step at a time, each kept only
    where the two requests stay valid, share a key (the key follows them) and still render
    different PTX: the first request's value of the differing field at its default (the two
    swapped where the second held it); each other field (launch fields first, then baked
    ones) at its default in both, computed defaults following the field's default; the
    second request's value at the first of the field's candidates (:func:`field_candidates`:
    values near the default first) that differs. Drawn values elsewhere are noise in a pair
    meant to be pasted; the default request is the one its author built the kernel for.
    Stops where ``deadline`` (``time.monotonic()``) has passed."""
    field = example.field
    first, second, key = example.first, example.second, example.key

    def holds(a: Any, b: Any) -> str | None:  # the key they share, if still a collision
        try:
            shared = call_key(type(a), a)
            if call_key(type(b), b) != shared:
                return None
        except SpecdslError:
            return None
        pa, pb = ptx(a), ptx(b)
        return shared if pa is not None and pb is not None and pa != pb else None

    def evolved(request: Any, name: str, value: Any) -> Any | None:
        try:
            return attrs.evolve(request, **{name: value})
        except (SpecdslError, ValueError, TypeError):
            return None

    def differ(a: Any, b: Any) -> bool:
        return bool(canonical(getattr(a, field)) != canonical(getattr(b, field)))

    default = _field_default(first, field)
    if default is not attrs.NOTHING:
        moved = evolved(first, field, default)
        if moved is not None and not differ(moved, second):
            first, second = second, first  # the second is the default request's value
        elif moved is not None and (shared := holds(moved, second)) is not None:
            first, key = moved, shared
    for name in (*spec_info(type(first)).launch, *spec_info(type(first)).baked):
        value = _field_default(first, name)
        if name == field or value is attrs.NOTHING or time.monotonic() > deadline:
            continue
        a, b = evolved(first, name, value), evolved(second, name, value)
        if a is not None and b is not None and (shared := holds(a, b)) is not None:
            first, second, key = a, b, shared
    cls: Any = type(first)  # a spec class, hashable (functools.cache)
    for value in field_candidates(cls).get(field, ()):  # nearest values first
        if time.monotonic() > deadline:
            break
        b = evolved(second, field, value)
        if b is not None and differ(first, b) and (shared := holds(first, b)) is not None:
            second, key = b, shared
            break
    return attrs.evolve(example, key=key, first=first, second=second)


def sampled_proof(cls: type, *, samples: int = 200, seed: int = 0,
                  target: Target | str | int = "sm_90", fields: Iterable[str] | None = None,
                  time_limit: float = TIME_LIMIT_S) -> Samples:
    """Search for two valid requests with equal ``key()`` and different PTX.

    Each sample takes a random valid request and changes one baked field (round-robin
    over ``fields``, by default every field the template reads) to another valid value.
    Pairs whose keys agree are rendered for ``target`` and compared. Stops after
    ``samples`` pairs or ``time_limit`` seconds; a field with a counterexample is not
    sampled again. Deterministic for a given ``seed``. A counterexample's other fields are
    set back to their defaults (the same in both requests), and its first request's value
    of the field to the default, wherever the pair still holds, so that the pair printed is
    the default request and one change to it where that shows the collision.

    Returns:
        A :class:`Samples`. A request that cannot be rendered (a :class:`RenderError`,
        a template crash included) skips its pair.

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
            except RenderError as exc:
                renders[request] = None
                if template_crashed(exc):  # a template bug: report it, keep proving keys
                    failures.append(str(exc))
            except Exception as exc:  # whatever else render() lets through: report it too
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
        first = random_request(cls, rng)
        second = None if first is None else _variant(first, field, rng)
        if second is None:
            continue
        pairs += 1
        key = call_key(cls, first)
        if call_key(cls, second) != key:
            continue
        shared += 1
        a, b = ptx(first), ptx(second)
        if a is None or b is None:
            skipped += 1
            continue
        if a != b:
            found[field] = _toward_defaults(
                Counterexample(key, field, first, second, target), ptx, deadline)
    return Samples(tuple(found[f] for f in order if f in found), pairs, shared, skipped,
                   failures[0] if failures else "")
