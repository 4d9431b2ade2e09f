"""Liger-Kernel as a peer in the kernel benchmarks: one :class:`harness.Impl` per op.

Liger-Kernel (``liger-kernel`` 0.8.5, pure Python and Triton) is called through its
functional API, which is what its modules' ``forward`` call (``LigerRMSNorm``,
``LigerFusedAddRMSNorm``, ``LigerSoftmax``) and what its own benchmark scripts time
(``benchmark/scripts/benchmark_*.py`` in linkedin/Liger-Kernel): ``liger_rms_norm``,
``liger_fused_add_rms_norm``, ``liger_softmax``, ``liger_swiglu`` (SwiGLU's elementwise part,
``silu(a) * b`` on two separate tensors, as ``LigerSwiGLUMLP`` calls it on the gate and up
projections) and ``liger_rotary_pos_emb`` (Hugging Face's layout: q and k as ``(1, heads,
tokens, head_dim)`` views of ``(tokens, heads, head_dim)`` storage, rotated in place;
``cos``/``sin`` of width ``head_dim`` per token, computed outside the timed call as Liger's
benchmark does). Liger has no FP8 quantization.

Each factory imports Liger when called, so a machine without it (or with a torch or Triton
it cannot import under) gets ``n/a`` with the import error as the reason.
"""

from __future__ import annotations

from typing import Any

from harness import Impl, Unavailable


def version() -> str:
    """The installed liger-kernel's version, or why there is none."""
    from importlib import metadata

    try:
        return metadata.version("liger-kernel")
    except metadata.PackageNotFoundError:
        return "not installed"


def _functional() -> Any:
    from liger_kernel.transformers import functional

    return functional


def rms_norm(eps: float) -> Impl:
    """``liger_rms_norm(x, weight, eps)`` (casting mode "llama") on ``(x, weight, y)`` sets."""
    norm = _functional().liger_rms_norm
    return Impl(prepare=lambda inputs: inputs[:2], run=lambda x, w: norm(x, w, eps))


def fused_add_rms_norm(eps: float) -> Impl:
    """``liger_fused_add_rms_norm(x, residual, weight, eps)`` -> ``(y, x + residual)`` on
    ``(x, residual, weight, y)`` sets (Liger writes both to new tensors)."""
    fused = _functional().liger_fused_add_rms_norm
    return Impl(prepare=lambda inputs: inputs[:3], run=lambda x, r, w: fused(x, r, w, eps))


def softmax() -> Impl:
    """``liger_softmax(x)`` along the last axis on ``(x, y)`` sets."""
    op = _functional().liger_softmax
    return Impl(prepare=lambda inputs: inputs[:1], run=op)


def silu_mul(d: int) -> Impl:
    """``liger_swiglu(gate, up)`` with the gate and up halves of ``x`` ``[tokens, 2d]`` as
    two contiguous tensors (made outside the timed call: Liger's kernel takes one row
    stride for both, and its callers have the two projections apart)."""
    op = _functional().liger_swiglu
    return Impl(prepare=lambda inputs: (inputs[0][:, :d].contiguous(),
                                        inputs[0][:, d:].contiguous()),
                run=op)


def rope(cos_sin: Any) -> Impl:
    """``liger_rotary_pos_emb(q, k, cos, sin)`` on ``(q, k, positions)`` sets.

    ``cos_sin(positions)`` returns the ``(cos, sin)`` halves ``[tokens, head_dim / 2]``
    (bf16) the torch version reads; Liger takes them duplicated to ``head_dim`` (rotate-half
    layout) and batched, ``(1, tokens, head_dim)``. Outputs come back as
    ``(tokens, heads, head_dim)`` views of q and k.
    """
    from liger_kernel.transformers.rope import liger_rotary_pos_emb

    def prepare(inputs: tuple) -> tuple:
        import torch

        q, k, positions = inputs[:3]
        cos, sin = cos_sin(positions)
        return (q.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2),
                torch.cat([cos, cos], dim=-1).unsqueeze(0),
                torch.cat([sin, sin], dim=-1).unsqueeze(0))

    def run(q: Any, k: Any, cos: Any, sin: Any) -> tuple:
        q_out, k_out = liger_rotary_pos_emb(q, k, cos, sin)[:2]
        return q_out.transpose(1, 2)[0], k_out.transpose(1, 2)[0]

    return Impl(prepare=prepare, run=run)


def missing(reason: str) -> Any:
    """A factory for an op Liger does not have: it raises :class:`Unavailable`."""
    def factory() -> Impl:
        raise Unavailable(reason)
    return factory
