"""Kernels on the GPU against their float64 NumPy references (``specdsl run``).

A request becomes a :class:`~specdsl.kernels.case.KernelCase` through its spec module's
``example(spec, rng, count)`` (:func:`example_case`; the count, the example's third
parameter, is ``tokens``, ``rows`` or ``n`` in the built-ins). :func:`builtin_cases` makes
each built-in kernel's representative case, :func:`request_cases` the cases of named
requests, and :func:`run_cases` runs them, one :class:`KernelRun` each; the command line
prints them. :func:`run_case` drives one case with cuda.core and NumPy alone (no torch):
inputs travel through pinned host buffers, outputs are poisoned with 0xFF bytes (a NaN in
every float format) so an element the kernel never writes cannot pass, and the result is
``{output name: ||out - ref|| / ||ref||}``.
"""

from __future__ import annotations

import ctypes
import importlib
import inspect
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .._runtime.cudacore import load as load_cuda_core
from ..errors import LaunchError, SpecdslError, SpecError

__all__ = ["run_case", "example_function", "example_case", "builtin_cases", "request_cases",
           "KernelRun", "run_cases", "run_builtins"]

#: ``(kernel name, case or None, why there is no case or "")``, as :func:`run_cases` takes.
Case = tuple[str, Any, str]

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


def example_function(cls: type) -> Callable[..., Any]:
    """The ``example(spec, rng, count)`` function of the module that defines ``cls``.

    Raises:
        SpecError: the module has no ``example`` function (the message names the class,
            the module and what ``specdsl run`` needs).
    """
    module = sys.modules.get(cls.__module__) or importlib.import_module(cls.__module__)
    example: Callable[..., Any] | None = getattr(module, "example", None)
    if not callable(example):
        raise SpecError(f"{cls.__qualname__} cannot be run: specdsl run needs an "
                        f"example(spec, rng, tokens) function in its module "
                        f"{module.__name__!r}, returning a specdsl.kernels.case.KernelCase "
                        + ("(the module has none)" if example is None else
                           f"(its example is of type {type(example).__name__}, not a function)"))
    return example


def _count_parameter(signature: inspect.Signature | None) -> inspect.Parameter | None:
    """An example's count: its parameter after ``spec`` and ``rng`` (``tokens``, ``rows``,
    ``n``, whatever its name), or ``None`` when there is none."""
    params = [] if signature is None else list(signature.parameters.values())
    if len(params) < 3 or params[2].kind in (inspect.Parameter.VAR_POSITIONAL,
                                             inspect.Parameter.VAR_KEYWORD):
        return None
    return params[2]


def example_case(spec: Any, rng: Any, count: int | None = None) -> Any:
    """``spec``'s case from its module's ``example(spec, rng, count)``.

    Args:
        spec: the request.
        rng: a NumPy ``Generator`` for the inputs.
        count: the example's count (tokens or rows; VectorAdd: elements), passed as its
            third parameter whatever its name; ``None``: the example's own default.

    Returns:
        The example's :class:`~specdsl.kernels.case.KernelCase`.

    Raises:
        SpecError: the module has no ``example`` (:func:`example_function`), or one that
            cannot be called as ``example(spec, rng)`` (or, with ``count``, as
            ``example(spec, rng, count)``).
        TypeError: the example returned something other than a case.
    """
    cls = type(spec)
    example = example_function(cls)
    where = f"{cls.__qualname__}'s example() (in module {cls.__module__!r})"
    try:
        signature: inspect.Signature | None = inspect.signature(example)
    except (TypeError, ValueError):  # none to read (a builtin): the call itself will say
        signature = None
    args: list[Any] = [spec, rng]
    kwargs: dict[str, Any] = {}
    if count is not None:
        param = _count_parameter(signature)
        if param is None:
            raise SpecError(f"{where} takes no count (a third parameter after spec and rng, "
                            f"such as tokens): give no count (no --tokens)")
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[param.name] = count
        else:
            args.append(count)
    try:
        if signature is not None:
            signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise SpecError(f"{where} cannot be called as example(spec, rng"
                        f"{', tokens' if count is not None else ''}): {exc}") from None
    case = example(*args, **kwargs)
    if not (hasattr(case, "args") and hasattr(case, "expected")):  # a KernelCase's
        raise TypeError(f"{where} returned {type(case).__name__}, not a KernelCase")
    return case


def builtin_cases(rng: Any, count: int | None = None) -> list[Case]:
    """``(kernel name, case, problem)`` for each built-in kernel's representative request.

    The request is :func:`specdsl._review.variants.representative_request` (the default
    request, or the first of the class's ``variants``), its case made by
    :func:`example_case` with ``count``. When no case can be made (no ``example()``, no
    default request, an example that raises) ``case`` is ``None`` and ``problem`` says why.
    """
    from .. import kernels
    from .variants import representative_request

    cases: list[Case] = []
    for cls in kernels.ALL:
        module = importlib.import_module(cls.__module__)
        if getattr(module, "example", None) is None:
            cases.append((cls.__name__, None, f"{module.__name__} has no example()"))
            continue
        try:
            cases.append((cls.__name__, example_case(representative_request(cls), rng, count),
                          ""))
        except Exception as exc:  # one kernel's broken example hides no other kernel
            cases.append((cls.__name__, None, f"{type(exc).__name__}: {exc}"))
    return cases


def request_cases(requests: Sequence[Any], rng: Any, count: int | None = None) -> list[Case]:
    """``(class name, case, problem)`` for each request, through :func:`example_case`.

    An example that raises anything but a specdsl error is a ``problem`` (the run goes
    on with the other requests); a specdsl error is the caller's.

    Raises:
        SpecdslError: a request whose module has no usable ``example``, or whose example
            refuses the request or the count (the first such request's).
    """
    cases: list[Case] = []
    for request in requests:
        name = type(request).__name__
        try:
            cases.append((name, example_case(request, rng, count), ""))
        except SpecdslError:
            raise
        except Exception as exc:  # a broken example hides no other request
            cases.append((name, None, f"{type(exc).__name__}: {exc}"))
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


def run_cases(executor: Any, cases: Sequence[Case]) -> list[KernelRun]:
    """Run each case (:func:`builtin_cases`, :func:`request_cases`) on ``executor``'s device.

    A case that cannot be made or run is reported (``problem``) and the others still run.
    """
    runs = []
    for name, case, problem in cases:
        if case is None:
            runs.append(KernelRun(name, None, "-", {}, None, problem))
            continue
        try:
            errors = run_case(executor, case)
        except Exception as exc:  # report and go on: one broken kernel hides no others
            runs.append(KernelRun(name, case.spec, _shape(case), {}, case.tolerance,
                                  f"{type(exc).__name__}: {exc}"))
            continue
        runs.append(KernelRun(name, case.spec, _shape(case), errors, case.tolerance))
    return runs


def run_builtins(executor: Any, rng: Any, count: int | None = None) -> list[KernelRun]:
    """Run every built-in kernel's case (:func:`builtin_cases`) on ``executor``'s device.

    A kernel that cannot be run is reported (``problem``) and the others still run.
    """
    return run_cases(executor, builtin_cases(rng, count))
