"""RoPE: rotary position embedding, applied in place to q and k."""

from __future__ import annotations

from typing import Any, Literal

from .._spec.decorator import kernel_spec
from .._spec.dtype import DType
from .._spec.fields import baked, launch
from ..errors import SpecError
from ._checks import FLOAT_DTYPES, block_size, count, in_range, launch_count, one_of
from ._rows import cdiv
from .case import TOLERANCE, KernelCase, Output, from_bits, to_bits

__all__ = ["RoPE", "reference", "example"]

#: Largest flat task index the kernel's u32 index math handles.
_MAX_TASKS = 2**31


def _head_dim_check(instance: Any, attribute: Any, value: int) -> None:
    if not (2 <= value <= 1024 and value % 2 == 0):
        raise ValueError("expected an even number of elements from 2 to 1024")


def _rotary_dim_check(instance: Any, attribute: Any, value: int | None) -> None:
    if value is None:
        return
    if not (2 <= value <= instance.head_dim and value % 2 == 0):
        raise ValueError(f"expected an even number from 2 to head_dim ({instance.head_dim}), "
                         "or None for head_dim")


def _style_check(instance: Any, attribute: Any, value: str) -> None:
    rotary = instance.rotary_dim if instance.rotary_dim is not None else instance.head_dim
    if value == "neox" and instance.dtype.size == 2 and rotary % 4:
        raise ValueError(f"neox style with {instance.dtype} needs rotary_dim a multiple of 4 "
                         f"(got rotary_dim {rotary}): each half is moved in 4-byte words")


def _theta_check(instance: Any, attribute: Any, value: float) -> None:
    if not 1.0 < value <= 1e12:
        raise ValueError("expected a base greater than 1 and at most 1e12 (10000.0 in "
                         "RoFormer, 1e6 in long-context models)")


@kernel_spec(template="rope.ptx.j2", entry="rope")
class RoPE:
    """Rotary position embedding (Su et al. 2021, "RoFormer"), in place on q and k.

    For token ``t`` at position ``p = positions[t]`` and each pair ``i < R/2``
    (``R = rotary_dim``): ``angle = p * theta^(-2i/R)`` and
    ``(x1, x2) <- (x1 cos(angle) - x2 sin(angle), x2 cos(angle) + x1 sin(angle))``,
    where ``(x1, x2) = (x[i], x[i + R/2])`` for ``style="neox"`` (rotate halves) and
    ``(x[2i], x[2i+1])`` for ``style="gptj"`` (interleaved pairs). Elements
    ``R..head_dim`` are untouched.

    Kernel parameters (in order): ``q``: ``[tokens, q_heads, head_dim]``, ``k``:
    ``[tokens, kv_heads, head_dim]`` (both ``dtype``, contiguous, aligned to one
    vector: :attr:`vector_bytes`); ``positions``: ``[tokens]`` int64; ``tokens``: u32.

    Accuracy: the angle is reduced modulo 2 pi exactly enough that the result
    matches a float64 reference within f32 rounding (about 1e-6 absolute in sin and
    cos) for ``|position| < 2^24``; see ``templates/rope.ptx.j2``. Beyond ``2^24`` the
    position itself rounds in f32. Arithmetic is f32, one rounding to ``dtype``.

    Fields:
        dtype (baked): f32, f16 or bf16.
        q_heads, kv_heads (baked): heads of q and of k, 1 to 1024 each.
        head_dim (baked): elements per head row, even, 2 to 1024.
        rotary_dim (baked): rotated elements per row, even, at most head_dim;
            ``None`` means head_dim. neox with f16/bf16 needs a multiple of 4.
        theta (baked): the frequency base, greater than 1, at most 1e12.
        style (baked): ``"neox"`` or ``"gptj"``.
        pair_heads (baked): rotate two head rows a thread with one set of sines and
            cosines when ``q_heads`` and ``kv_heads`` are both even (half the angle work,
            twice the bytes in flight a thread); False: one head row a thread (twice the
            threads, each with a shorter dependent chain: for latency-bound decode).
        block (launch): threads per CTA, a multiple of 32 up to 1024.
    """

    dtype: DType = baked(DType.BF16, validator=one_of(*FLOAT_DTYPES),
                         doc="element type of q and k: f32, f16 or bf16")
    q_heads: int = baked(32, validator=in_range(1, 1024), doc="heads of q")
    kv_heads: int = baked(8, validator=in_range(1, 1024), doc="heads of k")
    head_dim: int = baked(128, validator=_head_dim_check, doc="elements per head row")
    rotary_dim: int | None = baked(None, validator=_rotary_dim_check,
                                   doc="rotated elements per row (None: head_dim)")
    theta: float = baked(10000.0, validator=_theta_check, doc="frequency base")
    style: Literal["neox", "gptj"] = baked("neox", validator=_style_check,
                                           doc="neox: rotate halves; gptj: interleaved pairs")
    # defaults from the copy-rate sweep on an H200 (docs/kernels/rope.md, "Tuning"): one head
    # row a thread and 128-thread CTAs were fastest both at 16384 tokens and at 16
    pair_heads: bool = baked(False, doc="two head rows a thread (one set of sines and "
                                        "cosines) when both head counts are even")
    block: int = launch(128, validator=block_size, doc="threads per CTA")

    #: the requests `specdsl verify --grid` compiles
    variants = {"dtype": ["f32", "f16", "bf16"], "style": ["neox", "gptj"]}

    #: What each pointer parameter points to (docs/writing-specs.md, "Array declarations").
    arrays = {"q": "dtype[tokens, q_heads, head_dim]", "k": "dtype[tokens, kv_heads, head_dim]",
              "positions": "int64[tokens]"}

    @property
    def rotary(self) -> int:
        """The rotated elements per row (``rotary_dim``, or ``head_dim`` when None)."""
        return self.rotary_dim if self.rotary_dim is not None else self.head_dim

    @property
    def vector_elements(self) -> int:
        """Elements per vector load: the widest power of two up to 16 bytes that tiles a chunk."""
        span = self.rotary // 2 if self.style == "neox" else self.rotary
        for w in (8, 4, 2, 1):
            if w * self.dtype.size <= 16 and span % w == 0 and self.head_dim % w == 0:
                return w
        raise AssertionError("unreachable: w = 1 always tiles")  # pragma: no cover

    @property
    def vector_bytes(self) -> int:
        """Bytes per vector load, the alignment q and k need."""
        return self.vector_elements * self.dtype.size

    @property
    def heads_per_thread(self) -> int:
        """Head rows one thread rotates with one set of sines and cosines: 2 when
        :attr:`pair_heads` and q_heads and kv_heads are both even, else 1."""
        return 2 if self.pair_heads and self.q_heads % 2 == 0 and self.kv_heads % 2 == 0 else 1

    @property
    def tasks_per_token(self) -> int:
        """Threads per token: head groups times chunks per head row."""
        pairs_per_chunk = self.vector_elements if self.style == "neox" else self.vector_elements // 2
        groups = (self.q_heads + self.kv_heads) // self.heads_per_thread
        return groups * (self.rotary // 2 // pairs_per_chunk)

    def grid(self, tokens: int) -> tuple[int, int, int]:
        """The grid (in CTAs) covering ``tokens`` tokens, one thread per task.

        Raises:
            SpecError: ``tokens`` is not an int (a NumPy integer is one), is negative, or
                needs 2^31 or more threads (u32 indexing).
        """
        tokens = launch_count("RoPE", "tokens", tokens)
        tasks = tokens * self.tasks_per_token
        if tokens < 0 or tasks >= _MAX_TASKS:
            raise SpecError(f"RoPE.grid: tokens={tokens} gives {tasks} threads; "
                             f"expected 0 to {_MAX_TASKS - 1}")
        return (max(1, cdiv(tasks, self.block)), 1, 1)

    def launch_dims(self, tokens: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` for ``tokens`` tokens (see :meth:`grid`)."""
        return self.grid(tokens), (self.block, 1, 1)

    def bytes_moved(self, tokens: int) -> int:
        """Fewest bytes a launch must move: the rotated part of q and k read and written
        once, and the positions read (8 bytes each)."""
        tokens = count("RoPE.bytes_moved", "tokens", tokens)
        rows = tokens * (self.q_heads + self.kv_heads)
        return 2 * rows * self.rotary * self.dtype.size + 8 * tokens


def reference(x: Any, positions: Any, *, rotary_dim: int, theta: float, style: str) -> Any:
    """float64 RoPE of ``x`` ``[tokens, heads, head_dim]`` at integer ``positions`` ``[tokens]``.

    ``inv_freq[i] = theta^(-2i/rotary_dim)``; angles, sines and cosines in float64.
    Returns a new array; elements from ``rotary_dim`` on are copied unchanged.
    """
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    half = rotary_dim // 2
    inv_freq = theta ** (-(2.0 * np.arange(half)) / rotary_dim)
    angle = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    out = x.copy()
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 is NaN, as in torch
        if style == "neox":
            x1, x2 = x[..., :half], x[..., half:rotary_dim]
            out[..., :half] = x1 * cos - x2 * sin
            out[..., half:rotary_dim] = x2 * cos + x1 * sin
        else:
            x1, x2 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
            out[..., 0:rotary_dim:2] = x1 * cos - x2 * sin
            out[..., 1:rotary_dim:2] = x2 * cos + x1 * sin
    return out


def example(spec: RoPE, rng, tokens: int = 37, positions: Any = None) -> KernelCase:
    """A launch of ``spec`` on ``tokens`` random tokens at random positions below 131072.

    ``positions`` (int64, length ``tokens``) replaces the random ones. q and k are
    in-place outputs (poisoned by nothing: the kernel reads them). Tolerance:
    :data:`~specdsl.kernels.case.TOLERANCE`.
    """
    import numpy as np

    if positions is None:
        positions = rng.integers(0, 131072, size=tokens, dtype=np.int64)
    positions = np.asarray(positions, dtype=np.int64)
    if positions.shape != (tokens,):
        raise ValueError(f"positions must have shape ({tokens},), got {positions.shape}")
    q = to_bits(rng.standard_normal((tokens, spec.q_heads, spec.head_dim)), spec.dtype)
    k = to_bits(rng.standard_normal((tokens, spec.kv_heads, spec.head_dim)), spec.dtype)
    rope = dict(rotary_dim=spec.rotary, theta=spec.theta, style=spec.style)
    expected = {
        "q": reference(from_bits(q, spec.dtype), positions, **rope),
        "k": reference(from_bits(k, spec.dtype), positions, **rope),
    }
    return KernelCase(
        spec=spec,
        args=(("q", Output(q.shape, spec.dtype, q)), ("k", Output(k.shape, spec.dtype, k)),
              ("positions", positions), ("tokens", np.uint32(tokens))),
        grid=spec.grid(tokens), block=(spec.block, 1, 1),
        expected=expected, tolerance=TOLERANCE[spec.dtype],
    )
