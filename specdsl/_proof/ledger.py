"""The key ledger: the run-time proof of hand-written module keys.

A hand-written key (a spec's ``key()`` or a ``key=`` string at a call site) names a
compiled module. If the key leaves out a baked parameter, a second request with a
different value would silently run the first request's kernel. The ledger keeps, per
hand-written key and target, the SHA-256 of the PTX compiled under it and the derived
keys proven to render that same PTX; a hit from any other request is rendered and
compared, and a mismatch raises :class:`~specdsl.errors.IncompleteKeyError`. Whether it
proves is the checking switch's call (:mod:`specdsl._proof.switch`).
"""

from __future__ import annotations

import hashlib
import math
import threading
from typing import Any

import attrs

from .._render.keys import derived_key
from .._render.render import render
from .._spec.decorator import is_spec, spec_info
from .._spec.fields import canonical
from .._spec.target import Target
from ..errors import IncompleteKeyError
from .switch import checking_enabled

__all__ = ["KeyLedger", "differing_baked_fields"]


def _sha256(ptx: str) -> str:
    return hashlib.sha256(ptx.encode()).hexdigest()


@attrs.define(eq=False)
class _Reference:
    """The module compiled under one (key, target): its first request and PTX digest.

    ``digest`` is ``None`` until needed when ``record`` was given no PTX (the executor
    loaded a cubin from disk without rendering); rendering ``first`` then yields it, as
    rendering is a pure function of (request, target).
    """

    first: Any
    first_derived: str
    digest: str | None
    # a request recorded under the same key with other PTX while checking was off: the
    # key is then known incomplete, and every later proof under it raises
    conflict: Any = None


@attrs.define(eq=False)
class _Entry:
    """Everything the ledger knows about one hand-written key.

    ``last`` is ``(request, target, derived key)`` of the latest proven request, replaced
    as one object so lock-free readers never see half an update.
    """

    last: tuple[Any, Target | None, str]  # (None, None, ""): nothing proven
    proven: set[str]
    references: dict[Target, _Reference]


class KeyLedger:
    """Proves hand-written module keys at run time; thread-safe.

    For each hand-written key it keeps, per target, the first request compiled under it
    and the SHA-256 of that PTX, plus the derived keys proven to render the same PTX.
    Memory grows with the number of distinct (key, derived key) pairs seen, never with
    the number of calls.

    An executor calls :meth:`record` on every miss (whether or not checking is on) and,
    while :func:`checking_enabled` and not :func:`proof_suspended`, :meth:`prove` on
    every hit.
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    # -- bookkeeping ---------------------------------------------------------------------

    def __len__(self) -> int:
        """The number of hand-written keys recorded."""
        return len(self._entries)

    def proven_count(self) -> int:
        """The number of (hand-written key, derived key) pairs proven, references included."""
        with self._lock:
            return sum(len(entry.proven) for entry in self._entries.values())

    def first_request(self, key: str, target: Target | str | int = "sm_90") -> Any:
        """The request recorded as the reference of ``key`` for ``target``, or ``None``."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        reference = entry.references.get(Target.parse(target))
        return None if reference is None else reference.first

    # -- the two calls an executor makes ---------------------------------------------------

    def record(self, key: str, spec: Any, target: Target | str | int, ptx: str | None) -> None:
        """Record that ``ptx``, rendered from ``spec`` for ``target``, was compiled under ``key``.

        Called on a miss. Cheap next to the compile it follows: a derived-key lookup,
        one SHA-256 of the PTX (about 8 us for 10 KB in all; skipped when ``ptx`` is
        ``None``) and a dictionary insert. If the
        key already has a reference for this target (an evicted module compiled again, or
        two executors sharing a ledger), the PTX is compared with it like a hit.

        Args:
            key: the hand-written key, a non-blank str.
            spec: the request compiled.
            target: a :class:`Target`, a string such as ``"sm_90"`` or an int such as ``90``.
            ptx: the PTX text compiled, or ``None`` when none was rendered (a cubin loaded
                from a disk cache); the digest is then computed from ``spec`` when needed.

        Raises:
            IncompleteKeyError: the key already holds different PTX for this target and
                checking is on (:func:`checking_enabled`). With checking off nothing is
                raised here, but the key is marked incomplete: once checking is on,
                every proof under it raises (two executors sharing a ledger may each hold
                one of the two modules).
            TypeError: ``key`` is not a non-blank str or ``spec`` is not a request.
        """
        _check_key(key)
        target = Target.parse(target)
        derived = derived_key(spec, target)
        digest = None if ptx is None else _sha256(ptx)
        with self._lock:
            entry, reference = self._adopt(key, spec, target, derived, digest)
            if reference is None:
                return
            if derived in entry.proven:
                return
            if digest is not None and digest == reference.digest:
                entry.proven.add(derived)
                entry.last = (spec, target, derived)
                return
        # Other PTX (or PTX not hashed yet) under a key that has a reference.
        if checking_enabled():
            self._compare(key, entry, reference, spec, target, derived, digest)
        elif digest is not None and reference.digest is not None:
            with self._lock:  # known incomplete: no fast path may prove under it again
                reference.conflict = spec
                entry.proven.clear()
                entry.last = (None, None, "")

    def prove(self, key: str, spec: Any, target: Target | str | int) -> None:
        """Prove that ``spec`` renders the PTX compiled under ``key`` for ``target``.

        Called on a hit. A request already proven under ``key`` renders nothing: the
        last proven request itself costs two identity checks; an equal request, a
        comparison of its baked values with the last proven one's; any other proven
        request, its derived key, one string comparison and one set lookup. A request
        not yet proven is rendered (outside the lock) and its SHA-256 compared: equal
        PTX (the requests differ only in launch fields or in baked fields the template
        ignores) is recorded as proven.

        A key with no record (a module compiled by code that never called
        :meth:`record`) takes ``spec`` as its reference: later hits are proven against
        it, but ``spec`` itself is not checked against the module already compiled.
        An executor that records every miss never reaches this case.

        Raises:
            IncompleteKeyError: ``spec`` renders different PTX from the key's first
                request; the message names the key, both requests and the baked fields
                that differ, and says a parameter baked into the PTX is missing from
                the key.
            TypeError: ``key`` is not a non-blank str or ``spec`` is not a request.
            RenderError: ``spec`` cannot be rendered for ``target``.
        """
        entry = self._entries.get(key)
        if entry is not None:
            last_spec, last_target, last_derived = entry.last
            if not isinstance(target, Target):
                target = Target.parse(target)
            if last_target is target and type(last_spec) is type(spec) and (
                    last_spec is spec or _same_baked(last_spec, spec)):
                return
            derived = derived_key(spec, target)
            if derived == last_derived or derived in entry.proven:
                entry.last = (spec, target, derived)
                return
        else:
            _check_key(key)
            target = Target.parse(target)
            derived = derived_key(spec, target)
        self._slow_prove(key, spec, target, derived)

    # -- the slow path ----------------------------------------------------------------------

    def _adopt(self, key: str, spec: Any, target: Target, derived: str,
               digest: str | None) -> tuple[_Entry, _Reference | None]:
        """Under the lock: make ``spec`` the reference of (key, target) if there is none.

        Returns the key's entry and its existing reference, or ``None`` when ``spec``
        has just become the reference.
        """
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(
                last=(spec, target, derived), proven={derived},
                references={target: _Reference(spec, derived, digest)})
            return entry, None
        reference = entry.references.get(target)
        if reference is None:
            entry.references[target] = _Reference(spec, derived, digest)
            entry.proven.add(derived)
            entry.last = (spec, target, derived)
        return entry, reference

    def _slow_prove(self, key: str, spec: Any, target: Target, derived: str) -> None:
        with self._lock:
            entry = self._entries.get(key)
            reference = None if entry is None else entry.references.get(target)
        digest = None
        if entry is None or reference is None:  # no record: hash this request's PTX
            digest = _sha256(render(spec, target))
            with self._lock:
                entry, reference = self._adopt(key, spec, target, derived, digest)
            if reference is None:
                return
            # another thread recorded a reference meanwhile: compare with it
        self._compare(key, entry, reference, spec, target, derived, digest)

    def _compare(self, key: str, entry: _Entry, reference: _Reference, spec: Any,
                  target: Target, derived: str, digest: str | None) -> None:
        """Render what is missing (outside the lock), then prove or raise."""
        if reference.conflict is not None:
            raise _incomplete(key, reference.first, reference.conflict, target)
        if reference.digest is None:
            reference.digest = _sha256(render(reference.first, target))
        if digest is None:
            digest = _sha256(render(spec, target))
        if digest != reference.digest:
            raise _incomplete(key, reference.first, spec, target)
        with self._lock:
            entry.proven.add(derived)
            entry.last = (spec, target, derived)


def _same_baked(a: Any, b: Any) -> bool:
    """True only if two requests of one class have identical baked values (so the same PTX).

    Cheaper than hashing a fresh request for its derived key: ints, strs, enum members and
    floats (by value and sign; NaN never matches) are compared directly; any other type
    answers False, and the caller falls back to the derived key.
    """
    for name in spec_info(a).baked:
        x, y = getattr(a, name), getattr(b, name)
        if x is y:
            continue
        kind = type(x)
        if kind is not type(y):
            return False
        if kind is float:
            if x != y or math.copysign(1.0, x) != math.copysign(1.0, y):
                return False
        elif kind is int or kind is str:
            if x != y:
                return False
        else:
            return False
    return True


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not key.strip():
        raise TypeError(f"a hand-written key must be a non-blank str (got {key!r})")


def differing_baked_fields(first: Any, request: Any) -> tuple[tuple[str, Any, Any], ...]:
    """``(field, first value, request value)`` for each baked field whose values differ.

    Values compare by their canonical form (``0.0`` and ``-0.0`` differ). For requests
    of two different spec classes, every baked field of either class that is absent
    from the other or differs is listed (an absent value shows as ``<absent>``).
    """
    absent = _Absent()
    names = list(spec_info(first).baked)
    if type(request) is not type(first):
        names += [n for n in spec_info(request).baked if n not in names]
    differing = []
    for name in names:
        a = getattr(first, name, absent) if name in spec_info(first).baked else absent
        b = getattr(request, name, absent) if name in spec_info(request).baked else absent
        if a is absent or b is absent or canonical(a) != canonical(b):
            differing.append((name, a, b))
    return tuple(differing)


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


def _incomplete(key: str, first: Any, request: Any, target: Target) -> IncompleteKeyError:
    fields = differing_baked_fields(first, request) if is_spec(request) else ()
    lines = [
        f"hand-written key {key!r} maps two requests that render different PTX for {target}:",
        f"  first:   {first!r}",
        f"  request: {request!r}",
    ]
    if type(first) is not type(request):
        lines.append(f"  the requests are of different spec classes "
                     f"({type(first).__qualname__} and {type(request).__qualname__})")
    if fields:
        lines.append("  differing baked fields: " + "; ".join(
            f"{name}: {a!r} != {b!r}" for name, a, b in fields))
    names = ", ".join(name for name, _, _ in fields) or "a baked field"
    if type(first) is not type(request):  # the fields of two kernels: the kernel is missing
        lines.append(
            f"The key does not tell two kernels apart ({type(first).__qualname__} and "
            f"{type(request).__qualname__}): without this error the request would silently "
            "run the first request's kernel. Put the kernel (its spec class) in the key, with "
            "the baked fields it needs, or drop the hand-written key and let specdsl derive "
            "one (specdsl.derived_key).")
    else:
        lines.append(
            f"A parameter baked into the PTX is missing from the key ({names}): without this "
            "error the request would silently run the first request's kernel. Put it in the "
            "key, or drop the hand-written key and let specdsl derive one "
            "(specdsl.derived_key).")
    return IncompleteKeyError("\n".join(lines), key=key, first=first, request=request,
                              differing_fields=tuple(name for name, _, _ in fields))
