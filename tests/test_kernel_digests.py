"""The PTX of every built-in kernel's variants and of a spread of shapes, pinned by digest.

``tests/golden/ptx_digests.txt`` holds one line per request: the SHA-256 of its sm_90 PTX
and the request. A template change that is meant to be a pure refactor (a macro moved or
merged) must leave every line as it is; one that changes PTX shows, in review, exactly
which requests changed. Regenerate after an intended change with
``SPECDSL_UPDATE_GOLDEN=1 pytest tests/test_kernel_digests.py`` and read the diff.
"""

from __future__ import annotations

import hashlib

from golden import check_golden
from specdsl import render
from specdsl._review.variants import spec_variants
from specdsl.kernels import ALL, Fp8Quant, RMSNorm, RMSNormQuant, RoPE, SiluMul, Softmax

DTYPES = ("bf16", "f16", "f32")


def pinned_requests() -> list:
    """Every built-in kernel's variants, then shapes that reach each template path:
    whole and ragged last sweeps, register-resident and chunked rows, splits, each
    scale mode, odd block sizes, neox and gptj rotations, x kept in L2."""
    requests = [spec for cls in ALL for spec in spec_variants(cls)]
    for dtype in DTYPES:
        wide = 32768 if dtype == "f32" else 65536
        for hidden in (8, 64, 2880, 4096, 5120, 8192, 16384, wide):
            for fused in (False, True):
                requests.append(RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused))
        requests += [RMSNorm(hidden=2880, dtype=dtype, block=96),
                     RMSNorm(hidden=wide, dtype=dtype, block=1024, fused_residual=True)]
        for cols in (8, 1000, 4096, 32768, 50000, 131072, 200000, 262144):
            for scale in (1.0, -0.5):
                requests.append(Softmax(cols=cols, dtype=dtype, scale=scale))
        requests += [Softmax(cols=131072, dtype=dtype, split=8),
                     Softmax(cols=24 * 4, dtype=dtype, split=3, scale=0.0),
                     Softmax(cols=4096, dtype=dtype, block=96)]
        for hidden in (64, 4096, 5120, 16384):
            for mode, scale in (("dynamic", None), ("static_param", None),
                                ("static_baked", 0.05)):
                block = 32 if hidden == 64 else (1024 if hidden == 16384 else 256)
                requests.append(Fp8Quant(hidden=hidden, dtype=dtype, block=block,
                                         scale_mode=mode, static_scale=scale))
        requests.append(Fp8Quant(hidden=2048, dtype=dtype, block=96))
        for d in (1000, 4096, 14336):
            for unroll in (1, 2, 4):
                requests.append(SiluMul(d=d, dtype=dtype, unroll=unroll))
        for style in ("neox", "gptj"):
            requests += [RoPE(dtype=dtype, style=style),
                         RoPE(dtype=dtype, style=style, q_heads=7, kv_heads=1, head_dim=96,
                              rotary_dim=32)]
        if dtype != "f32":  # x kept in L2 (l2_evict_last): 8192 takes 4 CTAs an SM with it
            requests += [RMSNorm(hidden=8192, dtype=dtype, l2_evict_last=True),
                         RMSNorm(hidden=8192, dtype=dtype, l2_evict_last=True, min_ctas_per_sm=None),
                         RMSNorm(hidden=4096, dtype=dtype, fused_residual=True, l2_evict_last=True),
                         Softmax(cols=4096, dtype=dtype, l2_evict_last=True),
                         RMSNormQuant(hidden=4096, dtype=dtype, l2_evict_last=True)]
    return list(dict.fromkeys(requests))


def manifest() -> str:
    """One line a request: the sha256 of its sm_90 PTX, two spaces, the request."""
    return "".join(f"{hashlib.sha256(render(spec).encode()).hexdigest()}  {spec!r}\n"
                   for spec in pinned_requests())


def test_ptx_digests_unchanged():
    """Every pinned request renders exactly the PTX recorded in golden/ptx_digests.txt."""
    check_golden("ptx_digests.txt", manifest())
