"""On a GPU: compile options give correct kernels, and unusable caches never stop `specdsl run`."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specdsl import CompileOptions, Executor
from specdsl._review.demo import builtin_cases, run_case

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("options", [CompileOptions(lineinfo=True),
                                     CompileOptions(max_registers=32)], ids=repr)
def test_every_builtin_kernel_is_right_with_compile_options(tmp_path, options):
    """Each built-in kernel, compiled with -lineinfo or -maxrregcount=32, matches its float64
    reference within its tolerance."""
    executor = Executor(0, cache_dir=tmp_path, compile_options=options)
    for name, case, problem in builtin_cases(np.random.default_rng(0)):
        assert case is not None, problem
        errors = run_case(executor, case)
        assert errors and max(errors.values()) <= case.tolerance, (name, errors)


def test_debug_build_is_right(tmp_path):
    """VectorAdd compiled with -g (optimisation off) matches its reference."""
    executor = Executor(0, cache_dir=tmp_path, compile_options=CompileOptions(debug=True))
    (name, case, _), = [c for c in builtin_cases(np.random.default_rng(0)) if c[0] == "VectorAdd"]
    errors = run_case(executor, case)
    assert errors and max(errors.values()) <= case.tolerance, (name, errors)


def test_options_cubins_come_back_from_disk(tmp_path):
    """A second executor with the same options loads its cubins from disk and they run."""
    options = CompileOptions(lineinfo=True, max_registers=64)
    Executor(0, cache_dir=tmp_path, compile_options=options).ensure_module(
        builtin_cases(np.random.default_rng(0))[0][1].spec)
    again = Executor(0, cache_dir=tmp_path, compile_options=options)
    name, case, _ = builtin_cases(np.random.default_rng(0))[0]
    assert again.ensure_module(case.spec).from_disk
    errors = run_case(again, case)
    assert max(errors.values()) <= case.tolerance, (name, errors)


def _run(cache: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECDSL_CACHE_DIR=cache)
    return subprocess.run([sys.executable, "-m", "specdsl", "run"], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=600)


def test_run_with_a_file_for_a_cache_folder(tmp_path):
    """`specdsl run` with SPECDSL_CACHE_DIR naming a file: every kernel passes, exit 0, the
    CacheWarning as one 'specdsl: warning:' line and no traceback."""
    path = tmp_path / "file"
    path.write_text("x")
    done = _run(str(path))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.startswith(
        f"specdsl: warning: specdsl cache folder {str(path)!r} is not a folder; carrying on "
        f"without the cache\n")


def test_run_with_a_folder_others_can_write(tmp_path):
    """`specdsl run` with a world-writable cache folder: made private with a warning, the
    run passes, and a second run reads its cubins back."""
    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(0o777)
    done = _run(str(folder))
    assert done.returncode == 0, done.stderr
    assert "made private" in done.stderr and "Traceback" not in done.stderr
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    again = _run(str(folder))
    assert again.returncode == 0 and "warning" not in again.stderr, again.stderr
