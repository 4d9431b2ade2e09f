"""A few launches of specdsl kernels and their torch.compile twins, for Nsight Compute.

Run on the GPU machine from the repository root, under ``ncu`` (clocks left alone)::

    ncu --clock-control none -k regex:"^(rmsnorm|softmax|silu_mul|triton_)" \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active \\
        --csv python3 benchmarks/ncu_targets.py [norm] [small]

``norm``: RMSNorm 16384 x 4096 and 16384 x 8192, Softmax 16384 x 8192; ``small``: SiluMul
at 1 and 16 tokens (d 4096). Each case launches the specdsl kernel and the torch.compile
function twice on one set of random inputs; ncu reports each kernel's own duration,
without the fixed cost that timing between CUDA events adds (docs/performance.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases_norm
import cases_pointwise
from kernels import Launcher

GROUPS = {
    "norm": lambda torch: [cases_norm._rmsnorm(torch, 16384, 4096, False),
                           cases_norm._rmsnorm(torch, 16384, 8192, False),
                           cases_norm._softmax(torch, 16384, 8192)],
    "small": lambda torch: [cases_pointwise._silu_mul(torch, tokens, 4096) for tokens in (1, 16)],
}


def main(argv: list[str]) -> int:
    import torch

    groups = argv or sorted(GROUPS)
    unknown = set(groups) - set(GROUPS)
    if unknown:
        print(f"unknown group(s) {sorted(unknown)}; expected some of {sorted(GROUPS)}")
        return 2
    launcher = Launcher(torch)
    for group in groups:
        for case in GROUPS[group](torch):
            inputs = case.make_inputs()
            compiled = torch.compile(case.run_torch, dynamic=False)
            for _ in range(2):
                case.run_specdsl(launcher, inputs)
                compiled(*case.torch_args(inputs))
            torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
