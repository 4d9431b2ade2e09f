"""Loads that allocate no L1 line (``.L1::no_allocate``) in the kernels that read each byte
of ``x`` once: SiluMul, SiluMulQuant and Fp8Quant (rows held in registers).

Whether it pays depends on the size of the launch, not on the kernel (H200, 2026-12-02,
``docs/kernels/silu_mul.md``, "Small launches"): from 3 to 50 MB moved (256 to 1024
tokens), the loads that skip L1 were 0.2 to 0.7 us (3 to 8%) faster by CUDA-graph replay;
under 1 MB (1 and 16 tokens) level within 0.05 us; from 100 MB 2 to 10% slower (SiluMul
16384 x 8192: 205 against 187 us). A request therefore keeps the field off by default, and
a caller that knows its launch size asks :func:`suggested_l1_no_allocate`, as
``specdsl.torch`` does at each call.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, cast

import attrs

__all__ = ["L1_NO_ALLOCATE_MIN_BYTES", "L1_NO_ALLOCATE_MAX_BYTES", "suggested_l1_no_allocate",
           "small_launch_loads", "l1_no_allocate_field"]

#: Bytes a launch moves (``spec.bytes_moved(tokens)``) from which :func:`suggested_l1_no_allocate`
#: says yes: between the largest launch measured level (0.8 MB) and the smallest faster (3 MB).
L1_NO_ALLOCATE_MIN_BYTES = 2 * 2**20
#: ... and up to which: between the largest launch measured faster (50 MB) and the smallest
#: slower (100 MB).
L1_NO_ALLOCATE_MAX_BYTES = 64 * 2**20

L1_NO_ALLOCATE_DOC = ("load x with .L1::no_allocate: faster for launches moving 2 to 64 MiB, "
                      "slower for larger ones (suggested_l1_no_allocate)")


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
        TypeError: ``bytes_moved`` is not an int.
        ValueError: ``bytes_moved`` is negative.
    """
    if isinstance(bytes_moved, bool) or not isinstance(bytes_moved, int):
        raise TypeError(f"suggested_l1_no_allocate: bytes_moved must be an int "
                        f"(got {bytes_moved!r})")
    if bytes_moved < 0:
        raise ValueError(f"suggested_l1_no_allocate: bytes_moved must be 0 or more "
                         f"(got {bytes_moved})")
    return L1_NO_ALLOCATE_MIN_BYTES <= bytes_moved <= L1_NO_ALLOCATE_MAX_BYTES


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
        ValueError: ``tokens`` is not an int of 0 or more.
    """
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"small_launch_loads: tokens must be an int of 0 or more "
                         f"(got {tokens!r})")
    if tokens == 0 or spec.l1_no_allocate or not suggested_l1_no_allocate(spec.bytes_moved(tokens)):
        return spec
    if getattr(spec, "windowed", False) or getattr(spec, "chunks", 1) > 1:
        return spec  # Fp8Quant rows the loads are not written for (l1_no_allocate_field)
    evolved: _S = attrs.evolve(cast(Any, spec), l1_no_allocate=True)  # an attrs spec class
    return evolved


def l1_no_allocate_field(instance: Any, attribute: Any, value: bool) -> None:
    """Fp8Quant's validator: the loads are written for rows held in registers in whole
    vectors (one pass, no window); elsewhere the field is refused, not ignored."""
    if value and (instance.windowed or instance.chunks > 1):
        where = "walked in a window" if instance.windowed else f"in {instance.chunks} chunks"
        raise ValueError(f"expected False for hidden={instance.hidden} {instance.dtype}: the "
                         f"loads without L1 lines are written for rows held in registers in "
                         f"whole vectors, and this row is {where}")
