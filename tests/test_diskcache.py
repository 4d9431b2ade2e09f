"""The on-disk cubin cache: round trips, bad entries are misses, hand keys, folders, processes."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachefaults import DAMAGE, binding_modes, damage, full_disk, owned_by_another
from handkeyed import HandKeyedAdd
from specdsl import Executor
from specdsl._base.cachedir import resolve_cache_dir
from specdsl._base.cachefiles import MAGIC, MAX_ENTRY_BYTES, PTX_MAGIC, frame, unframe
from specdsl._render.render import render
from specdsl._runtime.compile import CompileOptions, compile_ptx
from specdsl._runtime.diskcache import disk_key, ptx_key
from specdsl.errors import CacheDirError, CacheWarning, ConfigError
from specdsl.kernels import VectorAdd

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
    """Changing any one input of disk_key (an option added, dropped or split) changes the key."""
    base = dict(derived_key="vector_add-1", ptx_sha256="ab", target="sm_90",
                options=("-arch=sm_90", "-verbose"), toolchain="13.5.37 cuda_13.5")
    keys = {disk_key(**base)}
    for field in base:
        if field != "options":
            keys.add(disk_key(**{**base, field: base[field] + "x"}))
    for options in [("-arch=sm_90",), ("-arch=sm_90", "-verbose", "-g"),
                    ("-arch=sm_90 -verbose",), ("-verbose", "-arch=sm_90")]:
        keys.add(disk_key(**{**base, "options": options}))
    assert len(keys) == len(base) - 1 + 4 + 1


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


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_relative_folder_is_made_absolute_when_the_executor_is_made(tmp_path, monkeypatch, how):
    """A relative cache_dir= or SPECDSL_CACHE_DIR names a folder of the working folder the
    executor was made in: after an os.chdir, entries still go there (mode 0700), and no
    folder of that name appears in the new working folder."""
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path)
    if how == "environment":
        monkeypatch.setenv("SPECDSL_CACHE_DIR", "relc")
    executor = Executor(None, target="sm_90", cache_dir="relc" if how == "argument" else None)
    assert executor.disk_cache.path == tmp_path / "relc"
    monkeypatch.chdir(tmp_path / "other")
    executor.ensure_module(VectorAdd())
    assert len(_entries(executor, MAGIC)) == 1 and not (tmp_path / "other" / "relc").exists()
    folders = [tmp_path / "relc", *(p for p in (tmp_path / "relc").rglob("*") if p.is_dir())]
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in folders} == {0o700}


def test_symlinked_folder_refused(tmp_path):
    """A cache folder that is a symbolic link is refused when named explicitly, the
    message naming its target and the folder to give instead."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(CacheDirError) as info:
        _executor(tmp_path / "link")
    assert str(info.value) == (
        f"specdsl cache folder {str(tmp_path / 'link')!r} is a symbolic link (to "
        f"{str(tmp_path / 'real')!r}): links are refused, as their target can change; give "
        f"the folder it points to, {str((tmp_path / 'real').resolve())!r}")


RACER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from specdsl import Executor
    from specdsl.kernels import VectorAdd
    start = float(sys.argv[2])
    while time.time() < start:
        time.sleep(0.001)
    executor = Executor(None, target="sm_90", cache_dir=sys.argv[1])
    module = executor.ensure_module(VectorAdd(dtype="bf16"))
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
    import specdsl._runtime.builds as builds_module
    from specdsl.kernels import RMSNorm

    spec = RMSNorm(hidden=4096)
    first = _executor(tmp_path).ensure_module(spec)
    assert _entry(_executor(tmp_path), spec, PTX_MAGIC).read_bytes().endswith(
        render(spec, "sm_90").encode())

    def no_render(*args):
        raise AssertionError("rendered on a warm disk cache")

    monkeypatch.setattr(builds_module, "render", no_render)
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


# -- damaged entries: every part of the frame, truncations, random flips ---------------------

@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("magic", [MAGIC, PTX_MAGIC], ids=["cubin", "ptx"])
def test_damaged_entry_is_a_miss_with_the_right_kernel(tmp_path, magic, how):
    """A cubin or PTX entry damaged in its tag, key, digest, length or payload, or cut short
    at any length, is a miss: the module built is the one a cold compile gives."""
    spec = VectorAdd(dtype="f16")
    _executor(tmp_path).ensure_module(spec)
    damage(_entry(_executor(tmp_path), spec, magic), how)
    reader = _executor(tmp_path)
    module = reader.ensure_module(spec)
    cold = Executor(None, target="sm_90", cache_dir="off").ensure_module(spec)
    assert module.cubin == cold.cubin and module.signature == cold.signature
    assert reader.stats.disk_rejected == 1
    if magic == PTX_MAGIC:
        assert reader.stats.ptx_disk_hits == 0
    else:
        assert not module.from_disk


@settings(max_examples=20, deadline=None)
@given(flips=st.sets(st.integers(0, 8 * 1024 - 1), min_size=1, max_size=6))
def test_random_bit_flips_in_a_cubin_entry_are_misses(tmp_path_factory, flips):
    """Random bit flips in a stored cubin entry never reach a module: it is recompiled."""
    folder = tmp_path_factory.mktemp("flips")
    spec = VectorAdd(dtype="bf16")
    good = _executor(folder).ensure_module(spec)
    path = _entry(_executor(folder), spec)
    data = bytearray(path.read_bytes())
    for bit in flips:
        data[(bit // 8) % len(data)] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))
    module = _executor(folder).ensure_module(spec)
    assert module.cubin == good.cubin and not module.from_disk


def test_entry_replaced_by_another_kernels_is_refused(tmp_path):
    """Another kernel's correctly framed entry copied over this key's file is refused: the
    key inside the frame does not match, and the right kernel is compiled."""
    writer = _executor(tmp_path)
    f32 = writer.ensure_module(VectorAdd(dtype="f32"))
    f16 = writer.ensure_module(VectorAdd(dtype="f16"))
    files = _entries(writer, MAGIC)
    (f32_path,) = [p for p in files if p.read_bytes().endswith(f32.cubin)]
    (f16_path,) = [p for p in files if p.read_bytes().endswith(f16.cubin)]
    f32_path.write_bytes(f16_path.read_bytes())  # f16's entry, key and all, at f32's path
    reader = _executor(tmp_path)
    module = reader.ensure_module(VectorAdd(dtype="f32"))
    assert module.cubin == f32.cubin and not module.from_disk
    assert reader.stats.disk_rejected == 1


@pytest.mark.parametrize("plant", ["fifo", "link to /dev/zero", "folder", "big file"])
def test_special_file_at_an_entry_path_is_a_miss(tmp_path, plant):
    """A FIFO, a link to /dev/zero, a folder or a file over MAX_ENTRY_BYTES at an entry's
    path is refused at once (nothing hangs or fills memory), and the kernel is compiled."""
    spec = VectorAdd(dtype="f16")
    _executor(tmp_path).ensure_module(spec)
    path = _entry(_executor(tmp_path), spec)
    path.unlink()
    if plant == "fifo":
        os.mkfifo(path, 0o600)
    elif plant == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif plant == "folder":
        path.mkdir()
    else:  # sparse: no disk space used
        path.touch(mode=0o600)
        os.truncate(path, MAX_ENTRY_BYTES + 1)
    reader = _executor(tmp_path)
    # a folder cannot be replaced by the new entry: the write fails, with a warning
    with pytest.warns(CacheWarning) if plant == "folder" else contextlib.nullcontext():
        module = reader.ensure_module(spec)
    assert not module.from_disk and module.cubin[:4] == b"\x7fELF"
    assert reader.stats.disk_rejected == 1


# -- folders others can write, or another user owns -------------------------------------------


def _warm(folder: Path) -> Executor:
    executor = _executor(folder)
    executor.ensure_module(VectorAdd())
    return executor


def _entry_folder(folder: Path) -> Path:
    return _entry(_executor(folder), VectorAdd()).parent


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o707, 0o1777])
@pytest.mark.parametrize("level", ["root", "entries", "tmp", "entries/xx"])
def test_folder_others_can_write_is_made_private(tmp_path, level, mode):
    """The cache folder, entries/, tmp/ and each entries/xx folder cuda.core makes: when
    group- or world-writable, each is made 0700 with a CacheWarning and then used."""
    folder = tmp_path / "cache"
    _warm(folder)
    target = {"root": folder, "entries": folder / "entries", "tmp": folder / "tmp",
              "entries/xx": _entry_folder(folder)}[level]
    target.chmod(mode)
    with pytest.warns(CacheWarning, match=r"can be written by others .*made private"):
        module = _executor(folder).ensure_module(VectorAdd())
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700 and module.from_disk


def test_new_entry_folders_are_private(tmp_path):
    """Every folder specdsl makes (root, entries/, tmp/, entries/xx) has mode 0700, even
    under a umask that would leave it group-writable."""
    previous = os.umask(0o002)
    try:
        _warm(tmp_path / "cache")
    finally:
        os.umask(previous)
    folders = [Path(top) for top, _, _ in os.walk(tmp_path / "cache")]
    assert len(folders) >= 4
    assert {stat.S_IMODE(os.stat(f).st_mode) for f in folders} == {0o700}


@pytest.mark.parametrize("level", ["root", "entries", "tmp"])
def test_folder_of_another_user_is_refused(tmp_path, monkeypatch, level):
    """A cache folder, entries/ or tmp/ owned by another user is a CacheDirError when the
    folder is named (cache_dir=...)."""
    folder = tmp_path / "cache"
    _warm(folder)
    owned_by_another(monkeypatch, folder if level == "root" else folder / level)
    with pytest.raises(CacheDirError, match=r"belongs to another user \(uid \d+\)"):
        _executor(folder)


def test_folder_of_another_user_from_the_environment_is_a_warning(tmp_path, monkeypatch):
    """The same folder from SPECDSL_CACHE_DIR turns the disk cache off with a warning."""
    folder = tmp_path / "cache"
    _warm(folder)
    monkeypatch.setenv("SPECDSL_CACHE_DIR", str(folder))
    owned_by_another(monkeypatch, folder)
    with pytest.warns(CacheWarning, match="belongs to another user"):
        executor = Executor(None, target="sm_90")
    assert executor.disk_cache is None
    assert executor.ensure_module(VectorAdd()).cubin[:4] == b"\x7fELF"


def test_entry_folder_of_another_user_is_not_read(tmp_path, monkeypatch):
    """An entries/xx folder owned by another user: its entry is not read (a miss, with a
    warning), and nothing is written into it."""
    folder = tmp_path / "cache"
    _warm(folder)
    entry_folder = _entry_folder(folder)
    before = sorted(p.stat().st_mtime_ns for p in entry_folder.iterdir())
    owned_by_another(monkeypatch, entry_folder)
    reader = _executor(folder)
    with pytest.warns(CacheWarning, match="belongs to another user.*not used"):
        module = reader.ensure_module(VectorAdd())
    assert not module.from_disk
    assert sorted(p.stat().st_mtime_ns for p in entry_folder.iterdir()) == before


def test_entry_others_can_write_is_refused(tmp_path):
    """An entry file others can write is refused (someone else may have written it)."""
    folder = tmp_path / "cache"
    _warm(folder)
    _entry(_executor(folder), VectorAdd()).chmod(0o666)
    reader = _executor(folder)
    assert not reader.ensure_module(VectorAdd()).from_disk
    assert reader.stats.disk_rejected == 1


def test_entry_of_another_user_is_refused(tmp_path, monkeypatch):
    """An entry file owned by another user is refused."""
    folder = tmp_path / "cache"
    _warm(folder)
    owned_by_another(monkeypatch, _entry(_executor(folder), VectorAdd()))
    reader = _executor(folder)
    assert not reader.ensure_module(VectorAdd()).from_disk
    assert reader.stats.disk_rejected == 1


# -- unusable folders: a warning, never a crash, no temp files ---------------------------------


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if not p.is_dir())


def test_cache_dir_naming_a_file_is_a_cache_dir_error(tmp_path):
    """cache_dir= naming a file is a CacheDirError (the user asked for it); the file is kept."""
    path = tmp_path / "file"
    path.write_text("not a folder")
    with pytest.raises(CacheDirError, match=r"'.*/file' is not a folder"):
        _executor(path)
    assert path.read_text() == "not a folder"


def test_cache_dir_under_a_file_is_a_cache_dir_error(tmp_path):
    """cache_dir= naming a path under a file is a CacheDirError naming that file."""
    path = tmp_path / "file"
    path.write_text("not a folder")
    with pytest.raises(CacheDirError, match=r"'.*/file/sub/cache' is under a file \('.*/file'\)"):
        _executor(path / "sub" / "cache")
    assert path.read_text() == "not a folder"


@pytest.mark.parametrize("under", ["", "sub"])
def test_environment_folder_that_is_a_file_is_a_warning(tmp_path, monkeypatch, under):
    """SPECDSL_CACHE_DIR naming a file (or a path under one): one CacheWarning, then the
    executor compiles without the cache."""
    path = tmp_path / "file"
    path.write_text("not a folder")
    monkeypatch.setenv("SPECDSL_CACHE_DIR", str(path / under))
    with pytest.warns(CacheWarning, match="not a folder|under a file") as seen:
        executor = Executor(None, target="sm_90")
    assert len(seen) == 1 and executor.disk_cache is None
    assert executor.ensure_module(VectorAdd()).cubin[:4] == b"\x7fELF"
    assert path.read_text() == "not a folder"


@pytest.mark.parametrize("value, got", [(1, "1, an int"), (b"/tmp/cache", "b'/tmp/cache', a bytes"),
                                        (2.5, "2.5, a float")])
def test_cache_dir_of_another_type_is_a_config_error(value, got):
    """cache_dir= that is no str or os.PathLike is a ConfigError naming the argument."""
    with pytest.raises(ConfigError) as info:
        _executor(value)
    assert str(info.value) == ('cache_dir must be a folder (a str or os.PathLike), "off" or '
                               f"None (got {got})")


@pytest.mark.parametrize("value", ["", "  ", "\t\n"])
def test_empty_cache_dir_is_a_config_error(value, tmp_path, monkeypatch):
    """cache_dir="" or a blank name (an unset variable) is a ConfigError naming the argument,
    never the default folder in disguise; None still means SPECDSL_CACHE_DIR."""
    monkeypatch.setenv("SPECDSL_CACHE_DIR", str(tmp_path / "env"))
    with pytest.raises(ConfigError) as info:
        _executor(value)
    assert str(info.value) == ("cache_dir must name a folder ('.' for the working folder), be "
                               "\"off\", or be None for SPECDSL_CACHE_DIR or the default folder "
                               f"(got {value!r}, an empty name)")
    assert not (tmp_path / "env").exists()
    assert _executor(None).disk_cache.path == tmp_path / "env"


def test_full_disk_warns_once_and_leaves_no_temp_files(tmp_path, monkeypatch):
    """A full disk: PTX and cubin writes fail part-way; one warning, the modules are built,
    no temp file or entry is left, and later builds do not try again."""
    folder = tmp_path / "cache"
    full_disk(monkeypatch, folder)
    executor = _executor(folder)
    with pytest.warns(CacheWarning, match="No space left on device") as seen:
        first = executor.ensure_module(VectorAdd(dtype="f16"))
        executor.ensure_module(VectorAdd(dtype="bf16"))
    assert len(seen) == 1 and first.cubin[:4] == b"\x7fELF"
    assert _files(folder) == [] and not executor.disk_cache.writable


def test_read_only_folder_reads_without_writing():
    """A warm cache made read-only (mode 0500): entries are read (no compile), a new
    request compiles with one warning, and nothing is written."""
    with binding_modes() as base:
        folder = base / "cache"
        _warm(folder)
        for top, _, _ in os.walk(folder):
            os.chmod(top, 0o500)
        before = _files(folder)
        reader = _executor(folder)
        assert reader.ensure_module(VectorAdd()).from_disk
        with pytest.warns(CacheWarning, match="reading it without writing"):
            module = reader.ensure_module(VectorAdd(dtype="f16"))
        assert module.cubin[:4] == b"\x7fELF" and _files(folder) == before


def test_empty_folder_with_mode_500_is_a_warning():
    """An empty cache folder with mode 0500 (cuda.core cannot make entries/): one warning,
    and the executor compiles without the cache."""
    with binding_modes() as base:
        folder = base / "cache"
        folder.mkdir(mode=0o500)
        with pytest.warns(CacheWarning, match="cannot use the cache folder") as seen:
            executor = _executor(folder)
            module = executor.ensure_module(VectorAdd())
        assert len(seen) == 1 and executor.disk_cache is None
        assert module.cubin[:4] == b"\x7fELF" and _files(folder) == []


# -- the key: compile options and the toolchain -----------------------------------------------


def test_each_compile_option_has_its_own_entries(tmp_path):
    """Executors with other compile options compile their own cubin; equal options hit."""
    options = [CompileOptions(), CompileOptions(lineinfo=True), CompileOptions(debug=True),
               CompileOptions(max_registers=64)]
    cubins = []
    for option in options:
        executor = Executor(None, target="sm_90", cache_dir=tmp_path, compile_options=option)
        module = executor.ensure_module(VectorAdd())
        assert not module.from_disk and executor.stats.compiles == 1
        cubins.append(module.cubin)
    again = Executor(None, target="sm_90", cache_dir=tmp_path,
                     compile_options=CompileOptions(lineinfo=True))
    assert again.ensure_module(VectorAdd()).cubin == cubins[1]
    assert again.stats.disk_hits == 1 and len(set(cubins[:3])) == 3


def test_disk_key_holds_the_full_toolchain_version(tmp_path, monkeypatch):
    """Another nvJitLink patch release reads none of the entries the last one wrote."""
    import specdsl._runtime.builds as builds_module

    _warm(tmp_path)
    monkeypatch.setattr(builds_module, "toolchain_version", lambda: "13.5.38 cuda_13.5.next")
    reader = _executor(tmp_path)
    assert not reader.ensure_module(VectorAdd()).from_disk


@pytest.mark.parametrize("value", ["yes", "1", "on"])
def test_a_switch_for_cache_dir_names_none_not_unset(value):
    """cache_dir="yes" (a switch where a folder goes) is refused in an argument's words: None
    for SPECDSL_CACHE_DIR or the default folder, not the variable's "unset"."""
    with pytest.raises(ConfigError) as info:
        _executor(value)
    assert str(info.value) == ("cache_dir must name a folder, or be off/0/false/no/none to turn "
                               "the disk cache off, or None for SPECDSL_CACHE_DIR or the default "
                               f"folder (got {value!r})")
