"""Which launch path this install takes: the compiled one or plain Python.

Installing specdsl builds its launch path from Cython where a C compiler is found; without
one, launches take the plain-Python path, which checks and refuses exactly the same
arguments, only slower. ``SPECDSL_PURE_PYTHON=1`` chooses the Python path even where the
compiled one is built. An :class:`~specdsl.Executor` reads the choice once, when it is
made (:attr:`specdsl.Executor.compiled` tells which path it took).
"""

from ._runtime.speedups import PURE_PYTHON_ENV, compiled

__all__ = ["compiled", "PURE_PYTHON_ENV"]
