"""Compiled templates and template facts cached across processes, verified before use."""

from __future__ import annotations

import contextlib
import marshal
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachefaults import DAMAGE, binding_modes, damage, full_disk, owned_by_another
from specdsl import render
from specdsl._base.cachefiles import BYTECODE_MAGIC, FACTS_MAGIC, frame
from specdsl._render.render import render_context
from specdsl._templating import cache as templatecache
from specdsl._templating import environment as templating
from specdsl.errors import CacheWarning
from specdsl.kernels import VectorAdd

ROOT = Path(__file__).resolve().parents[1]
SPEC = VectorAdd(dtype="f16")
@contextlib.contextmanager
def _store_at(root) -> templatecache.TemplateStore | None:
    """templatecache.store() opened on ``root`` (a path or "off") for the block."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECDSL_CACHE_DIR", str(root))
        templatecache.store.cache_clear()
        try:
            yield templatecache.store()
        finally:
            templatecache.store.cache_clear()


@pytest.fixture
def store(tmp_path):
    """A fresh template store in this test's folder."""
    with _store_at(tmp_path / "cache") as opened:
        yield opened


def _fresh_render(spec=SPEC) -> str:
    """Render ``spec`` through a new Environment: its templates load from the store."""
    env = templating.environment.__wrapped__(())
    text = env.get_template("vector_add.ptx.j2").render(render_context(spec, "sm_90"))
    return text if text.endswith("\n") else text + "\n"


def _kind_files(store: templatecache.TemplateStore, magic: bytes) -> list[Path]:
    return sorted(p for p in store.folder.iterdir() if p.read_bytes().startswith(magic))


# -- template facts ------------------------------------------------------------------------------


def test_facts_round_trip(store):
    """Stored facts load back equal, from a private file in a private folder."""
    templatecache.store_facts("ab" * 32, frozenset({"hidden", "eps"}), ("header.ptx.j2", None))
    assert templatecache.load_facts("ab" * 32) == (frozenset({"eps", "hidden"}),
                                                   ("header.ptx.j2", None))
    (path,) = _kind_files(store, FACTS_MAGIC)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.folder).st_mode) == 0o700


@pytest.mark.parametrize("payload", [b"", b"{not json", b'{"names": [1], "references": []}',
                                     b'{"names": []}', b"[]", b'{"names": "ab", "references": []}'])
def test_digest_true_facts_of_the_wrong_shape_are_a_miss(store, payload):
    """A correctly framed facts entry whose JSON is not the facts' shape is ignored."""
    templatecache.store_facts("cd" * 32, frozenset({"n"}), ())
    (path,) = _kind_files(store, FACTS_MAGIC)
    key = path.read_bytes()[16:48]
    path.write_bytes(frame(key, payload, FACTS_MAGIC))
    assert templatecache.load_facts("cd" * 32) is None


@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_facts_are_a_miss(store, how):
    """Facts damaged in any part of the frame, or cut short, are parsed again: the facts of a
    new Environment equal the parser's."""
    reference = templating.template_facts(templating.environment.__wrapped__(()),
                                          "vector_add.ptx.j2")
    for path in _kind_files(store, FACTS_MAGIC):
        damage(path, how)
    again = templating.template_facts(templating.environment.__wrapped__(()), "vector_add.ptx.j2")
    assert again == reference


# -- compiled templates ----------------------------------------------------------------------------


def test_bytecode_is_framed(store):
    """Compiled templates are stored framed, one private file each."""
    _fresh_render()
    files = _kind_files(store, BYTECODE_MAGIC)
    assert len(files) == 2  # vector_add.ptx.j2 and the header it includes
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in files} == {0o600}
    assert _fresh_render() == render(SPEC)  # now from the stored code


@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_bytecode_renders_the_same(store, how):
    """Bytecode damaged in any part of its frame, or cut short, is compiled again: the PTX
    is the same as without a cache."""
    _fresh_render()
    for path in _kind_files(store, BYTECODE_MAGIC):
        damage(path, how)
    assert _fresh_render() == render(SPEC)
    assert all(p.read_bytes()[:16] == BYTECODE_MAGIC for p in store.folder.iterdir()
               if p.stat().st_size > 88)  # rewritten


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.integers(0, 8 * 4096 - 1), min_size=1, max_size=6))
def test_random_bit_flips_in_bytecode_render_the_same(store, flips):
    """Random bit flips in the stored bytecode never change the PTX (the issue's flip turned
    VectorAdd's { %r4, %r5, %r6, %r7 } into { %r5, %r5, %r6, %r7 })."""
    _fresh_render()
    for path in _kind_files(store, BYTECODE_MAGIC):
        data = bytearray(path.read_bytes())
        for bit in flips:
            data[(bit // 8) % len(data)] ^= 1 << (bit % 8)
        path.write_bytes(bytes(data))
    assert _fresh_render() == render(SPEC)


def test_planted_pickle_is_never_run(store, tmp_path):
    """A pickle that runs a command, planted at a bytecode entry's path bare or framed with
    the right key, is never unpickled: no command runs and the PTX is right."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    _fresh_render()
    payload = pickle.dumps(Evil())
    for i, path in enumerate(_kind_files(store, BYTECODE_MAGIC)):
        key = path.read_bytes()[16:48]
        path.write_bytes(payload if i % 2 else frame(key, payload, BYTECODE_MAGIC))
    assert _fresh_render() == render(SPEC) and not marker.exists()


def test_bytecode_others_can_write_is_never_run(store):
    """A correctly framed entry of other code (it renders %r5 for %r4) is not loaded from a
    file its group or everyone can write."""
    _fresh_render()
    env = templating.environment.__wrapped__(())
    source, _, _ = env.loader.get_source(env, "vector_add.ptx.j2")
    evil = marshal.dumps(env.compile(source.replace("%r4", "%r5"), "vector_add.ptx.j2"))
    for path in _kind_files(store, BYTECODE_MAGIC):
        data = path.read_bytes()
        path.write_bytes(frame(data[16:48], evil, BYTECODE_MAGIC))
        path.chmod(0o666)
    assert _fresh_render() == render(SPEC)


def test_second_process_uses_the_caches_and_renders_the_same(tmp_path):
    """A second process reads cached facts and bytecode and renders identical PTX; garbage
    in every cached file changes nothing."""
    child = ("from specdsl import render\nfrom specdsl.kernels import RMSNorm\n"
             "print(render(RMSNorm(hidden=4096, eps=1e-6)))")
    env = dict(os.environ, SPECDSL_CACHE_DIR=str(tmp_path / "cache"))
    first = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True,
                           text=True, check=True).stdout
    files = list((tmp_path / "cache" / "jinja").iterdir())
    heads = {p.read_bytes()[:16] for p in files}
    assert heads == {BYTECODE_MAGIC, FACTS_MAGIC}
    for path in files:
        path.write_bytes(b"garbage")
    second = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True,
                            text=True, check=True)
    assert first == second.stdout and "0f358637BD" in first and second.stderr == ""


# -- folders: private, refused, unusable --------------------------------------------------------


def test_cache_off():
    """SPECDSL_CACHE_DIR=off turns the template caches off too."""
    with _store_at("off") as opened:
        assert opened is None and templatecache.bytecode_cache() is None
        assert templatecache.load_facts("ef" * 32) is None


def test_relative_folder_is_made_absolute_when_the_store_opens(tmp_path, monkeypatch):
    """SPECDSL_CACHE_DIR=relc is the folder relc of the working folder the store opened in:
    after an os.chdir, entries still go there, and no relc appears in the new one."""
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path)
    with _store_at("relc") as opened:
        assert opened.root == tmp_path / "relc" and opened.folder == tmp_path / "relc" / "jinja"
        monkeypatch.chdir(tmp_path / "other")
        templatecache.store_facts("ab" * 32, frozenset({"n"}), ())
        assert len(_kind_files(opened, FACTS_MAGIC)) == 1
    assert not (tmp_path / "other" / "relc").exists()


@pytest.mark.parametrize("level", ["root", "jinja", "tmp"])
def test_folder_others_can_write_is_made_private(tmp_path, level):
    """The cache folder, jinja/ and tmp/: group- or world-writable, each is made 0700 with a
    CacheWarning, and the cache is used."""
    root = tmp_path / "cache"
    with _store_at(root):
        pass
    target = root if level == "root" else root / level
    target.chmod(0o777)
    with pytest.warns(CacheWarning, match="made private"), _store_at(root) as opened:
        assert opened is not None
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700


@pytest.mark.parametrize("level", ["root", "jinja", "tmp"])
def test_folder_of_another_user_turns_the_cache_off(tmp_path, monkeypatch, level):
    """A cache folder, jinja/ or tmp/ another user owns turns the template caches off, with a
    warning: nothing is read from it."""
    root = tmp_path / "cache"
    with _store_at(root):
        pass
    owned_by_another(monkeypatch, root if level == "root" else root / level)
    with pytest.warns(CacheWarning, match="belongs to another user"), _store_at(root) as opened:
        assert opened is None


def test_cache_folder_that_is_a_file_is_a_warning(tmp_path):
    """SPECDSL_CACHE_DIR naming a file: a warning, no cache, rendering works."""
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.warns(CacheWarning, match="is not a folder; carrying on without the cache"), \
            _store_at(path) as s:
        assert s is None


def test_malformed_variable_is_a_warning(tmp_path):
    """SPECDSL_CACHE_DIR=yes at import: a warning naming the variable; no cache."""
    with pytest.warns(CacheWarning, match="SPECDSL_CACHE_DIR must name a folder"), \
            _store_at("yes") as opened:
        assert opened is None


def test_full_disk_warns_once_and_leaves_no_temp_files(store, monkeypatch):
    """A full disk: bytecode and facts writes fail part-way; one warning, the render is
    right, no file is left, and no write is tried again."""
    full_disk(monkeypatch, store.root)
    with pytest.warns(CacheWarning, match="No space left on device") as seen:
        assert _fresh_render() == render(SPEC)
    assert len(seen) == 1 and not store.writable
    assert [p for p in store.root.rglob("*") if p.is_file()] == []


def test_read_only_folder_reads_without_writing():
    """A warm template cache made read-only (0500): entries still load; a write warns once
    and leaves no file."""
    with binding_modes() as base:
        with _store_at(base / "cache") as warm:
            templatecache.store_facts("ab" * 32, frozenset({"n"}), ())
        for top, _, _ in os.walk(base / "cache"):
            os.chmod(top, 0o500)
        before = sorted(p for p in (base / "cache").rglob("*"))
        with _store_at(base / "cache") as reader:
            assert templatecache.load_facts("ab" * 32) == (frozenset({"n"}), ())
            with pytest.warns(CacheWarning, match="reading it without writing"):
                templatecache.store_facts("cd" * 32, frozenset({"m"}), ())
                templatecache.store_facts("ef" * 32, frozenset({"m"}), ())
            assert not reader.writable
        assert sorted(p for p in (base / "cache").rglob("*")) == before
        assert warm is not None


# -- the command line never prints a traceback for an unusable cache ----------------------------


def _cli(args: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECDSL_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "specdsl", *args], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", [["render", "vectoradd"], ["verify", "vectoradd"]])
def test_cli_with_a_file_for_a_cache_folder(tmp_path, command):
    """render and verify with SPECDSL_CACHE_DIR naming a file: exit 0, one warning line."""
    path = tmp_path / "file"
    path.write_text("x")
    done = _cli(command, path)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert "specdsl cache folder " in done.stderr and "is not a folder" in done.stderr


USER_SPEC = """
from pathlib import Path
from specdsl import baked, kernel_spec

@kernel_spec(template="fresh.ptx.j2", entry="fresh", template_dir=Path(__file__).parent / "t")
class Fresh:
    n: int = baked(64)
"""
USER_TEMPLATE = """{% include "header.ptx.j2" %}
// n={{ n }}
.visible .entry {{ entry }}()
{
    ret;
}
"""


@pytest.mark.parametrize("command", ["render", "verify"])
def test_cli_with_a_read_only_cache_folder(monkeypatch, capsys, command):
    """render and verify of a spec whose templates are new to the process, with an empty
    cache folder of mode 0500: exit 0, a warning, no error output, nothing written."""
    from specdsl._cli.main import main

    with binding_modes() as base:
        (base / "t").mkdir()
        (base / "t" / "fresh.ptx.j2").write_text(USER_TEMPLATE)
        (base / f"fresh_{command}.py").write_text(USER_SPEC)
        cache = base / "cache"
        cache.mkdir(mode=0o500)
        monkeypatch.syspath_prepend(str(base))
        os.environ["SPECDSL_CACHE_DIR"] = str(cache)  # binding_modes restores it
        templatecache.store.cache_clear()
        try:
            with pytest.warns(CacheWarning, match=f"cannot use the cache folder '{cache}'"):
                code = main([command, f"fresh_{command}:Fresh"])
        finally:
            templatecache.store.cache_clear()
        out, err = capsys.readouterr()
        assert (code, err) == (0, "") and list(cache.iterdir()) == []
        assert ".entry fresh" in out if command == "render" else "1 passed, 0 failed" in out
