"""Benchmark cases of RoPE, SiluMul and Fp8Quant (bf16) for ``benchmarks/kernels.py``.

Shapes: tokens in {1, 16, 256, 4096, 16384} x width in {4096, 8192}, where the width is
``d`` for SiluMul (x is ``[tokens, 2d]``), ``hidden`` for Fp8Quant (dynamic per-token
scales) and ``q_heads * head_dim`` for RoPE (head_dim 128, neox, q_heads 32 or 64 with
8 kv heads, theta 1e6). The torch versions are what an inference stack does in eager
PyTorch: ``silu(x[:, :d]) * x[:, d:]``; amax, divide, clamp, cast to float8_e4m3fn;
RoPE through a precomputed cos/sin cache indexed by the positions, rotate-half. Peers:
Liger-Kernel's SwiGLU and RoPE (``liger_peers.py``); Liger has no FP8 quantization.
Run: ``python3 benchmarks/kernels.py --kernels RoPE,SiluMul,Fp8Quant``.
"""

from __future__ import annotations

import functools
from typing import Any

import liger_peers
import numpy as np
from harness import BenchCase, fields_label, host

from specdsl.kernels import Fp8Quant, RoPE, SiluMul, small_launch_loads
from specdsl.kernels import fp8_quant as fp8_quant_module
from specdsl.kernels import rope as rope_module
from specdsl.kernels import silu_mul as silu_mul_module
from specdsl.kernels.fp8_quant import E4M3_MAX, MIN_SCALE
from specdsl.kernels.silu_mul import suggested_geometry

#: The kernels this module's cases time (``--kernels`` names).
KERNELS = ("RoPE", "SiluMul", "Fp8Quant")
TOKENS = (1, 16, 256, 4096, 16384)
WIDTHS = (4096, 8192)
HEAD_DIM = 128
KV_HEADS = 8
THETA = 1e6
MAX_POSITION = 131072


def _silu_mul(torch: Any, tokens: int, d: int, **fields: Any) -> BenchCase:
    # the geometry and loads specdsl.torch.silu_and_mul would choose for `tokens` rows
    # (suggested_geometry, small_launch_loads), where `fields` leave them open
    label = fields_label(fields)
    unroll, block = suggested_geometry(tokens)
    spec = SiluMul(d=d, dtype="bf16", **{"unroll": unroll, "block": block, **fields})
    if "l1_no_allocate" not in fields:
        spec = small_launch_loads(spec, tokens)
    grid, block = spec.launch_dims(tokens)
    count = np.uint32(tokens)

    def make_inputs() -> tuple:
        x = torch.randn(tokens, 2 * d, dtype=torch.bfloat16, device="cuda") * 2
        return x, torch.empty(tokens, d, dtype=torch.bfloat16, device="cuda")

    def run_specdsl(launcher: Any, inputs: tuple) -> tuple:
        launcher.launch(spec, *inputs, count, grid=grid, block=block)
        return (inputs[1],)

    def run_torch(x: Any) -> Any:
        return torch.nn.functional.silu(x[:, :d]) * x[:, d:]

    def expected(inputs: tuple, picks: Any) -> tuple:
        return (silu_mul_module.reference(host(inputs[0], picks), d),)

    return BenchCase(spec=spec, kernel="SiluMul", tokens=tokens, series=f"d={d}{label}",
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl, run_torch=run_torch,
                     torch_args=lambda inputs: inputs[:1], expected=expected,
                     peers={"liger": lambda: liger_peers.silu_mul(d)}, outputs=(1,),
                     tolerance=silu_mul_module.example(spec, np.random.default_rng(0)).tolerance)


def _fp8_quant(torch: Any, tokens: int, hidden: int, **fields: Any) -> BenchCase:
    spec = Fp8Quant(hidden=hidden, dtype="bf16", **fields)
    if "l1_no_allocate" not in fields:  # as specdsl.torch.scaled_fp8_quant chooses
        spec = small_launch_loads(spec, tokens)
    grid, block = spec.launch_dims(tokens)

    def make_inputs() -> tuple:
        x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda")
        q = torch.empty(tokens, hidden, dtype=torch.float8_e4m3fn, device="cuda")
        return x, q, torch.empty(tokens, dtype=torch.float32, device="cuda")

    def run_specdsl(launcher: Any, inputs: tuple) -> tuple:
        launcher.launch(spec, *inputs, grid=grid, block=block)
        return inputs[1], inputs[2]

    def run_torch(x: Any) -> Any:
        amax = x.abs().amax(dim=-1, keepdim=True).float()
        scale = (amax / E4M3_MAX).clamp(min=MIN_SCALE)
        q = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        return q, scale

    def expected(inputs: tuple, picks: Any) -> tuple:
        return fp8_quant_module.reference(host(inputs[0], picks))  # (quotient, scale)

    return BenchCase(spec=spec, kernel="Fp8Quant", tokens=tokens,
                     series=f"hidden={hidden}{fields_label(fields)}",
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl, run_torch=run_torch,
                     torch_args=lambda inputs: inputs[:1], expected=expected,
                     peers={"liger": liger_peers.missing("Liger-Kernel has no FP8 quantization")},
                     outputs=(1, 2),
                     tolerance=fp8_quant_module.example(spec, np.random.default_rng(0)).tolerance)


@functools.lru_cache(maxsize=1)
def _cos_sin_table(torch: Any) -> Any:
    """``[MAX_POSITION, HEAD_DIM]`` bf16: cos of every angle, then sin (angles in float64).

    Built once, on first use, outside anything torch.compile traces (dynamo would trace
    through the cache into the table's construction).
    """
    inv_freq = THETA ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64, device="cuda")
                         / HEAD_DIM)
    angles = torch.arange(MAX_POSITION, dtype=torch.float64, device="cuda")[:, None] * inv_freq
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(torch.bfloat16)


def _rope(torch: Any, tokens: int, width: int, **fields: Any) -> BenchCase:
    q_heads = width // HEAD_DIM
    spec = RoPE(q_heads=q_heads, kv_heads=KV_HEADS, head_dim=HEAD_DIM, theta=THETA,
                style="neox", dtype="bf16", **fields)
    grid, block = spec.launch_dims(tokens)
    count = np.uint32(tokens)
    half = HEAD_DIM // 2

    def cos_sin(positions: Any) -> tuple:
        """The cos and sin halves ``[tokens, HEAD_DIM / 2]`` at ``positions`` (bf16)."""
        return _cos_sin_table(torch)[positions].chunk(2, dim=-1)

    def make_inputs() -> tuple:
        q = torch.randn(tokens, q_heads, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(tokens, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        positions = torch.randint(0, MAX_POSITION, (tokens,), dtype=torch.int64, device="cuda")
        return q, k, positions

    def run_specdsl(launcher: Any, inputs: tuple) -> tuple:
        launcher.launch(spec, *inputs, count, grid=grid, block=block)
        return inputs[0], inputs[1]  # rotated in place

    def run_torch(q: Any, k: Any, positions: Any, table: Any) -> Any:
        cos, sin = (t.unsqueeze(1) for t in table[positions].chunk(2, dim=-1))

        def rotate(x: Any) -> Any:
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        return rotate(q), rotate(k)

    def expected(inputs: tuple, picks: Any) -> tuple:
        positions = inputs[2].index_select(0, picks).cpu().numpy()
        fields = dict(rotary_dim=spec.rotary, theta=THETA, style="neox")
        return tuple(rope_module.reference(host(t, picks), positions, **fields)
                     for t in inputs[:2])

    label = fields_label(fields)
    return BenchCase(spec=spec, kernel="RoPE", tokens=tokens,
                     series=f"heads={q_heads}+{KV_HEADS}x{HEAD_DIM}{label}",
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl, run_torch=run_torch,
                     # the table is an argument, built outside what torch.compile traces
                     torch_args=lambda inputs: (*inputs[:3], _cos_sin_table(torch)),
                     expected=expected, peers={"liger": lambda: liger_peers.rope(cos_sin)},
                     tolerance=rope_module.example(spec, np.random.default_rng(0)).tolerance)


def cases(torch: Any) -> list[BenchCase]:
    """RoPE, SiluMul and Fp8Quant cases, bf16 (no device work until a case runs)."""
    found = [_rope(torch, t, w) for w in WIDTHS for t in TOKENS]
    found += [_silu_mul(torch, t, w) for w in WIDTHS for t in TOKENS]
    found += [_fp8_quant(torch, t, w) for w in WIDTHS for t in TOKENS]
    return found
