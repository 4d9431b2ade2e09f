"""Softmax: rendering, nvJitLink assembly, refused requests, reference, GPU results."""

from __future__ import annotations

import math
import re
from functools import partial

import numpy as np
import pytest

from golden import check_golden
from ptxcheck import assemble, assert_lines_demoted, assert_no_spills, without_kept_policy
from ptxsim import check_cluster_protocol, row_coverage
from specdsl import SpecError, render
from specdsl._spec.dtype import DType
from specdsl.kernels import Softmax
from specdsl.kernels._rows import most_vectors_per_thread
from specdsl.kernels.case import from_bits, to_bits
from specdsl.kernels.softmax import (
    KEPT_EXPONENTIALS_ROWS_PER_SM,
    MAX_COLS,
    example,
    reference,
    suggested_keep_exponentials,
    suggested_split,
)
from windowsim import every_phase, loads_in_array, merged

# Smallest row, an odd size (guarded sweep), register-resident rows, then 2, 4 and 8 chunks.
COLS = {DType.BF16: (8, 1000, 4096, 32768, 131072, MAX_COLS),
        DType.F16: (8, 1000, 32768, 50000),
        DType.F32: (4, 1000, 16384, 131072, MAX_COLS)}
GRID = [(dtype, cols) for dtype, sizes in COLS.items() for cols in sizes]


@pytest.mark.parametrize("dtype,cols", GRID)
def test_assembles_for_sm90(dtype, cols):
    """Every dtype at small, odd, resident and multi-chunk row lengths assembles for sm_90."""
    assert assemble(Softmax(cols=cols, dtype=dtype)).cubin


@pytest.mark.parametrize("scale", [-0.5, 0.0])
def test_negative_and_zero_scale_assemble(scale):
    """A negative scale (packed min instead of max) and a zero scale assemble too."""
    spec = Softmax(cols=1000, scale=scale, dtype="f16")
    ptx = assemble(spec) and render(spec)
    assert ("min.f16x2" in ptx) == (scale < 0)


# Rows of several chunks: full chunks then one vector (65536 + 8), full chunks only (131072,
# MAX_COLS), a partial last chunk (200000), and f32 93536: 2 full chunks and an almost full
# third, which spilled while ptxas unrolled the 2-trip loop.
LONG = [(dtype, cols) for dtype in ("bf16", "f16", "f32")
        for cols in (65536 + 8, 131072, 200000, MAX_COLS)] + [("f32", 93536)]


@pytest.mark.parametrize("dtype,cols", LONG)
def test_long_rows_do_not_spill(dtype, cols):
    """Chunked rows assemble without spills at the 64-register budget."""
    assert_no_spills(assemble(Softmax(cols=cols, dtype=dtype)))


@pytest.mark.parametrize("cols", [65536, 131072, MAX_COLS])
def test_chunk_loops_are_rolled(cols):
    """Each pass loops over every chunk but the last (8 loads a trip at 2, 4 or 8 chunks);
    pass 1 loads the last chunk once more, peeled, and pass 2 finds it in the registers."""
    ptx = render(Softmax(cols=cols, dtype="f32"))
    assert ptx.count("ld.global") == 3 * 8
    assert re.findall(r"bra\s+(\w+);", ptx) == ["DONE", "PASS1", "PASS2"]


@pytest.mark.parametrize("cols,dtype", [(131072, "bf16"), (131072, "f32"), (200000, "bf16"),
                                        (131073, "bf16"), (4096 + 8, "f32")])
def test_last_chunk_stays_in_registers(cols, dtype):
    """A chunked row's pass 1 walks every chunk but the last in its loop under evict_last,
    then the last one under evict_first (no pass reads it again); pass 2 writes that
    chunk's y from the registers before it loads anything, then loops over the others
    (H200, 4096 x 131072 bf16: 547.9 against 575.3 us; docs/kernels/softmax.md)."""
    spec = Softmax(cols=cols, dtype=dtype, **({"block": 96} if cols < 8192 else {}))
    assert spec.chunks > 1
    ptx = render(spec)
    loop1, after = ptx.split("PASS1:", 1)[1].split("@%p3 bra            PASS1;")
    last, pass2 = after.split("rcp.rn.f32          %inv, %a0;")
    kept, loop2 = pass2.split("\nPASS2:")
    hinted = re.compile(r"ld\.global[^;]*\.L2::cache_hint[^;]*, (%\w+);")
    assert set(hinted.findall(loop1)) == {"%keep"} and set(hinted.findall(loop2)) == {"%drop"}
    assert set(hinted.findall(last)) == {"%drop"}
    assert "ld.global" not in kept and kept.count("st.global") >= 1
    assert re.search(r"setp\.lt\.u32\s+%p3, %chunk, (\d+);", loop2)[1] == str(spec.chunks - 1)


def test_golden_bf16():
    """The bf16 cols=4096 scale=0.125 request renders exactly the reviewed PTX."""
    check_golden("softmax_bf16_4096.ptx", render(Softmax(cols=4096, scale=0.125)))


def test_scale_baked_as_base2_immediate():
    """scale is baked as the f32 immediate of 2 * scale * log2(e) (the exponent is formed
    from (x - max) / 2, which cannot overflow)."""
    assert "0f3EB8AA3B" in render(Softmax(cols=4096, scale=0.125))  # 0.25 * 1.442695...


@pytest.mark.parametrize("cols", [4096, 131072])
def test_no_exponent_from_scaled_maximum(cols):
    """The exponent is ((x - M) / 2) * 2c: no fma(x, c, -c M), whose c M overflows f32 for
    x near the dtype's largest value (then every output was NaN)."""
    ptx = render(Softmax(cols=cols))
    assert "fma.rn.f32          %f0, %f0, 0f3F000000, %mh;" in ptx
    assert "%negm" not in ptx and not re.search(r"fma\.rn\.f32 +%f\d+, %f\d+, %c,", ptx)


def test_chunked_running_max_starts_finite():
    """Pass 1's running maximum starts at -FLT_MAX (+FLT_MAX for scale < 0), so a thread
    whose first chunk is all -inf rescales by 2^0, not by 2^(-inf - -inf) = NaN."""
    assert "mov.b32             %m0, 0fFF7FFFFF;" in render(Softmax(cols=131072))
    assert "mov.b32             %m0, 0f7F7FFFFF;" in render(Softmax(cols=131072, scale=-1.0))


@pytest.mark.parametrize("cols,dtype,chunks", [(4096, "bf16", 1), (32768, "bf16", 1),
                                               (131072, "bf16", 2), (MAX_COLS, "f32", 8)])
def test_chunks(cols, dtype, chunks):
    """Rows up to 1024 threads x 8 vectors stay in registers; longer rows take chunks."""
    assert Softmax(cols=cols, dtype=dtype).chunks == chunks


def test_bytes_read_counts_second_pass():
    """bytes_read counts x once and, for chunked rows, every chunk but the last again (the
    last stays in the registers); bytes_moved counts x and y once."""
    resident, chunked = Softmax(cols=4096), Softmax(cols=131072)
    assert resident.bytes_read(3) == 3 * 4096 * 2
    assert chunked.chunks == 2 and chunked.bytes_read(3) == 3 * (131072 + 65536) * 2
    assert chunked.bytes_moved(3) == 2 * 3 * 131072 * 2
    f32 = Softmax(cols=131072, dtype="f32")   # 4 chunks of 1024 threads x 8 vectors of 4
    assert f32.chunks == 4 and f32.bytes_read(2) == 2 * (131072 + 3 * 32768) * 4


@pytest.mark.parametrize("cols,dtype", [(4096, "bf16"), (1000, "f16"), (MAX_COLS, "f32")])
def test_block_matches_reqntid(cols, dtype):
    """launch_dims gives the block the PTX declares with .reqntid."""
    spec = Softmax(cols=cols, dtype=dtype)
    declared = int(re.search(r"\.reqntid (\d+)", render(spec)).group(1))
    assert spec.launch_dims(2) == ((2, 1, 1), (declared, 1, 1))


@pytest.mark.parametrize("fields,message", [
    (dict(cols=0), "Softmax.cols = 0 is invalid: expected a positive number of elements"),
    (dict(cols=MAX_COLS + 8), f"Softmax.cols = {MAX_COLS + 8} is invalid: expected at most {MAX_COLS}"),
    (dict(cols=4096, scale=1e39), "Softmax.scale = 1e+39 is invalid"),
    (dict(cols=4096, scale=math.inf), "Softmax.scale must be a finite float"),
    (dict(cols=4096, dtype="i32"), "Softmax.dtype = DType.I32 is invalid: expected one of"),
    (dict(cols=MAX_COLS, dtype="f32", block=512),
     "Softmax.block = 512 is invalid: expected at least 1024 threads: a row of 65536 vectors "
     "is held in at most 8 chunks of 8 vectors a thread"),
    (dict(cols=4096, block=1056), "expected a multiple of 32 from 32 to 1024"),
])
def test_refused_requests(fields, message):
    """Shapes the template cannot handle are refused at construction, naming field and value."""
    with pytest.raises(SpecError, match=re.escape(message)):
        Softmax(**fields)


def test_launch_dims_refuses_zero_rows():
    """launch_dims refuses rows = 0."""
    with pytest.raises(SpecError, match=re.escape("Softmax rows = 0 is invalid")):
        Softmax(cols=4096).launch_dims(0)


def test_reference_values():
    """The float64 reference is exp(scale * x) normalized: [0, ln 3] -> [1/4, 3/4]."""
    np.testing.assert_allclose(reference(np.array([[0.0, math.log(3.0)]]), 1.0), [[0.25, 0.75]])


def test_reference_is_stable_for_large_inputs():
    """Subtracting the maximum keeps the reference finite for huge logits."""
    np.testing.assert_allclose(reference(np.array([[1000.0, 1000.0]]), 2.0), [[0.5, 0.5]])


def test_example_arguments_follow_param_order():
    """The example's arguments are x, y, rows, in the entry's .param order."""
    case = example(Softmax(cols=64), np.random.default_rng(0), rows=2)
    assert [name for name, _ in case.args] == ["x", "y", "rows"]
    assert re.findall(r"\.param \.\w+(?: \.ptr \.global \.align \d+)? (\w+)",
                      render(case.spec)) == ["x", "y", "rows"]


GPU_CASES = [
    ("bf16", 4096, 1.0, 300), ("f16", 1000, -0.7, 33), ("f32", 4096, 0.125, 64),
    ("bf16", 8, 1.0, 1), ("bf16", 32768, 0.5, 5), ("bf16", 131072, 1.0, 2),
    ("bf16", MAX_COLS, 1.0, 1), ("f32", MAX_COLS, 1.0, 1), ("f16", 50000, 2.0, 3),
    ("bf16", 4096, 0.0, 2), ("f16", 131072, 0.125, 2),
    # several long rows in chunks of 16-byte vectors: whole, and a partial last chunk
    ("f16", MAX_COLS, 1.0, 3), ("bf16", 65544, -0.5, 5), ("f32", 65544, 1.0, 4),
]
# (dtype, cols, scale, rows, split): rows shared by a cluster of CTAs
SPLIT_CASES = [
    ("bf16", 131072, 1.0, 3, 8), ("f32", 131072, 0.125, 2, 8), ("f16", 50000, -0.5, 5, 2),
    ("bf16", 4096, 1.0, 300, 8), ("bf16", MAX_COLS, 1.0, 1, 8), ("f32", 8, 1.0, 1, 2),
    ("bf16", 32768, 0.0, 4, 4), ("f16", 24, 2.0, 7, 3),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,cols,scale,rows", GPU_CASES)
def test_gpu_matches_reference(dtype, cols, scale, rows):
    """On the GPU, y is within the dtype's tolerance of the float64 softmax."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(cols + rows)
    case = example(Softmax(cols=cols, scale=scale, dtype=dtype), rng, rows=rows)
    errors = run_case(Executor(), case, rng)
    assert errors["y"] <= case.tolerance, f"relative error {errors['y']} > {case.tolerance}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,cols,scale,rows,split", SPLIT_CASES)
def test_gpu_split_rows_match_reference(dtype, cols, scale, rows, split):
    """A row shared by a cluster of `split` CTAs gives the float64 softmax too."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(cols + rows + split)
    case = example(Softmax(cols=cols, scale=scale, dtype=dtype, split=split), rng, rows=rows)
    errors = run_case(Executor(), case, rng)
    assert errors["y"] <= case.tolerance, f"relative error {errors['y']} > {case.tolerance}"


def test_tolerance_covers_f16_subnormal_outputs():
    """Where rounding the reference to f16 alone exceeds 2e-3, the tolerance follows it."""
    resident = example(Softmax(cols=4096, dtype="f16"), np.random.default_rng(0), rows=2)
    assert resident.tolerance == 2e-3
    long = example(Softmax(cols=131072, scale=0.125, dtype="f16"), np.random.default_rng(0),
                   rows=1)
    assert 2e-3 < long.tolerance < 2e-2


@pytest.mark.parametrize("fields,message", [
    (dict(cols=4096, split=0), "Softmax.split = 0 is invalid: expected 1 (one CTA a row) to 8"),
    (dict(cols=4096, split=9), "Softmax.split = 9 is invalid"),
    (dict(cols=4104, split=2), "expected a split of the row into equal whole 16-byte vectors "
                               "(cols=4104 of bf16 is 513 vectors)"),
    (dict(cols=50257, split=2), "expected a split of the row into equal whole 2-byte vectors "
                                "(cols=50257 of bf16 is 50257 vectors)"),
    (dict(cols=MAX_COLS, split=2), "expected each CTA's slice to fit its registers (at most "
                                   "8192 vectors; this is 16384)"),
    (dict(cols=131072, split=2, block=256), "Softmax.block = 256 is invalid: expected at least "
                                            "1024 threads with split=2: each CTA holds its "
                                            "slice of 8192 vectors in registers, 8 a thread"),
])
def test_split_refused(fields, message):
    """Splits the template cannot do are refused at construction, naming field and value."""
    with pytest.raises(SpecError, match=re.escape(message)):
        Softmax(**fields)


def test_split_launch_dims_and_ptx():
    """split CTAs a row: the grid is rows * split, the PTX declares the cluster, and the CTAs
    meet in two cluster reductions (max, sum), each pushed to every CTA and waited on with an
    mbarrier, in the order ptxsim.check_cluster_protocol checks."""
    spec = Softmax(cols=131072, split=8)
    assert (spec.block, spec.chunks) == (256, 1)
    assert spec.launch_dims(3) == ((24, 1, 1), (256, 1, 1))
    assert spec.bytes_read(3) == 3 * 131072 * 2
    ptx = render(spec)
    assert ".reqnctapercluster 8, 1, 1" in ptx
    assert check_cluster_protocol(ptx) == 2
    assert ".reqnctapercluster" not in render(Softmax(cols=131072))
    with pytest.raises(SpecError, match=r"expected at most 268435455 rows at split=8"):
        spec.launch_dims(2**28)


@pytest.mark.parametrize("dtype,cols,split", [(d, c, s) for d, c, _, _, s in SPLIT_CASES])
def test_split_assembles_without_spills(dtype, cols, split):
    """Every split request the GPU test runs assembles for sm_90 without spills."""
    assert_no_spills(assemble(Softmax(cols=cols, dtype=dtype, split=split)))


def test_split_needs_sm90():
    """Clusters are sm_90 and newer: rendering a split for sm_80 is refused."""
    from specdsl import RenderError

    with pytest.raises(RenderError, match=r"for sm_80: split = 2 \(a thread block cluster a "
                                          r"row\) needs sm_90 or newer"):
        render(Softmax(cols=4096, split=2), "sm_80")


@pytest.mark.parametrize(("cols", "dtype", "block"), [
    (4096, "bf16", 256), (8192, "bf16", 256), (8192, "f32", 256), (32768, "bf16", 512),
    (65536, "bf16", 1024), (131072, "bf16", 1024), (64, "bf16", 32)])
def test_default_block(cols, dtype, block):
    """256-thread CTAs up to 256 x 8 vectors a row, then more threads (measured choice)."""
    assert Softmax(cols=cols, dtype=dtype).block == block


@pytest.mark.parametrize("cols,dtype,rows,split", [
    # 8 CTAs a row up to a quarter of the 132 SMs in rows (33), 4 up to 0.46 (60), 2 up to
    # half (66), then 1
    (65536, "bf16", 1, 8), (65536, "bf16", 33, 8), (65536, "bf16", 34, 4),
    (65536, "bf16", 60, 4), (65536, "bf16", 61, 2), (65536, "bf16", 66, 2),
    (65536, "bf16", 67, 1), (32768, "bf16", 1, 8),
    # parts longer than 1024 vectors: 8 up to half the SMs in rows
    (131072, "bf16", 66, 8), (131072, "bf16", 67, 1), (131072, "bf16", 256, 1),
    (128256, "bf16", 48, 8), (32768, "f32", 40, 4), (65536, "f32", 40, 8),
    # rows a 256-thread CTA holds (2048 vectors) are not split
    (16384, "bf16", 1, 1), (8192, "f32", 1, 1), (16384, "f32", 1, 8), (MAX_COLS, "bf16", 1, 8),
    # the largest cluster that cuts the row (6250 f16 vectors: 2 parts)
    (50000, "f16", 3, 2), (50000, "f16", 100, 1)])
def test_suggested_split(cols, dtype, rows, split):
    """Long rows split over the largest cluster that cuts them into parts held in registers,
    within its bound in rows."""
    assert suggested_split(cols, dtype, rows) == split
    Softmax(cols=cols, dtype=dtype, split=split)  # every suggestion is a valid request


def test_suggested_split_follows_the_sm_count():
    """The bounds are fractions of the SM count: of 64 SMs, 8 CTAs a row of 65536 up to 16
    rows, 4 up to 29 (0.46 x 64 = 29.44), 2 up to 32; 8 of 131072 up to 32."""
    assert [suggested_split(65536, "bf16", rows, sm_count=64)
            for rows in (16, 17, 29, 30, 32, 33)] == [8, 4, 4, 2, 2, 1]
    assert [suggested_split(131072, "bf16", rows, sm_count=64) for rows in (32, 33)] == [8, 1]


@pytest.mark.parametrize("args,message", [
    ((4096, "i99", 1), r"suggested_split: expected a dtype name"),
    ((131072, "f64", 1), r"suggested_split: dtype = f64 is invalid: Softmax takes f32, f16 or bf16"),
    ((131072, "bf16", 0), r"suggested_split: rows = 0 is invalid: expected a positive int"),
    ((131072, "bf16", 1.5), r"suggested_split: rows = 1.5 is invalid"),
    ((131072, "bf16", True), r"suggested_split: rows = True is invalid"),
    ((-8, "bf16", 1), r"suggested_split: cols = -8 is invalid")])
def test_suggested_split_refuses_bad_input(args, message):
    """Nonsense in gets a SpecError naming the argument, not a split."""
    with pytest.raises(SpecError, match=message):
        suggested_split(*args)


@pytest.mark.parametrize("cols,dtype,rows,sm_count,fields,kept", [
    (8192, "bf16", 1, 132, {}, True),
    (8192, "bf16", 8 * 132, 132, {}, True),       # 8 rows an SM: the limit
    (8192, "bf16", 8 * 132 + 1, 132, {}, False),  # one more
    (8192, "bf16", 8 * 78, 78, {}, True),          # the limit follows the SM count
    (8192, "bf16", 8 * 78 + 1, 78, {}, False),
    (4096, "bf16", 256, 132, {}, True),            # MORE_CTAS's 7 CTAs make no room; None does
    (2048, "f16", 64, 132, {"l2_evict_last": True}, True),
    (16384, "f32", 256, 132, {}, True),
    (16384, "bf16", 256, 132, {}, False),          # 64 exponentials a thread on 256 threads
    (4097, "bf16", 256, 132, {}, False),           # a window's .maxnreg 40
    (131072, "bf16", 1, 132, {}, False),           # chunked: pass 2 computes them again
    (32768, "bf16", 1, 132, {"split": 8}, False),  # split rows: not measured
    (0, "bf16", 1, 132, {}, False)])               # no such request: not a suggestion
def test_suggested_keep_exponentials(cols, dtype, rows, sm_count, fields, kept):
    """Few rows an SM, one CTA a row, registers enough: keep; each suggestion is accepted."""
    assert KEPT_EXPONENTIALS_ROWS_PER_SM == 8
    assert suggested_keep_exponentials(cols, dtype, rows, sm_count, **fields) is kept
    if kept:
        request = Softmax(cols=cols, dtype=dtype, keep_exponentials=True, **fields)
        assert request.min_ctas_per_sm is None  # the field's own default


@pytest.mark.parametrize("args,message", [
    ((8192, "bf16", 0), r"suggested_keep_exponentials: rows = 0 is invalid: expected a positive int"),
    ((8192, "bf16", True), r"suggested_keep_exponentials: rows = True is invalid"),
    ((8192, "bf16", 1, 0), r"suggested_keep_exponentials: sm_count = 0 is invalid")])
def test_suggested_keep_exponentials_refuses_bad_input(args, message):
    """Nonsense counts get a SpecError naming the argument."""
    with pytest.raises(SpecError, match=message):
        suggested_keep_exponentials(*args)


@pytest.mark.gpu
@pytest.mark.parametrize("prefix", [57352, 65536, 57344, 131064])
def test_gpu_long_row_masked_prefix(prefix):
    """A bf16 row of 131072 (two chunks) whose first `prefix` elements are -inf (a causal
    or padding mask) gives the finite softmax of the rest; from 57352 on, where a thread's
    whole first chunk is masked, it gave NaN everywhere (issue 11)."""
    from specdsl import Executor
    from specdsl._review.demo import run_case
    from specdsl.kernels.case import KernelCase, Output, from_bits, to_bits

    spec = Softmax(cols=131072, dtype="bf16")
    x = np.random.default_rng(prefix).standard_normal((1, spec.cols))
    x[0, :prefix] = -np.inf
    bits = to_bits(x, spec.dtype)
    grid, block = spec.launch_dims(1)
    case = KernelCase(spec=spec, args=(("x", bits), ("y", Output(x.shape, spec.dtype)),
                                       ("rows", np.uint32(1))), grid=grid, block=block,
                      expected={"y": reference(from_bits(bits, spec.dtype), spec.scale)},
                      tolerance=1e-2)
    errors = run_case(Executor(), case)
    assert errors["y"] <= case.tolerance, errors


def test_masked_rows_reference_follows_torch():
    """The reference gives torch.softmax's special values: -inf -> 0, a row of -inf only,
    or with NaN or +inf, -> NaN everywhere (pytorch issues 25110, 6864)."""
    x = np.array([[-np.inf, 0.0, np.log(3.0)], [-np.inf] * 3, [np.nan, 0.0, 1.0],
                  [np.inf, 0.0, 1.0]])
    y = reference(x, 1.0)
    np.testing.assert_allclose(y[0], [0.0, 0.25, 0.75])
    assert np.isnan(y[1:]).all()


def test_scale_overflow_refused():
    """2 * scale * log2(e) is baked as one f32: a scale past about 1.18e38 is refused."""
    with pytest.raises(SpecError, match=r"Softmax.scale = 1.2e\+38 is invalid: expected 2 \* "
                                        r"scale \* log2\(e\) to be a nonzero finite f32"):
        Softmax(cols=64, scale=1.2e38)
    Softmax(cols=64, scale=1.17e38)


# --- any row length -------------------------------------------------------------------

ODD = (1, 7, 4097, 50257, 131073)


@pytest.mark.parametrize("cols,dtype,vector,chunks", [
    (4096, "bf16", 8, 1), (4100, "bf16", 4, 1), (4098, "f16", 8, 1), (4097, "bf16", 8, 1),
    (50257, "bf16", 8, 1), (50257, "f32", 4, 2), (131073, "f16", 8, 3), (262143, "bf16", 8, 5),
    (262143, "f32", 1, 8), (4098, "f32", 2, 1), (1, "f32", 4, 1)])
def test_vector_width_and_chunks_follow_the_length(cols, dtype, vector, chunks):
    """A row moves in vectors of the largest power of two dividing cols, up to 16 bytes, or
    a window of 16-byte vectors where that is under 8 bytes (but for f32 rows whose window
    does not fit 8 chunks: 262143), 32 registers a thread; the PTX loads that many bytes
    and declares that alignment."""
    spec = Softmax(cols=cols, dtype=dtype)
    assert (spec.vector, spec.chunks) == (vector, chunks)
    ptx = render(spec)
    kind = {2: "b16", 4: "b32", 8: "v2.b32", 16: "v4.b32"}[spec.vector_bytes]
    hint = ".L1::no_allocate.L2::cache_hint" if spec.chunks > 1 else ""  # rows in registers: plain
    assert re.search(rf"ld\.global\.nc{re.escape(hint)}\.{re.escape(kind)} ", ptx)
    assert f".param .u64 .ptr .global .align {spec.vector_bytes} x," in ptx


@pytest.mark.parametrize("spec", [Softmax(cols=4096), Softmax(cols=8192), Softmax(cols=24576),
                                  Softmax(cols=65536), Softmax(cols=4097), Softmax(cols=50257),
                                  Softmax(cols=4096, rows_per_cta=2),
                                  Softmax(cols=32768, block=1024)], ids=repr)
def test_rows_in_registers_carry_no_cache_hint(spec):
    """Rows in registers on one CTA load x and store y with no cache hint and no L2 policy:
    round 2's evict_first loads and .L1::no_allocate ran level on the H200 but left the next
    kernel's L2 reuse slower, and an evict_last policy with its lines demoted once read was
    0.6 to 1.0% slower at 2 to 4 vectors a thread, at 1024 threads and at 384 threads (80
    registers; docs/kernels/softmax.md, "Cache hints")."""
    ptx = render(spec)
    assert spec.chunks == 1
    for hint in ("no_allocate", "cache_hint", "createpolicy", "evict", "%keep", "applypriority"):
        assert hint not in ptx


_KEPT_LOAD = re.compile(r"(@%pg\d+ )?ld\.global\.nc\.L1::no_allocate\.L2::cache_hint\.v4\.b32 "
                        r"\{[^}]*\}, \[(%rd4)\+(\d+)\], %keep;")


@pytest.mark.parametrize("spec", [Softmax(cols=12288), Softmax(cols=16384), Softmax(cols=32768),
                                  Softmax(cols=8192, dtype="f32"), Softmax(cols=12552),
                                  Softmax(cols=16384, scale=-0.5)], ids=repr)
def test_wide_rows_in_registers_keep_their_lines_until_read(spec):
    """Rows in registers of 6 to 8 16-byte vectors a thread on 256 or 512 threads load x under
    an L2 evict_last policy, and every line they load is demoted to evict_normal once the row
    max has read it, before the CTA reduction: lanes 0, 8, 16 and 24 at the 128-byte line of
    their vector, one applypriority per load, under the load's own guard where the sweep runs
    past the row (cols 12552). y is stored plainly. (H200: 1.4 to 3.0% faster, the next
    kernel's L2 reuse unchanged; docs/kernels/softmax.md, "Cache hints".)"""
    ptx = render(spec)
    loads = [(guard, base, int(offset)) for guard, base, offset in _KEPT_LOAD.findall(ptx)]
    per_thread = -(-spec.cols // spec.vector // spec.block)
    assert spec.block in (256, 512) and 6 <= per_thread <= 8 and len(loads) == per_thread
    assert_lines_demoted(ptx, loads, {"%rd6": "%rd4"})
    assert (spec.cols != 12552) or any(guard for guard, _, _ in loads)   # the guarded form is exercised
    policy = ptx.index("createpolicy.fractional.L2::evict_last.b64 %keep, 1.0;")
    reduce = re.search(r"// CTA (max|min)-reduce", ptx).start()   # after the thread's max
    assert policy < ptx.index("], %keep;") < ptx.rindex("], %keep;") < \
        ptx.index("applypriority.global") < ptx.rindex("applypriority.global") < reduce < \
        ptx.index("bar.sync")
    assert "st.global.v4.b32" in ptx and "st.global.L1" not in ptx
    assert_no_spills(assemble(spec))


@pytest.mark.parametrize("spec", [Softmax(cols=4096, l2_evict_last=True),
                                  Softmax(cols=8192, l2_evict_last=True),
                                  Softmax(cols=2880, dtype="f16", scale=-0.5, l2_evict_last=True),
                                  Softmax(cols=4096, rows_per_cta=2, l2_evict_last=True)], ids=repr)
def test_l2_evict_last_keeps_x_and_changes_nothing_else(spec):
    """l2_evict_last on rows the built-in loads plainly: every load of x carries the
    evict_last policy, created once and never lifted; without the policy's lines and hints
    the PTX is the same request's without the field."""
    ptx = render(spec)
    loads = _KEPT_LOAD.findall(ptx)
    assert len(loads) == -(-spec.cols // spec.vector // spec.block) * spec.rows_per_cta
    assert "applypriority" not in ptx and ptx.count("createpolicy") == 1
    assert "// never demoted (l2_evict_last)" in ptx
    assert without_kept_policy(ptx, ".L1::no_allocate.L2::cache_hint") == render(Softmax(cols=spec.cols, dtype=spec.dtype, scale=spec.scale,
                                   rows_per_cta=spec.rows_per_cta))


@pytest.mark.parametrize("cols", [12288, 16384, 32768])
def test_l2_evict_last_wide_rows_are_not_demoted(cols):
    """On the wide rows the built-in demotes once read, l2_evict_last loads the same way and
    demotes nothing."""
    spec = Softmax(cols=cols, l2_evict_last=True)
    ptx = render(spec)
    assert len(_KEPT_LOAD.findall(ptx)) == -(-spec.cols // spec.vector // spec.block)
    assert "applypriority" not in ptx and "%pline" not in ptx
    assert render(Softmax(cols=cols)).count("applypriority.global") == len(_KEPT_LOAD.findall(ptx))


@pytest.mark.gpu
@pytest.mark.parametrize("cols,dtype,offset", [(16384, "bf16", 8), (12552, "bf16", 24),
                                               (8192, "f32", 4)])
def test_gpu_wide_rows_off_the_line_match_aligned_ones(cols, dtype, offset):
    """x that starts 16 to 48 bytes past a 128-byte line (vector-aligned, as the executor
    requires, but not line-aligned) gives y bit for bit as an aligned x: the demotion of its
    L2 lines rounds each address down to its line, as applypriority needs."""
    from differential import _launch, poisoned, run_softmax, to_device, to_host
    from specdsl import Executor

    torch = pytest.importorskip("torch")
    executor = Executor()
    spec = Softmax(cols=cols, dtype=dtype)
    assert "applypriority" in render(spec)
    rows = 9
    rng = np.random.default_rng(cols + offset)
    x = from_bits(to_bits(rng.standard_normal((rows, cols)) * 2, spec.dtype), spec.dtype)
    want = run_softmax(executor, torch, spec, x)
    flat = np.concatenate([np.zeros(offset), x.ravel()])
    x_dev = to_device(torch, to_bits(flat, spec.dtype), spec.dtype)[offset:].view(rows, cols)
    assert x_dev.data_ptr() % 128 != 0 and x_dev.data_ptr() % spec.vector_bytes == 0
    y = poisoned(torch, (rows, cols), spec.dtype)
    _launch(executor, torch, spec, [x_dev, y, np.uint32(rows)], rows)
    np.testing.assert_array_equal(to_host(torch, y, spec.dtype), want)


@pytest.mark.parametrize("spec", [Softmax(cols=131072), Softmax(cols=131072, split=8)], ids=repr)
def test_chunked_and_split_rows_keep_their_cache_hints(spec):
    """Chunked rows (pass 1 keeps x in L2 for pass 2) and rows split over a cluster keep
    their L2 policies and .L1::no_allocate stores."""
    ptx = render(spec)
    assert "createpolicy.fractional.L2::" in ptx and "st.global.L1::no_allocate." in ptx


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("cols", ODD + (4100, 4098, 262143))
@pytest.mark.parametrize("scale", [1.0, -0.5])
def test_any_length_assembles_without_spills(dtype, cols, scale):
    """Odd rows and rows of narrower vectors, resident and chunked, assemble for sm_90
    within the 64-register budget, with the default block."""
    assert_no_spills(assemble(Softmax(cols=cols, dtype=dtype, scale=scale)))


@pytest.mark.parametrize("cols,dtype,block,split", [
    (c, d, b, 1) for c in ODD + (4100, 65544, 200000) for d in ("bf16", "f32")
    for b in (None, 1024)] + [(4 * 3 * 1025, "bf16", None, 3), (24 * 3, "f16", 64, 3),
                              (2 * 3 * 1021, "f32", None, 3), (131072, "bf16", None, 8)])
def test_every_vector_touched_once_a_pass(cols, dtype, block, split):
    """In a model of the CTA (ptxsim.row_coverage), pass 1 loads every vector of the CTA's
    part of the row exactly once, pass 2 (chunked rows) every vector before the last chunk
    (which it finds in the registers), and y is stored exactly once."""
    spec = Softmax(cols=cols, dtype=dtype, split=split, **({"block": block} if block else {}))
    vectors = {i: 1 for i in range(cols // split // spec.vector)}
    chunked = spec.chunks > 1
    # vectors pass 2 loads: every chunk but the last, each block x the most a thread holds
    reread = (spec.chunks - 1) * spec.block * most_vectors_per_thread(spec.vector, spec.dtype)
    ptx = render(spec)
    if cols % spec.vector:  # a window (templates/window.ptx.j2): each phase, element by element
        elements = {i: 1 for i in range(cols)}
        cover = partial(every_phase, element_bytes=spec.dtype.size, lanes=spec.vector,
                        threads=spec.block)
        assert loads_in_array(ptx, ("%rd6",) if chunked else ("%rd4",), spec.dtype.size,
                              spec.vector, spec.block, cols, passes=2 if chunked else 1,
                              reread=reread if chunked else None) == []
        stored = cover(ptx, "st", ("%rd7",) if chunked else ("%rd5",))
        assert [merged(phase) for phase in stored] == [elements] * spec.vector
        return
    loads = row_coverage(ptx, "ld", ("%rd6",) if chunked else ("%rd4",), spec.vector_bytes,
                         spec.block)
    assert loads == ([vectors, {i: 1 for i in range(reread)}] if chunked else [vectors])
    stores = row_coverage(ptx, "st", ("%rd7",) if chunked else ("%rd5",), spec.vector_bytes,
                          spec.block)
    assert merged(stores) == vectors


def test_short_windows_keep_to_40_registers():
    """A window of up to 3 vectors a thread keeps to 40 registers (.maxnreg), so 8 CTAs of
    192 threads fit an SM (cols 4097 bf16: 71 us against 75 at 48 registers, H200); longer
    windows, aligned rows and a chosen min_ctas_per_sm keep their directives."""
    assert ".maxnreg 40 " in render(Softmax(cols=4097))
    assert assemble(Softmax(cols=4097)).resources()["softmax"].registers <= 40
    for spec in (Softmax(cols=4096), Softmax(cols=4097, dtype="f32"),
                 Softmax(cols=4097, min_ctas_per_sm=4), Softmax(cols=50257)):
        assert ".maxnreg" not in render(spec)


def test_odd_rows_max_over_both_halves():
    """A 2-byte vector's element (odd rows, two a CTA: narrow vectors, not a window) is
    copied into both halves before the packed max, so the high half (not loaded) never
    takes part in the row's maximum."""
    ptx = render(Softmax(cols=4097, rows_per_cta=2, block=512))  # 2 rows x 9 elements a thread
    assert "prmt.b32            %w17, %w17, 0, 0x1010;   // the element in both halves" in ptx
    assert ptx.count("prmt.b32") == 18
    assert "prmt" not in render(Softmax(cols=4096))
    assert "the element in both halves" not in render(Softmax(cols=4097))  # a window: 16-byte vectors
    assert "prmt" not in render(Softmax(cols=4097, rows_per_cta=2, block=512, dtype="f32"))


def test_multiples_of_the_vector_keep_their_ptx():
    """The golden request renders as before (all others: golden/ptx_digests.txt)."""
    check_golden("softmax_bf16_4096.ptx", render(Softmax(cols=4096, scale=0.125)))


def test_odd_split_suggestion():
    """An odd row is never split (no cluster size divides its vectors); a row of 8-byte
    vectors whose count 3 divides may be."""
    assert suggested_split(50257, "bf16", 1) == 1 and suggested_split(131073, "f32", 1) == 1
    assert suggested_split(4 * 3 * 8193, "bf16", 1) == 1  # 3 is not a cluster size tried
    Softmax(cols=4 * 3 * 8193, split=3)


#: 9 rows: rows of an odd length start at each of the 8 phases of a 16-byte vector
#: (templates/window.ptx.j2).
ODD_GPU = [(dtype, cols, scale, rows) for dtype in ("bf16", "f16", "f32")
           for cols, rows in zip(ODD, (9,) * len(ODD), strict=True) for scale in (1.0, -0.5)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,cols,scale,rows", ODD_GPU)
def test_gpu_odd_lengths_match_reference(dtype, cols, scale, rows):
    """On the GPU, rows of odd length (one element a vector: 4097 attention scores, a
    50257-token vocabulary; 50257 and 131073 in chunks) match the float64 softmax."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(cols + rows)
    case = example(Softmax(cols=cols, scale=scale, dtype=dtype), rng, rows=rows)
    errors = run_case(Executor(), case, rng)
    assert errors["y"] <= case.tolerance, f"relative error {errors['y']} > {case.tolerance}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,cols,split", [
    ("bf16", 4100, 1), ("f16", 4098, 1), ("f32", 4098, 1), ("bf16", 4098, 3), ("f16", 4100, 5),
    ("f32", 4098 * 7, 7), ("bf16", 262143, 1)])
def test_gpu_narrow_vectors_match_reference(dtype, cols, split):
    """On the GPU, rows of 8- and 4-byte vectors (split or not: a narrow vector means an
    odd number of vectors, so only an odd split divides the row) and the longest odd row
    (8 chunks) match the float64 softmax."""
    from specdsl import Executor
    from specdsl._review.demo import run_case

    rng = np.random.default_rng(cols)
    case = example(Softmax(cols=cols, dtype=dtype, split=split), rng, rows=3)
    errors = run_case(Executor(), case, rng)
    assert errors["y"] <= case.tolerance, f"relative error {errors['y']} > {case.tolerance}"


# --- tuning fields: the candidates of benchmarks/variants.py copy-rate -------------------

TUNED = [(cols, dtype, scale, fields)
         for cols, dtype in ((4096, "bf16"), (8192, "bf16"), (2880, "f16"), (4096, "f32"))
         for scale in (1.0, -0.5)
         for fields in (dict(rows_per_cta=2), dict(min_ctas_per_sm=6))] + [
    (4096, "bf16", 1.0, dict(rows_per_cta=4)), (4096, "bf16", 1.0, dict(min_ctas_per_sm=8)),
    (4097, "bf16", 1.0, dict(rows_per_cta=2, block=512)), (4096, "bf16", 1.0, dict(block=128)),
    (4096, "bf16", 1.0, dict(block=512))] + [
    # x kept in L2 (l2_evict_last): plain rows, wide rows (demoted by default), 2 rows a CTA
    (cols, dtype, scale, dict(l2_evict_last=True, **fields))
    for cols, dtype, scale, fields in (
        (4096, "bf16", 1.0, {}), (8192, "bf16", -0.5, {}), (16384, "bf16", 1.0, {}),
        (2880, "f16", 1.0, {}), (8192, "f32", 1.0, {}), (32768, "bf16", 1.0, {}),
        (7680, "bf16", 1.0, {}), (7680, "f16", -0.5, {}),
        (4096, "bf16", 1.0, dict(rows_per_cta=2)))] + [
    # the CTA count of before for the rows MORE_CTAS gives more
    (cols, dtype, 1.0, dict(min_ctas_per_sm=None))
    for cols in (4096, 5120, 5632) for dtype in ("bf16", "f16")] + [
    (7680, dtype, 1.0, dict(l2_evict_last=True, min_ctas_per_sm=None)) for dtype in ("bf16", "f16")] + [
    # each exponential kept: the same arithmetic, so the same bits
    (cols, dtype, scale, dict(keep_exponentials=True, **fields))
    for cols, dtype, scale, fields in (
        (8192, "bf16", 1.0, {}), (8192, "f16", -0.5, {}), (8192, "f32", 1.0, {}),
        (4096, "bf16", 1.0, dict(rows_per_cta=2)), (2880, "f16", 1.0, {}),
        (4096, "bf16", -0.5, dict(min_ctas_per_sm=None)))]


@pytest.mark.parametrize("cols,ctas", [(4096, 7), (5120, 6), (5632, 6)])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("keep", [False, True])
def test_more_ctas_rows_take_them_without_spills(cols, ctas, dtype, keep):
    """f16/bf16 cols 4096, 5120 and 5632 on their default block take MORE_CTAS CTAs an SM
    (.minnctapersm), with and without l2_evict_last, and assemble without spills."""
    spec = Softmax(cols=cols, dtype=dtype, l2_evict_last=keep)
    assert spec.min_ctas_per_sm == ctas and f".minnctapersm {ctas}" in render(spec)
    assert_no_spills(assemble(spec))


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_kept_rows_of_7680_take_6_ctas(dtype):
    """With l2_evict_last, f16/bf16 cols 7680 on its default block (256 threads) takes 6
    CTAs an SM (KEPT_MORE_CTAS) and assembles without spills; without the field, on
    another block, f32 or 2 rows a CTA it keeps None (a split row refuses the field), and
    no other multiple of 512
    from 4096 to 8192 takes a count with the field that it does not take without it."""
    spec = Softmax(cols=7680, dtype=dtype, l2_evict_last=True)
    assert (spec.block, spec.min_ctas_per_sm) == (256, 6) and ".minnctapersm 6" in render(spec)
    assert_no_spills(assemble(spec))
    assert [Softmax(cols=7680, dtype=dtype, **fields).min_ctas_per_sm for fields in (
        {}, dict(l2_evict_last=True, block=512), dict(l2_evict_last=True, rows_per_cta=2),
    )] == [None] * 3
    assert Softmax(cols=7680, dtype="f32", l2_evict_last=True).min_ctas_per_sm is None
    assert [cols for cols in range(4096, 8193, 512)
            if Softmax(cols=cols, dtype=dtype, l2_evict_last=True).min_ctas_per_sm
            != Softmax(cols=cols, dtype=dtype).min_ctas_per_sm] == [7680]


def test_other_rows_keep_1024_over_block():
    """f32, other lengths, another block, split rows and several rows a CTA keep None."""
    assert [Softmax(**fields).min_ctas_per_sm for fields in (
        dict(cols=4096, dtype="f32"), dict(cols=4104), dict(cols=6144), dict(cols=8192),
        dict(cols=4096, block=512), dict(cols=4096, split=2), dict(cols=4096, rows_per_cta=2),
    )] == [None] * 7
    assert Softmax(cols=4096, block=256) == Softmax(cols=4096)


@pytest.mark.parametrize("cols,dtype,scale,fields", TUNED)
def test_tuning_fields_assemble_without_spills(cols, dtype, scale, fields):
    """Every tuning candidate assembles for sm_90 without spills."""
    assert_no_spills(assemble(Softmax(cols=cols, dtype=dtype, scale=scale, **fields)))


def test_rows_per_cta_share_the_two_barriers():
    """Two rows a CTA: their maxima meet in one CTA reduction and their sums in another (two
    bar.sync for both rows), the second row guarded, the grid half the rows (rounded up)."""
    spec = Softmax(cols=4096, rows_per_cta=2)
    ptx = render(spec)
    assert ptx.count("bar.sync") == 2
    assert "// CTA max-reduce of %m0,%m2 over 8 warp(s) in softmax_max" in ptx
    assert "// CTA add-reduce of %a0,%a2 over 8 warp(s) in softmax_sum" in ptx
    assert "@%prow1 st.global.v4.b32 [%rd5+8192]" in ptx
    assert spec.launch_dims(5) == ((3, 1, 1), (256, 1, 1))
    assert Softmax(cols=4096).rows_per_cta == 1 and Softmax(cols=4096, split=2).rows_per_cta == 1


@pytest.mark.parametrize("cols,dtype,block,rows_per_cta", [
    (4096, "bf16", 256, 2), (8192, "bf16", 256, 2), (2880, "f16", 192, 2), (4097, "bf16", 512, 2),
    (4096, "bf16", 256, 4), (1000, "f32", 128, 4)])
def test_rows_per_cta_touch_every_vector_of_each_row_once(cols, dtype, block, rows_per_cta):
    """In a model of the CTA (ptxsim.row_coverage), a CTA of several rows loads and stores
    every vector of each of its rows exactly once."""
    spec = Softmax(cols=cols, dtype=dtype, block=block, rows_per_cta=rows_per_cta)
    ptx = render(spec)
    every = [{i: 1 for i in range(rows_per_cta * cols // spec.vector)}]
    assert row_coverage(ptx, "ld", ("%rd4",), spec.vector_bytes, spec.block) == every
    assert row_coverage(ptx, "st", ("%rd5",), spec.vector_bytes, spec.block) == every


@pytest.mark.parametrize("fields,message", [
    (dict(cols=4096, rows_per_cta=3), "Softmax.rows_per_cta = 3 is invalid: expected one of 1, "
                                      "2, 4 rows a CTA"),
    (dict(cols=131072, rows_per_cta=2), "Softmax.rows_per_cta = 2 is invalid: expected 1 for "
                                        "rows longer than the registers hold"),
    (dict(cols=32768, rows_per_cta=2), "Softmax.rows_per_cta = 2 is invalid: expected at most 1"),
    (dict(cols=65536, split=8, rows_per_cta=2), "Softmax.rows_per_cta = 2 is invalid: expected "
                                                "1 with split > 1"),
    (dict(cols=4096, min_ctas_per_sm=9), "Softmax.min_ctas_per_sm = 9 is invalid: expected None "
                                         "or 1 to 8 CTAs of 256 threads an SM"),
    (dict(cols=131072, l2_evict_last=True), "Softmax.l2_evict_last = True is invalid: expected "
     "False for cols=131072 bf16: the registers of 1024 threads hold at most 65536 elements, "
     "and a longer row (this one takes 2 chunks) takes two passes"),
    (dict(cols=32768, split=8, l2_evict_last=True), "Softmax.l2_evict_last = True is invalid: "
     "expected False for cols=32768 bf16 with split=8: the policy applies to rows on one CTA"),
    (dict(cols=4097, l2_evict_last=True), "Softmax.l2_evict_last = True is invalid: expected "
     "False for cols=4097 bf16: the policy applies to rows of whole 16-byte vectors (cols a "
     "multiple of 8), and this row is walked in a window"),
    (dict(cols=4100, l2_evict_last=True), "Softmax.l2_evict_last = True is invalid: expected "
     "False for cols=4100 bf16: the policy applies to rows of whole 16-byte vectors (cols a "
     "multiple of 8), and this row moves in 8-byte vectors"),
])
def test_tuning_fields_refused(fields, message):
    """Tuning values the kernel cannot take are refused, naming the field and the limit."""
    with pytest.raises(SpecError, match=re.escape(message)):
        Softmax(**fields)


@pytest.mark.gpu
@pytest.mark.parametrize("cols,dtype,scale,fields", TUNED)
def test_gpu_tuning_fields_give_the_default_output(cols, dtype, scale, fields):
    """On the GPU, each tuning candidate writes y bit for bit as the default request (the
    same per-row arithmetic in the same order; a different block changes the reduction
    order: then within the tolerance only), on 7 rows (the last CTA of 2 or 4 rows holds
    fewer), and within the tolerance of the float64 softmax."""
    from differential import compare, run_softmax
    from specdsl import Executor
    from specdsl.kernels.case import TOLERANCE, from_bits, to_bits

    torch = pytest.importorskip("torch")
    executor = Executor()
    default = Softmax(cols=cols, dtype=dtype, scale=scale, **(
        {"block": fields["block"]} if "rows_per_cta" in fields and "block" in fields else {}))
    tuned = Softmax(cols=cols, dtype=dtype, scale=scale, **fields)
    rng = np.random.default_rng(cols)
    x = from_bits(to_bits(rng.normal(0.0, 2.0, (7, cols)), default.dtype), default.dtype)
    got = run_softmax(executor, torch, tuned, x)
    if tuned.block == default.block:
        np.testing.assert_array_equal(got, run_softmax(executor, torch, default, x),
                                      err_msg=repr(tuned))
    compare(got, reference(x, scale), tuned.dtype, TOLERANCE[tuned.dtype], repr(tuned))


@pytest.mark.parametrize("fields, elements", [
    (dict(cols=8192), 32),                                 # 256 x 4 vectors, 64 registers
    (dict(cols=8192, dtype="f32"), 32),
    (dict(cols=4096, min_ctas_per_sm=None), 16),
    (dict(cols=2081), 16),                                 # a window, .maxnreg 40
    (dict(cols=4096, rows_per_cta=2), 32),
])
def test_kept_exponentials_are_computed_once(fields, elements):
    """keep_exponentials=True computes each exponential once and keeps it from the sum to
    the store (%e): as many ex2 as elements a thread, against twice that by default, with
    no spills; the default request's PTX is that of before the field."""
    kept = Softmax(keep_exponentials=True, **fields)
    ptx = render(kept)
    assert len(re.findall(r"^\s*ex2\.approx", ptx, re.M)) == elements
    assert "%e<" in ptx and "shfl.sync.idx" not in ptx
    assert_no_spills(assemble(kept))
    plain = render(Softmax(**fields))
    assert len(re.findall(r"^\s*ex2\.approx", plain, re.M)) == 2 * elements
    assert "%e<" not in plain


@pytest.mark.parametrize("fields, message", [
    (dict(cols=4096, min_ctas_per_sm=7),  # MORE_CTAS's count, which the field's default drops
     "expected False for cols=4096 bf16 on 256 threads: 16 exponentials a thread and 24 more "
     "registers exceed the 32 that 7 CTAs an SM leave"),
    (dict(cols=12288), "48 exponentials a thread and 24 more registers exceed the 64 that 4 "
                       "CTAs an SM leave"),
    (dict(cols=7680, l2_evict_last=True, min_ctas_per_sm=6),
     "exceed the 40 that 6 CTAs an SM leave"),
    (dict(cols=131072), "expected False for cols=131072 bf16: the row takes 2 chunks, whose "
                        "exponentials pass 2 computes again from x"),
])
def test_keep_exponentials_is_refused_where_the_registers_cannot_hold_them(fields, message):
    """keep_exponentials=True where the row is chunked, or its exponentials and 24 more
    registers exceed what its CTAs an SM leave, is refused naming the field and why."""
    with pytest.raises(SpecError, match=re.escape("Softmax.keep_exponentials = True is "
                                                  "invalid: ")) as info:
        Softmax(keep_exponentials=True, **fields)
    assert message in str(info.value)
