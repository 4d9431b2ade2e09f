"""cuda.core, imported once under a lock, before any specdsl module takes names from it.

Two threads whose first use of cuda.core comes at the same moment each start its import,
and CPython's module locks can then hand one of them the versioned submodule
(``cuda.core.cu13``) before its names are set: ``ImportError: cannot import name 'Linker'``.
It happened with cuda.core 1.2 on the first nvJitLink compiles of a thread pool (nvJitLink
releases the GIL, so compiling on threads pays). Every import of cuda.core in specdsl calls
:func:`load` first; after the first call it costs one attribute read.
"""

from __future__ import annotations

import importlib
import threading

__all__ = ["load"]

_LOCK = threading.Lock()
_loaded = False


def load() -> None:
    """Import ``cuda.core`` and ``cuda.core.utils`` (and, through them, ``cuda.bindings``)
    if no thread has yet; a thread that arrives meanwhile waits for the import to finish.

    Raises:
        ImportError: cuda-python is not installed (the next call tries again).
    """
    global _loaded
    if _loaded:
        return
    with _LOCK:
        if not _loaded:
            importlib.import_module("cuda.core")
            importlib.import_module("cuda.core.utils")  # FileStreamProgramCache, StridedMemoryView
            _loaded = True
