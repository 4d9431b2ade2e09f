"""Launching on one device: the launch path in Python, and the slow paths the compiled one calls.

:class:`Launcher` holds what a launch needs (the module cache, the driver, the device's
limits and default stream) and offers two kinds of methods:

* the launch itself, :meth:`Launcher.launch` and :meth:`Launcher.bind`: the plain-Python
  path, and the reference the compiled one (``LaunchPath`` in
  :mod:`specdsl._runtime._speedups`) must match;
* the slow paths, each returning a named tuple: :meth:`Launcher.lookup` (a request's
  module, proven while the checking switch is on: :class:`LastLaunch`),
  :attr:`Launcher.streams` (a stream object: :class:`~specdsl._runtime.streams.Streams`),
  :meth:`Launcher.geometry` (a checked geometry:
  :class:`~specdsl._runtime.geometry.LastGeometry`) and :meth:`Launcher.failed` (a failed
  launch, reported). The compiled path calls only these.

A launch whose request, key and geometry are those of the last one takes none of the slow
paths: it compares the objects it was given with the remembered ones and calls the
module's launcher (:mod:`specdsl._runtime.launchers`). :class:`KernelLoader` makes that
launcher when a module is built.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple, NoReturn, cast

from .._proof.switch import checking_enabled, proof_suspended
from .._spec.decorator import spec_info
from .._spec.target import Target
from ..errors import LaunchError
from .arraychecks import ELEMENT_NAMES
from .driver import Driver
from .geometry import (
    DeviceLimits,
    Geometry,
    LastGeometry,
    LaunchGeometry,
    check_geometry,
    exact_dims,
)
from .launchers import (
    bound_core_launcher,
    bound_driver_launcher,
    core_launcher,
    driver_launcher,
)
from .modules import Module, ModuleCache
from .params import ArgumentPacker
from .readers import buffer_type, tensor_type
from .streams import TORCH_CURRENT_STREAM, StreamResolver, Streams, torch_current_stream

__all__ = ["Launcher", "CompileOnly", "KernelLoader", "LastLaunch", "NO_LAUNCH"]

# Bound on the (request, key) -> module memo: requests differing only in launch fields
# each take a slot; past this many the memo starts over (modules stay cached).
_MEMO_LIMIT = 65536
# Bounds on a module's checked geometries and launch configurations.
_GEOMETRY_LIMIT = 1024


class LastLaunch(NamedTuple):
    """The request a launch took, and its module: what the next launch compares with.

    Attributes:
        spec, key: the request and the ``key=`` it was launched with.
        module: its module.
        proven: whether hits need no proof (a derived key, or a hand-written key proven
            while checking was on).
    """

    spec: Any
    key: Any
    module: Module
    proven: bool


_NOTHING = object()
#: Before the first launch: a request no caller can pass (so its module is never read).
NO_LAUNCH = LastLaunch(_NOTHING, _NOTHING, cast(Module, None), False)


class KernelLoader:
    """Arms a built module for launches: loads its kernel and makes its launcher.

    The launcher checks every argument against the ``.entry`` signature and the request's
    array declarations (:attr:`Module.arrays <specdsl._runtime.modules.Module>`, planned
    when the module was built, before it reaches here). It is the compiled
    ``DriverLaunch`` (checks, packing and ``cuLaunchKernel`` in C) where the compiled path
    is built and the driver gives ``cuLaunchKernel``'s address, else a generated Python
    launcher: through cuda.core's ``launch``, or ``cuLaunchKernel`` for kernels with
    ``.b8`` aggregate parameters, which cuda.core has no argument type for.

    Args:
        driver: loads the cubin; its launch functions are what the launcher calls.
        device_id: the device arrays must live on.
        compiled: the compiled launch path to build launchers with, or ``None``.
    """

    def __init__(self, driver: Driver, device_id: int, compiled: ModuleType | None) -> None:
        self.driver, self.device_id, self.compiled = driver, device_id, compiled

    def __call__(self, module: Module) -> None:
        loaded = self.driver.load(module.cubin, module.signature.entry)
        module.kernel, module.function = loaded.kernel, loaded.function
        module.kernel_threads = loaded.max_threads_per_block
        module.static_shared, module.cluster = loaded.static_shared, loaded.cluster
        packer = module.packer = ArgumentPacker(module.signature, device_id=self.device_id,
                                                arrays=module.arrays)
        core_launch, address = self.driver.core_launch, self.driver.launch_kernel_address
        if self.compiled is not None and address:
            module.fire = self.compiled.DriverLaunch(
                packer.driver_plan(), packer.values, packer.size, address, module.function,
                self.driver.result, buffer_type(), tensor_type(), ELEMENT_NAMES,
                self.device_id)
        elif packer.through_core and core_launch is not None:
            module.through_core = True
            module.fire = core_launcher(packer, core_launch, module.kernel)
        else:
            module.fire = driver_launcher(packer, self.driver.launch_kernel, module.function)


class Launcher:
    """Launches the modules of one executor (see the module docstring).

    Args:
        modules: the executor's module cache.
        driver: the driver seam.
        device_id: the device launched on.
        limits: the device's launch limits.
        default_streams: its default stream.
        compiled: the compiled launch path, for :meth:`bind`'s launchers; or ``None``.

    Attributes:
        hits: launches and binds that found their module in memory here (counted without
            a lock: concurrent launches can undercount slightly).
        streams: ``streams(stream) -> Streams``: a stream object checked against the
            device (:meth:`~specdsl._runtime.streams.StreamResolver.resolve`).
    """

    def __init__(self, modules: ModuleCache, driver: Driver, device_id: int,
                 limits: DeviceLimits, default_streams: Streams,
                 compiled: ModuleType | None) -> None:
        self.modules = modules
        self.driver = driver
        self.device_id = device_id
        self.limits = limits
        self.default_streams = default_streams
        self.compiled = compiled
        self.hits = 0
        self._memo: dict[tuple[Any, Any], tuple[Module, bool]] = {}
        self._last = NO_LAUNCH  # replaced as one object
        self.streams: Callable[[Any], Streams] = StreamResolver(device_id, driver).resolve

    def launch(self, spec: Any, *args: Any, grid: Any, block: Any, stream: Any = None,
               shared_mem: int = 0, key: str | None = None) -> None:
        """:meth:`specdsl.Executor.launch` on the plain-Python path (see there)."""
        last = self._last
        if last[0] is spec and last[1] is key and (
                last[3] or not checking_enabled() or proof_suspended()):
            module = last[2]
            self.hits += 1
        else:
            self._last = last = self.lookup(spec, key)
            module = last[2]
        streams = self.default_streams if stream is None else self.streams(stream)
        geometry = module.last_geometry
        if not (geometry[0] is grid and geometry[1] is block and geometry[2] is shared_mem):
            geometry = self.geometry(module, grid, block, shared_mem)
        err = module.fire(args, streams, geometry[3])
        if err:  # cuda.core's exception, or the driver path's CUresult (CUDA_SUCCESS is 0)
            self.failed(err, module, geometry[3], streams, args, spec)

    def bind(self, spec: Any, *, grid: Any, block: Any, stream: Any = None,
             shared_mem: int = 0, key: str | None = None) -> Callable[..., None]:
        """:meth:`specdsl.Executor.bind` (see there)."""
        module, proven = self._find(spec, key)
        self._last = LastLaunch(spec, key, module, proven)
        checked = self.geometry(module, grid, block, shared_mem).checked
        streams = self.default_streams if stream is None else self.streams(stream)
        packer, driver = module.packer, self.driver
        if packer is None:  # the executor's builder loads every module it builds
            raise LaunchError(f"{module.signature.entry}: the module is not loaded on a device")

        def on_error(err: Any, args: tuple[Any, ...]) -> None:
            self.failed(err, module, checked, self.streams(stream) if stream is
                        TORCH_CURRENT_STREAM else streams, args, spec)

        bound: Any  # a generated function or a compiled BoundLaunch: attributes are set
        compiled = self.compiled
        if compiled is not None and type(module.fire) is compiled.DriverLaunch:
            current = torch_current_stream() if stream is TORCH_CURRENT_STREAM else None
            bound = compiled.BoundLaunch(module.fire, streams.handle, checked, on_error,
                                         current, self.device_id)
        elif stream is TORCH_CURRENT_STREAM:  # read on each call, as the compiled one does
            bound = _CurrentStreamLaunch(module.fire, self.streams, checked, on_error)
        elif module.through_core and driver.core_launch is not None:
            bound = bound_core_launcher(packer, driver.core_launch, module.kernel, streams,
                                        checked, on_error)
        else:
            bound = bound_driver_launcher(packer, driver.launch_kernel, module.function,
                                          streams.handle, checked, on_error)
        bound.module, bound.stream = module, stream  # the stream object stays alive
        bound.grid, bound.block, bound.shared_mem = checked[:3], checked[3:6], checked[6]
        launcher: Callable[..., None] = bound
        return launcher

    # -- the slow paths --------------------------------------------------------------------

    def lookup(self, spec: Any, key: str | None) -> LastLaunch:
        """The module of ``spec`` under ``key``, built on its first launch, and whether its
        later hits need no proof; a hand-written key is proven here while checking is on.

        Raises:
            LaunchError: a compile-only executor, or an unhashable request.
            ConfigError, NotASpecError: a ``key`` that is no non-blank str, or a ``spec``
                that is no request (as ``Executor.ensure_module``).
            IncompleteKeyError, RenderError, CompileError: as ``Executor.ensure_module``.
        """
        return LastLaunch(spec, key, *self._find(spec, key))

    def _find(self, spec: Any, key: str | None) -> tuple[Module, bool]:
        try:
            found = self._memo.get((spec, key))
            hashable = True
        except TypeError:
            found, hashable = None, False
        if not hashable:  # ensure_module's checks name the argument, else say it here
            self.modules.module_key(spec, key)
            raise LaunchError(f"spec must be a kernel spec request and key a str "
                              f"(got {type(spec).__qualname__}, {key!r})")
        if found is None:  # raised outside an except block: a clean traceback
            return self._remember(spec, key)
        module, proven = found
        self.hits += 1
        if not proven and checking_enabled() and not proof_suspended():
            return self._remember(spec, key)
        return module, proven

    def _remember(self, spec: Any, key: str | None) -> tuple[Module, bool]:
        module = self.modules.ensure(spec, key)
        # a derived key needs no proof; a hand-written one is proven when checking is on
        written = key is not None or spec_info(spec).has_key
        proven = not written or (checking_enabled() and not proof_suspended())
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[(spec, key)] = (module, proven)
        return module, proven

    def geometry(self, module: Module, grid: Any, block: Any, shared_mem: Any) -> LastGeometry:
        """``grid``, ``block`` and ``shared_mem`` checked for ``module``; remembered on the
        module as its last geometry when they are immutable objects.

        Raises:
            LaunchError: a bad extent, a limit exceeded (the message names it), or dynamic
                shared memory the driver would not let the kernel opt in to.
        """
        exact = (exact_dims(grid), exact_dims(block), shared_mem) \
            if type(shared_mem) is int else None
        geometry = module.geometries.get(exact) if exact is not None else None
        if geometry is None:
            geometry = self._check(module, grid, block, shared_mem)
        flat = (*geometry.grid, *geometry.block, geometry.shared_mem)
        checked = LastGeometry(grid, block, shared_mem,
                               LaunchGeometry(*flat, self._config(module, flat)))
        if type(shared_mem) is int and (type(grid) is tuple or type(grid) is int) and \
                (type(block) is tuple or type(block) is int):
            module.last_geometry = checked  # immutable objects: identity means same values
        return checked

    def _check(self, module: Module, grid: Any, block: Any, shared_mem: Any) -> Geometry:
        geometry = check_geometry(grid, block, shared_mem, self.limits,
                                  kernel_threads=module.kernel_threads,
                                  static_shared=module.static_shared,
                                  cluster=module.cluster, entry=module.signature.entry)
        if geometry.shared_mem > module.dynamic_shared_set and \
                geometry.shared_mem + module.static_shared > self.limits.shared_per_block:
            try:
                self.driver.opt_in_shared(module.function, geometry.shared_mem, self.device_id)
            except LaunchError as exc:
                raise LaunchError(f"{module.signature.entry}: {exc}") from None
            module.dynamic_shared_set = geometry.shared_mem
        g, b = exact_dims(grid), exact_dims(block)
        if g is not None and b is not None and type(shared_mem) is int:
            if len(module.geometries) >= _GEOMETRY_LIMIT:
                module.geometries.clear()
            module.geometries[(g, b, shared_mem)] = geometry
        return geometry

    def _config(self, module: Module, flat: tuple[int, ...]) -> Any:
        """The cuda.core ``LaunchConfig`` of a checked geometry (``None`` on the driver path).

        Shared by every thread launching that geometry: safe while it carries no launch
        attributes (cuda.core rebuilds a config's attribute list at each launch, outside the
        GIL); a config given a cluster or cooperative attribute would need one per thread.
        """
        if not module.through_core:
            return None
        config = module.configs.get(flat)
        if config is None:
            if len(module.configs) >= _GEOMETRY_LIMIT:
                module.configs.clear()
            config = module.configs[flat] = self.driver.launch_config(
                (flat[0], flat[1], flat[2]), (flat[3], flat[4], flat[5]), flat[6])
        return config

    def failed(self, err: Any, module: Module, geometry: LaunchGeometry, streams: Streams,
               args: tuple[Any, ...], spec: Any = None) -> None:
        """Report a failed launch: a thread that never made the device current does so and
        launches again; anything else is raised.

        Raises:
            LaunchError: naming the entry, the driver's error (its CUDA name: an error a
                kernel left in the context, such as ``CUDA_ERROR_ILLEGAL_ADDRESS``, fails
                every later launch the same way), the geometry and the request.
        """
        gx, gy, gz, bx, by, bz, smem = geometry[:7]
        if self.driver.lacks_context(err):
            # a thread that never made the device current: do so once, then retry
            self.driver.make_current(self.device_id)
            err = module.fire(args, streams, geometry)
            if not err:
                return
        how = f"cuda.core launch failed: {err}" if isinstance(err, Exception) else \
            f"cuLaunchKernel failed with {err.name}"
        raise LaunchError(f"{module.signature.entry}: {how} (grid {(gx, gy, gz)}, "
                          f"block {(bx, by, bz)}, shared_mem {smem}; request "
                          f"{spec if spec is not None else module.spec!r})") \
            from (err if isinstance(err, Exception) else None)



class _CurrentStreamLaunch:
    """A bound launcher on torch's current stream, read on each call (the plain-Python
    path's ``bind(..., stream=TORCH_CURRENT_STREAM)``)."""

    def __init__(self, fire: Any, streams: Callable[[Any], Streams], geometry: LaunchGeometry,
                 on_error: Callable[[Any, tuple[Any, ...]], None]) -> None:
        self.fire, self.streams, self.geometry, self.on_error = fire, streams, geometry, on_error

    def __call__(self, *args: Any) -> None:
        err = self.fire(args, self.streams(TORCH_CURRENT_STREAM), self.geometry)
        if err:
            self.on_error(err, args)


class CompileOnly:
    """The launch path of a compile-only executor (``Executor(None, target=...)``): every
    launch and bind is refused.

    Args:
        target: what the executor compiles for (named in the refusal).
    """

    hits = 0

    def __init__(self, target: Target) -> None:
        self.target = target

    def launch(self, spec: Any, *args: Any, **options: Any) -> NoReturn:
        """Refuse: a compile-only executor has no device.

        Raises:
            LaunchError: always.
        """
        raise LaunchError(f"this executor is compile-only (device=None, target "
                          f"{self.target.sm}): it cannot launch")

    def bind(self, spec: Any, **options: Any) -> Callable[..., None]:
        """Refuse, as :meth:`launch`."""
        self.launch(spec)
