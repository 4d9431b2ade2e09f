"""specdsl.config: every environment variable declared once, with one parsing rule each."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from specdsl.config import (
    DEFAULT_CACHE_MAX_BYTES,
    Knobs,
    knobs,
    parse_folder,
    parse_size,
    variables,
)
from specdsl.errors import ConfigError, SpecdslError

ROOT = Path(__file__).resolve().parents[1]
SWITCHES = [knob for knob in variables() if knob.type == "switch"]


@pytest.mark.parametrize("knob", SWITCHES, ids=lambda k: k.name)
@pytest.mark.parametrize("text, value", [
    ("1", True), ("0", False), ("true", True), ("False", False), ("YES", True), ("no", False),
    ("On", True), ("OFF", False), (" yes\n", True)])
def test_every_switch_takes_the_same_words(monkeypatch, knob, text, value):
    """Each switch variable reads 1/0, true/false, yes/no, on/off in any case, blanks ignored."""
    monkeypatch.setenv(knob.name, text)
    assert getattr(knobs, _attribute(knob)) is value


@pytest.mark.parametrize("knob", SWITCHES, ids=lambda k: k.name)
@pytest.mark.parametrize("text", ["2", "y", "maybe", "enabled", "1 0"])
def test_every_switch_refuses_other_words(monkeypatch, knob, text):
    """Anything else is a ConfigError naming the variable, the value and the accepted words."""
    monkeypatch.setenv(knob.name, text)
    with pytest.raises(ConfigError) as info:
        getattr(knobs, _attribute(knob))
    assert str(info.value) == (f"{knob.name} must be 1/0, true/false, yes/no or on/off "
                               f"(any case), or unset (got {text!r})")
    assert isinstance(info.value, SpecdslError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("knob", variables(), ids=lambda k: k.name)
@pytest.mark.parametrize("text", [None, "", "  "])
def test_unset_and_empty_mean_the_default(monkeypatch, knob, text):
    """Unset and empty (NAME=) both give the variable's default."""
    if text is None:
        monkeypatch.delenv(knob.name, raising=False)
    else:
        monkeypatch.setenv(knob.name, text)
    assert knob.parse(text) == knob.parse(None)
    assert not knob.is_set()


def _attribute(knob) -> str:
    return next(name for name, value in vars(Knobs).items() if value is knob)


@pytest.mark.parametrize("text, size", [
    ("1073741824", 1 << 30), ("512M", 512 << 20), ("4g", 4 << 30), ("64KiB", 64 << 10),
    ("2 GB", 2 << 30), ("100b", 100), ("1T", 1 << 40)])
def test_sizes(text, size):
    """A size is digits with an optional K/M/G/T suffix, in powers of 1024."""
    assert parse_size("SPECDSL_CACHE_MAX_BYTES", text) == size


@pytest.mark.parametrize("text", ["0", "off", "none", "No"])
def test_size_off_means_no_cap(text):
    """An off word or none means no cap."""
    assert parse_size("SPECDSL_CACHE_MAX_BYTES", text) is None


@pytest.mark.parametrize("text", ["1.5G", "-1", "lots", "10 X", "G"])
def test_bad_size_is_a_config_error(text):
    """A size that is not whole bytes is refused, naming the variable and the value."""
    with pytest.raises(ConfigError, match=rf"SPECDSL_CACHE_MAX_BYTES must be a size in bytes "
                                          rf".*\(got {re.escape(repr(text))}\)"):
        parse_size("SPECDSL_CACHE_MAX_BYTES", text)


@pytest.mark.parametrize("text", ["4", "1", "4096", "1048575", " 16 "])
def test_a_bare_cap_under_a_mebibyte_is_refused(monkeypatch, text):
    """SPECDSL_CACHE_MAX_BYTES=4 (meant as 4G) would empty the cache at every check: digits
    alone under 1 MiB are refused, naming the variable, the bytes and the units to give."""
    monkeypatch.setenv("SPECDSL_CACHE_MAX_BYTES", text)
    word = text.strip()
    big, small = ("G", "M") if int(word) < 1024 else ("M", "K")  # 4: 4G; 4096: 4096M
    with pytest.raises(ConfigError, match=re.escape(
            f"SPECDSL_CACHE_MAX_BYTES={word} is {int(word)} bytes, under 1 MiB, which holds a "
            f"handful of cached modules at most: give a unit, such as {word}{big} or "
            f"{word}{small} (or {word}B if bytes are meant), or off/0/none for no limit")):
        _ = knobs.cache_max_bytes


@pytest.mark.parametrize("text, size", [("1048576", 1 << 20), ("4B", 4), ("16K", 16 << 10),
                                        ("0", None)])
def test_caps_with_units_or_of_a_mebibyte_are_taken(monkeypatch, text, size):
    """Digits from 1 MiB up, any size with a unit, and the off words are taken as before."""
    monkeypatch.setenv("SPECDSL_CACHE_MAX_BYTES", text)
    assert knobs.cache_max_bytes == size


def test_cache_max_bytes_default(monkeypatch):
    """Unset, the cap is 1 GiB."""
    monkeypatch.delenv("SPECDSL_CACHE_MAX_BYTES", raising=False)
    assert knobs.cache_max_bytes == DEFAULT_CACHE_MAX_BYTES == 1 << 30


@pytest.mark.parametrize("text", ["off", "0", "FALSE", "no", "none", " Off "])
def test_cache_dir_off_words(text):
    """The off words turn the cache off."""
    assert parse_folder("SPECDSL_CACHE_DIR", text) is None


@pytest.mark.parametrize("text", ["1", "yes", "True", "on"])
def test_cache_dir_refuses_switch_on_words(text):
    """A switch-on word where a folder was meant is refused rather than made a folder named '1'."""
    with pytest.raises(ConfigError, match=r"SPECDSL_CACHE_DIR must name a folder"):
        parse_folder("SPECDSL_CACHE_DIR", text)


def test_cache_dir_default_follows_xdg(monkeypatch, tmp_path):
    """Unset, the folder is $XDG_CACHE_HOME/specdsl, else ~/.cache/specdsl."""
    monkeypatch.delenv("SPECDSL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert knobs.cache_dir == tmp_path / "specdsl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert knobs.cache_dir == Path("~/.cache/specdsl").expanduser()


@pytest.mark.parametrize("text", ["cache", "./cache", "relative/cache"])
def test_relative_xdg_cache_home_is_ignored(monkeypatch, text):
    """A relative XDG_CACHE_HOME is invalid by the XDG specification: ignored, so the
    default folder is ~/.cache/specdsl."""
    monkeypatch.delenv("SPECDSL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", text)
    assert knobs.cache_dir == Path("~/.cache/specdsl").expanduser()


def test_cache_dir_expands_home(monkeypatch):
    """A folder under ~ is expanded."""
    monkeypatch.setenv("SPECDSL_CACHE_DIR", "~/kernels")
    assert knobs.cache_dir == Path("~/kernels").expanduser()


def test_environment_page_lists_every_variable():
    """docs/environment.md has one table row per variable, with its type and default."""
    page = (ROOT / "docs" / "environment.md").read_text().split("## Parsing rules")[0]
    rows = {m[1]: m[0] for m in re.finditer(r"^\| `(\w+)` \|.*$", page, re.MULTILINE)}
    assert set(rows) == {knob.name for knob in variables()}
    for knob in variables():
        assert f"| {knob.type} |" in rows[knob.name] and knob.default in rows[knob.name]


def test_no_module_reads_the_environment_but_config():
    """specdsl code reads its variables through specdsl.config, never os.environ/os.getenv."""
    readers = [path.name for path in (ROOT / "specdsl").rglob("*.py")
               if re.search(r"os\.environ|os\.getenv|environ\.get", path.read_text())]
    assert readers == ["config.py"]


def test_pure_python_typo_is_one_line_from_the_cli():
    """SPECDSL_PURE_PYTHON=maybe makes `specdsl run` print one error line, exit 2, no traceback."""
    import os

    env = dict(os.environ, SPECDSL_PURE_PYTHON="maybe", SPECDSL_CACHE_DIR="off")
    done = subprocess.run([sys.executable, "-m", "specdsl", "run"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "specdsl run: error: SPECDSL_PURE_PYTHON must be 1/0, true/false, yes/no or on/off "
        "(any case), or unset (got 'maybe')")


def test_malformed_cap_is_one_line_from_the_cli(tmp_path):
    """SPECDSL_CACHE_MAX_BYTES=lots makes `specdsl run` print one error line and exit 2 (the
    executor reads it before it opens the device)."""
    import os

    env = dict(os.environ, SPECDSL_CACHE_MAX_BYTES="lots", SPECDSL_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "specdsl", "run"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("specdsl run: error: SPECDSL_CACHE_MAX_BYTES must be a size")
    assert done.stderr.count("\n") == 1


def test_the_test_session_never_uses_the_users_cache():
    """tests/conftest.py points SPECDSL_CACHE_DIR at a session folder of its own, so the
    suite never writes into ~/.cache/specdsl."""
    from conftest import SESSION_CACHE
    from specdsl._templating.cache import store

    assert knobs.cache_dir == Path(SESSION_CACHE)
    opened = store()
    assert opened is not None and opened.root == Path(SESSION_CACHE)
    assert not Path(SESSION_CACHE).is_relative_to(Path("~/.cache").expanduser())
