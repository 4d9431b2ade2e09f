"""``specdsl run`` and run_case: the CPU-side behaviour, and on a GPU the real run."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import gpu_available
from specdsl import Executor
from specdsl._cli.main import main
from specdsl._review.demo import builtin_cases, run_case
from specdsl.kernels import VectorAdd
from specdsl.kernels.case import KernelCase, Output


@pytest.mark.skipif(gpu_available() is None, reason="a GPU is present")
def test_run_without_gpu_is_one_line_and_exit_2(capsys):
    """Without a GPU, `specdsl run` prints one error line and exits 2."""
    assert main(["run"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        ("specdsl run: error: no CUDA device 0", "specdsl run: error: no CUDA driver on this "
         "machine (for device 0)"))
    assert captured.out == ""


def test_builtin_cases_report_a_missing_example(monkeypatch):
    """A built-in whose module has no example() is reported, not skipped silently."""
    import specdsl.kernels as kernels
    from userspecs import Toy

    monkeypatch.setattr(kernels, "ALL", (VectorAdd, Toy))
    cases = builtin_cases(np.random.default_rng(0))
    assert [name for name, _, _ in cases] == ["VectorAdd", "Toy"]
    assert cases[0][1] is not None and cases[0][2] == ""
    assert cases[1][1] is None and "has no example()" in cases[1][2]


def test_run_case_needs_a_device():
    """run_case on a compile-only executor raises LaunchError."""
    from specdsl import LaunchError
    from specdsl.kernels.vector_add import example

    case = example(VectorAdd(), np.random.default_rng(0), n=64)
    with pytest.raises(LaunchError, match="compile-only"):
        run_case(Executor(None, target="sm_90", cache_dir="off"), case)


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    return Executor(0, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_run_case_vector_add(executor, dtype):
    """VectorAdd's example passes within its tolerance through cuda.core and NumPy alone."""
    from specdsl.kernels.vector_add import example

    case = example(VectorAdd(dtype=dtype), np.random.default_rng(12))
    errors = run_case(executor, case)
    assert errors["out"] <= case.tolerance


@pytest.mark.gpu
def test_run_case_catches_unwritten_output(executor):
    """An output element the kernel never writes stays NaN poison: the error is infinite."""
    rng = np.random.default_rng(13)
    n, written = 4096, 4000
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    spec = VectorAdd()
    case = KernelCase(spec=spec, args=(("a", a), ("b", b), ("out", Output((n,), spec.dtype)),
                                       ("n", np.uint64(written))),
                      grid=spec.grid(n), block=(256, 1, 1),
                      expected={"out": a.astype(np.float64) + b}, tolerance=1e-6)
    assert run_case(executor, case)["out"] == float("inf")


@pytest.mark.gpu
def test_specdsl_run_prints_a_table(capsys):
    """`specdsl run` prints one row per built-in kernel with its verdict; VectorAdd passes."""
    from specdsl.kernels import ALL

    code = main(["run"])
    out = capsys.readouterr().out
    names = {cls.__name__ for cls in ALL}
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] and
            line.split()[0] in names}
    assert set(rows) == names
    assert "PASS" in rows["VectorAdd"]
    assert code == (0 if all("PASS" in row for row in rows.values()) else 1)


def test_run_prints_a_row_per_kernel_and_fails_on_one(capsys, monkeypatch):
    """The run table (CPU, with a stand-in executor and results): one row per kernel, the
    failing one named with its reason on stderr's summary, exit status 1."""
    import types

    import specdsl._review.demo
    import specdsl._runtime.executor
    from specdsl._review.demo import KernelRun

    runs = [KernelRun("VectorAdd", VectorAdd(), "4096", {"out": 1e-8}, 1e-6),
            KernelRun("Broken", None, "-", {}, None, "module has no example()"),
            KernelRun("Loose", VectorAdd(dtype="f16"), "8x8", {"out": 0.5}, 1e-3)]
    target = types.SimpleNamespace(sm="sm_90")
    monkeypatch.setattr(specdsl._runtime.executor, "Executor",
                        lambda device: types.SimpleNamespace(target=target))
    monkeypatch.setattr(specdsl._review.demo, "run_builtins", lambda executor, rng: runs)
    code = main(["run"])
    out, err = capsys.readouterr()
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert code == 1 and list(rows) == ["kernel", "VectorAdd", "Broken", "Loose"]
    assert rows["VectorAdd"].endswith("out=1.00e-08  1.0e-06    PASS")
    assert rows["Broken"].endswith("FAIL (module has no example())")
    assert rows["Loose"].split()[-1] == "FAIL" and "vectoradd dtype=f16 block=256" in rows["Loose"]
    assert err == "1/3 passed on device 0 (sm_90)\n"
    assert [run.passed for run in runs] == [True, False, False]


def test_a_missing_driver_is_named_as_such(monkeypatch):
    """cuda.pathfinder's DynamicLibNotFoundError (no libcuda at all) is "no CUDA driver on
    this machine", not "no CUDA device 0"; other failures keep naming the device."""
    import cuda.core

    from specdsl import LaunchError
    from specdsl._runtime.driver import CudaDriver

    class DynamicLibNotFoundError(RuntimeError):
        pass

    def missing(ordinal):
        raise DynamicLibNotFoundError('"cuda" is an NVIDIA driver library')

    monkeypatch.setattr(cuda.core, "Device", missing)
    with pytest.raises(LaunchError, match=r'^no CUDA driver on this machine \(for device 3\): '
                                          r'"cuda" is an NVIDIA driver library$'):
        CudaDriver().open_device(3)

    def absent(ordinal):
        raise ValueError("device ordinal 3 is out of range")

    monkeypatch.setattr(cuda.core, "Device", absent)
    with pytest.raises(LaunchError, match=r"^no CUDA device 3: device ordinal 3 is out of range$"):
        CudaDriver().open_device(3)
