"""SiluMul: the SwiGLU gate, ``out = silu(x[..., :d]) * x[..., d:]``."""

from __future__ import annotations

from typing import Any

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked, launch
from ..errors import SpecError
from ._checks import FLOAT_DTYPES, block_size, count, in_range, launch_count, one_of
from ._rows import cdiv
from ._streaming import L1_NO_ALLOCATE_DOC
from .case import TOLERANCE, KernelCase, Output, from_bits, to_bits

__all__ = ["SiluMul", "suggested_geometry", "FEW_TOKENS", "reference", "example"]

#: Largest flat vector index the kernel's u32 index math handles.
_MAX_VECTORS = 2**31

#: Below this many tokens a launch is latency-bound, and :func:`suggested_geometry` gives
#: each thread one vector in 128-thread CTAs.
FEW_TOKENS = 1024


def suggested_geometry(tokens: int) -> tuple[int, int]:
    """``(unroll, block)`` for a launch over ``tokens`` rows: ``(1, 128)`` below
    :data:`FEW_TOKENS`, where each thread's shorter chain (one load of each half, then the
    math) was about 0.2 us faster on the H200 (docs/kernels/silu_mul.md, "Earlier readings");
    else the defaults ``(2, 256)``, at a copy's speed from 4096 tokens.

    Raises:
        TypeError: ``tokens`` is not an int (a NumPy integer is one).
        ValueError: ``tokens`` is negative.
    """
    return (1, 128) if count("suggested_geometry", "tokens", tokens) < FEW_TOKENS else (2, 256)


def _d_check(instance: Any, attribute: Any, value: int) -> None:
    lanes = instance.dtype.vector_lanes
    if value <= 0 or value % lanes:
        raise ValueError(f"expected a positive multiple of {lanes} (one 16-byte vector of "
                         f"{instance.dtype}), so that every row starts 16-byte aligned")
    if value > 2**20:
        raise ValueError("expected at most 1048576 elements per half row")


@kernel_spec(template="silu_mul.ptx.j2", entry="silu_mul")
class SiluMul:
    """``out[t, j] = silu(x[t, j]) * x[t, d + j]`` with ``silu(a) = a * sigmoid(a)``.

    The gated activation of SwiGLU MLPs (Shazeer 2020, "GLU Variants Improve
    Transformer"); silu is the sigmoid-weighted linear unit (Elfwing et al. 2018).

    Kernel parameters (in order): ``x``: ``[tokens, 2 * d]`` of ``dtype``;
    ``out``: ``[tokens, d]`` of ``dtype``; both contiguous and 16-byte aligned;
    ``tokens``: u32.

    Arithmetic is f32: ``sigmoid(a) = rcp(1 + ex2(-a * log2 e))`` with the PTX
    ``ex2.approx.ftz`` and ``rcp.approx.ftz`` instructions (a few f32 ulp), then one
    rounding to ``dtype`` (nearest even). Large negative ``a`` gives ``-0``, large
    positive ``a`` gives ``a * b``.

    Each thread moves ``unroll`` 16-byte vectors of each half and of the output, all
    loads issued before the first use; the grid covers ``tokens * d`` outputs.

    Fields:
        d (baked): the output width (half of ``x``'s row), a multiple of 16 bytes'
            worth of elements (8 for f16/bf16, 4 for f32), at most 2^20.
        dtype (baked): f32, f16 or bf16.
        unroll (baked): 16-byte output vectors per thread, 1 to 4 (the entry declares
            ``.maxntid 1024``, so ptxas keeps to 64 registers and any block up to 1024
            threads fits; sm_90 uses 22 to 64 registers, more with larger ``unroll``).
        l1_no_allocate (baked): load ``x`` with ``.L1::no_allocate`` (PTX ISA "ld",
            eviction priority; the same results, bit for bit): 1 to 7% faster by CUDA-graph
            replay for launches moving 3 to 50 MB, 2 to 9% slower from 100 MB (H200), so off
            by default;
            :func:`~specdsl.kernels.suggested_l1_no_allocate` says which from the launch's
            :meth:`bytes_moved`.
        block (launch): threads per CTA, a multiple of 32 up to 1024.
    """

    dtype: DType = baked(DType.BF16, validator=one_of(*FLOAT_DTYPES),
                         doc="element type: f32, f16 or bf16")
    d: int = baked(4096, validator=_d_check, doc="output width (elements per half row)")
    unroll: int = baked(2, validator=in_range(1, 4), doc="16-byte vectors per thread")
    l1_no_allocate: bool = baked(False, doc=L1_NO_ALLOCATE_DOC)
    block: int = launch(256, validator=block_size, doc="threads per CTA")

    #: the requests `specdsl verify --grid` compiles
    #: (unroll 1 is suggested_geometry's below 1024 tokens, which specdsl.torch launches)
    variants = {"dtype": ["f32", "f16", "bf16"], "d": [4096, 8192], "unroll": [2, 1],
                "l1_no_allocate": [False, True]}

    #: What each pointer parameter points to (docs/writing-specs.md, "Array declarations").
    arrays = {"x": "dtype[tokens, 2 * d]", "out": "dtype[tokens, d]"}

    @property
    def lanes(self) -> int:
        """Elements per 16-byte vector."""
        return self.dtype.vector_lanes

    def grid(self, tokens: int) -> tuple[int, int, int]:
        """The grid (in CTAs) that covers ``tokens`` rows.

        Raises:
            SpecError: ``tokens`` is not an int (a NumPy integer is one) or is negative,
                or ``tokens * d`` needs 2^31 or more 16-byte vectors (the kernel indexes
                them in u32).
        """
        tokens = launch_count("SiluMul", "tokens", tokens)
        vectors = tokens * (self.d // self.lanes)
        if tokens < 0 or vectors >= _MAX_VECTORS:
            raise SpecError(f"SiluMul.grid: tokens={tokens} gives {vectors} 16-byte vectors; "
                             f"expected 0 to {_MAX_VECTORS - 1}")
        per_cta = self.block * self.unroll
        return (max(1, cdiv(vectors, per_cta)), 1, 1)

    def launch_dims(self, tokens: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``tokens`` rows (see :meth:`grid`)."""
        return self.grid(tokens), (self.block, 1, 1)

    def bytes_moved(self, tokens: int) -> int:
        """Fewest bytes a launch must move: x read once (2d per row), out written once (d)."""
        tokens = count("SiluMul.bytes_moved", "tokens", tokens)
        return 3 * tokens * self.d * self.dtype.size


def reference(x: Any, d: int) -> Any:
    """float64 ``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape ``[..., 2d]``.

    ``silu(a) = a / (1 + exp(-a))``, as torch computes it: ``silu(+inf) = +inf``,
    ``silu(-inf) = -inf / inf = NaN``; NaN in gives NaN out; ``0 * inf`` is NaN.
    """
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    gate, up = x[..., :d], x[..., d:]
    with np.errstate(invalid="ignore", over="ignore"):
        return gate / (1.0 + np.exp(-gate)) * up


def example(spec: SiluMul, rng, tokens: int = 37) -> KernelCase:
    """A launch of ``spec`` on ``tokens`` random rows (odd by default: partial last CTA).

    Inputs are N(0, 2^2) so that the sigmoid's tails are reached. The tolerance,
    :data:`~specdsl.kernels.case.TOLERANCE`, covers the f32 approximations plus one
    rounding to ``dtype``.
    """
    import numpy as np

    x = to_bits(2.0 * rng.standard_normal((tokens, 2 * spec.d)), spec.dtype)
    expected = reference(from_bits(x, spec.dtype), spec.d)
    return KernelCase(
        spec=spec,
        args=(("x", x), ("out", Output((tokens, spec.d), spec.dtype)),
              ("tokens", np.uint32(tokens))),
        grid=spec.grid(tokens), block=(spec.block, 1, 1),
        expected={"out": expected}, tolerance=TOLERANCE[spec.dtype],
    )
