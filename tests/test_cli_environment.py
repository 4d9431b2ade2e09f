"""The command line and the environment: a malformed SPECDSL_* variable is one error line
with exit status 2 in every verb; specdsl's warnings are one line each (docs/cli.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from specdsl._cli.main import main
from test_cli import assert_one_error_line

VERBS = [["render", "vectoradd"], ["verify", "vectoradd"], ["key", "vectoradd"], ["list"],
         ["list", "rmsnorm"], ["check-keys", "--samples", "0"],
         ["diff", "vectoradd", "--", "dtype=f16"], ["cache", "info"], ["cache", "prune"],
         ["cache", "clear"], ["run"]]

MALFORMED = [
    ("SPECDSL_CACHE_MAX_BYTES", "10Q", "SPECDSL_CACHE_MAX_BYTES must be a size in bytes"),
    ("SPECDSL_CACHE_DIR", "yes", "SPECDSL_CACHE_DIR must name a folder"),
    ("SPECDSL_PURE_PYTHON", "maybe", "SPECDSL_PURE_PYTHON must be 1/0"),
    ("SPECDSL_CHECK_KEYS", "maybe", "SPECDSL_CHECK_KEYS must be 1/0"),
]


@pytest.mark.parametrize("variable, value, message", MALFORMED)
@pytest.mark.parametrize("argv", VERBS, ids=" ".join)
def test_malformed_variable_is_one_error_line_in_every_verb(capsys, monkeypatch, argv,
                                                            variable, value, message):
    """Every verb refuses a malformed variable alike: exit 2, one line naming it, no output."""
    monkeypatch.setenv(variable, value)
    code = main(argv)
    out, err = capsys.readouterr()
    verb = " ".join(argv[:2]) if argv[0] == "cache" else argv[0]  # "cache prune": its action
    line = assert_one_error_line(err, f"specdsl {verb}: error: ")
    assert code == 2 and out == "" and message in line and repr(value) in line


def _specdsl(*argv: str, cache: Path | str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPECDSL_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "specdsl", *argv], env=env, text=True,
                          capture_output=True, timeout=300)


@pytest.mark.parametrize("argv", [["render", "vectoradd"], ["verify", "vectoradd"],
                                  ["list"], ["key", "vectoradd"]], ids=" ".join)
def test_cache_warning_is_one_line(tmp_path, argv):
    """A cache folder that is a file: every verb that can do without the cache says so in
    one 'specdsl: warning:' line, no source line, and succeeds."""
    path = tmp_path / "file"
    path.write_text("x")
    done = _specdsl(*argv, cache=path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"specdsl: warning: specdsl cache folder {str(path)!r} is not a "
                           f"folder; carrying on without the cache\n")


def test_cache_verb_names_the_same_problem(tmp_path):
    """specdsl cache, whose job is the folder, refuses it with the same words (exit 2)."""
    path = tmp_path / "file"
    path.write_text("x")
    done = _specdsl("cache", "info", cache=path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"specdsl cache info: error: specdsl cache folder {str(path)!r} is not "
                           f"a folder\n")


def test_unread_field_warning_is_one_line(tmp_path):
    """An UnreadFieldWarning from a user module prints as one 'specdsl: warning:' line."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "unread.ptx.j2").write_text(
        '{% include "header.ptx.j2" %}\n.visible .entry {{ entry }}()\n{\n    ret;\n}\n')
    (tmp_path / "unreadmod.py").write_text(
        "from specdsl import baked, kernel_spec\n"
        "@kernel_spec(template='unread.ptx.j2', entry='unread', template_dir='t')\n"
        "class Unread:\n"
        "    n: int = baked(1)\n")
    done = _specdsl("key", f"{tmp_path / 'unreadmod.py'}:Unread", cache="off")
    lines = done.stderr.splitlines()
    assert done.returncode == 0 and len(lines) == 1, done.stderr
    assert lines[0].startswith("specdsl: warning: ") and "never reads baked field(s) n" in lines[0]


def test_library_warnings_keep_pythons_display(capsys):
    """After a command, warnings.formatwarning is Python's again: library users see warnings
    as Python shows them."""
    before = warnings.formatwarning
    main(["key", "vectoradd"])
    capsys.readouterr()
    assert warnings.formatwarning is before


@pytest.mark.parametrize("variable, known", [("SPECDSL_CACHE_DIRECTORY", "SPECDSL_CACHE_DIR"),
                                             # nearer CACHE_DIR by spelling; SIZE means the cap
                                             ("SPECDSL_CACHE_SIZE", "SPECDSL_CACHE_MAX_BYTES"),
                                             ("SPECDSL_CACHE_LIMIT", "SPECDSL_CACHE_MAX_BYTES"),
                                             ("SPECDSL_CHECK_KEY", "SPECDSL_CHECK_KEYS"),
                                             ("SPECDSL_PURE_PYHTON", "SPECDSL_PURE_PYTHON")])
def test_a_misspelt_variable_is_named_once(tmp_path, monkeypatch, variable, known):
    """A SPECDSL_* name close to one specdsl reads has no effect: a command says so in one
    warning line, naming the variable it is close to, and runs; an Executor warns once per
    process (UnknownVariableWarning). A name close to none (the tests' own
    SPECDSL_UPDATE_GOLDEN) is left alone."""
    import specdsl.config as config
    from specdsl import Executor, UnknownVariableWarning

    monkeypatch.setenv(variable, "0")
    monkeypatch.setenv("SPECDSL_UPDATE_GOLDEN", "0")
    done = _specdsl("list", cache=tmp_path)
    assert done.returncode == 0 and done.stdout
    assert done.stderr == (f"specdsl: warning: {variable} is no variable specdsl reads, so it "
                           f"has no effect; did you mean {known}? (docs/environment.md lists "
                           "them)\n")
    monkeypatch.setattr(config, "_warned", set())
    with pytest.warns(UnknownVariableWarning, match=f"{variable} is no variable") as record:
        Executor(None, target="sm_90", cache_dir="off")
        Executor(None, target="sm_90", cache_dir="off")
    assert len(record) == 1
