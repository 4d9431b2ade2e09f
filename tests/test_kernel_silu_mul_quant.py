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
    (dict(d=4096, split=9), "SiluMulQuant.split = 9 is invalid: expected 1 (one CTA a row) "
                            "to 8 CTAs a row for the dynamic scale (the largest portable "
                            "cluster; the static and group scales take more)"),
    (dict(d=4096, split=0), "SiluMulQuant.split = 0 is invalid: expected 1 (one CTA a row)"),
    # the static and group scales share nothing across parts: any split of whole vectors
    (dict(d=4096, scale_mode="static", split=0),
     "SiluMulQuant.split = 0 is invalid: expected 1 (one CTA a row) or more CTAs a row"),
    (dict(d=4096, scale_mode="static", split=1024),
     "SiluMulQuant.split = 1024 is invalid: expected a split of the row into equal whole "
     "16-byte vectors (d=4096 of bf16 is 512 vectors)"),
    (dict(d=4096, scale_mode="group", split=3.0),
     "SiluMulQuant.split must be an int (got 3.0, a float)"),
    (dict(d=18432, scale_mode="group", split=32),
     "SiluMulQuant.split = 32 is invalid: expected a split into whole groups of 128 (d=18432 "
     "is 144 groups)"),
    (dict(d=4097, split=2), "SiluMulQuant.split = 2 is invalid: expected a split of the row "
                            "into equal whole 2-byte vectors (d=4097 of bf16 is 4097 vectors)"),
    (dict(d=1152, scale_mode="group", split=2),
     "SiluMulQuant.split = 2 is invalid: expected a split into whole groups of 128 (d=1152 "
     "is 9 groups)"),
    (dict(d=14336, split=2, block=64),
     "SiluMulQuant.block = 64 is invalid: expected at least 128 threads: a CTA's part "
     "(split=2) of 896 vectors, at most 8 a thread kept in registers"),
])
def test_refused(fields, message):
    """Requests the kernel cannot take are refused at construction, naming field and value."""
    with pytest.raises(SpecError, match=re.escape(message)):
        SiluMulQuant(**fields)


def test_needs_fp8_conversion():
    """Rendering for a target without cvt...e4m3x2 is refused."""
    with pytest.raises(RenderError, match=r"SiluMulQuant: cvt.rn.satfinite.e4m3x2.f32 needs"):
        render(SiluMulQuant(d=4096, dtype="f32"), "sm_80")


def test_split_dynamic_scale_needs_clusters():
    """The dynamic scale split over a cluster needs sm_90; on sm_89 (PTX ISA 8.1) the static
    and group scales split (plain CTAs), the dynamic one takes split 1 only."""
    from specdsl import Target

    sm89 = Target(89, ptx_version=(8, 1))
    assert ".entry silu_mul_quant" in render(SiluMulQuant(d=4096), sm89)
    for mode in ("static", "group"):
        assert ".reqnctapercluster" not in render(SiluMulQuant(d=4096, scale_mode=mode, split=2),
                                                  sm89)
    with pytest.raises(RenderError, match=r"SiluMulQuant: split = 2 with the dynamic scale "
                                          r"\(a thread block cluster a token\) needs sm_90"):
        render(SiluMulQuant(d=4096, split=2), sm89)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,d,split", [("bf16", 14336, 8), ("bf16", 18432, 4),
                                           ("f16", 4096, 2), ("f32", 14336, 7),
                                           ("f32", 4100, 5), ("bf16", 53248, 8),
                                           # beyond a cluster: the static and group scales
                                           ("bf16", 14336, 16), ("bf16", 18432, 72),
                                           ("bf16", 14336, 112), ("f32", 4100, 41)])
def test_split_assembles_and_walks_its_part(mode, dtype, d, split):
    """A token split over ``split`` CTAs (grid tokens * split, consecutive along x): CTA k
    owns part k % split of token k / split (the dynamic scale: a cluster of that many CTAs,
    part its rank), its first vector part * (vectors / split) + tid, and in a model of one
    CTA (ptxsim.row_coverage) every gate, up vector and code of its part once; the
    dynamic scale's cluster reduction in ptxsim.check_cluster_protocol's order. It
    assembles for sm_90 without spills. The dynamic scale refuses more CTAs than a
    cluster holds."""
    from ptxsim import check_cluster_protocol, row_coverage

    if mode == "group" and d % 128:
        pytest.skip("group scales need whole groups of 128")
    if mode == "dynamic" and split > 8:
        with pytest.raises(SpecError, match=rf"SiluMulQuant.split = {split} is invalid: "
                                            r"expected 1 \(one CTA a row\) to 8 CTAs a row"):
            SiluMulQuant(d=d, dtype=dtype, scale_mode=mode, split=split)
        return
    spec = SiluMulQuant(d=d, dtype=dtype, scale_mode=mode, split=split)
    ptx = render(spec)
    part = d // spec.vector // split
    assert spec.launch_dims(3) == ((3 * split, 1, 1), (spec.block, 1, 1))
    assert re.search(rf"mad\.lo\.u32\s+%r9, %r8, {part}, %r3;", ptx)
    if mode == "dynamic":
        assert f".reqnctapercluster {split}, 1, 1" in ptx
        assert "mov.u32             %r1, %clusterid.x;" in ptx
        assert "mov.u32             %r8, %cluster_ctarank;" in ptx
        assert check_cluster_protocol(ptx) == 1
    else:
        assert "cluster" not in ptx
        assert re.search(rf"div\.u32\s+%r1, %r9, {split};", ptx)
        assert re.search(rf"rem\.u32\s+%r8, %r9, {split};", ptx)
    assert row_coverage(ptx, "ld", ("%rd4",), spec.vector_bytes, spec.block) == [
        {**{i: 1 for i in range(part)}, **{d // spec.vector + i: 1 for i in range(part)}}]
    assert row_coverage(ptx, "st", ("%rd6",), spec.vector, spec.block) == [
        {i: 1 for i in range(part)}]
    assert_no_spills(assemble(spec))


def test_split_launch_limit():
    """tokens * split CTAs must fit grid.x; the message names tokens and the bound at the
    request's split."""
    spec = SiluMulQuant(d=4096, split=8)
    with pytest.raises(SpecError, match=r"SiluMulQuant tokens = 300000000 is invalid: expected "
                                        r"at most 268435455 tokens at split=8"):
        spec.launch_dims(300_000_000)
    for tokens in (0, 2**31):
        with pytest.raises(SpecError, match=rf"SiluMulQuant tokens = {tokens} is invalid: "
                                            rf"expected an int from 1 to 268435455 \(8 CTAs "
                                            rf"a row\)"):
            spec.launch_dims(tokens)


def test_split_defaults_block_to_its_part():
    """A split row's block: a part of up to 512 vectors one vector a thread (14336 bf16 at
    split 8: 224 vectors, 224 threads; f32 4100 at split 5: 205 vectors, 224 threads), a
    longer part as an unsplit row of its length (18432 at split 4: 576 vectors, 288 x 2)."""
    assert SiluMulQuant(d=14336, split=8).block == 224
    assert SiluMulQuant(d=4100, dtype="f32", split=5).block == 224
    assert SiluMulQuant(d=18432, split=4).block == SiluMulQuant(d=18432 // 4).block == 288
    assert SiluMulQuant(d=14336).block == 448


def test_example_args_and_bytes():
    """The example passes x, q, scale, tokens; bytes_moved counts x, q and the scales."""
    for mode in MODES:
        case = example(SiluMulQuant(d=256, scale_mode=mode), np.random.default_rng(2), tokens=3)
        assert [name for name, _ in case.args] == ["x", "q", "scale", "tokens"]
    assert SiluMulQuant(d=256, scale_mode="group").bytes_moved(3) == 3 * 256 * 5 + 3 * 2 * 4


GPU = [(dtype, d, mode, 1) for dtype in ("bf16", "f16", "f32") for d in (4096, 14336)
       for mode in MODES] + [("bf16", 4097, "dynamic", 1), ("f16", 7, "static", 1),
                             ("bf16", 18432, "group", 1), ("bf16", 53248, "dynamic", 1),
                             ("f32", 2880, "static", 1), ("f32", 2944, "group", 1),
                             # the widest rows: 8 sweeps of 16-byte vectors a thread
                             ("bf16", 65536, "group", 1), ("f16", 65536, "static", 1),
                             ("f32", 32768, "dynamic", 1)] + [
    # a token split over a cluster: each mode, each split of 14336's 1792 vectors up to 8,
    # an odd part (f32 4100: 5 parts of 205 vectors of 4 bytes)
    ("bf16", 14336, mode, split) for mode in MODES for split in (2, 4, 7, 8)] + [
    ("f16", 18432, "group", 4), ("f32", 4100, "dynamic", 5), ("f32", 4100, "static", 5),
    ("bf16", 53248, "dynamic", 8), ("bf16", 65536, "group", 8),
    # beyond a cluster (static and group scales): down to one group, or 16 vectors, a CTA
    ("bf16", 14336, "static", 16), ("bf16", 14336, "group", 56), ("bf16", 18432, "static", 72),
    ("bf16", 18432, "group", 144), ("bf16", 14336, "static", 112), ("f32", 4100, "static", 41)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,d,mode,split", GPU)
def test_gpu_codes_equal_the_unfused_pair(dtype, d, mode, split):
    """On the GPU, the fused codes and scales equal, bit for bit, those of SiluMul followed
    by Fp8Quant's f32 quantization steps (fp8_quant.kernel_codes of SiluMul's output): the
    fused kernel rounds y to dtype before quantizing, as the pair does; the decoded codes
    are within TOLERANCE of the float64 reference. Split over a cluster, token t's largest
    |y| sits in CTA t % split's part, so a CTA left out of the cluster's reduction shows in
    the dynamic scale of a token."""
    from differential import compare, run_quantized, run_silu_mul, to_device
    from specdsl import Executor
    from specdsl.kernels.fp8_quant import kernel_codes

    torch = pytest.importorskip("torch")
    executor = Executor()
    spec = SiluMulQuant(d=d, dtype=dtype, scale_mode=mode, split=split)
    rng = np.random.default_rng(d + len(mode) + split)
    tokens = 37
    x = 2.0 * rng.standard_normal((tokens, 2 * d))
    part = d // split
    for t in range(tokens):  # y of about -144 at one element of CTA t % split's part
        j = (t % split) * part + (7 * t) % part
        x[t, j], x[t, d + j] = 12.0, -12.0
    x = from_bits(to_bits(x, spec.dtype), spec.dtype)
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


@pytest.mark.parametrize("tokens,d,mode,split", [
    # the dynamic scale, rows of 768 vectors or more (6144 bf16): a cluster of 8 up to a
    # quarter of the 132 SMs in tokens (33), 4 up to 0.46 (60), else 1; 2 where neither
    # cuts the row (6160 bf16: 770 vectors, 2 parts of 385), 1 where 2 does not either
    (1, 14336, "dynamic", 8), (33, 14336, "dynamic", 8), (34, 14336, "dynamic", 4),
    (60, 18432, "dynamic", 4), (61, 14336, "dynamic", 1), (1, 6144, "dynamic", 8),
    (1, 5120, "dynamic", 1), (16, 4096, "dynamic", 1), (1, 6160, "dynamic", 2),
    (60, 6160, "dynamic", 2), (61, 6160, "dynamic", 1), (1, 6152, "dynamic", 1),
    (1, 8193, "dynamic", 1), (0, 14336, "dynamic", 1),
    # static and group: the fewest CTAs with parts of at most 128 vectors (14336: 1792
    # vectors, 14 parts; 18432: 2304, 18), within 4 CTAs an SM (528), then the most within
    (1, 14336, "static", 14), (16, 14336, "group", 14), (1, 18432, "group", 18),
    (32, 18432, "static", 16), (64, 14336, "static", 8), (128, 14336, "group", 4),
    (256, 18432, "group", 2), (264, 18432, "static", 2), (265, 18432, "static", 1),
    (0, 14336, "static", 1),
    # 1152 is 144 vectors, 9 groups of 128: 2 parts of 72 vectors, or 3 of 3 groups
    (16, 1152, "static", 2), (16, 1152, "group", 3),
    # 4100 bf16 is 1025 vectors of 8 bytes (25 parts of 41), 4112 is 514 of 16 bytes
    # (257 is prime: 2 parts)
    (1, 4100, "static", 25), (1, 4112, "static", 2),
    # a part of 128 vectors or fewer is not split (1024 bf16); never under a warp's 32
    # vectors (128 bf16: 16 vectors)
    (1, 1024, "static", 1), (1, 2048, "static", 2), (1, 128, "static", 1)])
def test_suggested_split(tokens, d, mode, split):
    """The split suggested_split gives on a device of 132 SMs, a request the kernel takes."""
    from specdsl.kernels.silu_mul_quant import suggested_split

    assert suggested_split(d, "bf16", mode, tokens) == split
    SiluMulQuant(d=d, scale_mode=mode, split=split)  # a request the kernel takes


def test_suggested_split_without_clusters_and_bad_input():
    """sm_count 0 (a device without clusters) gives 1; fewer SMs lower the dynamic scale's
    token bounds; a bad count or request is a SpecError naming it."""
    from specdsl.kernels.silu_mul_quant import suggested_split

    assert suggested_split(14336, "bf16", "static", 1, sm_count=0) == 1
    # the dynamic scale's bounds follow the SMs: 8 a token to sm_count / 4 tokens, 4 to
    # 0.46 * sm_count (29.44 of 64)
    assert [suggested_split(14336, "bf16", "dynamic", tokens, sm_count=64)
            for tokens in (16, 17, 29, 30)] == [8, 4, 4, 1]
    assert suggested_split(14336, "bf16", "dynamic", 1, sm_count=0) == 1
    assert suggested_split(14336, "bf16", "static", 16, sm_count=16) == 4
    assert suggested_split(14336, "bf16", "static", np.int64(16), np.int32(132)) == 14
    for message, args in (("tokens must be 0 or more (got -1)", (14336, "bf16", "static", -1)),
                          ("sm_count must be an int (got 1.5)", (14336, "bf16", "static", 1, 1.5)),
                          ("tokens must be an int (got True)", (14336, "bf16", "static", True))):
        with pytest.raises(SpecError, match=rf"suggested_split: {re.escape(message)}"):
            suggested_split(*args)
    with pytest.raises(SpecError, match=r"SiluMulQuant.scale_mode must be one of 'dynamic', "
                                        r"'static', 'group' \(got 'groups'"):
        suggested_split(4096, "bf16", "groups", 1)
