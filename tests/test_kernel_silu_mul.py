"""SiluMul: assembles with nvJitLink; golden PTX; refused values; reference; GPU accuracy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from golden import check_golden
from ptxcheck import assemble, assert_no_spills
from specdsl import DType, SpecError, render
from specdsl.kernels import SiluMul
from specdsl.kernels.case import Output, from_bits
from specdsl.kernels.silu_mul import example, reference


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("unroll", [1, 4])
def test_assembles(dtype, unroll):
    """Each dtype and unroll assembles for sm_90 without spills."""
    compiled = assemble(SiluMul(dtype=dtype, d=4096, unroll=unroll))
    assert_no_spills(compiled)


def test_assembles_widest_row():
    """The widest row (d = 2^20) with the deepest unroll assembles, within 64 registers."""
    compiled = assemble(SiluMul(dtype="bf16", d=2**20, unroll=4))
    assert_no_spills(compiled)


def test_golden_bf16():
    """The bf16 PTX (d=4096, unroll 2) matches its golden file."""
    check_golden("silu_mul_bf16_sm_90.ptx", render(SiluMul(dtype="bf16", d=4096)))


def test_vector_loads_and_stores():
    """Each unrolled step loads a 16-byte gate and up vector and stores one 16-byte vector."""
    ptx = render(SiluMul(dtype="f16", d=4096, unroll=3))
    assert ptx.count("ld.global.nc.v4.b32") == 6 and ptx.count("st.global.v4.b32") == 3


def test_row_stride_baked():
    """The gate-to-up distance is d * element size bytes, baked as an immediate."""
    ptx = render(SiluMul(dtype="f32", d=1000))
    assert "add.u64             %rd6, %rd4, 4000;" in ptx


@pytest.mark.parametrize("dtype, d", [("bf16", 4100), ("f32", 4098), ("f16", 0)])
def test_d_refused(dtype, d):
    """d must be a positive multiple of one 16-byte vector of the dtype."""
    lanes = 16 // DType.parse(dtype).size
    with pytest.raises(SpecError, match=f"SiluMul.d = {d} is invalid: expected a positive "
                                        f"multiple of {lanes}"):
        SiluMul(dtype=dtype, d=d)


def test_d_too_wide_refused():
    """d above 2^20 is refused."""
    with pytest.raises(SpecError, match="SiluMul.d = 2097152 is invalid: expected at most 1048576"):
        SiluMul(d=2**21)


@pytest.mark.parametrize("unroll", [0, 5])
def test_unroll_refused(unroll):
    """unroll must be 1 to 8."""
    with pytest.raises(SpecError, match=f"SiluMul.unroll = {unroll} is invalid: expected a value from 1 to 4"):
        SiluMul(unroll=unroll)


def test_dtype_refused():
    """Only f32, f16 and bf16 inputs."""
    with pytest.raises(SpecError, match="SiluMul.dtype = DType.F8E4M3 is invalid: expected one of f32, f16, bf16"):
        SiluMul(dtype="f8e4m3")


def test_grid_covers_tokens():
    """The grid covers tokens * d / lanes vectors, unroll * block per CTA."""
    assert SiluMul(dtype="bf16", d=4096, unroll=2, block=256).grid(1) == (1, 1, 1)
    assert SiluMul(dtype="bf16", d=4096, unroll=2, block=256).grid(2) == (2, 1, 1)
    assert SiluMul(dtype="f32", d=4096, unroll=1, block=128).grid(3) == (24, 1, 1)


def test_grid_refuses_u32_overflow():
    """A launch needing 2^31 vectors or more is refused (the kernel indexes in u32)."""
    with pytest.raises(SpecError, match="SiluMul.grid: tokens=4194304 gives 2147483648 16-byte vectors"):
        SiluMul(dtype="bf16", d=4096).grid(2**22)


def test_bytes_moved():
    """x is read once and out written once: 3 * tokens * d elements."""
    assert SiluMul(dtype="bf16", d=4096).bytes_moved(16) == 3 * 16 * 4096 * 2


def test_reference_values():
    """silu(a) * b: silu(1) = 1 / (1 + e^-1), silu(0) = 0, silu(-40) ~ 0."""
    x = np.array([[1.0, 0.0, -40.0, 3.0, 5.0, 7.0]])
    want = [3.0 / (1.0 + math.exp(-1.0)), 0.0, -40.0 * 7.0 / (1.0 + math.exp(40.0))]
    np.testing.assert_allclose(reference(x, 3)[0], want, rtol=1e-15)


def test_example_case():
    """The example's expected output is the reference of its rounded inputs."""
    spec = SiluMul(dtype="bf16", d=16, block=32)
    case = example(spec, np.random.default_rng(2), tokens=5)
    args = dict(case.args)
    np.testing.assert_array_equal(case.expected["out"], reference(from_bits(args["x"], DType.BF16), 16))
    assert args["out"] == Output((5, 16), DType.BF16) and args["tokens"] == np.uint32(5)
    assert case.grid == spec.grid(5) and case.block == (32, 1, 1) and case.tolerance == 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("d, tokens, unroll, block", [
    (4096, 37, 2, 256),      # partial last CTA
    (8192, 1, 4, 128),       # one token
    (8, 3, 1, 32),           # narrowest row
    (4104, 5, 3, 64),        # row not a multiple of the CTA's span
    (2**18, 2, 4, 1024),     # a wide row, the largest CTA
])
def test_gpu_matches_reference(dtype, d, tokens, unroll, block):
    """On the GPU, out matches the float64 reference within the dtype's tolerance."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    spec = SiluMul(dtype=dtype, d=d, unroll=unroll, block=block)
    rng = np.random.default_rng(d + tokens)
    case = example(spec, rng, tokens=tokens)
    errors = run_case(Executor(), case, rng)
    assert errors["out"] <= case.tolerance, errors


@pytest.mark.parametrize("d,dtype,instruction", [
    (4096, "bf16", "shr.u32             %r5, %v0, 9;"), (8192, "f32", "shr.u32             %r5, %v0, 11;"),
    (11008, "bf16", "div.u32             %r5, %v0, 1376;")])
def test_row_of_a_vector(d, dtype, instruction):
    """The row of a vector is a shift when the vectors per row are a power of two (ptxas
    turns div.u32 even by 512 into a reciprocal sequence ahead of the first load)."""
    assert instruction in render(SiluMul(d=d, dtype=dtype))
