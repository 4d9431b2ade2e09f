"""The checking switch: whether hand-written module keys are proven at run time.

On by default when ``__debug__`` is true (off under ``python -O``); the environment
variable ``SPECDSL_CHECK_KEYS`` (a switch: ``1``/``0``, ``true``/``false``, ``yes``/``no``,
``on``/``off``) overrides that; the pytest plugin turns it on for test runs;
:func:`key_checking` and :func:`suspend_key_proof` override it within a context. The
ledger (:mod:`specdsl._proof.ledger`) and the executor read it on every hit
(:func:`checking_enabled`, :func:`proof_suspended`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import attrs

from ..config import Knobs
from ..errors import CheckingSwitchError, ConfigError

__all__ = [
    "key_checking", "suspend_key_proof", "checking_enabled", "proof_suspended",
    "set_default_checking", "reread_environment", "parse_switch", "checking_default",
    "check_environment", "CheckingDefault", "ENV_VAR",
]

#: The environment variable that overrides the default (``__debug__``): a switch.
ENV_VAR = Knobs.check_keys.name


# Two layers. The process default (environment, pytest plugin, ``__debug__``) is one
# global. ``key_checking`` and ``suspend_key_proof`` set context variables: they nest
# correctly when several threads or asyncio tasks enter and leave them at once (a
# process-wide flag restored on exit would let one thread's exit undo another's
# entry), and a test that switches checking off cannot switch it off for a
# concurrent one. New threads start from the process default, not from the context of
# the thread that made them: see ``docs/keys-and-proofs.md``.

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


def check_environment() -> None:
    """Check ``SPECDSL_CHECK_KEYS`` now (an :class:`~specdsl.Executor` does when it is made):
    a malformed value fails there, not on the first hit of a hand-written key, inside
    serving. The default itself is still resolved on first use.

    Raises:
        CheckingSwitchError: the variable is set to something that is not a switch word.
    """
    parse_switch(Knobs.check_keys.raw())


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
