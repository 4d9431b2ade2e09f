"""Loads that allocate no L1 line (``.L1::no_allocate``) in the kernels that read each byte
of ``x`` once: SiluMul, SiluMulQuant and Fp8Quant (rows held in registers).

Whether it pays depends on the size of the launch, not on the kernel (H200, 2026-12-02,
``benchmarks/l1_loads.py``; ``docs/kernels/silu_mul.md``, "Small launches"):

* from 3 to 50 MB moved (256 to 1024 tokens), 0.16 to 0.63 us (1 to 7%) faster by
  CUDA-graph replay, level by CUDA events (within 0.1 us either way);
* under 1 MB (1 and 16 tokens) level, or slower (SiluMul 16 x 8192: 1.51 against 1.43 us
  by graph replay);
* from 100 MB, 2 to 9% slower (SiluMul 16384 x 8192: 203.6 against 187.8 us).

A request therefore keeps the field off by default, and a caller that knows its launch size
asks :func:`suggested_l1_no_allocate`, as ``specdsl.torch`` does at each call.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, cast

import attrs

from ._checks import count

__all__ = ["L1_NO_ALLOCATE_MIN_BYTES", "L1_NO_ALLOCATE_MAX_BYTES", "suggested_l1_no_allocate",
           "small_launch_loads"]

#: Bytes a launch moves (``spec.bytes_moved(tokens)``) from which :func:`suggested_l1_no_allocate`
#: says yes: between the largest launch measured level or slower (0.8 MB) and the smallest
#: faster (3 MB).
L1_NO_ALLOCATE_MIN_BYTES = 2 * 2**20
#: ... and up to which: between the largest launch of SiluMul and Fp8Quant measured faster
#: (50 MB) and the smallest slower (100 MB); no size between was measured (SiluMulQuant at
#: 84 MB was 5% faster, and is left out).
L1_NO_ALLOCATE_MAX_BYTES = 64 * 2**20

L1_NO_ALLOCATE_DOC = ("load x with .L1::no_allocate: faster by CUDA-graph replay for launches "
                      "moving 3 to 50 MB, slower from 100 MB (suggested_l1_no_allocate)")
#: Fp8Quant's: the same, for rows held in registers only.
FP8_L1_NO_ALLOCATE_DOC = L1_NO_ALLOCATE_DOC + "; rows in registers only, refused in a window or chunks"


def suggested_l1_no_allocate(bytes_moved: int) -> bool:
    """Whether a launch moving ``bytes_moved`` bytes should load ``x`` with
    ``.L1::no_allocate`` (the ``l1_no_allocate`` field of SiluMul, SiluMulQuant and Fp8Quant).

    Args:
        bytes_moved: the launch's bytes read plus written, ``spec.bytes_moved(tokens)``.

    Returns:
        True from :data:`L1_NO_ALLOCATE_MIN_BYTES` (2 MiB) to :data:`L1_NO_ALLOCATE_MAX_BYTES`
        (64 MiB), where the H200 measurements of this module's docstring found the loads
        faster.

    Raises:
        TypeError: ``bytes_moved`` is not an int (a NumPy integer is one).
        ValueError: ``bytes_moved`` is negative.
    """
    size = count("suggested_l1_no_allocate", "bytes_moved", bytes_moved)
    return L1_NO_ALLOCATE_MIN_BYTES <= size <= L1_NO_ALLOCATE_MAX_BYTES


class _Streaming(Protocol):
    """What :func:`small_launch_loads` reads of a request."""

    @property
    def l1_no_allocate(self) -> bool: ...

    def bytes_moved(self, tokens: int) -> int: ...


_S = TypeVar("_S", bound=_Streaming)


def small_launch_loads(spec: _S, tokens: int) -> _S:
    """``spec`` (a SiluMul, SiluMulQuant or Fp8Quant) with ``l1_no_allocate=True`` where a
    launch over ``tokens`` rows moves few enough bytes (:func:`suggested_l1_no_allocate` of
    ``spec.bytes_moved(tokens)``) and the request takes the field (Fp8Quant: rows held in
    registers in whole vectors); else ``spec`` itself.

    Raises:
        TypeError: ``spec`` has no ``l1_no_allocate`` field, or ``tokens`` is not an int
            (a NumPy integer is one).
        ValueError: ``tokens`` is negative.
    """
    launches = count("small_launch_loads", "tokens", tokens)
    if isinstance(spec, type):
        raise TypeError(f"small_launch_loads: expected a request (an instance, such as "
                        f"{spec.__name__}(...)), got the class {spec.__name__}")
    if not isinstance(getattr(spec, "l1_no_allocate", None), bool):
        raise TypeError(f"small_launch_loads: {type(spec).__name__} has no l1_no_allocate "
                        f"field (SiluMul, SiluMulQuant and Fp8Quant have one)")
    if (launches == 0 or spec.l1_no_allocate or not _rows_take_the_field(spec)
            or not suggested_l1_no_allocate(spec.bytes_moved(launches))):
        return spec
    evolved: _S = attrs.evolve(cast(Any, spec), l1_no_allocate=True)  # an attrs spec class
    return evolved


def _rows_take_the_field(spec: Any) -> bool:
    """Whether the loads without L1 lines are written for ``spec``'s rows: always for SiluMul
    and SiluMulQuant; for Fp8Quant, rows held in registers in whole vectors (one pass, no
    window)."""
    return not getattr(spec, "windowed", False) and getattr(spec, "chunks", 1) == 1


def l1_no_allocate_field(instance: Any, attribute: Any, value: bool) -> None:
    """Fp8Quant's validator: where :func:`_rows_take_the_field` says no, the field is
    refused, not ignored."""
    if value and not _rows_take_the_field(instance):
        where = "walked in a window" if instance.windowed else f"in {instance.chunks} chunks"
        raise ValueError(f"expected False for hidden={instance.hidden} {instance.dtype}: the "
                         f"loads without L1 lines are written for rows held in registers in "
                         f"whole vectors, and this row is {where}")
