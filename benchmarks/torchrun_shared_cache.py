"""Ranks on separate GPUs share one disk cache folder: rank 0 compiles, the others load.

Run on a machine with two GPUs (or more; one rank each)::

    python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        benchmarks/torchrun_shared_cache.py --cache-dir /tmp/specdsl-ranks

Each rank launches on its own GPU (``LOCAL_RANK``) through an executor with the shared
``--cache-dir``. Rank 0 first calls every ``specdsl.torch`` op once (each request is
compiled, or read from the folder if an earlier run filled it); all ranks then meet at a
barrier, and only then do the other ranks make the same calls, so they find rank 0's cubins.
Each rank prints one line ``specdsl-rank {json}`` with its executor's stats and the wall time
of its first pass; rank 0 then prints a table. The exit status is 1 when a rank after rank 0
compiled anything or found fewer modules on disk than it loaded, or when a result is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import specdsl.torch as sd
from specdsl import Executor


def first_pass(device: torch.device) -> float:
    """Call every op once on ``device`` (bf16, Llama-like sizes); returns the largest
    relative error of rms_norm against torch (a check that the kernels ran)."""
    generator = torch.Generator(device=device).manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=generator, device=device).to(torch.bfloat16)

    x, weight = randn(8, 4096), randn(4096) + 1
    y = sd.rms_norm(x, weight, 1e-5)
    sd.fused_add_rms_norm(x, randn(8, 4096), weight, 1e-5)
    sd.softmax(x, 0.125)
    sd.rotary_embedding(torch.arange(8, device=device), randn(8, 32 * 128), randn(8, 8 * 128),
                        128, 500000.0)
    sd.silu_and_mul(randn(8, 2 * 4096))
    sd.scaled_fp8_quant(x)
    sd.scaled_fp8_quant(x, torch.tensor([0.05], device=device))
    xf = x.float()
    expected = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * weight.float()
    return ((y.float() - expected).norm() / expected.norm()).item()


def run_rank(rank: int, device: torch.device, cache_dir: str) -> dict:
    executor = Executor(device.index, cache_dir=cache_dir)
    sd.use_executor(executor)
    start = time.perf_counter()
    error = first_pass(device)
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    stats = executor.stats
    return {"rank": rank, "device": device.index, "modules": stats.misses,
            "compiles": stats.compiles, "disk_hits": stats.disk_hits,
            "ptx_disk_hits": stats.ptx_disk_hits, "first_pass_ms": round(1000 * seconds, 1),
            "rms_norm_error": error}


def problems(result: dict) -> list[str]:
    """What is wrong with one rank's result (empty when it is as expected)."""
    found = []
    if result["rms_norm_error"] > 1e-2:
        found.append(f"rms_norm error {result['rms_norm_error']:.3g}")
    if result["rank"] > 0 and (result["compiles"] or result["disk_hits"] < result["modules"]):
        found.append(f"{result['compiles']} compiles and {result['disk_hits']} disk hits for "
                     f"{result['modules']} modules (expected every module from rank 0's cubins)")
    if result["compiles"] + result["disk_hits"] != result["modules"]:
        found.append("compiles + disk hits != modules")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", required=True, help="the disk cache folder all ranks share")
    args = parser.parse_args(argv)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("gloo")  # a CPU barrier: no NCCL needed
    result = None
    if rank == 0:
        result = run_rank(rank, device, args.cache_dir)
    dist.barrier()
    if rank != 0:
        result = run_rank(rank, device, args.cache_dir)
    print(f"specdsl-rank {json.dumps(result)}", flush=True)
    results: list = [None] * dist.get_world_size()
    dist.all_gather_object(results, result)
    dist.destroy_process_group()
    if rank == 0:
        print("| rank | device | modules | compiles | disk hits | first pass ms |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in results:
            print(f"| {r['rank']} | {r['device']} | {r['modules']} | {r['compiles']} | "
                  f"{r['disk_hits']} | {r['first_pass_ms']} |")
    found = problems(result)
    for problem in found:
        print(f"rank {rank}: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
