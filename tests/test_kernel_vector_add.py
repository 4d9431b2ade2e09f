"""VectorAdd: every dtype assembles with nvJitLink; golden PTX; refused values."""

from __future__ import annotations

import numpy as np
import pytest

from golden import check_golden
from ptxcheck import assemble, assert_no_spills
from specdsl import DType, SpecError, render
from specdsl.kernels import VectorAdd
from specdsl.kernels.case import Output, from_bits
from specdsl.kernels.vector_add import example


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("target", ["sm_90", "sm_90a", "sm_100"])
def test_assembles(dtype, target):
    """Each dtype assembles for Hopper and Blackwell targets without spills."""
    compiled = assemble(VectorAdd(dtype=dtype), target)
    assert_no_spills(compiled)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_assembles_for_ampere(dtype):
    """f32 and f16 also assemble for sm_80."""
    assemble(VectorAdd(dtype=dtype), "sm_80")


def test_golden_bf16():
    """The bf16 PTX matches its golden file."""
    check_golden("vector_add_bf16_sm_90.ptx", render(VectorAdd(dtype="bf16")))


def test_vector_loads():
    """Operands move as 16-byte vectors."""
    ptx = render(VectorAdd(dtype="f16"))
    assert ptx.count("ld.global.nc.v4.b32") == 2 and "st.global.v4.b32" in ptx


@pytest.mark.parametrize("block", [0, 100, 2048])
def test_block_refused(block):
    """Threads per CTA must be a whole number of warps up to 1024."""
    with pytest.raises(SpecError, match=f"VectorAdd.block = {block} is invalid: expected a multiple of 32"):
        VectorAdd(block=block)


def test_grid_covers_n():
    """The grid covers every element with 16-byte vectors per thread."""
    assert VectorAdd(dtype="f32", block=256).grid(1024) == (1, 1, 1)
    assert VectorAdd(dtype="f32", block=256).grid(1025) == (2, 1, 1)
    assert VectorAdd(dtype="bf16", block=128).grid(2049) == (3, 1, 1)


def test_launch_dims_and_bytes_moved():
    """launch_dims is (grid, block) for n elements; bytes_moved counts a, b and out once."""
    spec = VectorAdd(dtype="bf16", block=128)
    assert spec.launch_dims(2049) == ((3, 1, 1), (128, 1, 1))
    assert spec.launch_dims(0) == ((1, 1, 1), (128, 1, 1))
    assert spec.bytes_moved(1000) == 3 * 1000 * 2


@pytest.mark.parametrize("n", [-1, 2.5, 2**31 * 256 * 4])
def test_grid_refuses_bad_counts(n):
    """A negative, non-integer or too large element count is refused, naming it."""
    with pytest.raises(SpecError, match=r"VectorAdd n = .* is invalid: expected"):
        VectorAdd(dtype="f32", block=256).launch_dims(n)


def test_example_reference():
    """The example's reference is the float64 sum of its (rounded) inputs."""
    case = example(VectorAdd(dtype="bf16"), np.random.default_rng(1), n=37)
    args = dict(case.args)
    a, b = from_bits(args["a"], DType.BF16), from_bits(args["b"], DType.BF16)
    np.testing.assert_array_equal(case.expected["out"], a + b)
    assert args["out"] == Output((37,), DType.BF16)
    assert args["n"] == np.uint64(37) and case.grid == (1, 1, 1)
