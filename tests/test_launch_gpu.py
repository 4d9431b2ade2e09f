"""The compiled launch path on a GPU: every built-in through the C driver call against the
plain-Python path and float64, the array checks with torch, torch's current stream, and
CUDA-graph capture of launches made on the new path."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from specdsl import TORCH_CURRENT_STREAM, Executor, LaunchError
from specdsl.kernels import ALL, RMSNorm, RoPE, VectorAdd

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def executors(tmp_path_factory):
    """``(compiled, python)``: an executor on each launch path, sharing one disk cache."""
    from specdsl._runtime.speedups import PURE_PYTHON_ENV, compiled

    if not compiled():
        pytest.skip("specdsl._runtime._speedups is not built")
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(PURE_PYTHON_ENV, raising=False)
        fast = Executor(0, cache_dir=cache)
        patch.setenv(PURE_PYTHON_ENV, "1")
        slow = Executor(0, cache_dir=cache)
    assert fast.compiled and not slow.compiled
    return fast, slow


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _requests():
    from specdsl._review.variants import spec_variants

    for cls in ALL:
        variants = spec_variants(cls)
        for spec in variants[:: max(1, len(variants) // 6)]:  # about six of each
            yield pytest.param(spec, id=f"{cls.__name__}-{variants.index(spec)}")


@pytest.mark.parametrize("spec", list(_requests()))
def test_builtin_on_the_new_path_matches_the_old_one_and_float64(executors, spec):
    """Each built-in's example, launched through the compiled path's own cuLaunchKernel
    and through the plain-Python path (cuda.core's launch), gives the same outputs (the
    same error against the float64 reference, bit for bit the same kernel inputs), within
    the kernel's tolerance."""
    from specdsl.review import run_case

    example = importlib.import_module(type(spec).__module__).example
    errors = []
    for executor in executors:
        case = example(spec, np.random.default_rng(4))
        errors.append(run_case(executor, case))
    assert errors[0] == errors[1]
    for name, error in errors[0].items():
        assert error <= case.tolerance, (spec, name, error)


def _bf16(torch, shape):
    return torch.randn(shape, device="cuda").to(torch.bfloat16)


def test_rope_int32_positions_refused(executors, torch):
    """RoPE's int64 positions given as int32 are refused, q and k left as they were."""
    for executor in executors:
        spec = RoPE(dtype="bf16", q_heads=4, kv_heads=2, head_dim=64)
        q, k = _bf16(torch, (8, 4, 64)), _bf16(torch, (8, 2, 64))
        before = q.clone(), k.clone()
        grid, block = spec.launch_dims(8)
        positions = torch.arange(8, device="cuda", dtype=torch.int32)
        with pytest.raises(LaunchError, match=r"'positions' .* expects i64 elements .* \(got "
                                              r"int32 elements"):
            executor.launch(spec, q, k, positions, 8, grid=grid, block=block)
        torch.cuda.synchronize()
        assert torch.equal(q, before[0]) and torch.equal(k, before[1])
        executor.launch(spec, q, k, positions.long(), 8, grid=grid, block=block)
        torch.cuda.synchronize()
        assert not torch.equal(q, before[0])


def test_bf16_rmsnorm_refuses_float32_tensors(executors, torch):
    """A bf16 RMSNorm refuses float32 tensors; y keeps its poison."""
    for executor in executors:
        spec = RMSNorm(hidden=256, dtype="bf16")
        x, weight = torch.randn(4, 256, device="cuda"), torch.ones(256, device="cuda")
        y = torch.full((4, 256), float("nan"), device="cuda")
        grid, block = spec.launch_dims(4)
        with pytest.raises(LaunchError, match=r"'x' .* expects bf16 elements .* \(got float32"):
            executor.launch(spec, x, weight, y, 4, grid=grid, block=block)
        torch.cuda.synchronize()
        assert torch.isnan(y).all()


def test_rmsnorm_rows_past_y_refused_and_the_neighbour_untouched(executors, torch):
    """rows=64 with a 4-row y is refused; the tensor allocated after y is unchanged (issue
    11: 60 rows were written past y)."""
    for executor in executors:
        spec = RMSNorm(hidden=256, dtype="bf16")
        x, weight = _bf16(torch, (64, 256)), _bf16(torch, (256,))
        y = torch.zeros(4, 256, device="cuda", dtype=torch.bfloat16)
        neighbour = torch.full((60, 256), 7.0, device="cuda", dtype=torch.bfloat16)
        grid, block = spec.launch_dims(64)
        with pytest.raises(LaunchError, match=r"'y' .* expects at least 16384 elements"):
            executor.launch(spec, x, weight, y, 64, grid=grid, block=block)
        with pytest.raises(LaunchError, match=r"'y' .* expects at least 16384 elements"):
            executor.bind(spec, grid=grid, block=block)(x, weight, y, 64)
        torch.cuda.synchronize()
        assert (neighbour == 7.0).all() and (y == 0).all()


def _vector_add(torch, n=4099):
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    return a, b, torch.full_like(a, float("nan")), n


def test_torch_current_stream_follows_stream_contexts(executors, torch):
    """stream=TORCH_CURRENT_STREAM launches on the stream a ``torch.cuda.stream`` context
    makes current (launch and bind); results are right once that stream is synchronized."""
    spec = VectorAdd()
    for executor in executors:
        a, b, out, n = _vector_add(torch)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        bound = executor.bind(spec, grid=spec.grid(n), block=spec.block,
                              stream=TORCH_CURRENT_STREAM)
        with torch.cuda.stream(side):
            executor.launch(spec, a, b, out, n, grid=spec.grid(n), block=spec.block,
                            stream=TORCH_CURRENT_STREAM)
            bound(out, b, out, n)
        side.synchronize()
        assert torch.allclose(out, a + 2 * b)


def test_graph_capture_of_launches_on_the_new_path(executors, torch):
    """Launches on torch's current stream (launch and a bound launcher) captured in a CUDA
    graph replay on new inputs with the right values."""
    spec = VectorAdd()
    for executor in executors:
        a, b, out, n = _vector_add(torch)
        total = torch.full_like(a, float("nan"))
        grid = spec.grid(n)
        bound = executor.bind(spec, grid=grid, block=spec.block, stream=TORCH_CURRENT_STREAM)
        warm = torch.cuda.Stream()  # torch's advice: warm up on a side stream first
        warm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warm):
            executor.launch(spec, a, b, out, n, grid=grid, block=spec.block,
                            stream=TORCH_CURRENT_STREAM)
            bound(out, b, total, n)
        torch.cuda.current_stream().wait_stream(warm)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            executor.launch(spec, a, b, out, n, grid=grid, block=spec.block,
                            stream=TORCH_CURRENT_STREAM)
            bound(out, b, total, n)
        for seed in (1, 2):
            torch.manual_seed(seed)
            a.copy_(torch.randn(n, device="cuda"))
            b.copy_(torch.randn(n, device="cuda"))
            out.fill_(float("nan"))
            total.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, a + b) and torch.allclose(total, a + 2 * b)

