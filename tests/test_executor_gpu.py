"""The executor on a GPU: VectorAdd through torch, CuPy, cuda.core Buffers and streams.

Every output is poisoned with 0xFF bytes (NaN in every float format) before a launch,
and every refused launch is checked to have left the poison in place.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from handkeyed import HandKeyedAdd
from specdsl import DType, Executor, IncompleteKeyError, LaunchError, key_checking
from specdsl.kernels import VectorAdd
from specdsl.kernels.case import from_bits, relative_error, to_bits

pytestmark = pytest.mark.gpu

N = 1_000_003  # odd: the last vector takes the element-wise tail path
TOLERANCE = {DType.F32: 1e-6, DType.F16: 1e-3, DType.BF16: 1e-2}


@pytest.fixture(scope="module", params=["compiled", "python"])
def executor(request, tmp_path_factory):
    """An executor on each launch path (specdsl._runtime.speedups): every test here runs on both."""
    from specdsl._runtime.speedups import PURE_PYTHON_ENV, compiled

    if request.param == "compiled" and not compiled():
        pytest.skip("specdsl._runtime._speedups is not built")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(PURE_PYTHON_ENV, raising=False)
        if request.param == "python":
            patch.setenv(PURE_PYTHON_ENV, "1")
        return Executor(0, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


TORCH_DTYPES = {DType.F32: "float32", DType.F16: "float16", DType.BF16: "bfloat16"}


def _torch_case(torch, dtype: DType, rng, n: int = N):
    """Random inputs as torch tensors, a poisoned output, and the inputs in float64."""
    a_bits, b_bits = to_bits(rng.standard_normal(n), dtype), to_bits(rng.standard_normal(n), dtype)

    def upload(bits):
        if dtype is DType.BF16:  # NumPy has no bf16: move the bit patterns as int16
            return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).cuda()
        return torch.from_numpy(bits).cuda()

    a, b = upload(a_bits), upload(b_bits)
    out = torch.empty(n, dtype=getattr(torch, TORCH_DTYPES[dtype]), device="cuda")
    out.view(torch.uint8).fill_(0xFF)
    return a, b, out, from_bits(a_bits, dtype), from_bits(b_bits, dtype)


def _download(torch, out, dtype: DType):
    if dtype is DType.BF16:
        return from_bits(out.view(torch.int16).cpu().numpy().view(np.uint16), dtype)
    return out.cpu().numpy().astype(np.float64)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F16, DType.BF16], ids=str)
def test_vector_add_torch(executor, torch, dtype):
    """VectorAdd on torch tensors matches the float64 sum within one rounding."""
    rng = np.random.default_rng(1)
    spec = VectorAdd(dtype=dtype)
    a, b, out, a64, b64 = _torch_case(torch, dtype, rng)
    executor.launch(spec, a, b, out, N, grid=spec.grid(N), block=spec.block)
    torch.cuda.synchronize()
    assert relative_error(_download(torch, out, dtype), a64 + b64) <= TOLERANCE[dtype]


def test_vector_add_f32_is_exact(executor, torch):
    """f32 VectorAdd equals NumPy's float32 sum bit for bit (add.rn.f32 is IEEE addition)."""
    rng = np.random.default_rng(2)
    a_host = rng.standard_normal(N).astype(np.float32)
    b_host = rng.standard_normal(N).astype(np.float32)
    a, b = torch.from_numpy(a_host).cuda(), torch.from_numpy(b_host).cuda()
    out = torch.empty_like(a)
    out.view(torch.uint8).fill_(0xFF)
    spec = VectorAdd()
    executor.launch(spec, a, b, out, np.uint64(N), grid=spec.grid(N), block=spec.block)
    np.testing.assert_array_equal(out.cpu().numpy(), a_host + b_host)


def test_vector_add_cupy(executor):
    """VectorAdd on CuPy arrays (read through __cuda_array_interface__) matches float64."""
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(3)
    a_host, b_host = (rng.standard_normal(N).astype(np.float16) for _ in range(2))
    a, b = cp.asarray(a_host), cp.asarray(b_host)
    out = cp.empty(N, dtype=cp.float16)
    out.view(cp.uint8).fill(0xFF)
    spec = VectorAdd(dtype="f16")
    executor.launch(spec, a, b, out, N, grid=spec.grid(N), block=spec.block)
    cp.cuda.runtime.deviceSynchronize()
    expected = a_host.astype(np.float64) + b_host.astype(np.float64)
    assert relative_error(cp.asnumpy(out), expected) <= TOLERANCE[DType.F16]


def test_vector_add_buffers_and_core_stream(executor):
    """cuda.core Buffers on a cuda.core Stream, copied through pinned host buffers."""
    from specdsl._review.demo import run_case
    from specdsl.kernels.vector_add import example

    case = example(VectorAdd(dtype="bf16"), np.random.default_rng(4), n=4099)
    errors = run_case(executor, case)
    assert set(errors) == {"out"} and errors["out"] <= case.tolerance


def test_buffer_checks_on_the_hot_path(executor):
    """cuda.core Buffers are read inline on a repeated launch, and still refused there when
    closed, misaligned or empty, naming the parameter; the last launch adds correctly."""
    from cuda.core import Buffer

    device, n = executor.device, 1024
    stream = device.default_stream
    a, b, out = (device.allocate(n * 4, stream=stream) for _ in range(3))
    host = np.random.default_rng(8).standard_normal((2, n)).astype(np.float32)
    for buffer, values in ((a, host[0]), (b, host[1])):
        buffer.copy_from(_pinned_from(values), stream=stream)
    spec, geometry = VectorAdd(), dict(grid=4, block=256)
    for _ in range(2):
        executor.launch(spec, a, b, out, n, **geometry)
    misaligned = Buffer.from_handle(int(a.handle) + 4, n * 4 - 4)
    with pytest.raises(LaunchError, match=r"parameter 'a' .* aligned to 16 bytes"):
        executor.launch(spec, misaligned, b, out, n, **geometry)
    closed = device.allocate(n * 4, stream=stream)
    closed.close(stream)
    with pytest.raises(LaunchError, match=r"parameter 'b' .* \(the Buffer is closed or empty\)"):
        executor.launch(spec, a, closed, out, n, **geometry)
    result = np.empty(n, np.float32)
    pinned = _pinned_from(result)
    pinned.copy_from(out, stream=stream)
    stream.sync()
    assert np.array_equal(_host_view(pinned, n), host[0] + host[1])


def _pinned_from(values: np.ndarray):
    """A pinned host Buffer holding ``values`` (float32)."""
    from cuda.core import LegacyPinnedMemoryResource

    pinned = LegacyPinnedMemoryResource().allocate(values.nbytes)
    _host_view(pinned, values.size)[:] = values
    return pinned


def _host_view(pinned, n: int) -> np.ndarray:
    import ctypes

    return np.frombuffer((ctypes.c_float * n).from_address(int(pinned.handle)), np.float32)


def test_torch_stream(executor, torch):
    """A launch on a torch.cuda.Stream is ordered after work queued on that stream."""
    rng = np.random.default_rng(5)
    stream = torch.cuda.Stream()
    spec = VectorAdd()
    with torch.cuda.stream(stream):
        a, b, out, a64, b64 = _torch_case(torch, DType.F32, rng)
        a.mul_(2.0)  # queued on `stream`: the kernel must see it
        executor.launch(spec, a, b, out, N, grid=spec.grid(N), block=spec.block, stream=stream)
    stream.synchronize()
    assert relative_error(_download(torch, out, DType.F32), 2.0 * a64 + b64) <= 1e-6


def test_launch_from_another_thread(executor, torch):
    """A thread that never touched CUDA can launch (the device context is made current)."""
    rng = np.random.default_rng(6)
    a, b, out, a64, b64 = _torch_case(torch, DType.F32, rng, n=4096)
    spec = VectorAdd()
    errors = []

    def worker():
        try:
            executor.launch(spec, a, b, out, 4096, grid=spec.grid(4096), block=spec.block)
        except Exception as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    torch.cuda.synchronize()
    assert errors == [] and relative_error(_download(torch, out, DType.F32), a64 + b64) <= 1e-6


def _still_poisoned(torch, out) -> bool:
    torch.cuda.synchronize()
    return bool((out.view(torch.uint8) == 0xFF).all())


def test_incomplete_hand_key_through_launch(executor, torch):
    """A hand key missing dtype: the second request raises IncompleteKeyError, nothing runs."""
    rng = np.random.default_rng(7)
    with key_checking(True):
        a, b, out, _, _ = _torch_case(torch, DType.F32, rng, n=1024)
        first = HandKeyedAdd(dtype="f32")
        executor.launch(first, a, b, out, 1024, grid=4, block=256)
        a16, b16, out16, _, _ = _torch_case(torch, DType.F16, rng, n=1024)
        with pytest.raises(IncompleteKeyError, match="vadd") as info:
            executor.launch(HandKeyedAdd(dtype="f16"), a16, b16, out16, 1024, grid=4, block=256)
    assert info.value.differing_fields == ("dtype",)
    assert _still_poisoned(torch, out16)


@pytest.mark.parametrize("mutate, message", [
    (lambda a, b, out, n: (a[1:], b, out, n - 1), r"'a'.*aligned to 16 bytes"),
    (lambda a, b, out, n: (a.cpu(), b, out, n), r"'a'.*on cpu"),
    (lambda a, b, out, n: (a, b, out[::2], n // 2), r"'out'.*not contiguous"),
    (lambda a, b, out, n: (a, b, out, -n), r"'n'.*\[0, 2\*\*64\)"),
    (lambda a, b, out, n: (a, b, out, float(n)), r"'n'.*expects an int"),
    (lambda a, b, out, n: (a, b, out), r"takes 4 argument"),
])
def test_bad_arguments_refused_before_launch(executor, torch, mutate, message):
    """Misaligned, host, strided, negative, float and missing arguments: LaunchError, no launch."""
    rng = np.random.default_rng(8)
    a, b, out, _, _ = _torch_case(torch, DType.F32, rng, n=4096)
    spec = VectorAdd()
    with pytest.raises(LaunchError, match=message):
        executor.launch(spec, *mutate(a, b, out, 4096), grid=16, block=256)
    assert _still_poisoned(torch, out)


@pytest.mark.parametrize("grid, block, shared_mem, message", [
    (0, 256, 0, r"grid\.x must be at least 1"),
    (16, (32, 64), 0, r"block of 2048 threads exceeds the device's limit of 1024"),
    (16, (256, 1, 128), 0, r"block\.z = 128 exceeds"),
    (16, 256.0, 0, r"block must be a positive int"),
    (16, 256, 10**6, r"opt-in limit"),
])
def test_bad_geometry_refused_before_launch(executor, torch, grid, block, shared_mem, message):
    """Zero grids, oversized blocks, float blocks and too much shared memory are refused."""
    rng = np.random.default_rng(9)
    a, b, out, _, _ = _torch_case(torch, DType.F32, rng, n=4096)
    with pytest.raises(LaunchError, match=message):
        executor.launch(VectorAdd(), a, b, out, 4096, grid=grid, block=block,
                        shared_mem=shared_mem)
    assert _still_poisoned(torch, out)


def test_large_dynamic_shared_memory_opts_in(executor, torch):
    """100 KB of dynamic shared memory (above the 48 KB default) launches after opting in."""
    rng = np.random.default_rng(10)
    a, b, out, a64, b64 = _torch_case(torch, DType.F32, rng, n=4096)
    executor.launch(VectorAdd(), a, b, out, 4096, grid=4, block=256, shared_mem=100 * 1024)
    torch.cuda.synchronize()
    assert relative_error(_download(torch, out, DType.F32), a64 + b64) <= 1e-6


def test_default_target_is_the_device(executor):
    """The default target is the device's compute capability."""
    major, minor = executor.device.compute_capability
    assert executor.target.sm == f"sm_{major}{minor}"


def test_stats_count_launch_hits(executor, torch):
    """Each launch of a cached module counts as a hit."""
    rng = np.random.default_rng(11)
    a, b, out, _, _ = _torch_case(torch, DType.F32, rng, n=1024)
    spec = VectorAdd()
    executor.launch(spec, a, b, out, 1024, grid=4, block=256)
    before = executor.stats.hits
    for _ in range(3):
        executor.launch(spec, a, b, out, 1024, grid=4, block=256)
    assert executor.stats.hits == before + 3


def test_bound_launcher_matches_launch(executor, torch):
    """A bound launcher computes what launch computes, on a torch stream, checked the same way."""
    rng = np.random.default_rng(11)
    spec = VectorAdd(dtype=DType.F16)
    a, b, out, a64, b64 = _torch_case(torch, DType.F16, rng)
    stream = torch.cuda.Stream()
    bound = executor.bind(spec, grid=spec.grid(N), block=spec.block, stream=stream)
    assert bound.grid == spec.grid(N) and bound.block == (spec.block, 1, 1)
    bound(a, b, out, N)
    stream.synchronize()
    assert relative_error(_download(torch, out, DType.F16), a64 + b64) <= TOLERANCE[DType.F16]
    out.view(torch.uint8).fill_(0xFF)
    with pytest.raises(LaunchError,
                       match=r"vector_add takes 4 argument\(s\) \(a, b, out, n\), got 3"):
        bound(a, b, out)
    with pytest.raises(LaunchError, match=r"parameter 'n' \(.u64 n\) expects"):
        bound(a, b, out, -1)
    torch.cuda.synchronize()
    assert bool(torch.isnan(out).all())  # refused launches never reached the GPU


def test_stream_placed_by_the_driver(executor, torch):
    """A __cuda_stream__ wrapper that names no device is placed with cuStreamGetDevice."""

    class Wrapped:  # says nothing of its device
        def __init__(self, stream):
            self.stream = stream

        def __cuda_stream__(self):
            return (0, self.stream.cuda_stream)

    rng = np.random.default_rng(8)
    stream = torch.cuda.Stream()
    assert executor.driver.stream_device(stream.cuda_stream) == executor.device_id
    spec = VectorAdd()
    with torch.cuda.stream(stream):
        a, b, out, a64, b64 = _torch_case(torch, DType.F32, rng)
        executor.launch(spec, a, b, out, N, grid=spec.grid(N), block=spec.block,
                        stream=Wrapped(stream))
    stream.synchronize()
    assert relative_error(_download(torch, out, DType.F32), a64 + b64) <= 1e-6


def test_split_softmax_needs_whole_clusters(executor):
    """The cluster shape is read from the loaded kernel; a partial cluster is refused."""
    from specdsl.kernels import Softmax

    spec = Softmax(cols=4096, split=2)
    module = executor.ensure_module(spec)
    assert module.cluster == (2, 1, 1)
    (grid, _), block = spec.launch_dims(3), spec.block
    assert grid == (6, 1, 1)
    with pytest.raises(LaunchError,
                       match=r"is not a whole number of the kernel's clusters of \(2, 1, 1\)"):
        executor.launch(spec, 0, 0, 3, grid=5, block=block)


def test_aggregate_parameter_takes_the_driver_path(executor, torch):
    """A kernel with a .b8 aggregate parameter (no cuda.core argument type) launches
    through cuLaunchKernel with the bytes packed by specdsl, by launch and by bind."""
    from userspecs import Blob

    spec = Blob()
    data = np.random.default_rng(9).integers(0, 256, 16, dtype=np.uint8)
    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    executor.launch(spec, out, data, grid=1, block=spec.block)
    assert not executor.ensure_module(spec).through_core
    torch.cuda.synchronize()
    assert out.cpu().numpy().tobytes() == data.tobytes()
    out.zero_()
    executor.bind(spec, grid=1, block=spec.block)(out, data.tobytes())
    torch.cuda.synchronize()
    assert out.cpu().numpy().tobytes() == data.tobytes()
    with pytest.raises(LaunchError, match=r"parameter 'blob' .* expects exactly 16 bytes"):
        executor.launch(spec, out, b"short", grid=1, block=spec.block)


def test_kernels_launch_through_cuda_core(executor):
    """Kernels without aggregate parameters launch through cuda.core's launch."""
    assert executor.ensure_module(VectorAdd()).through_core
