"""The driver seam: every call the executor makes to CUDA, behind one small object.

:class:`Driver` is the contract; :class:`CudaDriver` keeps it with cuda.core and
cuda.bindings (imported on first use, so importing specdsl needs no GPU, driver or
cuda-python). ``Executor(driver=...)`` takes another, so that tests and tools can run
the launch path without a GPU: a stand-in records the launches a real one would make.
The launch functions themselves (:attr:`Driver.core_launch`, :attr:`Driver.launch_kernel`,
and the C entry point at :attr:`Driver.launch_kernel_address`) are called from the
generated or compiled launchers directly, one call a launch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from ..errors import LaunchError
from .cudacore import load as load_cuda_core
from .geometry import DeviceLimits
from .streams import StreamDriver, Streams

__all__ = ["Driver", "CudaDriver", "OpenedDevice", "LoadedKernel"]


class OpenedDevice(NamedTuple):
    """A device made current for launches.

    Attributes:
        device: the cuda.core ``Device`` (or a stand-in's object).
        compute_capability: ``(major, minor)``.
        limits: its launch limits.
        default_stream: its default stream.
    """

    device: Any
    compute_capability: tuple[int, int]
    limits: DeviceLimits
    default_stream: Streams


class LoadedKernel(NamedTuple):
    """A kernel loaded from a cubin, with the attributes its launches are checked against.

    Attributes:
        kernel: the cuda.core ``Kernel`` (what :attr:`Driver.core_launch` takes).
        function: its ``CUkernel`` handle (what :attr:`Driver.launch_kernel` takes).
        max_threads_per_block: the kernel's own limit (registers may hold it below the
            device's).
        static_shared: its static shared memory, in bytes.
        cluster: its compile-time cluster shape in CTAs (PTX ``.reqnctapercluster``),
            ``(1, 1, 1)`` without one.
    """

    kernel: Any
    function: int
    max_threads_per_block: int
    static_shared: int
    cluster: tuple[int, int, int]


class Driver(StreamDriver, Protocol):
    """What an executor asks of CUDA (with :class:`~specdsl._runtime.streams.StreamDriver`'s
    three stream methods).

    Attributes:
        core_launch: cuda.core's ``launch(stream, config, kernel, *args)``, or ``None``
            for a driver without one (then every kernel launches through
            :attr:`launch_kernel`).
        launch_kernel: ``cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared_mem,
            stream, params, extra) -> (CUresult,)``.
        launch_kernel_address: the address of a C function with ``cuLaunchKernel``'s
            signature and ABI, which the compiled launch path calls itself; 0 for a driver
            without one (then launches take the generated Python launchers).
    """

    core_launch: Callable[..., Any] | None
    launch_kernel: Callable[..., Any]
    launch_kernel_address: int

    def open_device(self, ordinal: int) -> OpenedDevice:
        """Open device ``ordinal`` and make it current.

        Raises:
            LaunchError: no CUDA driver, or no such device.
        """

    def load(self, cubin: bytes, entry: str) -> LoadedKernel:
        """Load ``cubin`` and find its kernel ``entry``."""

    def launch_config(self, grid: tuple[int, int, int], block: tuple[int, int, int],
                      shared_mem: int) -> Any:
        """The launch configuration :attr:`core_launch` takes for a checked geometry."""

    def opt_in_shared(self, function: int, size: int, device_id: int) -> None:
        """Let kernel ``function`` use ``size`` bytes of dynamic shared memory (above the
        48 KB that needs no opting in).

        Raises:
            LaunchError: the driver refused.
        """

    def make_current(self, device_id: int) -> None:
        """Make the device current in the calling thread."""

    def lacks_context(self, error: Any) -> bool:
        """Whether a failed launch's error (a ``CUresult``, or the exception
        :attr:`core_launch` raised) says the calling thread had no current context."""

    def result(self, code: int) -> Any:
        """The ``CUresult`` (with its ``name``) of an error code the function at
        :attr:`launch_kernel_address` returned."""


class CudaDriver:
    """:class:`Driver` through cuda.core and cuda.bindings, imported by :meth:`open_device`
    (and by the slow paths, which read ``cuda.bindings.driver`` when they run)."""

    core_launch: Callable[..., Any] | None = None
    launch_kernel: Callable[..., Any]
    launch_kernel_address = 0

    def __init__(self) -> None:
        self._streams: dict[int, Any] = {}  # handle -> non-owning cuda.core Stream

    def open_device(self, ordinal: int) -> OpenedDevice:
        try:
            load_cuda_core()
            from cuda.bindings import driver
            from cuda.core import Device, LaunchConfig, Stream, launch

            device = Device(ordinal)
            device.set_current()
            props = device.properties
            limits = DeviceLimits(
                max_threads_per_block=props.max_threads_per_block,
                max_block=(props.max_block_dim_x, props.max_block_dim_y, props.max_block_dim_z),
                max_grid=(props.max_grid_dim_x, props.max_grid_dim_y, props.max_grid_dim_z),
                shared_per_block=props.max_shared_memory_per_block,
                shared_per_block_optin=props.max_shared_memory_per_block_optin,
            )
            stream = device.default_stream
            major, minor = device.compute_capability
        except Exception as exc:  # no libcuda, no device, driver too old
            if type(exc).__name__ == "DynamicLibNotFoundError":  # cuda.pathfinder's: no libcuda
                raise LaunchError(f"no CUDA driver on this machine (for device {ordinal}): "
                                  f"{exc}") from None
            raise LaunchError(f"no CUDA device {ordinal}: {exc}") from None
        self._device_type, self._stream_type, self._config_type = Device, Stream, LaunchConfig
        self.core_launch, self.launch_kernel = launch, driver.cuLaunchKernel
        self.launch_kernel_address = _entry_point(driver, "cuLaunchKernel")
        return OpenedDevice(device, (major, minor), limits,
                            Streams(int(stream.handle), stream))

    def load(self, cubin: bytes, entry: str) -> LoadedKernel:
        load_cuda_core()
        from cuda.core import ObjectCode

        kernel = ObjectCode.from_cubin(cubin).get_kernel(entry)
        attributes = kernel.attributes
        cluster = tuple(max(1, extent) for extent in (  # 0: no cluster declared
            attributes.required_cluster_width, attributes.required_cluster_height,
            attributes.required_cluster_depth))
        return LoadedKernel(kernel, int(kernel.handle), attributes.max_threads_per_block,
                            attributes.shared_size_bytes, (cluster[0], cluster[1], cluster[2]))

    def launch_config(self, grid: tuple[int, int, int], block: tuple[int, int, int],
                      shared_mem: int) -> Any:
        return self._config_type(grid=grid, block=block, shmem_size=shared_mem)

    def is_core_stream(self, stream: Any) -> bool:
        return isinstance(stream, self._stream_type)

    def core_stream(self, stream: Any, handle: int) -> Any:
        """``stream`` if it is a cuda.core ``Stream``, else a non-owning one made once per
        handle (``Stream.from_handle``)."""
        if isinstance(stream, self._stream_type):
            return stream
        core = self._streams.get(handle)
        if core is None:
            if len(self._streams) >= 256:
                self._streams.clear()
            core = self._streams[handle] = self._stream_type.from_handle(handle)
        return core

    def stream_device(self, handle: int) -> int | None:
        load_cuda_core()
        from cuda.bindings import driver

        try:
            err, device = driver.cuStreamGetDevice(driver.CUstream(handle))
        except Exception:  # a driver older than CUDA 12.8 has no cuStreamGetDevice
            return None
        if err != driver.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"stream {handle:#x} is not a stream the driver knows: {err.name}")
        return int(device)

    def opt_in_shared(self, function: int, size: int, device_id: int) -> None:
        load_cuda_core()
        from cuda.bindings import driver

        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        (err,) = driver.cuKernelSetAttribute(attribute, size, driver.CUkernel(function),
                                             driver.CUdevice(device_id))
        if err != driver.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"cannot opt in to {size} bytes of dynamic shared memory: "
                              f"{err.name}")

    def make_current(self, device_id: int) -> None:
        self._device_type(device_id).set_current()

    def lacks_context(self, error: Any) -> bool:
        load_cuda_core()
        from cuda.bindings import driver

        if isinstance(error, Exception):
            return str(error).startswith("CUDA_ERROR_INVALID_CONTEXT")
        return bool(error == driver.CUresult.CUDA_ERROR_INVALID_CONTEXT)

    def result(self, code: int) -> Any:
        load_cuda_core()
        from cuda.bindings import driver

        try:
            return driver.CUresult(code)
        except ValueError:  # a code this cuda.bindings does not name
            return _Unnamed(code)


class _Unnamed(int):
    """A ``CUresult`` code cuda.bindings has no member for, named by its number."""

    @property
    def name(self) -> str:
        return f"CUresult {int(self)}"


# The CUDA version whose cuLaunchKernel ABI the compiled path calls (unchanged since 4.0).
_ABI_VERSION = 12000


def _entry_point(driver: Any, symbol: str) -> int:
    """The address of driver function ``symbol`` (``cuGetProcAddress``), 0 where the driver
    gives none. Its legacy-stream flavour: stream handle 0 is the legacy default stream,
    as torch's default stream (handle 0) means; the per-thread default stream has its own
    handle (``CU_STREAM_PER_THREAD``, which cuda.core's default stream uses under
    ``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1``), which every flavour honours."""
    flag = driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM
    try:
        err, address, _ = driver.cuGetProcAddress(symbol.encode(), _ABI_VERSION, flag)
    except Exception:  # an older cuda.bindings without it: the Python launchers
        return 0
    return int(address) if err == driver.CUresult.CUDA_SUCCESS and address else 0
