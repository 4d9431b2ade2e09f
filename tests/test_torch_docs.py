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
    """The pre-fill example compiles the block's five requests on a machine without a GPU;
    run again on the same folder, it finds all five on disk and compiles nothing."""
    prefill = _run("def prefill")["prefill"]
    first, again = prefill(tmp_path / "cache"), prefill(tmp_path / "cache")
    assert (first.compiles, first.disk_hits) == (5, 0)
    assert (again.compiles, again.disk_hits) == (0, 5)


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
    assert namespace["prefill"](tmp_path).compiles == 5
    executor = Executor(0, cache_dir=tmp_path)
    sd.use_executor(executor)
    block = namespace["DecoderBlock"](namespace["SpecdslOps"])
    with torch.no_grad():
        block(torch.arange(8, device="cuda"), torch.randn(8, 2048, dtype=torch.bfloat16,
                                                            device="cuda"))
    torch.cuda.synchronize()
    stats = executor.stats
    assert (stats.misses, stats.disk_hits, stats.compiles) == (5, 5, 0)
