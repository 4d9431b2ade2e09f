"""What the command line prints: aligned tables and JSON, shared by every verb."""

from __future__ import annotations

import enum
import json
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

__all__ = ["json_value", "print_json", "table", "request_fields"]


def json_value(value: Any) -> Any:
    """A field value as JSON: enum members by value (or name), tuples as lists, NaN and
    infinities as their ``repr`` strings; other values as they are."""
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, (str, int)) else value.name
    if isinstance(value, tuple):
        return [json_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


def request_fields(request: Any) -> dict[str, Any]:
    """``{field: JSON value}`` of every field of a request, in declaration order."""
    return {f.name: json_value(getattr(request, f.name)) for f in attrs.fields(type(request))}


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout, ending in a newline."""
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *,
          right_from: int | None = None) -> list[str]:
    """Lines of a text table: columns two spaces apart, trailing spaces removed.

    Columns before ``right_from`` are aligned left, the others right (``None``: all left).
    """
    rows = [list(header)] + [list(row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    split = len(header) if right_from is None else right_from
    lines = []
    for row in rows:
        cells = [cell.ljust(w) if i < split else cell.rjust(w)
                 for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return lines
