"""The specdsl command line: list, render, key, and one-line errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specdsl import derived_key, render
from specdsl.cli import main
from specdsl.kernels import VectorAdd


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list(capsys):
    """list names every built-in spec with its template and entry."""
    code, out, _ = run(capsys, "list")
    assert code == 0
    assert "vectoradd" in out and "vector_add.ptx.j2" in out and "entry vector_add" in out


def test_list_verbose_shows_fields(capsys):
    """list -v shows each field's role and default."""
    code, out, _ = run(capsys, "list", "-v")
    assert code == 0 and "baked  dtype = DType.F32" in out and "launch block = 256" in out


def test_render_matches_library(capsys):
    """render prints exactly what specdsl.render returns."""
    code, out, _ = run(capsys, "render", "vectoradd", "dtype=f16", "--target", "sm_90a")
    assert code == 0 and out == render(VectorAdd(dtype="f16"), "sm_90a")


def test_key_prints_derived(capsys):
    """key prints the derived key (and no hand-written key when there is none)."""
    code, out, _ = run(capsys, "key", "vectoradd", "dtype=bf16")
    assert code == 0
    assert out == f"derived: {derived_key(VectorAdd(dtype='bf16'))}\n"


def test_key_prints_hand_written(capsys):
    """key also prints the hand-written key of a class with key()."""
    code, out, _ = run(capsys, "key", "handkeyed:Legacy", "n=12")
    assert code == 0 and "hand-written: legacy-12" in out and out.startswith("derived: legacy-")


@pytest.mark.parametrize("argv, message", [
    (["render", "vectoradd", "dtype=i32"], "VectorAdd.dtype = DType.I32 is invalid: expected one"),
    (["render", "vectoradd", "dtype"], "expected field=value (got 'dtype')"),
    (["render", "vectoradd", "width=3"], "VectorAdd has no field 'width' (fields: dtype, block)"),
    (["render", "vectoradd", "block=abc"], "VectorAdd.block must be an int (got 'abc')"),
    (["render", "vectoradd", "block=64", "block=128"],
     "VectorAdd.block is given twice ('block=128'); give each field once"),
    (["render", "nosuch"], "unknown spec 'nosuch': built-in specs are"),
    (["render", "no.such.module:X"], "cannot import module 'no.such.module'"),
    (["render", "vectoradd", "dtype=bf16", "--target", "sm_80"], "needs sm_90 or newer"),
])
def test_errors_are_one_line(capsys, argv, message):
    """Bad input gives one line on stderr and exit status 2, not a traceback."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_target_is_usage_error(capsys):
    """A malformed --target is an argparse usage error (exit 2)."""
    with pytest.raises(SystemExit) as info:
        main(["render", "vectoradd", "--target", "sm90"])
    assert info.value.code == 2
    assert "must look like 'sm_90'" in capsys.readouterr().err


def test_python_dash_m():
    """python -m specdsl runs the same command line."""
    done = subprocess.run([sys.executable, "-m", "specdsl", "key", "vectoradd"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("derived: vector_add-")


def test_console_script_finds_modules_in_the_current_folder(tmp_path):
    """The installed `specdsl` script resolves module:Class from the current folder."""
    import shutil
    from pathlib import Path

    script = Path(sys.executable).parent / "specdsl"
    if not script.exists():
        script = shutil.which("specdsl")
    if script is None:
        pytest.skip("the specdsl console script is not installed next to this Python")
    (tmp_path / "mykernels.py").write_text(
        "from specdsl import baked, kernel_spec\n"
        f"@kernel_spec(template='legacy.ptx.j2', entry='mine', template_dir={str(Path(__file__).parent / 'user_templates')!r})\n"
        "class Mine:\n"
        "    n: int = baked(3)\n"
        "    scale: float = baked(2.0)\n")
    done = subprocess.run([str(script), "render", "mykernels:Mine", "scale=0.5"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "mov.f32 %f1, 0f3F000000;" in done.stdout and ".entry mine(" in done.stdout


def test_version(capsys):
    """--version prints the package version."""
    import specdsl

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"specdsl {specdsl.__version__}\n"


def test_version_matches_pyproject():
    """specdsl.__version__ is the version pyproject.toml publishes."""
    import tomllib
    from pathlib import Path

    import specdsl

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert specdsl.__version__ == project["project"]["version"]
