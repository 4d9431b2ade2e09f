"""RMSNormQuant: RMSNorm with an FP8 E4M3 epilogue: PTX, refused requests, reference, and on
the GPU, codes equal to RMSNorm then Fp8Quant's."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ptxcheck import assemble, assert_no_spills, without_kept_policy
from specdsl import DType, RenderError, SpecError, render
from specdsl.kernels import RMSNorm, RMSNormQuant, rmsnorm
from specdsl.kernels._rows import register_cap
from specdsl.kernels.case import TOLERANCE, from_bits, to_bits
from specdsl.kernels.rmsnorm_quant import default_block, example, reference

MODES = ("dynamic", "static", "group")


def _params(ptx: str) -> list[str]:
    return re.findall(r"\.param \.\w+(?: \.ptr \.global \.align \d+)? (\w+)", ptx)


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("hidden", [2880, 4096, 7168, 8192, 16384])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_assembles_without_spills(dtype, hidden, fused, mode):
    """Every mode, with and without the residual, at LLM widths up to 16384, assembles for
    sm_90 within 64 registers without spills."""
    if mode == "group" and hidden % 128:
        pytest.skip("group scales need whole groups of 128")
    spec = RMSNormQuant(hidden=hidden, dtype=dtype, fused_residual=fused, scale_mode=mode)
    assert_no_spills(assemble(spec))


@pytest.mark.parametrize("fused,names", [
    (False, ["x", "weight", "q", "scale", "rows"]),
    (True, ["x", "residual", "weight", "q", "scale", "rows"])])
def test_param_order(fused, names):
    """The entry's .param order is x, [residual], weight, q, scale, rows, as documented."""
    assert _params(render(RMSNormQuant(hidden=4096, fused_residual=fused))) == names


def test_default_block():
    """Without the residual, rows of 16-byte vectors take 4 vectors a thread in at least
    128 threads, never more threads than RMSNorm; longer rows take the fewest threads from
    256 up that hold them in whole sweeps of 5 to 8 vectors at 3 or more CTAs an SM (256,
    288 or 320 threads: bf16 10240, 11520 (group scales), 12800, ... 20480 and f32 at half
    those; not 9216 bf16, 4.5 a thread on 256, nor 24576, 2 CTAs of 384); with the residual,
    and for odd lengths,
    the block is RMSNorm's for rows of the same vectors (RMSNormQuant moves odd rows in
    narrow vectors, RMSNorm in a window: rmsnorm.default_block(window=False))."""
    found = {(hidden, dtype): RMSNormQuant(hidden=hidden, dtype=dtype).block
             for hidden in (512, 2048, 4096, 7168, 8192, 9216, 10240, 14336, 16384, 20480,
                            24576)
             for dtype in ("bf16", "f32")}
    assert found == {(512, "bf16"): 32, (512, "f32"): 64, (2048, "bf16"): 128,
                     (2048, "f32"): 128, (4096, "bf16"): 128, (4096, "f32"): 256,
                     (7168, "bf16"): 224, (7168, "f32"): 256, (8192, "bf16"): 256,
                     (8192, "f32"): 256, (9216, "bf16"): 288, (9216, "f32"): 288,
                     (10240, "bf16"): 256, (10240, "f32"): 320, (14336, "bf16"): 256,
                     (14336, "f32"): 512, (16384, "bf16"): 256, (16384, "f32"): 512,
                     (20480, "bf16"): 320, (20480, "f32"): 640, (24576, "bf16"): 512,
                     (24576, "f32"): 768}
    assert RMSNormQuant(hidden=16384, dtype="f16").block == 256
    assert [RMSNormQuant(hidden=h).block for h in (12800, 13824, 17920, 18432)] == \
        [320, 288, 320, 288]
    # test_kernel_quant_adversarial's 6 sweeps a thread are this default
    assert RMSNormQuant(hidden=12288, dtype="f16", scale_mode="group").block == 256
    for hidden in (2880, 4096, 4097, 7168, 16384):
        assert RMSNormQuant(hidden=hidden, fused_residual=True).block == \
            rmsnorm.default_block(hidden, DType.BF16, window=False)
    assert RMSNormQuant(hidden=4097).block == 480 == \
        rmsnorm.default_block(4097, DType.BF16, window=False)
    assert RMSNorm(hidden=4096).block == rmsnorm.default_block(4096, DType.BF16, window=False)


def test_long_row_block_by_scale_mode():
    """The dynamic and static scales take a long row's block only where it puts more CTAs
    on an SM than the block of 4 vectors a thread: f16/bf16 11520 (and f32 5760, the same
    1440 vectors) keeps 384 threads x 3 CTAs (1.021x to 1.026x over 288 x 3 on the H200),
    the group mode takes 288 x 3 (1.044x); every other width is the same in every mode."""
    for dtype in ("bf16", "f16"):
        found = {mode: RMSNormQuant(hidden=11520, dtype=dtype, scale_mode=mode)
                 for mode in ("dynamic", "static", "group")}
        assert {mode: (spec.block, spec.min_ctas_per_sm) for mode, spec in found.items()} == \
            {"dynamic": (384, 3), "static": (384, 3), "group": (288, 3)}
    for dtype in (DType.BF16, DType.F16, DType.F32):
        for hidden in range(1024, 32769, 64):
            try:
                blocks = {default_block(hidden, dtype, False, mode)
                          for mode in ("dynamic", "static", "group")}
            except SpecError:
                continue  # a row no block holds in registers
            assert len(blocks) == 1 or (dtype.size, hidden) in ((2, 11520), (4, 5760)), \
                (dtype, hidden)
    assert [RMSNormQuant(hidden=5760, dtype="f32", scale_mode=mode).block
            for mode in ("dynamic", "static", "group")] == [384, 384, 288]


@pytest.mark.parametrize("hidden,block,ctas,registers", [
    (7168, 224, 5, 56), (7168, 224, 6, 40), (4096, 128, 9, 56), (4096, 128, 10, 48),
    (14336, 448, 3, 40), (16384, 256, 4, 64)])
def test_register_cap_is_ptxas_cap(hidden, block, ctas, registers):
    """_rows.register_cap is what ptxas keeps to under .minnctapersm: these dynamic rows want
    more, so ptxas gives them exactly the cap (3 CTAs of 448 threads: 40, where 65536 /
    1344 would say 48; 6 of 224: 40, not 48), and the PTX comment says the same."""
    spec = RMSNormQuant(hidden=hidden, block=block, min_ctas_per_sm=ctas)
    assert register_cap(ctas, spec.block) == registers
    (used,) = assemble(spec).resources().values()
    assert used.registers == registers
    assert f".minnctapersm {ctas}     // {ctas * spec.block} threads an SM: ptxas keeps to " \
        f"{registers} registers" in render(spec)


def test_default_min_ctas():
    """Rows of 16-byte vectors get ceil(1024 / block) CTAs an SM where their registers fit
    (5 to 8 vectors a thread: 64; 3 or 4: 56; 2: 40), else 1024 // block; odd rows, None."""
    found = {(hidden, fused): RMSNormQuant(hidden=hidden, fused_residual=fused).min_ctas_per_sm
             for hidden in (4096, 5120, 6144, 7168, 8192, 14336, 16384) for fused in (False, True)}
    assert found == {(4096, False): 8, (4096, True): 4, (5120, False): 7, (5120, True): 4,
                     (6144, False): 6, (6144, True): 3, (7168, False): 5, (7168, True): 3,
                     (8192, False): 4, (8192, True): 2, (14336, False): 4, (14336, True): 2,
                     (16384, False): 4, (16384, True): 2}
    # 8 vectors a thread on 320 threads: 4 CTAs would leave 48 registers, so 3 (64)
    assert RMSNormQuant(hidden=20480, block=320).min_ctas_per_sm == 3
    assert RMSNormQuant(hidden=4097).min_ctas_per_sm is None
    assert RMSNormQuant(hidden=7168, dtype="f32", block=448).min_ctas_per_sm == 2   # 4 vectors
    assert RMSNormQuant(hidden=7168, dtype="f32").min_ctas_per_sm == 4   # 7 vectors of 256
    assert ".minnctapersm 4 " in render(RMSNormQuant(hidden=7168, min_ctas_per_sm=None))
    with pytest.raises(SpecError, match="min_ctas_per_sm = 5 is invalid: expected None or 1 "
                                        "to 4 CTAs of 448 threads"):
        RMSNormQuant(hidden=7168, fused_residual=True, min_ctas_per_sm=5)


@pytest.mark.parametrize("dtype,block_shuffles,divisions", [
    ("bf16", 2 * 4, 1), ("f16", 2 * 4, 1), ("f32", 4 * 5, 4)])
def test_group_maxima_of_two_sweeps_share_a_butterfly(dtype, block_shuffles, divisions):
    """Group mode, 4 sweeps a thread: f16/bf16 rows reduce two sweeps' group maxima in one
    butterfly of packed pairs (4 shuffles over a group's 16 lanes, twice), and each lane
    divides for one sweep, handing 1 / scale round by 4 indexed shuffles within 16-lane
    segments; f32 rows take one butterfly (5 over 32 lanes) and one division a sweep; 10
    more shuffles for the CTA's sum of squares."""
    spec = RMSNormQuant(hidden=7168, dtype=dtype, scale_mode="group",
                        block=448 if dtype == "f32" else 224)
    ptx = render(spec)
    assert ptx.count("shfl.sync.bfly") == 10 + block_shuffles, spec
    assert ptx.count("shfl.sync.idx.b32") == ptx.count(", 0x101f, 0xffffffff;") == \
        (4 if dtype != "f32" else 0)
    assert ptx.count("div.rn.f32") == ptx.count("rcp.rn.f32") == divisions
    assert ptx.count("prmt.b32") == (6 if dtype != "f32" else 0)


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_group_store_predicate_only_where_a_lane_stores_for_its_group(dtype):
    """%pq (a group's first lane) is declared and set only where that lane stores its
    group's scale: f32 group scales of RMSNormQuant, and SiluMulQuant's group mode; the
    spread f16/bf16 scales and the dynamic and static modes have no use for it."""
    from specdsl.kernels import SiluMulQuant

    for mode in ("dynamic", "static", "group"):
        stores = mode == "group" and dtype == "f32"
        ptx = render(RMSNormQuant(hidden=4096, dtype=dtype, scale_mode=mode))
        assert (".reg .pred  %pq;" in ptx) == stores == ("@%pq st.global.f32" in ptx), mode
        ptx = render(SiluMulQuant(d=4096, dtype=dtype, scale_mode=mode))
        assert (".reg .pred  %pq;" in ptx) == (mode == "group") == ("@%pq st.global.f32" in ptx)


def test_group_scales_spread_over_batches_of_four_sweeps():
    """8 sweeps a thread (hidden 65536 on 1024 threads): two batches of 4, each with its own
    division and its store offset; 3 sweeps with the last partial (640 vectors on 256
    threads): one batch whose stores stop at the row's end."""
    ptx = render(RMSNormQuant(hidden=65536, block=1024, scale_mode="group"))
    assert ptx.count("div.rn.f32") == 2 and ptx.count("shfl.sync.idx.b32") == 8
    assert "@%p3 st.global.f32  [%rd8], %scale;" in ptx
    assert "@%p3 st.global.f32  [%rd8+1024], %scale;" in ptx   # sweep 4: 4 * 1024 / 16 groups, 4 bytes each
    assert "setp.lt.and.u32     %p3, %r9, 4096, %p3;" in ptx     # 8192 vectors - 4 * 1024
    ptx = render(RMSNormQuant(hidden=5120, block=256, scale_mode="group"))
    assert "setp.lt.u32         %p3, %r7, 3;" in ptx and "setp.lt.and.u32     %p3, %r9, 640, %p3;" in ptx


def test_same_normalization_as_rmsnorm():
    """With the same block, the PTX up to the rounding of y is RMSNorm's (so the sum of
    squares runs in the same order)."""
    def normalization(ptx: str) -> str:  # from the row's loads to rstd
        return ptx.split("// load the row")[1].split("rsqrt.approx.f32    %rstd")[0]

    for fused in (False, True):
        quant_spec = RMSNormQuant(hidden=4096, fused_residual=fused)
        plain = render(RMSNorm(hidden=4096, fused_residual=fused, block=quant_spec.block))
        quant = render(quant_spec).replace("rmsnorm_quant", "rmsnorm")
        assert normalization(plain) == normalization(quant)


def test_dynamic_reduces_twice_and_writes_no_y():
    """Dynamic scales take a second CTA reduction (the row's largest |y|, its own shared
    array, a word a warp; a redux.sync.max.u32 a warp on each side of the exchange, where
    the sum takes two butterflies of 5 shuffles); no y is stored: only codes (a v2.b32
    store per vector of 8 elements: 2 a thread of 256) and the scale."""
    ptx = render(RMSNormQuant(hidden=4096, block=256))
    assert ptx.count("// CTA umax-reduce of %amax") == 1 and "rmsnorm_quant_amax[8]" in ptx
    assert ptx.count("redux.sync.max.u32  %amax, %amax, 0xffffffff;") == 2
    assert ptx.count("shfl.sync.bfly") == 10
    assert "st.global.L1::no_allocate.v4.b32" not in ptx
    assert ptx.count("st.global.v2.b32") == 2 and "@%p3 st.global.f32  [%rd9], %scale;" in ptx


@pytest.mark.parametrize("fields,message", [
    (dict(hidden=4097, scale_mode="group"), "RMSNormQuant.scale_mode = 'group' is invalid: "
                                            "expected hidden to be a multiple of 128"),
    (dict(hidden=65544), "RMSNormQuant.hidden = 65544 is invalid: expected at most 65536 "
                         "elements of bf16"),
    (dict(hidden=32772, dtype="f32"), "expected at most 32768 elements of f32"),
    (dict(hidden=4096, block=32), "RMSNormQuant.block = 32 is invalid: expected at least 64 "
                                  "threads"),
    (dict(hidden=4096, scale_mode="static_param"), "RMSNormQuant.scale_mode must be one of"),
])
def test_refused(fields, message):
    """Requests the kernel cannot take are refused at construction, naming field and value."""
    with pytest.raises(SpecError, match=re.escape(message)):
        RMSNormQuant(**fields)


def test_needs_fp8_conversion():
    """Rendering for a target without cvt...e4m3x2 is refused."""
    with pytest.raises(RenderError, match=r"RMSNormQuant: cvt.rn.satfinite.e4m3x2.f32 needs"):
        render(RMSNormQuant(hidden=4096, dtype="f32"), "sm_80")


def test_reference_rounds_y_before_quantizing():
    """The reference quantizes y rounded to dtype (what the unfused RMSNorm writes)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 256)), np.ones(256)
    quotient, scales, y = reference(x, w, 1e-6, DType.BF16, "group")
    np.testing.assert_array_equal(y, from_bits(to_bits(y, DType.BF16), DType.BF16))
    assert scales.shape == (3, 2) and quotient.shape == (3, 256)
    assert np.abs(quotient).max() == 448.0


def test_example_args_follow_param_order():
    """Each mode's example passes its arguments in .param order, the static scale as an
    input, the dynamic and group scales as outputs of their shapes."""
    for mode in MODES:
        for fused in (False, True):
            case = example(RMSNormQuant(hidden=256, fused_residual=fused, scale_mode=mode),
                           np.random.default_rng(1), rows=3)
            assert [name for name, _ in case.args] == _params(render(case.spec))
            scale = dict(case.args)["scale"]
            if mode == "static":
                assert scale.dtype == np.float32 and scale.shape == (1,)
            else:
                assert scale.shape == ((3,) if mode == "dynamic" else (3, 2))


GPU = [(dtype, hidden, fused, mode) for dtype in ("bf16", "f16", "f32")
       for hidden in (4096, 7168) for fused in (False, True) for mode in MODES] + [
    ("bf16", 4097, False, "dynamic"), ("bf16", 4097, True, "static"), ("f16", 16384, True, "group"),
    ("bf16", 2880, True, "dynamic"), ("f32", 4098, False, "static"),
    # 256 threads at 5 to 8 sweeps a thread, and 288 at 8 (the default block of these widths)
    ("bf16", 16384, False, "group"), ("f16", 14336, False, "dynamic"),
    ("bf16", 10240, False, "static"), ("f32", 8192, False, "dynamic"),
    ("bf16", 18432, False, "group"), ("f32", 9216, False, "dynamic"),
    ("bf16", 20480, False, "group"), ("f16", 15360, False, "dynamic"),   # 320 threads
    # the widest rows: 8 sweeps of 16-byte vectors a thread
    ("bf16", 65536, True, "group"), ("f16", 65536, False, "dynamic"), ("f32", 32768, True, "static")]
#: l2_evict_last requests (x and residual kept in L2): the same codes as the unfused pair
GPU_KEPT = [("bf16", 8192, False, "group"), ("bf16", 4096, True, "dynamic"),
            ("f16", 7168, False, "static"), ("f32", 4096, True, "group")]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,fused,mode,kept",
                         [(*case, False) for case in GPU] + [(*case, True) for case in GPU_KEPT])
def test_gpu_codes_equal_the_unfused_pair(dtype, hidden, fused, mode, kept):
    """On the GPU, the fused codes and scales equal, bit for bit, those of RMSNorm (same
    block) followed by the f32 quantization steps of Fp8Quant (fp8_quant.kernel_codes):
    the fused kernel rounds y to dtype before quantizing, as the pair does. The written-
    back residual equals RMSNorm's too, and the decoded codes are within TOLERANCE of the
    float64 reference. ``kept``: the request with ``l2_evict_last=True``."""
    from differential import compare, run_quantized, run_rmsnorm, to_device
    from specdsl import Executor
    from specdsl.kernels.fp8_quant import kernel_codes

    torch = pytest.importorskip("torch")
    executor = Executor()
    spec = RMSNormQuant(hidden=hidden, dtype=dtype, fused_residual=fused, scale_mode=mode,
                        l2_evict_last=kept)
    plain = RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused, block=spec.block)
    rng = np.random.default_rng(hidden + len(mode))
    rows = 37
    x = from_bits(to_bits(rng.standard_normal((rows, hidden)), spec.dtype), spec.dtype)
    weight = from_bits(to_bits(rng.normal(1.0, 0.5, hidden), spec.dtype), spec.dtype)
    residual = from_bits(to_bits(rng.standard_normal((rows, hidden)), spec.dtype), spec.dtype) \
        if fused else None
    unfused = run_rmsnorm(executor, torch, plain, x, weight, residual)
    y = unfused["y"]
    static = float(np.float32(np.abs(y).max() / 400.0))
    codes, scales = kernel_codes(y, mode, static if mode == "static" else None)
    inputs = [to_device(torch, to_bits(x, spec.dtype), spec.dtype)]
    if fused:
        inputs.append(to_device(torch, to_bits(residual, spec.dtype), spec.dtype))
    inputs.append(to_device(torch, to_bits(weight, spec.dtype), spec.dtype))
    shape = {"dynamic": (rows,), "group": (rows, hidden // 128)}.get(mode, static)
    out = run_quantized(executor, torch, spec, inputs, rows, hidden, shape)
    np.testing.assert_array_equal(out["q"], from_bits(codes, DType.F8E4M3), err_msg=repr(spec))
    if mode != "static":
        np.testing.assert_array_equal(out["scale"], scales.astype(np.float64))
    if fused:
        from differential import to_host
        np.testing.assert_array_equal(to_host(torch, inputs[1], spec.dtype), unfused["residual"])
    source = unfused["residual"] if fused else x
    quotient, _, _ = reference(source, weight, float(np.float32(spec.eps)), spec.dtype, mode,
                               static)
    compare(out["q"], quotient, DType.F8E4M3, TOLERANCE[DType.F8E4M3], repr(spec))


@pytest.mark.parametrize("fields", [dict(hidden=8192, scale_mode="group"), dict(hidden=7168),
                                    dict(hidden=4096, fused_residual=True, scale_mode="static")],
                         ids=repr)
def test_l2_evict_last_keeps_x_and_changes_nothing_else(fields):
    """l2_evict_last: every load of x (and residual) carries the evict_last policy, never
    demoted, and the request assembles without spills; without the residual (which the
    default demotes), removing the policy's lines and hints gives the request without the
    field."""
    import attrs

    spec = RMSNormQuant(l2_evict_last=True, **fields)
    ptx = render(spec)
    loads = re.findall(r"ld\.global(?:\.nc)?\.L2::cache_hint\.v4\.b32 \{[^}]*\}, \[%rd[47]\+\d+\], %keep;",
                       ptx)
    vectors = -(-spec.hidden // spec.vector // spec.block)
    assert len(loads) == vectors * (2 if spec.fused_residual else 1)
    assert "applypriority" not in ptx and ptx.count("createpolicy") == 1
    if not spec.fused_residual:
        assert without_kept_policy(ptx) == render(attrs.evolve(spec, l2_evict_last=False))
    assert_no_spills(assemble(spec))


def test_l2_evict_last_refused_for_narrow_vectors():
    """Rows of 8-byte vectors (4100 bf16) are refused, naming the field and the vector."""
    with pytest.raises(SpecError, match=re.escape(
            "RMSNormQuant.l2_evict_last = True is invalid: expected False for hidden=4100 bf16: "
            "the policy applies to rows of whole 16-byte vectors (hidden a multiple of 8), and "
            "this row moves in 8-byte vectors")):
        RMSNormQuant(hidden=4100, l2_evict_last=True)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_gpu_example_matches_reference(mode):
    """The example case runs through specdsl._review.demo.run_case within its tolerance."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(7)
    case = example(RMSNormQuant(hidden=4096, fused_residual=True, scale_mode=mode), rng, rows=9)
    errors = run_case(Executor(), case, rng)
    assert errors["q"] <= case.tolerance, errors
    assert errors.get("scale", 0.0) <= 1e-2 and errors.get("residual", 0.0) == 0.0, errors


@pytest.mark.parametrize("hidden,dtype,block", [
    (h, d, b) for h in (7, 4097, 4100, 2880, 7168) for d in ("bf16", "f32") for b in (None, 1024)])
@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_every_vector_and_code_once(hidden, dtype, block, mode):
    """In a model of the CTA (ptxsim.row_coverage), x is loaded once and every vector of
    codes stored once, for odd, narrow and 16-byte rows."""
    from ptxsim import row_coverage

    spec = RMSNormQuant(hidden=hidden, dtype=dtype, scale_mode=mode,
                        **({"block": block} if block else {}))
    ptx = render(spec)
    vectors = {i: 1 for i in range(hidden // spec.vector)}
    assert row_coverage(ptx, "ld", ("%rd4",), spec.vector_bytes, spec.block) == [vectors]
    assert row_coverage(ptx, "st", ("%rd6",), spec.vector, spec.block) == [vectors]
