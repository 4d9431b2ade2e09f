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
  ``Buffer``, a torch tensor, a CuPy array, or any object with
  ``__cuda_array_interface__`` or DLPack (read by :mod:`specdsl._runtime.readers`);
  arrays must live on the executor's device, be C-contiguous and meet the parameter's
  ``.align``; where the spec declares the parameter (:mod:`specdsl._runtime.arraychecks`),
  an array's element type must be the declared one and its size at least what the
  launch touches;
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
from .arraychecks import ArrayCheck, ArrayFacts
from .readers import READERS, read_view, reader_for
from .scalars import FLOAT_EXACT, FLOAT_MAX, describe, is_float, is_int, wide
from .signature import EntrySignature, Param

__all__ = ["ArgumentPacker", "Converter", "INLINE_NONE", "INLINE_INT", "INLINE_POINTER",
           "INLINE_FLOAT", "PACK_INT", "PACK_F16", "PACK_F32", "PACK_F64", "PACK_BYTES"]

_FORMAT = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "s8": "b", "s16": "h", "s32": "i",
           "s64": "q", "b8": "B", "b16": "H", "b32": "I", "b64": "Q", "f16": "e", "f32": "f",
           "f64": "d"}
Converter = Callable[[Any, int], Any]

# What a launch's checks take inline, per parameter (ArgumentPacker.inline_check), and how
# the compiled path packs each (ArgumentPacker.driver_plan): specdsl._runtime._speedups
# uses the same numbers.
INLINE_NONE, INLINE_INT, INLINE_POINTER, INLINE_FLOAT = 0, 1, 2, 3
PACK_INT, PACK_F16, PACK_F32, PACK_F64, PACK_BYTES = 0, 1, 2, 3, 4


def _pointee_align(param: Param) -> int:
    """A ``.ptr`` parameter's pointee alignment in bytes (its callers take pointers only)."""
    align = param.pointee_align
    if align is None:
        raise ValueError(f"{param.describe()} is not a .ptr parameter")
    return align


class ArgumentPacker:
    """Checks and packs the arguments of one kernel, from its parsed signature.

    Args:
        signature: the kernel's parameters (from :func:`specdsl._runtime.signature.parse_entry`).
        device_id: the ordinal of the device the kernel runs on; arrays elsewhere are
            refused. ``None`` skips the device check.
        arrays: per parameter, its :class:`~specdsl._runtime.arraychecks.ArrayCheck` or
            ``None`` (:func:`~specdsl._runtime.arraychecks.plan_arrays`); none by default.

    Attributes:
        signature, device_id, arrays: as given; ``count``: the number of parameters;
        ``declared``: the array checks there are (those of ``arrays`` that are not None).
        converters: per parameter, ``convert(value, stream)``: the checked value, or a
            :class:`~specdsl.errors.LaunchError` raised.
        fmt: a little-endian :mod:`struct` format of the whole parameter buffer.
        offsets: the byte offset of each parameter in that buffer.
        size: the buffer's size, in bytes.
    """

    def __init__(self, signature: EntrySignature, *, device_id: int | None = None,
                 arrays: tuple[ArrayCheck | None, ...] | None = None) -> None:
        self.signature = signature
        self.device_id = device_id
        self.count = len(signature.params)
        self.arrays = arrays if arrays is not None else (None,) * self.count
        self.declared = tuple(check for check in self.arrays if check is not None)
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

    def values(self, args: tuple[Any, ...], stream: int = 0,
               grid: tuple[int, ...] | None = None) -> list[Any]:
        """The checked values of ``args``, ready for ``struct.pack(self.fmt, *values)``.

        The checks run in one order on every launch path: the argument count; each
        argument against its ``.param`` (and a declared array's element type), in order;
        then each declared array's size against what this launch touches
        (:meth:`check_extents`).

        Args:
            args: one argument per ``.param``, in order.
            stream: the launch stream's handle, passed to DLPack and
                ``__cuda_array_interface__`` producers so they can order their work.
            grid: the launch's grid in CTAs, ``(x, y, z)``: what a declared shape's
                ``grid.x`` reads (needed only by such a declaration).

        Raises:
            LaunchError: a wrong argument count, or an argument its parameter cannot
                take; the message names the kernel, the parameter and the expectation.
        """
        if len(args) != self.count:
            names = ", ".join(self.signature.names) or "none"
            raise LaunchError(
                f"{self.signature.entry} takes {self.count} argument(s) ({names}), "
                f"got {len(args)}")
        values = [convert(value, stream)
                  for convert, value in zip(self.converters, args, strict=True)]
        if self.declared:
            self.check_extents(args, values, stream, grid)
        return values

    def check_extents(self, args: tuple[Any, ...], values: list[Any], stream: int,
                      grid: tuple[int, ...] | None) -> None:
        """Refuse a declared array smaller than what this launch touches: its element
        count (or, for a ``Buffer``, its size in bytes) against the declared shape, with
        the checked scalar ``values`` and the ``grid``. A pointer given as an int carries
        no size and is not checked.

        Raises:
            LaunchError: naming the parameter, the declaration with this launch's values,
                and the array's size.
        """
        for check in self.declared:
            value = args[check.position]
            if type(value) is int:
                continue
            facts = self._read(value, stream)
            if facts is None:
                continue
            have = facts.elements if facts.elements is not None else facts.nbytes
            if have is None:
                continue
            count = check.required(values, grid)
            in_bytes = facts.elements is None
            if have < (count * check.size if in_bytes else count) or count < 0:
                param = self.signature.params[check.position]
                unit = "bytes" if in_bytes else "elements"
                raise self._fail(param, check.expected_extent(values, grid, count, in_bytes),
                                 value, f"{have} {unit}")

    @property
    def through_core(self) -> bool:
        """Whether cuda.core's ``launch`` can take these parameters: every one but an
        array parameter (``.b8 name[N]``, or any ``.type name[N]``), which cuda.core has no
        argument type for."""
        return all(param.count is None for param in self.signature.params)

    @staticmethod
    def inline_check(param: Param, int64: bool = False) -> tuple[int, int, int, int, float]:
        """What a launch takes inline for ``param``, without calling its converter.

        One definition serves the generated Python checks (:mod:`specdsl._runtime.launchers`)
        and the compiled ones (:mod:`specdsl._runtime._speedups`), so both take the same values
        inline.

        Returns:
            ``(how, low, high, misaligned, largest)``: ``how`` is one of the ``INLINE_*``
            constants; an exact ``int`` in ``[low, high]`` with no bit of ``misaligned``
            set is taken as it is (``INLINE_INT``; ``INLINE_POINTER`` also reads a cuda.core
            ``Buffer``, a contiguous torch tensor or a CuPy array of the device), an exact
            ``float`` with ``|x| <= largest`` (``INLINE_FLOAT``). With ``int64``, 64-bit
            unsigned and pointer values are taken inline below 2**63 only (what a signed
            64-bit integer holds: cuda.core's ``intptr_t``, the compiled path's C value);
            the converter takes the rest.
        """
        if param.count is not None:
            return INLINE_NONE, 0, 0, 0, 0.0
        bits = 63 if int64 and wide(param) else param.bits
        if param.is_ptr:
            return INLINE_POINTER, 0, (1 << bits) - 1, _pointee_align(param) - 1, 0.0
        if param.kind == "u":
            return INLINE_INT, 0, (1 << bits) - 1, 0, 0.0
        if param.kind == "s":
            return INLINE_INT, -(1 << (bits - 1)), (1 << (bits - 1)) - 1, 0, 0.0
        if param.kind == "f":
            return INLINE_FLOAT, 0, 0, 0, FLOAT_MAX[bits]
        return INLINE_NONE, 0, 0, 0, 0.0  # .b types: the converter wraps them

    def driver_plan(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """What :class:`specdsl._runtime._speedups.DriverLaunch` is built from.

        Returns:
            ``(params, arrays)``: per ``.param``, :meth:`inline_check` (``int64``) then its
            byte offset and size in the parameter buffer, how it is packed (``PACK_*``) and
            its converter; per declared array, ``(index, bytes per element, extent program,
            accepted element names)`` (:class:`~specdsl._runtime.arraychecks.ArrayCheck`).
        """
        params = []
        for param, offset, convert in zip(self.signature.params, self.offsets,
                                          self.converters, strict=True):
            if param.count is not None:
                how = PACK_BYTES
            else:
                how = {"f16": PACK_F16, "f32": PACK_F32, "f64": PACK_F64}.get(param.type,
                                                                             PACK_INT)
            params.append((*self.inline_check(param, int64=True), offset, param.size, how,
                           convert))
        arrays = [(check.position, check.size, check.program, check.accepted)
                  for check in self.declared]
        return params, arrays

    def pack(self, args: tuple[Any, ...], stream: int = 0,
             grid: tuple[int, ...] | None = None) -> bytes:
        """The parameter buffer for ``args``, as the driver would copy it (for tests and tools)."""
        return struct.pack(self.fmt, *self.values(args, stream, grid))

    # -- per-parameter converters -------------------------------------------------

    def _fail(self, param: Param, expected: str, value: Any, what: str = "") -> LaunchError:
        got = f"{what}: {describe(value)}" if what else describe(value)
        return LaunchError(f"{self.signature.entry}: parameter {param.name!r} "
                           f"({param.describe()}) expects {expected} (got {got})")

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
        largest, exact = FLOAT_MAX[bits], FLOAT_EXACT[bits]
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
        check = self.arrays[self.signature.params.index(param)]
        read = self._read

        def convert(value: Any, stream: int) -> int:
            if type(value) is int:
                address = value
            else:
                facts = read(value, stream, param)
                if facts is None:
                    raise fail(param, _POINTER, value)
                if facts.problem:
                    raise fail(param, f"{_POINTER} ({facts.problem})", value)
                address, device = facts.address, facts.device
                if device_id is not None and device is not None and device != device_id:
                    raise fail(param, f"memory on device {device_id}, not device {device}",
                               value)
                if check is not None and facts.element and not check.takes(facts.element):
                    raise fail(param, check.expected_elements(), value,
                               f"{facts.element} elements")
            if not 0 <= address < limit:
                raise fail(param, f"a device address in [0, 2**{param.bits})", value)
            if address % align:
                raise fail(param, f"an address aligned to {align} bytes ({why}); "
                                  f"{address:#x} is {address % align} "
                                  f"byte{'s' if address % align != 1 else ''} past a boundary",
                           value)
            return address

        return convert

    def _read(self, value: Any, stream: int, param: Param | None = None) -> ArrayFacts | None:
        """What a pointer argument carries (its reader's :class:`ArrayFacts`), or ``None``
        for a value no reader takes.

        Raises:
            LaunchError: the argument's own accessors failed (named for ``param``).
        """
        reader = READERS.get(type(value))
        if reader is None:
            reader = reader_for(type(value))
        if reader is None and (hasattr(value, "__cuda_array_interface__") or
                               hasattr(value, "__dlpack__")):
            reader = read_view  # an interface set on the object, not its type
        if reader is None or is_bool_like(value):
            return None
        try:
            return reader(value, stream)
        except Exception as exc:  # the array's own accessors failed
            if param is None:
                return None  # its converter explained (check_extents runs after them)
            raise self._fail(param, f"{_POINTER} (reading its address failed: {exc})",
                             value) from None


_POINTER = ("a device array (DLPack or __cuda_array_interface__), a cuda.core Buffer or a "
            "device pointer int")
