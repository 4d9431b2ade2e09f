"""The key ledger: the run-time proof of hand-written module keys, and its switch.

A hand-written key (a spec's ``key()`` or a ``key=`` string at a call site) names a
compiled module. If the key leaves out a baked parameter, a second request with a
different value would silently run the first request's kernel. The ledger keeps, per
hand-written key and target, the SHA-256 of the PTX compiled under it and the derived
keys proven to render that same PTX; a hit from any other request is rendered and
compared, and a mismatch raises :class:`~specdsl.errors.IncompleteKeyError`.

The switch (see :func:`checking_enabled`): on by default when ``__debug__`` is true
(off under ``python -O``); the environment variable ``SPECDSL_CHECK_KEYS`` (a switch:
``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off``) overrides that; the
pytest plugin turns it on for test runs; :func:`key_checking` and
:func:`suspend_key_proof` override it within a context.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import math
import threading
from typing import Any, Iterator

import attrs

from ..config import Knobs
from ..errors import CheckingSwitchError  # re-exported: it was defined here before
from ..errors import ConfigError, IncompleteKeyError
from .._spec.fields import canonical
from .._render.keys import derived_key
from .._render.render import render
from .._spec.decorator import is_spec, spec_info
from .._spec.target import Target

__all__ = [
    "KeyLedger", "key_checking", "suspend_key_proof", "checking_enabled", "proof_suspended",
    "set_default_checking", "reread_environment", "parse_switch", "differing_baked_fields",
    "checking_default", "CheckingDefault", "CheckingSwitchError", "ENV_VAR",
]

#: The environment variable that overrides the default (``__debug__``): a switch.
ENV_VAR = Knobs.check_keys.name


# ---------------------------------------------------------------------------------------
# The checking switch
#
# Two layers. The process default (environment, pytest plugin, ``__debug__``) is one
# global. ``key_checking`` and ``suspend_key_proof`` set context variables: they nest
# correctly when several threads or asyncio tasks enter and leave them at once (a
# process-wide flag restored on exit would let one thread's exit undo another's
# entry), and a test that switches checking off cannot switch it off for a
# concurrent one. New threads start from the process default, not from the context of
# the thread that made them: see ``docs/keys-and-proofs.md``.
# ---------------------------------------------------------------------------------------

_checking: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "specdsl_key_checking", default=None)
_suspended: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "specdsl_key_proof_suspended", default=False)


def parse_switch(value: str | None) -> bool | None:
    """The meaning of a ``SPECDSL_CHECK_KEYS`` value: ``None`` (unset or empty: the
    default), ``False`` or ``True``, by :mod:`specdsl.config`'s rule for switches
    (``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off``, in any case).

    Raises:
        CheckingSwitchError: any other value; the message names the variable and value.
    """
    try:
        return Knobs.check_keys.parse(value)
    except ConfigError as exc:
        raise CheckingSwitchError(str(exc)) from None


class _Defaults:
    """The process-wide default, read from the environment once (never per call)."""

    def __init__(self) -> None:
        self.environment: bool | None = None
        self.explicit: bool | None = None  # set by set_default_checking (the pytest plugin)
        self.value: bool | None = None     # the resolved default; None until first asked

    def resolve(self) -> bool:
        self.environment = parse_switch(Knobs.check_keys.raw())
        if self.environment is not None:
            value = self.environment
        elif self.explicit is not None:
            value = self.explicit
        else:
            value = __debug__
        self.value = value
        return value


_defaults = _Defaults()


def checking_enabled() -> bool:
    """Whether hits on hand-written keys are proven by the ledger now, in this context.

    Cheap enough for an executor's hot path: one context-variable read and one
    attribute read; the environment is parsed once, on the first call.

    Precedence: an enclosing :func:`key_checking` block, then ``SPECDSL_CHECK_KEYS``,
    then :func:`set_default_checking` (the pytest plugin), then ``__debug__``.

    Raises:
        CheckingSwitchError: on the first call, when ``SPECDSL_CHECK_KEYS`` is set to
            something that is not a switch word.
    """
    local = _checking.get()
    if local is not None:
        return local
    value = _defaults.value
    return _defaults.resolve() if value is None else value


def proof_suspended() -> bool:
    """Whether :func:`suspend_key_proof` is in force in this context (one context-variable read)."""
    return _suspended.get()


def set_default_checking(enabled: bool | None) -> bool | None:
    """Set the process-wide default below ``SPECDSL_CHECK_KEYS`` (which still wins).

    The pytest plugin calls ``set_default_checking(True)`` for the test session and
    restores the previous value after. ``None`` returns to ``__debug__``.

    Returns:
        The previous explicit default (``None`` if there was none), for restoring.

    Raises:
        TypeError: ``enabled`` is not a bool or None.
        CheckingSwitchError: ``SPECDSL_CHECK_KEYS`` is malformed.
    """
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_default_checking takes True, False or None (got {enabled!r})")
    previous = _defaults.explicit
    _defaults.explicit = enabled
    _defaults.resolve()
    return previous


@attrs.frozen
class CheckingDefault:
    """The process-wide default of the checking switch, and what decided it.

    Attributes:
        enabled: whether hand-written keys are proven outside :func:`key_checking` blocks.
        source: ``"environment"`` (``SPECDSL_CHECK_KEYS``), ``"set_default_checking"``
            (the pytest plugin, for one) or ``"__debug__"`` (on, off under ``python -O``).
    """

    enabled: bool
    source: str


def checking_default() -> CheckingDefault:
    """The process-wide default and its source (the pytest plugin's report header reads it).

    Raises:
        CheckingSwitchError: ``SPECDSL_CHECK_KEYS`` is malformed.
    """
    enabled = _defaults.resolve() if _defaults.value is None else _defaults.value
    if _defaults.environment is not None:
        return CheckingDefault(enabled, "environment")
    if _defaults.explicit is not None:
        return CheckingDefault(enabled, "set_default_checking")
    return CheckingDefault(enabled, "__debug__")


def reread_environment() -> bool:
    """Read ``SPECDSL_CHECK_KEYS`` again (it is read once, on first use) and return the default.

    Raises:
        CheckingSwitchError: the variable is set to something that is not a switch word.
    """
    return _defaults.resolve()


@contextlib.contextmanager
def key_checking(enabled: bool = True) -> Iterator[None]:
    """Turn the ledger's proof on (or off) for the code inside the ``with`` block.

    Context-local (a :mod:`contextvars` variable): it applies to this thread or asyncio
    task and to code it calls, nests correctly, and never leaks into a concurrent thread.
    Threads started inside the block begin from the process default instead (run them
    with ``contextvars.copy_context().run`` to carry the setting over).

    Raises:
        TypeError: ``enabled`` is not a bool.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"key_checking takes True or False (got {enabled!r})")
    token = _checking.set(enabled)
    try:
        yield
    finally:
        _checking.reset(token)


@contextlib.contextmanager
def suspend_key_proof() -> Iterator[None]:
    """Skip the proof on hits inside the ``with`` block; misses are still recorded.

    For tests that count host allocations or time the release path. A key first
    compiled while suspended has its PTX recorded, so its next hit outside the block is
    proven as usual. Context-local, like :func:`key_checking`.
    """
    token = _suspended.set(True)
    try:
        yield
    finally:
        _suspended.reset(token)


# ---------------------------------------------------------------------------------------
# The ledger
# ---------------------------------------------------------------------------------------


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

    last: tuple[Any, Target, str]
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

    def first_request(self, key: str, target: Target | str = "sm_90") -> Any:
        """The request recorded as the reference of ``key`` for ``target``, or ``None``."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        reference = entry.references.get(Target.parse(target))
        return None if reference is None else reference.first

    # -- the two calls an executor makes ---------------------------------------------------

    def record(self, key: str, spec: Any, target: Target | str, ptx: str | None) -> None:
        """Record that ``ptx``, rendered from ``spec`` for ``target``, was compiled under ``key``.

        Called on a miss. Cheap next to the compile it follows: a derived-key lookup,
        one SHA-256 of the PTX (about 8 us for 10 KB in all; skipped when ``ptx`` is
        ``None``) and a dictionary insert. If the
        key already has a reference for this target (an evicted module compiled again, or
        two executors sharing a ledger), the PTX is compared with it like a hit.

        Args:
            key: the hand-written key, a non-empty str.
            spec: the request compiled.
            target: a :class:`Target` or a string such as ``"sm_90"``.
            ptx: the PTX text compiled, or ``None`` when none was rendered (a cubin loaded
                from a disk cache); the digest is then computed from ``spec`` when needed.

        Raises:
            IncompleteKeyError: the key already holds different PTX for this target and
                checking is on (:func:`checking_enabled`). With checking off nothing is
                raised here, but the key is marked incomplete: once checking is on,
                every proof under it raises (two executors sharing a ledger may each hold
                one of the two modules).
            TypeError: ``key`` is not a non-empty str or ``spec`` is not a request.
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

    def prove(self, key: str, spec: Any, target: Target | str) -> None:
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
            TypeError: ``key`` is not a non-empty str or ``spec`` is not a request.
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
        if reference is None:  # no record: hash this request's PTX (outside the lock)
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
    if not isinstance(key, str) or not key:
        raise TypeError(f"a hand-written key must be a non-empty str (got {key!r})")


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
    lines.append(
        f"A parameter baked into the PTX is missing from the key ({names}): without this "
        "error the request would silently run the first request's kernel. Put it in the "
        "key, or drop the hand-written key and let specdsl derive one (specdsl.derived_key).")
    return IncompleteKeyError("\n".join(lines), key=key, first=first, request=request,
                              differing_fields=tuple(name for name, _, _ in fields))
