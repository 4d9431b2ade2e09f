"""Launch arguments: the parameter layout of a kernel and the converter of each parameter.

Everything here is plain Python: it runs (and is tested) without a GPU. An
:class:`ArgumentPacker` is built once per module from the kernel's parsed ``.entry``
signature; :meth:`ArgumentPacker.values` refuses a bad argument with a
:class:`~specdsl.errors.LaunchError` naming the parameter and what it expects, and
returns the values in the order of :attr:`ArgumentPacker.fmt`, a :mod:`struct` format
that lays the parameters out as the driver reads them (each at its natural alignment, as
the PTX ISA's ``.param`` state space lays them out, section 5.1.6). The launch functions
built on it are :mod:`specdsl._runtime.launchers`'.

Accepted arguments:

* a pointer parameter (``.ptr``): a device pointer as an ``int``, a cuda.core
  ``Buffer``, a torch tensor, or any object with ``__cuda_array_interface__`` or
  DLPack (read by :mod:`specdsl._runtime.readers`); arrays must live on the
  executor's device, be C-contiguous and meet the parameter's ``.align``;
* an integer parameter: a Python or NumPy integer in the type's range (a bool only
  for 8-bit parameters);
* a float parameter: a Python or NumPy float, or an integer the type holds exactly;
* a ``.b8 name[N]`` aggregate: ``N`` bytes (``bytes``, ``bytearray``, a NumPy array).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from .._spec.fields import is_bool_like
from ..errors import LaunchError
from .readers import READERS, read_view, reader_for
from .signature import EntrySignature, Param

__all__ = [
    "ArgumentPacker", "Converter", "INLINE_NONE", "INLINE_INT", "INLINE_POINTER",
    "INLINE_FLOAT", "describe", "is_int", "is_float", "float_bits", "wide", "wrap_u64",
]

_FORMAT = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "s8": "b", "s16": "h", "s32": "i",
           "s64": "q", "b8": "B", "b16": "H", "b32": "I", "b64": "Q", "f16": "e", "f32": "f",
           "f64": "d"}
# Largest finite value of each float type (IEEE 754 binary16/32/64).
_FLOAT_MAX = {16: 65504.0, 32: 3.4028234663852886e38, 64: 1.7976931348623157e308}
# Integers a float type holds exactly: |v| <= 2**(mantissa bits + 1).
_FLOAT_EXACT = {16: 2**11, 32: 2**24, 64: 2**53}

Converter = Callable[[Any, int], Any]

# What a launch's checks take inline, per parameter (ArgumentPacker.inline_check); the
# compiled checks in specdsl._runtime._speedups use the same numbers.
INLINE_NONE, INLINE_INT, INLINE_POINTER, INLINE_FLOAT = 0, 1, 2, 3


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


def _pointee_align(param: Param) -> int:
    """A ``.ptr`` parameter's pointee alignment in bytes (its callers take pointers only)."""
    align = param.pointee_align
    if align is None:
        raise ValueError(f"{param.describe()} is not a .ptr parameter")
    return align


def describe(value: Any) -> str:
    """``value`` for an error message: its repr (cut at 60 characters) and its type."""
    kind = type(value)
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


class ArgumentPacker:
    """Checks and packs the arguments of one kernel, from its parsed signature.

    Args:
        signature: the kernel's parameters (from :func:`specdsl._runtime.signature.parse_entry`).
        device_id: the ordinal of the device the kernel runs on; arrays elsewhere are
            refused. ``None`` skips the device check.

    Attributes:
        signature, device_id: as given; ``count``: the number of parameters.
        converters: per parameter, ``convert(value, stream)``: the checked value, or a
            :class:`~specdsl.errors.LaunchError` raised.
        fmt: a little-endian :mod:`struct` format of the whole parameter buffer.
        offsets: the byte offset of each parameter in that buffer.
        size: the buffer's size, in bytes.
    """

    def __init__(self, signature: EntrySignature, *, device_id: int | None = None) -> None:
        self.signature = signature
        self.device_id = device_id
        self.count = len(signature.params)
        fmt, offsets, offset = ["<"], [], 0
        for param in signature.params:
            align = param.param_align
            pad = -offset % align
            if pad:
                fmt.append(f"{pad}x")
            offset += pad
            offsets.append(offset)
            fmt.append(f"{param.size}s" if param.count is not None else _FORMAT[param.type])
            offset += param.size
        self.fmt = "".join(fmt)
        self.offsets = tuple(offsets)
        self.size = offset
        self.converters: tuple[Converter, ...] = tuple(
            self._converter(param) for param in signature.params)

    def values(self, args: tuple[Any, ...], stream: int = 0) -> list[Any]:
        """The checked values of ``args``, ready for ``struct.pack(self.fmt, *values)``.

        Args:
            args: one argument per ``.param``, in order.
            stream: the launch stream's handle, passed to DLPack and
                ``__cuda_array_interface__`` producers so they can order their work.

        Raises:
            LaunchError: a wrong argument count, or an argument its parameter cannot
                take; the message names the kernel, the parameter and the expectation.
        """
        if len(args) != self.count:
            names = ", ".join(self.signature.names) or "none"
            raise LaunchError(
                f"{self.signature.entry} takes {self.count} argument(s) ({names}), "
                f"got {len(args)}")
        return [convert(value, stream)
                for convert, value in zip(self.converters, args, strict=True)]

    @property
    def through_core(self) -> bool:
        """Whether cuda.core's ``launch`` can take these parameters: every one but an
        array parameter (``.b8 name[N]``, or any ``.type name[N]``), which cuda.core has no
        argument type for."""
        return all(param.count is None for param in self.signature.params)

    @staticmethod
    def inline_check(param: Param, core: bool = False) -> tuple[int, int, int, int, float]:
        """What a launch takes inline for ``param``, without calling its converter.

        One definition serves the generated Python checks (:mod:`specdsl._runtime.launchers`)
        and the compiled ones (:mod:`specdsl._runtime._speedups`), so both take the same values
        inline.

        Returns:
            ``(how, low, high, misaligned, largest)``: ``how`` is one of the ``INLINE_*``
            constants; an exact ``int`` in ``[low, high]`` with no bit of ``misaligned``
            set is taken as it is (``INLINE_INT``; ``INLINE_POINTER`` also reads a cuda.core
            ``Buffer`` or a contiguous torch tensor of the device), an exact ``float`` with
            ``|x| <= largest``
            (``INLINE_FLOAT``). With ``core``, 64-bit unsigned and pointer values are
            taken inline below 2**63 only (cuda.core's ``intptr_t`` holds those as they
            are; the converter's result is wrapped).
        """
        if param.count is not None:
            return INLINE_NONE, 0, 0, 0, 0.0
        bits = 63 if core and wide(param) else param.bits
        if param.is_ptr:
            return INLINE_POINTER, 0, (1 << bits) - 1, _pointee_align(param) - 1, 0.0
        if param.kind == "u":
            return INLINE_INT, 0, (1 << bits) - 1, 0, 0.0
        if param.kind == "s":
            return INLINE_INT, -(1 << (bits - 1)), (1 << (bits - 1)) - 1, 0, 0.0
        if param.kind == "f":
            return INLINE_FLOAT, 0, 0, 0, _FLOAT_MAX[bits]
        return INLINE_NONE, 0, 0, 0, 0.0  # .b types: the converter wraps them

    def core_plan(self) -> list[tuple[Any, ...]]:
        """Per ``.param``: :meth:`inline_check` (core) plus its converter and the function
        turning the converter's value into what cuda.core takes (``None``: as it is).
        What :class:`specdsl._runtime._speedups.CoreLaunch` is built from."""
        plan = []
        for param, convert in zip(self.signature.params, self.converters, strict=True):
            how, low, high, misaligned, largest = self.inline_check(param, core=True)
            post: Callable[[Any], int] | None
            if param.kind == "f" and param.count is None:
                post = float_bits[param.bits]
            elif wide(param):
                post = wrap_u64
            else:
                post = None
            plan.append((how, param.bits, low, high, misaligned, largest, convert, post))
        return plan

    def pack(self, args: tuple[Any, ...], stream: int = 0) -> bytes:
        """The parameter buffer for ``args``, as the driver would copy it (for tests and tools)."""
        return struct.pack(self.fmt, *self.values(args, stream))

    # -- per-parameter converters -------------------------------------------------

    def _fail(self, param: Param, expected: str, value: Any) -> LaunchError:
        return LaunchError(f"{self.signature.entry}: parameter {param.name!r} "
                           f"({param.describe()}) expects {expected} (got {describe(value)})")

    def _converter(self, param: Param) -> Converter:
        if param.count is not None:
            return self._aggregate(param)
        if param.is_ptr:
            return self._pointer(param)
        if param.kind == "f":
            return self._float(param)
        return self._integer(param)

    def _integer(self, param: Param) -> Converter:
        bits, kind = param.bits, param.kind
        low = -(1 << (bits - 1)) if kind in "sb" else 0
        high = (1 << bits) if kind in "ub" else (1 << (bits - 1))
        mask = (1 << bits) - 1
        wrap = kind == "b"
        allow_bool = bits == 8
        if kind == "u":
            expected = f"an int in [0, 2**{bits})"
        elif kind == "s":
            expected = f"an int in [-2**{bits - 1}, 2**{bits - 1})"
        else:
            expected = f"an int in [-2**{bits - 1}, 2**{bits})"
        fail = self._fail

        def convert(value: Any, stream: int) -> int:
            if type(value) is int or is_int(value):
                number = int(value)
                if low <= number < high:
                    return number & mask if wrap else number
                raise fail(param, expected, value)  # the value as given: its NumPy type
            if allow_bool and is_bool_like(value):
                return int(value)
            if is_bool_like(value):
                raise fail(param, expected + " (a bool is only taken by 8-bit parameters)",
                           value)
            raise fail(param, expected, value)

        return convert

    def _float(self, param: Param) -> Converter:
        bits = param.bits
        largest, exact = _FLOAT_MAX[bits], _FLOAT_EXACT[bits]
        expected = f"a float in the .f{bits} range (|x| <= {largest:g}; inf and nan pass)"
        fail = self._fail

        def convert(value: Any, stream: int) -> float:
            if type(value) is float or is_float(value):
                x = float(value)
                if abs(x) <= largest or not math.isfinite(x):
                    return x
                raise fail(param, expected, value)
            if is_int(value) and not is_bool_like(value):
                if -exact <= int(value) <= exact:
                    return float(value)
                raise fail(param, f"a float, or an int it holds exactly (|n| <= 2**"
                                  f"{exact.bit_length() - 1})", value)
            if is_bool_like(value):
                raise fail(param, expected + " (a bool is not taken by float parameters)",
                           value)
            raise fail(param, expected, value)

        return convert

    def _aggregate(self, param: Param) -> Converter:
        size = param.size
        fail = self._fail

        def convert(value: Any, stream: int) -> bytes:
            if isinstance(value, (bytes, bytearray, memoryview)):
                data = bytes(value)
            elif type(value).__module__ == "numpy" and hasattr(value, "tobytes"):
                data = value.tobytes()
            else:
                raise fail(param, f"{size} bytes (bytes or a NumPy array)", value)
            if len(data) != size:
                raise fail(param, f"exactly {size} bytes", value)
            return data

        return convert

    def _pointer(self, param: Param) -> Converter:
        limit = 1 << param.bits
        align = _pointee_align(param)
        why = (f".align {align}" if param.align is not None else
               "a .ptr without .align: PTX ISA 5.1.6.3")
        device_id = self.device_id
        fail = self._fail
        expected = ("a device array (DLPack or __cuda_array_interface__), a cuda.core Buffer "
                    "or a device pointer int")

        def convert(value: Any, stream: int) -> int:
            if type(value) is int:
                address = value
            else:
                reader = READERS.get(type(value))
                if reader is None:
                    reader = reader_for(type(value))
                if reader is None and (hasattr(value, "__cuda_array_interface__") or
                                       hasattr(value, "__dlpack__")):
                    reader = read_view  # an interface set on the object, not its type
                if reader is None or is_bool_like(value):
                    raise fail(param, expected, value)
                try:
                    address, device, problem = reader(value, stream)
                except Exception as exc:  # the array's own accessors failed
                    raise fail(param, f"{expected} (reading its address failed: {exc})",
                               value) from None
                if problem:
                    raise fail(param, f"{expected} ({problem})", value)
                if device_id is not None and device is not None and device != device_id:
                    raise fail(param, f"memory on device {device_id}, not device {device}",
                               value)
            if not 0 <= address < limit:
                raise fail(param, f"a device address in [0, 2**{param.bits})", value)
            if address % align:
                raise fail(param, f"an address aligned to {align} bytes ({why}); "
                                  f"{address:#x} is {address % align} "
                                  f"byte{'s' if address % align != 1 else ''} past a boundary",
                           value)
            return address

        return convert
