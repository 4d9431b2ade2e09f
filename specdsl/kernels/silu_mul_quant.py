"""SiluMulQuant: the SwiGLU gate ``silu(x[:, :d]) * x[:, d:]`` with an FP8 E4M3 epilogue."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked
from . import fp8_quant, silu_mul
from ._checks import FLOAT_DTYPES, block_size, count, one_of
from ._rows import (
    check_resident,
    check_resident_block,
    row_block,
    row_launch_dims,
    vector_elements,
    vector_registers,
)
from ._streaming import L1_NO_ALLOCATE_DOC
from .case import TOLERANCE, KernelCase, Output, from_bits, to_bits

__all__ = ["SiluMulQuant", "default_block", "reference", "example"]


def default_block(d: int, dtype: DType) -> int:
    """Threads per CTA for rows of ``d`` outputs (the ``block`` default): as RMSNorm's,
    at most 512 threads with 2 to 8 16-byte vectors each, 1024 for longer rows."""
    lanes = vector_elements(d, dtype)
    return row_block(d // lanes, vector_registers(lanes, dtype))


def _check_d(instance: Any, attribute: Any, d: int) -> None:
    check_resident(d, instance.dtype)


def _check_scale_mode(instance: Any, attribute: Any, mode: str) -> None:
    if mode == "group":
        fp8_quant.check_group(instance.d, "d")


def _check_block(instance: Any, attribute: Any, block: int) -> None:
    block_size(instance, attribute, block)
    check_resident_block(instance.d, instance.dtype, block)


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
    :attr:`vector` bytes), ``scale`` (f32), ``tokens`` (u32). One CTA per token
    (:meth:`launch_dims`). Needs sm_90, or sm_89 with PTX ISA 8.1.

    Fields:
        d (baked): outputs a token, kept in registers: at most 65536 f16/bf16 of 16-byte
            vectors (32768 f32 or odd widths); a multiple of 128 for ``group``.
        dtype (baked): f32, f16 or bf16.
        scale_mode (baked): ``"dynamic"``, ``"static"`` or ``"group"``.
        block (baked): threads per CTA (:func:`default_block`).
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
    block: int = baked(attrs.Factory(lambda self: default_block(self.d, self.dtype),
                                     takes_self=True),
                       validator=_check_block, doc="threads per CTA (one CTA per token)")
    l1_no_allocate: bool = baked(False, doc=L1_NO_ALLOCATE_DOC)

    #: the requests ``specdsl verify --variants`` compiles: each mode at common widths,
    #: Llama-3's 14336, DeepSeek-V3's 18432, an odd width, and Llama-3.1-405B's 53248.
    variants = (
        [{"d": d, "dtype": t, "scale_mode": m} for d in (4096, 14336) for t in ("bf16", "f16", "f32")
         for m in ("dynamic", "static", "group")]
        + [{"d": 18432, "scale_mode": "group"}, {"d": 4097, "scale_mode": "dynamic"},
           {"d": 53248, "scale_mode": "dynamic"}]
        + [{"d": 4096, "scale_mode": m, "l1_no_allocate": True} for m in ("dynamic", "static", "group")])

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
        """``(grid, block)`` for ``tokens`` rows: one CTA of ``block`` threads per token.

        Raises:
            SpecError: ``tokens`` is not an int from 1 to 2**31 - 1.
        """
        return row_launch_dims("SiluMulQuant", tokens, self.block)

    def bytes_moved(self, tokens: int) -> int:
        """Fewest bytes a launch must move: x read once (2d a token), q written once (d
        bytes), and the scales (f32)."""
        tokens = count("SiluMulQuant.bytes_moved", "tokens", tokens)
        scales = {"dynamic": 4 * tokens, "static": 4,
                  "group": 4 * tokens * (self.d // fp8_quant.GROUP_SIZE)}[self.scale_mode]
        return tokens * self.d * (2 * self.dtype.size + 1) + scales


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
