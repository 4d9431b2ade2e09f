"""SiluMulQuant: SiluMul with an FP8 E4M3 epilogue: PTX, refused requests, reference, and on
the GPU, codes equal to SiluMul then Fp8Quant's."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ptxcheck import assemble, assert_no_spills
from specdsl import DType, RenderError, SpecError, render
from specdsl.kernels import SiluMul, SiluMulQuant
from specdsl.kernels.case import TOLERANCE, from_bits, to_bits
from specdsl.kernels.silu_mul_quant import example, reference

MODES = ("dynamic", "static", "group")


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("d", [1, 7, 2880, 4096, 4097, 14336, 18432, 28672])
@pytest.mark.parametrize("mode", MODES)
def test_assembles_without_spills(dtype, d, mode):
    """Every mode at odd and LLM MLP widths assembles for sm_90 without spills."""
    if mode == "group" and d % 128:
        pytest.skip("group scales need whole groups of 128")
    assert_no_spills(assemble(SiluMulQuant(d=d, dtype=dtype, scale_mode=mode)))


def test_widest_llm_row_assembles():
    """Llama-3.1-405B's MLP width (53248) stays in registers (832 threads x 8 vectors)."""
    spec = SiluMulQuant(d=53248)
    assert spec.block == 832
    assert_no_spills(assemble(spec))


def test_param_order_and_no_y():
    """The entry's .param order is x, q, scale, tokens; no dtype output is stored."""
    ptx = render(SiluMulQuant(d=4096))
    assert re.findall(r"\.param \.\w+(?: \.ptr \.global \.align \d+)? (\w+)", ptx) == [
        "x", "q", "scale", "tokens"]
    assert "st.global.v4.b32" not in ptx and ptx.count("st.global.v2.b32") == 2


def test_same_activation_as_silu_mul():
    """The element math is SiluMul's, instruction for instruction (activation.ptx.j2)."""
    def math(ptx: str) -> list[str]:
        return [line.strip() for line in ptx.splitlines()
                if re.match(r"\s+(ex2|rcp\.approx|mul\.f32|add\.f32\s+%f4)", line)]
    assert set(math(render(SiluMulQuant(d=4096)))) == set(math(render(SiluMul(d=4096))))


@pytest.mark.parametrize("fields,message", [
    (dict(d=4097, scale_mode="group"), "SiluMulQuant.scale_mode = 'group' is invalid: "
                                       "expected d to be a multiple of 128"),
    (dict(d=65544), "SiluMulQuant.d = 65544 is invalid: expected at most 65536 elements of bf16"),
    (dict(d=4096, block=32), "SiluMulQuant.block = 32 is invalid: expected at least 64 threads"),
    (dict(d=0), "SiluMulQuant.d = 0 is invalid: expected a positive number of elements"),
])
def test_refused(fields, message):
    """Requests the kernel cannot take are refused at construction, naming field and value."""
    with pytest.raises(SpecError, match=re.escape(message)):
        SiluMulQuant(**fields)


def test_needs_fp8_conversion():
    """Rendering for a target without cvt...e4m3x2 is refused."""
    with pytest.raises(RenderError, match=r"SiluMulQuant: cvt.rn.satfinite.e4m3x2.f32 needs"):
        render(SiluMulQuant(d=4096, dtype="f32"), "sm_80")


def test_example_args_and_bytes():
    """The example passes x, q, scale, tokens; bytes_moved counts x, q and the scales."""
    for mode in MODES:
        case = example(SiluMulQuant(d=256, scale_mode=mode), np.random.default_rng(2), tokens=3)
        assert [name for name, _ in case.args] == ["x", "q", "scale", "tokens"]
    assert SiluMulQuant(d=256, scale_mode="group").bytes_moved(3) == 3 * 256 * 5 + 3 * 2 * 4


GPU = [(dtype, d, mode) for dtype in ("bf16", "f16", "f32") for d in (4096, 14336)
       for mode in MODES] + [("bf16", 4097, "dynamic"), ("f16", 7, "static"),
                             ("bf16", 18432, "group"), ("bf16", 53248, "dynamic"),
                             ("f32", 2880, "static"), ("f32", 2944, "group"),
                             # the widest rows: 8 sweeps of 16-byte vectors a thread
                             ("bf16", 65536, "group"), ("f16", 65536, "static"),
                             ("f32", 32768, "dynamic")]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,d,mode", GPU)
def test_gpu_codes_equal_the_unfused_pair(dtype, d, mode):
    """On the GPU, the fused codes and scales equal, bit for bit, those of SiluMul followed
    by Fp8Quant's f32 quantization steps (fp8_quant.kernel_codes of SiluMul's output): the
    fused kernel rounds y to dtype before quantizing, as the pair does; the decoded codes
    are within TOLERANCE of the float64 reference."""
    from differential import compare, run_quantized, run_silu_mul, to_device
    from specdsl import Executor
    from specdsl.kernels.fp8_quant import kernel_codes

    torch = pytest.importorskip("torch")
    executor = Executor()
    spec = SiluMulQuant(d=d, dtype=dtype, scale_mode=mode)
    rng = np.random.default_rng(d + len(mode))
    tokens = 37
    x = from_bits(to_bits(2.0 * rng.standard_normal((tokens, 2 * d)), spec.dtype), spec.dtype)
    if d % SiluMul(dtype=dtype).lanes == 0:
        y = run_silu_mul(executor, torch, SiluMul(d=d, dtype=dtype), x)
    else:  # SiluMul takes whole 16-byte vectors: the reference rounding stands in
        y = reference(x, d, spec.dtype, "dynamic")[2]
    static = float(np.float32(np.abs(y).max() / 400.0))
    codes, scales = kernel_codes(y, mode, static if mode == "static" else None)
    shape = {"dynamic": (tokens,), "group": (tokens, d // 128)}.get(mode, static)
    out = run_quantized(executor, torch, spec, [to_device(torch, to_bits(x, spec.dtype),
                                                          spec.dtype)], tokens, d, shape)
    if d % SiluMul(dtype=dtype).lanes == 0:
        np.testing.assert_array_equal(out["q"], from_bits(codes, DType.F8E4M3),
                                      err_msg=repr(spec))
        if mode != "static":
            np.testing.assert_array_equal(out["scale"], scales.astype(np.float64))
    quotient, _, _ = reference(x, d, spec.dtype, mode, static)
    compare(out["q"], quotient, DType.F8E4M3, TOLERANCE[DType.F8E4M3], repr(spec))


@pytest.mark.parametrize("d,dtype,block", [
    (dd, t, b) for dd in (7, 4097, 4100, 2880, 14336) for t in ("bf16", "f32") for b in (None, 1024)])
def test_every_vector_and_code_once(d, dtype, block):
    """In a model of the CTA (ptxsim.row_coverage), every gate and up vector of the token's
    row is loaded once (up vectors follow the gate's d / vector), every code stored once."""
    from ptxsim import row_coverage

    spec = SiluMulQuant(d=d, dtype=dtype, **({"block": block} if block else {}))
    ptx = render(spec)
    assert row_coverage(ptx, "ld", ("%rd4",), spec.vector_bytes, spec.block) == [
        {i: 1 for i in range(2 * d // spec.vector)}]
    assert row_coverage(ptx, "st", ("%rd6",), spec.vector, spec.block) == [
        {i: 1 for i in range(d // spec.vector)}]
