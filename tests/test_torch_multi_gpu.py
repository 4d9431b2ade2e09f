"""Two GPUs: one executor per device in one process, and torchrun ranks sharing a disk cache.

Skipped unless two CUDA devices are visible (run on the 2-GPU machine).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import specdsl.torch as sd  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "torchrun_shared_cache.py"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs two CUDA devices"),
]


def _rms_norm_error(x, weight, y) -> float:
    xf = x.double()
    expected = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.double()
    return ((y.double() - expected).norm() / expected.norm()).item()


def test_ops_launch_on_the_inputs_device():
    """Each op runs on its inputs' device through that device's own executor (device 1's made
    by the first call there), and leaves torch's current device as it was."""
    torch.cuda.set_device(0)
    results = {}
    for index in (1, 0):
        device = torch.device("cuda", index)
        x = torch.randn(16, 4096, device=device, dtype=torch.bfloat16)
        weight = torch.rand(4096, device=device, dtype=torch.bfloat16) + 0.5
        y = sd.rms_norm(x, weight, 1e-6)
        results[index] = (y.device, _rms_norm_error(x, weight, y))
        assert torch.cuda.current_device() == 0
        assert torch.empty(1, device="cuda").device == torch.device("cuda", 0)
    assert results[0][0] == torch.device("cuda", 0) and results[1][0] == torch.device("cuda", 1)
    assert max(results[0][1], results[1][1]) < 1e-2
    first, second = sd.executor(0), sd.executor(1)
    assert first is not second and (first.device_id, second.device_id) == (0, 1)


def test_torchrun_ranks_share_the_disk_cache(tmp_path):
    """Two torchrun ranks, one per GPU, share one cache folder: rank 0 compiles every module,
    rank 1 (after a barrier) finds every one on disk and compiles nothing."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", str(SCRIPT), "--cache-dir", str(tmp_path / "cache")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = {}
    for line in done.stdout.splitlines():
        if line.startswith("specdsl-rank "):
            result = json.loads(line.split(" ", 1)[1])
            ranks[result["rank"]] = result
    assert set(ranks) == {0, 1} and {r["device"] for r in ranks.values()} == {0, 1}
    assert ranks[0]["modules"] == 7 and ranks[0]["compiles"] == 7
    assert (ranks[1]["modules"], ranks[1]["compiles"], ranks[1]["disk_hits"]) == (7, 0, 7)
