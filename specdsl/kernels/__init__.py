"""The built-in kernels: LLM-inference spec classes, each rendered from ``templates/``."""

from ._streaming import (
    L1_NO_ALLOCATE_MAX_BYTES,
    L1_NO_ALLOCATE_MIN_BYTES,
    small_launch_loads,
    suggested_l1_no_allocate,
)
from .fp8_quant import Fp8Quant
from .rmsnorm import RMSNorm
from .rmsnorm_quant import RMSNormQuant
from .rope import RoPE
from .silu_mul import SiluMul
from .silu_mul_quant import SiluMulQuant
from .softmax import Softmax
from .vector_add import VectorAdd

#: Every built-in spec class, in the order ``specdsl list`` shows them.
ALL = (VectorAdd, RMSNorm, Softmax, RoPE, SiluMul, Fp8Quant, RMSNormQuant, SiluMulQuant)

__all__ = ["VectorAdd", "RMSNorm", "Softmax", "RoPE", "SiluMul", "Fp8Quant", "RMSNormQuant", "SiluMulQuant",
           "ALL", "suggested_l1_no_allocate", "small_launch_loads",
           "L1_NO_ALLOCATE_MIN_BYTES", "L1_NO_ALLOCATE_MAX_BYTES"]
