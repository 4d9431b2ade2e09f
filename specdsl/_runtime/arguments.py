"""Launch arguments: checked against a kernel's parsed ``.entry`` signature and packed.

Everything here is plain Python: it runs (and is tested) without a GPU. An
:class:`ArgumentPacker` is built once per module; each launch calls
:meth:`ArgumentPacker.values`, which refuses a bad argument with a
:class:`~specdsl.errors.LaunchError` naming the parameter and what it expects, and
returns the values in the order of :attr:`ArgumentPacker.fmt`, a :mod:`struct`
format that lays the parameters out as the driver reads them (each at its natural
alignment, as the PTX ISA's ``.param`` state space lays them out, section 5.1.6).

Accepted arguments:

* a pointer parameter (``.ptr``): a device pointer as an ``int``, a cuda.core
  ``Buffer``, a torch tensor, or any object with ``__cuda_array_interface__`` or
  DLPack (read through cuda.core's ``StridedMemoryView``); arrays must live on the
  executor's device, be C-contiguous and meet the parameter's ``.align``;
* an integer parameter: a Python or NumPy integer in the type's range (a bool only
  for 8-bit parameters);
* a float parameter: a Python or NumPy float, or an integer the type holds exactly;
* a ``.b8 name[N]`` aggregate: ``N`` bytes (``bytes``, ``bytearray``, a NumPy array).
"""

from __future__ import annotations

import math
import struct
import sys
from types import ModuleType
from typing import Any, Callable

import attrs

from ..errors import LaunchError
from .._spec.fields import is_bool_like
from .signature import EntrySignature, Param
from .speedups import speedups

__all__ = [
    "ArgumentPacker", "DeviceLimits", "Geometry", "check_geometry", "stream_device",
    "stream_handle",
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
        return unpack(pack(value))[0]
    return bits


# Floats go to cuda.core as the int of their bit pattern (see ArgumentPacker.core_launcher);
# f64 as a signed int, which cuda.core's intptr_t holds.
_F16_BITS, _F32_BITS, _F64_BITS = _bits("<e", "<H"), _bits("<f", "<I"), _bits("<d", "<q")


def _buffer_type() -> type | None:
    """cuda.core's ``Buffer`` class (``None`` without cuda.core: no Buffer can reach a packer)."""
    try:
        from cuda.core import Buffer
    except ImportError:
        return None
    return Buffer


def _tensor_type() -> type | None:
    """``torch.Tensor`` where torch is already imported (specdsl never imports it: without
    it, no tensor can reach a packer, and one made later takes the converter's path)."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


def _wide(param: Param) -> bool:
    """Whether cuda.core's ``intptr_t`` holds ``param``'s values at or above 2**63 only
    wrapped (64-bit unsigned, bit and pointer parameters)."""
    return param.bits == 64 and (param.is_ptr or param.kind in "ub")


def _wrap_u64(value: int) -> int:
    """A 64-bit unsigned value as the signed int with the same bits (cuda.core's intptr_t)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _what(value: Any) -> str:
    kind = type(value)
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    module = "" if kind.__module__ == "builtins" else kind.__module__ + "."
    return f"{text} of type {module}{kind.__qualname__}"


def _is_int(value: Any) -> bool:
    kind = type(value)
    if kind is int:
        return True
    if kind is bool:
        return False
    return kind.__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iu" \
        and getattr(value, "ndim", 1) == 0


def _is_float(value: Any) -> bool:
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
        compiled: the compiled launch path (:mod:`specdsl._runtime._speedups`, as
            :func:`specdsl._runtime.speedups.speedups` returns it) to build launchers with; ``None``
            or ``False``: generated Python ones; ``True`` (the default): ``speedups()``
            decides.

    Attributes:
        fmt: a little-endian :mod:`struct` format of the whole parameter buffer.
        offsets: the byte offset of each parameter in that buffer.
        size: the buffer's size, in bytes.
    """

    def __init__(self, signature: EntrySignature, *, device_id: int | None = None,
                 compiled: ModuleType | None | bool = True) -> None:
        self.signature = signature
        self.device_id = device_id
        # the compiled checks (specdsl._runtime._speedups), or None for the generated Python ones
        self._speedups = speedups() if compiled is True else compiled or None
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
        self._converters: tuple[Converter, ...] = tuple(
            self._converter(param) for param in signature.params)
        self._pairs = tuple(zip(self._converters, signature.params))

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
        return [convert(value, stream) for convert, value in zip(self._converters, args)]

    def writer(self) -> Callable[[tuple[Any, ...], int, Any], None]:
        """A function ``write(args, stream, buffer)`` that checks ``args`` and packs them.

        It does what :meth:`values` does, then ``struct.pack_into(self.fmt, buffer, 0,
        ...)``, as one function generated for this signature (the attrs way of making
        ``__init__``): plain ints, floats and cuda.core Buffers are checked inline,
        anything else goes through the same converters as :meth:`values`, so the errors
        are the same.

        Raises:
            LaunchError: as :meth:`values`.
        """
        body, names = self._check_source()
        lines = ["def write(args, stream, buffer):", *body,
                 f"    pack_into(buffer, 0{''.join(', ' + n for n in names)})"]
        return self._generate("write", lines, {})

    @property
    def through_core(self) -> bool:
        """Whether cuda.core's ``launch`` can take these parameters: every one but an
        array parameter (``.b8 name[N]``, or any ``.type name[N]``), which cuda.core has no
        argument type for."""
        return all(param.count is None for param in self.signature.params)

    def core_launcher(self, core_launch: Callable[..., Any],
                      kernel: Any) -> Callable[[tuple[Any, ...], tuple, tuple], Any]:
        """A function ``fire(args, streams, geometry) -> None | Exception`` launching
        through cuda.core (the exception cuda.core raised, returned, when the launch fails).

        Checks ``args`` as :meth:`values` does, then calls ``core_launch(streams[1],
        geometry[7], kernel, *values)`` (cuda.core's ``launch``; ``streams`` is ``(handle,
        cuda.core Stream)``, ``geometry`` ends with the ``LaunchConfig``). cuda.core packs
        a Python int as a pointer-sized ``intptr_t`` and the driver copies each parameter's
        own size from it (``cuLaunchKernel``'s ``kernelParams``), so an int already checked
        against a narrower ``.param`` arrives as its low bytes (CUDA hosts are little
        endian); 64-bit values at or above 2**63 are passed as their two's-complement
        equivalent, and floats as the int of their bit pattern. Requires
        :attr:`through_core`.

        Raises:
            LaunchError: as :meth:`values`; an argument's own error (its array interface)
                is never mistaken for a failed launch.
        """
        if self._speedups is not None:
            return self._compiled_launch(core_launch, kernel)
        body, values = self._core_source()
        lines = ["def fire(args, streams, geometry):", "    stream = streams[0]", *body,
                 "    core_stream, config = streams[1], geometry[7]",
                 "    try:",
                 f"        core_launch(core_stream, config, kernel{values})",
                 "    except Exception as exc:  # the launch failed: the caller reports it",
                 "        return exc"]
        return self._generate("fire", lines, self._core_names(core_launch, kernel))

    def bound_core_launcher(self, core_launch: Callable[..., Any], kernel: Any, streams: tuple,
                            config: Any, on_error: Callable[[Any, tuple], None]
                            ) -> Callable[..., None]:
        """A function ``bound(*args)`` with the streams (``(handle, cuda.core Stream)``) and
        ``LaunchConfig`` fixed (``Executor.bind``): checks as :meth:`core_launcher` does,
        launches through cuda.core, and calls ``on_error(exception, args)`` when the launch
        fails.

        Raises:
            LaunchError: as :meth:`values`.
        """
        if self._speedups is not None:
            return self._speedups.BoundCoreLaunch(self._compiled_launch(core_launch, kernel),
                                                  streams, config, on_error)
        body, values = self._core_source()
        lines = ["def bound(*args):", *body,
                 "    try:",
                 f"        core_launch(core_stream, config, kernel{values})",
                 "    except Exception as exc:",
                 "        on_error(exc, args)"]
        return self._generate("bound", lines, dict(
            self._core_names(core_launch, kernel), stream=streams[0], core_stream=streams[1],
            config=config, on_error=on_error))

    def _compiled_launch(self, core_launch: Callable[..., Any], kernel: Any) -> Any:
        """The compiled twin of :meth:`core_launcher`'s function (``specdsl._runtime._speedups``)."""
        return self._speedups.CoreLaunch(self.core_plan(), self.values, core_launch, kernel,
                                         _buffer_type(), _tensor_type(), self.device_id)

    def _core_source(self) -> tuple[list[str], str]:
        """The check lines and ``", v0, v1, ..."``: the checked values as cuda.core takes them."""
        body, names = self._check_source(core=True)
        return body, "".join(", " + self._core_value(param, name)
                             for param, name in zip(self.signature.params, names))

    @staticmethod
    def _core_names(core_launch: Callable[..., Any], kernel: Any) -> dict[str, Any]:
        return dict(core_launch=core_launch, kernel=kernel, f16_bits=_F16_BITS,
                    f32_bits=_F32_BITS, f64_bits=_F64_BITS, wrap=_wrap_u64)

    @staticmethod
    def _core_value(param: Param, name: str) -> str:
        """The expression handing checked value ``name`` to cuda.core (see core_launcher):
        a float as the int of its bits; ints as they are (wrapped by the checks)."""
        return f"f{param.bits}_bits({name})" if param.kind == "f" else name

    def launcher(self, launch_kernel: Callable[..., Any],
                 function: int) -> Callable[[tuple[Any, ...], tuple, tuple], int]:
        """A function ``fire(args, streams, geometry) -> CUresult`` calling the driver.

        The launch path of kernels cuda.core cannot launch (:attr:`through_core` false).
        Checks and packs ``args`` as :meth:`writer` does, into a parameter buffer of the
        calling thread's own (made by :meth:`new_slot` on a thread's first launch, so
        threads never share one and need no lock), then calls
        ``launch_kernel(function, gx, gy, gz, bx, by, bz, shared_mem, stream, params, 0)``
        (``cuLaunchKernel``'s signature) with ``geometry = (gx, gy, gz, bx, by, bz,
        shared_mem, ...)`` and ``stream = streams[0]``, the handle.
        One generated function, so a launch pays for one Python call on top of the
        driver's; the driver copies the parameters before it returns.

        Raises:
            LaunchError: as :meth:`values`.
        """
        lines = ["def fire(args, streams, geometry):", "    stream = streams[0]",
                 *self._pack_source(),
                 "    gx, gy, gz, bx, by, bz, smem = geometry[:7]",
                 "    return launch_kernel(function, gx, gy, gz, bx, by, bz, smem, streams[0], "
                 "address, 0)[0]"]
        return self._generate("fire", lines, self._launch_names(launch_kernel, function))

    def bound_launcher(self, launch_kernel: Callable[..., Any], function: int, stream: int,
                       geometry: tuple, on_error: Callable[[Any, tuple], None]
                       ) -> Callable[..., None]:
        """A function ``launch(*args)`` with the stream and geometry fixed (``Executor.bind``).

        Checks and packs as :meth:`launcher` does, in one generated function, and calls
        ``on_error(err, args)`` when the driver returns an error.

        Raises:
            LaunchError: as :meth:`values`.
        """
        gx, gy, gz, bx, by, bz, smem = geometry[:7]
        lines = ["def launch(*args):", *self._pack_source(),
                 f"    err = launch_kernel(function, {gx}, {gy}, {gz}, {bx}, {by}, {bz}, "
                 f"{smem}, stream, address, 0)[0]",
                 "    if err:",
                 "        on_error(err, args)"]
        return self._generate("launch", lines, dict(
            self._launch_names(launch_kernel, function), stream=stream, on_error=on_error))

    def _pack_source(self) -> list[str]:
        """Lines that check ``args``, then pack them into this thread's parameter buffer
        (``buffer``, its pointer array at ``address``), for the generated launchers."""
        body, names = self._check_source()
        return [*body,
                "    try:",
                "        buffer, address, _ = local.slot",
                "    except AttributeError:",
                "        buffer, address, _ = local.slot = new_slot()",
                f"    pack_into(buffer, 0{''.join(', ' + n for n in names)})"]

    def _launch_names(self, launch_kernel: Callable[..., Any], function: int) -> dict[str, Any]:
        import threading

        return dict(launch_kernel=launch_kernel, function=function, local=threading.local(),
                    new_slot=self.new_slot)

    def new_slot(self) -> tuple[bytearray, int, Any]:
        """A parameter buffer and its ``void*[]`` for ``cuLaunchKernel``'s ``kernelParams``.

        Returns:
            ``(buffer, address of the pointer array (0 without parameters), the ctypes
            array to keep alive)``; pointer ``i`` points at ``buffer[offsets[i]]``.
        """
        import ctypes

        buffer = bytearray(max(self.size, 8))
        base = ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))
        pointers = (ctypes.c_void_p * max(self.count, 1))(
            *([base + offset for offset in self.offsets] or [0]))
        return buffer, (ctypes.addressof(pointers) if self.count else 0), pointers

    def _generate(self, name: str, lines: list[str], extra: dict[str, Any]) -> Any:
        namespace: dict[str, Any] = {f"c{i}": c for i, c in enumerate(self._converters)}
        namespace.update(values=self.values, pack_into=struct.Struct(self.fmt).pack_into,
                         Buffer=_buffer_type(), Tensor=_tensor_type(), **extra)
        exec(compile("\n".join(lines), f"<specdsl {name} {self.signature.entry}>", "exec"),
             namespace)
        return namespace[name]

    @staticmethod
    def inline_check(param: Param, core: bool = False) -> tuple[int, int, int, int, float]:
        """What a launch takes inline for ``param``, without calling its converter.

        One definition serves the generated Python checks (:meth:`_check_source`) and the
        compiled ones (:mod:`specdsl._runtime._speedups`), so both take the same values inline.

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
        bits = 63 if core and _wide(param) else param.bits
        if param.is_ptr:
            return INLINE_POINTER, 0, (1 << bits) - 1, param.pointee_align - 1, 0.0
        if param.kind == "u":
            return INLINE_INT, 0, (1 << bits) - 1, 0, 0.0
        if param.kind == "s":
            return INLINE_INT, -(1 << (bits - 1)), (1 << (bits - 1)) - 1, 0, 0.0
        if param.kind == "f":
            return INLINE_FLOAT, 0, 0, 0, _FLOAT_MAX[bits]
        return INLINE_NONE, 0, 0, 0, 0.0  # .b types: the converter wraps them

    def core_plan(self) -> list[tuple]:
        """Per ``.param``: :meth:`inline_check` (core) plus its converter and the function
        turning the converter's value into what cuda.core takes (``None``: as it is).
        What :class:`specdsl._runtime._speedups.CoreLaunch` is built from."""
        plan = []
        for param, convert in zip(self.signature.params, self._converters):
            how, low, high, misaligned, largest = self.inline_check(param, core=True)
            if param.kind == "f" and param.count is None:
                post = {16: _F16_BITS, 32: _F32_BITS, 64: _F64_BITS}[param.bits]
            elif _wide(param):
                post = _wrap_u64
            else:
                post = None
            plan.append((how, param.bits, low, high, misaligned, largest, convert, post))
        return plan

    def _check_source(self, core: bool = False) -> tuple[list[str], list[str]]:
        """Python lines that check ``args`` and bind ``v0 .. vN`` (the packed values).

        What each parameter takes inline is :meth:`inline_check`; the rest goes through
        its converter (``c0 .. cN``), which accepts, converts or explains a refusal. With
        ``core``, a 64-bit unsigned or pointer value the converter passes at or above
        2**63 is wrapped to its two's-complement equivalent (same bits).
        """
        names = [f"v{i}" for i in range(self.count)]
        if self.count:  # a wrong count fails the unpacking; values() explains it
            lines = ["    try:",
                     f"        {', '.join(f'a{i}' for i in range(self.count))}, = args",
                     "    except ValueError:",
                     "        values(args, stream)"]
        else:
            lines = ["    if args:",
                     "        values(args, stream)"]
        for i, param in enumerate(self.signature.params):
            a, v = f"a{i}", f"v{i}"
            how, low, high, misaligned, largest = self.inline_check(param, core)
            slow = f"wrap(c{i}({a}, stream))" if core and _wide(param) else f"c{i}({a}, stream)"
            if how in (INLINE_INT, INLINE_POINTER) and low == 0:
                # one AND tests range and alignment: a negative int has every high bit
                fast = f"type({a}) is int and not {a} & {-(high + 1) | misaligned}"
            elif how == INLINE_INT:
                fast = f"type({a}) is int and {low} <= {a} <= {high}"
            elif how == INLINE_FLOAT:
                fast = f"type({a}) is float and -{largest!r} <= {a} <= {largest!r}"
            else:
                fast = None
            if how == INLINE_POINTER:
                # a cuda.core Buffer or a contiguous torch tensor of this device is read
                # inline; anything else (host, pinned or managed memory, a closed Buffer,
                # whose properties raise, misaligned, another device) takes the converter,
                # which explains a refusal
                if self.device_id is None:
                    buffer_ok, tensor_ok = f"{a}.is_device_accessible", f"{a}.get_device() >= 0"
                else:
                    buffer_ok = f"{a}.device_id == {self.device_id}"
                    tensor_ok = f"{a}.get_device() == {self.device_id}"
                lines += [f"    if {fast}:",
                          f"        {v} = {a}",
                          "    else:",
                          "        try:",
                          f"            if type({a}) is Buffer:",
                          f"                {v} = int({a}.handle) if {buffer_ok} else 0",
                          f"            elif type({a}) is Tensor and {tensor_ok} and "
                          f"{a}.is_contiguous():",
                          f"                {v} = {a}.data_ptr()",
                          "            else:",
                          f"                {v} = 0",
                          "        except Exception:",
                          f"            {v} = 0",
                          f"        if type({v}) is not int or not {v} or "
                          f"{v} & {-(high + 1) | misaligned}:",
                          f"            {v} = {slow}"]
            elif fast is not None:
                lines.append(f"    {v} = {a} if {fast} else {slow}")
            else:
                lines.append(f"    {v} = {slow}")
        return lines, names

    def pack(self, args: tuple[Any, ...], stream: int = 0) -> bytes:
        """The parameter buffer for ``args``, as the driver would copy it (for tests and tools)."""
        return struct.pack(self.fmt, *self.values(args, stream))

    # -- per-parameter converters -------------------------------------------------

    def _fail(self, param: Param, expected: str, value: Any) -> LaunchError:
        return LaunchError(f"{self.signature.entry}: parameter {param.name!r} "
                           f"({param.describe()}) expects {expected} (got {_what(value)})")

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
            if type(value) is int or _is_int(value):
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
            if type(value) is float or _is_float(value):
                x = float(value)
                if abs(x) <= largest or not math.isfinite(x):
                    return x
                raise fail(param, expected, value)
            if _is_int(value) and not is_bool_like(value):
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
        align = param.pointee_align
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
                reader = _READERS.get(type(value))
                if reader is None:
                    reader = _reader_for(type(value))
                if reader is None and (hasattr(value, "__cuda_array_interface__") or
                                       hasattr(value, "__dlpack__")):
                    reader = _read_view  # an interface set on the object, not its type
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


# -- pointer readers: type -> (value, stream) -> (address, device or None, problem or "")

Reader = Callable[[Any, int], "tuple[int, int | None, str]"]
_READERS: dict[type, Reader] = {}


def _read_int_like(value: Any, stream: int) -> tuple[int, int | None, str]:
    return int(value), None, ""


def _read_buffer(value: Any, stream: int) -> tuple[int, int | None, str]:
    address = int(value.handle)
    if address == 0:
        return 0, None, "the Buffer is closed or empty"
    if not value.is_device_accessible:
        return 0, None, "the Buffer is not device-accessible"
    device = value.device_id
    return address, device if device >= 0 else None, ""


def _read_torch(value: Any, stream: int) -> tuple[int, int | None, str]:
    # torch's DLPack and CAI exports cost microseconds; data_ptr() reads the same address.
    if not value.is_cuda:
        return 0, None, f"the tensor is on {value.device}, not a CUDA device"
    if not value.is_contiguous():
        return 0, None, "the tensor is not contiguous"
    return value.data_ptr(), value.get_device(), ""


def _read_view(value: Any, stream: int) -> tuple[int, int | None, str]:
    from cuda.core.utils import StridedMemoryView

    try:
        view = StridedMemoryView.from_any_interface(value, stream_ptr=stream)
    except Exception as exc:  # the producer refused the export
        return 0, None, f"its array interface failed: {exc}"
    if not view.is_device_accessible:
        return 0, None, "the array is in host memory"
    strides = view.strides
    if strides is not None and view.size > 1:
        expected, step = [], 1
        for extent in reversed(view.shape):
            expected.append(step)
            step *= extent
        if tuple(s for s, n in zip(strides, view.shape) if n > 1) != tuple(
                s for s, n in zip(reversed(expected), view.shape) if n > 1):
            return 0, None, "the array is not C-contiguous"
    return view.ptr, view.device_id, ""


def _reader_for(kind: type) -> Reader | None:
    module = kind.__module__ or ""
    if kind is bool:
        return None
    if module == "numpy" and kind.__name__.startswith(("int", "uint")):
        reader: Reader | None = _read_int_like  # a NumPy integer scalar holding an address
    elif module.startswith("cuda.core") and kind.__name__ == "Buffer":
        reader = _read_buffer
    elif module.startswith("torch") and hasattr(kind, "data_ptr") and hasattr(kind, "is_cuda"):
        reader = _read_torch
    elif hasattr(kind, "__cuda_array_interface__") or hasattr(kind, "__dlpack__"):
        reader = _read_view
    else:
        reader = None
    if reader is not None:
        _READERS[kind] = reader
    return reader


# -- streams ---------------------------------------------------------------------------

# type -> (handle reader, whether the type has cuda.core's is_closed)
_STREAMS: dict[type, tuple[Callable[[Any], int], bool]] = {}


def stream_handle(stream: Any) -> int:
    """The ``CUstream`` handle of a stream object, as an int.

    Accepts a cuda.core ``Stream``, any object with ``__cuda_stream__`` (returning
    ``(version, handle)``), and objects with an int ``cuda_stream`` attribute
    (``torch.cuda.Stream``).

    Raises:
        LaunchError: anything else (a raw int is refused: it says nothing of its device),
            a closed stream, or a stream object whose handle cannot be read.
    """
    kind = type(stream)
    entry = _STREAMS.get(kind)
    if entry is None:
        if isinstance(getattr(stream, "cuda_stream", None), int):
            # torch.cuda.Stream: its cuda_stream int reads faster than its __cuda_stream__()
            def reader(s: Any) -> int:
                return int(s.cuda_stream)
        elif hasattr(kind, "__cuda_stream__"):
            def reader(s: Any) -> int:
                return int(s.__cuda_stream__()[1])
        else:
            raise LaunchError(
                f"stream must be a cuda.core Stream, an object with __cuda_stream__ or a "
                f"torch.cuda.Stream (got {_what(stream)})")
        entry = _STREAMS[kind] = (reader, hasattr(kind, "is_closed"))
    reader, closable = entry
    if closable and stream.is_closed is True:  # a closed cuda.core Stream reads handle 0
        raise LaunchError(f"stream {_what(stream)} is closed")
    try:
        return reader(stream)
    except Exception as exc:  # a closed stream, a producer that refuses
        raise LaunchError(f"stream {_what(stream)} gave no handle: {exc}") from None


def stream_device(stream: Any) -> int | None:
    """The ordinal of the device a stream object says it belongs to, or ``None``.

    Read from what the common stream types carry: a cuda.core ``Stream``'s ``device``,
    a ``torch.cuda.Stream``'s ``device_index``, a CuPy stream's ``device_id``. Other
    objects say nothing here (the executor then asks the driver).
    """
    device = getattr(stream, "device_index", None)  # torch.cuda.Stream
    if type(device) is int:
        return device
    device = getattr(stream, "device_id", None)  # CuPy
    if type(device) is int:
        return device
    device = getattr(getattr(stream, "device", None), "device_id", None)  # cuda.core
    return device if type(device) is int else None


# -- launch geometry -------------------------------------------------------------------


@attrs.frozen
class DeviceLimits:
    """A device's launch limits (CUDA Programming Guide, "Compute Capabilities", table 21).

    Attributes:
        max_threads_per_block: threads per CTA.
        max_block: largest block extent in x, y, z.
        max_grid: largest grid extent in x, y, z, in CTAs.
        shared_per_block: dynamic + static shared memory without opting in, in bytes.
        shared_per_block_optin: the most a kernel may opt in to, in bytes.
    """

    max_threads_per_block: int = 1024
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    shared_per_block: int = 48 * 1024
    shared_per_block_optin: int = 227 * 1024


@attrs.frozen
class Geometry:
    """A checked launch geometry: grid and block as 3-tuples, dynamic shared memory in bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int


def _dims(label: str, value: Any) -> tuple[int, int, int]:
    items = (value,) if _is_int(value) or is_bool_like(value) else value
    if not isinstance(items, (tuple, list)) or not 1 <= len(items) <= 3:
        raise LaunchError(f"{label} must be a positive int or a tuple of 1 to 3 positive ints "
                          f"(got {_what(value)})")
    out = []
    for axis, item in zip("xyz", items):
        if not _is_int(item):
            raise LaunchError(f"{label}.{axis} must be an int (got {_what(item)})")
        if int(item) < 1:
            raise LaunchError(f"{label}.{axis} must be at least 1 (got {int(item)})")
        out.append(int(item))
    while len(out) < 3:
        out.append(1)
    return (out[0], out[1], out[2])


def check_geometry(grid: Any, block: Any, shared_mem: Any, limits: DeviceLimits, *,
                   kernel_threads: int | None = None, static_shared: int = 0,
                   cluster: tuple[int, int, int] = (1, 1, 1),
                   entry: str = "kernel") -> Geometry:
    """Check a launch's grid, block and dynamic shared memory against device limits.

    Args:
        grid: CTAs, an int or a tuple of 1-3 ints.
        block: threads per CTA, an int or a tuple of 1-3 ints.
        shared_mem: dynamic shared memory per CTA, in bytes.
        limits: the device's limits.
        kernel_threads: the kernel's own threads-per-CTA limit (it can be below the
            device's when the kernel uses many registers), if known.
        static_shared: the kernel's static shared memory, in bytes.
        cluster: the kernel's compile-time cluster shape in CTAs (PTX ``.reqnctapercluster``);
            the grid must be a whole number of clusters in every dimension (CUDA
            Programming Guide, "Thread Block Clusters").
        entry: the kernel's name, for messages.

    Raises:
        LaunchError: a non-int, zero or negative extent, or a limit exceeded; the message
            names the limit.
    """
    g = _dims(f"{entry}: grid", grid)
    b = _dims(f"{entry}: block", block)
    for axis, extent, top in zip("xyz", g, limits.max_grid):
        if extent > top:
            raise LaunchError(f"{entry}: grid.{axis} = {extent} exceeds the device's {top}")
    c = _dims(f"{entry}: cluster", cluster)
    if any(extent % size for extent, size in zip(g, c)):
        raise LaunchError(f"{entry}: grid {g} is not a whole number of the kernel's clusters "
                          f"of {c} CTAs (.reqnctapercluster): each grid extent must be a "
                          f"multiple of the cluster's (a built-in spec's launch_dims gives one)")
    for axis, extent, top in zip("xyz", b, limits.max_block):
        if extent > top:
            raise LaunchError(f"{entry}: block.{axis} = {extent} exceeds the device's {top}")
    threads = b[0] * b[1] * b[2]
    cap = limits.max_threads_per_block
    if kernel_threads is not None and kernel_threads < cap:
        cap = kernel_threads
    if threads > cap:
        why = "the kernel's (register use)" if cap != limits.max_threads_per_block else \
            "the device's"
        raise LaunchError(f"{entry}: block of {threads} threads exceeds {why} limit of {cap}")
    if not _is_int(shared_mem):
        raise LaunchError(f"{entry}: shared_mem must be an int number of bytes "
                          f"(got {_what(shared_mem)})")
    shared = int(shared_mem)
    if shared < 0:
        raise LaunchError(f"{entry}: shared_mem must be >= 0 bytes (got {shared})")
    if static_shared + shared > limits.shared_per_block_optin:
        raise LaunchError(
            f"{entry}: {shared} bytes of dynamic shared memory plus {static_shared} static "
            f"exceed the device's opt-in limit of {limits.shared_per_block_optin} bytes per CTA")
    return Geometry(g, b, shared)
