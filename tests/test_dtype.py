"""DType: one table of PTX names and sizes."""

import pytest

from specdsl import DType


@pytest.mark.parametrize("dtype, ptx, size, storage", [
    (DType.F32, "f32", 4, "f32"), (DType.F16, "f16", 2, "b16"), (DType.BF16, "bf16", 2, "b16"),
    (DType.F8E4M3, "e4m3", 1, "b8"), (DType.F8E5M2, "e5m2", 1, "b8"),
    (DType.I32, "s32", 4, "s32"), (DType.U32, "u32", 4, "u32"),
])
def test_table(dtype, ptx, size, storage):
    """Each dtype carries its PTX name, size in bytes and load/store type."""
    assert (dtype.ptx, dtype.size, dtype.bits, dtype.storage) == (ptx, size, size * 8, storage)


def test_parse_by_value_and_name():
    """DType.parse takes the short name, the member name, or a member."""
    assert DType.parse("bf16") is DType.BF16
    assert DType.parse("BF16") is DType.BF16
    assert DType.parse(DType.F16) is DType.F16


def test_parse_refuses_unknown():
    """An unknown name lists the valid ones."""
    with pytest.raises(ValueError, match=r"expected a dtype name \(f32, f16, bf16.*got 'f12'"):
        DType.parse("f12")


def test_is_float():
    """Float formats are floats; integers are not."""
    assert DType.BF16.is_float and DType.F8E4M3.is_float
    assert not DType.I32.is_float and not DType.U32.is_float
