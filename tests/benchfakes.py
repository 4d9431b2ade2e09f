"""Stand-ins that let the benchmark cases run on CPU tensors (tests/test_benchmarks.py).

:class:`CpuTorch` is torch with ``device="cuda"`` dropped from the constructors the cases
call and ``torch.cuda``'s synchronization made a no-op; :func:`install_fake_liger` puts a
``liger_kernel`` that computes its RoPE with torch, in Hugging Face's layout and in place as
Liger's kernel does, where the adapter imports it.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch

#: Constructors the benchmark cases call with ``device="cuda"``.
_CONSTRUCTORS = ("randn", "randn_like", "empty", "empty_like", "randint", "zeros", "tensor",
                 "arange", "full")


def _on_cpu(function: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("device", None)
        return function(*args, **kwargs)
    return call


class _Cuda:
    """``torch.cuda`` without a device: synchronize does nothing."""

    def synchronize(self) -> None:
        pass


class CpuTorch:
    """torch, with tensors made on the CPU where the cases ask for ``device="cuda"``."""

    def __init__(self) -> None:
        self.cuda = _Cuda()

    def __getattr__(self, name: str) -> Any:
        value = getattr(torch, name)
        return _on_cpu(value) if name in _CONSTRUCTORS else value


def _rotate_half(t: Any) -> Any:
    half = t.shape[-1] // 2
    return torch.cat([-t[..., half:], t[..., :half]], dim=-1)


def _liger_rotary_pos_emb(q: Any, k: Any, cos: Any, sin: Any, position_ids: Any = None,
                          unsqueeze_dim: int = 1) -> tuple:
    """Hugging Face's ``apply_rotary_pos_emb`` on ``(1, heads, tokens, head_dim)``, written
    back into q and k as Liger's kernel does."""
    if q.dim() != 4 or cos.dim() != 3:
        raise ValueError(f"q {tuple(q.shape)} and cos {tuple(cos.shape)}: expected 4 and 3 dims")
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    for t in (q, k):
        t.copy_(t * cos + _rotate_half(t) * sin)
    return q, k


def install_fake_liger(monkeypatch: Any) -> None:
    """Make ``liger_kernel.transformers.rope`` importable, with a torch RoPE."""
    rope = types.ModuleType("liger_kernel.transformers.rope")
    rope.liger_rotary_pos_emb = _liger_rotary_pos_emb
    transformers = types.ModuleType("liger_kernel.transformers")
    transformers.rope = rope
    package = types.ModuleType("liger_kernel")
    package.transformers = transformers
    for name, module in (("liger_kernel", package), ("liger_kernel.transformers", transformers),
                         ("liger_kernel.transformers.rope", rope)):
        monkeypatch.setitem(sys.modules, name, module)
