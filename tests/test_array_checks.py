"""Array declarations: parsed at class definition, matched with the entry when a module is built,
and checked at every launch (element type and size), on both launch paths, without a GPU."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from fakedriver import FakeDriver
from specdsl import DType, Executor, LaunchError, SpecDefinitionError, baked, kernel_spec, launch
from specdsl.kernels import ALL, RMSNorm, RoPE, VectorAdd
from specdsl.kernels.case import Output
from standins import BFLOAT16, FLOAT32, INT32, INT64, DLPackArray, StandInBuffer, StandInTensor
from standins import use_stand_ins as _use_stand_ins

ADDRESS = 0x7F0000000000


@pytest.fixture
def stand_ins(monkeypatch, launch_path):
    """Stand-in Buffers and tensors, and an executor on a stand-in driver, on each path."""
    _use_stand_ins(monkeypatch)
    driver = FakeDriver()
    return Executor(0, cache_dir="off", driver=driver), driver


def _tensor(shape, dtype=BFLOAT16, address=ADDRESS):
    count = int(np.prod(shape))
    return StandInTensor(address, dtype=dtype, numel=count)


# -- declarations, at class definition -----------------------------------------------------


@pytest.mark.parametrize("arrays, message", [
    ({"a": "f33[n]"}, r"Add.arrays\['a'\]: element type 'f33' is neither a DType name"),
    ({"a": "dtype[n"}, r"Add.arrays\['a'\]: 'dtype\[n' does not parse"),
    ({"a": "dtype[block]"}, r"Add.arrays\['a'\]: 'block' is a launch field"),
    ({"a": "dtype[grid]"}, r"Add.arrays\['a'\]: 'grid' is read by axis"),
    ({"a": "dtype[n - 1]"}, r"Add.arrays\['a'\]: dimension 'n - 1' is none of"),
    ({"a": "dtype[-1]"}, r"Add.arrays\['a'\]: dimension '-1' is none of"),
    ({"a": "block[n]"}, r"Add.arrays\['a'\]: element type 'block' is a field but not a baked"),
    ({"a": "dtype[n] if dtype == 'f33' else None"}, r"'f33' is no value of 'dtype'"),
    ({"a": "dtype[n] if block else None"}, r"a condition reads baked fields only; 'block'"),
    ({"a": "dtype[n] if dtype > 3 else None"}, r"condition 'dtype > 3' is none of"),
    ({"a": 7}, r"Add.arrays\['a'\] must be a str"),
    ({"a b": "dtype[n]"}, r"Add.arrays: 'a b' is not a parameter name"),
    (["dtype[n]"], r"Add.arrays must be a dict"),
])
def test_bad_declarations_refused_at_class_definition(arrays, message):
    """Each bad declaration is a SpecDefinitionError naming the class, the parameter and
    the bad name, raised when the class is defined."""
    with pytest.raises(SpecDefinitionError, match=message):
        @kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
        class Add:
            dtype: DType = baked(DType.F32)
            block: int = launch(256)
            locals()["arrays"] = arrays


def test_declaration_names_checked_against_the_entry_at_module_build():
    """A declared name that is no .ptr parameter, or a dimension that is neither a baked
    int field nor an integer .param, is refused when the module is built (also by a
    compile-only executor), naming the class and the name."""
    executor = Executor(0, target="sm_90", cache_dir="off", driver=FakeDriver())

    @kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
    class NoSuchParam:
        dtype: DType = baked(DType.F32)
        arrays: ClassVar[dict[str, str]] = {"c": "dtype[n]"}

    @kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
    class NoSuchDim:
        dtype: DType = baked(DType.F32)
        arrays: ClassVar[dict[str, str]] = {"a": "dtype[count]"}

    @kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
    class ScalarDeclared:
        dtype: DType = baked(DType.F32)
        arrays: ClassVar[dict[str, str]] = {"n": "dtype[4]"}

    with pytest.raises(SpecDefinitionError, match=r"NoSuchParam.arrays\['c'\]: vector_add has "
                                                  r"no .ptr parameter 'c' for this request "
                                                  r"\(its pointers: a, b, out\)"):
        executor.launch(NoSuchParam(), ADDRESS, ADDRESS, ADDRESS, 4, grid=1, block=32)
    with pytest.raises(SpecDefinitionError, match=r"NoSuchDim.arrays\['a'\]: 'count' is neither "
                                                  r"a baked int field nor an integer .param "
                                                  r"\(integer .params: n\)"):
        executor.ensure_module(NoSuchDim())
    with pytest.raises(SpecDefinitionError, match=r"no .ptr parameter 'n'"):
        executor.ensure_module(ScalarDeclared())


@kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
class NamesNoPointer:
    dtype: DType = baked(DType.F32)
    arrays: ClassVar[dict[str, str]] = {"z": "dtype[n]"}


@kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
class NamesNoDimension:
    dtype: DType = baked(DType.F32)
    arrays: ClassVar[dict[str, str]] = {"a": "dtype[rows, n]"}


MISDECLARED = [
    (NamesNoPointer, "NamesNoPointer.arrays['z']: vector_add has no .ptr parameter 'z' for "
                     "this request (its pointers: a, b, out); declare it '... if CONDITION "
                     "else None' where a request has no such parameter"),
    (NamesNoDimension, "NamesNoDimension.arrays['a']: 'rows' is neither a baked int field nor "
                       "an integer .param (integer .params: n)"),
]


@pytest.mark.parametrize("cls, message", MISDECLARED)
def test_a_compile_only_executor_refuses_a_misdeclared_array(cls, message):
    """A compile-only executor (no GPU) refuses the module of a misdeclared array with
    plan_arrays' SpecDefinitionError, and caches nothing for it."""
    executor = Executor(None, target="sm_90", cache_dir="off")
    for _ in range(2):  # a failed build is not cached: refused again
        with pytest.raises(SpecDefinitionError) as caught:
            executor.ensure_module(cls())
        assert type(caught.value) is SpecDefinitionError and str(caught.value) == message
    assert executor.stats.compiles == 0


def test_a_compile_only_executor_builds_a_correct_declaration():
    """A correct declaration builds without a GPU; its checks are planned on the module."""
    module = Executor(None, target="sm_90", cache_dir="off").ensure_module(
        VectorAdd(dtype="f16"))
    assert [c and c.declared.name for c in module.arrays] == ["a", "b", "out", None]
    assert module.cubin[:4] == b"\x7fELF"


def test_arrays_are_planned_once_per_module(monkeypatch, launch_path):
    """The build plans a module's array checks once; loading and launching reuse them."""
    from specdsl._runtime import builds

    calls, plan = [], builds.plan_arrays
    monkeypatch.setattr(builds, "plan_arrays", lambda *a: calls.append(a) or plan(*a))
    executor = Executor(0, cache_dir="off", driver=FakeDriver())
    spec = VectorAdd(dtype="f32")
    for _ in range(3):
        executor.launch(spec, ADDRESS, ADDRESS, ADDRESS, 4, grid=1, block=32)
    module = executor.ensure_module(spec)
    assert len(calls) == 1 and module.packer.arrays is module.arrays


def test_verify_fails_a_misdeclared_array_and_goes_on(capsys):
    """specdsl verify on a user spec file (this one) prints a FAIL line naming each
    misdeclared request and its problem, passes the correct one, and exits 1."""
    from specdsl._cli.main import main
    from specdsl._review.requests import format_request

    code = main(["verify", "--target", "sm_90", "vectoradd"] +
                [f"{__file__}:{cls.__name__}" for cls, _ in MISDECLARED])
    out = capsys.readouterr().out
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert code == 1 and out.rstrip().endswith("1 passed, 2 failed"), out
    assert fails == [f"FAIL {format_request(cls())}: SpecDefinitionError: {message}"
                     for cls, message in MISDECLARED]


def test_conditions_pick_a_declaration_per_request():
    """A conditional declaration resolves per request: RMSNorm declares residual only with
    fused_residual, Fp8Quant's scale by scale_mode (none for static_baked)."""
    from specdsl._spec.decorator import spec_info
    from specdsl.kernels import Fp8Quant

    rmsnorm = spec_info(RMSNorm).arrays
    assert rmsnorm.resolve(RMSNorm(hidden=64))["residual"] is None
    fused = rmsnorm.resolve(RMSNorm(hidden=64, fused_residual=True))["residual"]
    assert fused.shown() == "bf16[rows, 64]" and fused.text.startswith("dtype[rows, hidden] if")
    shapes = {mode: spec_info(Fp8Quant).arrays.resolve(
        Fp8Quant(hidden=256, scale_mode=mode, static_scale=0.5 if mode == "static_baked"
                 else None))["scale"]
        for mode in ("dynamic", "group", "static_param", "static_baked")}
    assert {mode: d and d.shown() for mode, d in shapes.items()} == {
        "dynamic": "f32[grid.x]", "group": "f32[grid.x, 2]", "static_param": "f32[1]",
        "static_baked": None}


# -- the three inputs, without a GPU ---------------------------------------------


def test_rope_refuses_int32_positions(stand_ins):
    """RoPE reads int64 positions: an int32 tensor is refused naming positions, the
    declared type and the given one (issue 11: it was accepted, outputs off by up to 4.8)."""
    executor, driver = stand_ins
    spec = RoPE(dtype="bf16", q_heads=2, kv_heads=1, head_dim=64)
    q, k = _tensor((4, 2, 64)), _tensor((4, 1, 64), address=ADDRESS + 0x10000)
    grid, block = spec.launch_dims(4)
    with pytest.raises(LaunchError, match=r"rope: parameter 'positions' \(.*\) expects i64 "
                                          r"elements \(int64; declared positions: "
                                          r"int64\[tokens\]\) \(got int32 elements: "):
        executor.launch(spec, q, k, _tensor((4,), INT32, ADDRESS + 0x20000), 4, grid=grid,
                        block=block)
    executor.launch(spec, q, k, _tensor((4,), INT64, ADDRESS + 0x20000), 4, grid=grid,
                    block=block)
    assert len(driver.launches) == 1


def test_bf16_rmsnorm_refuses_float32_tensors(stand_ins):
    """A bf16 RMSNorm refuses float32 x, naming bf16 and float32."""
    executor, driver = stand_ins
    spec = RMSNorm(hidden=64, dtype="bf16")
    grid, block = spec.launch_dims(4)
    with pytest.raises(LaunchError, match=r"rmsnorm: parameter 'x' \(.*\) expects bf16 elements "
                                          r"\(bfloat16, or uint16 holding their bits; declared "
                                          r"x: dtype\[rows, hidden\]\) \(got float32 elements"):
        executor.launch(spec, _tensor((4, 64), FLOAT32), _tensor((64,)), _tensor((4, 64)), 4,
                        grid=grid, block=block)
    assert driver.launches == []


def test_rmsnorm_refuses_a_y_shorter_than_the_rows_launched(stand_ins):
    """rows=64 with a 4-row y is refused before the launch, naming y, the count the launch
    writes and the declaration with this launch's values (issue 11: it wrote 60 rows past
    y)."""
    executor, driver = stand_ins
    spec = RMSNorm(hidden=64, dtype="bf16")
    grid, block = spec.launch_dims(64)
    x, weight, y = _tensor((64, 64)), _tensor((64,)), _tensor((4, 64))
    with pytest.raises(LaunchError, match=r"rmsnorm: parameter 'y' \(.*\) expects at least 4096 "
                                          r"elements \(declared y: dtype\[rows, hidden\] = "
                                          r"bf16\[64, 64\] for this launch\) \(got 256 "
                                          r"elements: "):
        executor.launch(spec, x, weight, y, 64, grid=grid, block=block)
    executor.launch(spec, x, weight, y, 4, grid=grid, block=block)  # 4 rows fit
    assert len(driver.launches) == 1


# -- what arguments carry ------------------------------------------------------------------


def test_buffers_are_checked_in_bytes(stand_ins):
    """A Buffer carries a size in bytes only: one byte short of what the launch touches is
    refused, in bytes; its element type is not checked."""
    executor, driver = stand_ins
    spec = VectorAdd(dtype="f16")
    buffers = [StandInBuffer(ADDRESS + i * 0x10000, size=2048) for i in range(3)]
    executor.launch(spec, *buffers, 1024, grid=4, block=256)
    short = StandInBuffer(ADDRESS + 0x30000, size=2047)
    with pytest.raises(LaunchError, match=r"'out' .* expects at least 2048 bytes \(1024 "
                                          r"elements\) \(declared out: dtype\[n\] = f16\[1024\] "
                                          r"for this launch\) \(got 2047 bytes: "):
        executor.launch(spec, *buffers[:2], short, 1024, grid=4, block=256)
    assert len(driver.launches) == 1


def test_int_pointers_are_not_checked(stand_ins):
    """A device pointer as an int carries no size: it passes the declarations unchecked
    (docs/writing-specs.md says so)."""
    executor, driver = stand_ins
    executor.launch(VectorAdd(), ADDRESS, ADDRESS, ADDRESS, 2**40, grid=4, block=256)
    assert len(driver.launches) == 1


def test_dlpack_arrays_are_checked(stand_ins):
    """A DLPack array (read by cuda.core's StridedMemoryView) is checked for its element
    type and count like a tensor: float16 for f32 and 1023 elements for n=1024 refused."""
    executor, driver = stand_ins
    spec = VectorAdd(dtype="f32")
    arrays = [DLPackArray(ADDRESS + i * 0x10000, (32, 32)) for i in range(3)]
    executor.launch(spec, *arrays, 1024, grid=4, block=256)
    with pytest.raises(LaunchError, match=r"'b' .* expects f32 elements .* \(got float16 "
                                          r"elements: "):
        executor.launch(spec, arrays[0], DLPackArray(ADDRESS, (1024,), "float16"), arrays[2],
                        1024, grid=4, block=256)
    with pytest.raises(LaunchError, match=r"'a' .* expects at least 1024 elements .* \(got 1023"):
        executor.launch(spec, DLPackArray(ADDRESS, (1023,)), *arrays[1:], 1024, grid=4,
                        block=256)
    assert len(driver.launches) == 1


def test_an_element_type_cuda_core_cannot_name_is_refused(stand_ins):
    """A DLPack bfloat16 array, which cuda.core names only with ml_dtypes installed, is
    refused for a declared bf16 parameter with cuda.core's reason, not taken unchecked."""
    pytest.importorskip("numpy")
    try:
        import ml_dtypes  # noqa: F401
        pytest.skip("ml_dtypes names bfloat16 here")
    except ImportError:
        pass
    executor, _ = stand_ins
    spec = VectorAdd(dtype="bf16")
    with pytest.raises(LaunchError, match=r"'a' .* expects bf16 elements .* \(got unnamed "
                                          r"\(.*ml_dtypes"):
        executor.launch(spec, DLPackArray(ADDRESS, (1024,), "bfloat16"), ADDRESS, ADDRESS,
                        1024, grid=4, block=256)


def test_bits_carriers_of_bf16_are_taken(stand_ins):
    """bf16 arrays may travel as uint16 (NumPy and CuPy have no bf16): taken for bf16,
    refused for f16."""
    executor, driver = stand_ins
    bits = DLPackArray(ADDRESS, (1024,), "uint16")
    executor.launch(VectorAdd(dtype="bf16"), bits, bits, bits, 1024, grid=4, block=256)
    with pytest.raises(LaunchError, match=r"expects f16 elements \(float16; declared"):
        executor.launch(VectorAdd(dtype="f16"), bits, bits, bits, 1024, grid=4, block=256)
    assert len(driver.launches) == 1


def test_a_grid_dimension_is_read_from_the_launch(stand_ins):
    """Fp8Quant's rows are its grid's x: a q of 4 rows is refused for a grid of 8 CTAs."""
    from specdsl.kernels import Fp8Quant

    executor, driver = stand_ins
    spec = Fp8Quant(hidden=128, dtype="bf16")
    x, scale = _tensor((8, 128)), _tensor((8,), FLOAT32, ADDRESS + 0x40000)
    q = StandInBuffer(ADDRESS + 0x80000, size=4 * 128)
    with pytest.raises(LaunchError, match=r"'q' .* expects at least 1024 bytes \(1024 elements\) "
                                          r"\(declared q: e4m3\[grid.x / split, hidden\] = "
                                          r"f8e4m3\[8, 128\] for this launch\)"):
        executor.launch(spec, x, q, scale, grid=8, block=spec.block)
    executor.launch(spec, x, q, scale, grid=4, block=spec.block)
    assert len(driver.launches) == 1


def test_a_split_launch_reads_its_rows_as_grid_x_over_split(stand_ins):
    """Fp8Quant split over 4 CTAs a token: its rows are grid.x / split (a product or quotient
    by 1, as at split 1, reads grid.x alone): a grid of 8 CTAs is 2 tokens, whose x, q and
    group scales it takes at their size and refuses one row short."""
    from specdsl._spec.decorator import spec_info
    from specdsl.kernels import Fp8Quant

    executor, driver = stand_ins
    spec = Fp8Quant(hidden=512, dtype="bf16", scale_mode="group", split=4)
    declared = spec_info(Fp8Quant).arrays.resolve(spec)
    assert [declared[n].shown() for n in ("x", "q", "scale")] == [
        "bf16[grid.x / 4, 512]", "f8e4m3[grid.x / 4, 512]", "f32[grid.x / 4, 4]"]
    unsplit = spec_info(Fp8Quant).arrays.resolve(Fp8Quant(hidden=512, scale_mode="group"))
    assert unsplit["q"].shown() == "f8e4m3[grid.x, 512]"
    grid, block = spec.launch_dims(2)
    assert grid == (8, 1, 1)

    def arrays(rows_q: int = 2, rows_scale: int = 2):
        return (_tensor((2, 512)), StandInBuffer(ADDRESS + 0x80000, size=rows_q * 512),
                _tensor((rows_scale, 4), FLOAT32, ADDRESS + 0x40000))

    executor.launch(spec, *arrays(), grid=grid, block=block)
    with pytest.raises(LaunchError, match=r"'q' .* expects at least 1024 bytes \(1024 elements\) "
                                          r"\(declared q: e4m3\[grid.x / split, hidden\] = "
                                          r"f8e4m3\[8 / 4, 512\] for this launch\)"):
        executor.launch(spec, *arrays(rows_q=1), grid=grid, block=block)
    with pytest.raises(LaunchError, match=r"'scale' .* expects at least 8 elements"):
        executor.launch(spec, *arrays(rows_scale=1), grid=grid, block=block)
    assert len(driver.launches) == 1


# -- every built-in's declarations against its own examples -----------------------------


def _example_buffers(case, spec, shrink: str | None = None):
    """The example's arguments with every array a stand-in Buffer of its exact size (one
    element less for ``shrink``); scalars as they are."""
    args, address = [], ADDRESS
    for name, value in case.args:
        if isinstance(value, (Output, np.ndarray)):
            shape, dtype = (value.shape, value.dtype) if isinstance(value, Output) else (
                value.shape, None)
            size = int(np.prod(shape)) * (dtype.size if dtype is not None else value.itemsize)
            if name == shrink:
                size -= dtype.size if dtype is not None else value.itemsize
            args.append(StandInBuffer(address, size=size))
            address += 1 << 32
        else:
            args.append(value)
    return args


def _cases():
    import importlib

    from specdsl._review.variants import spec_variants

    rng = np.random.default_rng(0)
    for cls in ALL:
        example = importlib.import_module(cls.__module__).example
        for spec in spec_variants(cls):
            sizes = {"n": 4099} if cls is VectorAdd else {}
            yield spec, example(spec, rng, **sizes)


def test_every_builtin_takes_its_examples_and_refuses_one_element_less(stand_ins):
    """Every built-in's declared arrays take its own example (the arrays of ``example()``,
    the launch ``specdsl run`` makes), and refuse each array one element shorter, naming it."""
    executor, driver = stand_ins
    cases = list(_cases())
    for spec, case in cases:
        executor.launch(spec, *_example_buffers(case, spec), grid=case.grid, block=case.block,
                        shared_mem=case.shared_mem)
        declared = {c.declared.name for c in executor.ensure_module(spec).packer.declared}
        assert declared == {name for name, value in case.args
                            if isinstance(value, (Output, np.ndarray))}, spec
        for name in declared:
            with pytest.raises(LaunchError, match=rf"parameter '{name}' .* expects at least"):
                executor.launch(spec, *_example_buffers(case, spec, shrink=name),
                                grid=case.grid, block=case.block, shared_mem=case.shared_mem)
    assert len(driver.launches) == len(cases) > 60
