"""Fp8Quant: per-token (or static) quantization to OCP FP8 E4M3 with f32 scales."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Literal

import attrs

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked
from ._checks import FLOAT_DTYPES, block_size, count, one_of, suggestion_counts, takes
from ._fp8_reference import (
    E4M3_MAX,
    GROUP_EPS,
    GROUP_SIZE,
    MIN_SCALE,
    example,
    group_reference,
    kernel_codes,
    mode_reference,
    reference,
)
from ._rows import (
    DYNAMIC_SCALE_CLUSTER,
    ONE_VECTOR_PART,
    cdiv,
    check_length,
    check_resident_block,
    check_split,
    cluster_split,
    most_vectors_per_thread,
    row_launch_dims,
    row_vectors,
    spread_split,
    threads_for,
    windowed,
)
from ._streaming import FP8_L1_NO_ALLOCATE_DOC, l1_no_allocate_field

__all__ = ["Fp8Quant", "reference", "group_reference", "mode_reference", "kernel_codes",
           "check_group", "example", "suggested_split",
           "default_block", "E4M3_MAX", "MIN_SCALE", "GROUP_SIZE", "GROUP_EPS", "DEFAULT_BLOCK",
           "MAX_HIDDEN", "STATIC_PART_VECTORS", "STATIC_CTAS_PER_SM", "CLUSTER_MIN_VECTORS",
           "CLUSTER_TOKENS_PER_SM"]

#: Threads per CTA for rows of up to 256 threads x 8 16-byte vectors (measured best at
#: hidden 4096 and 8192, docs/kernels/fp8_quant.md); longer rows get more threads.
DEFAULT_BLOCK = 256


#: Longest row: 2^20 elements (rows longer than the registers hold take two passes).
MAX_HIDDEN = 2**20


#: :func:`suggested_split` gives a static scale's split parts of up to this many vectors
#: (the group scales, SiluMulQuant's 128): a row of 4096 bf16 (512 vectors, 2 a thread of
#: 256) ran level or slower split on the H200; longer rows gained.
STATIC_PART_VECTORS = 512
#: ... and keeps a static scale's ``tokens * split`` within one CTA an SM (on the H200, 128
#: tokens of 18432 ran 2.99 us unsplit against 3.08 at 2 and 4 CTAs a token).
STATIC_CTAS_PER_SM = 1
#: The dynamic scale's rows split over a cluster from this many vectors (hidden 16384 of
#: bf16), 8 CTAs a token up to an eighth of the SMs in tokens (16 on an H200): at 1 to 16
#: tokens 8 CTAs ran faster than one at 18432 (by 0.05 to 0.08 us) and 28672 (0.34 to
#: 0.38), slower at 14336 and shorter rows, and from 33 tokens no split led by more than
#: 0.05 (``benchmarks/variants.py split-bounds-more``, on the H200).
CLUSTER_MIN_VECTORS = 2048
CLUSTER_TOKENS_PER_SM = {8: Fraction(1, 8)}


def default_block(hidden: int, dtype: DType, split: int = 1) -> int:
    """Threads per CTA for rows of ``hidden`` elements, ``split`` CTAs a row (the ``block``
    default): :data:`DEFAULT_BLOCK`, or the fewest whole warps that hold a longer row in
    registers (``Fp8Quant(hidden=18432)``: 288 threads; 28672: 448), 1024 for rows longer
    than that (which then take chunks). A row walked in a window gets 2 vectors a thread
    where 1024 threads hold it so (4097 bf16: 288 threads; the kernel then keeps to 32
    registers a thread, ``.minnctapersm``). A split row's part of up to
    :data:`ONE_VECTOR_PART` vectors gets one vector a thread (18432 bf16 at split 18: 128
    vectors, 128 threads), a longer part the rule above on its length."""
    window = windowed(hidden, dtype)
    lanes, vectors = row_vectors(hidden, dtype, window)
    if split > 1 and not window:  # the validators refuse a split this does not divide
        vectors = max(1, vectors // split)
        if vectors <= ONE_VECTOR_PART:
            return threads_for(vectors, 1)
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


def _split_check(instance: Any, attribute: Any, split: int) -> None:
    if split > 1:
        row = f"hidden={instance.hidden} {instance.dtype.ptx}"
        if windowed(instance.hidden, instance.dtype):
            raise ValueError(f"expected 1 for {row}: rows walked in a window (no vector of 8 "
                             f"bytes or more divides hidden) take one CTA a row")
        lanes, vectors = row_vectors(instance.hidden, instance.dtype, False)
        held = 1024 * most_vectors_per_thread(lanes, instance.dtype)
        if vectors > held:
            raise ValueError(f"expected 1 for {row}: a row longer than 1024 threads hold in "
                             f"registers ({held * lanes} elements) is walked in chunks, "
                             f"by one CTA")
    check_split("hidden", instance.hidden, instance.dtype, split,
                cluster=instance.scale_mode == "dynamic",
                group=GROUP_SIZE if instance.scale_mode == "group" else 0,
                cluster_why=DYNAMIC_SCALE_CLUSTER)


def _block_check(instance: Any, attribute: Any, block: int) -> None:
    block_size(instance, attribute, block)
    if instance.split > 1:
        check_resident_block(instance.hidden, instance.dtype, block, instance.split)


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
    :attr:`vector` bytes), then ``scale`` (f32) except for ``static_baked``. Grid:
    ``split`` CTAs per token (:meth:`launch_dims`), one by default.

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
        scale_mode (baked): ``"dynamic"``, ``"static_baked"``, ``"static_param"`` or
            ``"group"``.
        static_scale (baked): the scale for ``static_baked``, else None.
        split (baked): CTAs a token: CTA k owns part ``k % split`` of token ``k // split``,
            the parts equal and of whole vectors (whole groups of 128 for ``group``), so a
            few tokens spread over ``split`` times as many SMs (:func:`suggested_split`
            says how many). The static and group scales' parts share nothing (plain
            CTAs, any count that cuts the row so); for the dynamic scale 1 to 8: a
            token's CTAs form a thread block cluster (sm_90) and meet in a cluster
            reduction of their row maxima (``templates/reduce.ptx.j2``), which on the
            H200 costs about what the split saves at 18432 and more at shorter rows (so
            :func:`suggested_split` gives it only to rows of 2048 vectors or more at
            few tokens). Only for rows held in registers in
            whole vectors (up to 65536 f16/bf16 or 32768 f32 elements, not
            :attr:`windowed`), each part by ``block`` threads (:attr:`chunks` 1); 1
            elsewhere.
        block (baked): threads per CTA (the PTX unrolls the CTA's row, or part, over them),
            a multiple of 32 up to 1024; the default follows ``hidden`` and ``split``
            (:func:`default_block`).
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
    split: int = baked(1, validator=_split_check,
                       doc="CTAs a token, each a part of the row (1 to 8 for dynamic)")
    block: int = baked(attrs.Factory(lambda self: default_block(self.hidden, self.dtype,
                                                                self.split), takes_self=True),
                       validator=_block_check, doc="threads per CTA (baked: the PTX unrolls over it)")
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
        # a token over several CTAs (split): parts of 128 vectors (suggested_split's at few
        # tokens), 144 on 160 threads (a ragged sweep), one group a CTA
        + [{"hidden": 18432, "scale_mode": "group", "split": 18},
           {"hidden": 18432, "scale_mode": "group", "split": 16},
           {"hidden": 7168, "scale_mode": "group", "split": 56},
           {"hidden": 4096, "scale_mode": "static_param", "split": 4},
           {"dtype": "f32", "hidden": 7168, "scale_mode": "static_baked", "static_scale": 0.05,
            "split": 14}]
        # the dynamic scale's cluster: the largest portable one, and one of 3 (8-byte vectors)
        + [{"hidden": 18432, "split": 8}, {"dtype": "f32", "hidden": 4098, "split": 3}]
    )

    #: What each pointer parameter points to (docs/writing-specs.md, "Array declarations"):
    #: ``split`` CTAs a row, so the rows are grid.x / split; no scale for static_baked.
    arrays = {"x": "dtype[grid.x / split, hidden]", "q": "e4m3[grid.x / split, hidden]",
              "scale": "f32[grid.x / split] if scale_mode == 'dynamic' else "
                       "f32[grid.x / split, hidden / 128] if scale_mode == 'group' else "
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
    def part(self) -> int:
        """Vectors a CTA walks: the row's (the most a row at any phase touches, in a
        window), or with ``split`` > 1 its part of the row, ``hidden / vector / split``."""
        vectors = row_vectors(self.hidden, self.dtype, windowed(self.hidden, self.dtype))[1]
        return vectors // self.split

    @property
    def chunks(self) -> int:
        """Pieces a CTA's row (or part) is processed in: 1 when ``block`` threads hold it in
        registers (x read once; always with ``split`` > 1), else the number of chunks each
        of the two passes walks."""
        most = most_vectors_per_thread(self.vector, self.dtype)
        return 1 if self.part <= self.block * most else cdiv(self.part, self.block * most)

    def grid(self, tokens: int) -> tuple[int, int, int]:
        """``split`` CTAs per token, consecutive along x: ``(tokens * split, 1, 1)``.

        Raises:
            SpecError: ``tokens`` is not an int (a NumPy integer is one) from 1 to
                ``(2^31 - 1) / split`` (the grid's x limit), naming ``tokens`` and the bound.
        """
        return self.launch_dims(tokens)[0]

    def launch_dims(self, tokens: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``tokens`` rows: ``split`` CTAs of ``block`` threads per
        row (one by default). Raises as :meth:`grid`."""
        return row_launch_dims("Fp8Quant", tokens, self.block, split=self.split, name="tokens")

    def bytes_moved(self, tokens: int) -> int:
        """Fewest bytes a launch must move: x read once, q written once (1 byte per
        element), and one f32 scale per token (dynamic), per group of 128 (group) or one
        in total (static_param)."""
        tokens = count("Fp8Quant.bytes_moved", "tokens", tokens)
        scales = {"dynamic": 4 * tokens, "static_param": 4, "static_baked": 0,
                  "group": 4 * tokens * (self.hidden // GROUP_SIZE)}[self.scale_mode]
        return tokens * self.hidden * (self.dtype.size + 1) + scales


def suggested_split(hidden: int, dtype: DType | str, scale_mode: str, tokens: int,
                    sm_count: int = 132) -> int:
    """The ``split`` for a launch over ``tokens`` tokens: several CTAs a token when tokens
    are few, so that the work spreads over the SMs.

    Rows held in registers in whole vectors (:func:`~specdsl.kernels._rows.spread_split`):
    group scales as SiluMulQuant's, the fewest CTAs whose parts are at most 128 vectors,
    within 4 CTAs an SM; a static scale parts of up to :data:`STATIC_PART_VECTORS` (512)
    vectors within :data:`STATIC_CTAS_PER_SM` (1) CTA an SM; past that bound, the largest
    power of two within it. Parts are equal whole vectors (and groups of 128), at least a
    warp's 32. The dynamic scale, whose CTAs meet in a cluster reduction
    (:func:`~specdsl.kernels._rows.cluster_split`): 8 CTAs a token for rows of at least
    :data:`CLUSTER_MIN_VECTORS` vectors, up to an eighth of ``sm_count`` in tokens (16 on an
    H200), else 1. 1 for rows in a window or in chunks, no tokens or ``sm_count`` 0
    (``sm_count``: the device's SM count, 132 on an H200; ``specdsl.torch`` passes 0 for the
    dynamic scale on a device without thread block clusters, before sm_90).

    Measured on the H200 (``benchmarks/variants.py fp8-split-rule``, 2026-12-02, two
    rounds, bf16, graph replay, us; docs/kernels/fp8_quant.md, "Few tokens"): groups of
    18432, 2.60 unsplit against 1.31 at 18 (1 token), 2.92 against 1.65 (16 tokens), 5.56
    against 5.31 at 2 (256 tokens); at 4096 and 7168 this rule within 5% of the best split
    tried (1 to 16). A static scale, 18432: 1.60 against 1.15 (1 token), 1.85 against 1.50
    (16), 2.25 against 1.99 at 8 (32); from 128 tokens unsplit was faster (2.99 against 3.08
    at 2 and 4), and 4096 ran level or slower split (64 tokens: 1.35 unsplit, 1.44 at 2).
    The dynamic scale (``variants.py split-bounds-more``, 2026-12-02, two rounds, hidden
    4096 to 28672, 1 to 48 tokens, splits 1, 2, 4 and 8): 28672, 2.34 unsplit against 1.96
    at 8 (1 token), 2.95 against 2.58 (16), 2.99 against 2.94 at 4 (33); 18432, 1.97 against
    1.89 (1), 2.29 against 2.23 (16), 2.68 unsplit against 2.79 at 8 (33); 14336, 1.75
    unsplit against 1.86 at 8 (1); 4096, 1.31 against 1.72.

    Raises:
        SpecError: a request :class:`Fp8Quant` refuses (naming the field), or ``tokens``
            or ``sm_count`` not an int of 0 or more (a NumPy integer is one).
    """
    tokens, sm_count = suggestion_counts("suggested_split", tokens=tokens, sm_count=sm_count)
    static = 1.0 if scale_mode == "static_baked" else None  # the split ignores its value
    request = Fp8Quant(hidden=hidden, dtype=dtype, scale_mode=scale_mode,
                       static_scale=static)
    if tokens == 0 or sm_count == 0 or request.windowed or request.chunks > 1:
        return 1

    def split_taken(split: int) -> bool:
        return takes(Fp8Quant, hidden=hidden, dtype=dtype, scale_mode=scale_mode,
                     static_scale=static, split=split)

    if request.scale_mode == "dynamic":
        return cluster_split(request.part, tokens, sm_count, split_taken,
                             min_vectors=CLUSTER_MIN_VECTORS, rows_per_sm=CLUSTER_TOKENS_PER_SM)
    if request.scale_mode == "group":
        return spread_split(request.part, tokens, sm_count, split_taken)
    return spread_split(request.part, tokens, sm_count, split_taken,
                        part_vectors=STATIC_PART_VECTORS, ctas_per_sm=STATIC_CTAS_PER_SM)


def check_group(length: int, field: str) -> None:
    """Refuse a row of ``length`` that is not whole groups of :data:`GROUP_SIZE`.

    Raises:
        ValueError: naming ``field`` (the spec turns it into a SpecError).
    """
    if length % GROUP_SIZE:
        raise ValueError(f"expected {field} to be a multiple of {GROUP_SIZE} for scale_mode "
                         f"group ({field} is {length}): one scale a group of {GROUP_SIZE} "
                         f"elements")
