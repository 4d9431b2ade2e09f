"""Benchmark cases of RMSNorm and Softmax (bf16) for ``benchmarks/kernels.py``.

Shapes: tokens in {1, 16, 256, 4096, 16384} x hidden in {4096, 8192}; RMSNorm with the
fused residual add at 4096 and 16384 tokens; Softmax also at cols 32768 and 131072.
Softmax runs with ``scale=1.0``, so torch eager is a single ``torch.softmax`` kernel, and
with ``split=suggested_split(cols, "bf16", tokens)`` (a cluster of CTAs a row for few long
rows; the shape label then says ``split=``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from kernels import BenchCase

from specdsl.kernels.rmsnorm import RMSNorm
from specdsl.kernels.softmax import Softmax, suggested_split

TOKENS = (1, 16, 256, 4096, 16384)
HIDDEN = (4096, 8192)
SOFTMAX_COLS = (4096, 8192, 32768, 131072)
EPS = 1e-6


def _rmsnorm(torch: Any, tokens: int, hidden: int, fused: bool, **fields: Any) -> BenchCase:
    spec = RMSNorm(hidden=hidden, eps=EPS, dtype="bf16", fused_residual=fused, **fields)
    grid, block = spec.launch_dims(tokens)
    rows = np.uint32(tokens)

    def make_inputs() -> tuple:
        x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda")
        weight = torch.randn(hidden, dtype=torch.bfloat16, device="cuda") * 0.5 + 1
        y = torch.empty_like(x)
        if fused:
            return x, torch.randn_like(x), weight, y
        return x, weight, y

    def run_specdsl(launcher: Any, inputs: tuple) -> None:
        launcher.launch(spec, *inputs, rows, grid=grid, block=block)

    if fused:
        def run_torch(x: Any, residual: Any, weight: Any) -> Any:
            s = x + residual
            return s, torch.nn.functional.rms_norm(s, (hidden,), weight, EPS)
        torch_args = lambda inputs: inputs[:3]  # noqa: E731
    else:
        def run_torch(x: Any, weight: Any) -> Any:
            return torch.nn.functional.rms_norm(x, (hidden,), weight, EPS)
        torch_args = lambda inputs: inputs[:2]  # noqa: E731
    name = "RMSNorm+residual" if fused else "RMSNorm"
    label = "".join(f" {k}={v}" for k, v in fields.items())
    return BenchCase(kernel=name, shape=f"tokens={tokens} hidden={hidden}{label}",
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl, run_torch=run_torch, torch_args=torch_args)


def _softmax(torch: Any, tokens: int, cols: int, **fields: Any) -> BenchCase:
    # few long rows share a cluster of CTAs each, as an application would ask for them
    split = suggested_split(cols, "bf16", tokens)
    if "split" not in fields and split > 1:
        fields["split"] = split
    spec = Softmax(cols=cols, scale=1.0, dtype="bf16", **fields)
    grid, block = spec.launch_dims(tokens)
    rows = np.uint32(tokens)

    def make_inputs() -> tuple:
        x = torch.randn(tokens, cols, dtype=torch.bfloat16, device="cuda") * 2
        return x, torch.empty_like(x)

    def run_specdsl(launcher: Any, inputs: tuple) -> None:
        launcher.launch(spec, *inputs, rows, grid=grid, block=block)

    def run_torch(x: Any) -> Any:
        return torch.softmax(x, dim=-1)

    label = "".join(f" {k}={v}" for k, v in fields.items())
    return BenchCase(kernel="Softmax", shape=f"tokens={tokens} cols={cols}{label}",
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl, run_torch=run_torch,
                     torch_args=lambda inputs: inputs[:1])


def cases(torch: Any) -> list[BenchCase]:
    """RMSNorm, fused RMSNorm and Softmax cases, bf16."""
    found = [_rmsnorm(torch, t, h, False) for h in HIDDEN for t in TOKENS]
    found += [_rmsnorm(torch, t, h, True) for h in HIDDEN for t in (4096, 16384)]
    found += [_softmax(torch, t, c) for c in SOFTMAX_COLS for t in TOKENS]
    return found
