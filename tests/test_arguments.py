"""Argument checking and packing against parsed signatures: no GPU needed."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from specdsl import LaunchError, render
from specdsl._runtime import readers
from specdsl._runtime.geometry import DeviceLimits, check_geometry
from specdsl._runtime.launchers import bound_core_launcher, core_launcher, writer
from specdsl._runtime.params import ArgumentPacker
from specdsl._runtime.signature import parse_entry
from specdsl._runtime.streams import Streams, stream_handle
from specdsl.kernels import VectorAdd


def _packer(params: str, device_id: int | None = 0) -> ArgumentPacker:
    ptx = (".version 8.0\n.target sm_90\n.address_size 64\n"
           f".visible .entry k({params})\n{{ ret; }}\n")
    return ArgumentPacker(parse_entry(ptx, "k"), device_id=device_id)


@pytest.fixture(scope="module")
def vector_add() -> ArgumentPacker:
    return ArgumentPacker(parse_entry(render(VectorAdd()), "vector_add"), device_id=0)


def test_vector_add_packs_four_u64(vector_add):
    """Pointers and the count pack as four little-endian u64 values."""
    assert vector_add.pack((0x1000, 0x2000, 0x3000, 1024)) == struct.pack("<4Q", 0x1000, 0x2000,
                                                                          0x3000, 1024)


def test_argument_count(vector_add):
    """Three arguments for four parameters names all four."""
    with pytest.raises(LaunchError,
                       match=r"vector_add takes 4 argument\(s\) \(a, b, out, n\), got 3"):
        vector_add.values((0x1000, 0x2000, 0x3000))


def test_negative_count_refused(vector_add):
    """-1 for the .u64 count is refused, naming n."""
    with pytest.raises(LaunchError, match=r"parameter 'n' \(\.u64 n\) expects an int in "
                                          r"\[0, 2\*\*64\) \(got -1"):
        vector_add.values((0x1000, 0x2000, 0x3000, -1))


def test_float_for_int_refused(vector_add):
    """1024.0 for the count is refused (a float for an int parameter)."""
    with pytest.raises(LaunchError, match=r"'n'.*got 1024\.0 of type float"):
        vector_add.values((0x1000, 0x2000, 0x3000, 1024.0))


def test_misaligned_pointer_refused(vector_add):
    """A pointer 8 bytes past a 16-byte boundary is refused, naming .align 16."""
    with pytest.raises(LaunchError, match=r"'b'.*aligned to 16 bytes \(\.align 16\); 0x2008"):
        vector_add.values((0x1000, 0x2008, 0x3000, 4))


def test_pointer_without_align_must_be_four_byte_aligned(launch_path):
    """A '.ptr' declared without '.align' points to 4-byte-aligned memory (PTX ISA 5.1.6.3):
    an address 2 bytes past a boundary is refused, one 4 bytes past is taken, on both the
    compiled and the plain-Python launch path."""
    packer = _packer(".param .u64 .ptr .global p")
    seen = []
    fire = core_launcher(packer, lambda s, c, k, *values: seen.append(values), "k")
    assert fire((0x1004,), (0, None), (1, 1, 1, 32, 1, 1, 0, None)) is None
    assert seen == [(0x1004,)]
    with pytest.raises(LaunchError, match=r"aligned to 4 bytes \(a \.ptr without \.align: PTX "
                                          r"ISA 5\.1\.6\.3\); 0x1002 is 2 bytes past"):
        fire((0x1002,), (0, None), (1, 1, 1, 32, 1, 1, 0, None))


def test_host_array_for_pointer_refused(vector_add):
    """A NumPy (host) array for a pointer parameter is refused as host memory."""
    with pytest.raises(LaunchError, match=r"'a'.*host memory"):
        vector_add.values((np.zeros(4, np.float32), 0x2000, 0x3000, 4))


def test_array_for_scalar_refused(vector_add):
    """An array for the count is refused: scalars take scalars."""
    with pytest.raises(LaunchError, match=r"'n'.*expects an int"):
        vector_add.values((0x1000, 0x2000, 0x3000, np.array([4], np.uint64)))


def test_string_for_pointer_refused(vector_add):
    """A str for a pointer says what a pointer parameter takes."""
    with pytest.raises(LaunchError, match=r"'out'.*expects a device array \(DLPack or "
                                          r"__cuda_array_interface__\), a cuda.core Buffer"):
        vector_add.values((0x1000, 0x2000, "0x3000", 4))


def test_numpy_integer_pointer_accepted(vector_add):
    """A NumPy integer holding an address is a pointer like an int."""
    assert vector_add.values((np.uint64(0x1000), 0x2000, 0x3000, np.uint64(7)))[0] == 0x1000


def test_u32_range():
    """.u32 takes [0, 2**32): 2**32 and -1 are refused, 2**32-1 packs."""
    packer = _packer(".param .u32 n")
    assert packer.values((2**32 - 1,)) == [2**32 - 1]
    for bad in (2**32, -1):
        with pytest.raises(LaunchError, match=r"\.u32 n\) expects an int in \[0, 2\*\*32\)"):
            packer.values((bad,))


def test_s32_range():
    """.s32 takes [-2**31, 2**31)."""
    packer = _packer(".param .s32 n")
    assert packer.pack((-(2**31),)) == struct.pack("<i", -(2**31))
    with pytest.raises(LaunchError, match=r"\[-2\*\*31, 2\*\*31\)"):
        packer.values((2**31,))


def test_b32_takes_both_signs_as_bits():
    """.b32 is untyped: -1 packs as 0xFFFFFFFF."""
    assert _packer(".param .b32 x").pack((-1,)) == b"\xff\xff\xff\xff"


def test_bool_only_for_8_bit():
    """A bool is refused for .u32 and taken by .u8."""
    with pytest.raises(LaunchError, match="a bool is only taken by 8-bit parameters"):
        _packer(".param .u32 flag").values((True,))
    assert _packer(".param .u8 flag").values((True,)) == [1]


def test_numpy_scalar_of_wrong_kind_refused():
    """np.float32 for a .u32 is refused; np.uint32 in range is taken."""
    packer = _packer(".param .u32 n")
    assert packer.values((np.uint32(7),)) == [7]
    with pytest.raises(LaunchError, match=r"np\.float32|numpy\.float32"):
        packer.values((np.float32(7),))


def test_f32_packs_nearest_and_refuses_overflow():
    """0.1 packs as f32's nearest; 1e39 (beyond f32's range) is refused."""
    packer = _packer(".param .f32 eps")
    assert packer.pack((0.1,)) == struct.pack("<f", np.float32(0.1))
    with pytest.raises(LaunchError, match=r"\.f32 eps\) expects a float"):
        packer.values((1e39,))


def test_int_for_float_only_if_exact():
    """An int within 2**24 is taken by .f32; 2**24 + 1 (not representable) is refused."""
    packer = _packer(".param .f32 x")
    assert packer.values((3,)) == [3.0]
    with pytest.raises(LaunchError, match=r"an int it holds exactly \(\|n\| <= 2\*\*24\)"):
        packer.values((2**24 + 1,))


def test_bool_for_float_refused():
    """True for an .f32 is refused."""
    with pytest.raises(LaunchError, match=r"\.f32 x\) expects a float"):
        _packer(".param .f32 x").values((True,))


def test_layout_pads_to_natural_alignment():
    """A .u32 then a .u64: 4 bytes of padding before the u64 (offsets 0 and 8)."""
    packer = _packer(".param .u32 n, .param .u64 .ptr .global .align 4 p")
    assert packer.offsets == (0, 8) and packer.size == 16
    assert packer.pack((5, 0x40)) == struct.pack("<I4xQ", 5, 0x40)


def test_aggregate_takes_exact_bytes():
    """A .b8 s[8] takes 8 bytes and refuses 7."""
    packer = _packer(".param .align 8 .b8 s[8]")
    assert packer.pack((bytes(range(8)),)) == bytes(range(8))
    with pytest.raises(LaunchError, match="exactly 8 bytes"):
        packer.values((bytes(7),))


def test_null_pointer_is_allowed():
    """0 (NULL) passes a pointer parameter: optional pointers are a kernel's business."""
    assert _packer(".param .u64 .ptr .global .align 16 p").values((0,)) == [0]


class _FakeStream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class _TorchLikeStream:
    cuda_stream = 0x5678


def test_stream_protocols():
    """__cuda_stream__ and a torch-style cuda_stream attribute both give the handle."""
    assert stream_handle(_FakeStream(0x1234)) == 0x1234
    assert stream_handle(_TorchLikeStream()) == 0x5678


def test_raw_int_stream_refused():
    """A bare int is not a stream."""
    with pytest.raises(LaunchError, match=r"stream must be a cuda\.core Stream"):
        stream_handle(7)


LIMITS = DeviceLimits()


def test_geometry_normalizes_ints():
    """grid=4, block=(128,) becomes (4,1,1) and (128,1,1)."""
    geometry = check_geometry(4, (128,), 0, LIMITS)
    assert (geometry.grid, geometry.block, geometry.shared_mem) == ((4, 1, 1), (128, 1, 1), 0)


@pytest.mark.parametrize("grid, message", [
    (0, r"grid\.x must be at least 1 \(got 0\)"),
    ((2, -1), r"grid\.y must be at least 1 \(got -1\)"),
    (2.0, r"grid must be a positive int or a tuple"),
    ((2, 1.0), r"grid\.y must be an int"),
    ((True,), r"grid\.x must be an int"),
    ((1, 1, 1, 1), r"tuple of 1 to 3"),
    ((1, 65536), r"grid\.y = 65536 exceeds the device's 65535"),
])
def test_bad_grids(grid, message):
    """Zero, negative, float, bool, 4-D and too-large grids are refused by name."""
    with pytest.raises(LaunchError, match=message):
        check_geometry(grid, 128, 0, LIMITS)


def test_block_over_device_threads():
    """(32, 64) = 2048 threads exceeds the device's 1024."""
    with pytest.raises(LaunchError, match="2048 threads exceeds the device's limit of 1024"):
        check_geometry(1, (32, 64), 0, LIMITS)


def test_block_z_limit():
    """block.z = 128 exceeds the device's 64."""
    with pytest.raises(LaunchError, match=r"block\.z = 128 exceeds the device's 64"):
        check_geometry(1, (1, 1, 128), 0, LIMITS)


def test_block_over_kernel_threads():
    """A kernel limited to 512 threads (register use) refuses a 1024-thread block."""
    with pytest.raises(LaunchError, match=r"kernel's \(register use\) limit of 512"):
        check_geometry(1, 1024, 0, LIMITS, kernel_threads=512)


def test_shared_memory_opt_in_limit():
    """Dynamic plus static shared memory above the opt-in limit is refused; at it, taken."""
    limit = LIMITS.shared_per_block_optin
    geometry = check_geometry(1, 32, limit - 1024, LIMITS, static_shared=1024)
    assert geometry.shared_mem == limit - 1024
    with pytest.raises(LaunchError, match=f"exceed the device's opt-in limit of {limit} bytes"):
        check_geometry(1, 32, limit - 1023, LIMITS, static_shared=1024)


def test_negative_shared_memory_refused():
    """shared_mem=-1 is refused."""
    with pytest.raises(LaunchError, match=r"shared_mem must be >= 0 bytes \(got -1\)"):
        check_geometry(1, 32, -1, LIMITS)


MIXED = (".param .u32 n, .param .s32 k, .param .f32 eps, .param .u64 .ptr .global .align 16 p, "
         ".param .align 8 .b8 s[8]")


@pytest.mark.parametrize("args", [
    (7, -3, 0.5, 0x1000, bytes(8)),
    (np.uint32(7), np.int32(-3), np.float32(0.5), np.uint64(0x1000), np.arange(2, dtype=np.int32)),
    (2**32 - 1, -(2**31), 3, 0, bytes(range(8))),
])
def test_writer_packs_like_pack(args):
    """The generated writer fills the buffer exactly as pack() does."""
    packer = _packer(MIXED)
    buffer = bytearray(packer.size)
    writer(packer)(args, 0, buffer)
    assert bytes(buffer) == packer.pack(args)


@pytest.mark.parametrize("args", [
    (-1, 0, 0.5, 0x1000, bytes(8)),
    (1, 2**31, 0.5, 0x1000, bytes(8)),
    (1, 0, 1e39, 0x1000, bytes(8)),
    (1, 0, 0.5, 0x1008, bytes(8)),
    (1, 0, 0.5, 0x1000, bytes(7)),
    (1, 0, 0.5, 0x1000),
])
def test_writer_refuses_like_values(args):
    """The writer raises the same LaunchError as values() for each bad argument."""
    packer = _packer(MIXED)
    with pytest.raises(LaunchError) as expected:
        packer.values(args)
    with pytest.raises(LaunchError) as got:
        writer(packer)(args, 0, bytearray(packer.size))
    assert str(got.value) == str(expected.value)


ALIGNED_SCALAR = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u32 a, .param .align 8 .u32 b, .param .u64 .ptr .global .align 4 out)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u32 %r1, [a];
    ld.param.u32 %r2, [b];
    ld.param.u64 %rd1, [out];
    add.u32 %r1, %r1, %r2;
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


def test_align_on_a_value_parameter_places_its_slot():
    """.align 8 on a .u32 parameter moves its slot to offset 8 (as ptxas lays it out);
    .align on a .ptr parameter describes the pointee and leaves the slot alone."""
    from specdsl._runtime.compile import compile_ptx

    compile_ptx(ALIGNED_SCALAR, "sm_90")  # nvJitLink accepts the declaration
    packer = ArgumentPacker(parse_entry(ALIGNED_SCALAR, "k"))
    assert packer.offsets == (0, 8, 16) and packer.size == 24
    assert packer.pack((1, 2, 16)) == struct.pack("<I4xI4xQ", 1, 2, 16)


def test_geometry_refuses_a_partial_cluster():
    """A kernel with a compile-time cluster needs a grid of whole clusters."""
    assert check_geometry(16, 256, 0, LIMITS, cluster=(8, 1, 1)).grid == (16, 1, 1)
    with pytest.raises(LaunchError, match=r"softmax: grid \(12, 1, 1\) is not a whole number "
                                          r"of the kernel's clusters of \(8, 1, 1\) CTAs"):
        check_geometry(12, 256, 0, LIMITS, cluster=(8, 1, 1), entry="softmax")
    with pytest.raises(LaunchError, match=r"softmax: cluster.x must be at least 1 \(got 0\)"):
        check_geometry(16, 256, 0, LIMITS, cluster=(0, 1, 1), entry="softmax")
    assert check_geometry(16, 256, 0, LIMITS, cluster=8).grid == (16, 1, 1)


def test_stream_device_read_from_common_stream_types():
    """torch's device_index, CuPy's device_id and cuda.core's device.device_id name the device;
    other objects name none."""
    import types

    from specdsl._runtime.streams import stream_device

    assert stream_device(types.SimpleNamespace(device_index=1)) == 1
    assert stream_device(types.SimpleNamespace(device_id=2)) == 2
    assert stream_device(types.SimpleNamespace(device=types.SimpleNamespace(device_id=3))) == 3
    assert stream_device(types.SimpleNamespace(device_index=None, device_id=True)) is None
    assert stream_device(object()) is None


CORE_PARAMS = (".param .u64 .ptr .global .align 16 p, .param .u8 a, .param .s16 b, "
               ".param .u32 c, .param .s32 d, .param .u64 e, .param .s64 f, .param .b32 g, "
               ".param .f16 h, .param .f32 i, .param .f64 j, .param .b64 k, .param .s8 l, "
               ".param .b8 m, .param .u16 n, .param .b16 o")
CORE_ARGS = [
    (0x7F0000000010, 255, -2, 2**32 - 1, -(2**31), 2**64 - 1, -(2**63), 0xDEADBEEF, 1.5, -0.1,
     3.141592653589793, 2**63, -128, 255, 65535, -1),
    (0x10, True, 32767, 7, 5, 2**63 - 1, 2**63 - 1, -1, -65504.0, float("inf"), -0.0, 0, 127,
     -128, 0, 0xFFFF),
    (0x20, 0, 0, 0, 0, 0, 0, 0, 0.0, 3.4028234663852886e38, float("nan"), 1, 0, 0, 1, -32768),
    (2**63 + 16, 1, -1, 1, -1, 2**63, 1, 2**31, 6.1e-05, 1e-45, 1e308, 2**64 - 1, -1, 1, 2, 3),
]


def _numpy_args(args):
    """The same values as NumPy scalars of each parameter's type (pointers stay ints)."""
    import numpy as np

    types = [None, np.uint8, np.int16, np.uint32, np.int32, np.uint64, np.int64, None,
             np.float16, np.float32, np.float64, None, np.int8, None, np.uint16, None]
    return tuple(v if t is None else t(v) for v, t in zip(args, types, strict=True))


def _bytes_cuda_core_packs(values, packer):
    """The bytes each parameter's driver copy would read from what cuda.core packs."""
    import ctypes

    from cuda.core._kernel_arg_handler import ParamHolder  # fails loudly if it moves

    packed = ParamHolder(list(values))
    pointers = (ctypes.c_void_p * len(values)).from_address(packed.ptr)
    return [ctypes.string_at(pointers[i], param.size)
            for i, param in enumerate(packer.signature.params)]


@pytest.mark.parametrize("numpy_values", [False, True])
@pytest.mark.parametrize("args", CORE_ARGS)
def test_core_launcher_hands_cuda_core_the_exact_parameter_bytes(args, numpy_values,
                                                                  launch_path):
    """What cuda.core packs for the values core_launcher (launch) and bound_core_launcher
    (bind) hand it holds, in each parameter's first bytes, exactly what the driver path
    packs (pack()): ints narrower than 64 bits as their low bytes, 64-bit values at or
    above 2**63 wrapped, floats as their bits; from Python and from NumPy values."""
    packer = _packer(CORE_PARAMS)
    if numpy_values:
        args = _numpy_args(args)
    seen = []

    def recorder(who):
        def core_launch(stream, config, kernel, *values):
            seen.append((who, stream, config, kernel, values))
        return core_launch

    failures = []
    fired = core_launcher(packer, recorder("launch"), "k")(
        args, (0, "stream"), (1, 1, 1, 32, 1, 1, 0, "config"))
    bound_core_launcher(packer, recorder("bind"), "k", Streams(0, "stream"), "config",
                               lambda exc, given: failures.append(exc))(*args)
    assert fired is None and failures == []  # cuda.core's stand-in took every value
    assert [(who, stream, config, kernel) for who, stream, config, kernel, _ in seen] == [
        ("launch", "stream", "config", "k"), ("bind", "stream", "config", "k")]
    expected = packer.pack(args)
    for *_, values in seen:
        got = _bytes_cuda_core_packs(values, packer)
        for param, offset, field in zip(packer.signature.params, packer.offsets, got,
                                        strict=True):
            assert field == expected[offset:offset + param.size], (param.name, field)


class _StandInBuffer:
    """Stands in for cuda.core's Buffer (the generated checks test its exact type)."""

    def __init__(self, handle, device_id=0):
        self.handle, self.device_id, self.is_device_accessible = handle, device_id, True


def test_core_launcher_reads_buffers_inline(monkeypatch, launch_path):
    """A Buffer of this device is read inline; a misaligned or foreign one is refused."""
    import cuda.core

    monkeypatch.setattr(cuda.core, "Buffer", _StandInBuffer)
    monkeypatch.setitem(readers.READERS,
                        _StandInBuffer, lambda value, stream: (value.handle, value.device_id, ""))
    packer = _packer(".param .u64 .ptr .global .align 16 p")
    seen = []
    fire = core_launcher(packer, lambda s, c, k, *values: seen.append(values), "k")
    fire((_StandInBuffer(0x7F0000000100),), (0, None), (1, 1, 1, 32, 1, 1, 0, None))
    fire((_StandInBuffer(2**63 + 256),), (0, None), (1, 1, 1, 32, 1, 1, 0, None))
    assert seen == [(0x7F0000000100,), (2**63 + 256 - 2**64,)]
    with pytest.raises(LaunchError, match=r"aligned to 16"):
        fire((_StandInBuffer(0x7F0000000101),), (0, None), (1, 1, 1, 32, 1, 1, 0, None))
    with pytest.raises(LaunchError, match=r"memory on device 0, not device 1"):
        fire((_StandInBuffer(0x7F0000000100, 1),), (0, None), (1, 1, 1, 32, 1, 1, 0, None))


def test_numpy_bool_is_taken_by_an_8_bit_parameter():
    """NumPy 2's bool scalar (type name 'bool') is bool-like, as NumPy 1's 'bool_' was."""
    import numpy as np

    assert _packer(".param .u8 flag").pack((np.True_,)) == b"\x01"
    with pytest.raises(LaunchError, match=r"a bool is only taken by 8-bit parameters"):
        _packer(".param .u32 n").pack((np.False_,))


def test_an_arrays_own_error_is_a_launch_error():
    """An array whose accessors fail is refused naming the parameter, not crashed on."""
    class Broken:
        __cuda_array_interface__ = property(lambda self: 1 / 0)

        def __dlpack__(self, stream=None):
            raise RuntimeError("no export")

    with pytest.raises(LaunchError, match=r"parameter 'p' .* \(its array interface failed"):
        _packer(".param .u64 .ptr .global .align 16 p").pack((Broken(),))


def test_closed_stream_refused():
    """A closed stream (cuda.core reports handle 0 for one) is refused, not run on stream 0."""
    class Closed:
        is_closed = True

        def __cuda_stream__(self):
            return (0, 0)

    with pytest.raises(LaunchError, match=r"is closed"):
        stream_handle(Closed())


def test_core_launcher_checks_before_launching(launch_path):
    """A bad argument is refused before cuda.core is called, as on the driver path."""
    calls = []
    fire = core_launcher(_packer(".param .u32 n"), lambda *a: calls.append(a), "k")
    with pytest.raises(LaunchError, match=r"k: parameter 'n' \(\.u32 n\) expects an int in"):
        fire((-1,), (0, None), (1, 1, 1, 32, 1, 1, 0, None))
    assert calls == [] and not _packer(".param .b8 blob[16]").through_core


def test_a_reader_that_raises_is_a_launch_error():
    """A tensor whose data_ptr() raises (e.g. a tensor without storage) is refused naming
    the parameter, before anything is launched."""
    class TensorLike:
        is_cuda = True

        def is_contiguous(self):
            return True

        def get_device(self):
            return 0

        def data_ptr(self):
            raise RuntimeError("Cannot access data pointer of Tensor that doesn't have storage")

    TensorLike.__module__ = "torch"
    with pytest.raises(LaunchError, match=r"parameter 'p' .* \(reading its address failed: "
                                          r"Cannot access data pointer"):
        _packer(".param .u64 .ptr .global .align 16 p").pack((TensorLike(),))


def test_messages_keep_the_callers_value_and_type():
    """A NumPy integer out of range is named as given; a float out of range, a bool for a
    float and a one-byte misalignment each say exactly what is wrong."""
    packer = ArgumentPacker(parse_entry(render(VectorAdd()), "vector_add"), device_id=0)
    with pytest.raises(LaunchError, match=r"'n' .* expects an int in \[0, 2\*\*64\) "
                                          r"\(got np\.int64\(-5\) of type numpy\.int64\)"):
        packer.values((0x1000, 0x2000, 0x3000, np.int64(-5)))
    with pytest.raises(LaunchError, match=r"0x1001 is 1 byte past a boundary"):
        packer.values((0x1001, 0x2000, 0x3000, 4))
    scalar = _packer(".param .f32 x")
    with pytest.raises(LaunchError, match=r"'x' \(\.f32 x\) expects a float in the \.f32 range "
                                          r"\(\|x\| <= 3\.40282e\+38; inf and nan pass\) "
                                          r"\(got 1e\+39 of type float\)"):
        scalar.values((1e39,))
    with pytest.raises(LaunchError, match=r"\(a bool is not taken by float parameters\)"):
        scalar.values((True,))


class _StandInView:
    """Stands in for cuda.core's StridedMemoryView, reading __cuda_array_interface__ as a
    plain dict: without a driver the real one cannot ask which device owns the pointer."""

    def __init__(self, interface):
        self.ptr = interface["data"][0]
        self.shape = interface["shape"]
        self.strides = interface["strides"]
        self.size = 1
        for extent in self.shape:
            self.size *= extent
        self.is_device_accessible, self.device_id = True, 0

    @classmethod
    def from_any_interface(cls, value, stream_ptr):
        return cls(value.__cuda_array_interface__)


@pytest.fixture
def stand_in_view(monkeypatch):
    """The pointer readers see _StandInView in place of cuda.core's StridedMemoryView."""
    import cuda.core.utils

    monkeypatch.setattr(cuda.core.utils, "StridedMemoryView", _StandInView)


def _interface(ptr, shape=(4,), strides=None):
    return {"shape": shape, "typestr": "<f4", "version": 3, "data": (ptr, False),
            "strides": strides}


def test_an_array_interface_set_on_the_object_is_read(stand_in_view):
    """__cuda_array_interface__ set in __init__ (not on the class) is read like any other:
    its misaligned address is refused as such, not as 'no array'."""
    class Wrapped:
        def __init__(self, ptr):
            self.__cuda_array_interface__ = _interface(ptr)

    packer = ArgumentPacker(parse_entry(render(VectorAdd()), "vector_add"), device_id=0)
    assert packer.values((Wrapped(0x1010), 0x2000, 0x3000, 4))[0] == 0x1010
    with pytest.raises(LaunchError, match=r"parameter 'a' .* aligned to 16 bytes \(\.align 16\); "
                                          r"0x1008 is 8 bytes past a boundary"):
        packer.values((Wrapped(0x1008), 0x2000, 0x3000, 4))


def test_an_array_interface_on_the_class_is_checked(stand_in_view, launch_path):
    """An array type exposing __cuda_array_interface__ is read through the view on both
    launch paths: its address is taken, misalignment and non-contiguous strides refused."""
    class Array:
        def __init__(self, ptr, strides=None):
            self.interface = _interface(ptr, (2, 4), strides)

        @property
        def __cuda_array_interface__(self):
            return self.interface

    packer = _packer(".param .u64 .ptr .global .align 16 p")
    seen = []
    fire = core_launcher(packer, lambda s, c, k, *values: seen.append(values), "k")
    geometry = (1, 1, 1, 32, 1, 1, 0, None)
    assert fire((Array(0x7F0000000100),), (0, None), geometry) is None
    assert seen == [(0x7F0000000100,)]
    with pytest.raises(LaunchError, match=r"0x7f0000000104 is 4 bytes past a boundary"):
        fire((Array(0x7F0000000104),), (0, None), geometry)
    with pytest.raises(LaunchError, match=r"the array is not C-contiguous"):
        fire((Array(0x7F0000000100, strides=(4, 8)),), (0, None), geometry)


def test_generated_launcher_lines_show_in_tracebacks():
    """A traceback through a generated launcher shows its source line, from linecache,
    under a file name unique to that source."""
    import traceback

    fire = core_launcher(_packer(".param .u32 n"), lambda *a: None, "k", compiled=False)
    other = core_launcher(_packer(".param .u64 n"), lambda *a: None, "k", compiled=False)
    with pytest.raises(LaunchError) as info:
        fire(("four",), (0, None), (1, 1, 1, 32, 1, 1, 0, None))
    (frame,) = [f for f in traceback.extract_tb(info.value.__traceback__)
                if f.filename.startswith("<specdsl fire k ")]
    assert frame.line == "v0 = a0 if type(a0) is int and not a0 & -4294967296 else c0(a0, stream)"
    assert fire.__code__.co_filename == frame.filename != other.__code__.co_filename
