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
)
from ._review.variants import (
    VARIANTS_ATTRIBUTE as GRID_ATTRIBUTE,
)
from ._review.variants import (
    default_request,
    field_members,
    representative_request,
)
from ._review.variants import (
    pinned_variants as pinned_grid,
)
from ._review.variants import (
    spec_variants as spec_grid,
)

__all__ = ["GRID_ATTRIBUTE", "MAX_GRID", "spec_grid", "default_request", "pinned_grid",
           "field_members", "representative_request"]

warnings.warn("specdsl.grid is deprecated: import specdsl.review (spec_variants, "
              "pinned_variants, MAX_VARIANTS) instead", DeprecationWarning, stacklevel=2)
