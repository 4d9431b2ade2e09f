"""RMSNorm: rendering, nvJitLink assembly, refused requests, reference, GPU results."""

from __future__ import annotations

import re
from functools import partial

import attrs
import numpy as np
import pytest

from golden import check_golden
from ptxcheck import assemble, assert_lines_demoted, assert_no_spills, without_kept_policy
from ptxsim import row_coverage
from specdsl import SpecError, UnsupportedTargetError, render
from specdsl._cli.main import main
from specdsl._spec.dtype import DType
from specdsl.kernels import RMSNorm
from specdsl.kernels.case import TOLERANCE, from_bits, to_bits
from specdsl.kernels.rmsnorm import (
    KEPT_TWO_VECTOR_CTAS,
    MAX_HIDDEN,
    TWO_VECTOR_CTAS,
    default_min_ctas,
    example,
    packed_row_block,
    reference,
)
from windowsim import every_phase, loads_in_array, merged

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


def test_packed_rows_take_4_vectors_a_thread_at_3_ctas():
    """f16/bf16 rows without the residual that the general rule gives 448 to 512 threads at
    3 vectors a thread (hidden 9992 to 12288) take the fewest warps holding 4, with
    .minnctapersm 3; the residual, f32, rows at 2 or 4 vectors, rows given 384 or 416
    threads, and rows in a window or in 8-byte vectors keep the general rule."""
    found = {(hidden, dtype, fused): (spec.block, spec.min_ctas_per_sm)
             for hidden in (8192, 9216, 9984, 9992, 10240, 10752, 11264, 11776, 12288, 12296)
             for dtype in ("bf16", "f16", "f32") for fused in (False, True)
             for spec in [RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused)]}
    packed = {9992: 320, 10240: 320, 10752: 352, 11264: 352, 11776: 384, 12288: 384}
    plain = {8192: 512, 9216: 384, 9984: 416, 9992: 448, 10240: 448, 10752: 448,
             11264: 480, 11776: 512, 12288: 512, 12296: 416}
    f32 = {8192: 512, 9216: 480, 9984: 512, 9992: 512, 10240: 512, 10752: 448, 11264: 480,
           11776: 512, 12288: 512, 12296: 448}
    assert found == {(hidden, dtype, fused): (
        (packed[hidden], 3) if dtype != "f32" and not fused and hidden in packed else
        ((f32 if dtype == "f32" else plain)[hidden], None))
        for hidden, dtype, fused in found}
    assert [RMSNorm(hidden=hidden).block for hidden in (10241, 10244)] == [448, 448]
    # the CTA count goes with the packed block, given or defaulted: the same request
    assert RMSNorm(hidden=10752, block=352) == RMSNorm(hidden=10752)
    assert RMSNorm(hidden=10752, block=352).min_ctas_per_sm == 3
    assert RMSNorm(hidden=10240, block=448).min_ctas_per_sm is None
    assert RMSNorm(hidden=10240, block=320, fused_residual=True).min_ctas_per_sm is None
    assert RMSNorm(hidden=10240, block=320, min_ctas_per_sm=4).min_ctas_per_sm == 4
    assert ".minnctapersm 3" in render(RMSNorm(hidden=12288))
    assert [hidden for hidden in range(8, 40000, 8)
            if packed_row_block(hidden, DType.BF16)] == list(range(9992, 12289, 8))


#: Every 8th packed width, both ends included (37 of the 288), bf16 and f16 alternately.
PACKED_SAMPLE = [(hidden, ("bf16", "f16")[i % 2])
                 for i, hidden in enumerate((*range(9992, 12288, 64), 12288))]


@pytest.mark.parametrize("hidden,dtype", PACKED_SAMPLE)
def test_packed_rows_do_not_spill(hidden, dtype):
    """The packed rows' blocks fit the registers 3 CTAs an SM leave (64 at 320 threads, 56 at
    352 and 384), sweeps whole or guarded (all 576 compiled without spills when the rule
    was made; this samples them)."""
    assert_no_spills(assemble(RMSNorm(hidden=hidden, dtype=dtype)))


#: The rows TWO_VECTOR_CTAS gives more CTAs an SM: hidden, block, CTAs.
TWO_VECTOR_ROWS = [(5120, 320, 5), (5632, 352, 5), (6656, 416, 4), (7168, 448, 4), (7680, 480, 4)]


def test_rows_of_two_whole_vectors_a_thread_take_more_ctas():
    """f16/bf16 rows of exactly 2 16-byte vectors a thread on 320 to 480 threads (but 384)
    take TWO_VECTOR_CTAS; every other row of hidden 4104 to 8192 keeps None: rows whose
    second vector is guarded, the residual, f32, several rows a CTA, 288, 384 and 512."""
    for hidden, block, ctas in TWO_VECTOR_ROWS:
        for dtype in ("bf16", "f16"):
            spec = RMSNorm(hidden=hidden, dtype=dtype)
            assert (spec.block, spec.min_ctas_per_sm) == (block, ctas)
            assert f".minnctapersm {ctas}" in render(spec)
            assert RMSNorm(hidden=hidden, dtype=dtype, block=block) == spec
            assert RMSNorm(hidden=hidden, dtype=dtype, fused_residual=True).min_ctas_per_sm is None
    assert [(hidden, dtype) for hidden in range(4104, 8193, 8) for dtype in ("bf16", "f16", "f32")
            if RMSNorm(hidden=hidden, dtype=dtype).min_ctas_per_sm is not None] == [
        (hidden, dtype) for hidden, _, _ in TWO_VECTOR_ROWS for dtype in ("bf16", "f16")]
    assert default_min_ctas(7168, DType.BF16, 448, False, rows_per_cta=2) is None
    assert RMSNorm(hidden=7168, min_ctas_per_sm=None).min_ctas_per_sm is None


def test_kept_rows_of_two_whole_vectors_take_more_ctas():
    """With l2_evict_last, f16/bf16 hidden 8192 (2 vectors a thread on 512 threads) takes 4
    CTAs an SM (KEPT_TWO_VECTOR_CTAS) beside TWO_VECTOR_CTAS's rows, and nothing else does
    in hidden 4104 to 8192: not f32, not the residual, not 8192 without the field."""
    for hidden, block, ctas in TWO_VECTOR_ROWS:
        assert RMSNorm(hidden=hidden, l2_evict_last=True).min_ctas_per_sm == ctas
    assert KEPT_TWO_VECTOR_CTAS[512] == 4 and 512 not in TWO_VECTOR_CTAS
    for dtype in ("bf16", "f16"):
        spec = RMSNorm(hidden=8192, dtype=dtype, l2_evict_last=True)
        assert (spec.block, spec.min_ctas_per_sm) == (512, 4)
        assert ".minnctapersm 4" in render(spec)
        assert spec == RMSNorm(hidden=8192, dtype=dtype, l2_evict_last=True, min_ctas_per_sm=4)
        assert RMSNorm(hidden=8192, dtype=dtype).min_ctas_per_sm is None
        assert RMSNorm(hidden=8192, dtype=dtype, l2_evict_last=True,
                       min_ctas_per_sm=None).min_ctas_per_sm is None
    assert RMSNorm(hidden=8192, dtype="f32", l2_evict_last=True).min_ctas_per_sm is None
    assert RMSNorm(hidden=8192, fused_residual=True, l2_evict_last=True).min_ctas_per_sm is None
    kept = [(hidden, dtype) for hidden in range(4104, 8193, 8) for dtype in ("bf16", "f16", "f32")
            if RMSNorm(hidden=hidden, dtype=dtype, l2_evict_last=True).min_ctas_per_sm is not None]
    assert kept == [(hidden, dtype) for hidden in [h for h, _, _ in TWO_VECTOR_ROWS] + [8192]
                    for dtype in ("bf16", "f16")]


def test_min_ctas_per_sm_is_declared_after_the_fields_its_default_reads():
    """An attrs default sees only the fields declared before it: RMSNorm's min_ctas_per_sm
    reads l2_evict_last, so it comes last (RMSNormQuant and Softmax alike, one order)."""
    from specdsl.kernels import RMSNormQuant, Softmax

    for cls in (RMSNorm, RMSNormQuant, Softmax):
        names = [field.name for field in attrs.fields(cls)]
        assert names[-1] == "min_ctas_per_sm" and "l2_evict_last" in names, cls
    assert [field.name for field in attrs.fields(Softmax)][-3:] == [
        "l2_evict_last", "keep_exponentials", "min_ctas_per_sm"]
    # a call in the order of before (min_ctas_per_sm by position) is refused, not misread
    for call, field in ((lambda: RMSNorm(8192, 1e-6, "bf16", False, 512, 1, None), "RMSNorm.streaming_stores"),
                        (lambda: RMSNormQuant(8192, 1e-6, "bf16", False, "dynamic", 512, 4),
                         "RMSNormQuant.l2_evict_last"),
                        (lambda: Softmax(4096, 1.0, "bf16", 1, 256, 1, 7), "Softmax.l2_evict_last")):
        with pytest.raises(SpecError, match=re.escape(f"{field} must be a bool")):
            call()


@pytest.mark.parametrize("hidden,dtype,keep", [(h, dt, keep) for h, _, _ in TWO_VECTOR_ROWS
                                               for dt in ("bf16", "f16") for keep in (False, True)]
                         + [(8192, "bf16", True), (8192, "f16", True)])
def test_rows_of_two_whole_vectors_do_not_spill(hidden, dtype, keep):
    """At the CTAs TWO_VECTOR_CTAS asks (KEPT_TWO_VECTOR_CTAS with l2_evict_last), ptxas keeps
    them to 32 registers without spills."""
    compiled = assemble(RMSNorm(hidden=hidden, dtype=dtype, l2_evict_last=keep))
    assert_no_spills(compiled)
    assert {used.registers for used in compiled.resources().values()} == {32}


@pytest.mark.parametrize("hidden,block,ctas", [(4616, 320, 5), (5112, 320, 5), (6664, 448, 4)])
def test_rows_with_a_guarded_second_vector_would_spill_at_more_ctas(hidden, block, ctas):
    """Why TWO_VECTOR_CTAS takes only rows of exactly 2 vectors a thread: a row between them
    (some threads' second vector guarded) spills at those CTAs' 32 registers, so its
    default keeps None."""
    compiled = assemble(RMSNorm(hidden=hidden, block=block, min_ctas_per_sm=ctas))
    assert any(used.spills for used in compiled.resources().values())
    assert RMSNorm(hidden=hidden).min_ctas_per_sm is None


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
    (dict(hidden=0), "RMSNorm.hidden = 0 is invalid: expected a positive number of elements"),
    (dict(hidden=-8), "RMSNorm.hidden = -8 is invalid"),
    (dict(hidden=MAX_HIDDEN + 1), f"RMSNorm.hidden = {MAX_HIDDEN + 1} is invalid: expected at "
                                  f"most {MAX_HIDDEN} elements"),
    (dict(hidden=4096, eps=0.0), "RMSNorm.eps = 0.0 is invalid: expected a float > 0"),
    (dict(hidden=4096, eps=-1e-5), "expected a float > 0"),
    (dict(hidden=4096, eps=1e-50), "RMSNorm.eps = 1e-50 is invalid"),
    (dict(hidden=4096, dtype="f8e4m3"), "RMSNorm.dtype = DType.F8E4M3 is invalid: expected one of"),
    (dict(hidden=4096, block=48), "RMSNorm.block = 48 is invalid: expected a multiple of 32"),
])
def test_refused_requests(fields, message):
    """Shapes the template cannot handle are refused at construction, naming field and value."""
    with pytest.raises(SpecError, match=re.escape(message)):
        RMSNorm(**fields)


@pytest.mark.parametrize("rows", [0, -1, 2**31, True, 3.0])
def test_launch_dims_refuses_bad_rows(rows):
    """launch_dims refuses a row count outside 1 .. 2**31 - 1 (or not an int)."""
    with pytest.raises(SpecError, match="RMSNorm rows = .* is invalid: expected an int"):
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


# --- any row length -------------------------------------------------------------------

ODD = (1, 7, 4097, 50257, 131073)


@pytest.mark.parametrize("hidden,dtype,vector", [
    (4096, "bf16", 8), (4100, "bf16", 4), (4098, "f16", 8), (4097, "bf16", 8), (9, "f16", 8),
    (4096, "f32", 4), (4098, "f32", 2), (4097, "f32", 4)])
def test_vector_width_follows_the_length(hidden, dtype, vector):
    """A row moves in vectors of the largest power of two dividing hidden, up to 16 bytes,
    or in a window of 16-byte vectors where that is under 8 bytes (4098 f16, odd lengths);
    the PTX loads that many bytes and declares that alignment."""
    spec = RMSNorm(hidden=hidden, dtype=dtype)
    assert spec.vector == vector and spec.vector_bytes == vector * spec.dtype.size
    ptx = render(spec)
    kind = {2: "b16", 4: "b32", 8: "v2.b32", 16: "v4.b32"}[spec.vector_bytes]
    assert f"ld.global.nc.{kind} " in ptx
    assert f".param .u64 .ptr .global .align {spec.vector_bytes} x," in ptx


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("hidden", ODD + (4100, 65544, 200000))
@pytest.mark.parametrize("fused", [False, True])
def test_any_length_assembles_without_spills(dtype, hidden, fused):
    """Odd rows, rows of narrower vectors and rows longer than the registers assemble for
    sm_90 within the 64-register budget, with the default block."""
    assert_no_spills(assemble(RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused)))


@pytest.mark.parametrize("hidden,dtype,block", [
    (h, d, b) for h in ODD + (4100, 2880, 65544, 200000, 9992, 10752) for d in ("bf16", "f32")
    for b in (None, 96, 1024)
    # a window of 22 to 86 chunks on 96 threads is modeled thread by thread at every phase
    # (30 s); 50257 on 96 threads walks the same loop and peeled chunk, in 9 to 33 chunks
    if (h, b) != (131073, 96)])
@pytest.mark.parametrize("fused", [False, True])
def test_every_vector_touched_once_a_pass(hidden, dtype, block, fused):
    """In a model of the CTA (ptxsim.row_coverage), pass 1 loads every vector of the row
    exactly once, pass 2 (chunked rows) every vector again, but for the last chunk of a row
    without the residual (which pass 2 finds in the registers), and y (and s) is stored
    exactly once: guards, offsets, chunk loops and the peeled last chunk agree with the
    row's length. A row walked in a window (templates/window.ptx.j2) is modeled thread by
    thread at each phase it can start at (windowsim.every_phase): every element once,
    nothing outside the row."""
    fields = dict(hidden=hidden, dtype=dtype, fused_residual=fused)
    spec = RMSNorm(**fields, **({"block": block} if block else {}))
    vectors = {i: 1 for i in range(hidden // spec.vector)}
    chunked = spec.chunks > 1
    kept = chunked and not fused  # pass 2 finds the last chunk in the registers
    reread = (spec.chunks - 1) * spec.block * spec.vectors_per_thread  # vectors pass 2 loads
    ptx = render(spec)
    if hidden % spec.vector:
        elements = {i: 1 for i in range(hidden)}
        cover = partial(every_phase, element_bytes=spec.dtype.size, lanes=spec.vector,
                        threads=spec.block)
        assert loads_in_array(ptx, ("%rd8",) if chunked else ("%rd4",), spec.dtype.size,
                              spec.vector, spec.block, hidden, passes=2 if chunked else 1,
                              reread=reread if kept else None) == []
        stored = cover(ptx, "st", ("%rd10",) if chunked else ("%rd6",))
        assert [merged(phase) for phase in stored] == [elements] * spec.vector
        if fused:
            written = cover(ptx, "st", ("%rd9",) if chunked else ("%rd7",))
            assert [[p for p in phase if p] for phase in written] == [[elements]] * spec.vector
        if fused and not chunked:  # other CTAs write the residual: none of it outside the row
            read = cover(ptx, "ld", ("%rd7",))
            assert [[p for p in phase if p] for phase in read] == [[elements]] * spec.vector
        return
    loads = row_coverage(ptx, "ld", ("%rd8",) if chunked else ("%rd4",), spec.vector_bytes,
                         spec.block)
    assert loads == ([vectors, {i: 1 for i in range(reread)}] if kept else
                     [vectors] * (2 if chunked else 1))
    stores = row_coverage(ptx, "st", ("%rd10",) if chunked else ("%rd6",), spec.vector_bytes,
                          spec.block)
    assert merged(stores) == vectors and len(stores) == (2 if kept else 1)
    if fused:
        written = row_coverage(ptx, "st", ("%rd9",) if chunked else ("%rd7",),
                               spec.vector_bytes, spec.block)
        assert [p for p in written if p] == [vectors]  # pass 2 moves %rd9 to the weight


@pytest.mark.parametrize("hidden,dtype,fused", [
    (131072, "bf16", False), (131072, "f32", False), (200000, "bf16", False),
    (131073, "bf16", False), (131072, "bf16", True), (131073, "f16", True)])
def test_last_chunk_stays_in_registers_without_the_residual(hidden, dtype, fused):
    """A chunked row without the residual: pass 1 loads its last chunk after the loop
    under evict_first, and pass 2 normalizes it from the registers (loading only the
    weight) before it loops over the other chunks (H200, 4096 x 131072 bf16: 549.7 against
    576.4 us). With the residual, pass 2 re-reads every chunk of s, as before (keeping the
    last one was 0.4 to 1.5% slower there)."""
    spec = RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused)
    assert spec.chunks > 1
    ptx = render(spec)
    after = ptx.split("@%p3 bra            PASS1;")[1]
    last, pass2 = after.split("rsqrt.approx.f32", 1)
    between, loop2 = pass2.split("\nPASS2:")
    x_loads = re.compile(r"ld\.global[^;]*\{ %w[^;]*\];(?:\s*$|, (%\w+);)", re.M)
    trips = int(re.search(r"setp\.lt\.u32\s+%p3, %chunk, (\d+);", loop2)[1])
    if fused:  # pass 2 starts with its loop; test_every_vector_touched_once_a_pass: all of s
        assert "st.global" not in between
        return
    assert set(re.findall(r"ld\.global[^;]*\.L2::cache_hint[^;]*, (%\w+);", last)) == {"%drop"}
    assert not x_loads.search(between) and between.count("st.global") >= 1
    assert trips == spec.chunks - 1


@pytest.mark.parametrize("dtype,hidden,fused,spilled", [
    ("f16", 32768, True, 280), ("f16", 50176, True, 256), ("f16", 41984, True, 164),
    ("bf16", 29696, True, 100), ("bf16", 65536, False, 16)])
def test_wide_rows_in_registers_do_not_spill(dtype, hidden, fused, spilled):
    """Rows of 5 to 8 vectors a thread in registers convert each element again after the
    reduction (an identity prmt ptxas cannot see through), instead of keeping every f32
    value live across it: these requests spilled `spilled` bytes before, none now."""
    spec = RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused)
    assert spec.chunks == 1 and spec.vectors_per_thread > 4
    assert "prmt.b32            %w0, %w0, 0, %tmp;" in render(spec)
    assert_no_spills(assemble(spec))


def test_coverage_model_catches_a_wrong_guard():
    """The models fail a row whose last guard lets one thread too many through (2880: 360
    vectors on 192 threads), a window whose whole-vector test lets a vector past the
    row's end through (4097: elements past the row, at the phases that reach them), and a
    last row whose tail edge is loaded whole (past the array's end)."""
    ptx = render(RMSNorm(hidden=2880))
    broken = ptx.replace("setp.lt.u32         %pg1, %r3, 168;", "setp.lt.u32         %pg1, %r3, 169;")
    assert broken != ptx
    assert row_coverage(ptx, "ld", ("%rd4",), 16, 192) == [{i: 1 for i in range(360)}]
    assert row_coverage(broken, "ld", ("%rd4",), 16, 192) != [{i: 1 for i in range(360)}]
    spec = RMSNorm(hidden=4097)
    ptx = render(spec)
    broken = ptx.replace(", 4089;", ", 4090;")
    assert broken.count(", 4090;") == 9
    every = [[{i: 1 for i in range(4097)}]] * 8
    assert every_phase(ptx, "st", ("%rd6",), 2, 8, spec.block) == every
    wrong = every_phase(broken, "st", ("%rd6",), 2, 8, spec.block)
    assert wrong != every and any(4097 in p[0] for p in wrong)
    # the last row's tail loaded whole: past the array's end
    assert loads_in_array(ptx, ("%rd4",), 2, 8, spec.block, 4097) == []
    whole_tail = ptx.replace("and.pred            %pe, %pe, %pnext;", "and.pred            %pe, %pe, %pe;")
    assert whole_tail != ptx
    assert "phase 1, last=True: loads outside the row [4097, 4098, 4099, 4100, 4101, 4102]" \
        in loads_in_array(whole_tail, ("%rd4",), 2, 8, spec.block, 4097)


@pytest.mark.parametrize("hidden,dtype,fused,chunks", [
    (65536, "bf16", False, 1), (65544, "bf16", False, 2), (131072, "bf16", False, 2),
    (131072, "bf16", True, 4), (32768, "f32", False, 1), (32772, "f32", False, 2),
    (50257, "bf16", False, 1), (50257, "bf16", True, 2), (131073, "bf16", False, 3),
    (MAX_HIDDEN, "bf16", False, 16)])
def test_long_rows_take_chunks(hidden, dtype, fused, chunks):
    """Rows up to 1024 threads x 32 registers stay in registers; longer rows take chunks
    (of half the vectors with the fused residual, which holds x and residual at once)."""
    spec = RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused)
    assert spec.chunks == chunks
    ptx = render(spec)
    labels = re.findall(r"bra\s+(\w+);", ptx)
    loops = [label for label in labels  # less a window's edge labels
             if not label.endswith(("_edge", "_done", "_kept", "_shift", "_shifted"))]
    assert loops == (["DONE", "PASS1", "PASS2"] if chunks > 1 else ["DONE"])


def test_chunked_fused_rereads_the_written_sum():
    """A chunked fused row writes s to residual in pass 1 and reads it back in pass 2
    with a coherent load (the kernel wrote it: never ld.global.nc)."""
    ptx = render(RMSNorm(hidden=131072, fused_residual=True))
    pass2 = ptx.split("PASS2:")[1]
    assert "ld.global.L1::no_allocate.v4.b32 { %w0, %w1, %w2, %w3 }, [%rd8+0];" in pass2
    assert "mov.u64             %rd8, %rd7;" in ptx.split("PASS2:")[0].split("%rstd, %acc0;")[1]


def test_block_needs_no_minimum_for_long_rows():
    """A block too small to hold the row in registers chunks it instead of refusing it."""
    assert RMSNorm(hidden=65536, block=512).chunks == 2


def test_multiples_of_the_vector_keep_their_ptx():
    """The golden request renders as before (all others: golden/ptx_digests.txt)."""
    check_golden("rmsnorm_bf16_4096_fused.ptx",
                 render(RMSNorm(hidden=4096, eps=1e-6, fused_residual=True)))


#: 9 rows: rows of an odd length start at each of the 8 phases of a 16-byte vector
#: (templates/window.ptx.j2).
ODD_GPU = [(dtype, hidden, fused, rows) for dtype in ("bf16", "f16", "f32")
           for hidden, rows in zip(ODD, (9,) * len(ODD), strict=True) for fused in (False, True)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,fused,rows", ODD_GPU)
def test_gpu_odd_lengths_match_reference(dtype, hidden, fused, rows):
    """On the GPU, rows of odd length (one element a vector; 50257 and 131073 in chunks)
    match the float64 reference in every dtype, with and without the fused residual."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(hidden + rows)
    case = example(RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused), rng, rows=rows)
    errors = run_case(Executor(), case, rng)
    assert set(errors) == set(case.expected)
    for name, error in errors.items():
        assert error <= case.tolerance, f"{name}: relative error {error} > {case.tolerance}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden", [("bf16", 9992), ("f16", 10752), ("bf16", 11264),
                                          ("f16", 11776), ("bf16", 12288)])
def test_gpu_packed_rows_match_reference(dtype, hidden):
    """On the GPU, the packed rows' default blocks (4 vectors a thread, 3 CTAs an SM; the last
    sweep guarded at 9992, 10752 and 11776) match the float64 reference on 7 rows."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    spec = RMSNorm(hidden=hidden, dtype=dtype)
    assert spec.min_ctas_per_sm == 3
    rng = np.random.default_rng(hidden)
    case = example(spec, rng, rows=7)
    errors = run_case(Executor(), case, rng)
    assert set(errors) == set(case.expected)
    for name, error in errors.items():
        assert error <= case.tolerance, f"{name}: relative error {error} > {case.tolerance}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hidden,fused", [
    ("bf16", 4100, False), ("f16", 4098, True), ("bf16", 131072, False), ("bf16", 131072, True),
    ("f32", 65540, True), ("bf16", 200000, False),
    # chunks of 16-byte vectors: whole (262144), partial last (65544, 131080), f32 in 3
    ("f16", 65544, False), ("f16", 65544, True), ("bf16", 262144, True), ("bf16", 131080, False),
    ("f32", 65544, False), ("f32", 65544, True)])
def test_gpu_narrow_and_long_rows_match_reference(dtype, hidden, fused):
    """On the GPU, rows of 8- and 4-byte vectors and rows longer than the registers (two
    passes; with the residual, s written in pass 1 and read back in pass 2) match, on 5
    rows: each CTA's chunk loop stops at its own row's end."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(hidden)
    case = example(RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused), rng, rows=5)
    errors = run_case(Executor(), case, rng)
    for name, error in errors.items():
        assert error <= case.tolerance, f"{name}: relative error {error} > {case.tolerance}"


# --- tuning fields: the candidates of benchmarks/variants.py copy-rate -------------------

#: Each tuning candidate at the shapes it is timed at, and at a guarded (2880), an odd
#: (4097) and an f32 row.
TUNED = [(hidden, dtype, fused, dict(fields, **({"block": 1024} if hidden == 4097 and
                                                 "rows_per_cta" in fields else {})))
         for hidden, dtype in ((4096, "bf16"), (8192, "bf16"), (2880, "f16"), (4097, "bf16"),
                               (4096, "f32"))
         for fused in (False, True)
         for fields in (dict(rows_per_cta=2), dict(streaming_stores=True),
                        dict(rows_per_cta=2, streaming_stores=True))] + [
    (4096, "bf16", True, dict(min_ctas_per_sm=6)), (4096, "bf16", True, dict(min_ctas_per_sm=8)),
    (4096, "bf16", True, dict(rows_per_cta=2, min_ctas_per_sm=5)),
    (8192, "bf16", True, dict(min_ctas_per_sm=3)),
    (1024, "bf16", False, dict(rows_per_cta=4, block=128)),
    (2048, "f32", True, dict(rows_per_cta=4, block=512))] + [
    # x (and residual) kept in L2 (l2_evict_last), with the CTAs an SM cache_hints.py times
    # (at 8192 the field's default takes 4; min_ctas_per_sm=None is the policy alone, at 2)
    (hidden, dtype, fused, dict(l2_evict_last=True, **fields))
    for hidden, dtype, fused, fields in (
        (4096, "bf16", False, {}), (4096, "bf16", False, dict(min_ctas_per_sm=8)),
        (8192, "bf16", False, {}), (8192, "bf16", False, dict(min_ctas_per_sm=None)),
        (8192, "f16", False, {}),
        (10240, "bf16", False, dict(min_ctas_per_sm=4)),
        (12288, "bf16", False, {}), (2880, "f16", False, {}), (4096, "f32", False, {}),
        (4096, "bf16", True, {}), (4096, "bf16", True, dict(min_ctas_per_sm=8)),
        (8192, "bf16", True, dict(min_ctas_per_sm=4)), (2880, "f16", True, {}),
        (4096, "bf16", False, dict(rows_per_cta=2)))]


@pytest.mark.parametrize("hidden,dtype,fused,fields", TUNED)
def test_tuning_fields_assemble_without_spills(hidden, dtype, fused, fields):
    """Every tuning candidate assembles for sm_90 without spills."""
    assert_no_spills(assemble(RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused,
                                      **fields)))


def test_tuning_defaults_render_the_plain_template():
    """With the tuning fields at their defaults, the built-in RMSNorm renders exactly the PTX
    of rmsnorm.ptx.j2, which spec classes written over it render from five fields."""
    from specdsl import baked, kernel_spec

    @kernel_spec(template="rmsnorm.ptx.j2", entry="rmsnorm")
    class FiveFields:
        hidden: int = baked(4096)
        eps: float = baked(1e-6)
        dtype: DType = baked(DType.BF16)
        fused_residual: bool = baked(False)
        block: int = baked(256)

    for hidden, fused, block in ((4096, False, 256), (4097, True, 288), (131072, True, 1024)):
        spec = RMSNorm(hidden=hidden, fused_residual=fused)
        assert spec.block == block and (spec.rows_per_cta, spec.min_ctas_per_sm) == (1, None)
        assert render(spec) == render(FiveFields(hidden=hidden, fused_residual=fused,
                                                 block=block))


def test_rows_per_cta_share_one_barrier_and_the_weight():
    """Two rows a CTA: one bar.sync for both sums, the weight loaded once, the second row's
    loads and stores guarded by its own predicate, and a grid of half the rows (rounded up)."""
    spec = RMSNorm(hidden=4096, rows_per_cta=2)
    ptx = render(spec)
    assert ptx.count("bar.sync") == 1 and ptx.count("[%rd5+") == 2  # two weight vectors
    assert "// CTA add-reduce of %acc0,%acc2 over 8 warp(s) in rmsnorm_partial" in ptx
    assert "setp.lt.u32         %prow1, %r9, %r2;" in ptx
    assert "@%prow1 st.global.v4.b32 [%rd6+8192]" in ptx
    assert spec.launch_dims(7) == ((4, 1, 1), (256, 1, 1))


_KEPT_LOAD = re.compile(r"(@%pg\d+ )?ld\.global(?:\.nc)?\.L2::cache_hint\.v4\.b32 \{[^}]*\}, "
                        r"\[(%rd[47])\+(\d+)\], %keep;")


@pytest.mark.parametrize("spec", [
    RMSNorm(hidden=4096, fused_residual=True), RMSNorm(hidden=8192, dtype="f16", fused_residual=True),
    RMSNorm(hidden=2880, fused_residual=True), RMSNorm(hidden=16384, fused_residual=True),
    RMSNorm(hidden=4096, dtype="f32", fused_residual=True)], ids=repr)
def test_residual_rows_keep_their_lines_until_read(spec):
    """With the residual, x and residual load under an L2 evict_last policy, and every line
    they load is demoted to evict_normal once the sum of squares has read it, before the CTA
    reduction: lanes 0, 8, 16 and 24 (lane & 7 == 0) at the 128-byte line of their vector,
    one applypriority per load, under the load's own guard where the sweep runs past the row.
    (The H200 figures and why: docs/kernels/rmsnorm.md, "Cache hints".)"""
    ptx = render(spec)
    loads = [(guard, base, int(offset)) for guard, base, offset in _KEPT_LOAD.findall(ptx)]
    assert len(loads) == 2 * spec.vectors_per_thread
    assert_lines_demoted(ptx, loads, {"%rd12": "%rd4", "%rd13": "%rd7"})
    policy = ptx.index("createpolicy.fractional.L2::evict_last.b64 %keep, 1.0;")
    squares_summed = ptx.index("add.f32             %acc0, %acc0, %acc1;")
    first_demote = ptx.index("applypriority")
    assert policy < ptx.index("], %keep;") < squares_summed < first_demote < ptx.index("bar.sync")
    assert_no_spills(assemble(spec))


@pytest.mark.parametrize("spec,target", [
    (RMSNorm(hidden=4096), "sm_90"), (RMSNorm(hidden=4097, fused_residual=True), "sm_90"),
    (RMSNorm(hidden=32768, fused_residual=True), "sm_90"),
    (RMSNorm(hidden=4096, fused_residual=True, rows_per_cta=2), "sm_90"),
    (RMSNorm(hidden=4096, dtype="f32", fused_residual=True), "sm_75")], ids=repr)
def test_other_rows_load_without_a_policy(spec, target):
    """Rows without the residual (evict_last there costs the next kernel's L2 hits, and
    demoting its lines costs the gain), windowed rows, rows of more than 4 vectors a thread
    (they spilled), several rows a CTA, and targets before sm_80 (no createpolicy) load
    plainly and demote nothing; every store is a plain st.global."""
    ptx = render(spec, target)
    assert "%keep" not in ptx and "applypriority" not in ptx
    assert "st.global.L1::no_allocate" not in ptx and "ld.global.L1::no_allocate" not in ptx


@pytest.mark.parametrize("spec", [
    RMSNorm(hidden=4096, l2_evict_last=True), RMSNorm(hidden=8192, l2_evict_last=True),
    RMSNorm(hidden=12288, l2_evict_last=True), RMSNorm(hidden=2880, dtype="f16", l2_evict_last=True),
    RMSNorm(hidden=4096, dtype="f32", l2_evict_last=True, min_ctas_per_sm=4),
    RMSNorm(hidden=4096, rows_per_cta=2, l2_evict_last=True)], ids=repr)
def test_l2_evict_last_keeps_x_and_changes_nothing_else(spec):
    """l2_evict_last: every load of x carries the evict_last policy, created once before the
    first load and never lifted (no applypriority); without the policy's lines and hints the
    PTX is the same request's without the field, load for load."""
    ptx = render(spec)
    loads = _KEPT_LOAD.findall(ptx)
    assert len(loads) == spec.vectors_per_thread * spec.rows_per_cta
    assert {base for _, base, _ in loads} == {"%rd4"}
    assert "applypriority" not in ptx and ptx.count("createpolicy") == 1
    assert ptx.index("createpolicy") < ptx.index("], %keep;")
    assert "// never demoted (l2_evict_last)" in ptx
    assert without_kept_policy(ptx) == render(attrs.evolve(spec, l2_evict_last=False))


@pytest.mark.parametrize("spec", [
    RMSNorm(hidden=4096, fused_residual=True, l2_evict_last=True),
    RMSNorm(hidden=8192, dtype="f16", fused_residual=True, l2_evict_last=True),
    RMSNorm(hidden=16384, fused_residual=True, l2_evict_last=True)], ids=repr)
def test_l2_evict_last_residual_rows_are_not_demoted(spec):
    """With the residual, x and residual load under the policy as by default, but no line is
    demoted after the sum of squares (the default demotes each one)."""
    ptx = render(spec)
    loads = _KEPT_LOAD.findall(ptx)
    assert len(loads) == 2 * spec.vectors_per_thread
    assert {base for _, base, _ in loads} == {"%rd4", "%rd7"}
    assert "applypriority" not in ptx and "%pline" not in ptx
    assert render(attrs.evolve(spec, l2_evict_last=False)).count("applypriority.global") == len(loads)


def test_l2_evict_last_needs_sm_80():
    """Before sm_80 there is no createpolicy: the request names the field and the target."""
    with pytest.raises(UnsupportedTargetError,
                       match="l2_evict_last uses createpolicy and .L2::cache_hint: sm_80 or newer"):
        render(RMSNorm(hidden=4096, dtype="f32", l2_evict_last=True), "sm_75")


def test_tuning_directives():
    """min_ctas_per_sm is the .minnctapersm directive; streaming_stores stores with .cs."""
    assert ".minnctapersm 6     // 1536 threads an SM: ptxas keeps to 40 registers" in render(
        RMSNorm(hidden=4096, fused_residual=True, min_ctas_per_sm=6))
    streaming = render(RMSNorm(hidden=4096, fused_residual=True, streaming_stores=True))
    assert streaming.count("st.global.cs.v4.b32") == 4 and "st.global.L1" not in streaming


@pytest.mark.parametrize("hidden,dtype,fused,rows_per_cta,block", [
    (4096, "bf16", False, 2, 256), (4096, "bf16", True, 2, 256), (2880, "f16", True, 2, 192),
    (4097, "bf16", False, 2, 1024), (1024, "f32", True, 2, 128), (1000, "bf16", True, 4, 128)])
def test_rows_per_cta_touch_every_vector_of_each_row_once(hidden, dtype, fused, rows_per_cta,
                                                          block):
    """In a model of the CTA (ptxsim.row_coverage), a CTA of several rows loads and stores
    every vector of each of its rows exactly once (row i at vectors i * row + v)."""
    spec = RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused, rows_per_cta=rows_per_cta,
                   block=block)
    ptx = render(spec)
    every = [{i: 1 for i in range(rows_per_cta * hidden // spec.vector)}]
    assert row_coverage(ptx, "ld", ("%rd4",), spec.vector_bytes, spec.block) == every
    assert row_coverage(ptx, "st", ("%rd6",), spec.vector_bytes, spec.block) == every
    if fused:
        assert row_coverage(ptx, "st", ("%rd7",), spec.vector_bytes, spec.block) == every


@pytest.mark.parametrize("fields,message", [
    (dict(hidden=4096, rows_per_cta=3), "RMSNorm.rows_per_cta = 3 is invalid: expected one of "
                                        "1, 2, 4 rows a CTA"),
    (dict(hidden=131072, rows_per_cta=2), "RMSNorm.rows_per_cta = 2 is invalid: expected 1 for "
                                          "rows longer than the registers hold"),
    (dict(hidden=16384, rows_per_cta=2), "RMSNorm.rows_per_cta = 2 is invalid: expected at most "
                                         "1: 2 rows of 4 vectors a thread exceed the 4"),
    (dict(hidden=1024, rows_per_cta=4), "RMSNorm.rows_per_cta = 4 is invalid: expected at most "
                                        "2: 4 rows of 2 vectors a thread exceed the 4"),
    (dict(hidden=4096, min_ctas_per_sm=9), "RMSNorm.min_ctas_per_sm = 9 is invalid: expected "
                                           "None or 1 to 8 CTAs of 256 threads an SM"),
    (dict(hidden=4096, min_ctas_per_sm=0), "RMSNorm.min_ctas_per_sm = 0 is invalid"),
    (dict(hidden=131072, l2_evict_last=True),
     "RMSNorm.l2_evict_last = True is invalid: expected False for hidden=131072 bf16: the "
     "registers of 1024 threads hold at most 65536 elements, and a longer row (this one takes 2 "
     "chunks) takes two passes with L2 policies of their own"),
    (dict(hidden=4097, l2_evict_last=True),
     "RMSNorm.l2_evict_last = True is invalid: expected False for hidden=4097 bf16: the policy "
     "applies to rows of whole 16-byte vectors (hidden a multiple of 8), and this row is "
     "walked in a window"),
    (dict(hidden=4098, dtype="f32", l2_evict_last=True),
     "RMSNorm.l2_evict_last = True is invalid: expected False for hidden=4098 f32: the policy "
     "applies to rows of whole 16-byte vectors (hidden a multiple of 4), and this row moves "
     "in 8-byte vectors"),
])
def test_tuning_fields_refused(fields, message):
    """Tuning values the kernel cannot take are refused, naming the field and the limit."""
    with pytest.raises(SpecError, match=re.escape(message)):
        RMSNorm(**fields)


GPU_TUNED = [(h, dt, fused, fields) for h, dt, fused, fields in TUNED
             if h in (4096, 2880, 4097) or fields.get("rows_per_cta", 1) == 4
             or fields.get("l2_evict_last")]


@pytest.mark.gpu
@pytest.mark.parametrize("hidden,dtype,fused,fields", GPU_TUNED + [
    (hidden, dtype, False, {"min_ctas_per_sm": None}) for hidden, _, _ in TWO_VECTOR_ROWS
    for dtype in ("bf16", "f16")])
def test_gpu_tuning_fields_give_the_default_output(hidden, dtype, fused, fields):
    """On the GPU, each tuning candidate writes y (and s) bit for bit as the default request
    of the same block (the same per-row arithmetic, in the same order), on 7 rows (the last CTA of 2 or 4 rows
    holds fewer), within the tolerance of the float64 reference."""
    from differential import compare, run_rmsnorm
    from specdsl import Executor

    torch = pytest.importorskip("torch")
    executor = Executor()
    same_block = {"block": fields["block"]} if "block" in fields else {}
    default = RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused, **same_block)
    tuned = RMSNorm(hidden=hidden, dtype=dtype, fused_residual=fused, **fields)
    rng = np.random.default_rng(hidden)
    x = from_bits(to_bits(rng.standard_normal((7, hidden)), default.dtype), default.dtype)
    weight = from_bits(to_bits(rng.normal(1.0, 0.5, hidden), default.dtype), default.dtype)
    residual = from_bits(to_bits(rng.standard_normal((7, hidden)), default.dtype),
                         default.dtype) if fused else None
    want = run_rmsnorm(executor, torch, default, x, weight, residual)
    got = run_rmsnorm(executor, torch, tuned, x, weight, residual)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} of {tuned!r}")
    source = want["residual"] if fused else x
    compare(got["y"], reference(source, weight, float(np.float32(tuned.eps))), tuned.dtype,
            TOLERANCE[tuned.dtype], repr(tuned))


@pytest.mark.gpu
@pytest.mark.parametrize("hidden,dtype,offset", [(4096, "bf16", 8), (2880, "f16", 24), (4096, "f32", 4)])
def test_gpu_residual_rows_off_the_line_match_aligned_ones(hidden, dtype, offset):
    """x and residual that start 16 to 48 bytes past a 128-byte line (vector-aligned, as the
    executor requires, but not line-aligned) give y and s bit for bit as aligned arrays: the
    demotion of their L2 lines rounds each address down to its line, as applypriority needs."""
    from differential import _launch, poisoned, run_rmsnorm, to_device, to_host
    from specdsl import Executor

    torch = pytest.importorskip("torch")
    executor = Executor()
    spec = RMSNorm(hidden=hidden, dtype=dtype, fused_residual=True)
    rows = 9
    rng = np.random.default_rng(hidden + offset)
    x, residual = (from_bits(to_bits(rng.standard_normal((rows, hidden)), spec.dtype), spec.dtype)
                   for _ in range(2))
    weight = from_bits(to_bits(rng.normal(1.0, 0.5, hidden), spec.dtype), spec.dtype)
    want = run_rmsnorm(executor, torch, spec, x, weight, residual)

    def off_the_line(values: np.ndarray):
        flat = np.concatenate([np.zeros(offset), values.ravel()])
        return to_device(torch, to_bits(flat, spec.dtype), spec.dtype)[offset:].view(rows, hidden)

    x_dev, residual_dev = off_the_line(x), off_the_line(residual)
    assert x_dev.data_ptr() % 128 != 0 and x_dev.data_ptr() % spec.vector_bytes == 0
    y = poisoned(torch, (rows, hidden), spec.dtype)
    _launch(executor, torch, spec, [x_dev, residual_dev, to_device(torch, to_bits(weight, spec.dtype),
                                                                   spec.dtype), y, np.uint32(rows)], rows)
    np.testing.assert_array_equal(to_host(torch, y, spec.dtype), want["y"])
    np.testing.assert_array_equal(to_host(torch, residual_dev.contiguous(), spec.dtype),
                                  want["residual"])
