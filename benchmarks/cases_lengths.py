"""Benchmark cases of row lengths that are not a multiple of 8, and of rows longer than the
registers, for ``benchmarks/kernels.py`` (issue 14, section 3: "odd shapes lose at most 5%
against the nearest multiple of 8").

Each group times an odd length beside the nearest multiple of 8 in the same table (bf16):

* RMSNorm-odd: hidden 4097 (one element a vector) and 4100 (8-byte vectors) against 4096
  and 4104.
* Softmax-odd: cols 4097 against 4096, 50257 (GPT-2's vocabulary) against 50264.
* Fp8Quant-odd: hidden 4097 against 4096 (dynamic per-token scales).
* RMSNorm-long: hidden 65544 and 131072, rows longer than 1024 threads' registers (two
  passes in chunks), at 16 and 4096 tokens.

The odd groups run at 16 and 16384 tokens. The groups are opt-in (:data:`OPT_IN`): name
them with ``--kernels``, e.g. ``--kernels RMSNorm-odd,Softmax-odd,Fp8Quant-odd,RMSNorm-long``.
"""

from __future__ import annotations

from typing import Any

import cases_norm
import cases_pointwise
from harness import BenchCase

#: The kernels this module's cases time (``--kernels`` names).
KERNELS = ("RMSNorm-odd", "Softmax-odd", "Fp8Quant-odd", "RMSNorm-long")
#: Only run where ``--kernels`` names them.
OPT_IN = True
TOKENS = (16, 16384)
LONG_TOKENS = (16, 4096)
#: Each group's lengths: the odd ones and their nearest multiples of 8.
RMSNORM_ODD = (4096, 4097, 4100, 4104)
SOFTMAX_ODD = (4096, 4097, 50257, 50264)
FP8_ODD = (4096, 4097)
RMSNORM_LONG = (65544, 131072)


def cases(torch: Any) -> list[BenchCase]:
    """The odd-length and long-row cases (no device work until a case runs)."""
    found = [cases_norm._rmsnorm(torch, t, h, False).renamed("RMSNorm-odd")
             for h in RMSNORM_ODD for t in TOKENS]
    found += [cases_norm._softmax(torch, t, c).renamed("Softmax-odd")
              for c in SOFTMAX_ODD for t in TOKENS]
    found += [cases_pointwise._fp8_quant(torch, t, h).renamed("Fp8Quant-odd")
              for h in FP8_ODD for t in TOKENS]
    found += [cases_norm._rmsnorm(torch, t, h, False).renamed("RMSNorm-long")
              for h in RMSNORM_LONG for t in LONG_TOKENS]
    return found
