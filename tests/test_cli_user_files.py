"""Spec files named by their path (docs/cli.md, "Common words"): a file in a package is
imported under its package-qualified name, as the application imports it, so its classes
keep their qualified names and derived keys; a misspelled class gets the closest one."""

from __future__ import annotations

import importlib
import itertools
import sys
import textwrap
from pathlib import Path

import pytest

from specdsl import derived_key
from specdsl._cli.main import main
from specdsl._cli.user_modules import file_module_name
from specdsl._review.requests import MODULE_FILES
from test_cli import assert_one_error_line

_packages = itertools.count()

RESIDUAL = """
    from specdsl import DType, baked, kernel_spec

    from .helpers import BLOCK

    @kernel_spec(template="residual.ptx.j2", entry="residual_add", template_dir="templates")
    class ResidualAdd:
        hidden: int = baked()
        dtype: DType = baked(DType.BF16)
        block: int = baked(BLOCK)
"""

TEMPLATE = """\
{% include "header.ptx.j2" %}

// hidden={{ hidden }} dtype={{ dtype }} block={{ block }}
.visible .entry {{ entry }}()
{
    ret;
}
"""


@pytest.fixture
def package(tmp_path, monkeypatch):
    """An application folder holding a package two levels deep, ``<top>.kernels``, with
    ``residual.py`` (a spec class) and its template; the working folder is the
    application's. Returns ``(top package name, path of residual.py)``; the modules
    imported are forgotten afterwards."""
    top = f"userpkg_{next(_packages)}"
    kernels = tmp_path / "app" / top / "kernels"
    (kernels / "templates").mkdir(parents=True)
    (kernels.parent / "__init__.py").write_text("RAN = True\n")
    (kernels / "__init__.py").write_text("")
    (kernels / "helpers.py").write_text("BLOCK = 256\n")
    (kernels / "residual.py").write_text(textwrap.dedent(RESIDUAL))
    (kernels / "templates" / "residual.ptx.j2").write_text(TEMPLATE)
    monkeypatch.chdir(tmp_path / "app")
    yield top, kernels / "residual.py"
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]
    for name in [n for n in MODULE_FILES if n == top or n.startswith(top + ".")]:
        del MODULE_FILES[name]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def error_of(capsys, *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    return assert_one_error_line(err)


def application_key(top: str, folder: Path, monkeypatch, **fields: object) -> str:
    """The derived key the application computes, importing the module by its name."""
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module(f"{top}.kernels.residual")
    return derived_key(module.ResidualAdd(**fields))


def test_file_module_name_walks_up_the_packages(package):
    """a/b/c.py with a/__init__.py and a/b/__init__.py is a.b.c, imported from a's folder;
    a package's __init__.py is the package itself."""
    top, path = package
    root = path.parents[2]
    assert file_module_name(path) == (f"{top}.kernels.residual", root)
    assert file_module_name(path.with_name("__init__.py")) == (f"{top}.kernels", root)
    assert file_module_name(root / "loose.py") == ("loose", root)


def test_key_of_a_file_in_a_package_is_the_applications(capsys, package, monkeypatch):
    """specdsl key pkg/kernels/residual.py:ResidualAdd prints the derived key the
    application computes from `from pkg.kernels.residual import ResidualAdd`."""
    top, path = package
    code, out, err = run(capsys, "key", f"{top}/kernels/residual.py:ResidualAdd",
                         "hidden=4096")
    assert code == 0, err
    expected = application_key(top, path.parents[2], monkeypatch, hidden=4096)
    assert out.splitlines() == [f"derived: {expected}"]


def test_a_symlinked_file_is_named_where_it_is_named(capsys, package, monkeypatch):
    """A package module that is a symlink to a file elsewhere is named by the link's place,
    as Python names it: the key is the application's, not one of the target's folder."""
    top, path = package
    shared = path.parents[3] / "shared"
    shared.mkdir()
    path.rename(shared / "residual.py")
    path.symlink_to(shared / "residual.py")
    code, out, err = run(capsys, "key", f"{top}/kernels/residual.py:ResidualAdd",
                         "hidden=4096")
    assert code == 0, err
    expected = application_key(top, path.parents[2], monkeypatch, hidden=4096)
    assert out.splitlines() == [f"derived: {expected}"]


def test_class_from_a_file_in_a_package_has_the_qualified_module(capsys, package):
    """The class's __module__ is the package-qualified name, the packages' __init__ ran,
    and the folder above the top package is off sys.path again."""
    top, path = package
    code, _, err = run(capsys, "key", f"{path}:ResidualAdd", "hidden=4096")
    assert code == 0, err
    module = sys.modules[f"{top}.kernels.residual"]
    assert module.ResidualAdd.__module__ == f"{top}.kernels.residual"
    assert sys.modules[top].RAN and str(path.parents[2]) not in sys.path


def test_render_out_header_names_the_qualified_class(capsys, package, tmp_path):
    """render --out headers name pkg.kernels.residual.ResidualAdd, not residual.ResidualAdd."""
    top, _ = package
    code, out, err = run(capsys, "render", f"{top}/kernels/residual.py:ResidualAdd",
                         "hidden=4096", "--out", str(tmp_path / "ptx"))
    assert code == 0, err
    text = Path(out.split()[0]).read_text()
    assert f"// spec class:  {top}.kernels.residual.ResidualAdd " in text


def test_file_outside_a_package_keeps_its_stem(capsys, tmp_path, monkeypatch):
    """A file whose folder holds no __init__.py is imported under its stem, as before."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "residual.ptx.j2").write_text(TEMPLATE)
    (tmp_path / "loosekernels.py").write_text(
        textwrap.dedent(RESIDUAL).replace("from .helpers import BLOCK", "BLOCK = 256"))
    monkeypatch.delitem(sys.modules, "loosekernels", raising=False)
    monkeypatch.setitem(MODULE_FILES, "loosekernels", "")
    code, out, err = run(capsys, "key", f"{tmp_path / 'loosekernels.py'}:ResidualAdd",
                         "hidden=4096")
    module = sys.modules.pop("loosekernels")
    assert code == 0, err
    assert module.ResidualAdd.__module__ == "loosekernels"
    assert out.splitlines() == [f"derived: {derived_key(module.ResidualAdd(hidden=4096))}"]


def test_misspelled_class_gets_did_you_mean(capsys, package):
    """path/file.py:Residual names the closest spec class the file holds."""
    top, _ = package
    name = f"{top}/kernels/residual.py"
    assert error_of(capsys, "key", f"{name}:Residual", "hidden=4096").endswith(
        f"module {name!r} has no 'Residual'; did you mean 'ResidualAdd'?")


def test_failing_package_init_names_the_file_and_package(capsys, package):
    """A package __init__ that raises is one error line naming the file, the module, the
    package and the place, not a traceback."""
    top, path = package
    (path.parent / "__init__.py").write_text("1 / 0\n")
    name = f"{top}/kernels/residual.py"
    line = error_of(capsys, "key", f"{name}:ResidualAdd", "hidden=4096")
    assert line == (
        f"specdsl key: error: cannot import {name!r} as module '{top}.kernels.residual': "
        f"its package '{top}.kernels' failed: ZeroDivisionError: division by zero "
        f"(at {path.parent / '__init__.py'}:1)")


def test_package_named_like_another_module_is_refused(capsys, tmp_path):
    """A file in a package whose name is another module's (json/) never replaces it."""
    import json

    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "__init__.py").write_text("raise SystemExit('HIJACKED json')\n")
    (tmp_path / "json" / "kernels.py").write_text("")
    name = str(tmp_path / "json" / "kernels.py")
    line = error_of(capsys, "key", f"{name}:ResidualAdd")
    assert sys.modules["json"] is json and "HIJACKED" not in line
    assert "as module 'json.kernels': its package 'json' is another module" in line


def test_package_imported_from_another_copy_is_refused(capsys, package, tmp_path,
                                                       monkeypatch):
    """A file in a second copy of a package already imported from the first is refused,
    with the place the package is imported from."""
    top, path = package
    copy = tmp_path / "copy" / top
    copy.mkdir(parents=True)
    (copy / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(copy.parent))
    importlib.import_module(top)
    line = error_of(capsys, "key", f"{path}:ResidualAdd", "hidden=4096")
    assert line.endswith(f"its package {top!r} is another module ({copy / '__init__.py'}); "
                         "import it by its module name, or rename the package")


def test_name_imported_from_another_file_is_refused(capsys, package):
    """A file whose package-qualified name Python imports from elsewhere (a residual/
    package beside residual.py) is refused, never keyed as the other file."""
    top, path = package
    (path.with_suffix("")).mkdir()
    (path.with_suffix("") / "__init__.py").write_text("")
    line = error_of(capsys, "key", f"{path}:ResidualAdd", "hidden=4096")
    assert line.endswith(f"as module '{top}.kernels.residual': that name is imported from "
                         f"another file ({path.with_suffix('') / '__init__.py'})")
