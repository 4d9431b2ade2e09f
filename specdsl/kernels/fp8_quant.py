"""Fp8Quant: per-token (or static) quantization to OCP FP8 E4M3 with f32 scales."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked
from ..errors import SpecError
from ._checks import FLOAT_DTYPES, block_size, count, launch_count, one_of
from ._rows import (
    cdiv,
    check_length,
    most_vectors_per_thread,
    row_vectors,
    threads_for,
    windowed,
)
from ._streaming import FP8_L1_NO_ALLOCATE_DOC, l1_no_allocate_field
from .case import TOLERANCE, KernelCase, Output, from_bits, to_bits

__all__ = ["Fp8Quant", "reference", "group_reference", "mode_reference", "kernel_codes",
           "check_group", "example",
           "default_block", "E4M3_MAX", "MIN_SCALE", "GROUP_SIZE", "GROUP_EPS", "DEFAULT_BLOCK",
           "MAX_HIDDEN"]

#: Largest finite OCP FP8 E4M3 value (OCP 8-bit Floating Point Specification, 2023).
E4M3_MAX = 448.0
#: The dynamic scale's floor: the smallest normal f32, 2^-126. An all-zero row gets this
#: scale (and zero codes); 1/scale stays finite.
MIN_SCALE = 2.0**-126
#: Elements a group of scale_mode "group" (DeepSeek-V3's blockwise activation scales:
#: DeepSeek-V3 technical report, 2024, section 3.3.2, "1x128 tiles").
GROUP_SIZE = 128
#: The group amax's floor, as vLLM's ``per_token_group_quant_fp8`` (its ``eps``, 1e-10):
#: an all-zero group gets scale 1e-10 / 448 and zero codes.
GROUP_EPS = 1e-10
#: Threads per CTA for rows of up to 256 threads x 8 16-byte vectors (measured best at
#: hidden 4096 and 8192, docs/kernels/fp8_quant.md); longer rows get more threads.
DEFAULT_BLOCK = 256


#: Longest row: 2^20 elements (rows longer than the registers hold take two passes).
MAX_HIDDEN = 2**20


def default_block(hidden: int, dtype: DType) -> int:
    """Threads per CTA for rows of ``hidden`` elements (the ``block`` default):
    :data:`DEFAULT_BLOCK`, or the fewest whole warps that hold a longer row in registers
    (``Fp8Quant(hidden=18432)``: 288 threads; 28672: 448), 1024 for rows longer than
    that (which then take chunks). A row walked in a window gets 2 vectors a thread where
    1024 threads hold it so (4097 bf16: 288 threads; the kernel then keeps to 32
    registers a thread, ``.minnctapersm``)."""
    window = windowed(hidden, dtype)
    lanes, vectors = row_vectors(hidden, dtype, window)
    if window and threads_for(vectors, 2) <= 1024:
        # 2 vectors a thread: the kernel then keeps to 32 registers (.minnctapersm), every
        # SM full; 4097 bf16: 52.1 us at 288 threads against 60.8 at 256 (3 sweeps, 40
        # registers), 4096: 49.7 (H200, benchmarks/variants.py odd-block)
        return max(DEFAULT_BLOCK, threads_for(vectors, 2))
    return min(1024, max(DEFAULT_BLOCK, threads_for(vectors, most_vectors_per_thread(lanes, dtype))))


def _hidden_check(instance: Any, attribute: Any, value: int) -> None:
    check_length(value)
    if value > MAX_HIDDEN:
        raise ValueError(f"expected at most {MAX_HIDDEN} elements")


def _scale_mode_check(instance: Any, attribute: Any, value: str) -> None:
    if value == "group":
        check_group(instance.hidden, "hidden")


def _static_scale_check(instance: Any, attribute: Any, value: float | None) -> None:
    if instance.scale_mode == "static_baked":
        if value is None or not 2.0**-126 <= value <= 2.0**126:
            raise ValueError("scale_mode static_baked needs a scale from 2^-126 to 2^126 "
                             "(its reciprocal is baked as an f32)")
    elif value is not None:
        raise ValueError(f"expected None: only scale_mode static_baked bakes a scale "
                         f"(scale_mode is {instance.scale_mode!r})")


@kernel_spec(template="fp8_quant.ptx.j2", entry="fp8_quant")
class Fp8Quant:
    """Quantize ``x`` ``[tokens, hidden]`` to OCP FP8 E4M3 codes ``q`` with f32 scales.

    ``q[t, j] = saturate(x[t, j] / scale)`` (round to nearest even, saturating at
    +-448: ``cvt.rn.satfinite.e4m3x2.f32``, PTX ISA "cvt": sm_90 or newer, or sm_89 with
    PTX ISA 8.1, ``Target(89, ptx_version=(8, 1))``), computed as ``x * (1 / scale)``
    with an IEEE reciprocal. Dequantize with ``q * scale``. The row max is one CTA
    reduction (``templates/reduce.ptx.j2``), right for every ``block``.

    ``scale_mode``:

    * ``"dynamic"``: per token, ``scale[t] = max(max_j |x[t, j]| / 448, 2^-126)``,
      written to the ``scale`` output ``[tokens]``. The floor (:data:`MIN_SCALE`) makes an
      all-zero row quantize to zeros with scale 2^-126.
    * ``"static_baked"``: one scale, ``static_scale``, baked into the PTX.
    * ``"static_param"``: one scale read from the ``scale`` pointer (one f32) at launch.
      A zero or non-finite scale there is the caller's error (not checked).
    * ``"group"``: one scale per group of 128 elements along the row (DeepSeek-V3's
      blockwise activation quantization), ``scale[t, g] = max(amax_g, 1e-10) / 448``
      with ``amax_g`` the largest ``|x|`` of the group, written to the ``scale`` output
      ``[tokens, hidden / 128]`` (row-major, as vLLM's ``per_token_group_quant_fp8``
      returns by default; DeepGEMM wants them column-major: transpose). ``hidden`` must be
      a multiple of 128.

    Kernel parameters (in order): ``x`` (``dtype``, aligned to one vector,
    :attr:`vector_bytes`), ``q`` (e4m3 bytes, ``[tokens, hidden]``, aligned to
    :attr:`vector` bytes), then ``scale`` (f32) except for ``static_baked``. Grid: one
    CTA per token.

    Any row length: a row moves in the widest vector dividing ``hidden`` (:attr:`vector`),
    16 or 8 bytes; a ``hidden`` no such vector divides is walked in a window of 16-byte
    vectors, its two edge vectors' codes stored element by element (:attr:`windowed`,
    ``templates/window.ptx.j2``). A row that ``block``
    threads hold in registers (32 registers a thread: 65536 f16/bf16 elements at 1024
    threads, 32768 f32) is read once; a longer one (:attr:`chunks` > 1) is walked in
    chunks, twice for a dynamic scale (the row max, then the quantization; the first
    pass keeps x in L2 with an evict_last policy and ends on the last chunk, which the
    second quantizes from the registers before it reads the others again), once for a
    static scale.

    Special values: NaN inputs give NaN codes (0x7F/0xFF) and are ignored by the row
    max; values whose quotient is beyond +-448, infinities included, saturate to +-448;
    a dynamic row holding +-inf gets scale ``inf`` (finite elements quantize to 0, the
    infinities to NaN). See docs/kernels/fp8_quant.md, "Special values".

    Fields:
        dtype (baked): f32, f16 or bf16.
        hidden (baked): elements per row, 1 to 2^20.
        block (baked): threads per CTA (the PTX unrolls the row over them), a multiple
            of 32 up to 1024; the default follows ``hidden`` (:func:`default_block`).
        scale_mode (baked): ``"dynamic"``, ``"static_baked"``, ``"static_param"`` or
            ``"group"``.
        static_scale (baked): the scale for ``static_baked``, else None.
        l1_no_allocate (baked): load ``x`` with ``.L1::no_allocate`` (the same codes and
            scales): faster by graph replay for launches moving 3 to 50 MB, slower from
            100 MB (H200), so off by default; :func:`~specdsl.kernels.suggested_l1_no_allocate`
            says which.
            For rows held in registers in whole vectors (:attr:`chunks` 1, not
            :attr:`windowed`); refused elsewhere.
    """

    dtype: DType = baked(DType.BF16, validator=one_of(*FLOAT_DTYPES),
                         doc="input element type: f32, f16 or bf16")
    hidden: int = baked(4096, validator=_hidden_check, doc="elements per row")
    scale_mode: Literal["dynamic", "static_baked", "static_param", "group"] = baked(
        "dynamic", validator=_scale_mode_check,
        doc="dynamic per-token scales, one static scale (baked or passed), or per-group scales")
    static_scale: float | None = baked(None, validator=_static_scale_check,
                                       doc="the scale of static_baked, else None")
    block: int = baked(attrs.Factory(lambda self: default_block(self.hidden, self.dtype),
                                     takes_self=True),
                       validator=block_size, doc="threads per CTA (baked: the PTX unrolls over it)")
    l1_no_allocate: bool = baked(False, validator=l1_no_allocate_field, doc=FP8_L1_NO_ALLOCATE_DOC)

    #: the requests `specdsl verify --variants` compiles: common widths, DeepSeek-V3's MLP
    #: width (18432: 288 threads), rows at any phase (4097, 4100: window.ptx.j2), rows longer than the registers (131073, 65540 f32: chunks), the static modes.
    variants = (
        [{"dtype": dt, "hidden": h} for dt in ("f32", "f16", "bf16")
         for h in (4096, 8192, 18432, 4097, 4100)]
        + [{"dtype": "bf16", "hidden": 131073}, {"dtype": "f32", "hidden": 65540},
           {"dtype": "bf16", "hidden": 131073, "scale_mode": "static_param"}]
        + [{"scale_mode": "static_param"}, {"scale_mode": "static_baked", "static_scale": 0.05}]
        + [{"dtype": dt, "hidden": h, "scale_mode": "group"} for dt in ("f32", "bf16")
           for h in (7168, 18432, 131072)]
        + [{"hidden": 4096, "l1_no_allocate": True}, {"hidden": 7168, "scale_mode": "group",
                                                      "l1_no_allocate": True},
           {"dtype": "f32", "hidden": 8192, "scale_mode": "static_param", "l1_no_allocate": True}]
    )

    #: What each pointer parameter points to (docs/writing-specs.md, "Array declarations"):
    #: one row per CTA, so the rows are grid.x; no scale for static_baked.
    arrays = {"x": "dtype[grid.x, hidden]", "q": "e4m3[grid.x, hidden]",
              "scale": "f32[grid.x] if scale_mode == 'dynamic' else "
                       "f32[grid.x, hidden / 128] if scale_mode == 'group' else "
                       "f32[1] if scale_mode == 'static_param' else None"}

    @property
    def lanes(self) -> int:
        """Elements per 16-byte input vector (the widest load)."""
        return self.dtype.vector_lanes

    @property
    def vector(self) -> int:
        """Elements (and codes) one load moves: the largest power of two dividing ``hidden``
        up to 16 bytes of input, or 16 bytes' worth in a window (see
        :func:`~specdsl.kernels._rows.row_vectors`)."""
        return row_vectors(self.hidden, self.dtype, windowed(self.hidden, self.dtype))[0]

    @property
    def windowed(self) -> bool:
        """Are rows walked in a window of 16-byte vectors (``templates/window.ptx.j2``: a
        ``hidden`` no vector of 8 bytes or more divides)? Arrays then need 16-byte alignment."""
        return self.hidden % self.vector != 0

    @property
    def vector_bytes(self) -> int:
        """Bytes of ``x`` one load moves, the alignment ``x`` needs."""
        return self.vector * self.dtype.size

    @property
    def chunks(self) -> int:
        """Pieces a row is processed in: 1 when ``block`` threads hold it in registers (x
        read once), else the number of chunks each of the two passes walks."""
        vectors = row_vectors(self.hidden, self.dtype, windowed(self.hidden, self.dtype))[1]
        most = most_vectors_per_thread(self.vector, self.dtype)
        return 1 if vectors <= self.block * most else cdiv(vectors, self.block * most)

    def grid(self, tokens: int) -> tuple[int, int, int]:
        """One CTA per token.

        Raises:
            SpecError: ``tokens`` is not an int (a NumPy integer is one) from 1 to 2^31 - 1
                (the grid's x limit).
        """
        tokens = launch_count("Fp8Quant", "tokens", tokens)
        if not 1 <= tokens < 2**31:
            raise SpecError(f"Fp8Quant.grid: expected 1 to {2**31 - 1} tokens (got {tokens})")
        return (tokens, 1, 1)

    def launch_dims(self, tokens: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``tokens`` rows: one CTA of ``block`` threads per row."""
        return self.grid(tokens), (self.block, 1, 1)

    def bytes_moved(self, tokens: int) -> int:
        """Fewest bytes a launch must move: x read once, q written once (1 byte per
        element), and one f32 scale per token (dynamic), per group of 128 (group) or one
        in total (static_param)."""
        tokens = count("Fp8Quant.bytes_moved", "tokens", tokens)
        scales = {"dynamic": 4 * tokens, "static_param": 4, "static_baked": 0,
                  "group": 4 * tokens * (self.hidden // GROUP_SIZE)}[self.scale_mode]
        return tokens * self.hidden * (self.dtype.size + 1) + scales


def reference(x: Any, scale: Any = None) -> tuple[Any, Any]:
    """float64 quantization of ``x`` ``[tokens, hidden]``: ``(x / scale clipped to +-448, scale)``.

    ``scale=None`` computes the dynamic per-token scales ``max(amax / 448, 2^-126)``,
    shape ``[tokens]``; otherwise ``scale`` is one number. The first result is the
    exact (unrounded) quotient: E4M3 rounding is what a comparison must tolerate.

    Special values, as the kernel (docs/kernels/fp8_quant.md, "Special values"): the
    row max ``amax`` ignores NaN (as vLLM's ``fmaxf``); a NaN quotient stays NaN (the
    E4M3 NaN code); quotients beyond +-448, infinities included, saturate to +-448. A
    row holding +-inf gets scale ``inf``: its finite elements give 0, its infinities
    ``inf / inf = NaN``.
    """
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        if scale is None:
            amax = np.fmax.reduce(np.abs(x), axis=-1, initial=0.0)
            scale = np.maximum(amax / E4M3_MAX, MIN_SCALE)
            quotient = x / scale[:, None]
        else:
            scale = np.float64(scale)
            quotient = x / scale
        return np.clip(quotient, -E4M3_MAX, E4M3_MAX), scale


def group_reference(x: Any, group: int = GROUP_SIZE) -> tuple[Any, Any]:
    """float64 per-group quantization of ``x`` ``[tokens, hidden]``: ``(quotient clipped to
    +-448, scales [tokens, hidden / group])``, ``scale = max(amax, 1e-10) / 448`` a group.

    As :func:`reference`: NaN is ignored by the group max, a group holding +-inf gets
    scale ``inf``.
    """
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    groups = x.reshape(x.shape[0], -1, group)
    with np.errstate(invalid="ignore", divide="ignore"):
        amax = np.fmax.reduce(np.abs(groups), axis=-1, initial=0.0)
        scale = np.maximum(amax, GROUP_EPS) / E4M3_MAX
        quotient = (groups / scale[..., None]).reshape(x.shape)
    return np.clip(quotient, -E4M3_MAX, E4M3_MAX), scale


def mode_reference(y: Any, scale_mode: str, scale: float | None = None) -> tuple[Any, Any]:
    """:func:`reference` (``"dynamic"``, or ``"static"`` with ``scale``) or
    :func:`group_reference` (``"group"``) of ``y``: ``(quotient clipped to +-448, scales)``."""
    if scale_mode == "group":
        return group_reference(y)
    return reference(y, None if scale_mode == "dynamic" else scale)


def check_group(length: int, field: str) -> None:
    """Refuse a row of ``length`` that is not whole groups of :data:`GROUP_SIZE`.

    Raises:
        ValueError: naming ``field`` (the spec turns it into a SpecError).
    """
    if length % GROUP_SIZE:
        raise ValueError(f"expected {field} to be a multiple of {GROUP_SIZE} for scale_mode "
                         f"group ({field} is {length}): one scale a group of {GROUP_SIZE} "
                         f"elements")


def kernel_codes(x: Any, scale_mode: str = "dynamic", scale: float | None = None) -> tuple[Any, Any]:
    """The codes and scales the kernel produces for ``x`` ``[tokens, hidden]`` (values exact
    in f32), computed in f32 as the PTX does: ``amax`` exact, ``scale`` by an IEEE f32
    division (``div.rn.f32``) and the mode's floor, ``inv`` the IEEE f32 reciprocal
    (``rcp.rn.f32``), ``x * inv`` rounded to f32 (``mul.rn.f32``), then to E4M3 (nearest
    even, saturating at +-448; NaN gives 0x7F with x's sign).

    ``scale_mode``: ``"dynamic"``, ``"group"``, or ``"static"`` with ``scale`` the f32
    scale (baked or passed). Returns ``(codes uint8 [tokens, hidden], scales f32)``:
    ``[tokens]``, ``[tokens, hidden / 128]`` or the one static scale. Use it to check that a
    fused kernel quantizes exactly as the unfused pair.
    """
    import numpy as np

    x32 = np.asarray(x, dtype=np.float32)
    f32 = np.float32
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if scale_mode == "dynamic":
            amax = np.fmax.reduce(np.abs(x32), axis=-1, initial=f32(0))
            scales = np.maximum(amax / f32(E4M3_MAX), f32(MIN_SCALE)).astype(f32)
            inv = (f32(1) / scales)[:, None]
        elif scale_mode == "group":
            groups = x32.reshape(x32.shape[0], -1, GROUP_SIZE)
            amax = np.fmax.reduce(np.abs(groups), axis=-1, initial=f32(0))
            scales = (np.maximum(amax, f32(GROUP_EPS)) / f32(E4M3_MAX)).astype(f32)
            inv = np.repeat(f32(1) / scales, GROUP_SIZE, axis=-1)
        else:
            scales = f32(scale)
            inv = f32(1) / scales
        product = (x32 * inv).astype(f32)
    codes = to_bits(np.nan_to_num(product, nan=0.0), DType.F8E4M3)
    nan = np.isnan(product)
    codes = np.where(nan, np.where(np.signbit(product), 0xFF, 0x7F), codes).astype(np.uint8)
    return codes, scales


def example(spec: Fp8Quant, rng, tokens: int = 37, zero_rows: tuple[int, ...] = (0,)) -> KernelCase:
    """A launch of ``spec`` on ``tokens`` random rows; rows in ``zero_rows`` are all zero.

    Rows are N(0, 1) times a per-row magnitude from 2^-8 to 2^8. Static scales are
    chosen so that some elements saturate. Expected ``q`` is the float64 quotient
    (decoded codes are compared with it). E4M3 keeps 3 mantissa bits: each code is
    within 2^-4 relative of the quotient, about 2.7e-2 in the L2 norm over normal
    data; the tolerance is ``TOLERANCE[F8E4M3]`` (4e-2, :data:`~specdsl.kernels.case.TOLERANCE`),
    far under what a wrong scale or exponent gives.
    """
    import numpy as np

    magnitude = 2.0 ** rng.uniform(-8, 8, size=(tokens, 1))
    x_real = rng.standard_normal((tokens, spec.hidden)) * magnitude
    for row in zero_rows:
        if row < tokens:
            x_real[row] = 0.0
    x = to_bits(x_real, spec.dtype)
    xf = from_bits(x, spec.dtype)
    args: list[tuple[str, Any]] = [("x", x), ("q", Output((tokens, spec.hidden), DType.F8E4M3))]
    expected: dict[str, Any] = {}
    if spec.scale_mode == "dynamic":
        quotient, scale = reference(xf)
        args.append(("scale", Output((tokens,), DType.F32)))
        expected["scale"] = scale
    elif spec.scale_mode == "group":
        quotient, scale = group_reference(xf)
        args.append(("scale", Output(scale.shape, DType.F32)))
        expected["scale"] = scale
    elif spec.scale_mode == "static_param":
        static = np.float32(np.abs(xf).max() / 300.0 if np.abs(xf).max() > 0 else 1.0)
        quotient, _ = reference(xf, float(static))
        args.append(("scale", np.array([static], dtype=np.float32)))
    else:
        quotient, _ = reference(xf, spec.static_scale)
    expected["q"] = quotient
    return KernelCase(
        spec=spec, args=tuple(args), grid=spec.grid(tokens), block=(spec.block, 1, 1),
        expected=expected, tolerance=TOLERANCE[DType.F8E4M3],
    )
