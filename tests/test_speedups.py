"""The compiled launch path (specdsl._runtime._speedups) against the plain-Python one it twins.

Both must pack the same parameter bytes and refuse the same arguments with the same
message; hypothesis draws the arguments, edges included, for every PTX scalar type, and
for declared arrays (element type and size).
"""

from __future__ import annotations

import enum
import shutil
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakedriver import FakeDriver, compiled_launcher
from specdsl import LaunchError
from specdsl._runtime.launchers import core_launcher, writer
from specdsl._runtime.params import ArgumentPacker
from specdsl._runtime.signature import parse_entry
from specdsl._runtime.speedups import PURE_PYTHON_ENV, compiled, speedups
from standins import StandInBuffer, StandInTensor, use_stand_ins

needs_extension = pytest.mark.skipif(not compiled(),
                                     reason="specdsl._runtime._speedups is not built")

# every scalar type cuda.core takes, and pointers of different alignments and widths
PARAMS = (".param .u64 .ptr .global .align 16 p, .param .u8 a, .param .s16 b, "
          ".param .u32 c, .param .s32 d, .param .u64 e, .param .s64 f, .param .b32 g, "
          ".param .f16 h, .param .f32 i, .param .f64 j, .param .b64 k, .param .s8 l, "
          ".param .b8 m, .param .u16 n, .param .b16 o, .param .u64 .ptr .global .align 4 q, "
          ".param .u32 .ptr .global .align 8 r")
# arguments every parameter above takes; the tests replace some of them
VALID = (0x7F0000000100, 1, -1, 7, -7, 2**40, -(2**40), 0xFFFF, 1.5, 0.25, -2.5, 2**63, -3,
         200, 9, -2, 0x40, 0x1000)


class Level(enum.IntEnum):
    LOW = 3


EDGES = sorted({sign * (2**bits + delta) for bits in (7, 8, 15, 16, 31, 32, 63, 64)
                for delta in (-1, 0, 1) for sign in (1, -1)} | {0, 1, -1, 16, 17, 0xDEADBEEF})
FLOAT_EDGES = [0.0, -0.0, 1.5, 65504.0, 65520.0, 6e-8, 3.4028234663852886e38,
               3.4028235677973366e38, 3.5e38, 1e-45, 1e308, 1.7976931348623157e308,
               float("inf"), float("-inf"), float("nan")]
OTHERS = [np.uint8(200), np.int16(-5), np.uint32(2**32 - 1), np.int64(-(2**40)),
          np.uint64(2**64 - 1), np.float16(1.5), np.float32(0.1), np.float64(-2.5), np.True_,
          np.arange(3), Level.LOW, True, False, None, "0x10", b"\x00" * 8, 1j, object()]
BUFFER_HANDLES = [0, 4, 16, 17, 0x7F0000000100, 2**63, 2**63 + 16]
TENSOR_ADDRESSES = [*BUFFER_HANDLES, None]
VALUES = st.one_of(
    st.sampled_from(EDGES),
    st.integers(-(2**66), 2**66),
    st.sampled_from(FLOAT_EDGES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(width=32), st.floats(width=16),
    st.booleans(),
    st.sampled_from(OTHERS),
    st.builds(StandInBuffer, st.sampled_from(BUFFER_HANDLES), st.sampled_from([0, 1]),
              st.booleans()),
    st.builds(StandInTensor, st.sampled_from(TENSOR_ADDRESSES), st.sampled_from([-1, 0, 1]),
              st.booleans()),
)


def _packer(params: str = PARAMS, arrays=None) -> ArgumentPacker:
    ptx = (".version 8.0\n.target sm_90\n.address_size 64\n"
           f".visible .entry k({params})\n{{ ret; }}\n")
    signature = parse_entry(ptx, "k")
    return ArgumentPacker(signature, device_id=0,
                          arrays=None if arrays is None else arrays(signature))


def _outcomes(args: tuple, packer: ArgumentPacker | None = None,
              grid: tuple[int, int, int] = (1, 1, 1)) -> list[tuple]:
    """What each launch path made of ``args``: the parameters' bytes, or the LaunchError's
    message, from the generated Python writer (the driver path's checks), the generated
    cuda.core launcher (what cuda.core packs for its values) and the compiled DriverLaunch
    (its pack, and a launch through a stand-in driver's C entry point)."""
    packer = packer or _packer()
    outcomes = []

    def attempt(pack):
        try:
            outcomes.append(("packed", pack()))
        except LaunchError as exc:
            outcomes.append(("refused", str(exc)))

    def python_writer():
        buffer = bytearray(packer.size)
        writer(packer)(args, 5, buffer, grid)
        return _slices(packer, bytes(buffer))

    def python_core():
        seen: list = []
        err = core_launcher(packer, lambda *a: seen.append(a[3:]), "kernel")(
            args, (5, "stream"), (*grid, 32, 1, 1, 0, "config"))
        assert err is None
        return _cuda_core_bytes(seen[0], packer)

    def compiled_pack():
        return _slices(packer, compiled_launcher(packer, FakeDriver()).pack(args, 5, grid))

    def compiled_launch():
        driver = FakeDriver()
        err = compiled_launcher(packer, driver).fire(args, (5, "stream"), (*grid, 32, 1, 1, 0))
        assert err is None and driver.driver_calls[0][8] == 5
        return tuple(value[:param.size] for value, param in
                     zip(driver.driver_calls[0][9], packer.signature.params, strict=True))

    for pack in (python_writer, python_core, compiled_pack, compiled_launch):
        attempt(pack)
    return outcomes


def _slices(packer: ArgumentPacker, buffer: bytes) -> tuple[bytes, ...]:
    return tuple(buffer[offset:offset + param.size]
                 for param, offset in zip(packer.signature.params, packer.offsets, strict=True))


def _cuda_core_bytes(values, packer) -> tuple[bytes, ...]:
    """The bytes each parameter's driver copy reads from what cuda.core packs."""
    import ctypes

    from cuda.core._kernel_arg_handler import ParamHolder  # fails loudly if it moves

    packed = ParamHolder(list(values))
    pointers = (ctypes.c_void_p * len(values)).from_address(packed.ptr)
    return tuple(ctypes.string_at(pointers[i], param.size)
                 for i, param in enumerate(packer.signature.params))


def _same(outcomes: list[tuple]) -> bool:
    return all(outcome == outcomes[0] for outcome in outcomes)


@pytest.fixture
def stand_in_arrays(monkeypatch):
    """StandInBuffer and StandInTensor take the places of cuda.core's Buffer and torch.Tensor
    (inline paths and converters alike)."""
    use_stand_ins(monkeypatch)


@needs_extension
def test_compiled_checks_match_the_python_ones_at_every_edge(stand_in_arrays):
    """Every edge value in every parameter's place: the same bytes or the same error."""
    edges = [*EDGES, *FLOAT_EDGES, *OTHERS,
             *(StandInBuffer(h, d, c) for h in BUFFER_HANDLES for d in (0, 1)
               for c in (False, True)),
             *(StandInTensor(a, d, c) for a in TENSOR_ADDRESSES for d in (-1, 0, 1)
               for c in (False, True))]
    packer = _packer()
    for index in range(len(VALID)):
        for value in edges:
            args = (*VALID[:index], value, *VALID[index + 1:])
            outcomes = _outcomes(args, packer)
            assert _same(outcomes), (index, value, outcomes)


@needs_extension
@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.integers(0, len(VALID) - 1), VALUES, max_size=3),
       st.sampled_from([0, 0, 0, -1, 1]))
def test_compiled_checks_match_the_python_ones(stand_in_arrays, changes, extra):
    """Arguments of every kind (valid ones with up to three replaced; one too few or one
    too many): the compiled DriverLaunch packs the same bytes as the generated Python
    launchers (and as cuda.core packs their values), or raises the same LaunchError."""
    args = [*VALID]
    for index, value in changes.items():
        args[index] = value
    args = args[:extra] if extra < 0 else args + [0] * extra
    assert _same(_outcomes(tuple(args)))


@needs_extension
def test_compiled_checks_take_valid_values_inline(stand_in_arrays):
    """The valid arguments launch on every path with the exact bytes of each .param:
    64-bit values at or above 2**63 as their bits, floats as their IEEE bits, a Buffer and a
    tensor as their addresses."""
    args = (StandInBuffer(0x7F0000000100), *VALID[1:-2], StandInTensor(0x7F0000000204),
            StandInTensor(0x2000))
    outcomes = _outcomes(args)
    assert _same(outcomes)
    values = outcomes[0][1]
    assert values[0] == (0x7F0000000100).to_bytes(8, "little")
    assert values[16:] == ((0x7F0000000204).to_bytes(8, "little"), (0x2000).to_bytes(4, "little"))
    assert values[11] == (2**63).to_bytes(8, "little")  # .b64 k
    assert values[8:11] == (b"\x00\x3e", (0x3E800000).to_bytes(4, "little"),
                            (0xC004000000000000).to_bytes(8, "little"))  # f16, f32, f64 bits


def test_extension_is_built_where_a_c_compiler_is():
    """An install with a C compiler (CI's) builds specdsl._runtime._speedups: a silent fallback to
    the Python path would leave the compiled one untested."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the Python path is expected")
    import specdsl._runtime._speedups

    assert specdsl._runtime._speedups.__file__.endswith((".so", ".pyd"))


@pytest.mark.parametrize("value, pure", [("", False), ("0", False), ("1", True),
                                         ("yes", True), ("OFF", False)])
def test_pure_python_switch(monkeypatch, value, pure):
    """SPECDSL_PURE_PYTHON on turns the compiled path off; unset or off leave it on where built."""
    monkeypatch.setenv(PURE_PYTHON_ENV, value)
    assert (speedups() is None) == (pure or not _built())


def test_pure_python_switch_refuses_other_values(monkeypatch):
    """A value that is no switch word is a ConfigError naming the variable and value."""
    from specdsl.errors import ConfigError

    monkeypatch.setenv(PURE_PYTHON_ENV, "maybe")
    with pytest.raises(ConfigError, match=r"SPECDSL_PURE_PYTHON must be 1/0, true/false, "
                                          r"yes/no or on/off \(any case\), or unset "
                                          r"\(got 'maybe'\)"):
        speedups()


def _built() -> bool:
    import importlib.util

    return importlib.util.find_spec("specdsl._runtime._speedups") is not None


@needs_extension
def test_compiled_checks_find_torch_imported_after_the_kernel_loaded(monkeypatch):
    """A kernel loaded before torch was imported still reads tensors inline once it is."""
    import types

    from specdsl._runtime import launching

    monkeypatch.setattr(launching, "tensor_type", lambda: None)
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # as if not imported yet
    driver = FakeDriver()
    fire = compiled_launcher(_packer(), driver)
    args = (*VALID[:-2], StandInTensor(0x7F0000000400), VALID[-1])
    geometry = (1, 1, 1, 32, 1, 1, 0)
    with pytest.raises(LaunchError, match=r"parameter 'q' .* expects a device array"):
        fire(args, (5, "stream"), geometry)  # no reader knows it
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Tensor=StandInTensor))
    fire(args, (5, "stream"), geometry)
    assert driver.driver_calls[0][9][-2] == (0x7F0000000400).to_bytes(8, "little")


def test_malformed_launch_state_raises_instead_of_crashing():
    """Short stream or geometry tuples (internal state gone wrong) raise IndexError on both
    paths, before the driver is called; nothing reads past a tuple's end."""
    calls: list = []
    driver = FakeDriver()
    fires = [core_launcher(_packer(), lambda *a: calls.append(a), "kernel")]
    if compiled():
        fires.append(compiled_launcher(_packer(), driver))
    for fire in fires:
        with pytest.raises(IndexError):
            fire(VALID, (5, "stream"), ())
        with pytest.raises(IndexError):
            fire(VALID, (), (1, 1, 1, 32, 1, 1, 0, "config"))
    assert calls == [] and driver.driver_calls == []


def test_a_stale_build_is_not_used(monkeypatch):
    """An extension built from an older .pyx (its INTERFACE differs) is left unused, with a
    warning saying how to rebuild it."""
    import types

    from specdsl._runtime import speedups as module

    stale = types.ModuleType("specdsl._runtime._speedups")
    stale.__file__, stale.INTERFACE = "/somewhere/_speedups.so", 1
    monkeypatch.setitem(sys.modules, "specdsl._runtime._speedups", stale)
    monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    module.built.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"_speedups.so is out of date \(rebuild it: "
                                                r"pip install -e \.\)"):
            assert speedups() is None
    finally:
        module.built.cache_clear()


def _declared_packer() -> ArgumentPacker:
    """RMSNorm's kernel (bf16, hidden 64) with its array declarations."""
    from specdsl import render
    from specdsl._runtime.arraychecks import plan_arrays
    from specdsl.kernels import RMSNorm

    spec = RMSNorm(hidden=64, dtype="bf16")
    signature = parse_entry(render(spec), "rmsnorm")
    return ArgumentPacker(signature, device_id=0, arrays=plan_arrays(spec, signature))


ELEMENTS = st.sampled_from(["bfloat16", "float32", "uint16", "int16", "float16"])
ARRAYS = st.one_of(
    st.builds(lambda e, n, a: StandInTensor(a, dtype=_dtype(e), numel=n), ELEMENTS,
              st.integers(0, 70 * 64), st.sampled_from([0x7F0000000000, 0x7F0000000008])),
    st.builds(lambda n: StandInBuffer(0x7F0000010000, size=n), st.integers(0, 2 * 70 * 64)),
    st.sampled_from([0x7F0000020000, np.uint64(0x7F0000020000)]),
)


def _dtype(name: str):
    from standins import DType

    found = _DTYPES.get(name)
    if found is None:
        found = _DTYPES[name] = DType(name)
    return found


_DTYPES: dict = {}


@needs_extension
@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ARRAYS, ARRAYS, ARRAYS, st.one_of(st.integers(-1, 70), st.sampled_from([2**32, 1.0])))
def test_compiled_array_checks_match_the_python_ones(stand_in_arrays, x, weight, y, rows):
    """Declared arrays of every element type and size (tensors, Buffers, pointer ints) with
    any row count: the compiled DriverLaunch accepts, packs and refuses exactly as the
    generated Python launchers, with the same messages."""
    assert _same(_outcomes((x, weight, y, rows), _declared_packer()))


@needs_extension
def test_compiled_array_checks_refuse_what_python_refuses(stand_in_arrays):
    """The issue's kinds on both paths: a float32 x for bf16, and a y of 4 rows for 64."""
    packer = _declared_packer()
    x = StandInTensor(0x7F0000000000, dtype=_dtype("bfloat16"), numel=64 * 64)
    wrong = StandInTensor(0x7F0000000000, dtype=_dtype("float32"), numel=64 * 64)
    short = StandInTensor(0x7F0000004000, dtype=_dtype("bfloat16"), numel=4 * 64)
    weight = StandInTensor(0x7F0000008000, dtype=_dtype("bfloat16"), numel=64)
    for args, message in (((wrong, weight, x, 64), "expects bf16 elements"),
                          ((x, weight, short, 64), "expects at least 4096 elements")):
        outcomes = _outcomes(args, packer)
        assert _same(outcomes) and outcomes[0][0] == "refused" and message in outcomes[0][1]
    assert _outcomes((x, weight, short, 4), packer)[0][0] == "packed"
