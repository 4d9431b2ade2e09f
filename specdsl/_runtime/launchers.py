"""Generated launchers: one function per kernel that checks its arguments and launches it.

Built from an :class:`~specdsl._runtime.params.ArgumentPacker`, as attrs builds
``__init__``: the source is written for the kernel's signature, compiled once and
registered in :mod:`linecache` under a unique file name, so a traceback through a
launcher shows its lines. Plain ints, floats, cuda.core ``Buffer``\\ s and torch tensors
are checked inline; anything else goes through the packer's converters, so the errors are
the same on every path. Where the compiled launch path is built
(:mod:`specdsl._runtime._speedups`), the cuda.core launchers are its ``CoreLaunch``
objects instead, built from :meth:`~specdsl._runtime.params.ArgumentPacker.core_plan`.

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
from types import ModuleType
from typing import Any

from .geometry import LaunchGeometry
from .params import (
    INLINE_FLOAT,
    INLINE_INT,
    INLINE_POINTER,
    ArgumentPacker,
    float_bits,
    wide,
    wrap_u64,
)
from .readers import buffer_type, tensor_type
from .signature import Param
from .speedups import speedups
from .streams import Streams

__all__ = ["writer", "core_launcher", "bound_core_launcher", "driver_launcher",
           "bound_driver_launcher", "new_slot", "Fire"]

#: ``fire(args, streams, geometry) -> None | error``: a module's launcher (see
#: :func:`core_launcher` and :func:`driver_launcher`).
Fire = Callable[[tuple[Any, ...], Streams, LaunchGeometry], Any]


def _compiled(compiled: ModuleType | bool | None) -> ModuleType | None:
    """The compiled launch path to build with: ``True`` lets :func:`speedups` decide."""
    return speedups() if compiled is True else compiled or None


def writer(packer: ArgumentPacker) -> Callable[[tuple[Any, ...], int, Any], None]:
    """A function ``write(args, stream, buffer)`` that checks ``args`` and packs them.

    It does what :meth:`~specdsl._runtime.params.ArgumentPacker.values` does, then
    ``struct.pack_into(packer.fmt, buffer, 0, ...)``, as one generated function.

    Raises:
        LaunchError: as ``packer.values``.
    """
    body, names = _check_source(packer)
    lines = ["def write(args, stream, buffer):", *body,
             f"    pack_into(buffer, 0{''.join(', ' + n for n in names)})"]
    write: Callable[[tuple[Any, ...], int, Any], None] = _generate(packer, "write", lines, {})
    return write


def core_launcher(packer: ArgumentPacker, core_launch: Callable[..., Any], kernel: Any, *,
                  compiled: ModuleType | bool | None = True) -> Fire:
    """A function ``fire(args, streams, geometry) -> None | Exception`` launching
    through cuda.core (the exception cuda.core raised, returned, when the launch fails).

    Checks ``args`` as ``packer.values`` does, then calls ``core_launch(streams[1],
    geometry[7], kernel, *values)`` (cuda.core's ``launch``; ``streams`` is ``(handle,
    cuda.core Stream)``, ``geometry`` ends with the ``LaunchConfig``). cuda.core packs
    a Python int as a pointer-sized ``intptr_t`` and the driver copies each parameter's
    own size from it (``cuLaunchKernel``'s ``kernelParams``), so an int already checked
    against a narrower ``.param`` arrives as its low bytes (CUDA hosts are little
    endian); 64-bit values at or above 2**63 are passed as their two's-complement
    equivalent, and floats as the int of their bit pattern. Requires
    ``packer.through_core``.

    Args:
        compiled: the compiled launch path to build with (:mod:`specdsl._runtime._speedups`),
            ``None`` or ``False`` for a generated Python function, ``True`` (the default)
            to let :func:`~specdsl._runtime.speedups.speedups` decide.

    Raises:
        LaunchError: as ``packer.values``; an argument's own error (its array interface)
            is never mistaken for a failed launch.
    """
    built = _compiled(compiled)
    if built is not None:
        fire: Fire = _compiled_launch(built, packer, core_launch, kernel)
        return fire
    body, values = _core_source(packer)
    lines = ["def fire(args, streams, geometry):", "    stream = streams[0]", *body,
             "    core_stream, config = streams[1], geometry[7]",
             "    try:",
             f"        core_launch(core_stream, config, kernel{values})",
             "    except Exception as exc:  # the launch failed: the caller reports it",
             "        return exc"]
    generated: Fire = _generate(packer, "fire", lines, _core_names(core_launch, kernel))
    return generated


def bound_core_launcher(packer: ArgumentPacker, core_launch: Callable[..., Any], kernel: Any,
                        streams: Streams, config: Any,
                        on_error: Callable[[Any, tuple[Any, ...]], None], *,
                        compiled: ModuleType | bool | None = True) -> Callable[..., None]:
    """A function ``bound(*args)`` with the streams (``(handle, cuda.core Stream)``) and
    ``LaunchConfig`` fixed (``Executor.bind``): checks as :func:`core_launcher` does,
    launches through cuda.core, and calls ``on_error(exception, args)`` when the launch
    fails.

    Raises:
        LaunchError: as ``packer.values``.
    """
    built = _compiled(compiled)
    if built is not None:
        launch = _compiled_launch(built, packer, core_launch, kernel)
        bound: Callable[..., None] = built.BoundCoreLaunch(launch, streams, config, on_error)
        return bound
    body, values = _core_source(packer)
    lines = ["def bound(*args):", *body,
             "    try:",
             f"        core_launch(core_stream, config, kernel{values})",
             "    except Exception as exc:",
             "        on_error(exc, args)"]
    generated: Callable[..., None] = _generate(packer, "bound", lines, dict(
        _core_names(core_launch, kernel), stream=streams.handle, core_stream=streams.core,
        config=config, on_error=on_error))
    return generated


def _compiled_launch(built: ModuleType, packer: ArgumentPacker, core_launch: Callable[..., Any],
                     kernel: Any) -> Any:
    """The compiled twin of :func:`core_launcher`'s function (``CoreLaunch``)."""
    return built.CoreLaunch(packer.core_plan(), packer.values, core_launch, kernel,
                            buffer_type(), tensor_type(), packer.device_id)


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
             *_pack_source(packer),
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
        _launch_names(packer, launch_kernel, function), stream=stream, on_error=on_error))
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
        array to keep alive)``; pointer ``i`` points at ``buffer[packer.offsets[i]]``.
    """
    buffer = bytearray(max(packer.size, 8))
    base = ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))
    pointers = (ctypes.c_void_p * max(packer.count, 1))(
        *([base + offset for offset in packer.offsets] or [0]))
    return buffer, (ctypes.addressof(pointers) if packer.count else 0), pointers


def _generate(packer: ArgumentPacker, name: str, lines: list[str], extra: dict[str, Any]) -> Any:
    """Compile ``lines`` (defining ``name``) with the packer's converters in scope.

    The source is registered in :mod:`linecache` under a file name unique to it (the
    SHA-256 of the text: equal sources share one entry, so binding in a loop adds none),
    as attrs does for the ``__init__`` it generates, so tracebacks show the lines.
    """
    namespace: dict[str, Any] = {f"c{i}": c for i, c in enumerate(packer.converters)}
    namespace.update(values=packer.values, pack_into=struct.Struct(packer.fmt).pack_into,
                     Buffer=buffer_type(), Tensor=tensor_type(), **extra)
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
    wrapped to its two's-complement equivalent (same bits).
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
            # a cuda.core Buffer or a contiguous torch tensor of this device is read
            # inline; anything else (host, pinned or managed memory, a closed Buffer,
            # whose properties raise, misaligned, another device) takes the converter,
            # which explains a refusal
            if device_id is None:
                buffer_ok, tensor_ok = f"{a}.is_device_accessible", f"{a}.get_device() >= 0"
            else:
                buffer_ok = f"{a}.device_id == {device_id}"
                tensor_ok = f"{a}.get_device() == {device_id}"
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
