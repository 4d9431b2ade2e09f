"""The package's layers: each module imports only from its own layer and those below it.

The import graph is read from the source (every ``import`` statement, inside functions too,
and the compiled module's Python imports), so a lazy import counts like any other.
``docs/architecture.md`` draws the same layers.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import warnings
from pathlib import Path

import pytest

import specdsl

PACKAGE = Path(specdsl.__file__).resolve().parent

# (layer, rank, module prefixes), bottom to top. A module may import its own layer and any
# layer of a lower rank; layers of one rank sit beside each other and never import each
# other (kernels beside runtime; torch beside review).
LAYERS = [
    ("base", 0, ("specdsl.errors", "specdsl.config", "specdsl._version", "specdsl._base")),
    ("templating", 1, ("specdsl._templating",)),
    ("spec", 2, ("specdsl._spec",)),
    ("render", 3, ("specdsl._render",)),
    ("proof", 4, ("specdsl._proof",)),
    ("runtime", 5, ("specdsl._runtime",)),
    ("kernels", 5, ("specdsl.kernels",)),
    ("review", 6, ("specdsl._review",)),
    ("torch", 6, ("specdsl.torch",)),
    ("cli", 7, ("specdsl._cli",)),
    # the public facades: re-exports over every layer
    ("api", 8, ("specdsl", "specdsl.review", "specdsl.speedups", "specdsl.grid",
                "specdsl.__main__")),
]

_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+(?:c?import)|import\s+([\w.]+))", re.MULTILINE)


def _modules() -> dict[str, Path]:
    """``{module name: file}`` of every Python module and the compiled one's source."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.pyx")):
        if "_templates" in path.relative_to(PACKAGE).parts:
            continue
        parts = ("specdsl",) + path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _package_of(name: str) -> str:
    path = MODULES[name]
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(name: str) -> str | None:
    """The module a dotted name belongs to (``specdsl.x.y`` -> ``specdsl.x`` if ``y`` is
    a name in it), or ``None`` outside specdsl."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str) -> set[str]:
    """The specdsl modules ``name`` imports (a ``from pkg import module`` names the module)."""
    path = MODULES[name]
    targets: set[str] = set()
    if path.suffix == ".pyx":  # Cython: its Python-level imports, read as text
        for match in _IMPORT.finditer(path.read_text()):
            module = match.group(1) or match.group(2)
            if module.startswith("specdsl"):
                targets.add(_resolve(module) or module)
        return targets - {name}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets |= {t for a in node.names if (t := _resolve(a.name))}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name).split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith("specdsl"):
                continue
            submodules = {f"{module}.{a.name}" for a in node.names} & MODULES.keys()
            targets |= submodules
            if len(submodules) < len(node.names):  # names from the module itself
                targets.add(_resolve(module) or module)
    return targets - {name}


GRAPH = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> tuple[str, int]:
    """The (layer, rank) of a module: the longest matching prefix decides."""
    best = None
    for layer, rank, prefixes in LAYERS:
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (
                    best is None or len(prefix) > best[0]):
                best = (len(prefix), layer, rank)
    assert best is not None, f"{name} is in no layer: add it to LAYERS"
    return best[1], best[2]


def test_every_module_has_a_layer():
    """Each module of the package belongs to exactly one layer of the table."""
    assert {name: layer_of(name)[0] for name in MODULES}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_the_layers(name):
    """A module imports only from its own layer and from layers of a lower rank."""
    layer, rank = layer_of(name)
    upward = sorted(
        f"{target} ({other})" for target in GRAPH[name]
        for other, other_rank in [layer_of(target)]
        if other != layer and other_rank >= rank)
    assert not upward, f"{name} ({layer}) imports from above or beside it: {upward}"


def test_no_import_cycle():
    """The import graph has no cycle (lazy imports inside functions included)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    assert not cycles, f"import cycles: {cycles}"


def test_submodules_never_shadow_public_names():
    """Importing every module leaves each name of specdsl.__all__ the object it exports
    (a subpackage named like a public function would replace it on the package)."""
    exported = {name: getattr(specdsl, name) for name in specdsl.__all__}
    for module in pkgutil.walk_packages(specdsl.__path__, "specdsl."):
        if module.name.startswith("specdsl.torch") or module.name == "specdsl.__main__":
            continue  # torch is optional; __main__ runs the command line
        with warnings.catch_warnings():  # specdsl.grid says it is deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            importlib.import_module(module.name)
    assert {name: getattr(specdsl, name) for name in specdsl.__all__} == exported


def test_private_modules_are_underscored():
    """Every module outside the stated public ones lives under a ``_`` name."""
    public = {"specdsl", "specdsl.errors", "specdsl.config", "specdsl.review",
              "specdsl.speedups", "specdsl.grid", "specdsl.__main__", "specdsl.kernels",
              "specdsl.kernels.case", "specdsl.torch", "specdsl.torch.specs"}
    exposed = sorted(
        name for name in MODULES if name not in public and not any(
            part.startswith("_") for part in name.split(".")[1:])
        and not name.startswith("specdsl.kernels."))  # each built-in kernel's own module
    assert not exposed, f"modules neither public nor private: {exposed}"


#: Most lines a module may have: one job a module (templates aside).
MAX_LINES = 400


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_small(name):
    """Each module, the compiled one's source included, stays within MAX_LINES lines."""
    lines = MODULES[name].read_text().count("\n")
    assert lines <= MAX_LINES, f"{name} has {lines} lines: split it by job"


def test_architecture_page_places_every_module():
    """docs/architecture.md names only files that exist, and every module of the layers
    (kernels/ and torch/ as folders) in its table of concerns."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`(specdsl/[\w/.]*)`", text))
    assert not [p for p in named if not (PACKAGE.parent / p).exists()], named
    expected = {
        path.relative_to(PACKAGE.parent).as_posix() for path in MODULES.values()
        if path.name != "__init__.py" or path.parent == PACKAGE}
    expected = {p for p in expected if not p.startswith(("specdsl/kernels/", "specdsl/torch/"))}
    expected |= {"specdsl/kernels/", "specdsl/torch/", "specdsl/_runtime/_speedups.pyi"}
    assert expected - named == set()
