"""Every built-in kernel on the GPU against its float64 NumPy reference (``specdsl run``).

:func:`run_builtins` returns one :class:`KernelRun` per kernel; the command line prints
them. :func:`run_case` drives one :class:`~specdsl.kernels.case.KernelCase` with cuda.core
and NumPy alone (no torch): inputs travel through pinned host buffers, outputs are
poisoned with 0xFF bytes (a NaN in every float format) so an element the kernel never
writes cannot pass, and the result is ``{output name: ||out - ref|| / ||ref||}``.
"""

from __future__ import annotations

import ctypes
import importlib
import math
from typing import Any

import attrs

from .._runtime.cudacore import load as load_cuda_core
from ..errors import LaunchError

__all__ = ["run_case", "builtin_cases", "KernelRun", "run_builtins"]

# 0xFF in every byte is a NaN in f16, bf16, f32, f64 and in fp8 E4M3 (S.1111.111).
POISON = 0xFF


def _host_array(buffer: Any, nbytes: int) -> Any:
    """A NumPy ``uint8`` view of a pinned (host-accessible) cuda.core Buffer."""
    import numpy as np

    if nbytes == 0:
        return np.empty(0, np.uint8)
    raw = (ctypes.c_uint8 * nbytes).from_address(int(buffer.handle))
    return np.frombuffer(memoryview(raw), dtype=np.uint8)


def run_case(executor: Any, case: Any, rng: Any = None) -> dict[str, float]:
    """Run ``case`` on ``executor``'s device and compare each output with its reference.

    Arrays in ``case.args`` are copied to the device; each ``Output`` gets a device
    buffer filled with 0xFF bytes (or, for an in-place argument, its ``initial`` data);
    NumPy scalars are passed by value. After the launch the outputs are copied back,
    decoded to float64 (bf16 and fp8 through :func:`~specdsl.kernels.case.from_bits`)
    and compared.

    Args:
        executor: an :class:`~specdsl._runtime.executor.Executor` with a device.
        case: the :class:`~specdsl.kernels.case.KernelCase` to run.
        rng: unused; accepted so callers can pass the generator that built ``case``.

    Returns:
        ``{output name: relative L2 error}`` (``inf`` where the output holds NaN/inf).

    Raises:
        LaunchError: a compile-only executor, or arguments the kernel refuses.
    """
    import numpy as np
    load_cuda_core()
    from cuda.core import LegacyPinnedMemoryResource

    from ..kernels.case import Output, from_bits, relative_error

    device = executor.device
    if device is None:
        raise LaunchError("run_case needs an executor with a device (not compile-only)")
    stream = device.create_stream()
    pinned = LegacyPinnedMemoryResource()
    keep: list[Any] = []
    outputs: list[tuple[str, Any, Any, Any, Output]] = []
    launch_args: list[Any] = []
    try:
        for name, value in case.args:
            if isinstance(value, Output):
                nbytes = math.prod(value.shape) * value.dtype.size
                device_buffer = device.allocate(max(nbytes, 1), stream=stream)
                host_buffer = pinned.allocate(max(nbytes, 1))
                host = _host_array(host_buffer, nbytes)
                if value.initial is not None:
                    initial = np.ascontiguousarray(value.initial)
                    if initial.nbytes != nbytes:
                        raise ValueError(f"{name}: initial data holds {initial.nbytes} bytes, "
                                         f"the output {nbytes}")
                    host[:] = initial.reshape(-1).view(np.uint8)
                else:
                    host[:] = POISON
                device_buffer.copy_from(host_buffer, stream=stream)
                keep += [device_buffer, host_buffer]
                outputs.append((name, device_buffer, host_buffer, host, value))
                launch_args.append(device_buffer)
            elif isinstance(value, np.ndarray):
                data = np.ascontiguousarray(value)
                device_buffer = device.allocate(max(data.nbytes, 1), stream=stream)
                host_buffer = pinned.allocate(max(data.nbytes, 1))
                _host_array(host_buffer, data.nbytes)[:] = data.reshape(-1).view(np.uint8)
                device_buffer.copy_from(host_buffer, stream=stream)
                keep += [device_buffer, host_buffer]
                launch_args.append(device_buffer)
            else:
                launch_args.append(value)
        executor.launch(case.spec, *launch_args, grid=case.grid, block=case.block,
                        shared_mem=case.shared_mem, stream=stream)
        for _, device_buffer, host_buffer, _, _ in outputs:
            host_buffer.copy_from(device_buffer, stream=stream)
        stream.sync()
        errors = {}
        for name, _, _, host, output in outputs:
            stored = host.view(np.dtype(output.dtype.numpy)).reshape(output.shape).copy()
            try:
                decoded = from_bits(stored, output.dtype)
            except ValueError:  # integer outputs
                decoded = stored.astype(np.float64)
            if name in case.expected:
                errors[name] = relative_error(decoded, case.expected[name])
        return errors
    finally:
        stream.sync()
        for buffer in keep:
            buffer.close()
        stream.close()


def builtin_cases(rng: Any) -> list[tuple[str, Any, str]]:
    """``(kernel name, case, problem)`` for each built-in kernel's representative request.

    The request is :func:`specdsl._review.variants.representative_request` (the default
    request, or the first of the class's ``variants``). When no case can be made (no
    ``example()``, no default request) ``case`` is ``None`` and ``problem`` says why.
    """
    from .. import kernels
    from .variants import representative_request

    cases = []
    for cls in kernels.ALL:
        module = importlib.import_module(cls.__module__)
        example = getattr(module, "example", None)
        if example is None:
            cases.append((cls.__name__, None, f"{module.__name__} has no example()"))
            continue
        try:
            cases.append((cls.__name__, example(representative_request(cls), rng), ""))
        except Exception as exc:  # one kernel's broken example hides no other kernel
            cases.append((cls.__name__, None, f"{type(exc).__name__}: {exc}"))
    return cases


def _shape(case: Any) -> str:
    from ..kernels.case import Output

    for _, value in case.args:
        shape = value.shape if isinstance(value, Output) else getattr(value, "shape", None)
        if shape:
            return "x".join(str(n) for n in shape)
    return "-"


@attrs.frozen
class KernelRun:
    """One built-in kernel run by :func:`run_builtins`.

    Attributes:
        name: the kernel's class name.
        request: the request run, or ``None`` when no case could be made.
        shape: the first array argument's shape, as ``"16x4096"`` (``"-"`` if none).
        errors: ``{output name: relative L2 error}`` (empty when it did not run).
        tolerance: the case's tolerance on each error, or ``None``.
        problem: why it did not run (``"TypeError: ..."``), or ``""``.
    """

    name: str
    request: Any
    shape: str
    errors: dict[str, float]
    tolerance: float | None
    problem: str = ""

    @property
    def passed(self) -> bool:
        """True when it ran and every output is within the tolerance."""
        return (not self.problem and bool(self.errors) and self.tolerance is not None
                and max(self.errors.values()) <= self.tolerance)


def run_builtins(executor: Any, rng: Any) -> list[KernelRun]:
    """Run every built-in kernel's case (:func:`builtin_cases`) on ``executor``'s device.

    A kernel that cannot be run is reported (``problem``) and the others still run.
    """
    runs = []
    for name, case, problem in builtin_cases(rng):
        if case is None:
            runs.append(KernelRun(name, None, "-", {}, None, problem))
            continue
        try:
            errors = run_case(executor, case, rng)
        except Exception as exc:  # report and go on: one broken kernel hides no others
            runs.append(KernelRun(name, case.spec, _shape(case), {}, case.tolerance,
                                  f"{type(exc).__name__}: {exc}"))
            continue
        runs.append(KernelRun(name, case.spec, _shape(case), errors, case.tolerance))
    return runs
