"""RMSNorm: rendering, nvJitLink assembly, refused requests, reference, GPU results."""

from __future__ import annotations

import re

import numpy as np
import pytest

from golden import check_golden
from ptxcheck import assemble, assert_no_spills
from specdsl import SpecError, render
from specdsl._cli.main import main
from specdsl._spec.dtype import DType
from specdsl.kernels import RMSNorm
from specdsl.kernels.rmsnorm import example, reference

# Smallest row, an odd LLM size (2880: guarded last sweep), a common one, the largest.
HIDDEN = {DType.BF16: (8, 2880, 4096, 65536), DType.F16: (8, 2880, 4096, 65536),
          DType.F32: (4, 2880, 4096, 32768)}
GRID = [(dtype, hidden, fused) for dtype, sizes in HIDDEN.items() for hidden in sizes
        for fused in (False, True)]


def _params(ptx: str) -> list[str]:
    """The ``.param`` names of the entry, in order."""
    return re.findall(r"\.param \.\w+(?: \.ptr \.global \.align \d+)? (\w+)", ptx)


def test_eps_renders_as_exact_f32_immediate():
    """RMSNorm(hidden=4096, eps=1e-6) bakes eps as the f32 immediate 0f358637BD."""
    assert "0f358637BD" in render(RMSNorm(hidden=4096, eps=1e-6))


def test_cli_render_bakes_eps(capsys):
    """`specdsl render rmsnorm hidden=4096 eps=1e-6` prints PTX holding 0f358637BD."""
    assert main(["render", "rmsnorm", "hidden=4096", "eps=1e-6"]) == 0
    out = capsys.readouterr().out
    assert ".visible .entry rmsnorm(" in out and "0f358637BD" in out


def test_defaults():
    """The defaults are bf16, eps 1e-6, no residual, 256 threads for hidden 4096."""
    spec = RMSNorm(hidden=4096)
    assert (spec.dtype, spec.eps, spec.fused_residual, spec.block) == (DType.BF16, 1e-6, False, 256)


@pytest.mark.parametrize("dtype,hidden,fused", GRID)
def test_assembles_for_sm90(dtype, hidden, fused):
    """Every dtype, both residual modes and small/odd/common/largest rows assemble for sm_90."""
    assert assemble(RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused)).cubin


@pytest.mark.parametrize("hidden", [4096, 8192])
@pytest.mark.parametrize("fused", [False, True])
def test_common_sizes_do_not_spill(hidden, fused):
    """At LLM hidden sizes the row fits the registers ptxas is given: no spills."""
    compiled = assemble(RMSNorm(hidden=hidden, fused_residual=fused))
    assert_no_spills(compiled)


def test_golden_fused_bf16():
    """The fused bf16 hidden=4096 request renders exactly the reviewed PTX."""
    check_golden("rmsnorm_bf16_4096_fused.ptx",
                 render(RMSNorm(hidden=4096, eps=1e-6, fused_residual=True)))


@pytest.mark.parametrize("fused,names", [(False, ["x", "weight", "y", "rows"]),
                                         (True, ["x", "residual", "weight", "y", "rows"])])
def test_param_order(fused, names):
    """The entry's .param order is x, [residual], weight, y, rows, as documented."""
    assert _params(render(RMSNorm(hidden=4096, fused_residual=fused))) == names


@pytest.mark.parametrize("hidden,dtype", [(4096, "bf16"), (2880, "f16"), (32768, "f32"), (8, "bf16")])
def test_block_matches_reqntid(hidden, dtype):
    """launch_dims gives the block the PTX declares with .reqntid."""
    spec = RMSNorm(hidden=hidden, dtype=dtype)
    declared = int(re.search(r"\.reqntid (\d+)", render(spec)).group(1))
    assert spec.launch_dims(5) == ((5, 1, 1), (declared, 1, 1))


@pytest.mark.parametrize("fields,message", [
    (dict(hidden=4100), "RMSNorm.hidden = 4100 is invalid: expected a positive multiple of 8"),
    (dict(hidden=4098, dtype="f32"), "expected a positive multiple of 4"),
    (dict(hidden=0), "RMSNorm.hidden = 0 is invalid"),
    (dict(hidden=65544), "expected at most 65536 elements of bf16"),
    (dict(hidden=32772, dtype="f32"), "expected at most 32768 elements of f32"),
    (dict(hidden=4096, eps=0.0), "RMSNorm.eps = 0.0 is invalid: expected a float > 0"),
    (dict(hidden=4096, eps=-1e-5), "expected a float > 0"),
    (dict(hidden=4096, eps=1e-50), "RMSNorm.eps = 1e-50 is invalid"),
    (dict(hidden=4096, dtype="f8e4m3"), "RMSNorm.dtype = DType.F8E4M3 is invalid: expected one of"),
    (dict(hidden=4096, block=48), "RMSNorm.block = 48 is invalid: expected a multiple of 32"),
    (dict(hidden=65536, block=512), "expected at least 1024 threads"),
])
def test_refused_requests(fields, message):
    """Shapes the template cannot handle are refused at construction, naming field and value."""
    with pytest.raises(SpecError, match=re.escape(message)):
        RMSNorm(**fields)


@pytest.mark.parametrize("rows", [0, -1, 2**31, True, 3.0])
def test_launch_dims_refuses_bad_rows(rows):
    """launch_dims refuses a row count outside 1 .. 2**31 - 1 (or not an int)."""
    with pytest.raises(SpecError, match="RMSNorm rows = .* expected an int from 1"):
        RMSNorm(hidden=4096).launch_dims(rows)


def test_reference_values():
    """The float64 reference divides by the root mean square plus eps, then scales."""
    y = reference(np.array([[3.0, 4.0]]), np.array([1.0, 2.0]), eps=0.5)
    rms = np.sqrt((9 + 16) / 2 + 0.5)
    np.testing.assert_allclose(y, [[3 / rms, 8 / rms]], rtol=1e-15)


def test_example_fused_expects_rounded_sum():
    """The fused example expects residual = x + residual rounded to bf16 and y from that sum."""
    from specdsl.kernels.case import from_bits, to_bits

    case = example(RMSNorm(hidden=16, fused_residual=True), np.random.default_rng(3), rows=2)
    args = dict(case.args)
    x = from_bits(args["x"], DType.BF16)
    r = from_bits(args["residual"].initial, DType.BF16)
    s = from_bits(to_bits(x + r, DType.BF16), DType.BF16)
    np.testing.assert_array_equal(case.expected["residual"], s)
    np.testing.assert_allclose(case.expected["y"],
                               reference(s, from_bits(args["weight"], DType.BF16), 1e-6))
    assert [name for name, _ in case.args] == _params(render(case.spec))


def test_bytes_moved():
    """bytes_moved counts x and y (plus residual in and out) once and the weight once."""
    assert RMSNorm(hidden=4096).bytes_moved(10) == (2 * 10 + 1) * 4096 * 2
    assert RMSNorm(hidden=4096, fused_residual=True).bytes_moved(10) == (4 * 10 + 1) * 4096 * 2


GPU_CASES = [
    ("bf16", 4096, False, 300), ("bf16", 4096, True, 300), ("f16", 2880, True, 77),
    ("f32", 4096, False, 64), ("bf16", 8, True, 1), ("bf16", 65536, False, 1),
    ("bf16", 65536, True, 3), ("f32", 32768, True, 2), ("f16", 8192, False, 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,fused,rows", GPU_CASES)
def test_gpu_matches_reference(dtype, hidden, fused, rows):
    """On the GPU, every output is within the dtype's tolerance of the float64 reference."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(hidden + rows)
    case = example(RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused), rng, rows=rows)
    errors = run_case(Executor(), case, rng)
    assert set(errors) == set(case.expected)
    for name, error in errors.items():
        assert error <= case.tolerance, f"{name}: relative error {error} > {case.tolerance}"
