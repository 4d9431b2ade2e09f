"""The requests the torch ops launch, built once per combination of plain values.

Each function here is the one place its op turns shapes and arguments into a request
(a spec instance): keyed by plain values (ints, floats, strings, torch dtypes) in an
LRU cache, so a call with a combination seen before builds no spec from its arguments. Every
field these functions do not name keeps the spec class's default, so the ops follow the
kernels' own policies (block sizes, row-length limits) as they change; the exceptions follow
the row count of a call (``rows``): Softmax's split and kept exponentials, SiluMul's geometry
(:func:`~specdsl.kernels.silu_mul.suggested_geometry`) and the FP8 and SiluMul loads without
L1 lines (:func:`~specdsl.kernels.small_launch_loads`, which returns a new request object for
a launch in its window; the ops keep it in their plan for the shape).

They are public so that a build machine can pre-fill a disk cache with exactly the
requests the ops will make (see ``docs/torch.md``)::

    from specdsl import Executor
    from specdsl.torch import specs
    Executor(None, target="sm_90", cache_dir=folder).ensure_module(
        specs.rms_norm(4096, 1e-5, torch.bfloat16))

Raises (every function):
    SpecError: a dtype other than torch.float32, torch.float16 or torch.bfloat16, or
        a value the spec class refuses (its message names the field and the value).
"""

from __future__ import annotations

import functools
from typing import Any, Literal, TypeVar, cast

import torch

from .._spec.dtype import DType
from ..errors import SpecError
from ..kernels import (
    Fp8Quant,
    RMSNorm,
    RMSNormQuant,
    RoPE,
    SiluMul,
    SiluMulQuant,
    Softmax,
    small_launch_loads,
)
from ..kernels._checks import count
from ..kernels._rows import CTAS_PER_SM
from ..kernels.fp8_quant import suggested_split as suggested_fp8_split
from ..kernels.silu_mul import suggested_geometry
from ..kernels.silu_mul_quant import suggested_split as suggested_quant_split
from ..kernels.softmax import (
    KEPT_EXPONENTIALS_ROWS_PER_SM,
    suggested_keep_exponentials,
    suggested_split,
)

__all__ = ["DTYPES", "dtype_of", "rms_norm", "softmax", "softmax_split", "rotary_embedding",
           "silu_and_mul", "scaled_fp8_quant", "per_token_group_quant_fp8", "rms_norm_quant",
           "silu_and_mul_quant"]

#: torch dtype -> specdsl DType of the activations the kernels take.
DTYPES = {torch.float32: DType.F32, torch.float16: DType.F16, torch.bfloat16: DType.BF16}

# Distinct requests kept per op: far more than the shapes of one model.
_KEPT = 1024

_R = TypeVar("_R", SiluMul, SiluMulQuant, Fp8Quant)


def dtype_of(dtype: torch.dtype, function: str | None = None) -> DType:
    """The specdsl :class:`~specdsl.DType` of a torch dtype; ``function``, the specs
    function asking, is named in the message.

    Raises:
        SpecError: not torch.float32, torch.float16 or torch.bfloat16.
    """
    found = DTYPES.get(dtype) if isinstance(dtype, torch.dtype) else None
    if found is None:
        where = f"specs.{function}: " if function else ""
        raise SpecError(f"{where}dtype = {dtype!r} is invalid: expected torch.float32, "
                        f"torch.float16 or torch.bfloat16")
    return found


@functools.lru_cache(maxsize=_KEPT)
def rms_norm(hidden: int, eps: float, dtype: torch.dtype, fused_residual: bool = False,
             l2_evict_last: bool = False) -> RMSNorm:
    """The :class:`~specdsl.kernels.RMSNorm` for rows of ``hidden`` elements of ``dtype``."""
    return RMSNorm(hidden=hidden, eps=eps, dtype=dtype_of(dtype, "rms_norm"),
                   fused_residual=fused_residual, l2_evict_last=l2_evict_last)


@functools.lru_cache(maxsize=_KEPT)
def softmax(cols: int, scale: float, dtype: torch.dtype, split: int = 1,
            l2_evict_last: bool = False, keep_exponentials: bool = False) -> Softmax:
    """The :class:`~specdsl.kernels.Softmax` for rows of ``cols`` elements, ``split`` CTAs a row."""
    return Softmax(cols=cols, scale=scale, dtype=dtype_of(dtype, "softmax"), split=split,
                   l2_evict_last=l2_evict_last, keep_exponentials=keep_exponentials)


def softmax_split(cols: int, dtype: torch.dtype, rows: int, sm_count: int) -> int:
    """CTAs a row for :func:`softmax`, as :func:`~specdsl.kernels.softmax.suggested_split` says.

    A cluster of CTAs shares each row when rows are few and long (decode over a large
    vocabulary); ``sm_count`` is the device's SM count, or 0 where the device has no
    thread block clusters (before sm_90), which always gives 1. A row that is not a whole
    number of 16-byte vectors per CTA is never split. Cached: rows beyond ``sm_count``
    all give 1, so the key space stays small.
    """
    return _split(cols, dtype, min(rows, sm_count + 1), sm_count)


def softmax_keeps_exponentials(cols: int, dtype: torch.dtype, rows: int, sm_count: int,
                               split: int, l2_evict_last: bool) -> bool:
    """Whether :func:`softmax` keeps each exponential in a register for ``rows`` rows, as
    :func:`~specdsl.kernels.softmax.suggested_keep_exponentials` says (few rows a SM of the
    device's ``sm_count``, one CTA a row, registers enough). Cached by whether the rows are
    within the limit, not by the row count, so the key space stays small."""
    few = 0 < rows <= KEPT_EXPONENTIALS_ROWS_PER_SM * sm_count
    return few and _keeps(cols, dtype, sm_count, split, l2_evict_last)


@functools.lru_cache(maxsize=_KEPT)
def _keeps(cols: int, dtype: torch.dtype, sm_count: int, split: int,
           l2_evict_last: bool) -> bool:
    """:func:`softmax_keeps_exponentials` for rows within the limit (one row stands for all;
    ``sm_count`` is positive there)."""
    if dtype not in DTYPES:
        return False
    return suggested_keep_exponentials(cols, dtype_of(dtype), 1, sm_count, split=split,
                                       l2_evict_last=l2_evict_last)


@functools.lru_cache(maxsize=_KEPT)
def _split(cols: int, dtype: torch.dtype, rows: int, sm_count: int) -> int:
    elements = dtype_of(dtype, "softmax_split")
    if sm_count < 1 or rows < 1 or cols < 1 or cols % elements.vector_lanes:
        return 1
    return suggested_split(cols, elements, rows, sm_count)


@functools.lru_cache(maxsize=_KEPT)
def rotary_embedding(dtype: torch.dtype, q_heads: int, kv_heads: int, head_dim: int,
                     rotary_dim: int | None, theta: float, style: str) -> RoPE:
    """The :class:`~specdsl.kernels.RoPE` rotating ``q_heads`` and ``kv_heads`` heads in place."""
    return RoPE(dtype=dtype_of(dtype, "rotary_embedding"), q_heads=q_heads, kv_heads=kv_heads,
                head_dim=head_dim, rotary_dim=rotary_dim, theta=theta,
                style=cast(Literal["neox", "gptj"], style))  # RoPE refuses other names


def _rows(function: str, rows: int | None) -> int | None:
    """``rows`` checked: None, or an int of 0 or more (a NumPy integer too)."""
    if rows is None:
        return None
    return _count(function, "rows", rows, ", or None for a large launch's request")


def _count(function: str, name: str, value: Any, or_else: str = "") -> int:
    """``value`` as an int of 0 or more (a NumPy integer too, as the kernels' ``suggested_*``
    take it), else the SpecError naming ``specs.function`` and ``name``."""
    try:
        return count(f"specs.{function}", name, value)
    except (TypeError, ValueError):
        raise SpecError(f"specs.{function}: {name} must be an int of 0 or more{or_else} "
                        f"(got {value!r})") from None


def _for_rows(spec: _R, rows: int | None) -> _R:
    """``spec`` with the loads of a launch over ``rows`` rows (checked by :func:`_rows`);
    None: a large launch's (the request these functions built before they took the row
    count)."""
    return spec if rows is None else small_launch_loads(spec, rows)


def silu_and_mul(d: int, dtype: torch.dtype, rows: int | None = None) -> SiluMul:
    """The :class:`~specdsl.kernels.SiluMul` for ``rows`` rows of ``2 * d`` inputs, ``d``
    outputs: the geometry of :func:`~specdsl.kernels.silu_mul.suggested_geometry`, and loads
    without L1 lines where the launch is small (:func:`~specdsl.kernels.small_launch_loads`).
    ``rows=None``: the request of a large launch, the kernel's defaults."""
    rows = _rows("silu_and_mul", rows)
    geometry = None if rows is None else suggested_geometry(rows)
    return _for_rows(_silu_and_mul(d, dtype, geometry), rows)


@functools.lru_cache(maxsize=_KEPT)
def _silu_and_mul(d: int, dtype: torch.dtype, geometry: tuple[int, int] | None) -> SiluMul:
    if geometry is None:
        return SiluMul(dtype=dtype_of(dtype, "silu_and_mul"), d=d)
    unroll, block = geometry
    return SiluMul(dtype=dtype_of(dtype, "silu_and_mul"), d=d, unroll=unroll, block=block)


def scaled_fp8_quant(hidden: int, dtype: torch.dtype, static: bool,
                     rows: int | None = None, sm_count: int = 0) -> Fp8Quant:
    """The :class:`~specdsl.kernels.Fp8Quant` for ``rows`` rows of ``hidden``: per-token
    dynamic scales, or (``static``) one f32 scale read from device memory at launch; loads
    without L1 lines where the launch is small (:func:`~specdsl.kernels.small_launch_loads`;
    ``rows=None``: a large launch's). Few rows are each shared by several CTAs, as
    :func:`~specdsl.kernels.fp8_quant.suggested_split` chooses for a device of ``sm_count``
    SMs (the op passes its device's, for the dynamic scale 0 on a device without thread
    block clusters, before sm_90; 0, the default: never split)."""
    return _fp8_for_rows("scaled_fp8_quant", hidden, dtype,
                         "static_param" if static else "dynamic", rows, sm_count)


def per_token_group_quant_fp8(hidden: int, dtype: torch.dtype, rows: int | None = None,
                              sm_count: int = 0) -> Fp8Quant:
    """The :class:`~specdsl.kernels.Fp8Quant` for ``rows`` rows of ``hidden``, one scale a
    group of 128 elements (``scale_mode="group"``); loads and split as
    :func:`scaled_fp8_quant`'s with a static scale."""
    return _fp8_for_rows("per_token_group_quant_fp8", hidden, dtype, "group", rows, sm_count)


def _fp8_for_rows(function: str, hidden: int, dtype: torch.dtype, mode: str,
                  rows: int | None, sm_count: int) -> Fp8Quant:
    rows = _rows(function, rows)
    sm_count = _count(function, "sm_count", sm_count)
    return _for_rows(_fp8_quant(hidden, dtype, mode, _split_rows(rows, sm_count), sm_count),
                     rows)


@functools.lru_cache(maxsize=_KEPT)
def _fp8_quant(hidden: int, dtype: torch.dtype, mode: str, rows: int | None = None,
               sm_count: int = 0) -> Fp8Quant:
    function = "per_token_group_quant_fp8" if mode == "group" else "scaled_fp8_quant"
    elements = dtype_of(dtype, function)
    split = 1 if rows is None else suggested_fp8_split(hidden, elements, mode, rows, sm_count)
    return Fp8Quant(dtype=elements, hidden=hidden, split=split,
                    scale_mode=cast(Literal["dynamic", "static_param", "group"], mode))


def _split_rows(rows: int | None, sm_count: int) -> int | None:
    """The row count a split request is cached by: rows beyond :data:`CTAS_PER_SM` CTAs an
    SM all split 1, so they share one entry (None: a large launch's request)."""
    return None if rows is None else min(rows, CTAS_PER_SM * sm_count + 1)


#: The scale modes of the fused FP8 epilogues (the kernels refuse other names).
_Mode = Literal["dynamic", "static", "group"]


@functools.lru_cache(maxsize=_KEPT)
def rms_norm_quant(hidden: int, eps: float, dtype: torch.dtype, fused_residual: bool,
                   scale_mode: str, l2_evict_last: bool = False) -> RMSNormQuant:
    """The :class:`~specdsl.kernels.RMSNormQuant` for rows of ``hidden``, with scales of
    ``scale_mode`` (``"dynamic"``, ``"static"`` or ``"group"``)."""
    return RMSNormQuant(hidden=hidden, eps=eps, dtype=dtype_of(dtype, "rms_norm_quant"),
                        fused_residual=fused_residual, scale_mode=cast(_Mode, scale_mode),
                        l2_evict_last=l2_evict_last)


def silu_and_mul_quant(d: int, dtype: torch.dtype, scale_mode: str,
                       rows: int | None = None, sm_count: int = 0) -> SiluMulQuant:
    """The :class:`~specdsl.kernels.SiluMulQuant` for ``rows`` rows of ``2 * d`` inputs,
    ``d`` codes, with scales of ``scale_mode``; loads as :func:`scaled_fp8_quant`'s. A few
    rows are each shared by several CTAs, as
    :func:`~specdsl.kernels.silu_mul_quant.suggested_split` chooses for a device of
    ``sm_count`` SMs (the op passes its device's, for the dynamic scale 0 on a device
    without thread block clusters, before sm_90; 0, the default: never split).
    ``rows=None``: a large launch's request."""
    rows = _rows("silu_and_mul_quant", rows)
    sm_count = _count("silu_and_mul_quant", "sm_count", sm_count)
    return _for_rows(_silu_and_mul_quant(d, dtype, scale_mode, _split_rows(rows, sm_count),
                                         sm_count), rows)


@functools.lru_cache(maxsize=_KEPT)
def _silu_and_mul_quant(d: int, dtype: torch.dtype, scale_mode: str, rows: int | None,
                        sm_count: int) -> SiluMulQuant:
    elements = dtype_of(dtype, "silu_and_mul_quant")
    split = 1 if rows is None else suggested_quant_split(d, elements, scale_mode, rows, sm_count)
    return SiluMulQuant(dtype=elements, d=d, scale_mode=cast(_Mode, scale_mode), split=split)
