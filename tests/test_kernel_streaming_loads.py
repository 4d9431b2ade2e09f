"""Loads without L1 lines (``l1_no_allocate``) in SiluMul, SiluMulQuant and Fp8Quant: where
the hint goes, what is refused, the suggestion by launch size, SiluMul's small-launch
geometry, and (GPU) the same output bits with and without the field."""

from __future__ import annotations

import re
from typing import Any

import attrs
import numpy as np
import pytest

from ptxcheck import assert_no_spills, compile_each
from specdsl import SpecError, render
from specdsl.kernels import (
    L1_NO_ALLOCATE_MAX_BYTES,
    L1_NO_ALLOCATE_MIN_BYTES,
    Fp8Quant,
    SiluMul,
    SiluMulQuant,
    small_launch_loads,
    suggested_l1_no_allocate,
)
from specdsl.kernels.case import from_bits, to_bits
from specdsl.kernels.silu_mul import FEW_TOKENS, suggested_geometry

HINT = ".L1::no_allocate"

#: Requests of each kind of row: registers, sub-16-byte vectors, group scales, static modes.
REQUESTS = [
    SiluMul(d=4096), SiluMul(d=8192, unroll=1, dtype="f32"), SiluMul(d=11008, unroll=4),
    SiluMulQuant(d=4096), SiluMulQuant(d=4097, scale_mode="dynamic"),
    SiluMulQuant(d=14336, scale_mode="group"), SiluMulQuant(d=4096, scale_mode="static"),
    Fp8Quant(hidden=4096), Fp8Quant(hidden=7168, scale_mode="group"),
    Fp8Quant(hidden=4100, dtype="f16"), Fp8Quant(hidden=18432, scale_mode="static_param"),
    Fp8Quant(hidden=4096, scale_mode="static_baked", static_scale=0.05),
]


def _x_loads(ptx: str) -> list[str]:
    """The global loads of x: every global load but the static scale's f32 (``%scale`` or
    Fp8Quant's ``%f10``)."""
    return [line for line in ptx.splitlines()
            if re.search(r"\bld\.global\.", line) and not re.search(r"\.f32\s+%(scale|f10),", line)]


@pytest.mark.parametrize("request_", REQUESTS, ids=repr)
def test_every_x_load_and_only_x_loads_take_the_hint(request_):
    """With the field, each load of x carries .L1::no_allocate and nothing else changes:
    the same PTX once the hint is taken out; without it, no hint anywhere."""
    plain = render(request_)
    hinted = render(attrs.evolve(request_, l1_no_allocate=True))
    loads = _x_loads(hinted)
    assert loads and all(HINT in line for line in loads), loads
    assert hinted.count(HINT) == len(loads)
    assert HINT not in plain and hinted.replace(HINT, "") == plain


def test_hinted_requests_assemble_without_spills():
    """Every request above, with the hint, assembles for sm_90 with no spills."""
    hinted = [attrs.evolve(r, l1_no_allocate=True) for r in REQUESTS]
    for spec, compiled in zip(hinted, compile_each([(render(s), s) for s in hinted], "sm_90"),
                              strict=True):
        assert not isinstance(compiled, Exception), f"{spec!r}: {compiled}"
        assert_no_spills(compiled)


@pytest.mark.parametrize("fields,where", [
    ({"hidden": 4097}, "walked in a window"),
    ({"hidden": 131072}, "in 2 chunks"),
    ({"hidden": 65540, "dtype": "f32"}, "in 3 chunks"),
])
def test_fp8_quant_refuses_the_field_where_its_loads_are_not_written_for_it(fields, where):
    """Rows in a window or in chunks read x in other loads: the field is refused, naming the
    row, not silently half applied."""
    with pytest.raises(SpecError, match=rf"Fp8Quant\.l1_no_allocate = True is invalid: expected "
                                        rf"False for hidden={fields['hidden']} .*{where}"):
        Fp8Quant(**fields, l1_no_allocate=True)


def test_the_field_is_in_the_derived_key():
    """A baked field: the two requests are two modules."""
    from specdsl import derived_key
    assert derived_key(SiluMul()) != derived_key(SiluMul(l1_no_allocate=True))


@pytest.mark.parametrize("size,expected", [
    (0, False), (786_432, False), (L1_NO_ALLOCATE_MIN_BYTES - 1, False),
    (L1_NO_ALLOCATE_MIN_BYTES, True), (3_145_728, True), (50_331_648, True),
    (L1_NO_ALLOCATE_MAX_BYTES, True), (L1_NO_ALLOCATE_MAX_BYTES + 1, False),
    (100_663_296, False), (2**40, False)])
def test_suggested_l1_no_allocate_by_bytes(size, expected):
    """Yes from 2 to 64 MiB moved: the launches measured faster moved 3 to 50 MB; those
    level or slower, 0.8 MB or less, or 100 MB or more."""
    assert (L1_NO_ALLOCATE_MIN_BYTES, L1_NO_ALLOCATE_MAX_BYTES) == (2 * 2**20, 64 * 2**20)
    assert suggested_l1_no_allocate(size) is expected


@pytest.mark.parametrize("value,error", [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_suggested_l1_no_allocate_refuses_non_sizes(value, error):
    with pytest.raises(error, match=rf"bytes_moved must be .*\(got {value!r}\)"):
        suggested_l1_no_allocate(value)


def test_numpy_integers_are_counts():
    """A NumPy integer (a shape's entry) is taken as the int it holds."""
    assert suggested_l1_no_allocate(np.int64(3_145_728)) is True
    assert suggested_geometry(np.int32(16)) == (1, 128)
    assert small_launch_loads(SiluMul(d=8192), np.int64(256)).l1_no_allocate is True


@pytest.mark.parametrize("request_,tokens,expected", [
    (SiluMul(d=8192), 1024, True),       # 50 MB
    (SiluMul(d=8192), 2048, False),      # 101 MB
    (SiluMul(d=8192), 0, False),         # no launch
    (SiluMul(d=8192), 16, False),        # 0.8 MB: slower by graph replay, so not taken
    (SiluMulQuant(d=4096), 256, True),
    (Fp8Quant(hidden=4096), 4096, True),    # 50 MB
    (Fp8Quant(hidden=4096), 16384, False),  # 201 MB
    (Fp8Quant(hidden=4097), 256, False),    # 3.1 MB, but a window: not taken
    (Fp8Quant(hidden=131072), 16, False),   # 6.3 MB, but in chunks: not taken
])
def test_small_launch_loads(request_, tokens, expected):
    """The request with the field where the launch is small and the request takes it; the
    request itself (the same object) otherwise."""
    found = small_launch_loads(request_, tokens)
    assert found.l1_no_allocate is expected
    assert found == attrs.evolve(request_, l1_no_allocate=expected)
    if not expected:
        assert found is request_


@pytest.mark.parametrize("tokens,error,message", [
    (-1, ValueError, r"tokens must be 0 or more \(got -1\)"),
    (2.0, TypeError, r"tokens must be an int \(got 2\.0\)"),
    (None, TypeError, r"tokens must be an int \(got None\)")])
def test_small_launch_loads_refuses_non_counts(tokens, error, message):
    with pytest.raises(error, match=rf"small_launch_loads: {message}"):
        small_launch_loads(SiluMul(), tokens)


def test_small_launch_loads_refuses_requests_without_the_field():
    """An RMSNorm has no such field: a TypeError naming the class and those that have it."""
    from specdsl.kernels import RMSNorm
    with pytest.raises(TypeError, match=r"small_launch_loads: RMSNorm has no l1_no_allocate "
                                        r"field \(SiluMul, SiluMulQuant and Fp8Quant have one\)"):
        small_launch_loads(RMSNorm(hidden=4096), 256)


@pytest.mark.parametrize("tokens,geometry", [
    (0, (1, 128)), (1, (1, 128)), (FEW_TOKENS - 1, (1, 128)), (FEW_TOKENS, (2, 256)),
    (16384, (2, 256))])
def test_suggested_geometry(tokens, geometry):
    """One vector a thread in 128-thread CTAs below 1024 tokens; the defaults from there."""
    assert suggested_geometry(tokens) == geometry
    assert (SiluMul().unroll, SiluMul().block) == (2, 256)


@pytest.mark.parametrize("tokens,error", [(-3, ValueError), ("8", TypeError), (False, TypeError)])
def test_suggested_geometry_refuses_non_counts(tokens, error):
    with pytest.raises(error, match=r"suggested_geometry: tokens must be"):
        suggested_geometry(tokens)


# --- GPU: the same bits --------------------------------------------------------------------

def _run(executor: Any, torch: Any, spec: Any, x: np.ndarray) -> dict[str, np.ndarray]:
    """The outputs of ``spec`` on ``x`` (rows of its input), decoded."""
    from differential import run_fp8_quant, run_quantized, run_silu_mul, to_device

    if isinstance(spec, SiluMul):
        return {"out": run_silu_mul(executor, torch, spec, x)}
    if isinstance(spec, Fp8Quant):
        return run_fp8_quant(executor, torch, spec, x, scale=0.05)
    shape = {"dynamic": (len(x),), "group": (len(x), spec.d // 128)}.get(spec.scale_mode, 0.05)
    return run_quantized(executor, torch, spec, [to_device(torch, to_bits(x, spec.dtype),
                                                           spec.dtype)], len(x), spec.d, shape)


@pytest.mark.gpu
@pytest.mark.parametrize("request_,tokens", [
    (SiluMul(d=8192, unroll=1, block=128), 256), (SiluMul(d=4096), 1024),
    (SiluMul(d=4104, unroll=3, dtype="f16"), 37), (SiluMulQuant(d=4096), 256),
    (SiluMulQuant(d=7168, scale_mode="group"), 64), (SiluMulQuant(d=4097), 33),
    (SiluMulQuant(d=4096, scale_mode="static"), 9),
    (Fp8Quant(hidden=4096), 256), (Fp8Quant(hidden=7168, scale_mode="group"), 64),
    (Fp8Quant(hidden=8192, dtype="f32", scale_mode="static_param"), 17)], ids=repr)
def test_gpu_the_field_gives_the_same_bits(request_, tokens):
    """Every output of the hinted request equals the plain request's (decoded values, exact)
    on random rows; the plain request's outputs are checked against float64 by each
    kernel's own GPU tests."""
    from specdsl import Executor

    torch = pytest.importorskip("torch")
    executor = Executor()
    width = 2 * request_.d if hasattr(request_, "d") else request_.hidden
    rng = np.random.default_rng(tokens)
    x = from_bits(to_bits(2.0 * rng.standard_normal((tokens, width)), request_.dtype),
                  request_.dtype)
    plain = _run(executor, torch, request_, x)
    hinted = _run(executor, torch, attrs.evolve(request_, l1_no_allocate=True), x)
    assert plain.keys() == hinted.keys() and {"q", "out"} & plain.keys()
    for name in plain:
        np.testing.assert_array_equal(hinted[name], plain[name], err_msg=name)
