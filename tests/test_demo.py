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
    monkeypatch.setattr(specdsl._review.demo, "run_cases", lambda executor, cases: runs)
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


# --- specdsl run REQUEST ... [--tokens N] ------------------------------------------------------

#: A user module with a spec class over the built-in vector_add template and its example().
USER_MODULE = '''
import numpy as np

from specdsl import DType, baked, kernel_spec, launch
from specdsl.kernels.case import KernelCase, Output


@kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
class MyAdd:
    dtype: DType = baked(DType.F32)
    block: int = launch(128)


def example(spec, rng, tokens=100):
    a = rng.standard_normal(tokens).astype(np.float32)
    b = rng.standard_normal(tokens).astype(np.float32)
    per_cta = spec.block * 4  # a 16-byte vector of f32 a thread
    return KernelCase(spec=spec,
                      args=(("a", a), ("b", b), ("out", Output((tokens,), DType.F32)),
                            ("n", np.uint64(tokens))),
                      grid=(max(1, -(-tokens // per_cta)), 1, 1), block=(spec.block, 1, 1),
                      expected={"out": a.astype(np.float64) + b}, tolerance=1e-6)
'''


@pytest.fixture
def stand_in_gpu(monkeypatch):
    """The device replaced by stand-ins: Executor(device) records the device, run_case the
    cases it is given (and reports each output exact). Returns ``(devices, cases)``."""
    import types

    import specdsl._review.demo
    import specdsl._runtime.executor

    devices, cases = [], []

    def executor(device):
        devices.append(device)
        return types.SimpleNamespace(target=types.SimpleNamespace(sm="sm_90"))

    def run_case_stand_in(executor, case, rng=None):
        cases.append(case)
        return {name: 0.0 for name in case.expected}

    monkeypatch.setattr(specdsl._runtime.executor, "Executor", executor)
    monkeypatch.setattr(specdsl._review.demo, "run_case", run_case_stand_in)
    return devices, cases


@pytest.fixture
def no_gpu(monkeypatch):
    """Executor(device) always fails as on a machine without a driver; its calls are listed."""
    import specdsl._runtime.executor
    from specdsl import LaunchError

    calls = []

    def executor(device):
        calls.append(device)
        raise LaunchError(f"no CUDA device {device}: stand-in")

    monkeypatch.setattr(specdsl._runtime.executor, "Executor", executor)
    return calls


def _rows(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines() if line.strip()}


def _shape(row: str) -> str:
    """A table row's shape: its first word after the kernel and SPEC that is no field word."""
    return next(word for word in row.split()[2:] if "=" not in word)


def test_run_one_request_with_tokens(capsys, stand_in_gpu):
    """`specdsl run silumul d=4096 l1_no_allocate=true --tokens 16`: one row, that request,
    a 16-token example (x is 16 x 2d), on device 0; exit 0."""
    devices, cases = stand_in_gpu
    code = main(["run", "silumul", "d=4096", "l1_no_allocate=true", "--tokens", "16"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert devices == [0] and len(cases) == 1
    assert cases[0].spec.d == 4096 and cases[0].spec.l1_no_allocate is True
    assert dict(cases[0].args)["tokens"] == 16
    lines = out.splitlines()
    assert lines[0].split() == ["kernel", "request", "shape", "rel", "error", "tolerance",
                                "result"]
    assert lines[1].split() == ["SiluMul", "silumul", "dtype=bf16", "d=4096", "unroll=2",
                                "l1_no_allocate=true", "block=256", "16x8192", "out=0.00e+00",
                                "1.0e-02", "PASS"]
    assert lines[2:] == ["1/1 passed on device 0 (sm_90)"]


def test_run_several_requests_one_row_each_in_order(capsys, stand_in_gpu):
    """Each SPEC word starts a request, as in verify; a SPEC without fields is its
    representative request; requests that share a derived key each run (launch fields
    change the launch); the options go anywhere and --device reaches the executor."""
    devices, cases = stand_in_gpu
    code = main(["run", "vectoradd", "dtype=f16", "--device", "1", "rmsnorm", "hidden=2048",
                 "vectoradd", "dtype=f16", "block=128", "softmax", "--tokens", "3"])
    out, _ = capsys.readouterr()
    assert code == 0 and devices == [1]
    assert [type(case.spec).__name__ for case in cases] == ["VectorAdd", "RMSNorm", "VectorAdd",
                                                            "Softmax"]
    assert [case.spec.block for case in cases[::2]] == [256, 128]
    assert cases[1].spec.hidden == 2048 and cases[3].spec.cols == 4096
    shapes = [_shape(line) for line in out.splitlines()[1:-1]]
    assert shapes == ["3", "3x2048", "3", "3x4096"]
    assert out.splitlines()[-1] == "4/4 passed on device 1 (sm_90)"


def test_tokens_reach_every_builtin_example_whatever_its_count_is_called(capsys, stand_in_gpu):
    """--tokens without a request: every built-in's representative example gets the count,
    be it named tokens (SiluMul, RoPE, ...), rows (RMSNorm, Softmax, RMSNormQuant) or n
    (VectorAdd)."""
    from specdsl.kernels import ALL

    _, cases = stand_in_gpu
    assert main(["run", "--tokens", "5"]) == 0
    out, _ = capsys.readouterr()
    assert [type(case.spec) for case in cases] == list(ALL)
    shapes = {line.split()[0]: _shape(line) for line in out.splitlines()[1:-1]}
    assert list(shapes) == [cls.__name__ for cls in ALL]
    assert all(shape == "5" or shape.startswith("5x") for shape in shapes.values()), shapes
    assert shapes["RoPE"] == "5x32x128" and shapes["VectorAdd"] == "5"


def test_without_tokens_each_example_keeps_its_default(stand_in_gpu):
    """No --tokens: each example's own default count (SiluMul's 37 tokens, RMSNorm's 7 rows)."""
    _, cases = stand_in_gpu
    assert main(["run", "silumul", "rmsnorm", "hidden=1024"]) == 0
    counts = zip(cases, ["tokens", "rows"], strict=True)
    assert [dict(case.args)[name] for case, name in counts] == [37, 7]


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "abc", "16x", "\u00b2", "+4", "1_0"])
def test_tokens_must_be_a_whole_number_of_one_or_more(capsys, no_gpu, value):
    """--tokens 0, a negative, a fraction or anything but ASCII digits is argparse's error
    naming the option (exit 2), before any device is opened."""
    code = main(["run", "silumul", f"--tokens={value}"])
    out, err = capsys.readouterr()
    assert (code, out, no_gpu) == (2, "", [])
    assert err == (f"specdsl run: error: argument --tokens: expected a whole number >= 1 "
                   f"(got {value!r})\n")


@pytest.mark.parametrize("argv, message", [
    (["silumul", "l1_no_allocate=maybe"],
     "SiluMul.l1_no_allocate must be a bool: true or false (or 1/0, yes/no, on/off, in any "
     "case; got 'maybe')"),
    (["vectoradd", "dtype=f64"], "VectorAdd.dtype = DType.F64 is invalid: "),
    (["silumul", "dd=4096"], "SiluMul has no field 'dd' (fields: "),
    (["rmsnorm", "hidden=4096", "nosuch"], "unknown spec 'nosuch': built-in specs are "),
    (["d=4096"], "'d=4096' assigns a field before any SPEC was named"),
    (["userspecs:Toy"],
     "Toy cannot be run: specdsl run needs an example(spec, rng, tokens) function in its "
     "module 'userspecs', returning a specdsl.kernels.case.KernelCase (the module has none)"),
])
def test_a_request_error_comes_before_the_device(capsys, no_gpu, argv, message):
    """A bad request, field value or a spec without example() is one error line (exit 2),
    the one `verify` gives for those words, found before the device is opened: the same
    on a machine without a GPU."""
    code = main(["run", *argv, "--tokens", "4"])
    out, err = capsys.readouterr()
    assert (code, out, no_gpu) == (2, "", [])
    assert err.startswith(f"specdsl run: error: {message}") and err.count("\n") == 1, err
    if argv[0] != "userspecs:Toy":  # the words verify gives for them (its requests, parsed)
        assert main(["verify", *argv]) == 2
        assert capsys.readouterr().err == err.replace("specdsl run:", "specdsl verify:")


def test_a_valid_request_without_a_gpu_is_the_device_error(capsys, no_gpu):
    """Once the requests are understood, the missing device is the error line (exit 2)."""
    code = main(["run", "rmsnorm", "hidden=4096", "--device", "3"])
    out, err = capsys.readouterr()
    assert (code, out, no_gpu) == (2, "", [3])
    assert err == "specdsl run: error: no CUDA device 3: stand-in\n"


def test_run_a_user_module_example(capsys, stand_in_gpu, tmp_path, monkeypatch):
    """A user spec named by file (or module) runs through its own module's example(), with
    --tokens as its count."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "myadd_kernels.py").write_text(USER_MODULE)
    _, cases = stand_in_gpu
    code = main(["run", "./myadd_kernels.py:MyAdd", "block=64", "--tokens", "1000"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert len(cases) == 1 and type(cases[0].spec).__qualname__ == "MyAdd"
    assert cases[0].spec.block == 64 and cases[0].grid == (4, 1, 1)
    assert _rows(out)["MyAdd"].split() == ["MyAdd", "./myadd_kernels.py:MyAdd", "dtype=f32",
                                           "block=64", "1000", "out=0.00e+00", "1.0e-06",
                                           "PASS"]


@pytest.mark.parametrize("signature, argv, message", [
    ("spec, rng", ["--tokens", "8"],
     "MyAdd's example() (in module 'badexample_{i}') takes no count (a third parameter after "
     "spec and rng, such as tokens): give no count (no --tokens)"),
    ("spec", [],
     "MyAdd's example() (in module 'badexample_{i}') cannot be called as example(spec, rng): "
     "too many positional arguments"),
    ("spec, rng, tokens, positions", ["--tokens", "8"],
     "MyAdd's example() (in module 'badexample_{i}') cannot be called as example(spec, rng, "
     "tokens): missing a required argument: 'positions'"),
])
def test_a_user_example_that_cannot_take_the_call_is_one_error_line(
        capsys, no_gpu, tmp_path, monkeypatch, signature, argv, message):
    """An example() without a count given --tokens, or one that cannot be called as
    example(spec, rng[, tokens]) at all, is named in one error line (exit 2)."""
    i = len(signature)
    source = USER_MODULE.replace("def example(spec, rng, tokens=100):",
                                 f"def example({signature}):\n    raise AssertionError\n\n\n"
                                 f"def unused(spec, rng, tokens=100):")
    (tmp_path / f"badexample_{i}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["run", f"badexample_{i}:MyAdd", *argv])
    out, err = capsys.readouterr()
    assert (code, out, no_gpu) == (2, "", [])
    assert err == f"specdsl run: error: {message.format(i=i)}\n"


def test_an_example_that_breaks_is_a_failed_row_and_the_others_run(capsys, stand_in_gpu,
                                                                    monkeypatch):
    """An example() raising anything but a specdsl error is that request's FAIL row; the
    other requests still run; exit 1, the summary on stderr."""
    import specdsl.kernels.rmsnorm

    def broken(spec, rng, rows=7):
        raise MemoryError("Unable to allocate 12 TiB")

    monkeypatch.setattr(specdsl.kernels.rmsnorm, "example", broken)
    _, cases = stand_in_gpu
    code = main(["run", "rmsnorm", "hidden=4096", "vectoradd"])
    out, err = capsys.readouterr()
    assert code == 1 and [type(case.spec).__name__ for case in cases] == ["VectorAdd"]
    rows = _rows(out)
    assert rows["RMSNorm"].endswith("FAIL (MemoryError: Unable to allocate 12 TiB)")
    assert rows["RMSNorm"].split()[1:3] == ["-", "-"]
    assert rows["VectorAdd"].endswith("PASS")
    assert err == "1/2 passed on device 0 (sm_90)\n"


def test_example_case_passes_the_count_by_position_or_keyword(monkeypatch):
    """example_case gives the count as the example's third parameter, by position, or by
    name where it is keyword-only; without a count the example keeps its default."""
    import specdsl.kernels.vector_add
    from specdsl._review.demo import example_case

    spec, rng = VectorAdd(), np.random.default_rng(0)
    assert dict(example_case(spec, rng, 9).args)["n"] == 9
    assert dict(example_case(spec, rng).args)["n"] == 1_000_003
    positional = specdsl.kernels.vector_add.example

    def keyword_only(spec, rng, *, elements=11):
        return positional(spec, rng, elements)

    monkeypatch.setattr(specdsl.kernels.vector_add, "example", keyword_only)
    assert dict(example_case(spec, rng, 9).args)["n"] == 9
    assert dict(example_case(spec, rng).args)["n"] == 11


@pytest.mark.gpu
def test_specdsl_run_one_request_passes_on_the_gpu(capsys):
    """`specdsl run silumul d=4096 l1_no_allocate=true --tokens 16` runs that one request on
    16 tokens and passes against the float64 reference."""
    code = main(["run", "silumul", "d=4096", "l1_no_allocate=true", "--tokens", "16"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 3 and lines[2].startswith("1/1 passed on device 0 (sm_")
    row = lines[1].split()
    assert row[:7] == ["SiluMul", "silumul", "dtype=bf16", "d=4096", "unroll=2",
                       "l1_no_allocate=true", "block=256"]
    assert row[7] == "16x8192" and row[-2:] == ["1.0e-02", "PASS"]
    assert float(row[8].removeprefix("out=")) <= 1e-2


@pytest.mark.gpu
def test_specdsl_run_several_requests_pass_on_the_gpu(capsys, tmp_path, monkeypatch):
    """RMSNorm with a fused residual on 3 rows, Fp8Quant per group and a user module's own
    example(), each one row, each within its tolerance."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "myadd_kernels.py").write_text(USER_MODULE)
    code = main(["run", "rmsnorm", "hidden=8192", "fused_residual=true", "--tokens", "3",
                 "fp8quant", "hidden=4096", "scale_mode=group",
                 "./myadd_kernels.py:MyAdd", "block=64"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    rows = _rows(out)
    assert list(rows) == ["kernel", "RMSNorm", "Fp8Quant", "MyAdd", "3/3"]
    assert [_shape(rows[name]) for name in ("RMSNorm", "Fp8Quant", "MyAdd")] == [
        "3x8192", "3x4096", "3"]
    assert "residual=" in rows["RMSNorm"] and "scale=" in rows["Fp8Quant"]
    assert all(rows[name].endswith("PASS") for name in ("RMSNorm", "Fp8Quant", "MyAdd"))


@pytest.mark.parametrize("module, body, why", [
    ("raising_example", "    raise TypeError('boom')", "TypeError: boom"),
    ("none_example", "    return None", "TypeError: MyAdd's example() (in module "
                                        "'none_example') returned NoneType, not a KernelCase"),
])
def test_a_broken_example_is_said_without_a_gpu_too(capsys, no_gpu, tmp_path, monkeypatch,
                                                    module, body, why):
    """An example that raises (not a SpecError) or returns no case would be a FAIL row on a
    GPU; without one its line comes before the device error, so it is not hidden."""
    monkeypatch.syspath_prepend(str(tmp_path))
    source = USER_MODULE.split("def example")[0] + f"def example(spec, rng, tokens=100):\n{body}\n"
    (tmp_path / f"{module}.py").write_text(source)
    code = main(["run", f"{module}:MyAdd", "silumul"])
    out, err = capsys.readouterr()
    assert (code, out, no_gpu) == (2, "", [0])
    assert err.splitlines() == [f"FAIL MyAdd: {why}", "specdsl run: error: no CUDA device 0: "
                                                      "stand-in"]


@pytest.mark.parametrize("option", ["--seed", "--device"])
def test_seed_and_device_are_whole_numbers(capsys, no_gpu, option):
    """--seed -1 (NumPy's error, naming its own source) and --device -1 are argparse's error
    naming the option."""
    assert main(["run", "silumul", option, "-1"]) == 2
    assert capsys.readouterr().err == (f"specdsl run: error: argument {option}: expected a "
                                       f"whole number >= 0 (got '-1')\n")


def test_an_example_that_is_not_a_function_is_named(capsys, no_gpu, tmp_path, monkeypatch):
    """A module whose `example` is not callable: the message says what it is."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "int_example.py").write_text(USER_MODULE.split("def example")[0] + "example = 5\n")
    assert main(["run", "int_example:MyAdd"]) == 2
    assert capsys.readouterr().err.endswith("(its example is of type int, not a function)\n")
