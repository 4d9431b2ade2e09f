"""Validators shared by the built-in kernels; each raises ValueError, which the spec
machinery turns into a SpecError naming the field and the value."""

from __future__ import annotations

import operator
from typing import Any

from .._spec.dtype import DType
from ..errors import SpecError

__all__ = ["FLOAT_DTYPES", "block_size", "one_of", "multiple_of", "in_range", "count",
           "launch_count", "suggestion_counts", "takes"]

#: The element types every built-in kernel takes (arithmetic in f32 either way).
FLOAT_DTYPES = (DType.F32, DType.F16, DType.BF16)


def block_size(instance: Any, attribute: Any, value: int) -> None:
    """Threads per CTA: a whole number of warps (multiple of 32), 32..1024."""
    if not (32 <= value <= 1024 and value % 32 == 0):
        raise ValueError("expected a multiple of 32 from 32 to 1024 threads per CTA")


def one_of(*allowed: Any):
    """Validator: the value is one of ``allowed`` (its ``choices``, which an enum field's
    message for an unknown value lists)."""
    names = ", ".join(str(a) for a in allowed)

    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value not in allowed:
            raise ValueError(f"expected one of {names}")
    check.choices = allowed  # type: ignore[attr-defined]  # read by the field's coercer
    return check


def multiple_of(step: int, why: str = ""):
    """Validator: a positive multiple of ``step`` (``why`` says what needs it)."""
    reason = f" ({why})" if why else ""

    def check(instance: Any, attribute: Any, value: int) -> None:
        if value <= 0 or value % step:
            raise ValueError(f"expected a positive multiple of {step}{reason}")
    return check


def in_range(low: float, high: float):
    """Validator: ``low <= value <= high``."""
    def check(instance: Any, attribute: Any, value: float) -> None:
        if not low <= value <= high:
            raise ValueError(f"expected a value from {low} to {high}")
    return check


def _integer(value: Any) -> int | None:
    """``value`` as an int where it is an integer (a NumPy one too), else None: a bool, a
    float or a string is not a count."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def count(function: str, name: str, value: Any) -> int:
    """``value`` as an int of 0 or more (a NumPy integer too), else the error naming
    ``function`` and ``name`` (a count is not a field: TypeError or ValueError, not SpecError)."""
    count = _integer(value)
    if count is None:
        raise TypeError(f"{function}: {name} must be an int (got {value!r})")
    if count < 0:
        raise ValueError(f"{function}: {name} must be 0 or more (got {count})")
    return count


def launch_count(kernel: str, name: str, value: Any) -> int:
    """``value``, the count a launch covers (``tokens``, ``rows``, ``n``), as an int (a NumPy
    integer too), for every built-in's ``launch_dims``: a float, a bool or a string would
    make a grid of floats or of ``True``. The range is the caller's to check.

    Raises:
        SpecError: ``value`` is not an integer, naming the kernel and ``name``.
    """
    integer = _integer(value)
    if integer is None:
        raise SpecError(f"{kernel} {name} = {value!r} is invalid: expected an int")
    return integer


def suggestion_counts(function: str, **values: Any) -> tuple[int, ...]:
    """Each of ``values`` (tokens, an SM count) checked as :func:`count` checks it, for a
    ``suggested_*`` function: a SpecError, as its bad requests are, naming ``function``.

    Raises:
        SpecError: a value that is not an int of 0 or more (a NumPy integer is one).
    """
    try:
        return tuple(count(function, name, value) for name, value in values.items())
    except (TypeError, ValueError) as exc:
        raise SpecError(str(exc)) from None


def takes(spec_class: type, **fields: Any) -> bool:
    """Does ``spec_class`` take these fields (no SpecError at construction)?"""
    try:
        spec_class(**fields)
    except SpecError:
        return False
    return True
