"""The executor: requests -> modules (memory and disk caches, key ledger) -> checked launches.

One :class:`Executor` per device. :meth:`Executor.ensure_module` renders, compiles
(nvJitLink) and loads a request's module once per module key, even when many threads
ask at once; :meth:`Executor.launch` checks each argument against the kernel's
``.entry`` signature and the geometry against the device's limits, then launches
through cuda.core's ``launch`` (kernels with array parameters, which cuda.core has no
argument type for, through the driver's ``cuLaunchKernel`` with a buffer specdsl packs).
Where :mod:`specdsl._runtime._speedups` is built, ``launch`` and the argument checks run compiled
(:mod:`specdsl.speedups`); the Python methods here are their reference and fallback.

CUDA is imported lazily: importing this module needs no GPU, driver or cuda-python.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

import attrs

from .._proof.ledger import KeyLedger
from .._proof.switch import checking_enabled, proof_suspended
from .geometry import DeviceLimits, Geometry, check_geometry
from .launchers import (bound_core_launcher, bound_driver_launcher, core_launcher,
                        driver_launcher)
from .params import ArgumentPacker
from .streams import stream_device, stream_handle
from .builds import Builder
from .compile import CompileOptions, toolchain_version
from .._base.cachedir import resolve_cache_dir, warn_refused
from .diskcache import DiskCache, open_disk_cache
from .modules import Module, ModuleCache
from ..errors import CacheDirError, ConfigError, LaunchError, TargetError
from .._spec.decorator import spec_info
from .speedups import launch_base, speedups
from .._spec.target import Target

__all__ = ["Executor", "ExecutorStats", "Module"]

# Bound on the (request, key) -> module memo: requests differing only in launch fields
# each take a slot; past this many the memo starts over (modules stay cached).
_MEMO_LIMIT = 65536


@attrs.frozen
class ExecutorStats:
    """A snapshot of an executor's counters (later calls do not change it).

    ``hits`` and ``misses`` are counted without a lock on the launch path (a lock there
    would cost more than the rest of the bookkeeping): under concurrent launches from
    several threads they can undercount slightly. ``compiles`` and ``compile_seconds``
    are exact.

    Attributes:
        hits: module lookups answered from memory (every launch is one).
        misses: lookups that had to build a module.
        compiles: nvJitLink compiles (misses minus disk hits, minus failed builds).
        compile_seconds: wall time spent in nvJitLink, in seconds.
        disk_hits: misses answered from the disk cache.
        disk_rejected: disk entries refused as corrupt, truncated or foreign.
        ptx_disk_hits: misses whose PTX came from the disk cache instead of rendering.
    """

    hits: int = 0
    misses: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0
    disk_hits: int = 0
    disk_rejected: int = 0
    ptx_disk_hits: int = 0


_LaunchBase = launch_base()


class Executor(_LaunchBase):
    """Compiles, caches and launches specdsl kernels on one device.

    Args:
        device: the CUDA device ordinal, or ``None`` for a compile-only executor (cubins,
            the ledger and the disk cache work; :meth:`launch` raises ``LaunchError``).
        target: the compile target; by default the device's compute capability
            (``sm_90`` on an H100/H200). Required when ``device`` is ``None``.
        cache_dir: the disk cache folder, ``"off"`` to turn it off, or ``None`` for
            ``SPECDSL_CACHE_DIR`` / the per-user default (see :mod:`specdsl._runtime.diskcache`).
            A folder that cannot be created or written is a ``CacheWarning``: the
            executor carries on without it, or reads it without writing.
        ledger: the :class:`~specdsl._proof.ledger.KeyLedger` proving hand-written keys; a new
            one by default.
        compile_options: nvJitLink's line information, register limit and debug setting
            (:class:`~specdsl.CompileOptions`) for every module this executor
            compiles; they are part of each disk-cache key. None by default.

    Raises:
        TargetError: no target for a compile-only executor, or a target the device
            cannot run (another major compute capability, a newer minor one, or an
            ``a`` target of another device).
        LaunchError: no CUDA driver or no such device.
        CacheDirError: an explicit ``cache_dir`` that is refused: another user's, a link,
            not a folder (from ``SPECDSL_CACHE_DIR`` or the default, a warning instead).
        ConfigError: ``SPECDSL_CACHE_DIR``, ``SPECDSL_CACHE_MAX_BYTES`` or
            ``SPECDSL_PURE_PYTHON`` holds a value they cannot take, or ``compile_options``
            is not a ``CompileOptions``.
    """

    def __init__(self, device: int | None = 0, target: Target | str | None = None,
                 cache_dir: str | os.PathLike[str] | None = None, *,
                 ledger: KeyLedger | None = None,
                 compile_options: CompileOptions | None = None) -> None:
        if compile_options is None:
            compile_options = CompileOptions()
        if not isinstance(compile_options, CompileOptions):
            raise ConfigError(f"compile_options must be a specdsl.CompileOptions "
                              f"(got {compile_options!r})")
        self.compile_options = compile_options
        self.ledger = ledger if ledger is not None else KeyLedger()
        self._memo: dict[tuple[Any, Any], tuple[Module, bool]] = {}
        self._last: tuple = (None, None, None, False)
        # (stream object, (handle, cuda.core Stream), its device) last checked
        self._last_stream: tuple = (None, (None, None), None)
        self._core_streams: dict[int, Any] = {}
        self._stream_type: Any = ()  # cuda.core's Stream once a device is open (isinstance)
        self._core_launch: Any = None
        self._driver: Any = None  # cuda.bindings' driver module, with a device
        self._hits = 0
        self._device: Any = None
        self.device_id = device
        # the compiled launch path (specdsl.speedups), chosen once for this executor: the
        # compiled base class's launch() reads _pure_python; modules are loaded with it
        self._speedups = speedups()
        self._pure_python = self._speedups is None
        self._launch_hits = 0  # hits counted by the compiled launch()
        self._disk = self._open_disk(cache_dir)
        if self._disk is not None:  # nvJitLink takes 50-150 ms to load: overlap it
            threading.Thread(target=_probe_toolchain, name="specdsl-toolchain",
                             daemon=True).start()
        if device is None:
            if target is None:
                raise TargetError("a compile-only executor (device=None) needs a target, "
                                  "e.g. Executor(None, target='sm_90')")
            self.target = Target.parse(target)
        else:
            self._device = self._open_device(device)
            self.target = self._device_target(target)
        self._builder = Builder(self.target, compile_options, self._disk, self.ledger,
                                load=None if device is None else self._load)
        self._modules = ModuleCache(self.target, self.ledger, self._builder.build)

    # -- setup -------------------------------------------------------------------------

    @staticmethod
    def _open_disk(cache_dir: Any) -> DiskCache | None:
        path = resolve_cache_dir(cache_dir)
        if path is None:
            return None
        try:
            return open_disk_cache(path)
        except CacheDirError as exc:
            if cache_dir is not None:  # asked for by name: say so, loudly
                raise
            warn_refused(path, exc)
            return None

    def _open_device(self, ordinal: Any) -> Any:
        if type(ordinal) is not int or ordinal < 0:
            raise LaunchError(f"device must be a non-negative int ordinal or None "
                              f"(got {ordinal!r})")
        try:
            from cuda.core import Device

            device = Device(ordinal)
            device.set_current()
            props = device.properties
            self.limits = DeviceLimits(
                max_threads_per_block=props.max_threads_per_block,
                max_block=(props.max_block_dim_x, props.max_block_dim_y, props.max_block_dim_z),
                max_grid=(props.max_grid_dim_x, props.max_grid_dim_y, props.max_grid_dim_z),
                shared_per_block=props.max_shared_memory_per_block,
                shared_per_block_optin=props.max_shared_memory_per_block_optin,
            )
            self._default_stream = device.default_stream
        except LaunchError:
            raise
        except Exception as exc:  # no libcuda, no device, driver too old
            raise LaunchError(f"no CUDA device {ordinal}: {exc}") from None
        self._default_handle = int(self._default_stream.handle)
        self._default_streams = (self._default_handle, self._default_stream)
        from cuda.core import LaunchConfig, Stream
        from cuda.core import launch as core_launch

        self._core_launch, self._launch_config = core_launch, LaunchConfig
        self._stream_type = Stream
        from cuda.bindings import driver

        self._driver = driver
        self._success = driver.CUresult.CUDA_SUCCESS
        self._launch_kernel = driver.cuLaunchKernel
        return device

    def _device_target(self, target: Target | str | None) -> Target:
        major, minor = self._device.compute_capability
        native = Target(major * 10 + minor)
        if target is None:
            return native
        target = Target.parse(target)
        t_major, t_minor = target.compute_capability
        if t_major != major or t_minor > minor or (target.suffix and target.arch != native.arch):
            raise TargetError(f"device {self.device_id} (sm_{native.arch}) cannot run cubins "
                              f"for {target.sm}")
        return target

    # -- modules -----------------------------------------------------------------------

    @property
    def stats(self) -> ExecutorStats:
        """A snapshot of the counters (see :class:`ExecutorStats`)."""
        return ExecutorStats(
            hits=self._modules.hits + self._hits + self._launch_hits,
            misses=self._builder.misses, compiles=self._builder.compiles,
            compile_seconds=self._builder.compile_seconds, disk_hits=self._builder.disk_hits,
            disk_rejected=self._disk.rejected if self._disk is not None else 0,
            ptx_disk_hits=self._builder.ptx_disk_hits)

    @property
    def compiled(self) -> bool:
        """Whether this executor launches through the compiled path (:mod:`specdsl.speedups`)."""
        return not self._pure_python

    @property
    def device(self) -> Any:
        """The cuda.core ``Device``, or ``None`` for a compile-only executor."""
        return self._device

    @property
    def disk_cache(self) -> DiskCache | None:
        """The disk cache, or ``None`` when it is off."""
        return self._disk

    def module_key(self, spec: Any, key: str | None = None) -> str:
        """The key ``spec`` is cached under: ``key``, else its ``key()``, else its derived key."""
        return self._modules.module_key(spec, key)[0]

    def ensure_module(self, spec: Any, key: str | None = None) -> Module:
        """The module for ``spec``, compiled (or read from disk) on the first request.

        On a hit under a hand-written key, while key checking is on and not suspended,
        the ledger proves that ``spec`` renders the PTX compiled under that key. On a
        miss the ledger records what is compiled. Concurrent requests for one new key
        compile it once; a failed build raises in every waiting thread and is not cached.

        Args:
            spec: a request.
            key: a hand-written module key; by default the spec's ``key()`` or, without
                one, its derived key.

        Returns:
            The :class:`Module`.

        Raises:
            IncompleteKeyError: the hand-written key was first compiled for a request
                whose PTX differs from ``spec``'s.
            RenderError, CompileError: the request cannot be rendered or compiled.
            TypeError: ``spec`` is not a kernel spec.
        """
        return self._modules.ensure(spec, key)

    def _load(self, module: Module) -> None:
        from cuda.core import ObjectCode

        entry = module.signature.entry
        module.kernel = ObjectCode.from_cubin(module.cubin).get_kernel(entry)
        attributes = module.kernel.attributes
        module.kernel_threads = attributes.max_threads_per_block
        module.static_shared = attributes.shared_size_bytes
        module.cluster = tuple(max(1, extent) for extent in (  # 0: no cluster declared
            attributes.required_cluster_width, attributes.required_cluster_height,
            attributes.required_cluster_depth))
        module.function = int(module.kernel.handle)
        module.packer = ArgumentPacker(module.signature, device_id=self.device_id)
        if module.packer.through_core:
            module.through_core = True
            module.fire = core_launcher(module.packer, self._core_launch, module.kernel,
                                        compiled=self._speedups)
        else:  # a .b8 aggregate parameter: cuda.core has no argument type for it
            module.fire = driver_launcher(module.packer, self._launch_kernel, module.function)

    # -- launches ----------------------------------------------------------------------

    def _launch_python(self, spec: Any, *args: Any, grid: Any, block: Any, stream: Any = None,
                       shared_mem: int = 0, key: str | None = None) -> None:
        """Launch ``spec``'s kernel with ``args`` in ``.param`` order.

        Everything is checked before anything reaches the GPU: the argument count, each
        argument against its ``.param`` (see :mod:`specdsl._runtime.params`), the grid and
        block against the device's and the kernel's limits, and dynamic shared memory
        against the opt-in limit (a kernel is opted in above 48 KB automatically).

        Args:
            spec: the request.
            *args: one argument per kernel parameter: device arrays (torch, CuPy, any
                DLPack or ``__cuda_array_interface__`` object), cuda.core ``Buffer``\\ s,
                device pointers as ints, Python or NumPy scalars.
            grid: CTAs, an int or a tuple of 1-3 ints.
            block: threads per CTA, an int or a tuple of 1-3 ints.
            stream: a cuda.core ``Stream``, an object with ``__cuda_stream__`` or a
                ``torch.cuda.Stream``; by default the device's default stream. A stream of
                another device, or a closed one, is refused (its device is read from the
                object, else asked of the driver with ``cuStreamGetDevice``; the last stream
                object checked is remembered).
            shared_mem: dynamic shared memory per CTA, in bytes.
            key: a hand-written module key (see :meth:`ensure_module`).

        Raises:
            LaunchError: a compile-only executor, a bad argument, geometry or stream (the
                message names the parameter and what it expects), a stream of another
                device, or a driver error.
            IncompleteKeyError: see :meth:`ensure_module`.
        """
        last = self._last  # (spec, key, module, proven), replaced as one object
        if last[0] is spec and last[1] is key and (
                last[3] or not checking_enabled() or proof_suspended()):
            module = last[2]
            self._hits += 1
        else:
            module = self._lookup(spec, key)
        streams = self._default_streams if stream is None else self._streams(stream)
        geometry = module.last_geometry
        if not (geometry[0] is grid and geometry[1] is block and geometry[2] is shared_mem):
            geometry = self._geometry_for(module, grid, block, shared_mem)
        err = module.fire(args, streams, geometry[3])
        if err:  # cuda.core's exception, or the driver path's CUresult (CUDA_SUCCESS is 0)
            self._launch_failed(err, module, geometry[3], streams, args)

    if not hasattr(_LaunchBase, "launch"):  # no compiled base: launch() is the Python one
        launch = _launch_python

    def bind(self, spec: Any, *, grid: Any, block: Any, stream: Any = None,
             shared_mem: int = 0, key: str | None = None) -> Callable[..., None]:
        """A launcher for ``spec`` with its geometry and stream fixed: ``bound(*args)``.

        For hot loops: the module lookup, the key proof (while checking is on) and the
        geometry checks happen once, here; each call still checks and packs every
        argument against the ``.param`` signature, exactly as :meth:`launch` does, and
        then launches. A bound launcher is tied to this executor and device.

        Args:
            spec, grid, block, stream, shared_mem, key: as for :meth:`launch`.

        Returns:
            A function ``bound(*args)`` taking the kernel's arguments in ``.param`` order
            (one generated function: the checks and the launch); its attributes
            ``module``, ``grid``, ``block`` and ``shared_mem`` tell what it launches.

        Raises:
            LaunchError, IncompleteKeyError: as :meth:`launch`, at bind time.
        """
        module = self._lookup(spec, key)
        geometry = self._geometry_for(module, grid, block, shared_mem)[3]
        streams = self._default_streams if stream is None else self._streams(stream)

        def on_error(err: Any, args: tuple) -> None:
            self._launch_failed(err, module, geometry, streams, args)

        if module.through_core:
            bound = bound_core_launcher(module.packer, self._core_launch, module.kernel,
                                        streams, geometry[7], on_error, compiled=self._speedups)
        else:
            bound = bound_driver_launcher(module.packer, self._launch_kernel, module.function,
                                          streams[0], geometry, on_error)
        bound.module, bound.stream = module, stream  # the stream object stays alive
        bound.grid, bound.block, bound.shared_mem = geometry[:3], geometry[3:6], geometry[6]
        return bound

    def _lookup(self, spec: Any, key: str | None) -> Module:
        try:
            module, proven = self._memo[(spec, key)]
        except KeyError:
            module, proven = self._remember(spec, key)
        except TypeError:
            raise LaunchError(f"spec must be a kernel spec request and key a str "
                              f"(got {type(spec).__qualname__}, {key!r})") from None
        else:
            self._hits += 1
            if not proven and checking_enabled() and not proof_suspended():
                module, proven = self._remember(spec, key)
        self._last = (spec, key, module, proven)
        return module

    def _streams(self, stream: Any) -> tuple[int, Any]:
        """``(handle, cuda.core Stream)`` of ``stream``, once its device is checked to be
        this executor's."""
        handle = stream_handle(stream)
        last = self._last_stream  # (stream object, (handle, cuda.core Stream), its device)
        if last[1][0] == handle and last[0] is stream:
            return last[1]
        device = stream_device(stream)
        # a new object for the last stream (torch.cuda.current_stream() makes one per call):
        # the same handle on the same device is the same stream
        if last[1][0] == handle and device is not None and device == last[2] and \
                not isinstance(stream, self._stream_type):
            self._last_stream = (stream, last[1], device)
            return last[1]
        if device is None:
            device = self._driver_stream_device(handle)
        if device is not None and device != self.device_id:
            raise LaunchError(f"stream {handle:#x} belongs to device {device}; this executor "
                              f"launches on device {self.device_id}")
        streams = (handle, self._core_stream(stream, handle))
        self._last_stream = (stream, streams, device)
        return streams

    def _core_stream(self, stream: Any, handle: int) -> Any:
        """A cuda.core ``Stream`` for ``handle``: ``stream`` itself if it is one, else a
        non-owning one made once per handle (``Stream.from_handle``)."""
        if self._core_launch is None:  # no cuda.core launches (a stand-in driver in tests)
            return None
        if isinstance(stream, self._stream_type):
            return stream
        core = self._core_streams.get(handle)
        if core is None:
            if len(self._core_streams) >= 256:
                self._core_streams.clear()
            core = self._core_streams[handle] = self._stream_type.from_handle(handle)
        return core

    def _driver_stream_device(self, handle: int) -> int | None:
        # 0, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) name the calling thread's
        # current context's stream: they belong to no device of their own
        if handle in (0, 1, 2):
            return None
        try:
            err, device = self._driver.cuStreamGetDevice(self._driver.CUstream(handle))
        except Exception:  # a driver older than CUDA 12.8 has no cuStreamGetDevice
            return None
        if err != self._success:
            raise LaunchError(f"stream {handle:#x} is not a stream the driver knows: {err.name}")
        return int(device)

    def _geometry_for(self, module: Module, grid: Any, block: Any, shared_mem: Any) -> tuple:
        exact = (_dims(grid), _dims(block), shared_mem) if type(shared_mem) is int else None
        geometry = module.geometries.get(exact) if exact is not None else None
        if geometry is None:
            geometry = self._geometry(module, grid, block, shared_mem)
        flat = (*geometry.grid, *geometry.block, geometry.shared_mem)
        checked = (grid, block, shared_mem, (*flat, self._config(module, flat)))
        if type(shared_mem) is int and (type(grid) is tuple or type(grid) is int) and \
                (type(block) is tuple or type(block) is int):
            module.last_geometry = checked  # immutable objects: identity means same values
        return checked

    def _config(self, module: Module, flat: tuple) -> Any:
        """The cuda.core ``LaunchConfig`` of a checked geometry (``None`` on the driver path).

        Shared by every thread launching that geometry: safe while it carries no launch
        attributes (cuda.core rebuilds a config's attribute list at each launch, outside the
        GIL); a config given a cluster or cooperative attribute would need one per thread.
        """
        if not module.through_core:
            return None
        config = module.configs.get(flat)
        if config is None:
            if len(module.configs) >= 1024:
                module.configs.clear()
            config = module.configs[flat] = self._launch_config(
                grid=flat[:3], block=flat[3:6], shmem_size=flat[6])
        return config

    def _remember(self, spec: Any, key: str | None) -> tuple[Module, bool]:
        if self._device is None:
            raise LaunchError(f"this executor is compile-only (device=None, target "
                              f"{self.target.sm}): it cannot launch")
        module = self.ensure_module(spec, key)
        # a derived key needs no proof; a hand-written one is proven when checking is on
        written = key is not None or spec_info(spec).has_key
        proven = not written or (checking_enabled() and not proof_suspended())
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[(spec, key)] = (module, proven)
        return module, proven

    def _geometry(self, module: Module, grid: Any, block: Any, shared_mem: Any) -> Geometry:
        geometry = check_geometry(grid, block, shared_mem, self.limits,
                                  kernel_threads=module.kernel_threads,
                                  static_shared=module.static_shared,
                                  cluster=module.cluster, entry=module.signature.entry)
        if geometry.shared_mem > module.dynamic_shared_set and \
                geometry.shared_mem + module.static_shared > self.limits.shared_per_block:
            self._opt_in_shared(module, geometry.shared_mem)
        g, b = _dims(grid), _dims(block)
        if g is not None and b is not None and type(shared_mem) is int:
            if len(module.geometries) >= 1024:
                module.geometries.clear()
            module.geometries[(g, b, shared_mem)] = geometry
        return geometry

    def _opt_in_shared(self, module: Module, size: int) -> None:
        driver = self._driver
        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        (err,) = driver.cuKernelSetAttribute(attribute, size, driver.CUkernel(module.function),
                                             driver.CUdevice(self.device_id))
        if err != self._success:
            raise LaunchError(f"{module.signature.entry}: cannot opt in to {size} bytes of "
                              f"dynamic shared memory: {err.name}")
        module.dynamic_shared_set = size

    def _launch_failed(self, err: Any, module: Module, geometry: tuple, streams: tuple,
                       args: tuple) -> None:
        gx, gy, gz, bx, by, bz, smem = geometry[:7]
        if _invalid_context(err, self._driver):
            # a thread that never made the device current: do so once, then retry
            from cuda.core import Device

            Device(self.device_id).set_current()
            err = module.fire(args, streams, geometry)
            if not err:
                return
        how = f"cuda.core launch failed: {err}" if isinstance(err, Exception) else \
            f"cuLaunchKernel failed with {err.name}"
        raise LaunchError(f"{module.signature.entry}: {how} (grid {(gx, gy, gz)}, "
                          f"block {(bx, by, bz)}, shared_mem {smem})") \
            from (err if isinstance(err, Exception) else None)


def _invalid_context(err: Any, driver: Any) -> bool:
    """Whether a failed launch (a CUresult, or cuda.core's exception) lacked a current context."""
    if isinstance(err, Exception):
        return str(err).startswith("CUDA_ERROR_INVALID_CONTEXT")
    return err == driver.CUresult.CUDA_ERROR_INVALID_CONTEXT


def _dims(value: Any) -> tuple[int, int, int] | None:
    """``value`` as a 3-tuple if it is exactly ints (no bools or floats), else ``None``."""
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


def _probe_toolchain() -> None:
    try:
        toolchain_version()
    except Exception:  # reported where it is needed: the first disk-cache lookup
        pass


if hasattr(_LaunchBase, "launch"):  # the compiled launch() documents itself as the Python one
    _LaunchBase.launch.__doc__ = Executor._launch_python.__doc__
