"""Softmax's float64 reference and its example launch (the tests' and ``specdsl run``'s
oracle for :class:`~specdsl.kernels.Softmax`)."""

from __future__ import annotations

from typing import Any

from .case import TOLERANCE, KernelCase, Output, from_bits, relative_error, to_bits

__all__ = ["reference", "example"]


def reference(x: Any, scale: float) -> Any:
    """float64 softmax of ``x * scale`` along the last axis (maximum subtracted first).

    Special values as ``torch.softmax``: ``-inf`` gives 0; a row with NaN, ``+inf`` or
    no finite ``x * scale`` gives NaN everywhere (``inf - inf``, ``0 / 0``).
    """
    import numpy as np

    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        t = np.asarray(x, dtype=np.float64) * scale
        t = t - np.max(t, axis=-1, keepdims=True)
        e = np.exp(t)
        return e / np.sum(e, axis=-1, keepdims=True)


def example(spec: Any, rng: Any, rows: int = 5) -> KernelCase:
    """A launch of ``spec`` on ``rows`` random rows (x ~ N(0, 4), so rows are peaked).

    The tolerance is the kernels' one table, :data:`~specdsl.kernels.case.TOLERANCE`,
    or twice the error of the float64 reference itself rounded to ``dtype`` where that is
    larger: long f16 rows at small scales have
    most probabilities near ``1/cols``, in f16's subnormal range (below 2^-14), where
    rounding alone costs more than 2e-3.
    """
    import numpy as np

    shape = (rows, spec.cols)
    x = to_bits(rng.normal(0.0, 2.0, shape), spec.dtype)
    grid, block = spec.launch_dims(rows)
    expected = reference(from_bits(x, spec.dtype), spec.scale)
    rounding = relative_error(from_bits(to_bits(expected, spec.dtype), spec.dtype), expected)
    return KernelCase(
        spec=spec,
        args=(("x", x), ("y", Output(shape, spec.dtype)), ("rows", np.uint32(rows))),
        grid=grid, block=block,
        expected={"y": expected},
        tolerance=max(TOLERANCE[spec.dtype], 2 * rounding),
    )
