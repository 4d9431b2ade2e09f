"""The pytest plugin (entry point pytest11): key checking is on in every test run."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

import specdsl._proof.switch as switch_module

pytest_plugins = ["pytester"]

# The plugin reaches a test run through specdsl's installed entry point (pip install);
# a checkout on PYTHONPATH alone has none.
pytestmark = pytest.mark.skipif(
    not any(e.name == "specdsl" for e in entry_points(group="pytest11")),
    reason="specdsl is not installed: its pytest11 entry point is not registered")

# The inner test avoids `assert`: PYTHONOPTIMIZE=1 strips it (that is the point).
INNER_TEST = """
from specdsl import checking_enabled

def test_switch():
    print("CHECKING=%s" % checking_enabled())
    if checking_enabled() is not {expected}:
        raise AssertionError("checking_enabled() is %s" % checking_enabled())
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, expected: bool,
         *args: str, env_value: str | None = None) -> pytest.RunResult:
    monkeypatch.setenv("PYTHONOPTIMIZE", "1")  # __debug__ is False in the inner run
    if env_value is None:
        monkeypatch.delenv("SPECDSL_CHECK_KEYS", raising=False)
    else:
        monkeypatch.setenv("SPECDSL_CHECK_KEYS", env_value)
    pytester.makepyfile(test_inner=INNER_TEST.format(expected=expected))
    return pytester.runpytest_subprocess("-s", *args)


def test_plugin_turns_checking_on_under_python_o(pytester: pytest.Pytester,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A project's test run has checking on even where __debug__ is False."""
    result = _run(pytester, monkeypatch, True)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["specdsl: key checking on (specdsl pytest plugin)",
                                 "*CHECKING=True*"])


def test_without_plugin_python_o_means_off(pytester: pytest.Pytester,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With the plugin disabled (-p no:specdsl) the same run has checking off."""
    result = _run(pytester, monkeypatch, False, "-p", "no:specdsl")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("specdsl: key checking*")


def test_explicit_environment_zero_wins(pytester: pytest.Pytester,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """SPECDSL_CHECK_KEYS=0 turns checking off even under the plugin, and the header says so."""
    result = _run(pytester, monkeypatch, False, env_value="0")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["specdsl: key checking off (SPECDSL_CHECK_KEYS=0)"])


def test_bad_environment_value_stops_the_run(pytester: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """SPECDSL_CHECK_KEYS=maybe stops the test run with the variable and value named."""
    result = _run(pytester, monkeypatch, True, env_value="maybe")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*SPECDSL_CHECK_KEYS must be 1/0, true/false, yes/no or on/off*"
                                 "(got 'maybe')*"])


def test_in_process_run_restores_previous_default(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process session puts the process default back when it ends."""
    monkeypatch.delenv("SPECDSL_CHECK_KEYS", raising=False)
    previous = switch_module.set_default_checking(None)
    try:
        pytester.makepyfile(test_inner=INNER_TEST.format(expected=True))
        pytester.runpytest_inprocess().assert_outcomes(passed=1)
        assert switch_module.checking_default().source == "__debug__"
    finally:
        switch_module.set_default_checking(previous)
