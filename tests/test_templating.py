"""Template facts and compiled templates cached across processes, and never trusted blindly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from specdsl import templating


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh specdsl cache folder for this test (the folder lookup is memoized)."""
    monkeypatch.setenv("SPECDSL_CACHE_DIR", str(tmp_path / "cache"))
    templating._cache_folder.cache_clear()
    yield templating._cache_folder()
    templating._cache_folder.cache_clear()


def test_facts_round_trip(cache):
    """Stored facts load back equal, from a folder of mode 0700."""
    templating._store_facts("ab" * 32, frozenset({"hidden", "eps"}), ("header.ptx.j2", None))
    assert templating._load_facts("ab" * 32) == (frozenset({"eps", "hidden"}),
                                                 ("header.ptx.j2", None))
    assert os.stat(cache).st_mode & 0o777 == 0o700


@pytest.mark.parametrize("content", ["", "{not json", '{"names": [1], "references": []}',
                                     '{"names": []}', "[]"])
def test_bad_facts_are_a_miss(cache, content):
    """A truncated, corrupt or foreign facts file is ignored (the template is parsed again)."""
    templating._store_facts("cd" * 32, frozenset({"n"}), ())
    (path,) = cache.glob("facts-*-" + "cd" * 32 + ".json")
    path.write_text(content)
    assert templating._load_facts("cd" * 32) is None


def test_cache_off(tmp_path, monkeypatch):
    """SPECDSL_CACHE_DIR=off turns the template caches off too."""
    monkeypatch.setenv("SPECDSL_CACHE_DIR", "off")
    templating._cache_folder.cache_clear()
    try:
        assert templating._cache_folder() is None and templating._bytecode_cache() is None
        assert templating._load_facts("ef" * 32) is None
    finally:
        templating._cache_folder.cache_clear()


_CHILD = """
from specdsl import render
from specdsl.kernels import RMSNorm
print(render(RMSNorm(hidden=4096, eps=1e-6)).count("0f358637BD"))
"""


def test_second_process_uses_the_caches_and_renders_the_same(tmp_path):
    """A second process reads cached facts and bytecode and renders identical PTX."""
    env = dict(os.environ, SPECDSL_CACHE_DIR=str(tmp_path / "cache"))
    first = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True, check=True).stdout
    (folder,) = (tmp_path / "cache" / "jinja").iterdir()
    assert list(folder.glob("facts-*.json")) and list(folder.glob("__jinja2_*.cache"))
    for cached in folder.glob("__jinja2_*.cache"):  # corrupt bytecode must not matter
        cached.write_bytes(b"garbage")
    second = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                            text=True, check=True).stdout
    assert first == second and int(first) >= 1
