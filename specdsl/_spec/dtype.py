"""Element types of kernel tensors, with their PTX names in one table.

PTX names follow the PTX ISA, section "Fundamental Types" (5.2.1) and the
alternate floating-point formats ``.bf16``, ``.e4m3`` and ``.e5m2``
(section 5.2.3). Narrow floats are loaded and stored through bit-size types
(``.b16``, ``.b8``) and converted in registers with ``cvt``.
"""

from __future__ import annotations

import enum
import sys
from typing import Any

from ..errors import SpecError

__all__ = ["DType"]


class DType(enum.Enum):
    """A tensor element type.

    Each member carries, from one table:

    * ``ptx``: the PTX type name without the dot (``"bf16"``, ``"e4m3"``);
    * ``bits`` / ``size``: the width in bits and in bytes;
    * ``storage``: the PTX bit-size type used to load and store one element
      (``"b16"`` for f16 and bf16, ``"b8"`` for the fp8 formats);
    * ``numpy``: the NumPy dtype name of the same layout (``"uint16"`` stands
      in for bf16, ``"uint8"`` for the fp8 formats, which NumPy lacks);
    * ``is_float``: whether it is a floating-point type.

    Members are looked up by their short name (``DType("bf16")``, ``DType.parse("bf16")``),
    by their member name (``"BF16"``), by the names torch and NumPy use (``"bfloat16"``,
    ``"float16"``, ``"half"``, ``"float32"``, ``"float8_e4m3fn"``, ``"int32"``: see
    :meth:`parse`), and from torch and NumPy dtype objects (``torch.bfloat16``,
    ``np.float16``, ``np.dtype("float32")``), read by their names without importing
    torch or NumPy. Spec fields typed ``DType`` accept all of these.
    """

    # The class's name in derived keys (specdsl._spec.fields.canonical): the module it was
    # first published from, so that moving the class never changes a key.
    __specdsl_key_name__ = "specdsl.dtype.DType"

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    F8E4M3 = "f8e4m3"
    F8E5M2 = "f8e5m2"
    F64 = "f64"
    I32 = "i32"
    U32 = "u32"
    I8 = "i8"
    U8 = "u8"

    @property
    def ptx(self) -> str:
        """PTX type name, without the dot: ``"f32"``, ``"bf16"``, ``"e4m3"``, ``"s32"``."""
        return _TABLE[self][0]

    @property
    def bits(self) -> int:
        """Width of one element, in bits."""
        return _TABLE[self][1]

    @property
    def size(self) -> int:
        """Width of one element, in bytes."""
        return _TABLE[self][1] // 8

    @property
    def vector_lanes(self) -> int:
        """Elements in one 16-byte vector access (``ld.global.v4.b32``): 4 for f32, 8 for bf16."""
        return 16 // (_TABLE[self][1] // 8)

    @property
    def storage(self) -> str:
        """PTX type used to load and store one element (``"f32"``, ``"b16"``, ``"b8"``)."""
        return _TABLE[self][2]

    @property
    def numpy(self) -> str:
        """NumPy dtype name with the same bit layout (bf16 and fp8 map to unsigned ints)."""
        return _TABLE[self][3]

    @property
    def is_float(self) -> bool:
        """True for floating-point types."""
        return self.ptx[0] in "fbe"

    @classmethod
    def parse(cls, value: Any) -> DType:
        """Return the member for ``value``.

        Accepted, case-insensitively for names: a member; its short name (``"bf16"``) or
        member name (``"BF16"``); an alias (``"bfloat16"``, ``"float16"``, ``"half"``,
        ``"float32"``, ``"single"``, ``"float64"``, ``"double"``, ``"float8_e4m3fn"``,
        ``"float8_e5m2"``, ``"int32"``, ``"uint32"``, ``"int8"``, ``"uint8"``, and the PTX
        names ``"e4m3"``, ``"e5m2"``, ``"s32"``, ``"s8"``); a torch dtype (``torch.half``);
        a NumPy scalar type or dtype of native or little-endian byte order
        (``np.float16``, ``np.dtype("<f4")``; ml_dtypes' ``bfloat16`` and float8 types too).

        Raises:
            SpecError: ``value`` names no dtype, or names one ambiguously (``"float"`` is
                float32 in torch and float64 in NumPy; ``"int"``, ``"fp8"`` likewise), or
                is a big-endian NumPy dtype; the message lists the valid names. A
                ``ValueError`` too.
        """
        if isinstance(value, cls):
            return value
        try:
            return cls(value)  # by short name, else through _missing_
        except SpecError:
            raise
        except (ValueError, TypeError):
            raise SpecError(f"expected a dtype name ({', '.join(m.value for m in cls)}), an "
                            f"alias ({', '.join(_SHOWN_ALIASES)}) or a torch or NumPy dtype; "
                            f"got {value!r}") from None

    @classmethod
    def _missing_(cls, value: object) -> DType | None:
        # Enum's lookup hook: DType(value) for anything but a short name. Returns None
        # for an unknown value (Enum then raises ValueError); raises SpecError to say why
        # a value it recognises is refused.
        name = value if isinstance(value, str) else _foreign_name(value)
        if name is None:
            return None
        name = name.lower()
        if name in _REFUSED:
            raise SpecError(f"{value!r} is refused: {_REFUSED[name]}")
        return _ALIASES.get(name)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"DType.{self.name}"


# member: (ptx name, bits, load/store type, numpy layout)
_TABLE: dict[DType, tuple[str, int, str, str]] = {
    DType.F32: ("f32", 32, "f32", "float32"),
    DType.F16: ("f16", 16, "b16", "float16"),
    DType.BF16: ("bf16", 16, "b16", "uint16"),
    DType.F8E4M3: ("e4m3", 8, "b8", "uint8"),
    DType.F8E5M2: ("e5m2", 8, "b8", "uint8"),
    DType.F64: ("f64", 64, "f64", "float64"),
    DType.I32: ("s32", 32, "s32", "int32"),
    DType.U32: ("u32", 32, "u32", "uint32"),
    DType.I8: ("s8", 8, "s8", "int8"),
    DType.U8: ("u8", 8, "u8", "uint8"),
}


#: Every spelling :meth:`DType.parse` accepts, lower-cased: short names, member names and
#: the names torch, NumPy and ml_dtypes give the same formats (torch's float8_e4m3fn is
#: the OCP FP8 E4M3 format of PTX's .e4m3, PTX ISA 5.2.3; float8_e5m2 is .e5m2).
_ALIASES: dict[str, DType] = {
    **{member.value: member for member in DType},
    **{member.name.lower(): member for member in DType},
    "float32": DType.F32, "single": DType.F32, "fp32": DType.F32,
    "float16": DType.F16, "half": DType.F16, "fp16": DType.F16,
    "bfloat16": DType.BF16,
    "float8_e4m3fn": DType.F8E4M3, "e4m3": DType.F8E4M3,
    "float8_e5m2": DType.F8E5M2, "e5m2": DType.F8E5M2,
    "float64": DType.F64, "double": DType.F64, "fp64": DType.F64,
    "int32": DType.I32, "s32": DType.I32,
    "uint32": DType.U32,
    "int8": DType.I8, "s8": DType.I8,
    "uint8": DType.U8,
}
_SHOWN_ALIASES = ("float32", "float16", "half", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                  "float64", "double", "int32", "uint32", "int8", "uint8")

#: Names that mean different formats in different libraries, or formats PTX lacks: why.
_REFUSED: dict[str, str] = {
    "float": "ambiguous: float32 in torch, float64 in NumPy and Python; write 'f32' or 'f64'",
    "int": "ambiguous: int32 in C, int64 in NumPy and Python; write 'i32' (64-bit integers "
           "are no DType)",
    "long": "ambiguous: int64 in torch, int32 or int64 in C; write 'i32' (64-bit integers "
            "are no DType)",
    "fp8": "ambiguous: write 'f8e4m3' (float8_e4m3fn) or 'f8e5m2' (float8_e5m2)",
    "float8": "ambiguous: write 'f8e4m3' (float8_e4m3fn) or 'f8e5m2' (float8_e5m2)",
    "float8_e4m3fnuz": "its FNUZ format (no negative zero, another exponent bias) is not "
                       "PTX's .e4m3 (float8_e4m3fn, 'f8e4m3')",
    "float8_e5m2fnuz": "its FNUZ format (no negative zero, another exponent bias) is not "
                       "PTX's .e5m2 (float8_e5m2, 'f8e5m2')",
}


def _foreign_name(value: Any) -> str | None:
    """The dtype name a torch or NumPy dtype object spells, without importing either.

    ``torch.bfloat16`` -> ``"bfloat16"`` (torch prints canonical names: ``torch.half``
    prints ``torch.float16``); ``np.float16`` (a scalar type) -> ``"float16"``;
    ``np.dtype("float32")`` -> ``"float32"``; Python's ``float`` and ``int`` -> their
    (ambiguous) names. ``None`` for anything else.

    Raises:
        SpecError: a NumPy dtype whose bytes are not in the little-endian order the GPU
            reads.
    """
    if value is float or value is int:
        return value.__name__
    kind = type(value)
    root = (kind.__module__ or "").partition(".")[0]
    if root == "torch" and kind.__name__ == "dtype":
        return str(value).rpartition(".")[2]
    if isinstance(value, type):  # a NumPy (or ml_dtypes) scalar type: np.float16
        if (value.__module__ or "").partition(".")[0] in ("numpy", "ml_dtypes"):
            return value.__name__
        return None
    if root == "numpy" and isinstance(getattr(value, "name", None), str) and hasattr(
            value, "byteorder"):  # a NumPy dtype: np.dtype("<f4")
        big = value.byteorder == ">" or (value.byteorder == "=" and sys.byteorder == "big")
        if big:
            raise SpecError(f"{value!r} is big-endian; the GPU reads little-endian "
                            f"elements: use {value.newbyteorder('<')!r}")
        name: str = value.name
        return name
    return None
