"""Launch geometry: grid, block and dynamic shared memory, checked against device limits.

:func:`check_geometry` checks what a launch was given; a checked geometry reaches the
launchers as a :class:`LaunchGeometry`, and a module remembers the last one it launched
with, with the objects it was given, as a :class:`LastGeometry`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import attrs

from .._spec.fields import is_bool_like
from ..errors import LaunchError
from .params import describe, is_int

__all__ = ["DeviceLimits", "Geometry", "LaunchGeometry", "LastGeometry", "NO_GEOMETRY",
           "check_geometry", "exact_dims"]


class LaunchGeometry(NamedTuple):
    """A checked geometry as the launchers take it: the grid and block extents, dynamic
    shared memory in bytes, and cuda.core's ``LaunchConfig`` of them (``None`` for a
    kernel launched through ``cuLaunchKernel``)."""

    gx: int
    gy: int
    gz: int
    bx: int
    by: int
    bz: int
    shared_mem: int
    config: Any


class LastGeometry(NamedTuple):
    """A module's last launch geometry: ``grid``, ``block`` and ``shared_mem`` as given
    (immutable objects, so the same objects mean the same values) and ``checked``."""

    grid: Any
    block: Any
    shared_mem: Any
    checked: LaunchGeometry


#: A module's last geometry before its first launch: objects no caller can pass (so its
#: all-zero geometry is never launched).
NO_GEOMETRY = LastGeometry(object(), object(), object(), LaunchGeometry(0, 0, 0, 0, 0, 0, 0, None))


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
    items = (value,) if is_int(value) or is_bool_like(value) else value
    if not isinstance(items, (tuple, list)) or not 1 <= len(items) <= 3:
        raise LaunchError(f"{label} must be a positive int or a tuple of 1 to 3 positive ints "
                          f"(got {describe(value)})")
    out = []
    for axis, item in zip("xyz", items, strict=False):
        if not is_int(item):
            raise LaunchError(f"{label}.{axis} must be an int (got {describe(item)})")
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
    for axis, extent, top in zip("xyz", g, limits.max_grid, strict=True):
        if extent > top:
            raise LaunchError(f"{entry}: grid.{axis} = {extent} exceeds the device's {top}")
    c = _dims(f"{entry}: cluster", cluster)
    if any(extent % size for extent, size in zip(g, c, strict=True)):
        raise LaunchError(f"{entry}: grid {g} is not a whole number of the kernel's clusters "
                          f"of {c} CTAs (.reqnctapercluster): each grid extent must be a "
                          f"multiple of the cluster's (a built-in spec's launch_dims gives one)")
    for axis, extent, top in zip("xyz", b, limits.max_block, strict=True):
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
    if not is_int(shared_mem):
        raise LaunchError(f"{entry}: shared_mem must be an int number of bytes "
                          f"(got {describe(shared_mem)})")
    shared = int(shared_mem)
    if shared < 0:
        raise LaunchError(f"{entry}: shared_mem must be >= 0 bytes (got {shared})")
    if static_shared + shared > limits.shared_per_block_optin:
        raise LaunchError(
            f"{entry}: {shared} bytes of dynamic shared memory plus {static_shared} static "
            f"exceed the device's opt-in limit of {limits.shared_per_block_optin} bytes per CTA")
    return Geometry(g, b, shared)


def exact_dims(value: Any) -> tuple[int, int, int] | None:
    """``value`` as a 3-tuple if it is exactly ints (no bools or floats), else ``None``:
    the key of a geometry already checked (anything else takes :func:`check_geometry`)."""
    if type(value) is tuple:
        if len(value) == 3:
            x, y, z = value
            if type(x) is int and type(y) is int and type(z) is int:
                return value
            return None
        if 0 < len(value) < 3 and all(type(v) is int for v in value):
            return (value + (1, 1))[:3]
        return None  # empty, more than 3 dims, or not ints: the full check explains
    if type(value) is int:
        return (value, 1, 1)
    return None
