"""Every page under docs/ runs: its ```pycon examples (doctest) and its ```console commands.

The conventions (stated at the top of docs/index.md):

- ```pycon blocks are doctests; one fresh namespace per page, blocks run in page order.
- ```console blocks: each ``$ specdsl ...`` (or ``$ python -m specdsl ...``) line runs
  through ``specdsl._cli.main.main``; the lines up to the next ``$`` are its expected output
  (stdout and stderr together, ``...`` matches anything, whitespace runs compare equal).
  Each command must exit 0, unless its line ends with a shell comment ``# exits N``
  (``# exits 1: the renders differ``), which a command that fails must carry; the exit
  status is checked either way. ``NAME=value`` words before ``specdsl`` set those
  environment variables for that command only. Lines running any other program are shown, not run.
- A block whose info string adds ``gpu`` (```pycon gpu, ```console gpu) and every
  ``specdsl run`` line runs only where a GPU is found, but for a ``specdsl run`` line
  marked ``# exits 2``, a request error that ``run`` finds before it opens the device.
  Any other block (```python, ```sh, ```text, ...) is not run.
- Each page runs in its own empty working folder, which is also on ``sys.path`` (as for
  ``python -m specdsl``), so a page can write a module and then name it as ``module:Class``.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import itertools
import os
import re
import shlex
import sys
from pathlib import Path

import attrs
import pytest

from conftest import gpu_available
from specdsl._cli.main import main

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_LINK = re.compile(r"\[[^\]]*\]\(([^)#\s]+)(?:#[^)]*)?\)")


@attrs.frozen
class Block:
    """One fenced code block: its language, extra info words, first line number and text."""

    language: str
    flags: tuple[str, ...]
    line: int
    text: str


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown page, in order."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        words = match["info"].split()
        body, j = [], i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                      and not lines[j].strip().strip(fence[0])):
            body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
            j += 1
        found.append(Block(words[0] if words else "", tuple(words[1:]), i + 2,
                           "\n".join(body) + "\n"))
        i = j + 1
    return found


def commands(block: Block) -> list[tuple[int, str, str]]:
    """``(line, command, expected output)`` for each ``$`` line of a console block."""
    result: list[list] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command, start = line[2:], block.line + i
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            result.append([start, command.strip(), []])
        elif result:
            result[-1][2].append(line)
        i += 1
    return [(n, c, "\n".join(out).rstrip() + "\n" if "".join(out).strip() else "")
            for n, c, out in result]


_EXITS = re.compile(r"#\s*exits\s+(\d+)\b")


def expected_exit(command: str) -> int:
    """The exit status a shown command promises: ``N`` from a trailing ``# exits N``, else 0."""
    comment = command.partition(" #")[2]
    match = _EXITS.match("#" + comment) if comment else None
    return int(match.group(1)) if match else 0


_ASSIGNMENT = re.compile(r"[A-Z_][A-Z0-9_]*=")


def _assignments(command: str) -> list[str]:
    """The ``NAME=value`` words before the program, as a shell reads them."""
    return list(itertools.takewhile(_ASSIGNMENT.match, shlex.split(command, comments=True)))


def _environment(command: str) -> dict[str, str]:
    """The environment variables a command sets for itself."""
    return dict(word.split("=", 1) for word in _assignments(command))


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _specdsl_argv(command: str) -> list[str] | None:
    words = shlex.split(command, comments=True)
    words = words[len(_assignments(command)):]
    if words[:1] == ["specdsl"]:
        return words[1:]
    if words[:3] in (["python", "-m", "specdsl"], ["python3", "-m", "specdsl"]):
        return words[3:]
    return None


def _run_cli(argv: list[str]) -> tuple[int | str, str]:
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        try:
            code: int | str = main(argv)
        except SystemExit as exc:  # argparse usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, stream.getvalue()


def _check_console(page: Path, block: Block, failures: list[str]) -> None:
    checker = doctest.OutputChecker()
    for line, command, expected in commands(block):
        argv = _specdsl_argv(command)
        if argv is None:
            continue
        if (argv[:1] == ["run"] and gpu_available() is not None
                and expected_exit(command) != 2):  # a request error needs no GPU
            continue
        with _environ(_environment(command)):
            code, output = _run_cli(argv)
        where = f"{page.relative_to(DOCS)}:{line}: $ {command}"
        if expected and not checker.check_output(expected, output, FLAGS):
            failures.append(f"{where}\nexpected:\n{expected}got (exit {code}):\n{output}")
        elif code != expected_exit(command):
            failures.append(f"{where}\nexited {code}, where the page says "
                            f"{expected_exit(command)} (mark a failing command '# exits N'):"
                            f"\n{output}")


def _check_pycon(page: Path, block: Block, globs: dict, failures: list[str]) -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(block.text, globs, str(page.relative_to(DOCS)), str(page),
                              block.line - 1)
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(test, out=report.write, clear_globs=False)
    globs.update(test.globs)  # DocTest copies its globals: later blocks see this block's names
    if runner.failures:
        failures.append(report.getvalue())


def run_page(page: Path, workdir: Path) -> list[str]:
    """Run every runnable block of ``page`` in order; returns the failure reports."""
    failures: list[str] = []
    globs: dict = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    gpu = gpu_available() is None
    for block in blocks(page.read_text()):
        if "gpu" in block.flags and not gpu:
            continue
        if block.language == "pycon":
            _check_pycon(page, block, globs, failures)
        elif block.language == "console":
            _check_console(page, block, failures)
    return failures


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_page_examples_run(page, tmp_path, monkeypatch):
    """The page's pycon examples and specdsl console commands give the output it shows."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    try:
        failures = run_page(page, tmp_path)
    finally:
        for name in set(sys.modules) - before:
            if str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(tmp_path)):
                del sys.modules[name]
    assert not failures, "\n\n".join(failures)


def test_index_reaches_every_page():
    """Every page under docs/ is reachable by links from docs/index.md (the contents)."""
    reached, pending = set(), [(DOCS / "index.md").resolve()]
    while pending:
        page = pending.pop()
        if page in reached or not page.exists():
            continue
        reached.add(page)
        pending.extend((page.parent / target).resolve() for target in _LINK.findall(
            page.read_text()) if target.endswith(".md") and "://" not in target)
    missing = [str(p.relative_to(DOCS)) for p in PAGES if p.resolve() not in reached]
    assert not missing, f"no link path from docs/index.md to: {', '.join(missing)}"


def test_kernel_index_names_every_builtin():
    """docs/kernels/index.md has a row for every built-in SPEC name."""
    from specdsl._review.requests import builtin_specs

    text = (DOCS / "kernels" / "index.md").read_text()
    missing = [name for name in builtin_specs() if f"| `{name}` |" not in text]
    assert not missing, f"docs/kernels/index.md lacks {', '.join(missing)}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_page_links_resolve(page):
    """Every relative link on the page names a file that exists."""
    broken = [target for target in _LINK.findall(page.read_text())
              if "://" not in target and not target.startswith("mailto:")
              and not (page.parent / target).exists()]
    assert not broken, f"{page.relative_to(DOCS)} links to missing {', '.join(broken)}"


def test_runner_catches_wrong_output(tmp_path):
    """The runner reports a console command whose output differs from the page."""
    page = DOCS / "_probe.md"
    block = Block("console", (), 1, "$ specdsl key vectoradd\nderived: nothing-like-this\n")
    failures: list[str] = []
    _check_console(page, block, failures)
    assert len(failures) == 1 and "derived: vector_add-" in failures[0]


def test_runner_catches_an_unmarked_failing_command():
    """A command that exits 1 while its line promises 0 is reported, output matching or not."""
    block = Block("console", (), 1, "$ specdsl diff vectoradd -- dtype=f16\n...\n")
    failures: list[str] = []
    _check_console(DOCS / "_probe.md", block, failures)
    assert len(failures) == 1 and "exited 1, where the page says 0" in failures[0]


def test_runner_catches_a_wrong_exit_mark():
    """A command marked '# exits 2' that exits 0 is reported; one marked right passes."""
    failures: list[str] = []
    wrong = Block("console", (), 1, "$ specdsl key vectoradd  # exits 2\nderived: ...\n")
    right = Block("console", (), 1, "$ specdsl render vectoradd dtype=f64  # exits 2\n")
    _check_console(DOCS / "_probe.md", wrong, failures)
    _check_console(DOCS / "_probe.md", right, failures)
    assert len(failures) == 1 and "exited 0, where the page says 2" in failures[0]


def test_expected_exit_reads_the_trailing_comment():
    """'# exits N' (with or without a reason after it) gives N; no mark gives 0."""
    assert expected_exit("specdsl diff a -- b=1  # exits 1: the renders differ") == 1
    assert expected_exit("specdsl render x dtype=f64 # exits 2") == 2
    assert expected_exit("specdsl list -v") == 0
    assert _specdsl_argv("specdsl diff a -- b=1  # exits 1") == ["diff", "a", "--", "b=1"]


def test_runner_catches_failing_doctest(tmp_path):
    """The runner reports a pycon example whose result differs from the page."""
    failures: list[str] = []
    _check_pycon(DOCS / "_probe.md", Block("pycon", (), 1, ">>> 1 + 1\n3\n"), {}, failures)
    assert len(failures) == 1 and "Expected:\n    3\nGot:\n    2" in failures[0]


def test_blocks_and_commands_parse():
    """Fences with info words, indented fences and continued console lines parse as shown."""
    text = ("intro\n```pycon gpu\n>>> 1\n1\n```\n\n  ```console\n  $ specdsl list \\\n"
            "  -v\n  out\n  $ ls\n  ```\n")
    first, second = blocks(text)
    assert (first.language, first.flags, first.line, first.text) == ("pycon", ("gpu",), 3,
                                                                     ">>> 1\n1\n")
    assert commands(second) == [(8, "specdsl list  -v", "out\n"), (11, "ls", "")]
