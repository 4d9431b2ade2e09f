"""Deprecated: the old name of the variants functions, now in :mod:`specdsl.review`.

"Grid" is the CUDA launch grid, so a spec's set of requests to review is now called its
*variants*. This module keeps the old names importable for one release, with a
``DeprecationWarning``: ``spec_grid`` is :func:`specdsl.review.spec_variants`,
``pinned_grid`` is :func:`specdsl.review.pinned_variants`, ``MAX_GRID`` is
``MAX_VARIANTS`` and ``GRID_ATTRIBUTE`` is ``VARIANTS_ATTRIBUTE``.
"""

from __future__ import annotations

import warnings

from ._review.variants import (
    MAX_VARIANTS as MAX_GRID,
    VARIANTS_ATTRIBUTE as GRID_ATTRIBUTE,
    default_request,
    field_members,
    pinned_variants as pinned_grid,
    representative_request,
    spec_variants as spec_grid,
)

__all__ = ["GRID_ATTRIBUTE", "MAX_GRID", "spec_grid", "default_request", "pinned_grid",
           "field_members", "representative_request"]

warnings.warn("specdsl.grid is deprecated: import specdsl.review (spec_variants, "
              "pinned_variants, MAX_VARIANTS) instead", DeprecationWarning, stacklevel=2)
