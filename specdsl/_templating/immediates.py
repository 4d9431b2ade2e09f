"""Exact PTX immediates for floating-point and integer constants, and what PTX text may hold.

PTX writes an exact floating-point constant as its bit pattern: ``0f`` plus 8
hex digits for ``.f32`` and ``0d`` plus 16 for ``.f64`` (PTX ISA section 4.5.1,
"Floating-Point Constants"). Half-precision values have no literal form; they
are moved into ``.b16`` registers as 16-bit integers (``mov.b16 %h1, 0x3C00;``).

Every encoder rounds to nearest, ties to even, from the Python float (an IEEE
binary64), and refuses what the format cannot hold: NaN and infinity unless
asked for, a finite value that overflows, and a non-zero value that rounds to
zero. Nothing is silently clamped.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

from ..errors import RenderError

__all__ = ["encode_float", "f32", "f64", "f16", "bf16", "integer", "is_ptx_text"]

# name: (exponent bits, mantissa bits)
_FORMATS = {"f16": (5, 10), "bf16": (8, 7), "f32": (8, 23)}
# formats the struct module packs directly: (code, bits); the exact path below handles
# the rest and every refusal (overflow, rounding to zero) with its message
_STRUCT_FORMATS = {"f32": ("<f", 32), "f16": ("<e", 16)}
_INT_RANGES = {
    "u8": (0, 2**8 - 1), "s8": (-(2**7), 2**7 - 1),
    "u16": (0, 2**16 - 1), "s16": (-(2**15), 2**15 - 1),
    "u32": (0, 2**32 - 1), "s32": (-(2**31), 2**31 - 1),
    "u64": (0, 2**64 - 1), "s64": (-(2**63), 2**63 - 1),
}


def _as_float(value: object, fmt: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RenderError(f"{fmt} immediate needs a real number (got {value!r})")
    return float(value)


def encode_float(value: float, fmt: str, *, allow_nonfinite: bool = False) -> int:
    """The bit pattern of ``value`` in IEEE format ``fmt`` (``"f16"``, ``"bf16"``, ``"f32"``).

    Rounds to nearest, ties to even, directly from binary64 (no double rounding).

    Raises:
        RenderError: NaN or infinity (unless ``allow_nonfinite``), a finite value
            beyond the format's largest finite value, or a non-zero value that
            rounds to zero.
    """
    x = _as_float(value, fmt)
    ebits, mbits = _FORMATS[fmt]
    sign = 1 if math.copysign(1.0, x) < 0 else 0
    top = sign << (ebits + mbits)
    exp_all_ones = (1 << ebits) - 1
    if math.isnan(x) or math.isinf(x):
        if not allow_nonfinite:
            raise RenderError(_nonfinite(fmt, value))
        quiet = (1 << (mbits - 1)) if math.isnan(x) else 0
        return top | (exp_all_ones << mbits) | quiet
    if x == 0.0:
        return top
    if fmt in _STRUCT_FORMATS:  # CPython packs with IEEE round-to-nearest-even
        code, width = _STRUCT_FORMATS[fmt]
        try:
            bits = int.from_bytes(struct.pack(code, x), "little")
        except OverflowError:
            bits = None
        if bits is not None and bits & ~(1 << (width - 1)):
            return bits
    bias = (1 << (ebits - 1)) - 1
    exact = Fraction(abs(x))
    exponent = max(math.floor(math.log2(abs(x))), 1 - bias)
    # log2 may be off by one near powers of two: fix it exactly.
    while exponent > 1 - bias and exact < Fraction(2) ** exponent:
        exponent -= 1
    while exact >= Fraction(2) ** (exponent + 1):
        exponent += 1
    quanta = round(exact / Fraction(2) ** (exponent - mbits))  # ties to even
    if quanta == 0:  # the field's own rules say whether 0.0 would do: no advice here
        smallest = float(Fraction(2) ** (1 - bias - mbits))
        raise RenderError(f"{value!r} rounds to zero in {fmt} (its smallest non-zero "
                          f"magnitude is {smallest:.6g})")
    if quanta == 1 << (mbits + 1):
        exponent, quanta = exponent + 1, quanta >> 1
    if exponent > bias:
        raise RenderError(f"{value!r} overflows {fmt} (largest finite value "
                          f"{float((2 - Fraction(1, 2**mbits)) * Fraction(2) ** bias):.6g})")
    if quanta < 1 << mbits:  # subnormal: biased exponent 0
        return top | quanta
    return top | ((exponent + bias) << mbits) | (quanta - (1 << mbits))


def _nonfinite(fmt: str, value: object) -> str:
    return (f"{fmt} immediate must be finite (got {value!r}); a template that means to "
            f"write it uses {{{{ x | {fmt}(allow_nonfinite=true) }}}}")


def f32(value: float, allow_nonfinite: bool = False) -> str:
    """``value`` as an exact PTX ``.f32`` immediate, e.g. ``1e-6 -> "0f358637BD"``."""
    return f"0f{encode_float(value, 'f32', allow_nonfinite=allow_nonfinite):08X}"


def f64(value: float, allow_nonfinite: bool = False) -> str:
    """``value`` as an exact PTX ``.f64`` immediate, e.g. ``1.0 -> "0d3FF0000000000000"``."""
    x = _as_float(value, "f64")
    if not allow_nonfinite and not math.isfinite(x):
        raise RenderError(_nonfinite("f64", value))
    return f"0d{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"


def f16(value: float, allow_nonfinite: bool = False) -> str:
    """``value`` as a 16-bit pattern for a ``.b16`` move, e.g. ``1.0 -> "0x3C00"``."""
    return f"0x{encode_float(value, 'f16', allow_nonfinite=allow_nonfinite):04X}"


def bf16(value: float, allow_nonfinite: bool = False) -> str:
    """``value`` as a bf16 16-bit pattern for a ``.b16`` move, e.g. ``1.0 -> "0x3F80"``."""
    return f"0x{encode_float(value, 'bf16', allow_nonfinite=allow_nonfinite):04X}"


def integer(value: int, ptx_type: str) -> str:
    """``value`` as a decimal PTX integer immediate, checked against ``ptx_type``'s range.

    Raises:
        RenderError: ``value`` is not an int (bools are refused) or is out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise RenderError(f"{ptx_type} immediate needs an int (got {value!r})")
    low, high = _INT_RANGES[ptx_type]
    if not low <= value <= high:
        raise RenderError(f"{value} does not fit {ptx_type} (range {low}..{high})")
    return str(value)


def is_ptx_text(text: str) -> bool:
    """Whether ``text`` may be written into PTX: one line of printable ASCII.

    PTX source is ASCII and its lines end at a newline (PTX ISA 4.1 "Source Format"): a
    newline in a value would start a new PTX statement (a whole ``.entry`` could be
    injected), and a NUL ends the text nvJitLink reads.
    """
    return text.isascii() and text.isprintable()
