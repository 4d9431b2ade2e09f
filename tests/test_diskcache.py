"""The on-disk cubin cache: round trips, bad entries are misses, hand keys, folders, processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specdsl import Executor
from specdsl.compile import compile_ptx
from specdsl.diskcache import MAGIC, PTX_MAGIC, disk_key, frame, ptx_key, resolve_cache_dir, unframe
from specdsl.kernels import VectorAdd
from specdsl.render import render

from handkeyed import HandKeyedAdd

ROOT = Path(__file__).resolve().parents[1]


def _executor(folder) -> Executor:
    return Executor(None, target="sm_90", cache_dir=folder)


def _entries(executor: Executor, magic: bytes) -> list[Path]:
    return [p for p in (executor.disk_cache.path / "entries").rglob("*")
            if p.is_file() and p.read_bytes().startswith(magic)]


def _entry(executor: Executor, spec, magic: bytes = MAGIC) -> Path:
    """The file of spec's cubin (or PTX) entry: the one such file the first build wrote."""
    files = _entries(executor, magic)
    assert len(files) == 1, files
    return files[0]


def test_round_trip(tmp_path):
    """A second executor on the same folder reads the cubin from disk: no compile, same bytes."""
    first = _executor(tmp_path).ensure_module(VectorAdd())
    second_executor = _executor(tmp_path)
    second = second_executor.ensure_module(VectorAdd())
    assert second.from_disk and second.cubin == first.cubin
    stats = second_executor.stats
    assert (stats.misses, stats.compiles, stats.disk_hits) == (1, 0, 1)


def test_entry_is_framed_and_validated(tmp_path):
    """An entry holds the magic, its key, a digest and the ELF cubin."""
    executor = _executor(tmp_path)
    module = executor.ensure_module(VectorAdd())
    data = _entry(executor, VectorAdd()).read_bytes()
    assert data.startswith(MAGIC) and data.endswith(module.cubin)


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "foreign", "raw_cubin", "empty"])
def test_bad_entry_is_a_miss_and_is_rewritten(tmp_path, damage):
    """Corrupt, truncated, foreign, unframed and empty entries are rejected and recompiled."""
    writer = _executor(tmp_path)
    good = writer.ensure_module(VectorAdd())
    path = _entry(writer, VectorAdd())
    data = path.read_bytes()
    if damage == "corrupt":
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(flipped))
    elif damage == "truncated":
        path.write_bytes(data[: len(data) - 100])
    elif damage == "foreign":  # a valid entry of another key copied over this one
        other = compile_ptx(render(VectorAdd(dtype="f16")), "sm_90").cubin
        path.write_bytes(frame(b"\x00" * 32, other))
    elif damage == "raw_cubin":
        path.write_bytes(good.cubin)
    else:
        path.write_bytes(b"")
    reader = _executor(tmp_path)
    module = reader.ensure_module(VectorAdd())
    assert not module.from_disk and module.cubin[:4] == b"\x7fELF"
    assert (reader.stats.compiles, reader.stats.disk_hits, reader.stats.disk_rejected) == (1, 0, 1)
    rewritten = path.read_bytes()
    assert rewritten.startswith(MAGIC) and rewritten.endswith(module.cubin)
    third = _executor(tmp_path)
    assert third.ensure_module(VectorAdd()).from_disk


def test_unframe_refuses_another_key():
    """unframe() returns None when the stored key is not the one asked for."""
    cubin = b"\x7fELF" + bytes(60)
    entry = frame(b"\x01" * 32, cubin)
    assert unframe(b"\x01" * 32, entry) == cubin
    assert unframe(b"\x02" * 32, entry) is None


def test_hand_key_never_fetches_another_requests_cubin(tmp_path):
    """Two processes' requests share hand key 'vadd' but not PTX: each gets its own cubin."""
    f32 = _executor(tmp_path).ensure_module(HandKeyedAdd(dtype="f32"))
    f16 = _executor(tmp_path).ensure_module(HandKeyedAdd(dtype="f16"))
    assert not f16.from_disk and f16.cubin != f32.cubin
    assert f16.cubin == compile_ptx(render(HandKeyedAdd(dtype="f16")), "sm_90").cubin


def test_disk_key_covers_every_input():
    """Changing any one input of disk_key changes the key."""
    base = dict(derived_key="vector_add-1", ptx_sha256="ab", target="sm_90",
                options="nvJitLink -arch=sm_90", toolchain="13.0")
    keys = {disk_key(**base)}
    for field in base:
        keys.add(disk_key(**{**base, field: base[field] + "x"}))
    assert len(keys) == len(base) + 1


def test_off_disables(monkeypatch):
    """SPECDSL_CACHE_DIR=off turns the disk cache off."""
    monkeypatch.setenv("SPECDSL_CACHE_DIR", "off")
    assert resolve_cache_dir(None) is None
    assert Executor(None, target="sm_90").disk_cache is None


def test_argument_beats_environment(monkeypatch, tmp_path):
    """cache_dir= wins over SPECDSL_CACHE_DIR."""
    monkeypatch.setenv("SPECDSL_CACHE_DIR", str(tmp_path / "env"))
    assert resolve_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_cache_dir(None) == tmp_path / "env"


def test_default_folder_is_private(monkeypatch, tmp_path):
    """The default folder is $XDG_CACHE_HOME/specdsl, created with mode 0700."""
    monkeypatch.delenv("SPECDSL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    executor = Executor(None, target="sm_90")
    assert executor.disk_cache.path == tmp_path / "specdsl"
    assert stat.S_IMODE(os.stat(tmp_path / "specdsl").st_mode) == 0o700


def test_symlinked_folder_refused(tmp_path):
    """A cache folder that is a symbolic link is refused when named explicitly."""
    from specdsl.diskcache import CacheDirError

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(CacheDirError, match="is a link|not a folder"):
        _executor(tmp_path / "link")


RACER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from specdsl import Executor
    from specdsl.kernels import VectorAdd
    start = float(sys.argv[2])
    while time.time() < start:
        time.sleep(0.001)
    module = Executor(None, target="sm_90", cache_dir=sys.argv[1]).ensure_module(VectorAdd(dtype="bf16"))
    print(module.cubin.hex())
""")


def test_two_processes_race_on_one_key(tmp_path):
    """Two processes compiling one key into one folder at once both succeed with one cubin."""
    import time

    script = tmp_path / "racer.py"
    script.write_text(RACER.format(root=str(ROOT)))
    start = str(time.time() + 2.0)
    folder = str(tmp_path / "cache")
    racers = [subprocess.Popen([sys.executable, str(script), folder, start],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    outputs = [r.communicate(timeout=120) for r in racers]
    assert all(r.returncode == 0 for r in racers), [err for _, err in outputs]
    cubins = {out.strip() for out, _ in outputs}
    assert len(cubins) == 1
    reader = _executor(folder)
    module = reader.ensure_module(VectorAdd(dtype="bf16"))
    assert module.from_disk and module.cubin.hex() == cubins.pop()


def test_warm_process_skips_rendering(tmp_path, monkeypatch):
    """A second executor on a warm folder reads the PTX back instead of rendering it,
    and gets the same cubin and signature."""
    import specdsl.executor as executor_module
    from specdsl.kernels import RMSNorm

    spec = RMSNorm(hidden=4096)
    first = _executor(tmp_path).ensure_module(spec)
    assert _entry(_executor(tmp_path), spec, PTX_MAGIC).read_bytes().endswith(
        render(spec, "sm_90").encode())

    def no_render(*args):
        raise AssertionError("rendered on a warm disk cache")

    monkeypatch.setattr(executor_module, "render", no_render)
    warm = _executor(tmp_path)
    module = warm.ensure_module(spec)
    assert module.from_disk and module.cubin == first.cubin
    assert module.signature == first.signature
    assert (warm.stats.ptx_disk_hits, warm.stats.disk_hits, warm.stats.compiles) == (1, 1, 0)


def test_corrupt_ptx_entry_is_rendered_again(tmp_path):
    """A damaged PTX entry is a miss: the request is rendered and the entry rewritten."""
    writer = _executor(tmp_path)
    writer.ensure_module(VectorAdd())
    path = _entry(writer, VectorAdd(), PTX_MAGIC)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0x01
    path.write_bytes(bytes(data))
    reader = _executor(tmp_path)
    module = reader.ensure_module(VectorAdd())
    assert (reader.stats.ptx_disk_hits, reader.stats.disk_rejected) == (0, 1)
    assert module.from_disk  # the cubin entry was intact
    assert path.read_bytes().endswith(render(VectorAdd(), "sm_90").encode())


def test_user_typed_fields_are_always_rendered(tmp_path):
    """A baked value of a user type (its methods are code no digest covers) is not cached
    as PTX: every process renders it."""
    from userspecs import UserEnumSpec

    spec = UserEnumSpec()
    executor = _executor(tmp_path)
    executor.ensure_module(spec)
    assert _entries(executor, PTX_MAGIC) == [] and len(_entries(executor, MAGIC)) == 1
    again = _executor(tmp_path)
    again.ensure_module(spec)
    assert again.stats.ptx_disk_hits == 0 and again.stats.disk_hits == 1


def test_ptx_key_covers_every_input():
    """Changing the derived key or the rendering digest changes the PTX key."""
    base = dict(derived_key="rmsnorm-1", rendering="ab")
    keys = {ptx_key(**base)} | {ptx_key(**{**base, k: v + "x"}) for k, v in base.items()}
    assert len(keys) == 3


def test_unframe_keeps_cubin_and_ptx_entries_apart():
    """A PTX entry is never read as a cubin, nor the reverse."""
    key = b"\x05" * 32
    ptx = frame(key, b".version 8.0\n", PTX_MAGIC)
    assert unframe(key, ptx, PTX_MAGIC) == b".version 8.0\n" and unframe(key, ptx) is None
    cubin = frame(key, b"\x7fELF" + bytes(8))
    assert unframe(key, cubin, PTX_MAGIC) is None
    assert unframe(key, frame(key, b"\xff\xfe", PTX_MAGIC), PTX_MAGIC) is None  # not UTF-8
