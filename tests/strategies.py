"""Hypothesis strategies for requests of any kernel spec, drawn from each field's type.

Values come from the pools around each field's default that the sampled key proof uses
(:func:`specdsl._spec.values.candidates`), so that random pairs often agree on some fields and
collide on others: that is where key bugs hide. Floats include ``0.0`` and ``-0.0``;
requests the spec's validators refuse are filtered out.
"""

from __future__ import annotations

import typing
from typing import Any

import attrs
from hypothesis import strategies as st

from specdsl import SpecError
from specdsl._spec.values import candidates

TARGETS = st.sampled_from(["sm_90", "sm_90a", "sm_100"])


def field_pools(cls: type) -> dict[str, list[Any]]:
    """``{field: candidate values}`` for every field of spec class ``cls``: the pools the
    sampled key proof draws from (:func:`specdsl._spec.values.candidates`)."""
    hints = typing.get_type_hints(cls)
    pools = {}
    for f in attrs.fields(cls):
        default = f.default
        if isinstance(default, attrs.Factory):  # computed by the class from other fields
            default = attrs.NOTHING
        pools[f.name] = candidates(hints[f.name], default) or [None]
    return pools


@st.composite
def requests(draw: st.DrawFn, cls: type) -> Any:
    """A valid request of ``cls``: one of its variants with up to two fields redrawn.

    Starting from the variants (``specdsl._review.variants.spec_variants``) keeps most draws valid
    for specs whose fields constrain each other; redrawing fields from :func:`field_pools`
    reaches values no variant lists. Requests the validators refuse are rejected.
    """
    from specdsl._review.variants import spec_variants

    return draw(variations(draw(st.sampled_from(spec_variants(cls)))))


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
    from specdsl._spec.decorator import spec_info

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
