"""Fp8Quant: assembles with nvJitLink; golden PTX; scale modes; refused values; a token over
several CTAs (split); GPU accuracy."""

from __future__ import annotations

import re

import numpy as np
import pytest

from golden import check_golden
from ptxcheck import assemble, assert_no_spills
from specdsl import DType, RenderError, SpecError, Target, render
from specdsl.kernels import Fp8Quant
from specdsl.kernels._rows import most_vectors_per_thread, row_vectors
from specdsl.kernels.case import TOLERANCE, Output, from_bits, to_bits
from specdsl.kernels.fp8_quant import E4M3_MAX, MIN_SCALE, example, reference


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("hidden", [4096, 5120])
def test_assembles(dtype, hidden):
    """Each dtype, with whole and ragged rows (5120 bf16 = 2.5 vectors per thread), assembles without spills."""
    compiled = assemble(Fp8Quant(dtype=dtype, hidden=hidden))
    assert_no_spills(compiled)


@pytest.mark.parametrize("kw", [
    dict(scale_mode="static_param"),
    dict(scale_mode="static_baked", static_scale=0.05),
    dict(block=1024, hidden=65536),   # the widest bf16 row: 8 vectors per thread
    dict(block=32, hidden=64),        # one warp, one partial vector round
])
def test_assembles_modes_and_extremes(kw):
    """Static scale modes and the extreme row sizes assemble without spills."""
    compiled = assemble(Fp8Quant(**kw))
    assert_no_spills(compiled)


def test_golden_bf16_dynamic():
    """The bf16 dynamic PTX (hidden 4096, 256 threads) matches its golden file."""
    check_golden("fp8_quant_bf16_dynamic_sm_90.ptx", render(Fp8Quant(dtype="bf16", hidden=4096)))


def test_needs_sm_89():
    """Rendering for a target without cvt...e4m3x2 is refused."""
    with pytest.raises(RenderError, match=r"cvt.rn.satfinite.e4m3x2.f32 needs sm_90 or newer, "
                                          r"or sm_89 with PTX ISA 8.1"):
        render(Fp8Quant(), "sm_80")


def test_parameters_follow_scale_mode():
    """dynamic and static_param take a scale pointer; static_baked takes none and bakes 1/scale."""
    assert ".param .u64 .ptr .global .align 4 scale" in render(Fp8Quant())
    assert "ld.global.nc.f32" in render(Fp8Quant(scale_mode="static_param"))
    baked = render(Fp8Quant(scale_mode="static_baked", static_scale=0.5))
    assert "scale" not in baked.split("{", 1)[0].split("fp8_quant(")[1]
    assert "mov.b32             %f11, 0f40000000;" in baked


def test_ragged_rows_predicated():
    """Only a row that does not fill its last vector round predicates its last load and store."""
    assert "@%p0 ld.global.nc.v4.b32" in render(Fp8Quant(dtype="bf16", hidden=5120))
    assert "@%p0" not in render(Fp8Quant(dtype="bf16", hidden=4096))


def test_block_is_baked():
    """Threads per CTA are baked: the entry requires exactly that many (.reqntid)."""
    assert ".reqntid 128, 1, 1" in render(Fp8Quant(block=128))


@pytest.mark.parametrize("kw, message", [
    (dict(hidden=0), "Fp8Quant.hidden = 0 is invalid: expected a positive number of elements"),
    (dict(hidden=2**20 + 1), "Fp8Quant.hidden = 1048577 is invalid: expected at most 1048576"),
    (dict(block=48), "Fp8Quant.block = 48 is invalid: expected a multiple of 32"),
    (dict(scale_mode="static_baked"),
     "Fp8Quant.static_scale = None is invalid: scale_mode static_baked needs a scale from 2\\^-126"),
    (dict(scale_mode="static_baked", static_scale=0.0), "Fp8Quant.static_scale = 0.0 is invalid"),
    (dict(static_scale=0.5),
     "Fp8Quant.static_scale = 0.5 is invalid: expected None: only scale_mode static_baked bakes a scale"),
    (dict(scale_mode="per_tensor"), "Fp8Quant.scale_mode must be one of 'dynamic', 'static_baked', 'static_param'"),
])
def test_refused(kw, message):
    """Shapes and values the template cannot handle are refused, naming the field."""
    with pytest.raises(SpecError, match=message):
        Fp8Quant(**kw)


def test_grid_one_cta_per_token():
    """One CTA per token; zero tokens are refused, naming tokens and the bound."""
    assert Fp8Quant().launch_dims(7) == ((7, 1, 1), (256, 1, 1))
    assert Fp8Quant().grid(7) == (7, 1, 1)
    with pytest.raises(SpecError, match=r"Fp8Quant tokens = 0 is invalid: expected an int from "
                                        r"1 to 2147483647 \(one CTA per row\)"):
        Fp8Quant().grid(0)


def test_bytes_moved():
    """x read once, one byte per code written, one f32 scale per token."""
    assert Fp8Quant(dtype="bf16", hidden=4096).bytes_moved(3) == 3 * 4096 * 3 + 12


def test_reference_dynamic_scale():
    """The dynamic scale maps each row's largest magnitude to 448."""
    x = np.array([[1.0, -896.0, 3.0], [0.5, 0.25, -0.125]])
    q, scale = reference(x)
    np.testing.assert_array_equal(scale, [2.0, 0.5 / 448])
    np.testing.assert_allclose(q, [[0.5, -448.0, 1.5], [448.0, 224.0, -112.0]], rtol=1e-15)


def test_reference_zero_row():
    """An all-zero row gets the floor scale 2^-126 and zero quotients."""
    q, scale = reference(np.zeros((1, 16)))
    assert scale[0] == MIN_SCALE == 2.0**-126 and not q.any()


def test_reference_static_saturates():
    """A static scale saturates quotients beyond +-448."""
    q, scale = reference(np.array([[1.0, -1000.0]]), 0.5)
    np.testing.assert_array_equal(q, [[2.0, -E4M3_MAX]])


def test_example_has_zero_row_and_scale_output():
    """The dynamic example zeroes row 0 and expects the f32 scale output."""
    case = example(Fp8Quant(dtype="f16", hidden=64, block=32), np.random.default_rng(5), tokens=4)
    args = dict(case.args)
    assert not args["x"][0].any() and args["q"] == Output((4, 64), DType.F8E4M3)
    assert args["scale"] == Output((4,), DType.F32) and case.expected["scale"][0] == MIN_SCALE


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("hidden, block, tokens", [
    (4096, 256, 37),
    (5120, 256, 3),       # ragged last vector round
    (64, 32, 1),          # one token, one partial round
    (65536, 1024, 2),     # the widest f16/bf16 row (f32: 32768)
])
def test_gpu_dynamic(dtype, hidden, block, tokens):
    """On the GPU, codes and scales match the float64 reference; row 0 is all zero."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    if dtype == "f32":
        hidden = min(hidden, 32768)
    spec = Fp8Quant(dtype=dtype, hidden=hidden, block=block)
    rng = np.random.default_rng(hidden + tokens)
    case = example(spec, rng, tokens=tokens)
    errors = run_case(Executor(), case, rng)
    assert errors["q"] <= case.tolerance and errors["scale"] <= 1e-6, errors


@pytest.mark.gpu
def test_gpu_all_zero_rows():
    """On the GPU, all-zero rows give scale 2^-126 and zero codes (no NaN)."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(11)
    case = example(Fp8Quant(hidden=1024, block=128), rng, tokens=3, zero_rows=(0, 1, 2))
    errors = run_case(Executor(), case, rng)
    assert errors == {"q": 0.0, "scale": 0.0}


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [dict(scale_mode="static_param"),
                                dict(scale_mode="static_baked", static_scale=0.01)])
def test_gpu_static(kw):
    """On the GPU, static scales quantize (and saturate) like the reference."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(13)
    case = example(Fp8Quant(hidden=4096, **kw), rng, tokens=17)
    errors = run_case(Executor(), case, rng)
    assert errors["q"] <= case.tolerance, errors


def _warp_max_case(spec: Fp8Quant, tokens: int, value: float = 50.0):
    """`tokens` rows of N(0, 1) with +-`value` in the first vector of warp (r % warps)'s
    thread 5 of row r: the row maximum sits in each warp in turn."""
    from specdsl.kernels.case import KernelCase

    warps, lanes = spec.block // 32, spec.lanes
    x = np.random.default_rng(spec.block).standard_normal((tokens, spec.hidden))
    for r in range(tokens):
        x[r, lanes * (32 * (r % warps) + 5)] = value if r % 2 == 0 else -value
    bits = to_bits(x, spec.dtype)
    quotient, scale = reference(from_bits(bits, spec.dtype))
    return KernelCase(spec=spec, args=(("x", bits), ("q", Output(x.shape, DType.F8E4M3)),
                                       ("scale", Output((tokens,), DType.F32))),
                      grid=spec.grid(tokens), block=(spec.block, 1, 1),
                      expected={"q": quotient, "scale": scale}, tolerance=TOLERANCE[DType.F8E4M3])


@pytest.mark.gpu
def test_gpu_dynamic_scale_with_three_warps():
    """The issue's input: block=96, hidden=4096, 50.0 in warp 2's slice of row 2 gives
    scale 50/448 = 0.1116 (the reduction of before stored 0.0086, missing warp 2)."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    case = _warp_max_case(Fp8Quant(dtype="bf16", hidden=4096, block=96), tokens=3)
    assert case.expected["scale"][2] == pytest.approx(50.0 / 448)
    errors = run_case(Executor(), case)
    assert errors["scale"] <= 1e-6 and errors["q"] <= case.tolerance, errors


@pytest.mark.gpu
@pytest.mark.parametrize("block", [96, 160, 224, 288, 992])
def test_gpu_dynamic_scale_odd_warp_counts(block):
    """CTAs of 3, 5, 7, 9 and 31 warps (wrong scales, or reads past the shared array,
    before): each row's maximum, in each warp in turn, sets its scale."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    spec = Fp8Quant(dtype="bf16", hidden=16 * block, block=block)  # 2 vectors a thread
    case = _warp_max_case(spec, tokens=block // 32)
    errors = run_case(Executor(), case)
    assert errors["scale"] <= 1e-6 and errors["q"] <= case.tolerance, errors


def test_reference_ignores_nan_in_the_row_max():
    """The dynamic reference's row max skips NaN (as the kernel's max.f32 and vLLM's
    fmaxf); a NaN quotient stays NaN; an infinity gives scale inf."""
    q, scale = reference(np.array([[np.nan, 2.0, -448.0], [np.inf, 1.0, -1.0]]))
    np.testing.assert_array_equal(scale, [1.0, np.inf])
    np.testing.assert_array_equal(q, [[np.nan, 2.0, -448.0], [np.nan, 0.0, -0.0]])


def test_reduction_reads_only_the_warps_partials():
    """Every block size's PTX reads the warps' partials with one guarded scalar load a
    lane (reduce.ptx.j2), never the vector loads of before that skipped or overran them."""
    for block in (96, 160, 224, 288, 992):
        ptx = render(Fp8Quant(hidden=2048, block=block))
        assert "ld.shared.v" not in ptx
        assert f"setp.lt.u32         %p1, %r2, {block // 32};" in ptx
        assert f".shared .align 16 .b32 amax[{block // 32}];" in ptx


# --- any row length -------------------------------------------------------------------

ODD = (1, 7, 4097, 50257, 131073)


@pytest.mark.parametrize("hidden,dtype,block", [
    (4096, "bf16", 256), (16384, "bf16", 256), (18432, "bf16", 288), (28672, "bf16", 448),
    (65536, "bf16", 1024), (18432, "f32", 576), (4097, "bf16", 288), (1, "f16", 256),
    (4097, "f32", 544), (16385, "bf16", 288)])
def test_default_block_follows_the_row(hidden, dtype, block):
    """A request naming only the shape is never refused: 256 threads up to 2048 16-byte
    vectors a row (as before), then the fewest warps that hold the row (DeepSeek-V3's
    18432 and Llama-3.1-70B's 28672 were refused with block=256); a window, 2 vectors a
    thread where 1024 threads hold it so (and then 32 registers a thread: .minnctapersm)."""
    spec = Fp8Quant(hidden=hidden, dtype=dtype)
    assert spec.block == block
    bound = f".minnctapersm {min(32, 2048 // block)} "  # 2048 threads, 32 CTAs an SM
    assert (bound in render(spec)) == (spec.windowed and spec.chunks == 1
                                       and 2 * block >= row_vectors(hidden, spec.dtype, True)[1])


@pytest.mark.parametrize("hidden,dtype,vector", [
    (4096, "bf16", 8), (4100, "bf16", 4), (4098, "f16", 8), (4097, "bf16", 8), (4098, "f32", 2)])
def test_vector_width_follows_the_length(hidden, dtype, vector):
    """x moves in vectors of the largest power of two dividing hidden, up to 16 bytes (or a
    window of 16-byte vectors where that is under 8 bytes), and each vector's codes in one
    store of that many bytes."""
    spec = Fp8Quant(hidden=hidden, dtype=dtype)
    assert spec.vector == vector
    ptx = render(spec)
    load = {2: "b16", 4: "b32", 8: "v2.b32", 16: "v4.b32"}[spec.vector_bytes]
    store = {1: "b8", 2: "b16", 4: "b32", 8: "v2.b32"}[vector]
    assert f"ld.global.nc.{load} " in ptx and f"st.global.{store} " in ptx


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("hidden", ODD + (2, 4098, 4100, 18432, 28672))
@pytest.mark.parametrize("mode", ["dynamic", "static_param"])
def test_any_length_assembles_without_spills(dtype, hidden, mode):
    """Odd rows, narrower vectors and the long MLP widths assemble without spills."""
    assert_no_spills(assemble(Fp8Quant(dtype=dtype, hidden=hidden, scale_mode=mode)))


@pytest.mark.parametrize("hidden,dtype,block", [
    (h, d, b) for h in (1, 7, 4097, 4098, 4100, 5120, 18432, 50257, 131073, 65544, 131072)
    for d in ("bf16", "f32") for b in (None, 96, 1024)
    if (h, b) != (131073, 96)])  # as RMSNorm's: 50257 on 96 threads walks the same chunks
@pytest.mark.parametrize("mode", ["dynamic", "static_param", "static_baked", "group"])
def test_every_vector_touched_once_a_pass(hidden, dtype, block, mode):
    """In a model of the CTA (ptxsim.row_coverage, which first checks that each chunk loop
    carries its counter and cursors), each pass loads every vector of x once (a chunked
    dynamic row: two passes, the second every vector before the last chunk, which it finds
    in the registers) and every vector of codes is stored once, in every mode."""
    from ptxsim import row_coverage
    from windowsim import merged

    if mode == "group" and hidden % 128:
        pytest.skip("group scales need whole groups of 128")
    spec = Fp8Quant(hidden=hidden, dtype=dtype, scale_mode=mode,
                    static_scale=0.5 if mode == "static_baked" else None,
                    **({"block": block} if block else {}))
    vectors = {i: 1 for i in range(hidden // spec.vector)}
    ptx = render(spec)
    chunked = spec.chunks > 1
    kept = chunked and mode == "dynamic"  # two passes, the last chunk kept between them
    # vectors pass 2 loads: every chunk but the last, each block x the most a thread holds
    reread = (spec.chunks - 1) * spec.block * most_vectors_per_thread(spec.vector, spec.dtype)
    if hidden % spec.vector:  # a window (templates/window.ptx.j2): each phase, element by element
        from windowsim import every_phase, loads_in_array

        elements = {i: 1 for i in range(hidden)}
        assert loads_in_array(ptx, ("%rd4",) if chunked else ("%rd0",), spec.dtype.size,
                              spec.vector, spec.block, hidden, passes=2 if kept else 1,
                              reread=reread if kept else None) == []
        stores = every_phase(ptx, "st", ("%rd5",) if chunked else ("%rd1",), 1, spec.vector,
                             spec.block)
        assert [merged(phase) for phase in stores] == [elements] * spec.vector
        return
    loads = row_coverage(ptx, "ld", ("%rd4",) if chunked else ("%rd0",), spec.vector_bytes,
                         spec.block)
    assert loads == ([vectors, {i: 1 for i in range(reread)}] if kept else [vectors])
    stores = row_coverage(ptx, "st", ("%rd5",) if chunked else ("%rd1",), spec.vector,
                          spec.block)
    assert merged(stores) == vectors


@pytest.mark.parametrize("hidden,dtype,chunks", [
    (65536, "bf16", 1), (65544, "bf16", 2), (32768, "f32", 1), (50257, "f32", 2),
    (131073, "f16", 3), (2**20, "bf16", 16)])
def test_long_rows_take_chunks(hidden, dtype, chunks):
    """Rows longer than 1024 threads x 32 registers take chunks in rolled loops: two for a
    dynamic scale (row max, then quantize), one for a static scale."""
    spec = Fp8Quant(hidden=hidden, dtype=dtype)
    assert spec.chunks == chunks and spec.block == 1024
    def loops(ptx: str) -> list[str]:  # a window's edge branches left out
        return [label for label in re.findall(r"bra\s+(\w+);", ptx)
                if not label.endswith(("_edge", "_done"))]

    assert loops(render(spec)) == (["PASS1", "PASS2"] if chunks > 1 else [])
    static = render(Fp8Quant(hidden=hidden, dtype=dtype, scale_mode="static_param"))
    assert loops(static) == (["PASS2"] if chunks > 1 else [])


def test_multiples_of_the_vector_keep_their_ptx():
    """The golden request renders as before (all others: golden/ptx_digests.txt)."""
    check_golden("fp8_quant_bf16_dynamic_sm_90.ptx", render(Fp8Quant(dtype="bf16", hidden=4096)))


#: 9 rows: rows of an odd length start at each of the 8 phases of a 16-byte vector
#: (templates/window.ptx.j2).
ODD_GPU = [(dtype, hidden, tokens) for dtype in ("f32", "f16", "bf16")
           for hidden, tokens in zip(ODD, (9,) * len(ODD), strict=True)]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["dynamic", "static_param"])
@pytest.mark.parametrize("dtype,hidden,tokens", ODD_GPU)
def test_gpu_odd_lengths(dtype, hidden, tokens, mode):
    """On the GPU, rows of odd length (one element, one code a vector) quantize like the
    float64 reference, scales included; row 0 is all zero."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    spec = Fp8Quant(dtype=dtype, hidden=hidden, scale_mode=mode)
    rng = np.random.default_rng(hidden + tokens)
    case = example(spec, rng, tokens=tokens)
    errors = run_case(Executor(), case, rng)
    assert errors["q"] <= case.tolerance and errors.get("scale", 0.0) <= 1e-6, errors


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden", [("bf16", 18432), ("bf16", 28672), ("f16", 4100),
                                          ("bf16", 4098), ("f32", 4098), ("f32", 18432)])
def test_gpu_model_widths_and_narrow_vectors(dtype, hidden):
    """On the GPU, the MLP widths the default block used to refuse and rows of 8- and
    4-byte vectors quantize like the reference."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(hidden)
    case = example(Fp8Quant(dtype=dtype, hidden=hidden), rng, tokens=5)
    errors = run_case(Executor(), case, rng)
    assert errors["q"] <= case.tolerance and errors["scale"] <= 1e-6, errors


# --- per-group scales (DeepSeek-V3's 1 x 128 activation tiles) --------------------------

@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("hidden", [128, 7168, 18432, 131072])
def test_group_assembles_without_spills(dtype, hidden):
    """Group scales assemble for sm_90 without spills, resident and chunked rows."""
    assert_no_spills(assemble(Fp8Quant(dtype=dtype, hidden=hidden, scale_mode="group")))


def test_group_needs_whole_groups():
    """A row that is not a whole number of groups of 128 is refused, naming the field."""
    with pytest.raises(SpecError, match=r"Fp8Quant.scale_mode = 'group' is invalid: expected "
                                        r"hidden to be a multiple of 128"):
        Fp8Quant(hidden=4100, scale_mode="group")


def test_group_ptx():
    """Each group's max is a butterfly over its 16 lanes (bf16; 32 for f32), floored at
    1e-10 and divided by 448; the first lane of a group stores the scale of row r, group g
    at scale + (r * hidden / 128 + g) * 4."""
    ptx = render(Fp8Quant(hidden=4096, scale_mode="group"))
    assert ".param .u64 .ptr .global .align 4 scale" in ptx
    assert "shfl.sync.bfly.b32  %f9, %f8, 16" not in ptx
    assert "shfl.sync.bfly.b32  %f9, %f8, 8, 31, 0xffffffff;" in ptx
    assert "max.f32             %f8, %f8, 0f2EDBE6FF;" in ptx  # 1e-10
    assert "mul.wide.u32        %rd2, %r0, 128;" in ptx        # 32 groups a row
    assert "@%p1 st.global.f32  [%rd3+64], %f10;" in ptx       # sweep 1: 256 vectors on
    f32 = render(Fp8Quant(hidden=4096, dtype="f32", scale_mode="group"))
    assert "shfl.sync.bfly.b32  %f9, %f8, 16, 31, 0xffffffff;" in f32


def test_group_bytes_and_reference():
    """bytes_moved counts one f32 scale a group; the reference takes max(amax, 1e-10) / 448."""
    from specdsl.kernels.fp8_quant import GROUP_EPS, group_reference

    assert Fp8Quant(hidden=256, scale_mode="group").bytes_moved(3) == 3 * 256 * 3 + 3 * 2 * 4
    x = np.zeros((1, 256))
    x[0, 5], x[0, 200] = -896.0, 1.0
    q, scale = group_reference(x)
    np.testing.assert_array_equal(scale, [[2.0, 1.0 / 448]])
    assert q[0, 5] == -448.0 and q[0, 200] == 448.0
    _, zero = group_reference(np.zeros((1, 128)))
    assert zero[0, 0] == GROUP_EPS / 448


def test_kernel_codes_follow_the_f32_steps():
    """kernel_codes rounds amax / 448, 1 / scale and x * inv in f32, then to E4M3: a value
    exactly at the largest |x| gets code 448 (0x7E); NaN gives 0x7F."""
    from specdsl.kernels.fp8_quant import kernel_codes

    x = np.array([[3.0, -3.0, 1.5, np.nan]], dtype=np.float32)
    codes, scales = kernel_codes(x)
    assert scales[0] == np.float32(3.0) / np.float32(448.0)
    assert list(codes[0]) == [0x7E, 0xFE, 0x76, 0x7F]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,tokens", [
    ("bf16", 7168, 37), ("f16", 128, 5), ("f32", 18432, 3), ("bf16", 131072, 2),
    ("bf16", 4096 + 128, 9), ("f32", 640, 4)])
def test_gpu_group_codes_exact(dtype, hidden, tokens):
    """On the GPU, per-group codes and scales equal kernel_codes' f32 emulation bit for bit
    (the same amax, division, reciprocal and product), and the decoded codes are within
    TOLERANCE of the float64 group quotients; an all-zero row gets scale 1e-10 / 448."""
    from differential import compare, run_fp8_quant
    from specdsl import Executor
    from specdsl.kernels.fp8_quant import group_reference, kernel_codes

    torch = pytest.importorskip("torch")
    spec = Fp8Quant(dtype=dtype, hidden=hidden, scale_mode="group")
    rng = np.random.default_rng(hidden + tokens)
    x = rng.standard_normal((tokens, hidden)) * 2.0 ** rng.uniform(-8, 8, size=(tokens, 1))
    x[0] = 0.0
    x = from_bits(to_bits(x, spec.dtype), spec.dtype)
    out = run_fp8_quant(Executor(), torch, spec, x)
    codes, scales = kernel_codes(x, "group")
    np.testing.assert_array_equal(out["q"], from_bits(codes, DType.F8E4M3))
    np.testing.assert_array_equal(out["scale"], scales.astype(np.float64))
    quotient, _ = group_reference(x)
    compare(out["q"], quotient, DType.F8E4M3, TOLERANCE[DType.F8E4M3], repr(spec))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["dynamic", "static_param"])
@pytest.mark.parametrize("dtype,hidden", [("bf16", 4096), ("f32", 4097), ("f16", 131073)])
def test_gpu_codes_exact(dtype, hidden, mode):
    """On the GPU, per-token and static codes equal kernel_codes' f32 emulation bit for bit
    (the convention the fused epilogues are checked against)."""
    from differential import run_fp8_quant
    from specdsl import Executor
    from specdsl.kernels.fp8_quant import kernel_codes

    torch = pytest.importorskip("torch")
    spec = Fp8Quant(dtype=dtype, hidden=hidden, scale_mode=mode)
    rng = np.random.default_rng(hidden)
    x = from_bits(to_bits(rng.standard_normal((4, hidden)) * 8.0, spec.dtype), spec.dtype)
    static = float(np.float32(0.05)) if mode == "static_param" else None
    out = run_fp8_quant(Executor(), torch, spec, x, static)
    codes, scales = kernel_codes(x, "dynamic" if mode == "dynamic" else "static", static)
    np.testing.assert_array_equal(out["q"], from_bits(codes, DType.F8E4M3))
    if mode == "dynamic":
        np.testing.assert_array_equal(out["scale"], scales.astype(np.float64))


# --- long rows in chunks, several rows, every mode --------------------------------------

#: Chunked rows of 16-byte vectors (the codes of one vector fill two registers: the case
#: whose second register aliased the chunk counter), whole and partial last chunks, in
#: every scale mode; 2^20 is the most chunks (16).
LONG_GPU = [(dtype, hidden, mode) for dtype in ("bf16", "f16", "f32")
            for hidden in (65544, 131072, 262144)
            for mode in ("dynamic", "static_param", "static_baked", "group")
            if mode != "group" or hidden % 128 == 0] + [
    ("bf16", 2**20, "group"), ("bf16", 2**20, "dynamic"), ("f16", 131080, "static_param")]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,mode", LONG_GPU)
def test_gpu_long_rows_exact_in_every_mode(dtype, hidden, mode):
    """On the GPU, rows longer than the registers (taken in chunks) quantize bit for bit as
    kernel_codes' f32 emulation, scales included, on 5 rows whose rows 0 and 3 are all
    zero (a zero row once walked on past its end): every chunk of every row is written
    once, with its own scales."""
    from differential import run_fp8_quant
    from specdsl import Executor
    from specdsl.kernels.fp8_quant import kernel_codes

    torch = pytest.importorskip("torch")
    static = 2.0**-3 if mode == "static_baked" else None  # a power of two: 1/scale exact
    spec = Fp8Quant(dtype=dtype, hidden=hidden, scale_mode=mode, static_scale=static)
    assert spec.chunks > 1
    rng = np.random.default_rng(hidden + len(mode))
    x = rng.standard_normal((5, hidden)) * 2.0 ** rng.uniform(-8, 8, size=(5, 1))
    x[[0, 3]] = 0.0
    x = from_bits(to_bits(x, spec.dtype), spec.dtype)
    if mode == "static_param":
        static = float(np.float32(np.abs(x).max() / 300.0))
    out = run_fp8_quant(Executor(), torch, spec, x, static)
    codes, scales = kernel_codes(x, mode if mode in ("dynamic", "group") else "static", static)
    np.testing.assert_array_equal(out["q"], from_bits(codes, DType.F8E4M3), err_msg=repr(spec))
    if mode in ("dynamic", "group"):
        np.testing.assert_array_equal(out["scale"], scales.astype(np.float64))


# --- a token over several CTAs (split): plain CTAs for the static and group scales, a ---
# --- thread block cluster for the dynamic scale ------------------------------------------

#: (dtype, hidden, split, block): parts of 128 vectors (suggested_split's at few tokens), of
#: 144 on 160 threads (a ragged sweep), one group a CTA (bf16 16 vectors, f32 32), parts of
#: 8-byte vectors (4100 f16, 4098 f32), parts longer than 512 vectors (several a thread), a
#: part of 4 vectors on a warp, and blocks given whose last sweep is ragged (576 vectors on
#: 160 threads, 256 on 96).
SPLITS = [("bf16", 18432, 18, None), ("bf16", 18432, 16, None), ("bf16", 18432, 144, None),
          ("f32", 18432, 144, None), ("f16", 7168, 56, None), ("bf16", 4096, 4, None),
          ("f32", 7168, 14, None), ("bf16", 65536, 2, None), ("bf16", 65536, 8, None),
          ("f16", 4100, 5, None), ("f32", 4098, 3, None), ("bf16", 4096, 128, None),
          ("bf16", 18432, 4, 160), ("f16", 14336, 7, 96)]
SPLIT_MODES = ("static_param", "static_baked", "group")


def _split_request(dtype: str, hidden: int, mode: str, split: int, **fields) -> Fp8Quant:
    """The request, or a skip where group scales cannot split so (whole groups of 128)."""
    if mode == "group":
        vector = Fp8Quant(dtype=dtype, hidden=hidden).vector
        if hidden % 128 or hidden // vector // split % (128 // vector):
            pytest.skip("group scales split into whole groups of 128 only")
    return Fp8Quant(dtype=dtype, hidden=hidden, scale_mode=mode, split=split,
                    static_scale=2.0**-3 if mode == "static_baked" else None, **fields)


def _group_scale_stores(ptx: str, threads: int, lanes_a_group: int) -> dict[int, int]:
    """``{group of the CTA's part: times stored}``: each ``st.global.f32 [%rd3+k]`` is made
    by the first lane of each group of ``lanes_a_group`` threads, at group ``k / 4 + t /
    lanes_a_group`` of thread ``t``'s part, where its guard (``%p1``, or ``%p2`` = ``%p1``
    and the ragged sweep's ``%p0``, ``setp.lt.u32 %p0, %r1, N``) lets it."""
    limits = {m.group(1): int(m.group(2))
              for m in re.finditer(r"setp\.lt\.u32\s+(%p\d), %r1, (\d+);", ptx)}
    guard_limit, stored = {"%p1": threads}, {}
    for line in ptx.splitlines():
        if m := re.match(r"\s+and\.pred\s+(%p\d), %p1, (%p\d);", line):
            guard_limit[m.group(1)] = limits[m.group(2)]
        elif m := re.match(r"\s+@(%p\d) st\.global\.f32\s+\[%rd3\+(\d+)\]", line):
            for t in range(0, guard_limit[m.group(1)], lanes_a_group):
                group = int(m.group(2)) // 4 + t // lanes_a_group
                stored[group] = stored.get(group, 0) + 1
    return stored


@pytest.mark.parametrize("fields,message", [
    (dict(split=16), "Fp8Quant.split = 16 is invalid: expected 1 (one CTA a row) to 8 CTAs a "
                     "row for the dynamic scale (the largest portable cluster; the static and "
                     "group scales take more)"),
    (dict(hidden=4097, split=2),
     "Fp8Quant.split = 2 is invalid: expected 1 for hidden=4097 bf16: rows walked in a window"),
    (dict(hidden=131072, split=2),
     "Fp8Quant.split = 2 is invalid: expected 1 for hidden=131072 bf16: a row longer than 1024 "
     "threads hold in registers (65536 elements) is walked in chunks"),
    (dict(hidden=4096, split=3),
     "Fp8Quant.split = 3 is invalid: expected a split of the row into equal whole 16-byte "
     "vectors (hidden=4096 of bf16 is 512 vectors)"),
    (dict(hidden=4097, scale_mode="static_param", split=2),
     "Fp8Quant.split = 2 is invalid: expected 1 for hidden=4097 bf16: rows walked in a window"),
    (dict(hidden=131072, scale_mode="group", split=2),
     "Fp8Quant.split = 2 is invalid: expected 1 for hidden=131072 bf16: a row longer than 1024 "
     "threads hold in registers (65536 elements) is walked in chunks"),
    (dict(hidden=65540, dtype="f32", scale_mode="static_param", split=5),
     "Fp8Quant.split = 5 is invalid: expected 1 for hidden=65540 f32: a row longer than 1024 "
     "threads hold in registers (32768 elements)"),
    (dict(hidden=4096, scale_mode="static_param", split=0),
     "Fp8Quant.split = 0 is invalid: expected 1 (one CTA a row) or more CTAs a row"),
    (dict(hidden=4096, scale_mode="static_param", split=3),
     "Fp8Quant.split = 3 is invalid: expected a split of the row into equal whole 16-byte "
     "vectors (hidden=4096 of bf16 is 512 vectors)"),
    (dict(hidden=4096, scale_mode="static_baked", static_scale=0.5, split=1024),
     "Fp8Quant.split = 1024 is invalid: expected a split of the row into equal whole 16-byte "
     "vectors (hidden=4096 of bf16 is 512 vectors)"),
    (dict(hidden=4100, dtype="f32", scale_mode="static_param", split=2),
     "Fp8Quant.split = 2 is invalid: expected a split of the row into equal whole 16-byte "
     "vectors (hidden=4100 of f32 is 1025 vectors)"),
    (dict(hidden=1152, scale_mode="group", split=2),
     "Fp8Quant.split = 2 is invalid: expected a split into whole groups of 128 (hidden=1152 "
     "is 9 groups)"),
    (dict(hidden=18432, scale_mode="group", split=32),
     "Fp8Quant.split = 32 is invalid: expected a split into whole groups of 128 (hidden=18432 "
     "is 144 groups)"),
    (dict(hidden=4096, scale_mode="group", split=2.0),
     "Fp8Quant.split must be an int (got 2.0, a float)"),
    (dict(hidden=65536, scale_mode="static_param", split=2, block=256),
     "Fp8Quant.block = 256 is invalid: expected at least 512 threads: a CTA's part (split=2) "
     "of 4096 vectors, at most 8 a thread kept in registers"),
])
def test_split_refused(fields, message):
    """A split the kernel cannot take is refused at construction, naming the field, the
    value and what is expected: only rows held in registers in whole vectors, into equal
    parts (whole groups of 128 for group, at most 8, a cluster, for dynamic), each of which
    the block holds."""
    with pytest.raises(SpecError, match=re.escape(message)):
        Fp8Quant(**fields)


def test_split_refused_by_the_template_too():
    """The template refuses a split the class refuses (its own require, as
    silu_mul_quant.ptx.j2's: the dynamic scale beyond a cluster of 8, a window, parts not of
    whole groups, a row longer than 1024 threads hold even where the block holds its part),
    for requests made with attrs' validators off; the dynamic scale's cluster needs sm_90."""
    import attrs

    with attrs.validators.disabled():
        requests = [Fp8Quant(split=16, block=32),
                    Fp8Quant(hidden=4097, scale_mode="static_param", split=2),
                    Fp8Quant(hidden=1152, scale_mode="group", split=2, block=96),
                    Fp8Quant(hidden=131072, scale_mode="group", split=2, block=1024),
                    Fp8Quant(hidden=4096, scale_mode="group", split=0, block=256)]
    for spec in requests[:4]:
        with pytest.raises(RenderError, match=r"Fp8Quant: split > 1 takes a row held in "
                                              r"registers in whole vectors, split into equal "
                                              r"parts \(whole groups of 128 for group, at most "
                                              r"8 for dynamic\)"):
            render(spec)
    with pytest.raises(RenderError, match=r"Fp8Quant: split = 2 with the dynamic scale \(a "
                                          r"thread block cluster a token\) needs sm_90"):
        render(Fp8Quant(split=2), Target(89, ptx_version=(8, 1)))
    with pytest.raises(RenderError, match=r"Fp8Quant: split is 1 or more CTAs a token"):
        render(requests[4])


@pytest.mark.parametrize("mode", SPLIT_MODES)
@pytest.mark.parametrize("dtype,hidden,split,block", SPLITS)
def test_split_assembles_and_walks_its_part(mode, dtype, hidden, split, block):
    """A token split over ``split`` plain CTAs (grid tokens * split): CTA k owns part
    k % split of token k / split, its first vector part * (vectors / split) + tid; in a
    model of one CTA (ptxsim.row_coverage) every vector of its part is loaded once and
    every code stored once, and for group scales every group scale of the part once (by
    the group's first lane). It assembles for sm_90 without spills."""
    from ptxsim import row_coverage

    spec = _split_request(dtype, hidden, mode, split, **({"block": block} if block else {}))
    ptx = render(spec)
    part = hidden // spec.vector // split
    assert spec.part == part and spec.chunks == 1
    assert spec.launch_dims(3) == ((3 * split, 1, 1), (spec.block, 1, 1))
    assert "cluster" not in ptx
    assert re.search(rf"div\.u32\s+%r0, %r9, {split};", ptx)
    assert re.search(rf"rem\.u32\s+%r8, %r9, {split};", ptx)
    assert re.search(rf"mad\.lo\.u32\s+%r9, %r8, {part}, %r1;", ptx)
    assert re.search(rf"mul\.wide\.u32\s+%rd2, %r9, {spec.vector_bytes};", ptx)  # x
    assert re.search(rf"mul\.wide\.u32\s+%rd2, %r9, {spec.vector};", ptx)        # q
    assert row_coverage(ptx, "ld", ("%rd0",), spec.vector_bytes, spec.block) == [
        {i: 1 for i in range(part)}]
    assert row_coverage(ptx, "st", ("%rd1",), spec.vector, spec.block) == [
        {i: 1 for i in range(part)}]
    if mode == "group":
        lanes_a_group = 128 // spec.vector
        shift = {16: 4, 32: 5}[lanes_a_group]
        assert re.search(rf"shr\.u32\s+%r2, %r9, {shift};", ptx)  # the part's first group on
        assert _group_scale_stores(ptx, spec.block, lanes_a_group) == {
            g: 1 for g in range(part // lanes_a_group)}
    assert_no_spills(assemble(spec))


#: (dtype, hidden, split, block) for the dynamic scale, a cluster of ``split`` CTAs a token:
#: the largest portable cluster at 18432 and 4096 (parts of 288 and 64 vectors), 2, clusters
#: of 3 and 7 (8-byte vectors of 4098 f32; 14336 f16 on 96 threads, a ragged sweep), a
#: part of several vectors a thread (65536), 576 vectors on 160 threads.
DYNAMIC_SPLITS = [("bf16", 18432, 8, None), ("bf16", 18432, 2, None), ("bf16", 4096, 8, None),
                  ("f32", 4098, 3, None), ("f16", 14336, 7, 96), ("bf16", 65536, 8, None),
                  ("bf16", 18432, 4, 160)]


@pytest.mark.parametrize("dtype,hidden,split,block", DYNAMIC_SPLITS)
def test_dynamic_split_is_a_cluster(dtype, hidden, split, block):
    """The dynamic scale's split: a token's CTAs form a cluster of ``split``
    (``.reqnctapercluster``; token ``%clusterid.x``, part ``%cluster_ctarank``), each
    loads its part once and stores its codes once (ptxsim.row_coverage), the CTAs' row
    maxima meet in reduce.ptx.j2's cluster reduction after the CTA's (in
    ptxsim.check_cluster_protocol's order: a relaxed arrive at the start, each CTA's max
    pushed to every CTA before one cluster barrier, nothing after it), and the token's
    first thread (part 0, thread 0) writes the scale. It assembles for sm_90 without
    spills."""
    from ptxsim import check_cluster_protocol, row_coverage

    spec = Fp8Quant(dtype=dtype, hidden=hidden, split=split, **({"block": block} if block else {}))
    ptx = render(spec)
    part = hidden // spec.vector // split
    assert spec.part == part and spec.chunks == 1
    assert spec.launch_dims(3) == ((3 * split, 1, 1), (spec.block, 1, 1))
    assert f".reqnctapercluster {split}, 1, 1" in ptx
    assert re.search(r"mov\.u32\s+%r0, %clusterid\.x;", ptx)
    assert re.search(r"mov\.u32\s+%r8, %cluster_ctarank;", ptx)
    assert "div.u32" not in ptx
    assert re.search(rf"mad\.lo\.u32\s+%r9, %r8, {part}, %r1;", ptx)
    assert row_coverage(ptx, "ld", ("%rd0",), spec.vector_bytes, spec.block) == [
        {i: 1 for i in range(part)}]
    assert row_coverage(ptx, "st", ("%rd1",), spec.vector, spec.block) == [
        {i: 1 for i in range(part)}]
    body = ptx[ptx.index("// CTA umax-reduce"):]
    assert body.index("// cluster umax-reduce of %f8 over " + str(split)) > \
        body.index("// end of CTA umax-reduce")
    scale_store = re.search(r"setp\.eq\.u32\s+%p2, (%r\d+), 0;(?:(?!%p2).)*@%p2 st\.global\.f32 "
                            r"\s*\[%rd3\], %f10;", ptx, re.S)
    assert scale_store and scale_store.group(1) == "%r9"  # part * vectors + tid == 0
    assert check_cluster_protocol(ptx) == 1
    assert_no_spills(assemble(spec))


def test_split_one_keeps_its_ptx_and_group_model():
    """Split 1 renders as before (tid, no div/rem: golden/ptx_digests.txt pins every
    request), and the group-scale model above counts the unsplit row's groups once."""
    spec = Fp8Quant(hidden=18432, scale_mode="group")
    ptx = render(spec)
    assert "div.u32" not in ptx and "%r9" not in ptx
    assert "mov.u32             %r0, %ctaid.x;                            // row" in ptx
    assert _group_scale_stores(ptx, spec.block, 16) == {g: 1 for g in range(144)}


def test_split_defaults_block_to_its_part():
    """A split row's block: a part of up to 512 vectors one vector a thread (18432 bf16 at
    split 18: 128 vectors, 128 threads; at 16: 144 vectors, 160 threads; one group of 16
    vectors: a warp), a longer part as an unsplit row of its length (65536 at split 2:
    4096 vectors, 512 threads x 8)."""
    group = dict(hidden=18432, scale_mode="group")
    assert Fp8Quant(**group, split=18).block == 128
    assert Fp8Quant(**group, split=16).block == 160
    assert Fp8Quant(**group, split=144).block == 32
    assert Fp8Quant(hidden=65536, scale_mode="static_param", split=2).block == \
        Fp8Quant(hidden=32768).block == 512
    assert Fp8Quant(hidden=65536, scale_mode="static_param", split=8).block == 256
    assert Fp8Quant(**group).block == 288


def test_split_takes_l1_no_allocate():
    """A split row is held in registers in whole vectors: l1_no_allocate applies to its loads."""
    spec = Fp8Quant(hidden=18432, scale_mode="group", split=18, l1_no_allocate=True)
    assert "ld.global.nc.L1::no_allocate.v4.b32" in render(spec)
    assert_no_spills(assemble(spec))


def test_split_launch_limit():
    """tokens * split CTAs must fit grid.x; the message names tokens and the bound at the
    request's split; grid and launch_dims agree."""
    spec = Fp8Quant(hidden=4096, scale_mode="static_param", split=8)
    assert spec.grid(5) == spec.launch_dims(5)[0] == (40, 1, 1)
    assert spec.launch_dims(np.int64(5)) == ((40, 1, 1), (64, 1, 1))
    with pytest.raises(SpecError, match=r"Fp8Quant tokens = 300000000 is invalid: expected "
                                        r"at most 268435455 tokens at split=8"):
        spec.launch_dims(300_000_000)
    for tokens in (0, 2**31):
        with pytest.raises(SpecError, match=rf"Fp8Quant tokens = {tokens} is invalid: expected "
                                            rf"an int from 1 to 268435455 \(8 CTAs a row\)"):
            spec.grid(tokens)


def test_split_example_launches_split_ctas():
    """example() of a split request launches tokens * split CTAs of its block."""
    spec = Fp8Quant(hidden=7168, scale_mode="group", split=56)
    case = example(spec, np.random.default_rng(3), tokens=5)
    assert case.grid == (5 * 56, 1, 1) and case.block == (32, 1, 1)
    assert dict(case.args)["scale"] == Output((5, 56), DType.F32)


@pytest.mark.parametrize("tokens,hidden,dtype,mode,split", [
    # bf16 18432 (2304 vectors, 144 groups): parts of 128 vectors while 18 CTAs a token fit
    # 4 CTAs an SM (528 CTAs), then the largest power of two within that
    (1, 18432, "bf16", "group", 18), (29, 18432, "bf16", "group", 18),
    (30, 18432, "bf16", "group", 16),
    # a static scale: parts of up to 512 vectors within one CTA an SM (132 CTAs): 18432 in
    # 6 parts of 384, 4 from 23 tokens, 2 from 34, unsplit from 67; 4096 bf16 (512) unsplit
    (16, 18432, "bf16", "static_param", 6), (32, 18432, "bf16", "static_param", 4),
    (64, 18432, "bf16", "static_param", 2), (67, 18432, "bf16", "static_param", 1),
    (100, 18432, "bf16", "group", 4), (132, 18432, "bf16", "group", 4),
    (133, 18432, "bf16", "group", 2), (264, 18432, "bf16", "group", 2),
    (265, 18432, "bf16", "group", 1),
    # the fewest CTAs with parts of at most 128 vectors (group), 512 (static)
    (1, 4096, "bf16", "static_param", 1), (1, 7168, "f32", "static_baked", 4),
    (1, 7168, "bf16", "group", 7), (16, 4096, "bf16", "group", 4),
    # the request's splits: 1152 is 9 groups (3 parts of 3), 144 vectors (a static scale:
    # unsplit); 4100 f16 is 1025 8-byte vectors (a static scale: 5 parts of 205); 4098 f32
    # 2049 (3 parts of 683: none of 512 or fewer, and 3 is not a power of two: unsplit);
    # 256 bf16 is a warp's 32 vectors, 512 64
    # (a part within the bound is not split)
    (1, 1152, "bf16", "group", 3), (1, 1152, "bf16", "static_param", 1),
    (1, 4100, "f16", "static_param", 5), (1, 4098, "f32", "static_param", 1),
    (1, 256, "bf16", "static_param", 1), (1, 512, "bf16", "static_param", 1),
    (1, 2048, "bf16", "group", 2),
    # the dynamic scale: a cluster of 8 for rows of 2048 vectors or more (16384 bf16, 8192
    # f32) up to an eighth of the 132 SMs in tokens (16), else 1
    (1, 18432, "bf16", "dynamic", 8), (16, 16384, "bf16", "dynamic", 8),
    (17, 18432, "bf16", "dynamic", 1), (1, 14336, "bf16", "dynamic", 1),
    (1, 8192, "f32", "dynamic", 8), (1, 16392, "bf16", "dynamic", 1),
    # never split: a window, chunks, no tokens
    (1, 4097, "bf16", "static_param", 1),
    (1, 131072, "bf16", "group", 1), (0, 18432, "bf16", "group", 1)])
def test_suggested_split(tokens, hidden, dtype, mode, split):
    """The fewest CTAs with parts of at most 128 vectors (a static scale: 512) that the
    request takes, while tokens * split fits 4 CTAs an SM of 132 (a static scale: 1);
    else the largest power of two within that; 1 where none does. The dynamic scale: a
    cluster of 8 for long rows and few tokens."""
    from specdsl.kernels.fp8_quant import suggested_split

    assert suggested_split(hidden, dtype, mode, tokens) == split
    _split_request(dtype, hidden, mode, split)  # a request the kernel takes


def test_suggested_split_is_always_taken():
    """Over widths, dtypes, modes and token counts, the suggestion is a request the kernel
    takes, parts of at least a warp's 32 vectors, at most 4 CTAs an SM when split."""
    from specdsl.kernels.fp8_quant import suggested_split

    for hidden in (128, 1024, 1152, 2880, 4096, 5120, 7168, 14336, 18432, 28672, 65536):
        for dtype in ("bf16", "f32"):
            for mode in SPLIT_MODES if hidden % 128 == 0 else SPLIT_MODES[:2]:
                for tokens in (1, 3, 8, 16, 33, 64, 200):
                    split = suggested_split(hidden, dtype, mode, tokens)
                    spec = _split_request(dtype, hidden, mode, split) if split > 1 else None
                    if spec is not None:
                        assert spec.part >= 32 and tokens * split <= 528, spec


def test_suggested_split_bad_input():
    """sm_count 0 gives 1; fewer SMs cap the split; NumPy integers count; a bad count or
    request is a SpecError naming it."""
    from specdsl.kernels.fp8_quant import suggested_split

    assert suggested_split(18432, "bf16", "group", 1, sm_count=0) == 1
    assert suggested_split(18432, "bf16", "group", 16, sm_count=64) == 16
    assert suggested_split(18432, "bf16", "group", np.int64(1), np.int32(132)) == 18
    for message, args in (("tokens must be 0 or more (got -1)", (4096, "bf16", "group", -1)),
                          ("sm_count must be an int (got 1.5)", (4096, "bf16", "group", 1, 1.5)),
                          ("tokens must be an int (got True)", (4096, "bf16", "group", True))):
        with pytest.raises(SpecError, match=rf"suggested_split: {re.escape(message)}"):
            suggested_split(*args)
    with pytest.raises(SpecError, match=r"Fp8Quant.scale_mode must be one of 'dynamic', "
                                        r"'static_baked', 'static_param', 'group'"):
        suggested_split(4096, "bf16", "groups", 1)


#: (dtype, hidden, mode, split, block): each of SPLITS' shapes in a mode it takes, ragged
#: last sweeps (18432 at split 16: 144 vectors on 160 threads; at split 4 on 160 threads
#: given: 576 vectors, 4 sweeps), group scales down to one group a CTA, and the dynamic
#: scale's clusters (DYNAMIC_SPLITS).
SPLIT_GPU = [("bf16", 18432, "group", 18, None), ("bf16", 18432, "group", 16, None),
             ("bf16", 18432, "static_param", 16, None), ("bf16", 18432, "group", 144, None),
             ("f32", 18432, "group", 144, None), ("f16", 7168, "group", 56, None),
             ("bf16", 4096, "static_param", 4, None), ("f32", 7168, "static_baked", 14, None),
             ("bf16", 65536, "static_param", 2, None), ("bf16", 65536, "group", 8, None),
             ("f16", 4100, "static_param", 5, None), ("f32", 4098, "static_baked", 3, None),
             ("bf16", 4096, "static_baked", 128, None), ("bf16", 18432, "group", 4, 160),
             ("f16", 14336, "static_param", 7, 96)] + [
    (dtype, hidden, "dynamic", split, block) for dtype, hidden, split, block in DYNAMIC_SPLITS]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,mode,split,block", SPLIT_GPU)
def test_gpu_split_codes_equal_one_cta_a_token(dtype, hidden, mode, split, block):
    """On the GPU, a token split over ``split`` CTAs (for the dynamic scale a cluster) gives
    the codes and scales of the split-1 kernel bit for bit, which equal kernel_codes' f32
    emulation, and the decoded codes are within TOLERANCE of the float64 quotients; 37
    tokens (row 0 all zero, each token's largest |x| in CTA t % split's part, so a dynamic
    scale that missed another CTA's maximum shows), outputs poisoned first, so a code or
    scale no CTA writes shows."""
    from differential import compare, run_fp8_quant
    from specdsl import Executor
    from specdsl.kernels.fp8_quant import kernel_codes, mode_reference

    torch = pytest.importorskip("torch")
    executor = Executor()
    spec = _split_request(dtype, hidden, mode, split, **({"block": block} if block else {}))
    one = Fp8Quant(dtype=dtype, hidden=hidden, scale_mode=mode, static_scale=spec.static_scale)
    tokens, part = 37, hidden // split
    rng = np.random.default_rng(hidden + split)
    x = rng.standard_normal((tokens, hidden)) * 2.0 ** rng.uniform(-8, 8, size=(tokens, 1))
    for t in range(1, tokens):
        x[t, (t % split) * part + (7 * t) % part] = 40.0 * np.abs(x[t]).max()
    x[0] = 0.0
    x = from_bits(to_bits(x, spec.dtype), spec.dtype)
    static = None if mode in ("group", "dynamic") else spec.static_scale or float(
        np.float32(np.abs(x).max() / 300.0))
    kind = mode if mode in ("group", "dynamic") else "static"
    out = run_fp8_quant(executor, torch, spec, x, static)
    unsplit = run_fp8_quant(executor, torch, one, x, static)
    np.testing.assert_array_equal(out["q"], unsplit["q"], err_msg=repr(spec))
    codes, scales = kernel_codes(x, kind, static)
    np.testing.assert_array_equal(out["q"], from_bits(codes, DType.F8E4M3), err_msg=repr(spec))
    if kind != "static":
        np.testing.assert_array_equal(out["scale"], unsplit["scale"])
        np.testing.assert_array_equal(out["scale"], scales.astype(np.float64))
    quotient, _ = mode_reference(x, kind, static)
    compare(out["q"], quotient, DType.F8E4M3, TOLERANCE[DType.F8E4M3], repr(spec))
