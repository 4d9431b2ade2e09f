"""Placeholder: the executor (issue 4) is being written."""

from __future__ import annotations

__all__ = ["Executor"]


class Executor:
    """Compiles and launches kernels (being written)."""
