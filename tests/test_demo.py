"""``specdsl run`` and run_case: the CPU-side behaviour, and on a GPU the real run."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import gpu_available
from specdsl import Executor
from specdsl.cli import main
from specdsl.demo import builtin_cases, run_case
from specdsl.kernels import VectorAdd
from specdsl.kernels._case import KernelCase, Output


@pytest.mark.skipif(gpu_available() is None, reason="a GPU is present")
def test_run_without_gpu_is_one_line_and_exit_2(capsys):
    """Without a GPU, `specdsl run` prints one error line and exits 2."""
    assert main(["run"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdsl run: error: no CUDA device 0")
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
