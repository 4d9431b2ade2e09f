"""VectorAdd: ``out = a + b`` elementwise; the tutorial kernel."""

from __future__ import annotations

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked, launch
from ..errors import SpecError
from ._checks import FLOAT_DTYPES, block_size, count, launch_count, one_of
from ._rows import MAX_GRID_X, cdiv
from .case import TOLERANCE, KernelCase, Output, from_bits, to_bits

__all__ = ["VectorAdd", "reference", "example"]


@kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
class VectorAdd:
    """``out[i] = a[i] + b[i]`` for ``i < n``.

    Kernel parameters (in order): ``a``, ``b``, ``out``: device pointers to ``n``
    elements of ``dtype``, 16-byte aligned; ``n``: u64 element count.

    Each thread adds one 16-byte vector (4 f32 or 8 f16/bf16) with
    ``ld.global.nc.v4.b32`` loads; the last partial vector is added element-wise.
    f16 adds round to nearest (``add.rn.f16x2``); bf16 uses ``add.rn.bf16x2``,
    which needs ``sm_90`` (PTX ISA 7.8).

    Fields:
        dtype (baked): f32, f16 or bf16.
        block (launch): threads per CTA, a multiple of 32 up to 1024.
    """

    dtype: DType = baked(DType.F32, validator=one_of(*FLOAT_DTYPES),
                         doc="element type: f32, f16 or bf16")
    block: int = launch(256, validator=block_size, doc="threads per CTA")

    #: What each pointer parameter points to (docs/writing-specs.md, "Array declarations"):
    #: launches refuse another element type, or an array shorter than n.
    arrays = {"a": "dtype[n]", "b": "dtype[n]", "out": "dtype[n]"}

    @property
    def lanes(self) -> int:
        """Elements per thread (one 16-byte vector)."""
        return self.dtype.vector_lanes

    def grid(self, n: int) -> tuple[int, int, int]:
        """The grid (in CTAs) that covers ``n`` elements with ``block`` threads each
        (one CTA for ``n = 0``: its threads find nothing to add).

        Raises:
            SpecError: ``n`` is negative, not an integer, or needs more than 2^31 - 1 CTAs.
        """
        count = launch_count("VectorAdd", "n", n)
        ctas = max(1, cdiv(count, self.block * self.lanes))
        if count < 0 or ctas > MAX_GRID_X:
            raise SpecError(f"VectorAdd n = {n!r} is invalid: expected 0 to "
                            f"{MAX_GRID_X * self.block * self.lanes} elements with block="
                            f"{self.block} ({MAX_GRID_X} CTAs of {self.block * self.lanes})")
        return (ctas, 1, 1)

    def launch_dims(self, n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``n`` elements (see :meth:`grid`)."""
        return self.grid(n), (self.block, 1, 1)

    def bytes_moved(self, n: int) -> int:
        """Fewest bytes a launch must move: ``a`` and ``b`` read once, ``out`` written once."""
        n = count("VectorAdd.bytes_moved", "n", n)
        return 3 * n * self.dtype.size


def reference(a, b):
    """float64 NumPy reference: ``a + b`` (inputs as float64 arrays of the same shape)."""
    import numpy as np

    return np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)


def example(spec: VectorAdd, rng, n: int = 1_000_003) -> KernelCase:
    """A launch of ``spec`` on ``n`` random elements (odd by default, to reach the tail path).

    The expected output is the exact float64 sum of the (rounded) inputs; the tolerance,
    :data:`~specdsl.kernels.case.TOLERANCE`, covers the one rounding of the sum to ``dtype``.
    """
    import numpy as np

    a = to_bits(rng.standard_normal(n), spec.dtype)
    b = to_bits(rng.standard_normal(n), spec.dtype)
    expected = reference(from_bits(a, spec.dtype), from_bits(b, spec.dtype))
    return KernelCase(
        spec=spec,
        args=(("a", a), ("b", b), ("out", Output((n,), spec.dtype)), ("n", np.uint64(n))),
        grid=spec.grid(n), block=(spec.block, 1, 1),
        expected={"out": expected}, tolerance=TOLERANCE[spec.dtype],
    )
