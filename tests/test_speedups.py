"""The compiled launch path (specdsl._runtime._speedups) against the plain-Python one it twins.

Both must hand cuda.core the same values and refuse the same arguments with the same
message; hypothesis draws the arguments, edges included, for every PTX scalar type.
"""

from __future__ import annotations

import enum
import shutil
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdsl import LaunchError
from specdsl._runtime.launchers import core_launcher
from specdsl._runtime.params import ArgumentPacker
from specdsl._runtime.signature import parse_entry
from specdsl._runtime.speedups import PURE_PYTHON_ENV, compiled, speedups

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


class StandInBuffer:
    """Stands in for cuda.core's Buffer (both paths test its exact type); a closed one's
    properties raise, as cuda.core's do."""

    def __init__(self, handle: int, device_id: int = 0, closed: bool = False) -> None:
        self._handle, self._device_id, self.closed = handle, device_id, closed
        self.is_device_accessible = True

    def _open(self, value: int) -> int:
        if self.closed:
            raise RuntimeError("Buffer has been closed")
        return value

    handle = property(lambda self: self._open(self._handle))
    device_id = property(lambda self: self._open(self._device_id))

    def __repr__(self) -> str:
        return f"StandInBuffer({self._handle:#x}, device {self._device_id}, closed {self.closed})"


class StandInTensor:
    """Stands in for a torch tensor: ``device`` -1 is the CPU; ``address`` None makes
    data_ptr() raise (a tensor without storage)."""

    def __init__(self, address: int | None, device: int = 0, contiguous: bool = True) -> None:
        self.address, self.index, self.contiguous = address, device, contiguous
        self.is_cuda = device >= 0
        self.device = f"cuda:{device}" if device >= 0 else "cpu"

    def get_device(self) -> int:
        return self.index

    def is_contiguous(self) -> bool:
        return self.contiguous

    def data_ptr(self) -> int:
        if self.address is None:
            raise RuntimeError("The tensor has a non-zero number of elements, but its data "
                               "is not allocated yet")
        return self.address

    def __repr__(self) -> str:
        return f"StandInTensor({self.address}, {self.device}, contiguous {self.contiguous})"


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


def _packer() -> ArgumentPacker:
    ptx = (".version 8.0\n.target sm_90\n.address_size 64\n"
           f".visible .entry k({PARAMS})\n{{ ret; }}\n")
    return ArgumentPacker(parse_entry(ptx, "k"), device_id=0)


def _fire(pure_python: bool, launch) -> object:
    """The cuda.core launcher of the test kernel: generated Python, or compiled."""
    return core_launcher(_packer(), launch, "kernel", compiled=not pure_python)


def _outcomes(args: tuple) -> list[tuple]:
    """What the generated Python launcher, then the compiled one, did with ``args``: the
    values cuda.core got (with their types), or the LaunchError's message."""
    outcomes = []
    for pure in (True, False):
        seen: list = []
        fire = _fire(pure, lambda *a, seen=seen: seen.append(a))
        try:
            err = fire(args, (5, "stream"), (1, 1, 1, 32, 1, 1, 0, "config"))
        except LaunchError as exc:
            outcomes.append(("refused", str(exc), seen))
        else:
            outcomes.append(("launched", err, [(type(v), v) for v in seen[0]]))
    return outcomes


@pytest.fixture
def stand_in_arrays(monkeypatch):
    """StandInBuffer and StandInTensor take the places of cuda.core's Buffer and torch.Tensor
    (inline paths and converters alike)."""
    import cuda.core

    from specdsl._runtime import launchers, readers

    monkeypatch.setattr(cuda.core, "Buffer", StandInBuffer)
    monkeypatch.setattr(launchers, "tensor_type", lambda: StandInTensor)
    monkeypatch.setitem(readers.READERS, StandInBuffer, readers.read_buffer)
    monkeypatch.setitem(readers.READERS, StandInTensor, readers.read_torch)


@needs_extension
def test_compiled_checks_match_the_python_ones_at_every_edge(stand_in_arrays):
    """Every edge value in every parameter's place: the same values or the same error."""
    edges = [*EDGES, *FLOAT_EDGES, *OTHERS,
             *(StandInBuffer(h, d, c) for h in BUFFER_HANDLES for d in (0, 1)
               for c in (False, True)),
             *(StandInTensor(a, d, c) for a in TENSOR_ADDRESSES for d in (-1, 0, 1)
               for c in (False, True))]
    for index in range(len(VALID)):
        for value in edges:
            args = (*VALID[:index], value, *VALID[index + 1:])
            python, native = _outcomes(args)
            assert native == python, (index, value)


@needs_extension
@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.integers(0, len(VALID) - 1), VALUES, max_size=3),
       st.sampled_from([0, 0, 0, -1, 1]))
def test_compiled_checks_match_the_python_ones(stand_in_arrays, changes, extra):
    """Arguments of every kind (valid ones with up to three replaced; one too few or one
    too many): the compiled CoreLaunch gives cuda.core the same values as the generated
    Python launcher, of the same types, or raises the same LaunchError."""
    args = [*VALID]
    for index, value in changes.items():
        args[index] = value
    args = args[:extra] if extra < 0 else args + [0] * extra
    python, native = _outcomes(tuple(args))
    assert native == python


@needs_extension
def test_compiled_checks_take_valid_values_inline(stand_in_arrays):
    """The valid arguments launch on both paths with the exact values cuda.core packs:
    64-bit values at or above 2**63 wrapped, floats as their bits, a Buffer and a tensor as
    their addresses."""
    args = (StandInBuffer(0x7F0000000100), *VALID[1:-2], StandInTensor(0x7F0000000204),
            StandInTensor(0x2000))
    python, native = _outcomes(args)
    assert native == python
    values = [value for _, value in native[2][3:]]
    assert values[0] == 0x7F0000000100 and values[16:] == [0x7F0000000204, 0x2000]
    assert values[11] == 2**63 - 2**64  # .b64 k wrapped
    assert values[8:11] == [0x3E00, 0x3E800000, -0x3FFC000000000000]  # f16, f32, f64 bits
    assert values[1:8] == list(VALID[1:8])


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

    from specdsl._runtime import launchers

    monkeypatch.setattr(launchers, "tensor_type", lambda: None)
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # as if not imported yet
    seen: list = []
    fire = _fire(False, lambda *a: seen.append(a))
    args = (*VALID[:-2], StandInTensor(0x7F0000000400), VALID[-1])
    with pytest.raises(LaunchError, match=r"parameter 'q' .* expects a device array"):
        fire(args, (5, "stream"), (1, 1, 1, 32, 1, 1, 0, "config"))  # no reader knows it
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Tensor=StandInTensor))
    fire(args, (5, "stream"), (1, 1, 1, 32, 1, 1, 0, "config"))
    assert seen[0][-2] == 0x7F0000000400


def test_malformed_launch_state_raises_instead_of_crashing():
    """Short stream or geometry tuples (internal state gone wrong) raise IndexError on both
    paths, before cuda.core is called; nothing reads past a tuple's end."""
    calls: list = []
    for pure in (True, False):
        fire = _fire(pure, lambda *a: calls.append(a))
        with pytest.raises(IndexError):
            fire(VALID, (5, "stream"), ())
        with pytest.raises(IndexError):
            fire(VALID, (), (1, 1, 1, 32, 1, 1, 0, "config"))
    assert calls == []


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
