"""VectorAdd: ``out = a + b`` elementwise; the tutorial kernel."""

from __future__ import annotations

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked, launch
from ._checks import FLOAT_DTYPES, block_size, one_of
from .case import KernelCase, Output, from_bits, to_bits

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

    @property
    def lanes(self) -> int:
        """Elements per thread (one 16-byte vector)."""
        return self.dtype.vector_lanes

    def grid(self, n: int) -> tuple[int, int, int]:
        """The grid (in CTAs) that covers ``n`` elements with ``block`` threads each."""
        per_cta = self.block * self.lanes
        return (max(1, -(-n // per_cta)), 1, 1)


def reference(a, b):
    """float64 NumPy reference: ``a + b`` (inputs as float64 arrays of the same shape)."""
    import numpy as np

    return np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)


def example(spec: VectorAdd, rng, n: int = 1_000_003) -> KernelCase:
    """A launch of ``spec`` on ``n`` random elements (odd by default, to reach the tail path).

    The expected output is the exact float64 sum of the (rounded) inputs; the tolerance
    covers one rounding of the sum to ``dtype``: 1e-6 for f32 (2^-24 unit roundoff),
    1e-3 for f16 (2^-11) and 1e-2 for bf16 (2^-8).
    """
    import numpy as np

    a = to_bits(rng.standard_normal(n), spec.dtype)
    b = to_bits(rng.standard_normal(n), spec.dtype)
    expected = reference(from_bits(a, spec.dtype), from_bits(b, spec.dtype))
    tolerance = {DType.F32: 1e-6, DType.F16: 1e-3, DType.BF16: 1e-2}[spec.dtype]
    return KernelCase(
        spec=spec,
        args=(("a", a), ("b", b), ("out", Output((n,), spec.dtype)), ("n", np.uint64(n))),
        grid=spec.grid(n), block=(spec.block, 1, 1),
        expected={"out": expected}, tolerance=tolerance,
    )
