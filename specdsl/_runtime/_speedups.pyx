# cython: language_level=3, embedsignature=True
"""The launch hot path, compiled: argument checks, cuda.core's ``launch``, the cache hit.

specdsl's reference implementation is plain Python: :mod:`specdsl._runtime.launchers` generates one
check function per ``.entry`` signature, and :meth:`specdsl.Executor.launch` finds the
module and the checked geometry. This extension does the same work in C for what launches
take in a hot loop: an ``int`` in its parameter's range (a pointer's also aligned), a
``float`` in its type's range, a cuda.core ``Buffer`` or a contiguous torch tensor on the
executor's device, and a cache hit on the request, key and geometry of the last launch. Anything else (NumPy
scalars, other array objects, values out of range, a new request) is handed to
the same Python converters and executor methods, so an argument is accepted, converted or
refused with the same message either way; ``tests/test_speedups.py`` checks that the two
agree. ``SPECDSL_PURE_PYTHON=1`` turns this module off (:mod:`specdsl.speedups`).

Why compiled: on an H200 host cuda.core's ``launch`` takes about 5 us, and the Python
checks of a four-argument VectorAdd about 1 us; the launch overhead goals of
``docs/performance.md`` leave 0.75 us. Cython, because it is what cuda.core and CuPy
build their own launch paths with, and its output is plain C against CPython's API.
"""

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

# What specdsl.speedups checks before using this build (bump on any change of the classes'
# constructors or of what Python code reads from them).
INTERFACE = 2

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

    cpdef object fire(self, object args, tuple streams, tuple geometry):
        """Check ``args`` and launch: ``streams`` is ``(handle, cuda.core Stream)``,
        ``geometry`` the checked ``(gx, gy, gz, bx, by, bz, shared_mem, LaunchConfig)``.

        Returns:
            ``None``, or the exception cuda.core raised (the launch failed).

        Raises:
            LaunchError: a wrong argument count or a bad argument.
        """
        if type(args) is not tuple:  # any sequence, as the generated Python function takes
            args = tuple(args)
        arguments = self.arguments(args, streams[0], streams[1], geometry[7])
        try:
            self.core_launch(*arguments)
        except Exception as exc:  # the launch failed: the caller reports it
            return exc
        return None

    def __call__(self, object args, tuple streams, tuple geometry):
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

    def __cinit__(self, CoreLaunch launch, tuple streams, config, on_error):
        self.launch = launch
        self.handle, self.core_stream = streams
        self.config, self.on_error = config, on_error

    def __call__(self, *args):
        arguments = self.launch.arguments(args, self.handle, self.core_stream, self.config)
        try:
            self.launch.core_launch(*arguments)
        except Exception as exc:
            self.on_error(exc, args)


cdef class LaunchPath:
    """The base class of :class:`specdsl.Executor` where this extension is built: its
    ``launch`` is ``Executor.launch`` compiled, with the same signature, checks and errors.

    A launch whose request, key and geometry are those of an earlier launch takes the
    cached module and geometry here; anything else goes through the executor's own Python
    methods (``_lookup``, ``_streams``, ``_geometry_for``, ``_launch_failed``). An executor
    made with ``SPECDSL_PURE_PYTHON=1`` sets ``_pure_python`` and launches through
    ``_launch_python`` instead. Being the base class (not an attribute holding a bound
    method) keeps the executor free of reference cycles and lets subclasses override
    ``launch``.
    """

    # Executor sets these (__init__; _default_streams on opening the device); its Python
    # path reads the same attributes
    cdef public object _last             # (spec, key, module, proven), replaced as one
    cdef public object _default_streams  # (handle, cuda.core Stream) of the default stream
    cdef public long long _launch_hits   # cache hits taken here (added to Executor.stats)
    cdef public bint _pure_python

    def launch(self, spec, *args, grid, block, stream=None, shared_mem=0, key=None):
        if self._pure_python:
            return self._launch_python(spec, *args, grid=grid, block=block, stream=stream,
                                       shared_mem=shared_mem, key=key)
        cdef tuple last = self._last
        if last[0] is spec and last[1] is key and (
                last[3] or not _switch.checking_enabled() or _switch.proof_suspended()):
            module = last[2]
            self._launch_hits += 1
        else:
            module = self._lookup(spec, key)
        cdef tuple streams = self._default_streams if stream is None else self._streams(stream)
        cdef tuple geometry = module.last_geometry
        if not (geometry[0] is grid and geometry[1] is block and geometry[2] is shared_mem):
            geometry = self._geometry_for(module, grid, block, shared_mem)
        fire = module.fire
        if type(fire) is CoreLaunch:
            err = (<CoreLaunch>fire).fire(args, streams, geometry[3])
        else:
            err = fire(args, streams, geometry[3])
        if err:
            self._launch_failed(err, module, geometry[3], streams, args)
