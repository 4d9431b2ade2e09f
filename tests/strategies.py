"""Hypothesis strategies for requests of any kernel spec, drawn from each field's type.

Values come from small pools around each field's default so that random pairs often
agree on some fields and collide on others: that is where key bugs hide. Floats include
``0.0`` and ``-0.0``; requests the spec's validators refuse are filtered out.
"""

from __future__ import annotations

import enum
import typing
from typing import Any, Literal

import attrs
from hypothesis import strategies as st

from specdsl import SpecError

TARGETS = st.sampled_from(["sm_90", "sm_90a", "sm_100"])


def _pool(tp: Any, default: Any) -> list[Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return list(args)
    if origin is not None and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return [None] + _pool(inner, None if default is None else default)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return list(tp)
    if tp is bool:
        return [False, True]
    if tp is int:
        base = default if isinstance(default, int) and default > 0 else 64
        return sorted({base, 2 * base, base + 8, max(8, base // 2), 8, 1024})
    if tp is float:
        base = default if isinstance(default, float) else 1.0
        return [base, -base, 0.0, -0.0, base * 10, base / 10, 1e-5, 1e-6, 1.0]
    return [default]


def field_pools(cls: type) -> dict[str, list[Any]]:
    """``{field: candidate values}`` for every field of spec class ``cls``."""
    hints = typing.get_type_hints(cls)
    pools = {}
    for f in attrs.fields(cls):
        default = None if f.default is attrs.NOTHING else f.default
        pools[f.name] = _pool(hints[f.name], default)
    return pools


@st.composite
def requests(draw: st.DrawFn, cls: type) -> Any:
    """A valid request of ``cls``: a member of its grid with up to two fields redrawn.

    Starting from the grid (``specdsl.grid.spec_grid``) keeps most draws valid for specs
    whose fields constrain each other; redrawing fields from :func:`field_pools` reaches
    values no grid lists. Requests the validators refuse are rejected.
    """
    from specdsl.grid import spec_grid

    return draw(variations(draw(st.sampled_from(spec_grid(cls)))))


@st.composite
def variations(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with up to two fields redrawn from :func:`field_pools` (maybe none: ``base``)."""
    cls = type(base)
    pools = field_pools(cls)
    values = {f.name: getattr(base, f.name) for f in attrs.fields(cls)}
    for name in draw(st.lists(st.sampled_from(sorted(pools)), max_size=2, unique=True)):
        values[name] = draw(st.sampled_from(pools[name]))
    try:
        return cls(**values)
    except SpecError:
        from hypothesis import reject

        reject()


@st.composite
def launch_variations(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with its launch fields redrawn from :func:`field_pools` (baked fields kept):
    a request that must share ``base``'s derived key and PTX."""
    from specdsl.spec import spec_info

    cls = type(base)
    pools = field_pools(cls)
    values = {f.name: getattr(base, f.name) for f in attrs.fields(cls)}
    for name in spec_info(cls).launch:
        values[name] = draw(st.sampled_from(pools[name]))
    try:
        return cls(**values)
    except SpecError:
        from hypothesis import reject

        reject()
