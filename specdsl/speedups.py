"""Which launch path runs: the compiled one (:mod:`specdsl._speedups`) or plain Python.

Installing specdsl builds ``specdsl._speedups`` from ``specdsl/_speedups.pyx`` with Cython
where a C compiler is found; the build is optional, and without it specdsl runs its
plain-Python launch path, which checks and refuses exactly the same arguments (only
slower: ``docs/performance.md``). ``SPECDSL_PURE_PYTHON=1`` chooses the Python path even
where the extension is built (for debugging, and for testing both). The choice is read when
an :class:`~specdsl.Executor` is made and when a module is loaded, not per launch.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "compiled", "speedups"]

#: ``1``: launch through the plain-Python path even where the compiled one is built.
PURE_PYTHON_ENV = "SPECDSL_PURE_PYTHON"


def speedups() -> ModuleType | None:
    """The compiled launch path, or ``None`` where it is not built or is turned off.

    Raises:
        ValueError: ``SPECDSL_PURE_PYTHON`` is set to something other than ``0`` or ``1``.
    """
    value = os.environ.get(PURE_PYTHON_ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{PURE_PYTHON_ENV} must be 0 or 1 (got {value!r})")
    if value == "1":
        return None
    try:
        from . import _speedups
    except ImportError:  # not built (no C compiler at install): the Python path
        return None
    return _speedups


def compiled() -> bool:
    """Whether launches made now take the compiled path (see :func:`speedups`)."""
    return speedups() is not None
