"""The executor: requests -> modules (memory and disk caches, key ledger) -> checked launches.

One :class:`Executor` per device. :meth:`Executor.ensure_module` renders, compiles
(nvJitLink) and loads a request's module once per module key, even when many threads
ask at once (:mod:`specdsl._runtime.modules`, :mod:`specdsl._runtime.builds`);
:meth:`Executor.launch` checks each argument against the kernel's ``.entry`` signature
and the geometry against the device's limits, then launches through cuda.core's
``launch`` (kernels with array parameters, which cuda.core has no argument type for,
through the driver's ``cuLaunchKernel`` with a buffer specdsl packs). Launching is a
:class:`~specdsl._runtime.launching.Launcher`'s job, in Python; where
:mod:`specdsl._runtime._speedups` is built, its ``LaunchPath`` takes the hot path in C
and the executor's ``launch`` is bound to it (:mod:`specdsl.speedups`).

Every call to CUDA goes through the driver seam (:mod:`specdsl._runtime.driver`), which is
imported lazily: importing this module needs no GPU, driver or cuda-python.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

import attrs

from .._base.cachedir import resolve_cache_dir, warn_refused
from .._proof.ledger import KeyLedger
from .._proof.switch import check_environment
from .._spec.target import Target
from ..config import warn_unknown_variables
from ..errors import CacheDirError, ConfigError, LaunchError, TargetError
from .builds import Builder
from .compile import CompileOptions, toolchain_version
from .diskcache import DiskCache, open_disk_cache
from .driver import CudaDriver, Driver
from .geometry import DeviceLimits
from .launching import CompileOnly, KernelLoader, Launcher
from .modules import Module, ModuleCache
from .speedups import speedups
from .streams import Streams

__all__ = ["Executor", "ExecutorStats", "Module"]


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


class Executor:
    """Compiles, caches and launches specdsl kernels on one device.

    Args:
        device: the CUDA device ordinal, or ``None`` for a compile-only executor (cubins,
            the ledger and the disk cache work; :meth:`launch` raises ``LaunchError``).
        target: the compile target; by default the device's compute capability
            (``sm_90`` on an H100/H200). Required when ``device`` is ``None``.
        cache_dir: the disk cache folder, ``"off"`` to turn it off, or ``None`` for
            ``SPECDSL_CACHE_DIR`` / the per-user default (see
            ``docs/disk-cache.md``). A folder that cannot be created or written is a
            ``CacheWarning``: the executor carries on without it, or reads it without
            writing.
        ledger: the :class:`~specdsl.KeyLedger` proving hand-written keys; a new one by
            default.
        compile_options: nvJitLink's line information, register limit and debug setting
            (:class:`~specdsl.CompileOptions`) for every module this executor
            compiles; they are part of each disk-cache key. None by default.
        driver: what the executor asks of CUDA (open the device, load cubins, launch,
            streams): cuda.core and cuda.bindings by default. Another driver, such as a
            stand-in that records launches, lets tests run the launch path without a GPU
            (the contract: ``specdsl/_runtime/driver.py``).

    Raises:
        TargetError: no target for a compile-only executor, or a target the device
            cannot run (another major compute capability, a newer minor one, or an
            ``a`` target of another device).
        LaunchError: no CUDA driver or no such device.
        CacheDirError: an explicit ``cache_dir`` that is refused: another user's, a link,
            not a folder (from ``SPECDSL_CACHE_DIR`` or the default, a warning instead).
        ConfigError: ``SPECDSL_CACHE_DIR``, ``SPECDSL_CACHE_MAX_BYTES`` or
            ``SPECDSL_PURE_PYTHON`` holds a value they cannot take, ``compile_options``
            is not a ``CompileOptions``, or ``cache_dir`` is neither a folder, ``"off"``
            nor ``None`` (an empty or blank name included).
        CheckingSwitchError: ``SPECDSL_CHECK_KEYS`` is not a switch word (checked here,
            not on the first hit of a hand-written key).
    """

    def __init__(self, device: int | None = 0, target: Target | str | None = None,
                 cache_dir: str | os.PathLike[str] | None = None, *,
                 ledger: KeyLedger | None = None,
                 compile_options: CompileOptions | None = None,
                 driver: Driver | None = None) -> None:
        if compile_options is None:
            compile_options = CompileOptions()
        if not isinstance(compile_options, CompileOptions):
            raise ConfigError(f"compile_options must be a specdsl.CompileOptions "
                              f"(got {compile_options!r})")
        self.compile_options = compile_options
        check_environment()  # SPECDSL_CHECK_KEYS: fail here, not on a hit while serving
        warn_unknown_variables()  # a misspelt SPECDSL_* variable would change nothing
        self.ledger = ledger if ledger is not None else KeyLedger()
        self.device_id = device
        # the compiled launch path (specdsl.speedups), chosen once for this executor
        compiled = speedups()
        self._disk = self._open_disk(cache_dir)
        if self._disk is not None:  # nvJitLink takes 50-150 ms to load: overlap it
            threading.Thread(target=_probe_toolchain, name="specdsl-toolchain",
                             daemon=True).start()
        self._device: Any = None
        self._driver: Driver | None = None
        limits, default_streams = DeviceLimits(), Streams(0, None)
        if device is None:
            if target is None:
                raise TargetError("a compile-only executor (device=None) needs a target, "
                                  "e.g. Executor(None, target='sm_90')")
            self.target = Target.parse(target)
        else:
            if type(device) is not int or device < 0:
                raise LaunchError(f"device must be a non-negative int ordinal or None "
                                  f"(got {device!r})")
            self._driver = CudaDriver() if driver is None else driver
            opened = self._driver.open_device(device)
            self._device, limits, default_streams = (opened.device, opened.limits,
                                                     opened.default_stream)
            self.target = self._device_target(opened.compute_capability, target)
        self.limits = limits
        # The launch path is an object the executor holds: the compiled LaunchPath over
        # the Python launcher's slow paths, or that launcher itself (or, without a device,
        # one refusing every launch). Its launch method is bound to this executor's
        # `launch` attribute, so a launch pays for no Python frame of its own
        # (Executor.launch below is the documented method, and what a subclass overriding
        # launch reaches through super()).
        self._launcher: Launcher | CompileOnly
        self._compiled_path = None
        if self._driver is None or device is None:
            self._builder = Builder(self.target, compile_options, self._disk, self.ledger, None)
            self._modules = ModuleCache(self.target, self.ledger, self._builder.build)
            self._launcher = CompileOnly(self.target)
        else:
            load = KernelLoader(self._driver, device, compiled)
            self._builder = Builder(self.target, compile_options, self._disk, self.ledger, load)
            self._modules = ModuleCache(self.target, self.ledger, self._builder.build)
            self._launcher = Launcher(self._modules, self._driver, device, limits,
                                      default_streams, compiled)
            if compiled is not None:
                self._compiled_path = compiled.LaunchPath(self._launcher)
        self._launch: Callable[..., None] = (
            self._launcher.launch if self._compiled_path is None
            else self._compiled_path.launch)
        if type(self).launch is Executor.launch:
            self.__dict__["launch"] = self._launch

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

    def _device_target(self, capability: tuple[int, int],
                       target: Target | str | None) -> Target:
        major, minor = capability
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
        builder = self._builder
        compiled_hits = 0 if self._compiled_path is None else self._compiled_path.hits
        return ExecutorStats(
            hits=self._modules.hits + self._launcher.hits + compiled_hits,
            misses=builder.misses, compiles=builder.compiles,
            compile_seconds=builder.compile_seconds, disk_hits=builder.disk_hits,
            disk_rejected=self._disk.rejected if self._disk is not None else 0,
            ptx_disk_hits=builder.ptx_disk_hits)

    @property
    def compiled(self) -> bool:
        """Whether this executor launches through the compiled path (:mod:`specdsl.speedups`)."""
        return self._compiled_path is not None

    @property
    def device(self) -> Any:
        """The cuda.core ``Device``, or ``None`` for a compile-only executor."""
        return self._device

    @property
    def driver(self) -> Driver | None:
        """The driver seam this executor calls CUDA through, or ``None`` for a compile-only
        executor."""
        return self._driver

    @property
    def disk_cache(self) -> DiskCache | None:
        """The disk cache, or ``None`` when it is off."""
        return self._disk

    def module_key(self, spec: Any, key: str | None = None) -> str:
        """The key ``spec`` is cached under: ``key``, else its ``key()``, else its derived key.

        Raises:
            ConfigError: ``key`` is not a str with a non-blank character.
            NotASpecError: ``spec`` is no request.
        """
        return self._modules.module_key(spec, key)[0]

    def ensure_module(self, spec: Any, key: str | None = None) -> Module:
        """The module for ``spec``, compiled (or read from disk) on the first request.

        On a hit under a hand-written key, while key checking is on and not suspended,
        the ledger proves that ``spec`` renders the PTX compiled under that key. On a
        miss the ledger records what is compiled. Concurrent requests for one new key
        compile it once; a failed build raises in every waiting thread and is not cached.

        Args:
            spec: a request.
            key: a hand-written module key, a str with a non-blank character; by default
                the spec's ``key()`` or, without one, its derived key.

        Returns:
            The :class:`Module`.

        Raises:
            ConfigError: ``key`` is not a str with a non-blank character (``42``, ``""``,
                ``"  "``).
            IncompleteKeyError: the hand-written key was first compiled for a request
                whose PTX differs from ``spec``'s.
            RenderError, CompileError: the request cannot be rendered or compiled.
            SpecDefinitionError: the spec's array declarations do not match the entry (a
                name that is no ``.ptr`` parameter, a dimension no baked int field or
                integer ``.param`` gives), also without a device.
            NotASpecError: ``spec`` is no request: a spec class (``VectorAdd`` for
                ``VectorAdd()``), or no kernel spec (a ``TypeError`` too).
        """
        return self._modules.ensure(spec, key)

    # -- launches ----------------------------------------------------------------------

    def launch(self, spec: Any, *args: Any, grid: Any, block: Any, stream: Any = None,
               shared_mem: int = 0, key: str | None = None) -> None:
        """Launch ``spec``'s kernel with ``args`` in ``.param`` order.

        The first launch of a request builds its module (:meth:`ensure_module`: render,
        compile, load). Everything is checked before anything reaches the GPU: the
        argument count, each argument against its ``.param`` (see ``docs/executor.md``),
        the grid and block against the device's and the kernel's limits, and dynamic
        shared memory against the opt-in limit (a kernel is opted in above 48 KB
        automatically). A launch repeating the last request, key and geometry objects
        checks only the arguments.

        The executor binds this name to its launch path's own ``launch`` when it is made
        (the compiled one where it is built: :attr:`compiled`), so a call pays for no
        Python frame here; this method is what a subclass overriding ``launch`` reaches
        with ``super().launch(...)``. Either way the checks and errors are the same.

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
            IncompleteKeyError: a hand-written key (the spec's ``key()`` or ``key``) that
                maps this request and an earlier one rendering different PTX (see
                :meth:`ensure_module`).
            RenderError: the first launch of a request that cannot be rendered (a
                :class:`~specdsl.errors.UnsupportedTargetError` for a target the template
                refuses).
            CompileError: the first launch of a request nvJitLink cannot compile.
            ConfigError, NotASpecError: a bad ``key`` or ``spec`` (see
                :meth:`ensure_module`).
        """
        self._launch(spec, *args, grid=grid, block=block, stream=stream,
                     shared_mem=shared_mem, key=key)

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
            LaunchError, IncompleteKeyError, RenderError, CompileError, ConfigError,
                NotASpecError: as :meth:`launch`, at bind time.
        """
        return self._launcher.bind(spec, grid=grid, block=block, stream=stream,
                                   shared_mem=shared_mem, key=key)


def _probe_toolchain() -> None:
    with contextlib.suppress(Exception):  # reported where needed: the first disk-cache lookup
        toolchain_version()
