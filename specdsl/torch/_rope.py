"""``rotary_embedding``: :class:`~specdsl.kernels.RoPE` in place on q and k as a torch op."""

import math
from typing import Any

import torch

from ..errors import LaunchError, SpecError
from . import _eager, _runtime, _validate, specs

__all__ = ["rotary_embedding"]

_OP_NAME = "specdsl.torch.rotary_embedding"
_increment_version = torch.autograd.graph.increment_version


def _heads(positions: torch.Tensor, name: str, t: torch.Tensor, head_dim: int) -> int:
    """Heads a token of ``t`` holds: ``t`` is positions' shape, then heads and head_dim."""
    lead = tuple(positions.shape)
    if t.dim() <= len(lead) or tuple(t.shape[:len(lead)]) != lead:
        raise LaunchError(f"{_OP_NAME}: {name} has shape {tuple(t.shape)}; expected positions' "
                          f"shape {lead} followed by (heads, {head_dim}) or (heads * {head_dim},)")
    per_token: int = math.prod(t.shape[len(lead):])
    if per_token % head_dim:
        raise LaunchError(f"{_OP_NAME}: {name} has shape {tuple(t.shape)}: {per_token} "
                          f"elements a token, not a whole number of heads of head_dim="
                          f"{head_dim}")
    return per_token // head_dim


def _check(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
           head_dim: int) -> tuple[int, int]:
    """``(q_heads, kv_heads)`` once every argument is checked."""
    _validate.tensor(_OP_NAME, "positions", positions)
    if positions.dtype != torch.int64:
        raise LaunchError(f"{_OP_NAME}: positions has dtype {positions.dtype}; expected "
                          f"torch.int64")
    _validate.contiguous(_OP_NAME, "positions", positions)
    _validate.float_tensor(_OP_NAME, "q", q, in_place=True)
    _validate.float_tensor(_OP_NAME, "k", k, in_place=True)
    _validate.same_dtype(_OP_NAME, "k", k, "q", q)
    if head_dim < 1:
        raise SpecError(f"{_OP_NAME}: head_dim = {head_dim} is invalid: expected a positive "
                        f"even number of elements")
    heads = _heads(positions, "q", q, head_dim), _heads(positions, "k", k, head_dim)
    _validate.same_device(_OP_NAME, q=q, k=k, positions=positions)
    return heads


def _request(q: torch.Tensor, heads: tuple[int, int], head_dim: int, theta: float, style: str,
             rotary_dim: int | None) -> Any:
    return _validate.request(_OP_NAME, "q", q, specs.rotary_embedding,
                             q.dtype, heads[0], heads[1], head_dim, rotary_dim, theta, style)


def _plan(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
          theta: float, style: str, rotary_dim: int | None) -> _validate.Plan:
    """Every check of a rotary_embedding call, in order; the plan they settle."""
    heads = _check(positions, q, k, head_dim)
    _validate.on_cuda(_OP_NAME, "q", q)
    _validate.disjoint(_OP_NAME, "q", q, "k", k)
    return _validate.plan(_request(q, heads, head_dim, theta, style, rotary_dim),
                          positions.numel())


_PLANS = _validate.Plans()


def _rotary_embedding(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
                      theta: float, style: str, rotary_dim: int | None) -> None:
    """The implementation of ``specdsl::rotary_embedding`` (and of its eager fast path)."""
    key = (positions.shape, positions.dtype, q.shape, q.dtype, k.shape, k.dtype, head_dim,
           theta, style, rotary_dim)
    plan, index = _PLANS.get(key), _validate.placed(q, k, positions)
    if plan is None or index < 0 or _validate.overlap(q, k):
        plan = _PLANS.keep(key, _plan(positions, q, k, head_dim, theta, style, rotary_dim))
    if plan.rows:
        _runtime.launch(plan, (q, k, positions, plan.rows), index)


def _rotary_embedding_fake(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                           head_dim: int, theta: float, style: str,
                           rotary_dim: int | None) -> None:
    heads = _check(positions, q, k, head_dim)
    if _validate.concrete(*heads, head_dim, theta, rotary_dim):
        _request(q, heads, head_dim, theta, style, rotary_dim)


torch.library.custom_op("specdsl::rotary_embedding", _rotary_embedding,
                        mutates_args=("q", "k")).register_fake(_rotary_embedding_fake)
_ROPE_OP = torch.ops.specdsl.rotary_embedding.default


def rotary_embedding(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
                     theta: float = 10000.0, style: str = "neox",
                     rotary_dim: int | None = None) -> None:
    """Rotary position embedding (RoFormer), applied to ``q`` and ``k`` in place.

    For the token at position ``p`` and each pair ``i < R/2`` (``R = rotary_dim``), the
    pair is rotated by ``p * theta^(-2i/R)``; the pairs are ``(x[i], x[i + R/2])`` for
    ``style="neox"`` and ``(x[2i], x[2i+1])`` for ``"gptj"``; elements from ``R`` on are
    left alone. The op is ``torch.ops.specdsl.rotary_embedding`` (it declares that it
    mutates ``q`` and ``k``), launching :class:`~specdsl.kernels.RoPE`.

    Args:
        positions: the tokens' positions, int64, contiguous, any shape ``P`` (``[tokens]``
            or ``[batch, seq]``).
        q: ``P + (q_heads, head_dim)`` or ``P + (q_heads * head_dim,)``, contiguous, on a
            CUDA device; f32, f16 or bf16. Rotated in place.
        k: ``P + (kv_heads, head_dim)`` or ``P + (kv_heads * head_dim,)``, q's dtype and
            device, contiguous, not overlapping q. Rotated in place.
        head_dim: elements a head; even, 2 to 1024.
        theta: the frequency base, greater than 1 (10000 in RoFormer and Llama 2, 500000
            in Llama 3).
        style: ``"neox"`` (rotate halves, as Llama) or ``"gptj"`` (interleaved pairs).
        rotary_dim: rotated elements a head (even, at most head_dim); None for head_dim.

    Returns:
        None: q and k hold the result.

    Raises:
        LaunchError: a wrong dtype, shape or device, a non-contiguous tensor, or q and k
            overlapping.
        SpecError: a head_dim, rotary_dim, theta, style or head count the kernel does
            not take.
    """
    if (_eager.plain(q, k, positions) and type(head_dim) is int and type(theta) is float
            and type(style) is str and (rotary_dim is None or type(rotary_dim) is int)):
        _increment_version((q, k))  # as the op's ADInplaceOrView kernel does first
        _rotary_embedding(positions, q, k, head_dim, theta, style, rotary_dim)
    else:
        _ROPE_OP(positions, q, k, head_dim, theta, style, rotary_dim)
