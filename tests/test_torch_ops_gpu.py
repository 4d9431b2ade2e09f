"""specdsl.torch on a GPU: values against float64 references, opcheck, torch.compile in both
modes, CUDA-graph capture and replay, streams, and the checks that need real memory."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import specdsl.torch as sd  # noqa: E402
from specdsl import LaunchError  # noqa: E402
from specdsl.kernels import (  # noqa: E402
    fp8_quant,
    rmsnorm,
    rmsnorm_quant,
    rope,
    silu_mul,
    silu_mul_quant,
    softmax,
)
from specdsl.kernels.case import relative_error  # noqa: E402
from specdsl.kernels.rmsnorm import TOLERANCE as _BY_DTYPE  # noqa: E402
from specdsl.torch import specs  # noqa: E402
from torchlaunches import record_launches  # noqa: E402

pytestmark = pytest.mark.gpu

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Largest ||out - ref|| / ||ref|| per dtype: a few roundings of the output (the kernels' table).
TOLERANCE = {dtype: _BY_DTYPE[specs.dtype_of(dtype)] for dtype in DTYPES}
#: E4M3 keeps 3 mantissa bits: codes are within 2^-4 of the quotient (see fp8_quant.example).
FP8_TOLERANCE = 4e-2


def randn(*shape, dtype=torch.bfloat16, scale=1.0, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (scale * torch.randn(shape, generator=generator, device="cuda")).to(dtype)


def f64(t: torch.Tensor) -> np.ndarray:
    """A tensor's values in float64 on the host (bf16 and fp8 converted exactly)."""
    return t.detach().double().cpu().numpy()


def _error(out: torch.Tensor, reference: np.ndarray) -> float:
    return relative_error(f64(out), reference)


# -- values against float64 references ------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 4096), (2, 3, 2880)])
def test_rms_norm_values(dtype, shape):
    """rms_norm matches the float64 RMSNorm of the rounded inputs, 2-D and 3-D."""
    x, weight = randn(*shape, dtype=dtype), randn(shape[-1], dtype=dtype, seed=1) + 1
    y = sd.rms_norm(x, weight, 1e-6)
    assert (y.shape, y.dtype, y.device) == (x.shape, dtype, x.device)
    assert _error(y, rmsnorm.reference(f64(x), f64(weight), 1e-6)) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 4096), (2, 3, 2880)])
def test_fused_add_rms_norm_values(dtype, shape):
    """residual becomes x + residual (one rounding); the result is RMSNorm of that sum;
    x is left as it was."""
    x, residual = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=1)
    weight = randn(shape[-1], dtype=dtype, seed=2) + 1
    x_before, expected_sum = x.clone(), (x.float() + residual.float()).to(dtype)
    y = sd.fused_add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(residual, expected_sum) and torch.equal(x, x_before)
    assert _error(y, rmsnorm.reference(f64(expected_sum), f64(weight), 1e-5)) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 4096), (2, 3, 1024), (1, 131072), (40, 32768)])
def test_softmax_values(dtype, shape):
    """softmax matches float64 within the dtype's tolerance (or twice the reference's own
    rounding where that is larger); one row of 131072 runs on a cluster of 8 CTAs on an
    H200, 40 rows of 32768 on clusters of 4 (suggested_split)."""
    x = randn(*shape, dtype=dtype, scale=2.0)
    y = sd.softmax(x, 0.5)
    reference = softmax.reference(f64(x), 0.5)
    rounding = relative_error(f64(torch.from_numpy(reference).to(dtype)), reference)
    assert _error(y, reference) <= max(TOLERANCE[dtype], 2 * rounding)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_keeps_exponentials_where_rows_are_few(dtype, monkeypatch):
    """256 rows launch the request that keeps each exponential in a register, and give the
    bits the default request gives; 8 rows an SM and one more launch the default."""
    from specdsl.torch import _runtime, _softmax, _validate

    launched = record_launches(monkeypatch)
    cols = 4096 if dtype == torch.float32 else 8192
    x = randn(256, cols, dtype=dtype, scale=2.0, seed=7)
    kept = sd.softmax(x, 0.5)
    with monkeypatch.context() as forced:  # plan the same call again, not kept
        forced.setattr(_softmax, "_PLANS", _validate.Plans())
        forced.setattr(specs, "softmax_keeps_exponentials", lambda *args: False)
        twice = sd.softmax(x, 0.5)
    assert [request.keep_exponentials for request in launched] == [True, False]
    assert torch.equal(kept.view(torch.uint8), twice.view(torch.uint8))
    reference = softmax.reference(f64(x), 0.5)
    assert _error(kept, reference) <= TOLERANCE[dtype]
    launched.clear()
    limit = 8 * _runtime.sm_count(x.device.index or 0)
    for rows in (limit, limit + 1):
        sd.softmax(randn(rows, cols, dtype=dtype), 0.5)
    assert [request.keep_exponentials for request in launched] == [True, False]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style,rotary_dim", [("neox", None), ("gptj", 64)])
def test_rotary_embedding_values(dtype, style, rotary_dim):
    """q [tokens, heads, head_dim] and k [tokens, heads * head_dim] are rotated in place as
    the float64 reference rotates them."""
    tokens, head_dim = 37, 128
    positions = torch.randint(0, 131072, (tokens,), device="cuda")
    q = randn(tokens, 32, head_dim, dtype=dtype)
    k = randn(tokens, 8 * head_dim, dtype=dtype, seed=1)
    args = dict(rotary_dim=rotary_dim or head_dim, theta=500000.0, style=style)
    expected_q = rope.reference(f64(q), f64(positions), **args)
    expected_k = rope.reference(f64(k).reshape(tokens, 8, head_dim), f64(positions), **args)
    assert sd.rotary_embedding(positions, q, k, head_dim, 500000.0, style, rotary_dim) is None
    assert _error(q, expected_q) <= TOLERANCE[dtype]
    assert _error(k.view(tokens, 8, head_dim), expected_k) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_embedding_batched_positions(dtype):
    """positions [batch, seq] rotate q and k shaped [batch, seq, heads * head_dim]."""
    positions = torch.randint(0, 4096, (2, 5), device="cuda")
    q, k = randn(2, 5, 4 * 64, dtype=dtype), randn(2, 5, 64, dtype=dtype, seed=1)
    args = dict(rotary_dim=64, theta=10000.0, style="neox")
    flat = f64(positions).reshape(10)
    expected_q = rope.reference(f64(q).reshape(10, 4, 64), flat, **args)
    expected_k = rope.reference(f64(k).reshape(10, 1, 64), flat, **args)
    sd.rotary_embedding(positions, q, k, 64)
    assert _error(q.view(10, 4, 64), expected_q) <= TOLERANCE[dtype]
    assert _error(k.view(10, 1, 64), expected_k) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 2 * 4096), (2, 3, 2 * 1024)])
def test_silu_and_mul_values(dtype, shape):
    """silu_and_mul gives [..., d] matching float64 silu(gate) * up."""
    x = randn(*shape, dtype=dtype, scale=2.0)
    y = sd.silu_and_mul(x)
    d = shape[-1] // 2
    assert (y.shape, y.dtype) == ((*shape[:-1], d), dtype)
    assert _error(y, silu_mul.reference(f64(x), d)) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 4096), (2, 3, 1024), (3, 18432)])
def test_dynamic_fp8_quant_values(dtype, shape):
    """Per-token scales equal max|x| / 448 ([..., 1], float32; an all-zero row gets 2^-126)
    and the codes decode to the float64 quotient within E4M3's rounding; 3 rows of 18432
    run on clusters of 8 CTAs on an H200 (suggested_split)."""
    x = randn(*shape, dtype=dtype) * randn(*shape[:-1], 1, dtype=dtype, scale=4.0, seed=1)
    x.view(-1, shape[-1])[0] = 0
    q, scale = sd.scaled_fp8_quant(x)
    assert (q.dtype, q.shape, scale.dtype, scale.shape) == (
        torch.float8_e4m3fn, x.shape, torch.float32, (*shape[:-1], 1))
    quotient, expected_scale = fp8_quant.reference(f64(x).reshape(-1, shape[-1]))
    assert relative_error(f64(scale).reshape(-1), expected_scale) <= 1e-6
    assert f64(scale).reshape(-1)[0] == 2.0**-126
    assert _error(q.view(-1, shape[-1]), quotient) <= FP8_TOLERANCE


@pytest.mark.parametrize("dtype", DTYPES)
def test_static_fp8_quant_values(dtype):
    """A static scale is read from device memory at launch and returned as given."""
    x = randn(37, 4096, dtype=dtype, scale=3.0)
    static = torch.tensor([0.02], device="cuda")
    q, scale = sd.scaled_fp8_quant(x, static)
    quotient, _ = fp8_quant.reference(f64(x), 0.02)
    assert scale is static and _error(q, quotient) <= FP8_TOLERANCE


# -- the FP8 epilogues: bit for bit the unfused ops, and the float64 references ------------


def _static():
    return torch.tensor([0.02], device="cuda")


def _quantized(y, mode, scale=None):
    """What the unfused ops give for y: scaled_fp8_quant (dynamic, static) or
    per_token_group_quant_fp8 (group)."""
    if mode == "group":
        return sd.per_token_group_quant_fp8(y)
    return sd.scaled_fp8_quant(y, scale)


def _same(got, want):
    """Codes (as bytes) and scales equal bit for bit."""
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8))
    assert torch.equal(got[1], want[1])


def _one_rounding_apart(got, want, dtype):
    """Codes and scales of a y whose rstd may differ by one f32 rounding (another CTA size,
    so another order of the sum of squares): an element of y, and so a row's or group's
    largest |y|, may round to the neighbouring value of ``dtype``. Scales are then within
    one ``dtype`` step (relative 2^-7 for bf16), and a code moves by one E4M3 step at most,
    in under 1% of the elements; most are equal."""
    step = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -22}
    got_scale, want_scale = got[1].double(), want[1].double()
    assert ((got_scale - want_scale).abs() <= step[dtype] * want_scale).all()
    a, b = got[0].view(torch.uint8).int(), want[0].view(torch.uint8).int()
    same_sign = (a & 0x80) == (b & 0x80)
    assert (same_sign & ((a - b).abs() <= 1)).all()
    assert (a != b).double().mean().item() < 0.01


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 4096), (2, 3, 7168)])
def test_per_token_group_quant_fp8_values(dtype, shape):
    """A scale a group of 128, max(amax, 1e-10) / 448 ([..., hidden / 128]), and codes that
    decode to the float64 group quotients within E4M3's rounding; an all-zero row gets
    scales 1e-10 / 448."""
    x = randn(*shape, dtype=dtype) * randn(*shape[:-1], 1, dtype=dtype, scale=4.0, seed=1)
    x.view(-1, shape[-1])[0] = 0
    q, scale = sd.per_token_group_quant_fp8(x)
    assert (q.shape, scale.shape) == (x.shape, (*shape[:-1], shape[-1] // 128))
    quotient, expected_scale = fp8_quant.group_reference(f64(x).reshape(-1, shape[-1]))
    assert relative_error(f64(scale).reshape(expected_scale.shape), expected_scale) <= 1e-6
    assert _error(q.view(-1, shape[-1]), quotient) <= FP8_TOLERANCE


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["dynamic", "static", "group"])
@pytest.mark.parametrize("shape", [(37, 4096), (2, 3, 7168)])
def test_rms_norm_quant_is_the_unfused_pair(dtype, mode, shape):
    """rms_norm_quant's codes and scales are those of rms_norm then the quantization op up
    to one rounding of rstd (its CTA size is not rms_norm's: RMSNormQuant.default_block;
    with the same block they are bit for bit, tests/test_kernel_rmsnorm_quant.py), and
    within E4M3's rounding of the float64 reference."""
    x, weight = randn(*shape, dtype=dtype), randn(shape[-1], dtype=dtype, seed=1) + 1
    scale = _static() if mode == "static" else None
    got = sd.rms_norm_quant(x, weight, 1e-6, scale, 128 if mode == "group" else None)
    want = _quantized(sd.rms_norm(x, weight, 1e-6), mode, scale)
    _one_rounding_apart(got, want, dtype)
    quotient, _, _ = rmsnorm_quant.reference(f64(x).reshape(-1, shape[-1]), f64(weight),
                                             float(np.float32(1e-6)), specs.dtype_of(dtype),
                                             mode, 0.02)
    assert _error(got[0].view(-1, shape[-1]), quotient) <= FP8_TOLERANCE


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["dynamic", "static", "group"])
def test_fused_add_rms_norm_quant_is_the_unfused_pair(dtype, mode):
    """residual becomes x + residual; the codes and scales are those of fused_add_rms_norm
    then the quantization op, bit for bit; x is left as it was."""
    x, residual = randn(5, 7, 4096, dtype=dtype), randn(5, 7, 4096, dtype=dtype, seed=1)
    weight = randn(4096, dtype=dtype, seed=2) + 1
    scale = _static() if mode == "static" else None
    x_before, unfused_residual = x.clone(), residual.clone()
    y = sd.fused_add_rms_norm(x, unfused_residual, weight, 1e-5)
    got = sd.fused_add_rms_norm_quant(x, residual, weight, 1e-5, scale,
                                      128 if mode == "group" else None)
    assert torch.equal(residual, unfused_residual) and torch.equal(x, x_before)
    _same(got, _quantized(y, mode, scale))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["dynamic", "static", "group"])
@pytest.mark.parametrize("shape", [(37, 2 * 14336), (2, 3, 2 * 1024)])
def test_silu_and_mul_quant_is_the_unfused_pair(dtype, mode, shape):
    """silu_and_mul_quant's codes and scales are those of silu_and_mul then the quantization
    op, bit for bit, and within E4M3's rounding of the float64 reference."""
    x = randn(*shape, dtype=dtype, scale=2.0)
    scale = _static() if mode == "static" else None
    got = sd.silu_and_mul_quant(x, scale, 128 if mode == "group" else None)
    d = shape[-1] // 2
    assert got[0].shape == (*shape[:-1], d)
    _same(got, _quantized(sd.silu_and_mul(x), mode, scale))
    quotient, _, _ = silu_mul_quant.reference(f64(x).reshape(-1, shape[-1]), d,
                                              specs.dtype_of(dtype), mode, 0.02)
    assert _error(got[0].view(-1, d), quotient) <= FP8_TOLERANCE


def test_empty_inputs_give_empty_outputs():
    """Zero rows launch nothing and give empty results of the right shapes."""
    x = torch.empty(0, 4096, dtype=torch.bfloat16, device="cuda")
    weight = torch.ones(4096, dtype=torch.bfloat16, device="cuda")
    assert sd.rms_norm(x, weight, 1e-6).shape == (0, 4096)
    q, scale = sd.scaled_fp8_quant(x)
    assert (q.shape, scale.shape) == ((0, 4096), (0, 1))
    assert sd.silu_and_mul(x).shape == (0, 2048)
    q, scale = sd.rms_norm_quant(x, weight, 1e-6, group_size=128)
    assert (q.shape, scale.shape) == ((0, 4096), (0, 32))
    q, scale = sd.silu_and_mul_quant(x)
    assert (q.shape, scale.shape) == ((0, 2048), (0, 1))
    assert sd.per_token_group_quant_fp8(x)[1].shape == (0, 32)


def test_inference_mode():
    """The ops run under torch.inference_mode, the in-place update included."""
    with torch.inference_mode():
        x, residual, weight = randn(4, 1024), randn(4, 1024, seed=1), randn(1024, seed=2) + 1
        expected_sum = (x.float() + residual.float()).to(torch.bfloat16)
        y = sd.fused_add_rms_norm(x, residual, weight, 1e-6)
    assert y.is_inference() and torch.equal(residual, expected_sum)


def test_no_backward():
    """The ops are for inference: a backward through one is refused by torch."""
    x = randn(4, 1024).requires_grad_()
    y = sd.rms_norm(x, randn(1024, seed=1), 1e-6)
    with pytest.raises(RuntimeError, match="autograd"):
        y.float().sum().backward()


# -- opcheck ------------------------------------------------------------------------------


def _opcheck_cases():
    x = randn(5, 1024)
    weight = randn(1024, seed=1) + 1
    positions = torch.arange(5, device="cuda")
    return {
        "rms_norm": (torch.ops.specdsl.rms_norm.default, (x, weight, 1e-6)),
        "fused_add_rms_norm": (torch.ops.specdsl.fused_add_rms_norm.default,
                               (x, randn(5, 1024, seed=2), weight, 1e-6)),
        "softmax": (torch.ops.specdsl.softmax.default, (x, 0.5)),
        "rotary_embedding": (torch.ops.specdsl.rotary_embedding.default,
                             (positions, randn(5, 4, 64), randn(5, 2, 64, seed=3), 64, 10000.0,
                              "neox", None)),
        "silu_and_mul": (torch.ops.specdsl.silu_and_mul.default, (x,)),
        "dynamic_fp8": (torch.ops.specdsl.dynamic_per_token_scaled_fp8_quant.default, (x,)),
        "static_fp8": (torch.ops.specdsl.static_scaled_fp8_quant.default,
                       (x, torch.tensor([0.05], device="cuda"))),
        "group_fp8": (torch.ops.specdsl.per_token_group_quant_fp8.default, (x,)),
        **_fused_quant_opcheck_cases(x, weight),
    }


def _fused_quant_opcheck_cases(x, weight):
    """The fused FP8 epilogues' ops, one a scale mode."""
    ops, static = torch.ops.specdsl, torch.tensor([0.05], device="cuda")
    found = {}
    for mode in ("dynamic", "static", "group"):
        scale = (static,) if mode == "static" else ()
        found[f"rms_norm_quant_{mode}"] = (
            getattr(ops, f"rms_norm_quant_{mode}").default, (x, weight, *scale, 1e-6))
        found[f"fused_add_rms_norm_quant_{mode}"] = (
            getattr(ops, f"fused_add_rms_norm_quant_{mode}").default,
            (x, randn(5, 1024, seed=4), weight, *scale, 1e-6))
        found[f"silu_and_mul_quant_{mode}"] = (
            getattr(ops, f"silu_and_mul_quant_{mode}").default, (randn(5, 2048, seed=5), *scale))
    return found


@pytest.mark.parametrize("name", ["rms_norm", "fused_add_rms_norm", "softmax",
                                  "rotary_embedding", "silu_and_mul", "dynamic_fp8",
                                  "static_fp8", "group_fp8"]
                         + [f"{base}_{mode}" for base in ("rms_norm_quant",
                                                          "fused_add_rms_norm_quant",
                                                          "silu_and_mul_quant")
                            for mode in ("dynamic", "static", "group")])
def test_opcheck(name):
    """torch.library.opcheck passes: schema (declared mutations), fake tensors, autograd
    registration and AOT dispatch with dynamic shapes."""
    op, args = _opcheck_cases()[name]
    torch.library.opcheck(op, args)


# -- requests, streams, devices --------------------------------------------------------------


def test_second_call_builds_no_request():
    """A call with a dtype and shape seen before finds its request: no spec is built."""
    x, weight = randn(3, 1536), randn(1536, seed=1)
    sd.rms_norm(x, weight, 1e-6)
    before = specs.rms_norm.cache_info()
    sd.rms_norm(randn(9, 1536, seed=2), weight, 1e-6)
    after = specs.rms_norm.cache_info()
    assert (after.misses, after.hits) == (before.misses, before.hits + 1)


def test_launches_on_the_current_stream():
    """An op called under torch.cuda.stream(s) is ordered after work queued on s: it reads
    what a delayed copy on s writes."""
    source, weight = randn(64, 4096), randn(4096, seed=1) + 1
    x = torch.zeros_like(source)
    sd.rms_norm(x, weight, 1e-6)  # compiled and loaded before the timed part
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(100_000_000)  # keeps s busy for tens of ms
        x.copy_(source)
        y = sd.rms_norm(x, weight, 1e-6)
    stream.synchronize()
    assert _error(y, rmsnorm.reference(f64(source), f64(weight), 1e-6)) <= TOLERANCE[torch.bfloat16]


def test_one_executor_per_device():
    """The ops share one executor for a device, which launches on that device."""
    assert sd.executor(0) is sd.executor("cuda:0") is sd.executor(torch.device("cuda", 0))
    assert sd.executor(0).device_id == 0


@pytest.mark.parametrize("call,message", [
    (lambda x: sd.fused_add_rms_norm(x, x, torch.ones(4096, dtype=x.dtype, device="cuda"), 1e-6),
     r"x and residual overlap in memory"),
    (lambda x: sd.rotary_embedding(torch.arange(16, device="cuda"), x.view(16, 2048),
                                   x.view(16, 2048), 64),
     r"q and k overlap in memory"),
])
def test_overlapping_tensors_refused(call, message):
    """In-place ops refuse tensors that share memory with what they read."""
    with pytest.raises(LaunchError, match=message):
        call(randn(8, 4096))


def test_misaligned_view_refused():
    """A contiguous view that does not start on a 16-byte boundary is refused by the launch."""
    flat = randn(8 * 4096 + 1)
    with pytest.raises(LaunchError, match=r"aligned to 16 bytes"):
        sd.rms_norm(flat[1:].view(8, 4096), randn(4096, seed=1), 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_odd_row_views_are_realigned(dtype):
    """A row walked in a window (odd lengths) needs 16-byte aligned tensors; a row slice
    such as ``logits[1:]`` starts 2 or 4 bytes off. The ops copy such a tensor into an
    aligned one (and write an in-place residual back), with the results of aligned calls;
    the row before the slice is left as it was."""
    cols = 4097
    x, weight = randn(9, cols, dtype=dtype)[1:], (randn(cols + 1, dtype=dtype, seed=1) + 1)[1:]
    assert x.data_ptr() % 16 and weight.data_ptr() % 16 and specs.rms_norm(
        cols, 1e-6, dtype, False).windowed
    assert torch.equal(sd.softmax(x, 0.5), sd.softmax(x.clone(), 0.5))
    assert torch.equal(sd.rms_norm(x, weight, 1e-6), sd.rms_norm(x.clone(), weight.clone(), 1e-6))
    (q, scale), (q_aligned, scale_aligned) = sd.scaled_fp8_quant(x), sd.scaled_fp8_quant(x.clone())
    assert torch.equal(q.view(torch.uint8), q_aligned.view(torch.uint8))
    assert torch.equal(scale, scale_aligned)
    base = randn(9, cols, dtype=dtype, seed=2)
    residual, first_row, aligned = base[1:], base[0].clone(), base[1:].clone()
    y = sd.fused_add_rms_norm(x, residual, weight, 1e-6)
    assert torch.equal(y, sd.fused_add_rms_norm(x.clone(), aligned, weight.clone(), 1e-6))
    assert torch.equal(residual, aligned) and torch.equal(base[0], first_row)


# -- the eager fast path -----------------------------------------------------------------------


def _eager_pairs():
    """``{name: (public call, op call, inputs)}``: each call takes a list of the inputs and
    returns its outputs as a tuple."""
    ops = torch.ops.specdsl
    x, weight, residual = randn(5, 1024), randn(1024, seed=1) + 1, randn(5, 1024, seed=2)
    static = torch.tensor([0.05], device="cuda")
    rope = (torch.arange(5, device="cuda"), randn(5, 4, 64, seed=3), randn(5, 128, seed=4))

    def pair(public, op, *inputs):
        return (lambda a: _as_tuple(public(*a)), lambda a: _as_tuple(op(*a)), inputs)

    return {
        "rms_norm": pair(lambda *a: sd.rms_norm(*a, 1e-6),
                         lambda *a: ops.rms_norm.default(*a, 1e-6), x, weight),
        "fused_add_rms_norm": pair(lambda *a: sd.fused_add_rms_norm(*a, 1e-6),
                                   lambda *a: ops.fused_add_rms_norm.default(*a, 1e-6),
                                   x, residual, weight),
        "softmax": pair(lambda a: sd.softmax(a, 0.5), lambda a: ops.softmax.default(a, 0.5), x),
        "rotary_embedding": pair(
            lambda *a: sd.rotary_embedding(*a, 64, 500000.0),
            lambda *a: ops.rotary_embedding.default(*a, 64, 500000.0, "neox", None), *rope),
        "silu_and_mul": pair(sd.silu_and_mul, ops.silu_and_mul.default, x),
        "scaled_fp8_quant": pair(sd.scaled_fp8_quant,
                                 ops.dynamic_per_token_scaled_fp8_quant.default, x),
        "scaled_fp8_quant static": pair(lambda *a: sd.scaled_fp8_quant(*a)[0],
                                        ops.static_scaled_fp8_quant.default, x, static),
        "per_token_group_quant_fp8": pair(sd.per_token_group_quant_fp8,
                                          ops.per_token_group_quant_fp8.default, x),
        "rms_norm_quant": pair(lambda *a: sd.rms_norm_quant(*a, 1e-6, group_size=128),
                               lambda *a: ops.rms_norm_quant_group.default(*a, 1e-6),
                               x, weight),
        "fused_add_rms_norm_quant": pair(
            lambda x, r, w, s: sd.fused_add_rms_norm_quant(x, r, w, 1e-6, s)[0],
            lambda x, r, w, s: ops.fused_add_rms_norm_quant_static.default(x, r, w, s, 1e-6),
            x, residual, weight, static),
        "silu_and_mul_quant": pair(sd.silu_and_mul_quant, ops.silu_and_mul_quant_dynamic.default,
                                   x),
    }


def _as_tuple(result) -> tuple:
    return () if result is None else result if isinstance(result, tuple) else (result,)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes, to compare FP8 codes (and NaNs) exactly."""
    return t.contiguous().view(torch.uint8)


@pytest.mark.parametrize("name", ["rms_norm", "fused_add_rms_norm", "softmax",
                                  "rotary_embedding", "silu_and_mul", "scaled_fp8_quant",
                                  "scaled_fp8_quant static", "per_token_group_quant_fp8",
                                  "rms_norm_quant", "fused_add_rms_norm_quant",
                                  "silu_and_mul_quant"])
def test_fast_path_matches_the_op(name):
    """A plain eager call (which skips the dispatcher) gives bit for bit the op's outputs
    and in-place updates, and moves the inputs' version counters as the op does."""
    from specdsl.torch import _eager

    fast, op, inputs = _eager_pairs()[name]
    assert _eager.plain(*inputs)
    mine, theirs = [t.clone() for t in inputs], [t.clone() for t in inputs]
    got, expected = fast(mine), op(theirs)
    assert [(o.shape, o.dtype) for o in got] == [(o.shape, o.dtype) for o in expected]
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(got, expected, strict=True))
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(mine, theirs, strict=True))
    assert [t._version for t in mine] == [t._version for t in theirs]


# Run in a child process: torch.profiler starts PyTorch's Kineto, whose CUPTI callback can
# fire after Kineto's own objects are destroyed at interpreter exit ("double free or
# corruption" once pytest has passed; docs/torch.md, "Known issues"). The suite's process
# never starts the profiler, so its exit status stays its tests' own.
_PROFILED_CALLS = """
import os
import torch
import specdsl.torch as sd
generator = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(4, 1024, generator=generator, device="cuda").bfloat16()
weight = torch.randn(1024, generator=generator, device="cuda").bfloat16()
sd.rms_norm(x, weight, 1e-6)  # compiled and loaded before
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
    sd.rms_norm(x, weight, 1e-6)
    torch.ops.specdsl.rms_norm.default(x, weight, 1e-6)
names = [event.name for event in profile.events()]
print(names.count("specdsl::rms_norm"), len(names), flush=True)
torch.cuda.synchronize()
os._exit(0)  # no exit handlers: Kineto's teardown may abort (docs/torch.md, Known issues)
"""


def test_plain_call_skips_the_dispatcher():
    """The profiler sees the op ``specdsl::rms_norm`` for the op's call, not for the plain
    eager call of rms_norm (which calls the implementation directly)."""
    done = subprocess.run([sys.executable, "-c", _PROFILED_CALLS], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    ops, events = map(int, done.stdout.split()[-2:])
    assert (ops, events > ops) == (1, True), done.stdout


def test_plans_made_once(monkeypatch):
    """A second call with the same dtypes and shapes runs no full check, on either path."""
    from specdsl.torch import _norm

    made = []
    real = _norm._plan
    monkeypatch.setattr(_norm, "_plan", lambda *args: made.append(1) or real(*args))
    _norm._RMS_NORM_PLANS.clear()  # plans are remade on demand
    x, weight = randn(3, 1792), randn(1792, seed=1)
    for _ in range(2):
        sd.rms_norm(x, weight, 1e-6)
        torch.ops.specdsl.rms_norm.default(x, weight, 1e-6)
    assert len(made) == 1


def test_use_executor_reaches_every_plan(tmp_path):
    """After use_executor, a call whose plan was bound before launches on the new executor."""
    from specdsl import Executor

    x, weight = randn(2, 1024), randn(1024, seed=1)
    sd.rms_norm(x, weight, 1e-6)  # plan made and bound on the shared executor
    replacement = Executor(0, cache_dir=tmp_path)
    original = sd.use_executor(replacement)
    try:
        y = sd.rms_norm(x, weight, 1e-6)
        torch.cuda.synchronize()
        assert replacement.stats.misses == 1
    finally:
        sd.use_executor(original)
    assert _error(y, rmsnorm.reference(f64(x), f64(weight), 1e-6)) <= TOLERANCE[torch.bfloat16]


# -- torch.compile and CUDA graphs ------------------------------------------------------------


def _pipeline(positions, x, weight, wq, wk, static_scale):
    """Every op once; the in-place ones update tensors the function made itself."""
    h = sd.rms_norm(x, weight, 1e-5)
    q, k = h @ wq, h @ wk
    sd.rotary_embedding(positions, q, k, 64, 500000.0)
    residual = x.clone()
    y = sd.fused_add_rms_norm(q, residual, weight, 1e-5)
    codes, scale = sd.scaled_fp8_quant(sd.silu_and_mul(torch.cat((y, y), -1)))
    static_codes, _ = sd.scaled_fp8_quant(k, static_scale)
    return sd.softmax(codes.float() * scale, 0.5), residual, static_codes.float(), k


def _pipeline_inputs(seed=0, tokens=16):
    return (torch.arange(100, 100 + tokens, device="cuda"), randn(tokens, 512, seed=seed),
            randn(512, seed=seed + 1) + 1, randn(512, 512, seed=seed + 2, scale=512**-0.5),
            randn(512, 128, seed=seed + 3, scale=512**-0.5), torch.tensor([0.01], device="cuda"))


def _close(outputs, expected, tolerance=1e-2):
    for out, ref in zip(outputs, expected, strict=True):
        error = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        assert error <= tolerance, (error, out.shape)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compile_fullgraph_matches_eager(mode):
    """torch.compile(fullgraph=True) of every op matches eager, in both modes; under
    reduce-overhead it runs from a CUDA graph (Inductor skipped none)."""
    from torch._dynamo.utils import counters

    inputs = _pipeline_inputs()
    with torch.no_grad():
        expected = _pipeline(*inputs)
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(_pipeline, mode=mode, fullgraph=True)
        for _ in range(3):  # reduce-overhead: warm-up, record, replay
            torch.compiler.cudagraph_mark_step_begin()
            outputs = compiled(*inputs)
        _close(outputs, expected)
    assert counters["inductor"]["cudagraph_skips"] == 0


def test_compile_reduce_overhead_skips_graphs_for_mutated_inputs():
    """As docs/torch.md says: an in-place op on a compiled function's own input makes
    reduce-overhead skip CUDA graphs (an Inductor rule); the results stay right."""
    from torch._dynamo.utils import counters

    def rotate(positions, q, k):
        sd.rotary_embedding(positions, q, k, 64)
        return q * 2

    positions = torch.arange(8, device="cuda")
    q, k = randn(8, 256), randn(8, 64, seed=1)
    q_eager, k_eager = q.clone(), k.clone()
    sd.rotary_embedding(positions, q_eager, k_eager, 64)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(rotate, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for _ in range(2):
            q_in, k_in = q.clone(), k.clone()
            out = compiled(positions, q_in, k_in)
    assert counters["inductor"]["cudagraph_skips"] >= 1
    assert torch.equal(out, q_eager * 2) and torch.equal(k_in, k_eager)


def test_cuda_graph_capture_and_replay():
    """Every op captured by hand in a CUDA graph replays on new inputs as eager computes them."""
    static = [t.clone() for t in _pipeline_inputs(seed=0)]
    with torch.no_grad():
        _pipeline(*static)  # warm-up: compiles and loads every module before the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = _pipeline(*static)
        fresh = _pipeline_inputs(seed=10)
        for target, source in zip(static, fresh, strict=True):
            target.copy_(source)
        graph.replay()
        expected = _pipeline(*fresh)
    torch.cuda.synchronize()
    _close(captured, expected)
