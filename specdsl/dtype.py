"""Element types of kernel tensors, with their PTX names in one table.

PTX names follow the PTX ISA, section "Fundamental Types" (5.2.1) and the
alternate floating-point formats ``.bf16``, ``.e4m3`` and ``.e5m2``
(section 5.2.3). Narrow floats are loaded and stored through bit-size types
(``.b16``, ``.b8``) and converted in registers with ``cvt``.
"""

from __future__ import annotations

import enum

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

    Members are looked up by their short name: ``DType("bf16")``,
    ``DType.parse("bf16")``. Specs accept either the member or that string.
    """

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
    def parse(cls, value: "DType | str") -> "DType":
        """Return the member for ``value`` (a member, ``"bf16"``, ``"BF16"``).

        Raises:
            ValueError: ``value`` names no dtype; the message lists the valid names.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for member in cls:
                if value in (member.value, member.name, member.name.lower()):
                    return member
        names = ", ".join(m.value for m in cls)
        raise ValueError(f"expected a dtype name ({names}), got {value!r}")

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
