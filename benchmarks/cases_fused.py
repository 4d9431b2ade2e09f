"""Benchmark cases of the fused FP8 epilogues (bf16 in, e4m3 out) for ``benchmarks/kernels.py``.

Each fused kernel runs beside the unfused specdsl pair it replaces (the ``unfused`` column:
both launches, the intermediate ``y`` written and read back through device memory, with the
same codes) and beside ``torch.compile`` and torch eager of the same math:

* RMSNormQuant, RMSNormQuant+residual: hidden 4096 and 7168 (DeepSeek-V3), each scale mode
  (dynamic per token, static, groups of 128); unfused: RMSNorm then Fp8Quant.
* RMSNormQuant-long: the long rows' blocks (256 or 288 threads at 8 vectors a thread), hidden
  16384 (Llama 3.1 405B) and 18432 (Nemotron-4 340B), each scale mode, without the residual.
* SiluMulQuant: d 14336 (Llama 3 8B/70B's MLP) and 18432 (DeepSeek-V3's), each mode;
  unfused: SiluMul then Fp8Quant.
* Fp8Quant-group: per-group scales alone (vLLM's ``per_token_group_quant_fp8``), hidden 7168
  and 18432.

Tokens 16 and 16384 (``--quick`` keeps the first series of each). These groups are opt-in
(:data:`OPT_IN`): name them with ``--kernels``, e.g. ``--kernels RMSNormQuant,SiluMulQuant``;
the default run leaves them out to stay near 4 minutes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from harness import (
    BenchCase,
    Impl,
    Launcher,
    fields_label,
    fresh_outputs,
    from_bits,
    host,
    to_bits,
    torch_dtype,
)

from specdsl.kernels import (
    Fp8Quant,
    RMSNorm,
    RMSNormQuant,
    SiluMul,
    SiluMulQuant,
    small_launch_loads,
)
from specdsl.kernels import fp8_quant as fp8_quant_module
from specdsl.kernels import rmsnorm_quant as rmsnorm_quant_module
from specdsl.kernels import silu_mul_quant as silu_mul_quant_module
from specdsl.kernels.fp8_quant import E4M3_MAX, GROUP_EPS, GROUP_SIZE, MIN_SCALE
from specdsl.kernels.silu_mul import suggested_geometry

#: The kernels this module's cases time (``--kernels`` names).
KERNELS = ("RMSNormQuant", "RMSNormQuant+residual", "SiluMulQuant", "Fp8Quant-group",
           "RMSNormQuant-long")
#: Only run where ``--kernels`` names them.
OPT_IN = True
TOKENS = (16, 16384)
NORM_HIDDEN = (4096, 7168)
LONG_HIDDEN = (16384, 18432)
SILU_D = (14336, 18432)
GROUP_HIDDEN = (7168, 18432)
MODES = ("dynamic", "static", "group")
EPS = 1e-6
#: The static scale the cases pass: N(0, 1)-ish rows (RMSNorm's y, SiluMul of N(0, 4))
#: stay well under 448 * STATIC_SCALE, so few codes saturate.
STATIC_SCALE = 0.05


def quantize_torch(torch: Any, y: Any, mode: str, static: Any = None) -> tuple:
    """What an inference stack does in torch after the op: codes ``q`` (float8_e4m3fn) and
    the scales of ``mode`` (per token ``[tokens]``, per group ``[tokens, width / 128]``;
    static: none returned), dividing by the scale as vLLM's torch fallbacks do."""
    x = y.float()
    if mode == "static":
        return ((x / static).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn),)
    if mode == "group":
        groups = x.view(x.shape[0], -1, GROUP_SIZE)
        scale = groups.abs().amax(dim=-1).clamp(min=GROUP_EPS) / E4M3_MAX
        q = (groups / scale[..., None]).clamp(-E4M3_MAX, E4M3_MAX).view(x.shape)
        return q.to(torch.float8_e4m3fn), scale
    scale = (x.abs().amax(dim=-1, keepdim=True) / E4M3_MAX).clamp(min=MIN_SCALE)
    q = (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale.squeeze(-1)


def _outputs(torch: Any, tokens: int, width: int, mode: str) -> tuple:
    """Fresh ``q`` and scale tensors for ``mode`` (static: the one f32 scale, an input)."""
    q = torch.empty(tokens, width, dtype=torch.float8_e4m3fn, device="cuda")
    if mode == "static":
        return q, torch.tensor([STATIC_SCALE], dtype=torch.float32, device="cuda")
    shape = (tokens, width // GROUP_SIZE) if mode == "group" else (tokens,)
    return q, torch.empty(shape, dtype=torch.float32, device="cuda")


def _output_positions(q_at: int, mode: str) -> tuple[int, ...]:
    """Where ``q`` and its scales sit in an input set (``q`` at ``q_at``, the scales next),
    as :attr:`harness.BenchCase.outputs`: a static scale is an input, not listed."""
    return (q_at,) if mode == "static" else (q_at, q_at + 1)


def _static(scale: Any, mode: str) -> Any:
    """The scale tensor for the torch version: the static scale (an input), or None where
    the slot holds the scales the kernel computes (an output the torch version must not
    read)."""
    return scale if mode == "static" else None


def _picked_outputs(q: Any, scale: Any, mode: str) -> tuple:
    """The outputs a case checks: the codes, and the scales unless they are the input."""
    return (q,) if mode == "static" else (q, scale)


def _quant_spec(hidden: int, mode: str, dtype: str = "bf16", tokens: int = 0) -> Fp8Quant:
    """The Fp8Quant request of an unfused pair's second launch (with the loads
    specdsl.torch chooses for ``tokens`` rows)."""
    return small_launch_loads(Fp8Quant(hidden=hidden, dtype=dtype, scale_mode="static_param"
                                       if mode == "static" else mode), tokens)


def _silu_mul_spec(d: int, tokens: int) -> SiluMul:
    """The SiluMul request of an unfused pair's first launch, as specdsl.torch.silu_and_mul
    chooses it for ``tokens`` rows."""
    unroll, block = suggested_geometry(tokens)
    return small_launch_loads(SiluMul(d=d, dtype="bf16", unroll=unroll, block=block), tokens)


def _unfused(torch: Any, first: Any, second: Fp8Quant, tokens: int, width: int,
             mode: str, outputs: tuple[int, ...], returns_sum: bool = False) -> Impl:
    """``first`` (RMSNorm or SiluMul: its inputs, then ``y``, then the row count) and then
    Fp8Quant of ``y``, through a ``y`` ``[tokens, width]`` allocated at each call, as the
    ``outputs`` (positions in the input set, :func:`harness.fresh_outputs`) are.
    ``returns_sum``: ``first`` updates its second input (the residual) in place, an output
    checked like the codes."""
    launcher = Launcher(torch)
    grid_a, block_a = first.launch_dims(tokens)
    grid_b, block_b = second.launch_dims(tokens)
    rows = np.uint32(tokens)

    def run(*args: Any) -> tuple:
        *first_inputs, q, scale = fresh_outputs(torch, args, outputs)
        x = first_inputs[0]
        y = torch.empty(tokens, width, dtype=x.dtype, device=x.device)
        launcher.launch(first, *first_inputs, y, rows, grid=grid_a, block=block_a)
        launcher.launch(second, y, q, scale, grid=grid_b, block=block_b)
        summed = (first_inputs[1],) if returns_sum else ()
        return (*_picked_outputs(q, scale, mode), *summed)
    return Impl(prepare=lambda inputs: inputs, run=run)


def _rmsnorm_quant(torch: Any, tokens: int, hidden: int, fused: bool, mode: str,
                   dtype: str = "bf16", **fields: Any) -> BenchCase:
    """RMSNormQuant of ``dtype`` rows (bf16 unless a variant experiment names another),
    with candidate ``fields`` (e.g. ``block``), beside its unfused pair."""
    spec = RMSNormQuant(hidden=hidden, eps=EPS, dtype=dtype, fused_residual=fused,
                        scale_mode=mode, **fields)
    plain = RMSNorm(hidden=hidden, eps=EPS, dtype=dtype, fused_residual=fused, block=spec.block)
    grid, block = spec.launch_dims(tokens)
    rows = np.uint32(tokens)
    eps32 = float(np.float32(EPS))

    def make_inputs() -> tuple:
        elements = torch_dtype(torch, dtype)
        x = torch.randn(tokens, hidden, dtype=elements, device="cuda")
        weight = torch.randn(hidden, dtype=elements, device="cuda") * 0.5 + 1
        residual = (torch.randn_like(x),) if fused else ()
        return (x, *residual, weight, *_outputs(torch, tokens, hidden, mode))

    def run_specdsl(launcher: Any, inputs: tuple) -> tuple:
        launcher.launch(spec, *inputs, rows, grid=grid, block=block)
        summed = (inputs[1],) if fused else ()  # the residual, updated in place
        return (*_picked_outputs(inputs[-2], inputs[-1], mode), *summed)

    def run_torch(*args: Any) -> tuple:
        # With the residual, the sum is an output too (written back, as vLLM's op does):
        # a peer that skipped it would move a quarter fewer bytes.
        x, *rest = args
        if fused:
            residual, weight, static = rest
            x = x + residual
        else:
            weight, static = rest
        y = torch.nn.functional.rms_norm(x, (hidden,), weight, EPS)
        return (*quantize_torch(torch, y, mode, static), *((x,) if fused else ()))

    def expected(inputs: tuple, picks: Any) -> tuple:
        x = host(inputs[0], picks)
        if fused:  # s = x + residual, rounded to dtype once (as the kernel and torch do)
            x = from_bits(to_bits(x + host(inputs[1], picks), spec.dtype), spec.dtype)
        quotient, scales, _ = rmsnorm_quant_module.reference(
            x, host(inputs[-3]), eps32, spec.dtype, mode, STATIC_SCALE)
        codes = (quotient,) if mode == "static" else (quotient, scales)
        return (*codes, x) if fused else codes

    outputs = _output_positions(2 + fused, mode)
    unfused = lambda: _unfused(torch, plain, _quant_spec(hidden, mode, dtype, tokens),  # noqa: E731
                               tokens, hidden, mode, outputs, returns_sum=fused)
    return BenchCase(spec=spec, kernel="RMSNormQuant+residual" if fused else "RMSNormQuant",
                     tokens=tokens,
                     series=f"hidden={hidden} {mode}{fields_label(fields, dtype)}",
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl, run_torch=run_torch,
                     torch_args=lambda inputs: (*inputs[:-2], _static(inputs[-1], mode)),
                     expected=expected,
                     peers={"unfused": unfused}, outputs=outputs,
                     tolerance=rmsnorm_quant_module.example(spec, np.random.default_rng(0),
                                                            rows=2).tolerance)


def _silu_mul_quant(torch: Any, tokens: int, d: int, mode: str, **fields: Any) -> BenchCase:
    # few tokens are each shared by several CTAs (a cluster for the dynamic scale), as
    # specdsl.torch.silu_and_mul_quant chooses on an H200 (the shape's detail)
    split = silu_mul_quant_module.suggested_split(d, "bf16", mode, tokens)
    auto: dict[str, Any] = {"split": split} if "split" not in fields and split > 1 else {}
    spec = SiluMulQuant(d=d, dtype="bf16", scale_mode=mode, **fields, **auto)
    if "l1_no_allocate" not in fields:  # as specdsl.torch.silu_and_mul_quant chooses
        spec = small_launch_loads(spec, tokens)
    grid, block = spec.launch_dims(tokens)
    count = np.uint32(tokens)

    def make_inputs() -> tuple:
        x = torch.randn(tokens, 2 * d, dtype=torch.bfloat16, device="cuda") * 2
        return (x, *_outputs(torch, tokens, d, mode))

    def run_specdsl(launcher: Any, inputs: tuple) -> tuple:
        launcher.launch(spec, *inputs, count, grid=grid, block=block)
        return _picked_outputs(inputs[1], inputs[2], mode)

    def run_torch(x: Any, static: Any) -> tuple:
        y = torch.nn.functional.silu(x[:, :d]) * x[:, d:]
        return quantize_torch(torch, y, mode, static)

    def expected(inputs: tuple, picks: Any) -> tuple:
        quotient, scales, _ = silu_mul_quant_module.reference(
            host(inputs[0], picks), d, spec.dtype, mode, STATIC_SCALE)
        return (quotient,) if mode == "static" else (quotient, scales)

    outputs = _output_positions(1, mode)
    unfused = lambda: _unfused(torch, _silu_mul_spec(d, tokens),  # noqa: E731
                               _quant_spec(d, mode, tokens=tokens), tokens, d, mode, outputs)
    return BenchCase(spec=spec, kernel="SiluMulQuant", tokens=tokens,
                     series=f"d={d} {mode}{fields_label(fields)}", detail=fields_label(auto),
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl, run_torch=run_torch,
                     torch_args=lambda inputs: (inputs[0], _static(inputs[2], mode)), expected=expected,
                     peers={"unfused": unfused}, outputs=outputs,
                     tolerance=silu_mul_quant_module.example(spec, np.random.default_rng(0),
                                                             tokens=2).tolerance)


def _fp8_quant(torch: Any, tokens: int, hidden: int, mode: str = "group",
               **fields: Any) -> BenchCase:
    """Fp8Quant with group scales (the kernel ``Fp8Quant-group`` of the tables), a static
    scale read at launch (``Fp8Quant-static``, the variants only) or dynamic scales
    (``Fp8Quant-dynamic``, the variants only), with the split and loads specdsl.torch would
    choose for ``tokens`` rows (the split shown as the shape's detail)."""
    scale_mode = "static_param" if mode == "static" else mode
    split = fp8_quant_module.suggested_split(hidden, "bf16", scale_mode, tokens)
    auto: dict[str, Any] = {"split": split} if "split" not in fields and split > 1 else {}
    spec = Fp8Quant(hidden=hidden, dtype="bf16", scale_mode=scale_mode, **fields, **auto)
    if "l1_no_allocate" not in fields:
        spec = small_launch_loads(spec, tokens)
    grid, block = spec.launch_dims(tokens)

    def make_inputs() -> tuple:
        x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda")
        return (x, *_outputs(torch, tokens, hidden, mode))

    def run_specdsl(launcher: Any, inputs: tuple) -> tuple:
        launcher.launch(spec, *inputs, grid=grid, block=block)
        return _picked_outputs(inputs[1], inputs[2], mode)

    def expected(inputs: tuple, picks: Any) -> tuple:
        x = host(inputs[0], picks)
        if mode == "static":
            return (fp8_quant_module.reference(x, STATIC_SCALE)[0],)
        if mode == "dynamic":
            return fp8_quant_module.reference(x)
        return fp8_quant_module.group_reference(x)

    return BenchCase(spec=spec, kernel=f"Fp8Quant-{mode}", tokens=tokens,
                     series=f"hidden={hidden}{fields_label(fields)}", detail=fields_label(auto),
                     bytes_moved=spec.bytes_moved(tokens), make_inputs=make_inputs,
                     run_specdsl=run_specdsl,
                     run_torch=lambda x, static: quantize_torch(torch, x, mode, static),
                     torch_args=lambda inputs: (inputs[0], _static(inputs[2], mode)),
                     expected=expected, outputs=_output_positions(1, mode),
                     tolerance=fp8_quant_module.example(spec, np.random.default_rng(0),
                                                        tokens=2).tolerance)


def cases(torch: Any) -> list[BenchCase]:
    """The fused epilogues' cases (no device work until a case runs)."""
    found = [_rmsnorm_quant(torch, t, h, fused, mode) for fused in (False, True)
             for h in NORM_HIDDEN for mode in MODES for t in TOKENS]
    found += [_silu_mul_quant(torch, t, d, mode) for d in SILU_D for mode in MODES
              for t in TOKENS]
    found += [_fp8_quant(torch, t, h) for h in GROUP_HIDDEN for t in TOKENS]
    found += [_rmsnorm_quant(torch, t, h, False, mode).renamed("RMSNormQuant-long")
              for h in LONG_HIDDEN for mode in MODES for t in TOKENS]
    return found
