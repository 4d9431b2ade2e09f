"""README.md opens with the two set-up commands, CI runs the second one, and its examples run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import gpu_available

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


def test_readme_python_examples_compile():
    """Every ```python block of README.md is valid Python (run on the GPU below)."""
    blocks = re.findall(r"```python\n(.+?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks
    for block in blocks:
        compile(block, "README.md", "exec")


@pytest.mark.gpu
def test_readme_gpu_example_runs():
    """The README's executor example runs as written and normalizes the rows."""
    pytest.importorskip("torch")
    block = re.findall(r"```python\n(.+?)```", (ROOT / "README.md").read_text(), re.S)[0]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    torch = namespace["torch"]
    x, y = namespace["x"].double(), namespace["y"].double()
    expected = x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6)
    assert torch.linalg.norm(y - expected) / torch.linalg.norm(expected) < 1e-2


def test_readme_console_examples_run(tmp_path, monkeypatch):
    """Every specdsl command in README.md's console blocks runs as docs/ pages do
    (tests/test_docs.py's rules; ```console gpu blocks only where a GPU is found)."""
    from test_docs import DOCS, _check_console, blocks

    monkeypatch.chdir(tmp_path)
    page = DOCS / ".." / "README.md"  # named from docs/, as the runner reports pages
    console = [b for b in blocks(page.read_text()) if b.language == "console"]
    failures: list[str] = []
    for block in console:
        if "gpu" not in block.flags or gpu_available() is None:
            _check_console(page, block, failures)
    assert console and not failures, "\n\n".join(failures)
