"""Exact PTX immediates for floating-point and integer constants, and what PTX text may hold.

PTX writes an exact floating-point constant as its bit pattern: ``0f`` plus 8
hex digits for ``.f32`` and ``0d`` plus 16 for ``.f64`` (PTX ISA section 4.5.1,
"Floating-Point Constants"). Half-precision values have no literal form; they
are moved into ``.b16`` registers as 16-bit integers (``mov.b16 %h1, 0x3C00;``).

Every encoder rounds to nearest, ties to even, from the Python float (an IEEE
binary64), and refuses what the format cannot hold: NaN and infinity unless
asked for, a finite value that overflows, and a non-zero value that rounds to
zero. Nothing is silently clamped. As template filters (:func:`naming_field`), a
refusal names the baked field the value came from.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import struct
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from typing import Any

from ..errors import RenderError

__all__ = ["encode_float", "f32", "f64", "f16", "bf16", "integer", "is_ptx_text", "rendering",
           "naming_field"]

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


def _shown(value: object, field: str | None) -> str:
    """``value`` as a message shows it: ``1e+39``, or ``factor = 1e+39`` for a field's."""
    return repr(value) if field is None else f"{field} = {value!r}"


def _as_float(value: object, fmt: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RenderError(f"{fmt} immediate needs a real number (got {value!r})")
    return float(value)


def encode_float(value: float, fmt: str, *, allow_nonfinite: bool = False,
                 field: str | None = None) -> int:
    """The bit pattern of ``value`` in IEEE format ``fmt`` (``"f16"``, ``"bf16"``, ``"f32"``).

    Rounds to nearest, ties to even, directly from binary64 (no double rounding).

    Args:
        field: where ``value`` comes from (``"field eps"``), named in a refusal's message.

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
            raise RenderError(_nonfinite(fmt, value, field))
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
        raise RenderError(f"{_shown(value, field)} rounds to zero in {fmt} (its smallest "
                          f"non-zero magnitude is {smallest:.6g})")
    if quanta == 1 << (mbits + 1):
        exponent, quanta = exponent + 1, quanta >> 1
    if exponent > bias:
        raise RenderError(f"{_shown(value, field)} overflows {fmt} (largest finite value "
                          f"{float((2 - Fraction(1, 2**mbits)) * Fraction(2) ** bias):.6g})")
    if quanta < 1 << mbits:  # subnormal: biased exponent 0
        return top | quanta
    return top | ((exponent + bias) << mbits) | (quanta - (1 << mbits))


def _nonfinite(fmt: str, value: object, field: str | None) -> str:
    return ("" if field is None else f"{field}: ") + (
        f"{fmt} immediate must be finite (got {value!r}); a template that means to write it "
        f"uses {{{{ x | {fmt}(allow_nonfinite=true) }}}}")


def f32(value: float, allow_nonfinite: bool = False, *, field: str | None = None) -> str:
    """``value`` as an exact PTX ``.f32`` immediate, e.g. ``1e-6 -> "0f358637BD"``."""
    bits = encode_float(value, "f32", allow_nonfinite=allow_nonfinite, field=field)
    return f"0f{bits:08X}"


def f64(value: float, allow_nonfinite: bool = False, *, field: str | None = None) -> str:
    """``value`` as an exact PTX ``.f64`` immediate, e.g. ``1.0 -> "0d3FF0000000000000"``."""
    x = _as_float(value, "f64")
    if not allow_nonfinite and not math.isfinite(x):
        raise RenderError(_nonfinite("f64", value, field))
    return f"0d{struct.unpack('<Q', struct.pack('<d', x))[0]:016X}"


def f16(value: float, allow_nonfinite: bool = False, *, field: str | None = None) -> str:
    """``value`` as a 16-bit pattern for a ``.b16`` move, e.g. ``1.0 -> "0x3C00"``."""
    bits = encode_float(value, "f16", allow_nonfinite=allow_nonfinite, field=field)
    return f"0x{bits:04X}"


def bf16(value: float, allow_nonfinite: bool = False, *, field: str | None = None) -> str:
    """``value`` as a bf16 16-bit pattern for a ``.b16`` move, e.g. ``1.0 -> "0x3F80"``."""
    bits = encode_float(value, "bf16", allow_nonfinite=allow_nonfinite, field=field)
    return f"0x{bits:04X}"


# A filter sees a value, not the name it was read by, and a macro imported without context
# cannot see the fields at all. So a render publishes its context (:func:`rendering`, which
# the environment's templates enter), and a float filter that refuses a value names the
# baked field holding that very object (or tuple item). Identity, not equality: a value the
# template computed is a new float, named by no field however equal to one. Ints are left
# out: CPython shares small ints between unrelated computations. Looked up after a refusal.
_RENDERING: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "specdsl_rendering", default=None)


@contextlib.contextmanager
def rendering(context: Mapping[str, Any]) -> Iterator[None]:
    """Inside the block, a :func:`naming_field` filter that refuses a value held by one
    of ``context``'s values (a template's baked fields) names that field."""
    token = _RENDERING.set(context)
    try:
        yield
    finally:
        _RENDERING.reset(token)


def _field_of(value: Any) -> str | None:
    """``"field eps"`` (``"field scales[2]"``) where the render in progress holds this
    very float; ``None`` where none does."""
    context = _RENDERING.get()
    if context is None or not isinstance(value, float):
        return None
    held = context.items()
    names = [name for name, item in held if item is value]
    names += [f"{name}[{i}]" for name, items in held if type(items) is tuple
              for i, item in enumerate(items) if item is value]
    return f"field {' or '.join(names)}" if names else None


def naming_field(encode: Callable[..., str]) -> Callable[..., str]:
    """The template filter of :func:`f32` (:func:`f64`, ...): a refusal names the field."""
    def encode_field(value: Any, allow_nonfinite: bool = False) -> str:
        try:
            return encode(value, allow_nonfinite)
        except RenderError:
            field = _field_of(value)
            if field is None:
                raise
            return encode(value, allow_nonfinite, field=field)  # refused again, named
    return encode_field


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
