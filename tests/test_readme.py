"""README.md opens with the two set-up commands, and CI runs the second one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```sh\n(.+?)\n```", text)[:2]


def test_readme_opens_with_two_commands():
    """The first two code blocks are one-line shell commands: run the job, run the tests."""
    first, second = _setup_commands()
    assert "pip install" in first and "specdsl render rmsnorm" in first
    assert "pip install" in second and "pytest" in second
    text = (ROOT / "README.md").read_text()
    assert text.index("```sh") < text.index("## ")


def test_ci_runs_the_readme_test_command():
    """.ci/run calls exactly the README's test command."""
    _, second = _setup_commands()
    assert second in (ROOT / ".ci" / "run").read_text().splitlines()
