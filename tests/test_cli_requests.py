"""Request words on the command line: missing and misspelled fields, tuples, and a spec
named without its class (docs/cli.md)."""

from __future__ import annotations

import sys
import textwrap

import attrs
import pytest

from specdsl._cli.main import main
from specdsl.kernels import RMSNorm
from test_cli import assert_one_error_line


def error_of(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    return assert_one_error_line(err)


def test_missing_field_suggests_words_not_python(capsys):
    """render without a required field says to give it as FIELD=VALUE."""
    assert error_of(capsys, "render", "rmsnorm") == (
        "specdsl render: error: RMSNorm is missing required field(s) 'hidden' (baked) "
        "(no default): give hidden=VALUE")


def test_misspelled_field_gets_did_you_mean(capsys):
    """An unknown field word names the closest field, as a Python call does."""
    fields = ", ".join(field.name for field in attrs.fields(RMSNorm))
    assert error_of(capsys, "key", "rmsnorm", "hiden=4096").endswith(
        f"RMSNorm has no field 'hiden' (fields: {fields}); did you mean 'hidden'?")


@pytest.mark.parametrize("text", ["1,,2", "[1,2]"])
def test_sloppy_tuple_words_are_refused(capsys, text):
    """dims=1,,2 and dims=[1,2] are one error line each, not read as (1, 2)."""
    assert error_of(capsys, "render", "userspecs:Toy", f"dims={text}").endswith(
        f"Toy.dims must be comma-separated values without brackets or empty items, such "
        f"as 1,2 (got {text!r})")


def test_bad_tuple_item_word_names_the_item(capsys):
    """dims=1,x names the item that is no int, not the tuple as if it were one."""
    assert error_of(capsys, "render", "userspecs:Toy", "dims=1,x") == (
        "specdsl render: error: Toy.dims[1] must be an int (got 'x')")


def test_underflow_error_suggests_no_refused_value(capsys):
    """eps=1e-50 says it rounds to zero, without suggesting 0.0 (which RMSNorm refuses)."""
    line = error_of(capsys, "render", "rmsnorm", "hidden=4096", "eps=1e-50")
    assert "rounds to zero in f32" in line and "0.0" not in line


SAXPY = """
    from pathlib import Path
    from specdsl import DType, baked, kernel_spec
    from specdsl.kernels import VectorAdd

    Path("imported.txt").write_text("yes")

    @kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
    class Saxpy:
        dtype: DType = baked(DType.F32)
"""


@pytest.fixture
def saxpy(tmp_path, monkeypatch):
    """A working folder holding saxpy.py (which marks its import); it is the cwd."""
    from specdsl._review.requests import MODULE_FILES

    (tmp_path / "saxpy.py").write_text(textwrap.dedent(SAXPY))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("saxpy", None)
    MODULE_FILES.pop("saxpy", None)


def test_file_without_class_names_its_classes(capsys, saxpy):
    """specdsl render saxpy.py (a path: the user named the file) lists its spec classes,
    not the ones it imports."""
    assert error_of(capsys, "render", "saxpy.py") == (
        "specdsl render: error: unknown spec 'saxpy.py': name a class in a file after a "
        "colon, as 'path/file.py:ClassName'; did you mean 'saxpy.py:Saxpy'?")


def test_module_without_class_is_read_not_run(capsys, saxpy):
    """specdsl render saxpy, saxpy.py in the working folder: the hint comes from reading
    the source; the module is not imported just to hint."""
    line = error_of(capsys, "render", "saxpy")
    assert line.endswith("; did you mean 'saxpy:Saxpy'?")
    assert not (saxpy / "imported.txt").exists()


def test_missing_file_says_so(capsys, saxpy):
    """A .py name that is no file says there is none."""
    assert error_of(capsys, "render", "nosuch.py").endswith("; there is no such file")
