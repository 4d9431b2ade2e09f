"""Golden PTX files: a template change shows up in review as a diff under tests/golden/.

Regenerate after an intended change with ``SPECDSL_UPDATE_GOLDEN=1 pytest``, then read
the diff before committing it.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).parent / "golden"


def check_golden(name: str, text: str) -> None:
    """Compare ``text`` with ``tests/golden/<name>``; fail with a unified diff if it differs."""
    path = GOLDEN_DIR / name
    if os.environ.get("SPECDSL_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        raise AssertionError(f"no golden file {path}; create it with SPECDSL_UPDATE_GOLDEN=1")
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{name}", "rendered"))
        raise AssertionError(f"rendered PTX differs from golden/{name}:\n{diff}")
