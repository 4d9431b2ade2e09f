# cython: language_level=3, embedsignature=True
"""The launch hot path, compiled: the cache hit, the stream, and the module's DriverLaunch.

specdsl's reference implementation is plain Python: :class:`specdsl._runtime.launching.Launcher`
finds the module, the stream and the checked geometry, and :mod:`specdsl._runtime.launchers`
generates each kernel's checks. :class:`LaunchPath` does the launcher's part in C for a
launch that repeats the last request, key and geometry (the default stream, a stream object
checked before, or torch's current stream read as a handle), then calls the module's
:class:`~specdsl._runtime._driverlaunch.DriverLaunch` (checks, packing, ``cuLaunchKernel``);
anything else goes through the launcher's slow paths, which return the named tuples read
here. :class:`BoundLaunch` is ``Executor.bind``'s launcher. ``SPECDSL_PURE_PYTHON=1`` turns
this module off (:mod:`specdsl.speedups`); ``_speedups.pyi`` gives its types.
"""

cimport cython
from libc.string cimport memcpy

from specdsl._runtime._driverlaunch cimport DriverLaunch, read_dims

from specdsl._proof import switch as _switch
from specdsl._runtime.launching import NO_LAUNCH
from specdsl._runtime.streams import TORCH_CURRENT_STREAM, Streams, torch_current_stream

# What specdsl.speedups checks before using this build (bump on any change of the classes'
# constructors or of what Python code reads from them).
INTERFACE = 4

# The launcher class the executor builds each module's launcher with, read from this module.
globals()["DriverLaunch"] = DriverLaunch

# Field positions in the named tuples the launcher's slow paths return, read as the tuples
# they are (no attribute lookup): launching.LastLaunch, streams.Streams,
# geometry.LastGeometry; FIELDS lets a test check them.
cdef enum:
    LAST_SPEC = 0
    LAST_KEY = 1
    LAST_MODULE = 2
    LAST_PROVEN = 3
    STREAMS_HANDLE = 0
    MEMO_GRID = 0
    MEMO_BLOCK = 1
    MEMO_SHARED = 2
    MEMO_CHECKED = 3

FIELDS = {
    ("LastLaunch", "spec"): LAST_SPEC, ("LastLaunch", "key"): LAST_KEY,
    ("LastLaunch", "module"): LAST_MODULE, ("LastLaunch", "proven"): LAST_PROVEN,
    ("Streams", "handle"): STREAMS_HANDLE,
    ("LastGeometry", "grid"): MEMO_GRID, ("LastGeometry", "block"): MEMO_BLOCK,
    ("LastGeometry", "shared_mem"): MEMO_SHARED, ("LastGeometry", "checked"): MEMO_CHECKED,
}


cdef class BoundLaunch:
    """``bound(*args)``: a :class:`DriverLaunch` with its stream and geometry fixed.

    The compiled twin of :func:`specdsl._runtime.launchers.bound_driver_launcher`; calls
    ``on_error(error, args)`` when the driver returns an error. With ``current`` (torch's
    current-stream reader, for ``stream=TORCH_CURRENT_STREAM``) the stream is read on
    each call, as ``current(device)``. ``module``, ``stream``, ``grid``, ``block`` and
    ``shared_mem`` are set by ``Executor.bind``.
    """

    cdef DriverLaunch launch
    cdef object handle, on_error, current, device
    cdef unsigned int dims[7]
    cdef public object module, stream, grid, block, shared_mem

    def __cinit__(self, DriverLaunch launch, object handle, object geometry, on_error,
                  current=None, device=None):
        self.launch, self.handle, self.on_error = launch, handle, on_error
        self.current, self.device = current, device
        read_dims(geometry, self.dims)

    def __call__(self, *args):
        handle = self.handle if self.current is None else self.current(self.device)
        err = self.launch.run(args, handle, self.dims, True)
        if err is not None:
            self.on_error(err, args)


@cython.binding(False)  # a plain method descriptor: the cheapest call from Python
cdef class LaunchPath:
    """``Executor.launch``, compiled: the hot path over a
    :class:`~specdsl._runtime.launching.Launcher`'s slow paths.

    A launch whose request, key and geometry are the objects of the last launch (the
    request's module and its last geometry) is checked and launched here; anything else
    goes through the launcher's slow paths (``lookup``, ``streams``, ``geometry``,
    ``failed``), which return the named tuples read here. ``stream=TORCH_CURRENT_STREAM``
    reads torch's current stream of the executor's device as a handle, with no stream
    object made. An executor holds one and binds its ``launch`` to this object's (see
    ``specdsl/_runtime/executor.py``).

    Args:
        launcher: the executor's :class:`~specdsl._runtime.launching.Launcher`.
    """

    cdef object launcher          # the slow paths
    cdef object last              # LastLaunch, replaced as one object
    cdef object default_streams   # Streams of the device's default stream
    cdef object default_handle
    cdef object current, device   # torch's current-stream reader (once asked for), device
    cdef object last_geometry     # the LaunchGeometry whose dims are cached
    cdef unsigned int dims[7]
    cdef readonly long long hits  # launches that took the last request's module here

    def __cinit__(self, launcher):
        self.launcher = launcher
        self.last = NO_LAUNCH
        self.default_streams = launcher.default_streams
        self.default_handle = (<tuple>self.default_streams)[STREAMS_HANDLE]
        self.device = launcher.device_id
        self.hits = 0

    def launch(self, spec, *args, grid, block, stream=None, shared_mem=0, key=None):
        """:meth:`specdsl.Executor.launch` compiled (see there: same checks, same errors)."""
        cdef tuple last = <tuple>self.last
        cdef unsigned int dims[7]
        if last[LAST_SPEC] is spec and last[LAST_KEY] is key and (
                last[LAST_PROVEN] or not _switch.checking_enabled()
                or _switch.proof_suspended()):
            module = last[LAST_MODULE]
            self.hits += 1
        else:
            self.last = self.launcher.lookup(spec, key)
            module = (<tuple>self.last)[LAST_MODULE]
        streams = None
        if stream is None:
            streams, handle = self.default_streams, self.default_handle
        elif stream is TORCH_CURRENT_STREAM:
            if self.current is None:
                self.current = torch_current_stream()
            handle = self.current(self.device)
        else:
            streams = self.launcher.streams(stream)
            handle = (<tuple>streams)[STREAMS_HANDLE]
        cdef tuple memo = <tuple>module.last_geometry
        if not (memo[MEMO_GRID] is grid and memo[MEMO_BLOCK] is block
                and memo[MEMO_SHARED] is shared_mem):
            memo = <tuple>self.launcher.geometry(module, grid, block, shared_mem)
        geometry = memo[MEMO_CHECKED]
        fire = module.fire
        if type(fire) is DriverLaunch:
            # a local copy: another thread may replace the cached dims while this launch
            # runs a Python converter
            if geometry is not self.last_geometry:
                read_dims(geometry, self.dims)
                self.last_geometry = geometry
            memcpy(dims, self.dims, sizeof(dims))
            err = (<DriverLaunch>fire).run(args, handle, dims, True)
        else:
            if streams is None:
                streams = Streams(handle, self.launcher.streams(stream)[1])
            err = fire(args, streams, geometry)
        if err:  # None, CUDA_SUCCESS (0) on the Python driver path, or the error
            if streams is None:
                streams = self.launcher.streams(stream)
            self.launcher.failed(err, module, geometry, streams, args, spec)
