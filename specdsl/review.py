"""Reviewing kernels without a GPU, as a library: the public face of ``specdsl render``,
``diff``, ``verify`` and ``run``.

- Requests as text: :func:`parse_request` and :func:`format_request` (``vectoradd
  dtype=f16`` and back).
- A spec's variants, the requests worth reviewing: :func:`spec_variants`,
  :func:`pinned_variants`, :func:`representative_request`, :data:`MAX_VARIANTS`.
- Renders and diffs: :func:`write_renders` (render files to check in) and
  :func:`diff_requests`.
- Compiling: :func:`compile_ptx` (nvJitLink, no GPU), :func:`verify_request` (a request's
  registers, spills and memory against limits), :func:`parse_resources` (nvJitLink's log).
- Running a built-in kernel's example on a GPU against its float64 reference:
  :func:`run_case` (what ``specdsl run`` does).
"""

from ._review.demo import run_case
from ._review.renders import PtxDiff, RenderFile, diff_requests, write_renders
from ._review.requests import format_request, parse_request
from ._review.variants import (
    MAX_VARIANTS,
    pinned_variants,
    representative_request,
    spec_variants,
)
from ._review.verify import Verified, verify_request
from ._runtime.compile import Compiled, compile_ptx
from ._runtime.resources import Resources, parse_resources

__all__ = [
    "parse_request", "format_request",
    "spec_variants", "pinned_variants", "representative_request", "MAX_VARIANTS",
    "write_renders", "RenderFile", "diff_requests", "PtxDiff",
    "compile_ptx", "Compiled", "verify_request", "Verified", "parse_resources", "Resources",
    "run_case",
]
