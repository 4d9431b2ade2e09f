"""SiluMulQuant: the SwiGLU gate ``silu(x[:, :d]) * x[:, d:]`` with an FP8 E4M3 epilogue."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked
from . import fp8_quant, silu_mul
from ._checks import FLOAT_DTYPES, block_size, count, one_of, suggestion_counts, takes
from ._rows import (
    CLUSTER_ROWS_PER_SM,
    CTAS_PER_SM,
    DYNAMIC_SCALE_CLUSTER,
    ONE_VECTOR_PART,
    PART_VECTORS,
    check_resident,
    check_resident_block,
    check_split,
    cluster_split,
    row_block,
    row_launch_dims,
    spread_split,
    threads_for,
    vector_elements,
    vector_registers,
)
from ._streaming import L1_NO_ALLOCATE_DOC
from .case import TOLERANCE, KernelCase, Output, from_bits, to_bits

__all__ = ["SiluMulQuant", "default_block", "suggested_split", "reference", "example",
           "PART_VECTORS", "CTAS_PER_SM", "CLUSTER_MIN_VECTORS", "CLUSTER_TOKENS_PER_SM"]

#: The dynamic scale's rows split over a cluster from this many vectors (d 6144 of bf16):
#: on the H200 at 1 to 16 tokens every split ran slower than one CTA a token at d 4096
#: and 5120 (by 0.11 to 0.37 us), and 8 CTAs a token faster from 7168 (by 0.03 to 0.10
#: at 7168 and 8192, 0.62 to 0.81 at 14336; ``benchmarks/variants.py split-bounds``,
#: ``split-bounds-more``).
CLUSTER_MIN_VECTORS = 768
#: The dynamic scale's bounds (``cluster_split``'s, tokens as a fraction of the SM count):
#: 8 CTAs a token to a quarter of the SMs, 4 to 0.46; 2, only where 4 does not cut the
#: row, no further than 4 (it never ran fastest for rows that 4 cuts).
CLUSTER_TOKENS_PER_SM = {**CLUSTER_ROWS_PER_SM, 2: CLUSTER_ROWS_PER_SM[4]}


def default_block(d: int, dtype: DType, split: int = 1) -> int:
    """Threads per CTA for rows of ``d`` outputs, ``split`` CTAs a row (the ``block``
    default): as RMSNorm's, at most 512 threads with 2 to 8 16-byte vectors each, 1024 for
    longer rows; a split row's part of up to :data:`ONE_VECTOR_PART` vectors, one vector a
    thread. Measured on the H200 (``benchmarks/variants.py silu-quant-split``, 16 tokens,
    bf16, graph replay): d 14336 at split 8 (224 vectors a part), static scale 2.32 us at
    128 threads, 2.22 at 224; groups 2.32 and 2.08; d 18432 (288 vectors) static 2.58 and
    2.43 at 288, groups 2.49 and 2.27; the dynamic scale level."""
    lanes = vector_elements(d, dtype)
    vectors = d // lanes // split
    if split > 1 and vectors <= ONE_VECTOR_PART:
        return threads_for(vectors, 1)
    return row_block(vectors, vector_registers(lanes, dtype))


def _check_d(instance: Any, attribute: Any, d: int) -> None:
    check_resident(d, instance.dtype)


def _check_scale_mode(instance: Any, attribute: Any, mode: str) -> None:
    if mode == "group":
        fp8_quant.check_group(instance.d, "d")


def _check_split(instance: Any, attribute: Any, split: int) -> None:
    check_split("d", instance.d, instance.dtype, split, cluster=instance.scale_mode == "dynamic",
                group=fp8_quant.GROUP_SIZE if instance.scale_mode == "group" else 0,
                cluster_why=DYNAMIC_SCALE_CLUSTER)


def _check_block(instance: Any, attribute: Any, block: int) -> None:
    block_size(instance, attribute, block)
    check_resident_block(instance.d, instance.dtype, block, instance.split)


@kernel_spec(template="silu_mul_quant.ptx.j2", entry="silu_mul_quant")
class SiluMulQuant:
    """SiluMul, then FP8 E4M3 quantization of its output, in one kernel.

    ``y[t, j] = silu(x[t, j]) * x[t, d + j]`` exactly as :class:`~specdsl.kernels.SiluMul`
    computes it (same instructions), rounded to ``dtype`` as SiluMul writes it, then
    ``q = satfinite(y * (1 / scale))`` as :class:`~specdsl.kernels.Fp8Quant`. Only ``q``
    and the scales are written (the unfused pair writes y and reads it back): the input
    of an FP8 down projection (vLLM's ``silu_and_mul_quant`` for a static scale).

    ``scale_mode``: ``"dynamic"`` (``scale[t] = max(max_j |y[t, j]| / 448, 2^-126)``,
    output ``[tokens]``), ``"static"`` (one f32 read from ``scale`` at launch) or
    ``"group"`` (``max(amax, 1e-10) / 448`` a group of 128, output ``[tokens, d / 128]``
    row-major, DeepSeek-V3's blockwise scales).

    Kernel parameters (in order): ``x`` ``[tokens, 2d]`` (``dtype``, aligned to one
    vector: :attr:`vector_bytes`), ``q`` ``[tokens, d]`` (e4m3 bytes, aligned to
    :attr:`vector` bytes), ``scale`` (f32), ``tokens`` (u32). ``split`` CTAs per token
    (:meth:`launch_dims`). Needs sm_90, or sm_89 with PTX ISA 8.1 (the dynamic scale
    there with ``split`` 1).

    Fields:
        d (baked): outputs a token, kept in registers: at most 65536 f16/bf16 of 16-byte
            vectors (32768 f32 or odd widths); a multiple of 128 for ``group``.
        dtype (baked): f32, f16 or bf16.
        scale_mode (baked): ``"dynamic"``, ``"static"`` or ``"group"``.
        split (baked): CTAs a token: CTA k owns part ``k % split`` of token
            ``k // split``, the parts equal (whole vectors, and whole groups of 128 for
            ``group``). For the dynamic scale 1 to 8: the token's CTAs form a thread block
            cluster (sm_90) and meet in a cluster reduction (distributed shared memory);
            the static and group scales need nothing across parts, so any count that
            cuts the row so. Few tokens then spread over ``split`` times as many SMs:
            :func:`suggested_split` says how many.
        block (baked): threads per CTA (:func:`default_block` of the CTA's part).
        l1_no_allocate (baked): load ``x`` with ``.L1::no_allocate`` (the same codes and
            scales): faster by graph replay for launches moving 3 to 50 MB, slower from
            100 MB (H200), so off by default; :func:`~specdsl.kernels.suggested_l1_no_allocate`
            says which.

    Raises:
        SpecError: at construction, for a field outside the ranges above.
    """

    d: int = baked(validator=_check_d, doc="output width (elements per half row)")
    dtype: DType = baked(DType.BF16, validator=one_of(*FLOAT_DTYPES),
                         doc="element type of x: f32, f16 or bf16")
    scale_mode: Literal["dynamic", "static", "group"] = baked(
        "dynamic", validator=_check_scale_mode,
        doc="a scale a token (dynamic), one read at launch (static), or a scale a group of 128")
    split: int = baked(1, validator=_check_split,
                       doc="CTAs a token, each a part of the row (1 to 8 for dynamic)")
    block: int = baked(attrs.Factory(lambda self: default_block(self.d, self.dtype, self.split),
                                     takes_self=True),
                       validator=_check_block, doc="threads per CTA")
    l1_no_allocate: bool = baked(False, doc=L1_NO_ALLOCATE_DOC)

    #: the requests ``specdsl verify --variants`` compiles: each mode at common widths,
    #: Llama-3's 14336, DeepSeek-V3's 18432, an odd width, Llama-3.1-405B's 53248, and
    #: tokens split over CTAs.
    variants = (
        [{"d": d, "dtype": t, "scale_mode": m} for d in (4096, 14336) for t in ("bf16", "f16", "f32")
         for m in ("dynamic", "static", "group")]
        + [{"d": 18432, "scale_mode": "group"}, {"d": 4097, "scale_mode": "dynamic"},
           {"d": 53248, "scale_mode": "dynamic"}]
        + [{"d": 4096, "scale_mode": m, "l1_no_allocate": True} for m in ("dynamic", "static", "group")]
        + [{"d": d, "scale_mode": m, "split": s} for d, s in ((14336, 8), (18432, 4))
           for m in ("dynamic", "static", "group")]
        + [{"d": 4100, "dtype": "f32", "scale_mode": "dynamic", "split": 5}]
        # beyond a cluster, as suggested_split gives them (parts of 128 vectors)
        + [{"d": 14336, "scale_mode": "static", "split": 14},
           {"d": 18432, "scale_mode": "group", "split": 18}])

    #: What each pointer parameter points to (docs/writing-specs.md, "Array declarations").
    arrays = {"x": "dtype[tokens, 2 * d]", "q": "e4m3[tokens, d]",
              "scale": "f32[tokens] if scale_mode == 'dynamic' else "
                       "f32[tokens, d / 128] if scale_mode == 'group' else f32[1]"}

    @property
    def vector(self) -> int:
        """Elements one load moves: the largest power of two dividing ``d``, up to 16 bytes."""
        return vector_elements(self.d, self.dtype)

    @property
    def vector_bytes(self) -> int:
        """Bytes one load of x moves, the alignment x needs."""
        return self.vector * self.dtype.size

    def launch_dims(self, tokens: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``tokens`` rows: ``split`` CTAs of ``block`` threads per
        token, consecutive along x (for the dynamic scale, one cluster).

        Raises:
            SpecError: ``tokens`` is not an int from 1 to 2**31 - 1, or ``tokens * split``
                CTAs exceed 2**31 - 1.
        """
        return row_launch_dims("SiluMulQuant", tokens, self.block, split=self.split,
                               name="tokens")

    def bytes_moved(self, tokens: int) -> int:
        """Fewest bytes a launch must move: x read once (2d a token), q written once (d
        bytes), and the scales (f32)."""
        tokens = count("SiluMulQuant.bytes_moved", "tokens", tokens)
        scales = {"dynamic": 4 * tokens, "static": 4,
                  "group": 4 * tokens * (self.d // fp8_quant.GROUP_SIZE)}[self.scale_mode]
        return tokens * self.d * (2 * self.dtype.size + 1) + scales


def suggested_split(d: int, dtype: DType | str, scale_mode: str, tokens: int,
                    sm_count: int = 132) -> int:
    """The ``split`` for a launch over ``tokens`` tokens: several CTAs a token when tokens
    are few, so that the work spreads over the SMs.

    The static and group scales (plain CTAs): the fewest CTAs a token whose parts are at
    most :data:`PART_VECTORS` vectors, where ``tokens * split`` stays within
    :data:`CTAS_PER_SM` CTAs an SM; beyond that, the largest power of two within it (1 where even
    2 is beyond it). The dynamic scale, whose CTAs meet in a cluster reduction
    (:func:`~specdsl.kernels._rows.cluster_split`), rows of at least
    :data:`CLUSTER_MIN_VECTORS` vectors (d 6144 of bf16): 8 CTAs a token up to a quarter of
    ``sm_count`` in tokens (33 on an H200), 4 up to 0.46 of it (60), else 1 (2 where 8 and
    4 do not cut the row, to 60 tokens). Each part is equal whole vectors (and groups), at
    least :data:`~specdsl.kernels._rows.MIN_PART_VECTORS`. ``sm_count`` is the device's SM
    count (132 on an H200); 0 gives 1 (``specdsl.torch`` passes 0 for the dynamic scale on a
    device without thread block clusters, before sm_90).

    Measured on the H200 (bf16, graph replay, us; docs/kernels/silu_mul.md, "Few tokens"):

    * ``benchmarks/variants.py silu-quant-split-wide`` (2026-12-02, two rounds): 1 token
      of 18432, static scale, 1.46 at split 8, 1.38 at 12 and 16, 1.30 at 18 (128 vectors
      a part), 1.31 to 1.40 from 24 to 144; of 14336, 1.38 at 8, 1.30 at 16 (112), 1.32 to
      1.39 beyond. The same order for groups and up to 8 tokens.
    * ``silu-quant-split-rule`` (2026-12-02, two rounds), this rule against splits of 1 to
      16: at 4096, 14336 and 18432, 1 to 32 tokens, it was the fastest or within 0.01 us
      (static scale, 1 token of 14336: 1.29 against 2.62 unsplit and 1.38 at 8). More CTAs
      an SM won from 64 tokens: at 64, 8 CTAs a token (512) against 4 (256), 2.75 and 2.77 at
      14336, 3.05 and 3.25 at 18432; at 128, 4 against 2: 3.74 and 4.08 at 14336; at 256, 2
      against 1: 6.05 and 6.28, 7.03 and 7.19 at 18432 (groups 7.38 and 8.12).
    * ``split-bounds`` and ``split-bounds-more`` (2026-12-02, two rounds each), the dynamic
      scale at d 2048 to 28672, 1 to 132 tokens, splits 1, 2, 4 and 8: d 4096, 1.62 unsplit
      against 1.89 at 8 (1 token), 1.71 against 1.96 (16); 5120, 1.78 against 1.91; 7168,
      1.98 against 1.92; 14336, 2.75 against 2.07 (1 token), 2.91 at 8 against 3.29 unsplit
      (33 tokens), 3.22 at 4 against 3.42 (48), 3.33 at 4 against 3.50 (56), 3.60 unsplit
      against 3.74 at 4 (66); 28672, 3.76 at 8 against 4.53 (33), 4.38 at 4 against 4.76
      (56), 4.87 unsplit against 6.35 at 4 (66). Split 2 never ran fastest for rows that 4
      cuts.

    Raises:
        SpecError: a request :class:`SiluMulQuant` refuses (naming the field), or
            ``tokens`` or ``sm_count`` not an int of 0 or more (a NumPy integer is one).
    """
    tokens, sm_count = suggestion_counts("suggested_split", tokens=tokens, sm_count=sm_count)
    request = SiluMulQuant(d=d, dtype=dtype, scale_mode=scale_mode)
    vectors = d // request.vector

    def split_taken(split: int) -> bool:
        return takes(SiluMulQuant, d=d, dtype=dtype, scale_mode=scale_mode, split=split)

    if request.scale_mode != "dynamic":
        return spread_split(vectors, tokens, sm_count, split_taken)
    return cluster_split(vectors, tokens, sm_count, split_taken,
                         min_vectors=CLUSTER_MIN_VECTORS, rows_per_sm=CLUSTER_TOKENS_PER_SM)


def reference(x: Any, d: int, dtype: DType, scale_mode: str,
              scale: float | None = None) -> tuple[Any, Any, Any]:
    """float64 ``silu(x[:, :d]) * x[:, d:]``, rounded to ``dtype``, then quantized:
    ``(quotient clipped to +-448, scales, rounded y)``."""
    y = from_bits(to_bits(silu_mul.reference(x, d), dtype), dtype)
    quotient, scales = fp8_quant.mode_reference(y, scale_mode, scale)
    return quotient, scales, y


def example(spec: SiluMulQuant, rng: Any, tokens: int = 37) -> KernelCase:
    """A launch of ``spec`` on ``tokens`` random rows (x ~ N(0, 2^2), as SiluMul's example);
    the static scale puts the largest |y| near 400. Expected: the float64 quotients (within
    ``TOLERANCE[F8E4M3]``) and the scales."""
    import numpy as np

    x = to_bits(2.0 * rng.standard_normal((tokens, 2 * spec.d)), spec.dtype)
    x64 = from_bits(x, spec.dtype)
    static = None
    if spec.scale_mode == "static":
        static = np.float32(np.abs(silu_mul.reference(x64, spec.d)).max() / 400.0)
    quotient, scales, _ = reference(x64, spec.d, spec.dtype, spec.scale_mode,
                                    None if static is None else float(static))
    args: list[tuple[str, Any]] = [("x", x), ("q", Output((tokens, spec.d), DType.F8E4M3))]
    expected: dict[str, Any] = {"q": quotient}
    if static is None:
        args.append(("scale", Output(np.shape(scales), DType.F32)))
        expected["scale"] = scales
    else:
        args.append(("scale", np.array([static], dtype=np.float32)))
    args.append(("tokens", np.uint32(tokens)))
    grid, block = spec.launch_dims(tokens)
    return KernelCase(spec=spec, args=tuple(args), grid=grid, block=block, expected=expected,
                      tolerance=TOLERANCE[DType.F8E4M3])
