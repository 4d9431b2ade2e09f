"""The cache's size: usage by kind, a cap with least-recently-read eviction, clearing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from specdsl import Executor
from specdsl._base import eviction
from specdsl._base.cachefiles import MAGIC, read_entry
from specdsl.kernels import RMSNorm, VectorAdd


def _entry(root: Path, name: str, size: int, used_ns: int) -> Path:
    """A fake entry file of ``size`` bytes (at least a header's) last read at ``used_ns``:
    it starts with a cubin entry's magic number, as eviction tells specdsl's files apart."""
    path = root / "entries" / name[:2] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MAGIC + b"\0" * (size - len(MAGIC)))
    os.utime(path, ns=(used_ns, used_ns))
    return path


def _names(root: Path) -> set[str]:
    return {p.name for sub in ("entries", "jinja") for p in (root / sub).rglob("*") if p.is_file()}


def test_prune_removes_the_least_recently_read_first(tmp_path):
    """Over the cap, entries go oldest access time first until the rest fit."""
    now = time.time_ns()
    for i, name in enumerate(["aa1", "bb2", "cc3", "dd4"]):
        _entry(tmp_path, name, 100, now - (4 - i) * 10**9)  # aa1 read longest ago
    removed = eviction.prune(tmp_path, 250)
    assert _names(tmp_path) == {"cc3", "dd4"}
    assert (removed.entries, removed.bytes, removed.left_entries, removed.left_bytes) == \
        (2, 200, 2, 200)


def test_a_read_keeps_an_entry(tmp_path):
    """Reading an entry (read_entry) makes it the most recently used: eviction spares it."""
    now = time.time_ns()
    old = _entry(tmp_path, "aa1", 100, now - 10 * 10**9)
    _entry(tmp_path, "bb2", 100, now - 5 * 10**9)
    old.chmod(0o600)
    read_entry(old)
    eviction.prune(tmp_path, 100)
    assert _names(tmp_path) == {"aa1"}


def test_under_the_cap_nothing_goes(tmp_path):
    """A cache within its cap is left alone."""
    _entry(tmp_path, "aa1", 100, time.time_ns())
    assert eviction.prune(tmp_path, 100).entries == 0 and _names(tmp_path) == {"aa1"}


def test_young_temp_files_survive_prune_and_clear(tmp_path):
    """A temp file younger than an hour (a write in flight in another process) is never
    removed; one older than an hour (a crashed writer's) is."""
    (tmp_path / "tmp").mkdir()
    young, stale = tmp_path / "tmp" / "entry-young", tmp_path / "tmp" / "entry-stale"
    young.write_bytes(b"half")
    stale.write_bytes(b"left")
    old = time.time() - eviction.STALE_TEMP_SECONDS - 60
    os.utime(stale, (old, old))
    _entry(tmp_path, "aa1", 100, time.time_ns())
    eviction.clear(tmp_path)
    assert young.exists() and not stale.exists() and _names(tmp_path) == set()


def test_entry_rewritten_since_the_scan_survives(tmp_path, monkeypatch):
    """An entry another process rewrote after the scan measured it is not removed."""
    path = _entry(tmp_path, "aa1", 100, time.time_ns() - 10**9)
    scanned = eviction.scan(tmp_path)
    path.write_bytes(b"\1" * 120)  # the rewrite: new size and modification time
    calls = iter([scanned])
    real = eviction.scan
    monkeypatch.setattr(eviction, "scan", lambda root: next(calls, None) or real(root))
    removed = eviction.prune(tmp_path, 0)
    assert removed.entries == 0 and path.read_bytes() == b"\1" * 120


def test_clear_removes_every_entry_and_the_empty_folders(tmp_path):
    """clear() leaves no entry and no entries/xx folder, and reports what it removed."""
    for name in ("aa1", "ab2", "cd3"):
        _entry(tmp_path, name, 100, time.time_ns())
    removed = eviction.clear(tmp_path)
    assert (removed.entries, removed.left_entries) == (3, 0)
    assert list((tmp_path / "entries").iterdir()) == []


def test_clear_keeps_files_that_are_not_specdsl_s(tmp_path):
    """A folder named as the cache by mistake (a project with jinja/ and tmp/ folders) loses
    nothing of its own to clear(): only files with an entry's magic number, and temp files
    named as specdsl names them, are removed."""
    _entry(tmp_path, "aa1", 100, time.time_ns())
    mine = [tmp_path / "jinja" / "mine.txt", tmp_path / "jinja" / "macros" / "base.j2",
            tmp_path / "entries" / "notes.md", tmp_path / "tmp" / "scratch.txt"]
    for path in mine:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the user's own, longer than an entry's header " * 4)
    old = time.time() - eviction.STALE_TEMP_SECONDS - 60
    os.utime(mine[-1], (old, old))
    removed = eviction.clear(tmp_path)
    assert removed.entries == 1 and all(path.exists() for path in mine)


def test_cap_is_checked_on_the_first_write_and_every_64th(tmp_path, monkeypatch):
    """A process checks the cap on its first write to a folder, then every 64 writes."""
    checks = []
    monkeypatch.setattr(eviction, "prune", lambda root, cap: checks.append((root, cap)))
    for _ in range(130):
        eviction.wrote(tmp_path, 1000)
    assert checks == [(tmp_path, 1000)] * 3
    eviction.wrote(tmp_path / "other", None)  # no cap: never a scan
    assert len(checks) == 3


def test_executor_evicts_to_the_cap_from_the_environment(tmp_path, monkeypatch):
    """SPECDSL_CACHE_MAX_BYTES caps the folder: an executor's first write evicts old entries."""
    now = time.time_ns()
    stale = [_entry(tmp_path, f"{i:02x}old", 4096, now - 10**12) for i in range(8)]
    monkeypatch.setenv("SPECDSL_CACHE_MAX_BYTES", "16K")
    executor = Executor(None, target="sm_90", cache_dir=tmp_path)
    executor.ensure_module(VectorAdd())
    assert sum(p.exists() for p in stale) <= 4  # 32 KiB of old entries cut to fit 16 KiB
    again = Executor(None, target="sm_90", cache_dir=tmp_path)
    assert again.ensure_module(VectorAdd()).from_disk and again.stats.ptx_disk_hits == 1


def test_usage_counts_entries_by_kind(tmp_path, monkeypatch):
    """usage() counts cubin and PTX entries, compiled templates and template facts."""
    executor = Executor(None, target="sm_90", cache_dir=tmp_path)
    executor.ensure_module(VectorAdd())
    executor.ensure_module(RMSNorm(hidden=4096))
    (tmp_path / "jinja").mkdir(exist_ok=True)
    (tmp_path / "jinja" / "stray").write_bytes(b"no frame")
    usage = eviction.usage(tmp_path)
    assert usage.kinds["cubin"] == 2 and usage.kinds["PTX"] == 2 and usage.kinds["other"] == 1
    assert usage.entries == 5 and usage.temp_files == 0
    assert usage.bytes == sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.parametrize("cap", [0, 1])
def test_prune_on_a_read_only_folder_leaves_entries(tmp_path, cap):
    """Entries that cannot be removed are left, without an exception; the result counts
    them and keeps the first OS error, for the caller to report."""
    from cachefaults import binding_modes

    with binding_modes() as base:
        _entry(base, "aa1", 10, time.time_ns())
        os.chmod(base / "entries" / "aa", 0o500)
        removed = eviction.prune(base, cap)
        assert removed.entries == 0 and _names(base) == {"aa1"}
    assert removed.failed == 1 and isinstance(removed.error, PermissionError)
    assert removed.error.filename == str(base / "entries" / "aa" / "aa1")
