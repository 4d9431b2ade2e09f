"""What the command line says besides its output: the environment checked, one-line warnings.

- A malformed ``SPECDSL_*`` variable is a user error in every verb (:func:`check_environment`):
  one line ``specdsl VERB: error: ...`` and exit status 2, before the verb starts, so that no
  verb carries on with a setting it half read.
- A warning of specdsl's own (a :class:`~specdsl.errors.CacheWarning`, an
  :class:`~specdsl.errors.UnreadFieldWarning`) is one line ``specdsl: warning: ...`` on stderr,
  without the source line Python would show (:func:`one_line_warnings`). Only the command line
  does this: a library user's program keeps Python's own warning display.
- ``-W``/``PYTHONWARNINGS`` filters that name specdsl's warning classes are applied
  (:func:`apply_warning_options`).
"""

from __future__ import annotations

import contextlib
import importlib
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any, Literal

from ..config import variables, warn_unknown_variables
from ..errors import CacheWarning, UnknownVariableWarning, UnreadFieldWarning

__all__ = ["check_environment", "one_line_warnings", "apply_warning_options"]

#: The warning classes the command line prints as one line.
OWN_WARNINGS = (CacheWarning, UnreadFieldWarning, UnknownVariableWarning)


def check_environment() -> None:
    """Parse every variable specdsl reads (:func:`specdsl.config.variables`).

    Raises:
        ConfigError: the first variable that holds a value it cannot take (its message
            names the variable, the value and what is accepted).
    """
    for knob in variables():
        knob.parse(knob.raw())
    warn_unknown_variables()


def _message(message: Warning | str) -> str:
    text = str(message).strip().splitlines()
    first = text[0] if text else ""
    return first.removeprefix("specdsl: ")


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Inside the block, specdsl's own warnings print as ``specdsl: warning: MESSAGE``;
    every other warning is shown as Python shows it.

    The formatter is replaced, not ``showwarning``: whoever records or redirects warnings
    (``warnings.catch_warnings(record=True)``, pytest) still gets them.
    """
    formatted = warnings.formatwarning

    def format_warning(message: Warning | str, category: type[Warning], filename: str,
                       lineno: int, line: str | None = None) -> str:
        if issubclass(category, OWN_WARNINGS):
            return f"specdsl: warning: {_message(message)}\n"
        return formatted(message, category, filename, lineno, line)

    warnings.formatwarning = format_warning
    try:
        yield
    finally:
        warnings.formatwarning = formatted


_WARNING_ACTIONS: tuple[Literal["default", "always", "ignore", "module", "once", "error"], ...] = (
    "default", "always", "ignore", "module", "once", "error")


def apply_warning_options() -> None:
    """Apply ``-W``/``PYTHONWARNINGS`` filters that name specdsl's warning classes.

    Python reads those options at start-up, before any package can be imported, and
    drops an option whose category it cannot import yet ("Invalid -W option ignored");
    ``-W error::specdsl.errors.UnreadFieldWarning`` is applied here instead, with the
    standard library's rules (``action:message:category:module:lineno``).
    """
    for option in sys.warnoptions:
        parts = [part.strip() for part in option.split(":")] + [""] * 5
        action, message, category, module, line = parts[:5]
        if not category.startswith("specdsl."):
            continue
        actions = [a for a in _WARNING_ACTIONS if action and a.startswith(action)]
        module_name, _, class_name = category.rpartition(".")
        try:
            cls: Any = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        if len(actions) != 1 or not (isinstance(cls, type) and issubclass(cls, Warning)):
            continue
        warnings.filterwarnings(actions[0], re.escape(message), cls,
                                re.escape(module) + r"\Z" if module else "",
                                int(line) if line.isdigit() else 0)
