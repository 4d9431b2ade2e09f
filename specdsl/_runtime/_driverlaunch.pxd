# cython: language_level=3
"""Declarations of specdsl._runtime._driverlaunch: the compiled launcher of one kernel, what
it is built from, and the C type of the driver function it calls (see the .pyx)."""

from libc.stdint cimport int64_t

# cuLaunchKernel (CUDA Driver API, "Execution Control"): CUresult is a C enum, CUfunction
# (a CUkernel is passed as one) and CUstream are pointers.
ctypedef int (*LaunchKernel)(void *f, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_mem, void *stream,
                             void **params, void **extra) noexcept nogil

# The numbers of specdsl._runtime.params (INLINE_*, PACK_*) and arraychecks (OP_*).
cdef enum:
    INLINE_NONE = 0     # .b types, array parameters: the converter always
    INLINE_INT = 1      # an int in [low, high] with no bit of misaligned set
    INLINE_POINTER = 2  # INLINE_INT, or a Buffer, tensor or CuPy array of the device
    INLINE_FLOAT = 3    # a float with |x| <= largest
    PACK_INT = 0        # the value's low `size` bytes (two's complement, little endian)
    PACK_F16 = 1
    PACK_F32 = 2
    PACK_F64 = 3
    PACK_BYTES = 4      # an aggregate's bytes, from its converter
    OP_CONST = 0
    OP_PARAM = 1
    OP_GRID = 2
    OP_MUL = 3
    OP_CDIV = 4

cdef enum:
    STACK_BYTES = 1024  # parameter buffers up to this size live on the C stack
    STACK_PARAMS = 64   # as do the per-parameter scratch arrays of this many parameters
    STACK_DEPTH = 16    # an extent program's deepest stack run in C (deeper: Python decides)
    HAVE_UNCHECKED = -2  # a pointer given as an int: no size to check
    HAVE_ASK = -1        # read by the converter: the packer's values() checks its size

cdef struct ParamCheck:
    int inline
    int pack
    int64_t low
    int64_t high          # inclusive
    int64_t misaligned    # alignment - 1 for pointers, else 0
    double largest
    Py_ssize_t offset     # in the parameter buffer
    Py_ssize_t size       # bytes
    Py_ssize_t array      # index into the array checks, or -1

cdef struct ArrayPlan:
    Py_ssize_t index      # the parameter
    int64_t element_size  # bytes
    Py_ssize_t start      # its operations: ops[2 * start ...]
    Py_ssize_t length

cdef struct Scratch:
    char *buffer          # the parameter buffer
    void **pointers       # kernelParams: one per parameter, then NULL
    int64_t *ints         # scalar values, for extent programs
    char *known           # whether ints[i] holds parameter i's value
    int64_t *have         # a declared array's element count, or HAVE_*



cdef class DriverLaunch:
    cdef Py_ssize_t count, size, narrays
    cdef ParamCheck *checks
    cdef ArrayPlan *arrays
    cdef int64_t *ops
    cdef tuple converters, accepted
    cdef list last_dtypes  # per declared array: the last element type object taken
    cdef object values, result, buffer_type, tensor_type, cupy_type, names, device_id
    cdef long long device
    cdef bint read_arrays
    cdef LaunchKernel launch_kernel
    cdef void *function

    cdef bint read_array(self, Py_ssize_t i, object value, int64_t *address,
                         int64_t *have) except -1
    cdef bint takes(self, Py_ssize_t a, object dtype) except -1
    cdef void find_array_types(self)
    cdef int pack_one(self, Py_ssize_t i, object value, object stream,
                      Scratch *scratch) except -1
    cdef int write_float(self, int pack, double d, char *p) except -1
    cdef int64_t required(self, ArrayPlan *plan, Scratch *scratch,
                          const unsigned int *dims) noexcept
    cdef object run(self, tuple args, object stream, const unsigned int *dims, bint launch)
    cpdef object fire(self, object args, object streams, object geometry)


cdef int read_dims(object geometry, unsigned int *dims) except -1
