# cython: language_level=3, embedsignature=True
"""The compiled launcher of one kernel: argument checks, packing, and cuLaunchKernel itself.

:class:`DriverLaunch` does in C what :mod:`specdsl._runtime.launchers` generates in Python
for one ``.entry`` signature, for what launches take in a hot loop: an ``int`` in its
parameter's range (a pointer's also aligned), a ``float`` in its type's range, a cuda.core
``Buffer``, a contiguous torch tensor or a CuPy array on the executor's device (a declared
array's element type and size checked too). It packs the checked values into a parameter
buffer on the C stack (one per call: threads never share one) and calls the driver's
``cuLaunchKernel`` once. Anything else (NumPy scalars, other array objects, values out of
range, a size it cannot vouch for) goes through the same Python converters and the packer's
own ``values``, so an argument is accepted, packed or refused with the same bytes and the
same message on either path (``tests/test_speedups.py``).

Why it calls the driver itself: on an H200 host a ``cuLaunchKernel`` called from C costs
about 4.5 us, cuda.core's generic ``launch`` about 2 us more (docs/performance.md), and the
checks here a few hundred nanoseconds: a checked launch can cost less than cuda.core's
unchecked one.

How it reaches the driver: through the address of ``cuLaunchKernel`` the driver seam gives
(:attr:`specdsl._runtime.driver.Driver.launch_kernel_address`: cuda.bindings'
``cuGetProcAddress``, at run time), called through the C function type in the ``.pxd``.
Not through cuda-python's ``cydriver``: its ``.pxd`` includes CUDA's ``cuda.h``, which a
machine without the CUDA toolkit lacks, and this extension must build wherever a C compiler
is (it is optional: without one, the plain-Python path runs).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_AsDouble, PyFloat_CheckExact
from cpython.long cimport (PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLong,
                           PyLong_AsUnsignedLongLongMask, PyLong_AsVoidPtr,
                           PyLong_CheckExact)
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.tuple cimport PyTuple_GET_SIZE
from libc.stdint cimport INT64_MAX, int64_t, uint64_t
from libc.string cimport memcpy

import sys

cdef extern from "Python.h":
    # IEEE 754 binary16/32/64, little endian: what struct's "<e", "<f", "<d" pack.
    int PyFloat_Pack2(double x, char *p, int le) except -1
    int PyFloat_Pack4(double x, char *p, int le) except -1
    int PyFloat_Pack8(double x, char *p, int le) except -1


cdef inline void write_int(char *p, uint64_t value, Py_ssize_t size) noexcept:
    memcpy(p, &value, size)  # little endian: the low bytes first (CUDA hosts are)


cdef class DriverLaunch:
    """Checks one kernel's arguments, packs them and calls ``cuLaunchKernel``.

    The compiled twin of :func:`specdsl._runtime.launchers.driver_launcher` (and of
    :func:`~specdsl._runtime.launchers.core_launcher`, whose cuda.core launch packs the
    same bytes). Built from a packer's :meth:`driver_plan`.

    Args:
        plan: :meth:`~specdsl._runtime.params.ArgumentPacker.driver_plan`.
        values: the packer's ``values`` (explains a wrong argument count; decides any size
            the inline checks cannot vouch for).
        size: the parameter buffer's size in bytes.
        launch_kernel: the address of the driver's ``cuLaunchKernel``.
        function: the kernel's ``CUkernel`` handle.
        result: turns a ``CUresult`` code into the driver's error object.
        buffer_type: cuda.core's ``Buffer`` class, or ``None``.
        tensor_type: ``torch.Tensor``, or ``None``.
        element_names: ``{element type object: name}``
            (:data:`specdsl._runtime.arraychecks.ELEMENT_NAMES`).
        device_id: the executor's device ordinal (``None``: arrays are read by the
            converters).
    """

    def __cinit__(self, tuple plan, values, Py_ssize_t size, launch_kernel, function,
                  result, buffer_type, tensor_type, element_names, device_id):
        params, arrays = plan
        self.count, self.narrays, self.size = len(params), len(arrays), size
        cdef Py_ssize_t nops = sum(len(array[2]) for array in arrays)
        self.checks = <ParamCheck *>PyMem_Malloc(max(self.count, 1) * sizeof(ParamCheck))
        self.arrays = <ArrayPlan *>PyMem_Malloc(max(self.narrays, 1) * sizeof(ArrayPlan))
        self.ops = <int64_t *>PyMem_Malloc(max(2 * nops, 1) * sizeof(int64_t))
        if self.checks == NULL or self.arrays == NULL or self.ops == NULL:
            raise MemoryError()
        cdef Py_ssize_t i, start = 0
        for i in range(self.count):
            inline, low, high, misaligned, largest, offset, nbytes, pack, _ = params[i]
            self.checks[i] = ParamCheck(inline, pack, low, high, misaligned, largest, offset,
                                        nbytes, -1)
        for i in range(self.narrays):
            index, element_size, program, _ = arrays[i]
            self.checks[index].array = i
            self.arrays[i] = ArrayPlan(index, element_size, start, len(program))
            for op, operand in program:
                self.ops[2 * start] = op
                # a constant past int64 (never a real shape) is left to Python: -1 asks
                self.ops[2 * start + 1] = operand if operand <= INT64_MAX else -1
                start += 1
        self.converters = tuple(param[8] for param in params)
        self.accepted = tuple(array[3] for array in arrays)
        self.last_dtypes = [None] * self.narrays
        self.values, self.result = values, result
        self.launch_kernel = <LaunchKernel><size_t>launch_kernel
        self.function = <void *><size_t>function
        self.buffer_type, self.tensor_type, self.cupy_type = buffer_type, tensor_type, None
        self.names, self.device_id = element_names, device_id
        self.read_arrays = device_id is not None
        self.device = device_id if device_id is not None else -1

    def __dealloc__(self):
        PyMem_Free(self.checks)
        PyMem_Free(self.arrays)
        PyMem_Free(self.ops)

    cdef bint read_array(self, Py_ssize_t i, object value, int64_t *address,
                         int64_t *have) except -1:
        """Read a Buffer, contiguous torch tensor or CuPy array of this device: its
        address, and for a declared array its size in elements (its element type taken).
        False for anything else (the converter decides and explains)."""
        if not self.read_arrays:
            return False
        cdef Py_ssize_t a = self.checks[i].array
        cdef int overflow
        kind = type(value)
        if kind is not self.buffer_type and kind is not self.tensor_type and \
                kind is not self.cupy_type:
            if self.tensor_type is not None and self.cupy_type is not None:
                return False
            self.find_array_types()  # torch or CuPy imported since: look again
            if kind is not self.tensor_type and kind is not self.cupy_type:
                return False
        try:
            if kind is self.buffer_type:
                if value.device_id != self.device_id:
                    return False
                pointer = value.handle
                if a >= 0:
                    have[0] = <int64_t>value.size // self.arrays[a].element_size
            elif kind is self.tensor_type:
                if value.get_device() != self.device or not value.is_contiguous():
                    return False
                if a >= 0:
                    if not self.takes(a, value.dtype):
                        return False
                    have[0] = value.numel()
                pointer = value.data_ptr()
            elif kind is self.cupy_type:
                if value.device.id != self.device or not value.flags.c_contiguous:
                    return False
                if a >= 0:
                    if not self.takes(a, value.dtype):
                        return False
                    have[0] = value.size
                pointer = value.data.ptr
            else:
                return False
        except Exception:  # a closed Buffer's properties raise: the converter explains
            return False
        if not PyLong_CheckExact(pointer):
            pointer = int(pointer)  # a cuda.core handle object
        address[0] = PyLong_AsLongLongAndOverflow(pointer, &overflow)
        return not overflow

    cdef bint takes(self, Py_ssize_t a, object dtype) except -1:
        """Whether declared array ``a`` takes elements of type object ``dtype`` (the last
        one taken is compared by identity; a new one is looked up by name)."""
        if dtype is self.last_dtypes[a]:
            return True
        name = self.names.get(dtype)
        if name is None or name not in <frozenset>self.accepted[a]:
            return False  # not named yet, or refused: the converter names and decides
        self.last_dtypes[a] = dtype
        return True

    cdef void find_array_types(self):
        """torch.Tensor and cupy.ndarray, once their modules are imported (possibly after
        this kernel was loaded)."""
        if self.tensor_type is None:
            torch = sys.modules.get("torch")
            if torch is not None:
                self.tensor_type = getattr(torch, "Tensor", None)
        if self.cupy_type is None:
            cupy = sys.modules.get("cupy")
            if cupy is not None:
                self.cupy_type = getattr(cupy, "ndarray", None)

    cdef int pack_one(self, Py_ssize_t i, object value, object stream,
                      Scratch *scratch) except -1:
        """Check argument ``i`` and write it into the parameter buffer."""
        cdef ParamCheck *check = &self.checks[i]
        cdef char *p = scratch.buffer + check.offset
        cdef long long x
        cdef int64_t address
        cdef int overflow
        cdef double d
        scratch.known[i] = 0
        scratch.have[i] = HAVE_UNCHECKED
        if check.inline == INLINE_INT or check.inline == INLINE_POINTER:
            if PyLong_CheckExact(value):
                x = PyLong_AsLongLongAndOverflow(value, &overflow)
                if not overflow and check.low <= x <= check.high and not (x & check.misaligned):
                    write_int(p, <uint64_t>x, check.size)
                    scratch.ints[i], scratch.known[i] = x, 1
                    return 0
            elif check.inline == INLINE_POINTER and \
                    self.read_array(i, value, &address, &scratch.have[i]):
                if 0 < address <= check.high and not (address & check.misaligned):
                    write_int(p, <uint64_t>address, check.size)
                    return 0
        elif check.inline == INLINE_FLOAT and PyFloat_CheckExact(value):
            d = PyFloat_AS_DOUBLE(value)
            if -check.largest <= d <= check.largest:
                self.write_float(check.pack, d, p)
                return 0
        # the converter accepts and converts, or raises the LaunchError
        out = self.converters[i](value, stream)
        if check.array >= 0:
            scratch.have[i] = HAVE_ASK
        if check.pack == PACK_INT:
            write_int(p, PyLong_AsUnsignedLongLongMask(out), check.size)
            x = PyLong_AsLongLongAndOverflow(out, &overflow)
            if not overflow:
                scratch.ints[i], scratch.known[i] = x, 1
        elif check.pack == PACK_BYTES:
            memcpy(p, PyBytes_AS_STRING(out), check.size)  # its converter gave exactly size
        else:
            self.write_float(check.pack, PyFloat_AsDouble(out), p)
        return 0

    cdef int write_float(self, int pack, double d, char *p) except -1:
        if pack == PACK_F32:
            PyFloat_Pack4(d, p, 1)
        elif pack == PACK_F64:
            PyFloat_Pack8(d, p, 1)
        else:
            PyFloat_Pack2(d, p, 1)
        return 0

    cdef int64_t required(self, ArrayPlan *plan, Scratch *scratch,
                          const unsigned int *dims) noexcept:
        """The element count declared array ``plan`` touches in this launch, or -1 where
        C cannot tell (a value it lacks, a negative one, an overflow): Python decides."""
        cdef int64_t stack[STACK_DEPTH]
        cdef Py_ssize_t depth = 0, k
        cdef int64_t op, operand, left, right
        for k in range(plan.start, plan.start + plan.length):
            op, operand = self.ops[2 * k], self.ops[2 * k + 1]
            if op == OP_MUL or op == OP_CDIV:
                right, left = stack[depth - 1], stack[depth - 2]
                depth -= 1
                if op == OP_MUL:
                    if left != 0 and right > INT64_MAX // left:
                        return -1
                    stack[depth - 1] = left * right
                else:
                    stack[depth - 1] = left // right + (left % right != 0) if right else 0
                continue
            if depth == STACK_DEPTH:
                return -1
            if op == OP_CONST:
                if operand < 0:
                    return -1
                stack[depth] = operand
            elif op == OP_PARAM:
                if not scratch.known[operand] or scratch.ints[operand] < 0:
                    return -1
                stack[depth] = scratch.ints[operand]
            else:
                stack[depth] = dims[operand]
            depth += 1
        return stack[0]

    cdef object run(self, tuple args, object stream, const unsigned int *dims, bint launch):
        """Check and pack ``args``; launch with ``dims`` (grid, block, shared memory) on
        ``stream`` (a handle int), returning ``None`` or the driver's error; or, without
        ``launch``, return the parameter buffer's bytes."""
        cdef Py_ssize_t n = self.count, i, a
        if PyTuple_GET_SIZE(args) != n:
            self.values(args, stream)  # raises, naming the parameters
            raise RuntimeError("unreachable: values() accepted a wrong argument count")
        cdef char stack_buffer[STACK_BYTES + 8]
        cdef void *stack_pointers[STACK_PARAMS + 1]
        cdef int64_t stack_ints[STACK_PARAMS]
        cdef int64_t stack_have[STACK_PARAMS]
        cdef char stack_known[STACK_PARAMS]
        cdef Scratch scratch  # fields set one by one: a struct literal would copy the arrays
        cdef char *heap = NULL
        cdef int err
        cdef int64_t need
        cdef void *handle
        scratch.buffer, scratch.pointers = stack_buffer, stack_pointers
        scratch.ints, scratch.known, scratch.have = stack_ints, stack_known, stack_have
        if n > STACK_PARAMS or self.size > STACK_BYTES:
            heap = <char *>PyMem_Malloc(self.size + 8 + (n + 1) * sizeof(void *)
                                        + n * (2 * sizeof(int64_t) + 1))
            if heap == NULL:
                raise MemoryError()
            scratch.pointers = <void **>heap
            scratch.ints = <int64_t *>(heap + (n + 1) * sizeof(void *))
            scratch.have = scratch.ints + n
            scratch.buffer = <char *>(scratch.have + n)
            scratch.known = scratch.buffer + self.size + 8
        try:
            for i in range(n):
                self.pack_one(i, args[i], stream, &scratch)
            for a in range(self.narrays):
                i = self.arrays[a].index
                if scratch.have[i] == HAVE_UNCHECKED:
                    continue
                need = self.required(&self.arrays[a], &scratch, dims) \
                    if scratch.have[i] != HAVE_ASK else -1
                if need < 0 or need > scratch.have[i]:
                    self.values(args, stream, (dims[0], dims[1], dims[2]))  # refuses, or accepts
                    break
            if not launch:
                return PyBytes_FromStringAndSize(scratch.buffer, self.size)
            for i in range(n):
                scratch.pointers[i] = scratch.buffer + self.checks[i].offset
            scratch.pointers[n] = NULL
            handle = PyLong_AsVoidPtr(stream)
            with nogil:
                err = self.launch_kernel(self.function, dims[0], dims[1], dims[2], dims[3],
                                         dims[4], dims[5], dims[6], handle, scratch.pointers,
                                         NULL)
            return self.result(err) if err else None
        finally:
            PyMem_Free(heap)

    cpdef object fire(self, object args, object streams, object geometry):
        """Check ``args`` and launch: ``streams`` is a
        :class:`~specdsl._runtime.streams.Streams`, ``geometry`` a
        :class:`~specdsl._runtime.geometry.LaunchGeometry` (read as the tuples they are).

        Returns:
            ``None``, or the driver's error (the launch failed).

        Raises:
            LaunchError: a wrong argument count or a bad argument.
        """
        cdef unsigned int dims[7]
        read_dims(geometry, dims)
        if type(args) is not tuple:  # any sequence, as the generated Python function takes
            args = tuple(args)
        return self.run(args, (<tuple>streams)[0], dims, True)  # Streams.handle

    def __call__(self, object args, object streams, object geometry):
        return self.fire(args, streams, geometry)

    def pack(self, args, stream=0, grid=(1, 1, 1)):
        """The parameter buffer the driver would be given for ``args``, as ``bytes``,
        through the same checks and packing as a launch, without launching (for tests).

        Raises:
            LaunchError: as a launch.
        """
        cdef unsigned int dims[7]
        read_dims((*grid, 1, 1, 1, 0), dims)
        return self.run(tuple(args), stream, dims, False)


cdef int read_dims(object geometry, unsigned int *dims) except -1:
    """The first seven items of a LaunchGeometry (grid, block, shared memory), as C ints."""
    cdef Py_ssize_t i
    for i in range(7):
        dims[i] = PyLong_AsUnsignedLong((<tuple>geometry)[i])
    return 0
