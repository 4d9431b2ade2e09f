"""specdsl's built-in kernels as PyTorch operators (``pip install "specdsl[torch]"``).

Functional ops on torch tensors, each a ``torch.library.custom_op`` in the ``specdsl::``
namespace with a fake (meta) implementation, so a model calling them compiles with
``torch.compile(fullgraph=True)`` and captures in CUDA graphs:

* :func:`rms_norm`, :func:`fused_add_rms_norm` (``residual`` updated in place);
* :func:`softmax` over the last dimension;
* :func:`rotary_embedding` (``q`` and ``k`` rotated in place);
* :func:`silu_and_mul`;
* :func:`scaled_fp8_quant` and :func:`per_token_group_quant_fp8` returning ``(q, scale)``;
* the fused FP8 epilogues :func:`rms_norm_quant`, :func:`fused_add_rms_norm_quant` and
  :func:`silu_and_mul_quant`, returning ``(q, scale)`` with a scale a token, one static
  scale, or a scale a group of 128.

Every op takes contiguous tensors (a non-contiguous one is refused, never copied),
treats every leading dimension as a row, allocates its outputs with torch's allocator on
the input's device, and launches on torch's current stream through one shared
:class:`~specdsl.Executor` per device (:func:`executor`). The request for a combination of
dtype, shape and values is built once (:mod:`specdsl.torch.specs`), and checked in full
once. A plain eager call (no ``torch.compile`` tracing, torch mode, tensor subclass or
autograd in play) runs the op's implementation directly, skipping torch's dispatcher;
every other call goes through the op. The ops are for inference: they have no backward.

Importing this module registers the ops; it does not initialize CUDA or compile
anything (the first call of each request compiles, or reads the disk cache).
"""

import torch

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"specdsl.torch needs torch 2.4 or newer (torch.library.custom_op); "
                      f"torch {torch.__version__} is installed")

from . import specs
from ._activation import silu_and_mul
from ._fused_quant import fused_add_rms_norm_quant, rms_norm_quant, silu_and_mul_quant
from ._norm import fused_add_rms_norm, rms_norm
from ._quant import FP8_DTYPE, per_token_group_quant_fp8, scaled_fp8_quant
from ._rope import rotary_embedding
from ._runtime import executor, use_executor
from ._softmax import softmax

__all__ = [
    "rms_norm", "fused_add_rms_norm", "softmax", "rotary_embedding", "silu_and_mul",
    "scaled_fp8_quant", "per_token_group_quant_fp8", "rms_norm_quant",
    "fused_add_rms_norm_quant", "silu_and_mul_quant", "FP8_DTYPE", "executor", "use_executor",
    "specs",
]
