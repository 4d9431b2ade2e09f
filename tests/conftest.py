"""Shared test configuration: GPU tests skip cleanly where no CUDA device is found, and the
test session keeps its caches in a folder of its own, never the user's ~/.cache/specdsl."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

import pytest

# Set before any test module imports specdsl.kernels (whose template caches open at import),
# and inherited by every subprocess a test starts. A test that needs another folder, or the
# default location, sets SPECDSL_CACHE_DIR itself (monkeypatch restores this one after it).
SESSION_CACHE = tempfile.mkdtemp(prefix="specdsl-test-cache-")
os.environ["SPECDSL_CACHE_DIR"] = SESSION_CACHE


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(SESSION_CACHE, ignore_errors=True)


@functools.cache
def gpu_available() -> str | None:
    """None when a CUDA device can be used, else the reason it cannot."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:  # pragma: no cover - cuda-python is a dependency
        return f"cuda-python missing: {exc}"
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"no CUDA driver (cuInit: {err.name})"
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return "no CUDA device"
    except Exception as exc:  # a missing libcuda raises from the loader
        return f"no CUDA driver ({exc})"
    return None


@pytest.fixture(scope="module")
def gpu():
    """(executor, torch) on device 0, for the GPU-marked tests of a module."""
    torch = pytest.importorskip("torch")
    from specdsl import Executor

    return Executor(0), torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = gpu_available()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["compiled", "python"])
def launch_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on the compiled launch path and on the plain-Python one (specdsl.speedups):
    executors and packers made during the test take the path named by the parameter."""
    from specdsl._runtime.speedups import PURE_PYTHON_ENV, compiled

    monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    if request.param == "compiled" and not compiled():
        pytest.skip("specdsl._runtime._speedups is not built (no C compiler at install)")
    if request.param == "python":
        monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    return request.param
