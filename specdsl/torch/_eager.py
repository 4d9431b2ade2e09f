"""Which path an op call takes: the op's implementation called directly (the eager fast
path), or the registered ``torch.library.custom_op`` through torch's dispatcher.

The dispatcher is what lets ``torch.compile``, FakeTensor, functionalization, autograd,
vmap, ``torch.jit.trace``, tensor subclasses and torch modes see an op. For a plain eager
call on plain tensors it does none of that, and a Python custom op's dispatch costs several
microseconds of host time (``benchmarks/torch_eager.py`` times it). :func:`plain` tells
such calls apart with a few reads of torch's thread-local state and of the tensors (under
a microsecond); each public function then calls the one implementation directly, and
hands everything else to the registered op, which runs that same implementation. A call
that mutates a tensor bumps its version counter first, as the op's ``ADInplaceOrView``
kernel does.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["plain"]

# Bound once: each is a C function (torch.compiler.is_compiling a Python one that
# torch.compile folds to True while it traces, so a traced call never looks further).
_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack      # FakeTensorMode, make_fx, ...
_function_modes = torch._C._is_torch_function_mode_enabled  # incl. `with torch.device(...)`
_transforms = torch._C._are_functorch_transforms_active   # vmap, grad, functionalize
_jit_tracing = torch._C._is_tracing                        # torch.jit.trace
_grad_enabled = torch.is_grad_enabled
_Tensor, _Parameter = torch.Tensor, torch.nn.Parameter


def plain(*tensors: Any) -> bool:
    """Whether an op call on ``tensors`` (its tensor arguments, the one whose device the
    others must share first) needs nothing of the dispatcher, so its implementation may
    be called directly with the same result, error and side effects.

    That holds when torch is not tracing the call (``torch.compile``, ``torch.export``,
    ``torch.jit.trace``), no torch dispatch mode, torch function mode or functorch
    transform is active, and every tensor is a ``torch.Tensor`` or ``torch.nn.Parameter``
    of exactly that type (no FakeTensor, FunctionalTensor, DTensor, jagged nested tensor
    or other subclass), without the negative bit (which the dispatcher resolves into a
    copy) and not needing autograd (grad mode on and ``requires_grad``: the op's autograd
    kernel gives those results a ``grad_fn`` that refuses a backward). The first tensor
    is on a CUDA device or the CPU (which the implementation refuses as the op does; a
    meta tensor gets the op's fake result).

    A strided nested tensor is not asked about (a read a tensor, on every call): torch
    refuses it on either path, with a ``RuntimeError`` whose message differs.

    Args:
        tensors: the call's tensor arguments; anything that is not a tensor makes the
            answer False (the op's schema then refuses it).

    Returns:
        True where the public function may call the op's implementation directly.
    """
    if _compiling() or _dispatch_modes() or _function_modes() or _transforms() or _jit_tracing():
        return False
    grad = _grad_enabled()
    for t in tensors:
        if ((type(t) is not _Tensor and type(t) is not _Parameter) or t.is_neg()
                or (grad and t.requires_grad)):
            return False
    first: torch.Tensor = tensors[0]
    on_device: bool = first.is_cuda or first.is_cpu  # typed where torch's stubs are absent
    return on_device
