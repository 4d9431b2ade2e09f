"""specdsl.torch.specs: the requests the ops launch, built once per combination of values."""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specdsl import DType, SpecError, derived_key  # noqa: E402
from specdsl.kernels import Fp8Quant, RMSNorm, RoPE, SiluMul, SiluMulQuant, Softmax  # noqa: E402
from specdsl.torch import specs  # noqa: E402


def test_same_values_give_the_same_request_object():
    """A second call with the same plain values builds nothing: it returns the first request."""
    first = specs.rms_norm(4096, 1e-6, torch.bfloat16)
    assert specs.rms_norm(4096, 1e-6, torch.bfloat16) is first
    assert specs.rms_norm(4096, 1e-5, torch.bfloat16) is not first


@pytest.mark.parametrize("built,expected", [
    (lambda: specs.rms_norm(4096, 1e-6, torch.float16, True),
     RMSNorm(hidden=4096, eps=1e-6, dtype="f16", fused_residual=True)),
    (lambda: specs.softmax(131072, 0.5, torch.bfloat16, 8),
     Softmax(cols=131072, scale=0.5, dtype="bf16", split=8)),
    (lambda: specs.rotary_embedding(torch.float32, 32, 8, 128, None, 500000.0, "neox"),
     RoPE(dtype="f32", q_heads=32, kv_heads=8, head_dim=128, theta=500000.0)),
    # without rows: a large launch's request, the kernel's defaults (as before rows existed)
    (lambda: specs.silu_and_mul(8192, torch.bfloat16), SiluMul(d=8192, dtype="bf16")),
    (lambda: specs.scaled_fp8_quant(4096, torch.bfloat16, False), Fp8Quant(hidden=4096)),
    (lambda: specs.scaled_fp8_quant(4096, torch.float16, True, 16384),
     Fp8Quant(hidden=4096, dtype="f16", scale_mode="static_param")),
], ids=["rms_norm", "softmax", "rope", "silu_and_mul", "fp8_dynamic", "fp8_static"])
def test_requests_keep_the_kernels_defaults(built, expected):
    """Fields the op does not choose keep the spec class's defaults: equal requests, equal keys."""
    request = built()
    assert request == expected and derived_key(request) == derived_key(expected)


@pytest.mark.parametrize("dtype,expected", [(torch.float32, DType.F32),
                                            (torch.float16, DType.F16),
                                            (torch.bfloat16, DType.BF16)])
def test_dtype_of(dtype, expected):
    """torch's three float dtypes map to specdsl's."""
    assert specs.dtype_of(dtype) is expected


@pytest.mark.parametrize("function,call", [
    ("rms_norm", lambda dtype: specs.rms_norm(4096, 1e-6, dtype)),
    ("softmax", lambda dtype: specs.softmax(4096, 1.0, dtype)),
    ("softmax_split", lambda dtype: specs.softmax_split(32768, dtype, 1, 132)),
    ("rotary_embedding", lambda dtype: specs.rotary_embedding(dtype, 32, 8, 128, None, 1e4,
                                                              "neox")),
    ("silu_and_mul", lambda dtype: specs.silu_and_mul(4096, dtype, 16)),
    ("scaled_fp8_quant", lambda dtype: specs.scaled_fp8_quant(4096, dtype, True, 16)),
    ("per_token_group_quant_fp8", lambda dtype: specs.per_token_group_quant_fp8(4096, dtype)),
    ("rms_norm_quant", lambda dtype: specs.rms_norm_quant(4096, 1e-6, dtype, False, "static")),
    ("silu_and_mul_quant", lambda dtype: specs.silu_and_mul_quant(4096, dtype, "static", 1,
                                                                  132)),
])
@pytest.mark.parametrize("dtype", [torch.float64, torch.int8, "bf16"])
def test_dtype_of_refuses_other_dtypes(function, call, dtype):
    """Any other dtype is a SpecError naming the specs function, the value and the three
    taken."""
    with pytest.raises(SpecError, match=rf"^specs\.{function}: dtype = {re.escape(repr(dtype))} "
                                        r"is invalid: expected torch\.float32, torch\.float16 "
                                        r"or torch\.bfloat16$"):
        call(dtype)


@pytest.mark.parametrize("cols,rows,sm_count,split", [
    (131072, 1, 132, 8),     # one long row (decode over a vocabulary): a cluster of 8
    (131072, 66, 132, 8),    # parts of 2048 vectors: 8 up to half the SMs in rows
    (131072, 67, 132, 1),    # beyond it, and beyond 2's bound (half): one CTA a row
    (65536, 34, 132, 4),     # parts of 1024: 8 up to a quarter of the SMs, then 4
    (131072, 5000, 132, 1),  # many rows: one CTA each
    (4096, 1, 132, 1),       # short rows are never split
    (131072, 1, 0, 1),       # a device without clusters (sm_count 0)
    (50257, 1, 132, 1),      # not whole 16-byte vectors: never split
])
def test_softmax_split(cols, rows, sm_count, split):
    """The split follows the kernel's suggested_split, and is 1 where clusters cannot help."""
    assert specs.softmax_split(cols, torch.bfloat16, rows, sm_count) == split


@pytest.mark.parametrize("cols,dtype,rows,sm_count,split,l2_evict_last,kept", [
    (8192, torch.bfloat16, 256, 132, 1, False, True),     # few rows
    (8192, torch.bfloat16, 1056, 132, 1, False, True),    # 8 an SM
    (8192, torch.bfloat16, 1057, 132, 1, False, False),   # more
    (8192, torch.bfloat16, 10**9, 132, 1, False, False),  # cached as "more" (no new key)
    (8192, torch.float32, 256, 132, 1, True, True),       # with the L2 policy too
    (32768, torch.bfloat16, 1, 132, 8, False, False),     # a row split over a cluster
    (12288, torch.bfloat16, 256, 132, 1, False, False),   # registers: no room
    (8192, torch.float64, 256, 132, 1, False, False),     # no such request (refused later)
])
def test_softmax_keeps_exponentials(cols, dtype, rows, sm_count, split, l2_evict_last, kept):
    """The op keeps exponentials where the kernel's suggested_keep_exponentials says so."""
    assert specs.softmax_keeps_exponentials(cols, dtype, rows, sm_count, split,
                                            l2_evict_last) is kept


def test_softmax_keeps_exponentials_caches_no_row_count():
    """Row counts within the limit share one cached answer, and counts past it need none:
    varying batch sizes add no cache entries."""
    specs.softmax_keeps_exponentials(6144, torch.float16, 1, 132, 1, False)
    before = specs._keeps.cache_info()
    for rows in (2, 17, 256, 1056, 1057, 10**9):
        specs.softmax_keeps_exponentials(6144, torch.float16, rows, 132, 1, False)
    after = specs._keeps.cache_info()
    assert after.currsize == before.currsize and after.misses == before.misses
    assert after.hits == before.hits + 4  # 2 to 1056 rows; past the limit, no lookup



@pytest.mark.parametrize("built,expected", [
    # 8 rows: one vector a thread in 128-thread CTAs (0.4 MB: no loads without L1 lines)
    (lambda: specs.silu_and_mul(8192, torch.bfloat16, 8),
     SiluMul(d=8192, dtype="bf16", unroll=1, block=128)),
    # 256 rows (12.6 MB): both
    (lambda: specs.silu_and_mul(8192, torch.bfloat16, 256),
     SiluMul(d=8192, dtype="bf16", unroll=1, block=128, l1_no_allocate=True)),
    # 1024 rows of 8192 move 50 MB: the default geometry, loads without L1 lines
    (lambda: specs.silu_and_mul(8192, torch.bfloat16, 1024),
     SiluMul(d=8192, dtype="bf16", l1_no_allocate=True)),
    # 2048 rows move 101 MB: neither
    (lambda: specs.silu_and_mul(8192, torch.bfloat16, 2048), SiluMul(d=8192, dtype="bf16")),
    (lambda: specs.scaled_fp8_quant(4096, torch.bfloat16, False, 256),
     Fp8Quant(hidden=4096, l1_no_allocate=True)),
    # rows in a window: the field does not apply, whatever the size
    (lambda: specs.scaled_fp8_quant(4097, torch.bfloat16, False, 256), Fp8Quant(hidden=4097)),
    (lambda: specs.per_token_group_quant_fp8(7168, torch.bfloat16, 512),
     Fp8Quant(hidden=7168, scale_mode="group", l1_no_allocate=True)),
    (lambda: specs.silu_and_mul_quant(4096, torch.bfloat16, "dynamic", 256),
     SiluMulQuant(d=4096, l1_no_allocate=True)),
    (lambda: specs.silu_and_mul_quant(4096, torch.bfloat16, "dynamic", 16384),
     SiluMulQuant(d=4096)),
    # few rows on a device with clusters: a cluster of CTAs a row (suggested_split)
    (lambda: specs.silu_and_mul_quant(14336, torch.bfloat16, "static", 16, 132),
     SiluMulQuant(d=14336, scale_mode="static", split=14, block=128)),
    (lambda: specs.silu_and_mul_quant(14336, torch.bfloat16, "group", 64, 132),
     SiluMulQuant(d=14336, scale_mode="group", split=8, l1_no_allocate=True)),
    (lambda: specs.silu_and_mul_quant(14336, torch.bfloat16, "dynamic", 48, 132),
     SiluMulQuant(d=14336, split=4, l1_no_allocate=True)),
    (lambda: specs.silu_and_mul_quant(14336, torch.bfloat16, "dynamic", 64, 132),
     SiluMulQuant(d=14336, l1_no_allocate=True)),
    # ... not where the device has none (sm_count 0, the default)
    (lambda: specs.silu_and_mul_quant(14336, torch.bfloat16, "static", 16),
     SiluMulQuant(d=14336, scale_mode="static")),
    # Fp8Quant's scales split few rows too; the dynamic scale only long rows (a cluster)
    (lambda: specs.scaled_fp8_quant(18432, torch.bfloat16, True, 16, 132),
     Fp8Quant(hidden=18432, scale_mode="static_param", split=6)),
    (lambda: specs.per_token_group_quant_fp8(18432, torch.bfloat16, 64, 132),
     Fp8Quant(hidden=18432, scale_mode="group", split=8, l1_no_allocate=True)),
    (lambda: specs.scaled_fp8_quant(18432, torch.bfloat16, False, 16, 132),
     Fp8Quant(hidden=18432, split=8)),
    (lambda: specs.scaled_fp8_quant(18432, torch.bfloat16, False, 17, 132),
     Fp8Quant(hidden=18432)),
    (lambda: specs.scaled_fp8_quant(14336, torch.bfloat16, False, 1, 132),
     Fp8Quant(hidden=14336)),
    (lambda: specs.per_token_group_quant_fp8(18432, torch.bfloat16, 16),
     Fp8Quant(hidden=18432, scale_mode="group")),
], ids=["silu-8", "silu-256", "silu-1024", "silu-2048", "fp8-256", "fp8-window", "group-512",
        "silu-quant-256", "silu-quant-16384", "silu-quant-16-split", "silu-quant-64-group",
        "silu-quant-48-dynamic", "silu-quant-64-dynamic", "silu-quant-no-clusters",
        "fp8-static-16", "fp8-group-64", "fp8-dynamic-16", "fp8-dynamic-17",
        "fp8-dynamic-short", "fp8-group-no-sms"])
def test_small_launches_take_their_geometry_and_loads(built, expected):
    """The SiluMul and FP8 requests follow the rows of a call (suggested_geometry,
    small_launch_loads); the geometry's block is a launch field, so it is compared too."""
    request = built()
    assert request == expected and request.block == expected.block


@pytest.mark.parametrize("rows", [-1, 2.5, "256", True])
def test_a_bad_row_count_is_a_spec_error_naming_the_function(rows):
    """A row count that is not an int of 0 or more: SpecError naming the specs function and
    rows, as every specs function refuses a bad value."""
    for name, call in (("silu_and_mul", lambda: specs.silu_and_mul(4096, torch.bfloat16, rows)),
                       ("scaled_fp8_quant",
                        lambda: specs.scaled_fp8_quant(4096, torch.bfloat16, False, rows))):
        with pytest.raises(SpecError, match=rf"specs\.{name}: rows must be an int of 0 or "
                                            rf"more, or None for a large launch's request "
                                            rf"\(got {re.escape(repr(rows))}\)"):
            call()


@pytest.mark.parametrize("sm_count", [-1, 2.5, True])
@pytest.mark.parametrize("function,call", [
    ("silu_and_mul_quant", lambda n: specs.silu_and_mul_quant(4096, torch.bfloat16, "static",
                                                              16, n)),
    ("scaled_fp8_quant", lambda n: specs.scaled_fp8_quant(4096, torch.bfloat16, True, 16, n)),
    ("per_token_group_quant_fp8", lambda n: specs.per_token_group_quant_fp8(
        4096, torch.bfloat16, 16, n))])
def test_a_bad_sm_count_is_a_spec_error(function, call, sm_count):
    """sm_count: an int of 0 or more (a NumPy integer too, as the rows), else a SpecError
    naming the function and the value."""
    with pytest.raises(SpecError, match=rf"specs\.{function}: sm_count must be an int "
                                        rf"of 0 or more \(got {re.escape(repr(sm_count))}\)"):
        call(sm_count)
    assert call(np.int64(132)) == call(132)


def test_silu_and_mul_quant_rows_past_the_sms_share_one_cache_entry():
    """Rows beyond 4 CTAs an SM (CTAS_PER_SM) all give split 1: one cached request for
    all of them."""
    specs.silu_and_mul_quant(4096, torch.bfloat16, "group", 529, 132)
    before = specs._silu_and_mul_quant.cache_info()
    for rows in (530, 1000, 10**6):
        specs.silu_and_mul_quant(4096, torch.bfloat16, "group", rows, 132)
    after = specs._silu_and_mul_quant.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 3


def test_silu_and_mul_quant_modules_over_row_counts():
    """docs/torch.md: on an H200 over 1 to 2000 rows, 14336 with a static scale takes seven
    requests: split 14 (1-37, the loads without L1 lines from 30), 8 (38-66), 4 (67-132), 2
    (133-264), then 1, with those loads up to 936 rows; 18432 eight: 18 (1-29, those loads
    from 23), 16 (30-33), 8 (34-66), 4, 2, then 1, with those loads up to 728."""
    def spans(d):
        found = {}
        for rows in range(1, 2001):
            request = specs.silu_and_mul_quant(d, torch.bfloat16, "static", rows, 132)
            found.setdefault((request.split, request.l1_no_allocate), []).append(rows)
        return {key: (rows[0], rows[-1]) for key, rows in found.items()}

    assert spans(14336) == {
        (14, False): (1, 29), (14, True): (30, 37), (8, True): (38, 66), (4, True): (67, 132),
        (2, True): (133, 264), (1, True): (265, 936), (1, False): (937, 2000)}
    assert spans(18432) == {
        (18, False): (1, 22), (18, True): (23, 29), (16, True): (30, 33), (8, True): (34, 66),
        (4, True): (67, 132), (2, True): (133, 264), (1, True): (265, 728),
        (1, False): (729, 2000)}
