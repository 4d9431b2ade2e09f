"""Exact PTX immediates: bit patterns, rounding, and refusals."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdsl import RenderError
from specdsl._templating.immediates import bf16, encode_float, f16, f32, f64, integer


@pytest.mark.parametrize("value, text", [
    (1e-6, "0f358637BD"), (1e-5, "0f3727C5AC"), (1.0, "0f3F800000"), (-0.0, "0f80000000"),
    (0.0, "0f00000000"), (3.4028234663852886e38, "0f7F7FFFFF"), (1e-45, "0f00000001"),
])
def test_f32(value, text):
    """f32 immediates are the nearest float's bits, as 0fXXXXXXXX."""
    assert f32(value) == text


def test_f64():
    """f64 immediates are the exact double's bits."""
    assert f64(1.0) == "0d3FF0000000000000"
    assert f64(-0.0) == "0d8000000000000000"


@pytest.mark.parametrize("value, h, b", [(1.0, "0x3C00", "0x3F80"), (-2.0, "0xC000", "0xC000"),
                                         (65504.0, "0x7BFF", "0x4780")])
def test_half_patterns(value, h, b):
    """f16 and bf16 render 16-bit patterns for mov.b16."""
    assert f16(value) == h and bf16(value) == b


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_f32_matches_numpy_rounding(x):
    """Rounding to f32 agrees with NumPy's (IEEE nearest-even) wherever it is representable."""
    with np.errstate(over="ignore", under="ignore"):
        expected = np.float64(x).astype(np.float32)
    if not np.isfinite(expected) or (expected == 0 and x != 0):
        with pytest.raises(RenderError):
            f32(x)
    else:
        assert encode_float(x, "f32") == struct.unpack("<I", expected.tobytes())[0]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-65504, max_value=65504, allow_nan=False))
def test_f16_matches_numpy_rounding(x):
    """Rounding to f16 agrees with NumPy's float16 cast."""
    expected = np.float64(x).astype(np.float16)
    if expected == 0 and x != 0:
        return
    assert encode_float(x, "f16") == int(expected.view(np.uint16))


def test_refuses_nan_and_inf():
    """NaN and infinity are refused unless explicitly allowed."""
    with pytest.raises(RenderError, match="must be finite"):
        f32(float("nan"))
    with pytest.raises(RenderError, match="must be finite"):
        f64(float("inf"))
    assert f32(float("inf"), allow_nonfinite=True) == "0f7F800000"


def test_refuses_overflow():
    """A finite value beyond the format's range is refused, not clamped."""
    with pytest.raises(RenderError, match="1e\\+39 overflows f32"):
        f32(1e39)
    with pytest.raises(RenderError, match="overflows f16"):
        f16(70000.0)


def test_refuses_underflow_to_zero():
    """A non-zero value that rounds to zero is refused."""
    with pytest.raises(RenderError, match="rounds to zero in f32"):
        f32(1e-50)


def test_refuses_bool_and_str():
    """Bools and strings are not numbers here."""
    with pytest.raises(RenderError, match="needs a real number"):
        f32(True)
    with pytest.raises(RenderError, match="needs an int"):
        integer(True, "u32")


@pytest.mark.parametrize("value, ptx_type", [(-1, "u32"), (2**32, "u32"), (2**31, "s32")])
def test_integer_range(value, ptx_type):
    """Integers out of the PTX type's range are refused with the range."""
    with pytest.raises(RenderError, match=f"does not fit {ptx_type}"):
        integer(value, ptx_type)


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64), st.sampled_from(["f32", "f16"]))
def test_struct_fast_path_agrees_with_exact_path(x, fmt):
    """The struct-based fast path gives the exact path's bits, and the same refusals."""
    import specdsl._templating.immediates as immediates

    def encode(fast):
        saved = immediates._STRUCT_FORMATS
        immediates._STRUCT_FORMATS = saved if fast else {}
        try:
            return encode_float(x, fmt)
        except RenderError as exc:
            return str(exc)
        finally:
            immediates._STRUCT_FORMATS = saved

    assert encode(True) == encode(False)
