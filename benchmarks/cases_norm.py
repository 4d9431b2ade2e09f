"""Benchmark cases of RMSNorm and Softmax (bf16) for ``benchmarks/kernels.py``.

Shapes: tokens in {1, 16, 256, 4096, 16384} x hidden in {4096, 8192}, for RMSNorm with and
without the fused residual add and for Softmax; Softmax also at cols 32768 and 131072 up to
4096 tokens. Softmax runs with ``scale=1.0``, so torch eager is a single ``torch.softmax``
kernel, and with ``split=suggested_split(cols, "bf16", tokens)`` (a cluster of CTAs a row
for few long rows; the shape label then says ``split=``) and ``keep_exponentials`` where
``suggested_keep_exponentials`` says so (up to 8 rows an SM: the label says
``keep_exponentials=True``), as ``specdsl.torch.softmax`` chooses both, for an H200's 132 SMs
(both functions' default ``sm_count``; the torch op asks the device). Peers: Liger-Kernel's RMSNorm,
fused add RMSNorm and Softmax (``liger_peers.py``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import liger_peers
import numpy as np
from harness import BenchCase, fields_label, from_bits, host, to_bits, torch_dtype

from specdsl.errors import SpecError
from specdsl.kernels import RMSNorm, Softmax
from specdsl.kernels import rmsnorm as rmsnorm_module
from specdsl.kernels import softmax as softmax_module
from specdsl.kernels.softmax import suggested_keep_exponentials, suggested_split

#: The kernels this module's cases time (``--kernels`` names).
KERNELS = ("RMSNorm", "RMSNorm+residual", "Softmax")
TOKENS = (1, 16, 256, 4096, 16384)
HIDDEN = (4096, 8192)
SOFTMAX_LONG_COLS = (32768, 131072)
SOFTMAX_LONG_TOKENS = (1, 16, 256, 4096)
EPS = 1e-6


def _rmsnorm(torch: Any, tokens: int, hidden: int, fused: bool, dtype: str = "bf16",
             **fields: Any) -> BenchCase:
    """RMSNorm of ``dtype`` rows (bf16 unless a variant experiment names another), with
    candidate ``fields``."""
    spec = RMSNorm(hidden=hidden, eps=EPS, dtype=dtype, fused_residual=fused, **fields)
    grid, block = spec.launch_dims(tokens)
    rows = np.uint32(tokens)
    eps32 = float(np.float32(EPS))  # what the kernel bakes

    def make_inputs() -> tuple:
        x = torch.randn(tokens, hidden, dtype=torch_dtype(torch, dtype), device="cuda")
        weight = torch.randn(hidden, dtype=x.dtype, device="cuda") * 0.5 + 1
        y = torch.empty_like(x)
        if fused:
            return x, torch.randn_like(x), weight, y
        return x, weight, y

    def run_specdsl(launcher: Any, inputs: tuple) -> tuple:
        launcher.launch(spec, *inputs, rows, grid=grid, block=block)
        return (inputs[-1], inputs[1]) if fused else (inputs[-1],)  # y (and the sum)

    def expected(inputs: tuple, picks: Any) -> tuple:
        x, weight = host(inputs[0], picks), host(inputs[-2])
        if not fused:
            return (rmsnorm_module.reference(x, weight, eps32),)
        summed = from_bits(to_bits(x + host(inputs[1], picks), spec.dtype), spec.dtype)
        return rmsnorm_module.reference(summed, weight, eps32), summed

    if fused:
        def run_torch(x: Any, residual: Any, weight: Any) -> Any:
            s = x + residual
            return torch.nn.functional.rms_norm(s, (hidden,), weight, EPS), s
        torch_args = lambda inputs: inputs[:3]  # noqa: E731
        liger = lambda: liger_peers.fused_add_rms_norm(EPS)  # noqa: E731
    else:
        def run_torch(x: Any, weight: Any) -> Any:
            return torch.nn.functional.rms_norm(x, (hidden,), weight, EPS)
        torch_args = lambda inputs: inputs[:2]  # noqa: E731
        liger = lambda: liger_peers.rms_norm(EPS)  # noqa: E731
    return BenchCase(spec=spec, kernel="RMSNorm+residual" if fused else "RMSNorm", tokens=tokens,
                     series=f"hidden={hidden}{fields_label(fields, dtype)}",
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl, run_torch=run_torch, torch_args=torch_args,
                     expected=expected, peers={"liger": liger}, outputs=(3,) if fused else (2,),
                     tolerance=rmsnorm_module.example(spec, np.random.default_rng(0)).tolerance)


def _softmax(torch: Any, tokens: int, cols: int, dtype: str = "bf16", **fields: Any) -> BenchCase:
    """Softmax of ``dtype`` rows (bf16 unless a variant experiment names another), with
    candidate ``fields``; the split and kept exponentials ``specdsl.torch.softmax`` would
    choose for ``tokens`` rows where ``fields`` leave them open (the shape's detail)."""
    # few long rows share a cluster of CTAs each, as an application would ask for them
    split = suggested_split(cols, dtype, tokens)
    auto: dict[str, Any] = {"split": split} if "split" not in fields and split > 1 else {}
    # and few rows keep their exponentials, where the request with these fields takes it
    if "keep_exponentials" not in fields and suggested_keep_exponentials(
            cols, dtype, tokens, split=fields.get("split", split),
            l2_evict_last=fields.get("l2_evict_last", False)):
        with contextlib.suppress(SpecError):  # a candidate block with too few registers
            Softmax(cols=cols, dtype=dtype, **fields, **auto, keep_exponentials=True)
            auto["keep_exponentials"] = True
    spec = Softmax(cols=cols, scale=1.0, dtype=dtype, **fields, **auto)
    grid, block = spec.launch_dims(tokens)
    rows = np.uint32(tokens)

    def make_inputs() -> tuple:
        x = torch.randn(tokens, cols, dtype=torch_dtype(torch, dtype), device="cuda") * 2
        return x, torch.empty_like(x)

    def run_specdsl(launcher: Any, inputs: tuple) -> tuple:
        launcher.launch(spec, *inputs, rows, grid=grid, block=block)
        return (inputs[1],)

    def run_torch(x: Any) -> Any:
        return torch.softmax(x, dim=-1)

    def expected(inputs: tuple, picks: Any) -> tuple:
        return (softmax_module.reference(host(inputs[0], picks), 1.0),)

    return BenchCase(spec=spec, kernel="Softmax", tokens=tokens,
                     series=f"cols={cols}{fields_label(fields, dtype)}",
                     detail=fields_label(auto),
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl, run_torch=run_torch,
                     torch_args=lambda inputs: inputs[:1], expected=expected,
                     peers={"liger": liger_peers.softmax}, outputs=(1,),
                     tolerance=softmax_module.example(spec, np.random.default_rng(0)).tolerance)


def cases(torch: Any) -> list[BenchCase]:
    """RMSNorm, fused RMSNorm and Softmax cases, bf16 (no device work until a case runs)."""
    found = [_rmsnorm(torch, t, h, False) for h in HIDDEN for t in TOKENS]
    found += [_rmsnorm(torch, t, h, True) for h in HIDDEN for t in TOKENS]
    found += [_softmax(torch, t, c) for c in HIDDEN for t in TOKENS]
    found += [_softmax(torch, t, c) for c in SOFTMAX_LONG_COLS for t in SOFTMAX_LONG_TOKENS]
    return found
