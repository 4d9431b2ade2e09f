"""DType: one table of PTX names and sizes."""

import pytest

from specdsl import DType, SpecError


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
    """An unknown name is a SpecError (a ValueError) listing the valid names and aliases."""
    with pytest.raises(SpecError, match=r"expected a dtype name \(f32, f16, bf16.*\), an alias "
                                        r"\(float32, float16, half, bfloat16, .*\) or a torch "
                                        r"or NumPy dtype; got 'f12'"):
        DType.parse("f12")


def test_is_float():
    """Float formats are floats; integers are not."""
    assert DType.BF16.is_float and DType.F8E4M3.is_float
    assert not DType.I32.is_float and not DType.U32.is_float


@pytest.mark.parametrize("alias, member", [
    ("float32", DType.F32), ("single", DType.F32), ("float16", DType.F16),
    ("half", DType.F16), ("bfloat16", DType.BF16), ("BFloat16", DType.BF16),
    ("float64", DType.F64), ("double", DType.F64), ("float8_e4m3fn", DType.F8E4M3),
    ("e4m3", DType.F8E4M3), ("float8_e5m2", DType.F8E5M2), ("int32", DType.I32),
    ("uint32", DType.U32), ("int8", DType.I8), ("uint8", DType.U8),
])
def test_aliases(alias, member):
    """torch's and NumPy's names for a format (any case) give that format."""
    assert DType.parse(alias) is member and DType(alias) is member


@pytest.mark.parametrize("name, why", [
    ("float", r"ambiguous: float32 in torch, float64 in NumPy and Python"),
    ("int", r"ambiguous: int32 in C, int64 in NumPy"),
    ("fp8", r"ambiguous: write 'f8e4m3' \(float8_e4m3fn\) or 'f8e5m2'"),
    ("float8_e4m3fnuz", r"its FNUZ format .* is not PTX's \.e4m3"),
])
def test_ambiguous_names_refused(name, why):
    """A name that means different formats in different libraries is refused, saying why."""
    with pytest.raises(SpecError, match=rf"'{name}' is refused: {why}"):
        DType.parse(name)


def test_python_float_type_is_ambiguous():
    """Python's float type is refused like the name 'float'."""
    with pytest.raises(SpecError, match=r"<class 'float'> is refused: ambiguous"):
        DType.parse(float)


def test_numpy_dtypes():
    """NumPy scalar types and dtypes are read by name, without DType importing NumPy."""
    np = pytest.importorskip("numpy")
    assert DType.parse(np.float16) is DType.F16 and DType.parse(np.half) is DType.F16
    assert DType.parse(np.dtype("float32")) is DType.F32
    assert DType.parse(np.dtype("<f8")) is DType.F64 and DType.parse(np.int8) is DType.I8
    assert DType.parse(np.dtype("uint8")) is DType.U8


def test_big_endian_numpy_dtype_refused():
    """A big-endian NumPy dtype is refused: the GPU reads little-endian elements."""
    np = pytest.importorskip("numpy")
    with pytest.raises(SpecError, match=r"dtype\('>f4'\) is big-endian; .* use "
                                        r"dtype\('<f4'\)"):
        DType.parse(np.dtype(">f4"))


def test_numpy_types_without_a_dtype_refused():
    """bool and complex64 have no DType: refused with the list of valid names."""
    np = pytest.importorskip("numpy")
    for kind in (np.bool_, np.dtype("complex64")):
        with pytest.raises(SpecError, match=r"expected a dtype name"):
            DType.parse(kind)


class _TorchLikeDtype:
    """Stands in for torch.dtype: a class named 'dtype' in module 'torch' printing
    'torch.<name>'."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


_TorchLikeDtype.__name__ = "dtype"
_TorchLikeDtype.__module__ = "torch"


@pytest.mark.parametrize("name, member", [
    ("bfloat16", DType.BF16), ("float16", DType.F16), ("float32", DType.F32),
    ("float8_e4m3fn", DType.F8E4M3), ("float8_e5m2", DType.F8E5M2), ("int32", DType.I32),
])
def test_torch_dtypes_by_duck_type(name, member):
    """A torch dtype is read by its printed name, without importing torch."""
    assert DType.parse(_TorchLikeDtype(name)) is member


def test_real_torch_dtypes():
    """With torch installed, torch.bfloat16, torch.half, torch.float and torch.int64 give
    their formats; a dtype specdsl has no format for (complex64) is refused."""
    torch = pytest.importorskip("torch")
    assert DType.parse(torch.bfloat16) is DType.BF16 and DType.parse(torch.half) is DType.F16
    assert DType.parse(torch.float) is DType.F32 and DType.parse(torch.uint8) is DType.U8
    assert DType.parse(torch.int64) is DType.I64
    with pytest.raises(SpecError, match="expected a dtype name"):
        DType.parse(torch.complex64)


def test_dtype_imports_neither_torch_nor_numpy():
    """Reading torch and NumPy dtypes imports neither library."""
    import subprocess
    import sys

    code = ("import sys; from specdsl import DType; before = set(sys.modules); "
            "[DType.parse(n) for n in ('bfloat16', 'half', 'f32')]; "
            "print(sorted({'torch', 'numpy'} & (set(sys.modules) - before)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_64_bit_integers():
    """int64 and uint64 (RoPE's positions) parse from their names, PTX names and NumPy types."""
    np = pytest.importorskip("numpy")
    assert DType.parse("int64") is DType.parse("s64") is DType.parse(np.int64) is DType.I64
    assert DType.parse("uint64") is DType.parse(np.dtype("uint64")) is DType.U64
    assert (DType.I64.ptx, DType.I64.size, DType.U64.ptx) == ("s64", 8, "u64")
