# cython: language_level=3, embedsignature=True
"""The launch hot path, compiled: argument checks, cuda.core's ``launch``, the cache hit.

specdsl's reference implementation is plain Python: :mod:`specdsl._runtime.launchers`
generates one check function per ``.entry`` signature, and
:class:`specdsl._runtime.launching.Launcher` finds the module and the checked geometry.
This extension does the same work in C for what launches take in a hot loop: an ``int``
in its parameter's range (a pointer's also aligned), a ``float`` in its type's range, a
cuda.core ``Buffer`` or a contiguous torch tensor on the executor's device, and a cache
hit on the request, key and geometry of the last launch. Anything else (NumPy scalars,
other array objects, values out of range, a new request) is handed to the same Python
converters and to the launcher's slow paths, so an argument is accepted, converted or
refused with the same message either way; ``tests/test_speedups.py`` checks that the two
agree. ``SPECDSL_PURE_PYTHON=1`` turns this module off (:mod:`specdsl.speedups`).
``_speedups.pyi`` gives its types.

Why compiled: on an H200 host cuda.core's ``launch`` takes about 5 us, and the Python
checks of a four-argument VectorAdd about 1 us; the launch overhead goals of
``docs/performance.md`` leave 0.75 us. Cython, because it is what cuda.core and CuPy
build their own launch paths with, and its output is plain C against CPython's API.
"""

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.long cimport (PyLong_AsLongLongAndOverflow, PyLong_CheckExact,
                           PyLong_FromLongLong, PyLong_FromUnsignedLong)
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int64_t, uint32_t
from libc.string cimport memcpy

import sys

from specdsl._proof import switch as _switch
from specdsl._runtime.launching import NO_LAUNCH

# What specdsl.speedups checks before using this build (bump on any change of the classes'
# constructors or of what Python code reads from them).
INTERFACE = 3

# Field positions in the named tuples the launcher's slow paths return, read as the tuples
# they are (no attribute lookup): launching.LastLaunch, streams.Streams,
# geometry.LastGeometry and geometry.LaunchGeometry; FIELDS lets a test check them.
cdef enum:
    LAST_SPEC = 0
    LAST_KEY = 1
    LAST_MODULE = 2
    LAST_PROVEN = 3
    STREAMS_HANDLE = 0
    STREAMS_CORE = 1
    MEMO_GRID = 0
    MEMO_BLOCK = 1
    MEMO_SHARED = 2
    MEMO_CHECKED = 3
    GEOMETRY_CONFIG = 7

FIELDS = {
    ("LastLaunch", "spec"): LAST_SPEC, ("LastLaunch", "key"): LAST_KEY,
    ("LastLaunch", "module"): LAST_MODULE, ("LastLaunch", "proven"): LAST_PROVEN,
    ("Streams", "handle"): STREAMS_HANDLE, ("Streams", "core"): STREAMS_CORE,
    ("LastGeometry", "grid"): MEMO_GRID, ("LastGeometry", "block"): MEMO_BLOCK,
    ("LastGeometry", "shared_mem"): MEMO_SHARED, ("LastGeometry", "checked"): MEMO_CHECKED,
    ("LaunchGeometry", "config"): GEOMETRY_CONFIG,
}

# What a parameter takes inline, anything else going through its Python converter: the
# numbers of specdsl._runtime.params.INLINE_* (ArgumentPacker.inline_check decides them).
cdef enum Inline:
    INLINE_NONE = 0     # .b types, array parameters: the converter always
    INLINE_INT = 1      # an int in [low, high] with no bit of misaligned set
    INLINE_POINTER = 2  # INLINE_INT, or a cuda.core Buffer or contiguous torch tensor of the device
    INLINE_FLOAT = 3    # a float with |x| <= largest, passed as its bit pattern

cdef struct ParamCheck:
    int inline
    int bits
    int64_t low
    int64_t high          # inclusive
    int64_t misaligned    # alignment - 1 for pointers, else 0
    double largest


cdef class CoreLaunch:
    """Checks one kernel's arguments and launches it through cuda.core's ``launch``.

    The compiled twin of :func:`specdsl._runtime.launchers.core_launcher` (see there
    for how values reach cuda.core). Built from a packer's :meth:`core_plan`.

    Args:
        plan: :meth:`~specdsl._runtime.params.ArgumentPacker.core_plan`: one ``(inline, bits,
            low, high, misaligned, largest, converter, post)`` per ``.param``; ``post``
            (``None``, a bit-pattern function or the 64-bit wrap) turns what
            ``converter(value, stream)`` returns into what cuda.core takes.
        values: the packer's ``values`` (explains a wrong argument count).
        core_launch: cuda.core's ``launch``.
        kernel: the cuda.core ``Kernel``.
        buffer_type: cuda.core's ``Buffer`` class, or ``None``.
        tensor_type: ``torch.Tensor``, or ``None``.
        device_id: the executor's device ordinal (``None``: Buffers and tensors are read
            by the converter).
    """

    cdef Py_ssize_t count
    cdef ParamCheck *checks
    cdef tuple converters, posts
    cdef object values, core_launch, kernel, buffer_type, tensor_type, device_id
    cdef bint read_arrays  # Buffers and tensors inline (needs a device to check them against)

    def __cinit__(self, list plan, values, core_launch, kernel, buffer_type, tensor_type,
                  device_id):
        self.count = len(plan)
        self.checks = <ParamCheck *>PyMem_Malloc(max(self.count, 1) * sizeof(ParamCheck))
        if self.checks == NULL:
            raise MemoryError()
        cdef Py_ssize_t i
        for i in range(self.count):
            inline, bits, low, high, misaligned, largest, _, _ = plan[i]
            self.checks[i].inline = inline
            self.checks[i].bits = bits
            self.checks[i].low = low
            self.checks[i].high = high
            self.checks[i].misaligned = misaligned
            self.checks[i].largest = largest
        self.converters = tuple(step[6] for step in plan)
        self.posts = tuple(step[7] for step in plan)
        self.values, self.core_launch, self.kernel = values, core_launch, kernel
        self.buffer_type, self.tensor_type = buffer_type, tensor_type
        self.device_id = device_id
        self.read_arrays = device_id is not None

    def __dealloc__(self):
        PyMem_Free(self.checks)

    cdef object device_address(self, object value):
        """The address of a cuda.core Buffer, or a contiguous torch tensor, of this device,
        as an int; ``None`` for anything else (the converter decides and explains)."""
        if not self.read_arrays:
            return None
        kind = type(value)
        if self.tensor_type is None and kind is not self.buffer_type:
            torch = sys.modules.get("torch")  # imported after this kernel was loaded
            if torch is not None:
                self.tensor_type = getattr(torch, "Tensor", None)
        try:
            if kind is self.buffer_type:
                if value.device_id == self.device_id:
                    return int(value.handle)
            elif kind is self.tensor_type:
                if value.get_device() == self.device_id and value.is_contiguous():
                    address = value.data_ptr()
                    if PyLong_CheckExact(address):
                        return address
        except Exception:  # a closed Buffer's properties raise
            pass
        return None

    cdef tuple arguments(self, tuple args, object stream, object core_stream, object config):
        """``(core_stream, config, kernel, v0, ..., vN)``: the checked values, as cuda.core takes them."""
        cdef Py_ssize_t n = self.count, i
        cdef ParamCheck *check
        cdef object value, out
        cdef long long x
        cdef int overflow
        cdef double d
        cdef float f
        cdef uint32_t u32
        cdef int64_t i64
        if len(args) != n:
            self.values(args, stream)  # raises, naming the parameters
            raise RuntimeError("unreachable: values() accepted a wrong argument count")
        cdef tuple result = PyTuple_New(n + 3)
        for i, value in enumerate((core_stream, config, self.kernel)):
            Py_INCREF(value)
            PyTuple_SET_ITEM(result, i, value)
        for i in range(n):
            check = &self.checks[i]
            value = args[i]
            out = None
            if check.inline == INLINE_INT or check.inline == INLINE_POINTER:
                if PyLong_CheckExact(value):
                    x = PyLong_AsLongLongAndOverflow(value, &overflow)
                    if not overflow and check.low <= x <= check.high and \
                            not (x & check.misaligned):
                        out = value
                elif check.inline == INLINE_POINTER:
                    out = self.device_address(value)
                    if out is not None:
                        x = PyLong_AsLongLongAndOverflow(out, &overflow)
                        if overflow or x <= 0 or x > check.high or (x & check.misaligned):
                            out = None
            elif check.inline == INLINE_FLOAT:
                if PyFloat_CheckExact(value):
                    d = PyFloat_AS_DOUBLE(value)
                    if -check.largest <= d <= check.largest:
                        if check.bits == 32:  # round to nearest, as struct's "<f" does
                            f = <float>d
                            memcpy(&u32, &f, 4)
                            out = PyLong_FromUnsignedLong(u32)
                        elif check.bits == 64:
                            memcpy(&i64, &d, 8)
                            out = PyLong_FromLongLong(i64)
                        else:  # f16: Python's own binary16 rounding
                            out = self.posts[i](value)
            if out is None:
                out = self.converters[i](value, stream)
                post = self.posts[i]
                if post is not None:
                    out = post(out)
            Py_INCREF(out)
            PyTuple_SET_ITEM(result, i + 3, out)
        return result

    cpdef object fire(self, object args, object streams, object geometry):
        """Check ``args`` and launch: ``streams`` is a
        :class:`~specdsl._runtime.streams.Streams`, ``geometry`` a
        :class:`~specdsl._runtime.geometry.LaunchGeometry` (named tuples: read here as the
        tuples they are).

        Returns:
            ``None``, or the exception cuda.core raised (the launch failed).

        Raises:
            LaunchError: a wrong argument count or a bad argument.
        """
        if type(args) is not tuple:  # any sequence, as the generated Python function takes
            args = tuple(args)
        arguments = self.arguments(args, (<tuple>streams)[STREAMS_HANDLE],
                                   (<tuple>streams)[STREAMS_CORE],
                                   (<tuple>geometry)[GEOMETRY_CONFIG])
        try:
            self.core_launch(*arguments)
        except Exception as exc:  # the launch failed: the caller reports it
            return exc
        return None

    def __call__(self, object args, object streams, object geometry):
        return self.fire(args, streams, geometry)


cdef class BoundCoreLaunch:
    """``bound(*args)``: a :class:`CoreLaunch` with its stream and ``LaunchConfig`` fixed.

    The compiled twin of :func:`specdsl._runtime.launchers.bound_core_launcher`;
    calls ``on_error(exception, args)`` when cuda.core's launch fails. ``module``,
    ``stream``, ``grid``, ``block`` and ``shared_mem`` are set by ``Executor.bind``.
    """

    cdef CoreLaunch launch
    cdef object handle, core_stream, config, on_error
    cdef public object module, stream, grid, block, shared_mem

    def __cinit__(self, CoreLaunch launch, object streams, config, on_error):
        self.launch = launch
        self.handle = (<tuple>streams)[STREAMS_HANDLE]
        self.core_stream = (<tuple>streams)[STREAMS_CORE]
        self.config, self.on_error = config, on_error

    def __call__(self, *args):
        arguments = self.launch.arguments(args, self.handle, self.core_stream, self.config)
        try:
            self.launch.core_launch(*arguments)
        except Exception as exc:
            self.on_error(exc, args)


@cython.binding(False)  # a plain method descriptor: the cheapest call from Python
cdef class LaunchPath:
    """``Executor.launch``, compiled: the hot path over a
    :class:`~specdsl._runtime.launching.Launcher`'s slow paths.

    A launch whose request, key and geometry are the objects of the last launch (the
    request's module and its last geometry) is checked and launched here; anything else
    goes through the launcher's slow paths (``lookup``, ``streams``, ``geometry``,
    ``failed``), which return the named tuples read here. An executor holds one and binds
    its ``launch`` to this object's (see ``specdsl/_runtime/executor.py``).

    Args:
        launcher: the executor's :class:`~specdsl._runtime.launching.Launcher`.
    """

    cdef object launcher          # the slow paths
    cdef object last              # LastLaunch, replaced as one object
    cdef object default_streams   # Streams of the device's default stream
    cdef readonly long long hits  # launches that took the last request's module here

    def __cinit__(self, launcher):
        self.launcher = launcher
        self.last = NO_LAUNCH
        self.default_streams = launcher.default_streams
        self.hits = 0

    def launch(self, spec, *args, grid, block, stream=None, shared_mem=0, key=None):
        """:meth:`specdsl.Executor.launch` compiled (see there: same checks, same errors)."""
        cdef tuple last = <tuple>self.last
        if last[LAST_SPEC] is spec and last[LAST_KEY] is key and (
                last[LAST_PROVEN] or not _switch.checking_enabled()
                or _switch.proof_suspended()):
            module = last[LAST_MODULE]
            self.hits += 1
        else:
            self.last = self.launcher.lookup(spec, key)
            module = (<tuple>self.last)[LAST_MODULE]
        streams = self.default_streams if stream is None else self.launcher.streams(stream)
        cdef tuple memo = <tuple>module.last_geometry
        if not (memo[MEMO_GRID] is grid and memo[MEMO_BLOCK] is block
                and memo[MEMO_SHARED] is shared_mem):
            memo = <tuple>self.launcher.geometry(module, grid, block, shared_mem)
        geometry = memo[MEMO_CHECKED]
        fire = module.fire
        if type(fire) is CoreLaunch:
            err = (<CoreLaunch>fire).fire(args, streams, geometry)
        else:
            err = fire(args, streams, geometry)
        if err:
            self.launcher.failed(err, module, geometry, streams, args)
