"""`specdsl cache info|clear|prune`: the disk cache from the command line."""

from __future__ import annotations

import os
import re

import pytest

from cachefaults import binding_modes, owned_by_another
from specdsl import Executor
from specdsl._cli.cache import format_size
from specdsl._cli.main import main
from specdsl.kernels import RMSNorm, VectorAdd


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def warm(tmp_path):
    """A cache folder holding two kernels' cubins and PTX."""
    executor = Executor(None, target="sm_90", cache_dir=tmp_path)
    executor.ensure_module(VectorAdd())
    executor.ensure_module(RMSNorm(hidden=4096))
    return tmp_path


def test_info(capsys, warm):
    """info prints the folder, size, entries by kind, the cap and the toolchain."""
    code, out, _ = run(capsys, "cache", "info", "--dir", str(warm))
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"location   {warm}"
    assert re.fullmatch(r"size {7}\d+\.\d KiB in 4 entries \(cap 1\.0 GiB\)", lines[1])
    assert lines[2] == "entries    2 cubins, 2 PTX"
    assert lines[3] == "temp       0 files (0 B)"
    assert re.fullmatch(r"toolchain  nvJitLink \d+\.\d+\.\d+ cuda_\S+; cuda\.core \S+; "
                        r"Jinja \S+; Python \S+", lines[4])


def test_info_counts_only_specdsls_temp_files(capsys, warm):
    """A file in tmp/ not named as specdsl's writers name theirs is not counted as a write in
    flight; info says it is there and kept."""
    (warm / "tmp" / "notes.txt").write_text("mine")
    (warm / "tmp" / "entry-x1").write_bytes(b"12345")
    code, out, _ = run(capsys, "cache", "info", "--dir", str(warm))
    assert code == 0
    assert out.splitlines()[3] == "temp       1 file (5 B); 1 file in tmp/ not specdsl's, kept"


def test_info_follows_the_environment(capsys, warm, monkeypatch):
    """Without --dir, info shows SPECDSL_CACHE_DIR and SPECDSL_CACHE_MAX_BYTES."""
    monkeypatch.setenv("SPECDSL_CACHE_DIR", str(warm))
    monkeypatch.setenv("SPECDSL_CACHE_MAX_BYTES", "512M")
    code, out, _ = run(capsys, "cache", "info")
    assert code == 0 and out.startswith(f"location   {warm}\n") and "(cap 512.0 MiB)" in out


def test_info_of_a_folder_not_made_yet(capsys, tmp_path):
    """A folder that does not exist is reported as such, and not created."""
    code, out, _ = run(capsys, "cache", "info", "--dir", str(tmp_path / "none"))
    assert code == 0 and "(not created yet)" in out and not (tmp_path / "none").exists()


def test_clear(capsys, warm):
    """clear removes every entry; the next executor compiles again."""
    code, out, _ = run(capsys, "cache", "clear", "--dir", str(warm))
    assert code == 0 and re.fullmatch(rf"removed 4 entries \(\d+\.\d KiB\) from {warm}; "
                                      rf"0 entries \(0 B\) left\n", out)
    executor = Executor(None, target="sm_90", cache_dir=warm)
    assert not executor.ensure_module(VectorAdd()).from_disk


def test_prune_to_max_bytes(capsys, warm):
    """prune --max-bytes removes entries until the rest fit."""
    code, out, _ = run(capsys, "cache", "prune", "--max-bytes", "8K", "--dir", str(warm))
    left = int(re.search(r"; (\d+) entr(?:y|ies) ", out).group(1))
    assert code == 0 and left < 4 and out.rstrip().endswith("cap 8.0 KiB")
    assert sum(p.stat().st_size for p in warm.rglob("*") if p.is_file()) <= 8 << 10


@pytest.mark.parametrize("value", ["4", "512", "1048575"])
def test_a_bare_max_bytes_under_a_mebibyte_is_refused(capsys, warm, value):
    """cache prune --max-bytes 4 (meant as 4G) would empty the cache: a usage error that
    names the units to give and 'cache clear', and every entry is kept."""
    code, out, err = run(capsys, "cache", "prune", "--max-bytes", value, "--dir", str(warm))
    big, small = ("G", "M") if int(value) < 1024 else ("M", "K")
    assert (code, out) == (2, "")
    assert err == (f"specdsl cache prune: error: argument --max-bytes: {value} is {value} "
                   f"bytes, under 1 MiB, which holds a handful of cached modules at most: give "
                   f"a unit, such as {value}{big} or {value}{small} (or {value}B if bytes are "
                   f"meant); to remove every entry, use 'cache clear'\n")
    assert len([p for p in warm.rglob("*") if p.is_file()]) == 4


def test_cache_dir_option_expands_home(capsys, monkeypatch, tmp_path):
    """--dir=~/folder (which the shell leaves alone after '=') names the folder under the
    home directory, as SPECDSL_CACHE_DIR and cache_dir= do."""
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, _ = run(capsys, "cache", "info", "--dir=~/specdsl-cache")
    assert code == 0 and out.startswith(f"location   {tmp_path}/specdsl-cache (not created yet)")


def test_prune_to_the_environment_cap(capsys, warm, monkeypatch):
    """prune without --max-bytes uses SPECDSL_CACHE_MAX_BYTES."""
    monkeypatch.setenv("SPECDSL_CACHE_MAX_BYTES", "1B")
    code, out, _ = run(capsys, "cache", "prune", "--dir", str(warm))
    assert code == 0 and "; 0 entries (0 B) left, cap 1 B" in out


@pytest.mark.parametrize("argv", [["clear"], ["prune", "--max-bytes", "1B"]])
def test_entries_that_cannot_be_removed_are_an_error(capsys, argv):
    """clear, or prune down to 1 byte, on a cache whose folders have mode 0500: the summary,
    then one error line naming the folder, the count and the OS error, and exit 2."""
    with binding_modes() as base:
        folder = base / "cache"
        Executor(None, target="sm_90", cache_dir=folder).ensure_module(VectorAdd())
        for top, _, _ in os.walk(folder):
            os.chmod(top, 0o500)
        code, out, err = run(capsys, "cache", *argv, "--dir", str(folder))
        left = len([p for p in (folder / "entries").rglob("*") if p.is_file()])
    assert (code, left) == (2, 2)
    assert re.fullmatch(rf"removed 0 entries \(0 B\) from {folder}; 2 entries \(\d+\.\d KiB\) "
                        rf"left(, cap 1 B)?\n", out)
    assert re.fullmatch(rf"specdsl cache {argv[0]}: error: could not remove 2 entries from "
                        rf"the cache folder '{folder}': \[Errno 13\] Permission denied: "
                        rf"'{folder}/entries/.+'\n", err)


@pytest.mark.parametrize("value", ["lots", "off", "0", "1.5G"])
def test_bad_max_bytes_is_a_usage_error(capsys, tmp_path, value):
    """A bad --max-bytes is one usage error line, exit 2; an off word (which means no cap
    in the variable) says what to use instead."""
    code, out, err = run(capsys, "cache", "prune", "--max-bytes", value, "--dir", str(tmp_path))
    assert (code, out) == (2, "")
    off = ("; 0, off and none mean no cap in SPECDSL_CACHE_MAX_BYTES: to remove every entry, "
           "use 'cache clear'") if value in ("off", "0") else ""
    assert err == (f"specdsl cache prune: error: argument --max-bytes: must be a size in bytes "
                   f"such as 1073741824, 512M or 4G, a whole number (got {value!r}){off}\n")


@pytest.mark.parametrize("argv", [
    ["--dir", "{dir}", "info"], ["info", "--dir", "{dir}"], ["--strict", "info", "--dir", "{dir}"],
    ["info", "--strict", "--dir", "{dir}"], ["--dir", "elsewhere", "info", "--dir", "{dir}"]])
def test_options_before_or_after_the_action(capsys, tmp_path, argv):
    """--dir and --strict work before or after the action (the later --dir wins)."""
    folder = tmp_path / "none"
    code, out, err = run(capsys, "cache", *(word.format(dir=folder) for word in argv))
    assert (code, err) == (0, "") and out.startswith(f"location   {folder} (not created yet)\n")


@pytest.mark.parametrize("argv", [["prune", "--max-bytes", "8K", "--dir", "{dir}"],
                                  ["--max-bytes", "8K", "--dir", "{dir}", "prune"]])
def test_max_bytes_before_or_after_prune(capsys, warm, argv):
    """prune takes --max-bytes before or after the action."""
    code, out, _ = run(capsys, "cache", *(word.format(dir=warm) for word in argv))
    assert code == 0 and out.rstrip().endswith("cap 8.0 KiB")


@pytest.mark.parametrize("action", ["info", "clear"])
@pytest.mark.parametrize("before", [False, True])
def test_max_bytes_is_prune_only(capsys, warm, action, before):
    """--max-bytes with info or clear is one error line naming prune, exit 2; nothing removed."""
    words = [action, "--max-bytes", "5G"] if not before else ["--max-bytes", "5G", action]
    code, out, err = run(capsys, "cache", *words, "--dir", str(warm))
    assert (code, out) == (2, "")
    assert err == (f"specdsl cache {action}: error: --max-bytes is an option of 'cache prune' only "
                   f"('cache {action}' takes --dir DIR)\n")
    assert len([p for p in warm.rglob("*") if p.is_file()]) == 4


def test_cache_off_is_one_error_line(capsys, monkeypatch):
    """With SPECDSL_CACHE_DIR=off and no --dir: one error line, exit 2."""
    monkeypatch.setenv("SPECDSL_CACHE_DIR", "off")
    code, out, err = run(capsys, "cache", "info")
    assert code == 2 and out == ""
    assert err == ("specdsl cache info: error: the disk cache is off (SPECDSL_CACHE_DIR=off); "
                   "name a folder with --dir\n")


def test_bad_environment_is_one_error_line(capsys, monkeypatch, tmp_path):
    """A malformed SPECDSL_CACHE_MAX_BYTES: one error line naming it, exit 2."""
    monkeypatch.setenv("SPECDSL_CACHE_MAX_BYTES", "huge")
    code, _, err = run(capsys, "cache", "prune", "--dir", str(tmp_path))
    assert code == 2
    assert err.startswith("specdsl cache prune: error: SPECDSL_CACHE_MAX_BYTES must be")


def test_folder_of_another_user_is_refused(capsys, warm, monkeypatch):
    """clear refuses a folder another user owns: one error line, nothing removed."""
    owned_by_another(monkeypatch, warm)
    code, _, err = run(capsys, "cache", "clear", "--dir", str(warm))
    assert code == 2 and "belongs to another user" in err
    assert len([p for p in warm.rglob("*") if p.is_file()]) == 4


@pytest.mark.parametrize("size, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"),
                                        (5 << 20, "5.0 MiB"), (3 << 40, "3.0 TiB"),
                                        (5000 << 40, "5000.0 TiB")])
def test_format_size(size, text):
    """Sizes print in B, KiB, MiB or GiB."""
    assert format_size(size) == text


def test_prune_without_a_cap(capsys, warm, monkeypatch):
    """With SPECDSL_CACHE_MAX_BYTES=off and no --max-bytes, prune says so and removes nothing."""
    monkeypatch.setenv("SPECDSL_CACHE_MAX_BYTES", "off")
    code, out, err = run(capsys, "cache", "prune", "--dir", str(warm))
    assert (code, out) == (0, "") and err.startswith("no cap (SPECDSL_CACHE_MAX_BYTES=off)")
    assert len([p for p in warm.rglob("*") if p.is_file()]) == 4


def test_no_action_lists_the_actions(capsys):
    """specdsl cache alone is one error line that names info, clear and prune."""
    code, out, err = run(capsys, "cache")
    assert code == 2 and out == ""
    assert err == ("specdsl cache: error: the following arguments are required: ACTION "
                   "(info, clear, prune)\n")


def test_relative_folder_is_shown_absolute(capsys, tmp_path, monkeypatch):
    """SPECDSL_CACHE_DIR=./off is the folder 'off' here, shown as its absolute path (not
    'off', which reads as the cache being off)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECDSL_CACHE_DIR", "./off")
    code, out, _ = run(capsys, "cache", "info")
    assert code == 0 and out.splitlines()[0] == f"location   {tmp_path / 'off'} (not created yet)"


def test_other_entries_are_explained_and_cleared(capsys, warm):
    """A foreign file and an older specdsl's entry among the entries count as 'other', a
    line says what that is; clear removes the older entry and keeps the foreign file (a
    folder named as the cache by mistake loses nothing of its own)."""
    foreign = warm / "entries" / "zz"
    foreign.mkdir(mode=0o700)
    (foreign / "left-by-someone").write_bytes(b"not an entry of any specdsl")
    (foreign / "older").write_bytes(b"SPECDSL-CUBIN/0\n" + bytes(100))
    code, out, _ = run(capsys, "cache", "info", "--dir", str(warm))
    lines = out.splitlines()
    assert code == 0 and lines[2] == "entries    2 cubins, 2 PTX, 2 other"
    assert lines[3] == ("           (other: never read: an older specdsl's entries or damaged "
                        "ones, which clear removes, or files not specdsl's, which it keeps)")
    run(capsys, "cache", "clear", "--dir", str(warm))
    assert (foreign / "left-by-someone").exists() and not (foreign / "older").exists()


@pytest.mark.parametrize("argv", [["cache", "clear", "--dir", ""], ["cache", "--dir", "", "info"],
                                  ["render", "vectoradd", "--out", ""]])
def test_an_empty_folder_name_is_refused(capsys, argv, tmp_path, monkeypatch):
    """--dir "" or --out "" (an unset shell variable) is refused: it would mean the working
    folder, which cache clear would then act on, or stdout for render."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jinja").mkdir()
    (tmp_path / "jinja" / "mine.txt").write_text("mine")
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "") and err.rstrip().endswith(
        "an empty folder name (an unset variable?): give a folder, '.' for the working folder")
    assert (tmp_path / "jinja" / "mine.txt").exists() and tmp_path.stat().st_mode & 0o777 != 0
