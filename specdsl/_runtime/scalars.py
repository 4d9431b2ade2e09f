"""Scalars at launch: what an argument is (an int, a float), how an error names it, and
the bit patterns cuda.core's ``launch`` takes for floats and wide integers."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .signature import Param

__all__ = ["FLOAT_MAX", "FLOAT_EXACT", "describe", "is_int", "is_float", "float_bits", "wide",
           "wrap_u64"]

#: Largest finite value of each float type (IEEE 754 binary16/32/64), by width in bits.
FLOAT_MAX = {16: 65504.0, 32: 3.4028234663852886e38, 64: 1.7976931348623157e308}
#: Integers a float type holds exactly: |v| <= 2**(mantissa bits + 1).
FLOAT_EXACT = {16: 2**11, 32: 2**24, 64: 2**53}


def _bits(float_format: str, int_format: str) -> Callable[[float], int]:
    """A function giving a float's bit pattern in ``float_format`` as an int."""
    pack, unpack = struct.Struct(float_format).pack, struct.Struct(int_format).unpack

    def bits(value: float) -> int:
        pattern: int = unpack(pack(value))[0]
        return pattern
    return bits


# Floats go to cuda.core as the int of their bit pattern (launchers.core_launcher);
# f64 as a signed int, which cuda.core's intptr_t holds.
_F16_BITS, _F32_BITS, _F64_BITS = _bits("<e", "<H"), _bits("<f", "<I"), _bits("<d", "<q")
#: ``{bits: function}`` giving a float's bit pattern as cuda.core takes it.
float_bits = {16: _F16_BITS, 32: _F32_BITS, 64: _F64_BITS}


def wide(param: Param) -> bool:
    """Whether cuda.core's ``intptr_t`` holds ``param``'s values at or above 2**63 only
    wrapped (64-bit unsigned, bit and pointer parameters)."""
    return param.bits == 64 and (param.is_ptr or param.kind in "ub")


def wrap_u64(value: int) -> int:
    """A 64-bit unsigned value as the signed int with the same bits (cuda.core's intptr_t)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def describe(value: Any) -> str:
    """``value`` for an error message: its repr (cut at 60 characters) and its type; an
    array (an object with a ``shape`` and a ``dtype``, not a scalar) by its shape and
    element type instead, since a device array's repr copies it to the host (and cannot
    while a CUDA graph is being captured)."""
    kind = type(value)
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and shape and dtype is not None:
        return f"{kind.__module__}.{kind.__qualname__} of shape {tuple(shape)}, dtype {dtype}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    module = "" if kind.__module__ == "builtins" else kind.__module__ + "."
    return f"{text} of type {module}{kind.__qualname__}"


def is_int(value: Any) -> bool:
    """Whether ``value`` is a Python int (not a bool) or a NumPy integer scalar."""
    kind = type(value)
    if kind is int:
        return True
    if kind is bool:
        return False
    return kind.__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iu" \
        and getattr(value, "ndim", 1) == 0


def is_float(value: Any) -> bool:
    """Whether ``value`` is a Python float or a NumPy float scalar."""
    kind = type(value)
    if kind is float:
        return True
    return kind.__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind == "f" \
        and getattr(value, "ndim", 1) == 0
