"""pytest plugin (entry point ``pytest11``): key checking is on in every test run.

Installed with specdsl, so any project's test suite proves its hand-written module
keys whatever ``__debug__`` says (``python -O -m pytest`` included). An explicit
``SPECDSL_CHECK_KEYS=0`` still wins; ``pytest -p no:specdsl`` disables the plugin.
The previous default is restored when the session ends, so an in-process run
(pytest's ``pytester``) leaves its host as it found it.
"""

from __future__ import annotations

import pytest

from . import switch

_PREVIOUS = pytest.StashKey[bool | None]()


def pytest_configure(config: pytest.Config) -> None:
    """Turn key checking on for the session (below ``SPECDSL_CHECK_KEYS``)."""
    config.stash[_PREVIOUS] = switch.set_default_checking(True)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore the default that was in force before the session."""
    if _PREVIOUS in config.stash:
        switch.set_default_checking(config.stash[_PREVIOUS])


def pytest_report_header(config: pytest.Config) -> str:
    """One header line saying whether hand-written keys are proven in this run."""
    state = "on" if switch.checking_enabled() else "off"
    default = switch.checking_default()
    source = (f" ({switch.ENV_VAR}={'1' if default.enabled else '0'})"
              if default.source == "environment" else " (specdsl pytest plugin)")
    return f"specdsl: key checking {state}{source}"
