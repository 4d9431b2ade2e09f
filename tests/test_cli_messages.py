"""Error messages for a new user's mistakes: a class named after a dot, a baked float the
PTX cannot hold, an --out that cannot be made, an unreadable template, a key() that reads
a field on some requests only, an unknown option without a command, a folder named as a
file, and verify's usage line (docs/cli.md)."""

from __future__ import annotations

import builtins
import errno
import importlib
import itertools
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from specdsl import RenderError, SpecDefinitionError, baked, kernel_spec, render
from specdsl._cli.main import main
from test_cli import assert_one_error_line

_modules = itertools.count()

SCALE = '''
    from specdsl import baked, kernel_spec

    @kernel_spec(template="scale.ptx.j2", entry="scale", template_dir="tpl")
    class Scale:
        factor: float = baked(2.0)
        offset: float = baked(0.0)

        def key(self):
            return "scale-default" if self.factor == 2.0 else f"{self.factor}-{self.offset}"
'''

# factor goes through a macro imported without context; offset is doubled first
SCALE_TEMPLATE = '''{% include "header.ptx.j2" %}
{% import "macros.ptx.j2" as m %}
.visible .entry scale()
{
    {{ m.constant("%f1", factor) }}
    mov.f32 %f2, {{ (offset * 2.0) | f32 }};
    ret;
}
'''


def _templates(folder: Path) -> Path:
    tpl = folder / "tpl"
    tpl.mkdir()
    (tpl / "scale.ptx.j2").write_text(SCALE_TEMPLATE)
    (tpl / "macros.ptx.j2").write_text(
        '{% macro constant(register, value) %}mov.f32 {{ register }}, {{ value | f32 }};'
        '{% endmacro %}')
    return tpl


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """The working folder holds a fresh module defining Scale (and tpl/); returns its name."""
    name = f"mykernels_{next(_modules)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SCALE))
    _templates(tmp_path)
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def scale_class(kernels: str, monkeypatch) -> type:
    """The Scale class of the module ``kernels`` in the working folder, imported."""
    monkeypatch.syspath_prepend(os.getcwd())
    return importlib.import_module(kernels).Scale


def error_of(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    return assert_one_error_line(err)


def _modes_enforced(folder: Path) -> bool:
    """Whether file modes refuse this process (not for root, which ignores them)."""
    probe = folder / "probe"
    probe.write_text("")
    probe.chmod(0)
    try:
        probe.read_text()
    except PermissionError:
        return True
    finally:
        probe.chmod(0o600)
    return False


@pytest.fixture
def deny(tmp_path, monkeypatch):
    """``deny(path, mode)``: reading ``path``, or anything beneath it, is refused with a
    PermissionError, as ``chmod mode`` makes it for a user other than root. Where modes
    are not enforced (root), ``open`` and ``os.stat`` are patched to refuse those paths
    the same way, so these tests run in CI too."""
    enforced, denied = _modes_enforced(tmp_path), []

    def refused(name: object, beneath_only: bool) -> bool:
        if not isinstance(name, (str, os.PathLike)):
            return False
        path = Path(os.fspath(name)).absolute()
        return any(d in path.parents or (path == d and not beneath_only) for d in denied)

    def error(name: object) -> PermissionError:
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(name))

    real_open, real_stat = builtins.open, os.stat

    def patched_open(file, *args, **kwargs):
        if refused(file, beneath_only=False):
            raise error(file)
        return real_open(file, *args, **kwargs)

    def patched_stat(path, *args, **kwargs):
        if refused(path, beneath_only=True):  # a folder without search permission
            raise error(path)
        return real_stat(path, *args, **kwargs)

    def deny_path(path: Path, mode: int) -> None:
        denied.append(path.absolute())
        if enforced:
            path.chmod(mode)
        elif len(denied) == 1:
            monkeypatch.setattr(builtins, "open", patched_open)
            monkeypatch.setattr(os, "stat", patched_stat)

    yield deny_path
    for path in denied:
        path.chmod(0o755 if path.is_dir() else 0o644)


# --- 1: a class named after a dot ------------------------------------------------------------

def test_dotted_class_of_a_working_folder_module_suggests_the_colon(capsys, kernels):
    """mykernels.Scale (Scale a spec class of mykernels.py) hints 'mykernels:Scale', from
    the source read, without importing the module."""
    line = error_of(capsys, "render", f"{kernels}.Scale")
    assert line.startswith(f"specdsl render: error: unknown spec '{kernels}.Scale': built-in ")
    assert line.endswith(f"or give 'package.module:ClassName'; did you mean '{kernels}:Scale'?")
    assert kernels not in sys.modules


def test_dotted_builtin_class_suggests_the_colon(capsys):
    """specdsl.kernels.VectorAdd hints 'specdsl.kernels:VectorAdd'."""
    line = error_of(capsys, "render", "specdsl.kernels.VectorAdd")
    assert line.startswith("specdsl render: error: unknown spec 'specdsl.kernels.VectorAdd': ")
    assert line.endswith("; did you mean 'specdsl.kernels:VectorAdd'?")


def test_check_keys_of_a_dotted_class_suggests_the_colon(capsys, kernels):
    """check-keys mykernels.Scale (no such module) hints 'mykernels:Scale' too."""
    assert error_of(capsys, "check-keys", f"{kernels}.Scale") == (
        f"specdsl check-keys: error: cannot import module '{kernels}.Scale': no module named "
        f"'{kernels}.Scale' (is it installed, or in the working folder?); did you mean "
        f"'{kernels}:Scale'?")


# --- 2: a baked float the PTX cannot hold ----------------------------------------------------

def test_overflowing_baked_float_names_the_field_on_the_command_line(capsys, kernels):
    """factor=1e39 (formatted through an imported macro) names the field and the macro's
    line, as a RenderError."""
    assert error_of(capsys, "render", f"{kernels}:Scale", "factor=1e39") == (
        "specdsl render: error: Scale(factor=1e+39, offset=0.0) for sm_90: template "
        "'scale.ptx.j2' ('macros.ptx.j2' line 1, reached from it): field factor = 1e+39 "
        "overflows f32 (largest finite value 3.40282e+38)")


def test_baked_float_rounding_to_zero_names_the_field_in_python(kernels, monkeypatch):
    """render() of factor=1e-50 raises a RenderError naming the field."""
    scale = scale_class(kernels, monkeypatch)
    with pytest.raises(RenderError) as caught:
        render(scale(factor=1e-50))
    assert type(caught.value) is RenderError
    assert str(caught.value) == (
        "Scale(factor=1e-50, offset=0.0) for sm_90: template 'scale.ptx.j2' ('macros.ptx.j2' "
        "line 1, reached from it): field factor = 1e-50 rounds to zero in f32 (its smallest "
        "non-zero magnitude is 1.4013e-45)")


def test_value_the_template_computes_names_no_field(kernels, monkeypatch):
    """offset * 2.0 overflowing is the template's value, not offset's: no field is named,
    the template line is."""
    scale = scale_class(kernels, monkeypatch)
    with pytest.raises(RenderError) as caught:
        render(scale(offset=1e39))
    assert str(caught.value) == ("Scale(factor=2.0, offset=1e+39) for sm_90: template "
                                 "'scale.ptx.j2' line 6: 2e+39 overflows f32 (largest finite "
                                 "value 3.40282e+38)")


def test_an_exception_in_the_template_code_is_a_render_error(tmp_path, capsys):
    """Python raising in a template's code (1 // 0) is a RenderError naming the request, the
    template line and the exception; verify gives that request a FAIL line and goes on."""
    from specdsl import baked, kernel_spec
    from specdsl._cli.main import main

    (tmp_path / "div.ptx.j2").write_text(
        '{% include "header.ptx.j2" %}\n.visible .entry div()\n{\n'
        "// {{ hidden // (block - 256) }}\n    ret;\n}\n")
    (tmp_path / "div.py").write_text(
        "from specdsl import baked, kernel_spec\n"
        "@kernel_spec(template='div.ptx.j2', entry='div', template_dir='.')\n"
        "class Div:\n    hidden: int = baked(4096)\n    block: int = baked(256)\n"
        "    variants = {'block': [256, 512]}\n")

    @kernel_spec(template="div.ptx.j2", entry="div", template_dir=tmp_path)
    class Div:
        hidden: int = baked(4096)
        block: int = baked(256)

    with pytest.raises(RenderError) as caught:
        render(Div())
    assert str(caught.value).endswith(
        "Div(hidden=4096, block=256) for sm_90: template 'div.ptx.j2' line 4: "
        "ZeroDivisionError: integer division or modulo by zero")
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    assert render(Div(block=512))
    code = main(["verify", f"{tmp_path / 'div.py'}:Div", "--variants"])
    out = capsys.readouterr().out
    assert code == 1 and out.rstrip().endswith("1 passed, 1 failed")
    assert "FAIL " in out and "line 4: ZeroDivisionError" in out


# --- 3: an --out that cannot be made or written ----------------------------------------------

def test_out_under_a_file_names_out_and_the_folder(capsys, tmp_path):
    """--out below a file is one line naming --out, the folder and why; exit 2."""
    (tmp_path / "file").write_text("")
    out = str(tmp_path / "file" / "x")
    assert error_of(capsys, "render", "vectoradd", "--out", out) == (
        f"specdsl render: error: --out {out!r}: cannot create folder {out!r}: "
        f"{os.strerror(errno.ENOTDIR)}")


def test_out_is_made_only_for_requests_understood(capsys, tmp_path):
    """An unknown spec is refused before --out is made: no folder is left behind."""
    out = tmp_path / "x" / "deep"
    assert error_of(capsys, "render", "nosuch", "--out", str(out)).startswith(
        "specdsl render: error: unknown spec 'nosuch'")
    assert not (tmp_path / "x").exists()


def test_out_in_a_read_only_folder_names_out_and_the_file(capsys, tmp_path, deny):
    """A read-only --out folder is one line naming --out, the file and why; exit 2."""
    folder = tmp_path / "ro"
    folder.mkdir()
    deny(folder, 0o555)
    line = error_of(capsys, "render", "vectoradd", "--out", str(folder))
    assert re.fullmatch(rf"specdsl render: error: --out {re.escape(repr(str(folder)))}: "
                        rf"cannot write file '{re.escape(str(folder))}/vectoradd-dtype_f32-"
                        r"[0-9a-f]+\.ptx': Permission denied", line), line


# --- 4: a template or its folder that cannot be read -----------------------------------------

OWNER = "_define.<locals>.Unreadable"  # the class's __qualname__, as errors name it


def _define(folder: Path) -> type:
    @kernel_spec(template="scale.ptx.j2", entry="scale", template_dir=folder)
    class Unreadable:
        factor: float = baked(2.0)
        offset: float = baked(0.0)
    return Unreadable


def test_unreadable_template_folder_is_a_definition_error(tmp_path, deny):
    """A template folder that cannot be searched is named, not 'template not found'."""
    tpl = _templates(tmp_path)
    deny(tpl, 0)
    with pytest.raises(SpecDefinitionError) as caught:
        _define(tpl)
    assert str(caught.value) == (f"{OWNER}: cannot read template 'scale.ptx.j2' (folder "
                                 f"{str(tpl)!r}): permission denied")


def test_unreadable_template_file_is_a_definition_error(tmp_path, deny):
    """A template file that cannot be read is a SpecDefinitionError, not a PermissionError."""
    tpl = _templates(tmp_path)
    deny(tpl / "scale.ptx.j2", 0)
    with pytest.raises(SpecDefinitionError) as caught:
        _define(tpl)
    assert str(caught.value) == (f"{OWNER}: cannot read template 'scale.ptx.j2' (file "
                                 f"{str(tpl / 'scale.ptx.j2')!r}): permission denied")


# --- 5: a key() that reads a field on some requests only -------------------------------------

def test_check_keys_says_a_field_is_read_on_some_requests_only(capsys, kernels):
    """key() reading offset behind an if: the lines say so, and agree with each other."""
    code = main(["check-keys", kernels, "--samples", "0"])
    out, _ = capsys.readouterr()
    assert code == 1
    assert out.splitlines()[:2] == [
        f"INCOMPLETE  {kernels}.Scale: key() reads factor, and offset only on some requests; "
        "template 'scale.ptx.j2' reads factor, offset",
        "    incomplete: the template reads offset but key() reads offset only on some "
        "requests: a request differing only there would silently run the first request's "
        "kernel",
    ]


# --- 6, 7, 8: options, folders, usage --------------------------------------------------------

def test_unknown_option_without_command_is_named(capsys):
    """specdsl --frob names --frob as unrecognized, not only the missing COMMAND."""
    assert error_of(capsys, "--frob") == (
        "specdsl: error: unrecognized arguments: --frob (and no COMMAND: give one of list, "
        "render, key, diff, verify, check-keys, run, cache)")


def test_folder_named_as_a_file_says_it_is_a_folder(capsys, tmp_path):
    """folder:Scale says the folder is not a Python file, not 'no such file'."""
    assert error_of(capsys, "render", f"{tmp_path}:Scale") == (
        f"specdsl render: error: cannot import {str(tmp_path)!r}: that is a folder, not a "
        "Python file (name a file such as path/file.py, or a package by its module name)")


def test_folder_named_without_class_says_it_is_a_folder(capsys, tmp_path):
    """A folder named with no :ClassName says it is a folder too."""
    assert error_of(capsys, "render", str(tmp_path)).endswith(
        "; that is a folder, not a Python file")


def test_verify_usage_has_one_ellipsis_a_level(capsys, monkeypatch):
    """verify --help shows [SPEC [FIELD=VALUE ...] ...], not '... ...'."""
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["verify", "--help"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[0].endswith(" [-g] [SPEC [FIELD=VALUE ...] ...]")
    assert "... ..." not in out
