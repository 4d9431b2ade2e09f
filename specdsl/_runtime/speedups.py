"""Which launch path runs: the compiled one (:mod:`specdsl._runtime._speedups`) or plain Python.

Installing specdsl builds ``specdsl._runtime._speedups`` from
``specdsl/_runtime/_speedups.pyx`` with Cython where a C compiler is found; the build is
optional, and without it specdsl runs its plain-Python launch path, which checks and
refuses exactly the same arguments (only slower: ``docs/performance.md``).
``SPECDSL_PURE_PYTHON=1`` (a switch: ``1``/``0``, ``true``/``false``, ``yes``/``no``,
``on``/``off``) chooses the Python path even where the extension is built (for debugging,
and for testing both). An :class:`~specdsl.Executor` reads the choice once, when it is
made.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from types import ModuleType

from ..config import Knobs, knobs

__all__ = ["PURE_PYTHON_ENV", "built", "compiled", "speedups"]

#: On: launch through the plain-Python path even where the compiled one is built.
PURE_PYTHON_ENV = Knobs.pure_python.name

# specdsl._runtime._speedups.INTERFACE this Python code is written against: a stale build (an
# editable install whose .pyx changed since) is not used.
_INTERFACE = 3


@functools.cache
def built() -> ModuleType | None:
    """The compiled extension where it is built and current, else ``None`` (imported once;
    a stale build is left unused with a ``RuntimeWarning``)."""
    try:
        _speedups = importlib.import_module(f"{__package__}._speedups")
    except ImportError:  # not built (no C compiler at install): the Python path
        return None
    if getattr(_speedups, "INTERFACE", None) != _INTERFACE:
        warnings.warn(f"specdsl: {_speedups.__file__} is out of date (rebuild it: "
                      f"pip install -e .); launches take the plain-Python path",
                      RuntimeWarning, stacklevel=2)
        return None
    return _speedups


def speedups() -> ModuleType | None:
    """The compiled launch path, or ``None`` where it is not built or is turned off.

    Raises:
        ConfigError: ``SPECDSL_PURE_PYTHON`` is set to something that is not a switch word.
    """
    return None if knobs.pure_python else built()


def compiled() -> bool:
    """Whether launches made now take the compiled path (see :func:`speedups`)."""
    return speedups() is not None
