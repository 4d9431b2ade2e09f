"""Generated launchers: one function per kernel that checks its arguments and launches it.

The plain-Python launch path, and the reference the compiled one
(:mod:`specdsl._runtime._speedups`, which calls ``cuLaunchKernel`` itself) must match. Built
from an :class:`~specdsl._runtime.params.ArgumentPacker`, as attrs builds ``__init__``: the
source is written for the kernel's signature, compiled once and registered in
:mod:`linecache` under a unique file name, so a traceback through a launcher shows its
lines. Plain ints, floats, cuda.core ``Buffer``\\ s and torch tensors are checked inline
(a declared array's element type and size too); anything else goes through the packer's
converters, and a size the inline checks cannot vouch for through the packer's own
``values``, so the errors are the same on every path.

Two ways to launch:

* through cuda.core's ``launch`` (:func:`core_launcher`, :func:`bound_core_launcher`):
  every kernel whose parameters cuda.core can take;
* through the driver's ``cuLaunchKernel`` with a parameter buffer specdsl packs
  (:func:`driver_launcher`, :func:`bound_driver_launcher`): kernels with array
  parameters (``.b8 name[N]``), which cuda.core has no argument type for.
"""

from __future__ import annotations

import ctypes
import hashlib
import linecache
import struct
import threading
from collections.abc import Callable
from typing import Any

from .arraychecks import ELEMENT_NAMES, OP_CONST, OP_GRID, OP_MUL, OP_PARAM
from .geometry import LaunchGeometry
from .params import INLINE_FLOAT, INLINE_INT, INLINE_POINTER, ArgumentPacker
from .readers import buffer_type, tensor_type
from .scalars import float_bits, wide, wrap_u64
from .signature import Param
from .streams import Streams

__all__ = ["writer", "core_launcher", "bound_core_launcher", "driver_launcher",
           "bound_driver_launcher", "new_slot", "Fire"]

#: ``fire(args, streams, geometry) -> None | error``: a module's launcher (see
#: :func:`core_launcher` and :func:`driver_launcher`).
Fire = Callable[[tuple[Any, ...], Streams, LaunchGeometry], Any]


def writer(packer: ArgumentPacker) -> Callable[..., None]:
    """A function ``write(args, stream, buffer, grid=None)`` that checks ``args`` and
    packs them.

    It does what :meth:`~specdsl._runtime.params.ArgumentPacker.values` does (``grid``,
    the launch's grid in CTAs, is what a declared shape's ``grid.x`` reads), then
    ``struct.pack_into(packer.fmt, buffer, 0, ...)``, as one generated function.

    Raises:
        LaunchError: as ``packer.values``.
    """
    body, names = _check_source(packer)
    lines = ["def write(args, stream, buffer, grid=None):", *body,
             f"    pack_into(buffer, 0{''.join(', ' + n for n in names)})"]
    write: Callable[..., None] = _generate(packer, "write", lines, {})
    return write


def core_launcher(packer: ArgumentPacker, core_launch: Callable[..., Any], kernel: Any) -> Fire:
    """A function ``fire(args, streams, geometry) -> None | Exception`` launching
    through cuda.core (the exception cuda.core raised, returned, when the launch fails).

    Checks ``args`` as ``packer.values`` does, then calls ``core_launch(streams[1],
    geometry[7], kernel, *values)`` (cuda.core's ``launch``; ``streams`` is ``(handle,
    cuda.core Stream)``, ``geometry`` a :class:`~specdsl._runtime.geometry.LaunchGeometry`
    ending with the ``LaunchConfig``). cuda.core packs a Python int as a pointer-sized
    ``intptr_t`` and the driver copies each parameter's own size from it
    (``cuLaunchKernel``'s ``kernelParams``), so an int already checked against a narrower
    ``.param`` arrives as its low bytes (CUDA hosts are little endian); 64-bit values at or
    above 2**63 are passed as their two's-complement equivalent, and floats as the int of
    their bit pattern. Requires ``packer.through_core``.

    Raises:
        LaunchError: as ``packer.values``; an argument's own error (its array interface)
            is never mistaken for a failed launch.
    """
    body, values = _core_source(packer)
    lines = ["def fire(args, streams, geometry):", "    stream = streams[0]",
             "    grid = geometry[:3]", *body,
             "    core_stream, config = streams[1], geometry[7]",
             "    try:",
             f"        core_launch(core_stream, config, kernel{values})",
             "    except Exception as exc:  # the launch failed: the caller reports it",
             "        return exc"]
    generated: Fire = _generate(packer, "fire", lines, _core_names(core_launch, kernel))
    return generated


def bound_core_launcher(packer: ArgumentPacker, core_launch: Callable[..., Any], kernel: Any,
                        streams: Streams, geometry: LaunchGeometry,
                        on_error: Callable[[Any, tuple[Any, ...]], None]) -> Callable[..., None]:
    """A function ``bound(*args)`` with the streams (``(handle, cuda.core Stream)``) and
    the checked ``geometry`` fixed (``Executor.bind``): checks as :func:`core_launcher`
    does, launches through cuda.core, and calls ``on_error(exception, args)`` when the
    launch fails.

    Raises:
        LaunchError: as ``packer.values``.
    """
    body, values = _core_source(packer)
    lines = ["def bound(*args):", *body,
             "    try:",
             f"        core_launch(core_stream, config, kernel{values})",
             "    except Exception as exc:",
             "        on_error(exc, args)"]
    generated: Callable[..., None] = _generate(packer, "bound", lines, dict(
        _core_names(core_launch, kernel), stream=streams.handle, core_stream=streams.core,
        config=geometry[7], grid=tuple(geometry[:3]), on_error=on_error))
    return generated


def _core_source(packer: ArgumentPacker) -> tuple[list[str], str]:
    """The check lines and ``", v0, v1, ..."``: the checked values as cuda.core takes them."""
    body, names = _check_source(packer, core=True)
    return body, "".join(", " + _core_value(param, name)
                         for param, name in zip(packer.signature.params, names, strict=True))


def _core_names(core_launch: Callable[..., Any], kernel: Any) -> dict[str, Any]:
    return dict(core_launch=core_launch, kernel=kernel, f16_bits=float_bits[16],
                f32_bits=float_bits[32], f64_bits=float_bits[64], wrap=wrap_u64)


def _core_value(param: Param, name: str) -> str:
    """The expression handing checked value ``name`` to cuda.core (see core_launcher):
    a float as the int of its bits; ints as they are (wrapped by the checks)."""
    return f"f{param.bits}_bits({name})" if param.kind == "f" else name


def driver_launcher(packer: ArgumentPacker, launch_kernel: Callable[..., Any],
                    function: int) -> Fire:
    """A function ``fire(args, streams, geometry) -> CUresult`` calling the driver.

    The launch path of kernels cuda.core cannot launch (``packer.through_core`` false).
    Checks and packs ``args`` as :func:`writer` does, into a parameter buffer of the
    calling thread's own (made by :func:`new_slot` on a thread's first launch, so threads
    never share one and need no lock), then calls ``launch_kernel(function, gx, gy, gz,
    bx, by, bz, shared_mem, stream, params, 0)`` (``cuLaunchKernel``'s signature) with
    ``geometry = (gx, gy, gz, bx, by, bz, shared_mem, ...)`` and ``stream = streams[0]``,
    the handle. One generated function, so a launch pays for one Python call on top of
    the driver's; the driver copies the parameters before it returns.

    Raises:
        LaunchError: as ``packer.values``.
    """
    lines = ["def fire(args, streams, geometry):", "    stream = streams[0]",
             "    grid = geometry[:3]", *_pack_source(packer),
             "    gx, gy, gz, bx, by, bz, smem = geometry[:7]",
             "    return launch_kernel(function, gx, gy, gz, bx, by, bz, smem, streams[0], "
             "address, 0)[0]"]
    generated: Fire = _generate(packer, "fire", lines,
                                _launch_names(packer, launch_kernel, function))
    return generated


def bound_driver_launcher(packer: ArgumentPacker, launch_kernel: Callable[..., Any],
                          function: int, stream: int, geometry: LaunchGeometry,
                          on_error: Callable[[Any, tuple[Any, ...]], None]
                          ) -> Callable[..., None]:
    """A function ``launch(*args)`` with the stream and geometry fixed (``Executor.bind``).

    Checks and packs as :func:`driver_launcher` does, in one generated function, and
    calls ``on_error(err, args)`` when the driver returns an error.

    Raises:
        LaunchError: as ``packer.values``.
    """
    gx, gy, gz, bx, by, bz, smem = geometry[:7]
    lines = ["def launch(*args):", *_pack_source(packer),
             f"    err = launch_kernel(function, {gx}, {gy}, {gz}, {bx}, {by}, {bz}, "
             f"{smem}, stream, address, 0)[0]",
             "    if err:",
             "        on_error(err, args)"]
    generated: Callable[..., None] = _generate(packer, "launch", lines, dict(
        _launch_names(packer, launch_kernel, function), stream=stream, grid=(gx, gy, gz),
        on_error=on_error))
    return generated


def _pack_source(packer: ArgumentPacker) -> list[str]:
    """Lines that check ``args``, then pack them into this thread's parameter buffer
    (``buffer``, its pointer array at ``address``), for the generated launchers."""
    body, names = _check_source(packer)
    return [*body,
            "    try:",
            "        buffer, address, _ = local.slot",
            "    except AttributeError:",
            "        buffer, address, _ = local.slot = new_slot()",
            f"    pack_into(buffer, 0{''.join(', ' + n for n in names)})"]


def _launch_names(packer: ArgumentPacker, launch_kernel: Callable[..., Any],
                  function: int) -> dict[str, Any]:
    return dict(launch_kernel=launch_kernel, function=function, local=threading.local(),
                new_slot=lambda: new_slot(packer))


def new_slot(packer: ArgumentPacker) -> tuple[bytearray, int, Any]:
    """A parameter buffer and its ``void*[]`` for ``cuLaunchKernel``'s ``kernelParams``.

    Returns:
        ``(buffer, address of the pointer array (0 without parameters), the ctypes
        array to keep alive)``; pointer ``i`` points at ``buffer[packer.offsets[i]]``,
        and a NULL pointer follows the last (as the compiled path lays them out: a tool
        reading the array finds its end), with 8 bytes to spare past the buffer's end.
    """
    buffer = bytearray(packer.size + 8)
    base = ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))
    pointers = (ctypes.c_void_p * (packer.count + 1))(
        *[base + offset for offset in packer.offsets], None)
    return buffer, (ctypes.addressof(pointers) if packer.count else 0), pointers


def _generate(packer: ArgumentPacker, name: str, lines: list[str], extra: dict[str, Any]) -> Any:
    """Compile ``lines`` (defining ``name``) with the packer's converters in scope.

    The source is registered in :mod:`linecache` under a file name unique to it (the
    SHA-256 of the text: equal sources share one entry, so binding in a loop adds none),
    as attrs does for the ``__init__`` it generates, so tracebacks show the lines.
    """
    namespace: dict[str, Any] = {f"c{i}": c for i, c in enumerate(packer.converters)}
    namespace.update({f"ok{c.position}": c.accepted for c in packer.declared})
    namespace.update(values=packer.values, pack_into=struct.Struct(packer.fmt).pack_into,
                     Buffer=buffer_type(), Tensor=tensor_type(), names=ELEMENT_NAMES,
                     cdiv=_cdiv, **extra)
    source = "\n".join(lines) + "\n"
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = f"<specdsl {name} {packer.signature.entry} {digest}>"
    exec(compile(source, filename, "exec"), namespace)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return namespace.pop(name)  # not kept in its own globals: no reference cycle


def _check_source(packer: ArgumentPacker, core: bool = False) -> tuple[list[str], list[str]]:
    """Python lines that check ``args`` and bind ``v0 .. vN`` (the packed values).

    What each parameter takes inline is
    :meth:`~specdsl._runtime.params.ArgumentPacker.inline_check`; the rest goes through
    its converter (``c0 .. cN``), which accepts, converts or explains a refusal. With
    ``core``, a 64-bit unsigned or pointer value the converter passes at or above 2**63 is
    wrapped to its two's-complement equivalent (same bits). A declared array read inline
    (a Buffer, a tensor of an accepted element type) binds ``n<i>``, its size in elements
    (``None``: a pointer int, unchecked; ``-1``: read by the converter); the last lines
    compare each with the count this launch touches (the grid is ``grid``), and hand any
    doubt to ``values``, which raises the refusal or accepts.
    """
    count, device_id = packer.count, packer.device_id
    names = [f"v{i}" for i in range(count)]
    if count:  # a wrong count fails the unpacking; values() explains it
        lines = ["    try:",
                 f"        {', '.join(f'a{i}' for i in range(count))}, = args",
                 "    except ValueError:",
                 "        values(args, stream)"]
    else:
        lines = ["    if args:",
                 "        values(args, stream)"]
    checks = {check.position: check for check in packer.declared}
    for i, param in enumerate(packer.signature.params):
        a, v = f"a{i}", f"v{i}"
        how, low, high, misaligned, largest = packer.inline_check(param, core)
        slow = f"wrap(c{i}({a}, stream))" if core and wide(param) else f"c{i}({a}, stream)"
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
            lines += _pointer_source(i, fast, slow, high, misaligned, device_id,
                                     checks.get(i))
        elif fast is not None:
            lines.append(f"    {v} = {a} if {fast} else {slow}")
        else:
            lines.append(f"    {v} = {slow}")
    for i, check in checks.items():
        lines += [f"    if n{i} is not None and not 0 <= {_extent_source(check.program)} "
                  f"<= n{i}:",
                  "        values(args, stream, grid)  # raises the refusal, or accepts"]
    return lines, names


def _pointer_source(i: int, fast: str | None, slow: str, high: int, misaligned: int,
                    device_id: int | None, check: Any) -> list[str]:
    """The lines reading pointer argument ``a<i>``: an int, a cuda.core Buffer or a
    contiguous torch tensor of this device inline (a declared array's element type
    checked, its size bound to ``n<i>``); anything else (host, pinned or managed memory, a
    closed Buffer, whose properties raise, misaligned, another device, another element
    type) takes the converter, which explains a refusal."""
    a, v, n = f"a{i}", f"v{i}", f"n{i}"
    if device_id is None:
        buffer_ok, tensor_ok = f"{a}.is_device_accessible", f"{a}.get_device() >= 0"
    else:
        buffer_ok = f"{a}.device_id == {device_id}"
        tensor_ok = f"{a}.get_device() == {device_id}"
    mask = -(high + 1) | misaligned
    if check is None:
        return [f"    if {fast}:",
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
                f"        if type({v}) is not int or not {v} or {v} & {mask}:",
                f"            {v} = {slow}"]
    return [f"    if {fast}:",
            f"        {v}, {n} = {a}, None",
            "    else:",
            "        try:",
            f"            if type({a}) is Buffer and {buffer_ok}:",
            f"                {v}, {n} = int({a}.handle), {a}.size // {check.size}",
            f"            elif type({a}) is Tensor and {tensor_ok} and {a}.is_contiguous() "
            f"and names.get({a}.dtype) in ok{i}:",
            f"                {v}, {n} = {a}.data_ptr(), {a}.numel()",
            "            else:",
            f"                {v} = 0",
            "        except Exception:",
            f"            {v} = 0",
            f"        if type({v}) is not int or not {v} or {v} & {mask}:",
            f"            {v}, {n} = {slow}, -1"]


def _extent_source(program: tuple[tuple[int, int], ...]) -> str:
    """A Python expression of an extent program (``ArrayCheck.program``): the element count
    this launch touches, from ``v<i>`` and ``grid``."""
    stack: list[str] = []
    for op, operand in program:
        if op == OP_CONST:
            stack.append(str(operand))
        elif op == OP_PARAM:
            stack.append(f"v{operand}")
        elif op == OP_GRID:
            stack.append(f"grid[{operand}]")
        else:
            right, left = stack.pop(), stack.pop()
            stack.append(f"({left} * {right})" if op == OP_MUL else f"cdiv({left}, {right})")
    return stack[0]


def _cdiv(left: int, right: int) -> int:
    return -(-left // right) if right else 0
