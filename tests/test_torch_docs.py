"""docs/torch.md's examples run: the decoder block (GPU) and the cache pre-fill (CPU and GPU).

tests/test_docs.py never runs ```python blocks; this module runs the page's, with torch.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "torch.md"


def _block(marker: str) -> str:
    """The page's one ```python block containing ``marker``."""
    found = [b for b in re.findall(r"```python\n(.+?)```", PAGE.read_text(), re.S) if marker in b]
    assert len(found) == 1, f"expected one python block with {marker!r} in {PAGE.name}"
    return found[0]


def _run(*markers: str) -> dict:
    """Execute the blocks holding ``markers``, in order, in one namespace (its final
    top-level ``print(...)`` lines left out: the tests call what they print)."""
    namespace: dict = {"__name__": "docs_torch"}
    for marker in markers:
        code = re.sub(r"^print\(.*\)$", "", _block(marker), flags=re.M)
        exec(compile(code, str(PAGE), "exec"), namespace)
    return namespace


def test_prefill_compiles_each_request_once(tmp_path):
    """The pre-fill example compiles the block's requests for 1 to 8192 tokens on a machine
    without a GPU: nine, as SiluMul takes four (each geometry with and without loads without
    L1 lines: 1 to 42, 43 to 1023, 1024 to 1365 and 1366 rows on, at d 8192) and Fp8Quant
    two; run again on the same folder, it finds all nine on disk and compiles nothing."""
    prefill = _run("def prefill")["prefill"]
    first, again = prefill(tmp_path / "cache"), prefill(tmp_path / "cache")
    assert (first.compiles, first.disk_hits) == (9, 0)
    assert (again.compiles, again.disk_hits) == (0, 9)


def test_torch_reference_ops_match_float64():
    """The page's eager reference (TorchOps) computes what the kernels compute: RoPE (neox)
    and FP8 quantization against specdsl's float64 references, on the CPU."""
    import numpy as np

    from specdsl.kernels import fp8_quant, rope
    from specdsl.kernels.case import relative_error

    ops = _run("class DecoderBlock")["TorchOps"]
    generator = torch.Generator().manual_seed(0)
    positions = torch.arange(1000, 1016)
    q = torch.randn(16, 4 * 64, generator=generator).to(torch.bfloat16)
    k = torch.randn(16, 2 * 64, generator=generator).to(torch.bfloat16)
    rotated, _ = ops.rope(positions, q, k, 64, 500000.0)
    expected = rope.reference(q.double().numpy().reshape(16, 4, 64), positions.numpy(),
                              rotary_dim=64, theta=500000.0, style="neox")
    assert relative_error(rotated.double().numpy().reshape(16, 4, 64), expected) < 1e-2
    x = 3 * torch.randn(16, 512, generator=generator).to(torch.bfloat16)
    codes, scale = ops.fp8_quant(x)
    quotient, expected_scale = fp8_quant.reference(x.double().numpy())
    assert np.allclose(scale.double().numpy().ravel(), expected_scale, rtol=1e-6, atol=0)
    assert relative_error(codes.double().numpy(), quotient) < 4e-2


def test_decoder_block_traces_in_one_graph():
    """The page's block with specdsl's ops compiles with fullgraph=True (traced on the CPU
    with fake tensors: every op in one graph; running it then refuses the CPU tensors)."""
    from torch._dynamo.backends.common import aot_autograd

    from specdsl import LaunchError

    names = _run("class DecoderBlock")
    block = names["DecoderBlock"](names["SpecdslOps"], device="cpu")
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend=aot_autograd(fw_compiler=record))
    with torch.no_grad(), pytest.raises(LaunchError, match="is on cpu"):
        compiled(torch.arange(8), torch.randn(8, 2048).to(torch.bfloat16))
    assert len(graphs) == 1
    for op in ("rms_norm", "rotary_embedding", "fused_add_rms_norm", "silu_and_mul",
               "dynamic_per_token_scaled_fp8_quant"):
        assert f"specdsl.{op}.default" in graphs[0].code


@pytest.fixture
def device_executor():
    """Device 0's shared executor, put back after the test."""
    import specdsl.torch as sd

    original = sd.executor(0)
    yield original
    sd.use_executor(original)


@pytest.mark.gpu
def test_decoder_block_matches_eager_torch():
    """The block with specdsl's ops, eager, compiled (default and reduce-overhead) and in a
    hand-captured CUDA graph, matches the eager torch block; reduce-overhead really ran a
    CUDA graph (Inductor skipped none)."""
    from torch._dynamo.utils import counters

    check_block = _run("class DecoderBlock", "def check_block")["check_block"]
    torch._dynamo.reset()
    counters.clear()
    errors = check_block()
    assert set(errors) == {"eager", "default", "reduce-overhead", "cuda graph"}
    assert max(errors.values()) < 2e-2, errors
    assert counters["inductor"]["cudagraph_skips"] == 0


@pytest.mark.gpu
def test_prefilled_cache_serves_the_block(tmp_path, device_executor):
    """After the pre-fill, the block's ops on a GPU find every module on disk: five disk
    hits, no compile (the pre-filled requests are exactly those the ops make)."""
    import specdsl.torch as sd
    from specdsl import Executor

    if device_executor.target.sm != "sm_90":
        pytest.skip(f"the example pre-fills sm_90; device 0 is {device_executor.target.sm}")
    namespace = _run("class DecoderBlock", "def prefill")
    assert namespace["prefill"](tmp_path).compiles == 9
    executor = Executor(0, cache_dir=tmp_path)
    sd.use_executor(executor)
    block = namespace["DecoderBlock"](namespace["SpecdslOps"])
    with torch.no_grad():
        block(torch.arange(8, device="cuda"), torch.randn(8, 2048, dtype=torch.bfloat16,
                                                            device="cuda"))
    torch.cuda.synchronize()
    stats = executor.stats
    assert (stats.misses, stats.disk_hits, stats.compiles) == (5, 5, 0)
