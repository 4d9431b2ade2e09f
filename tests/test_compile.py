"""Compile options (-lineinfo, -maxrregcount, -g) and the toolchain version in the cubin key."""

from __future__ import annotations

import re

import pytest

from specdsl import CompileError, Executor, render
from specdsl._runtime.compile import (
    CompileOptions,
    compile_ptx,
    link_options,
    linker_options,
    toolchain_version,
)
from specdsl._spec.target import Target
from specdsl.errors import ConfigError
from specdsl.kernels import VectorAdd
from test_resources import _spilling_ptx


def _pressure_ptx() -> str:
    """A kernel that keeps 64 values alive at once, with no register directive of its own."""
    return _spilling_ptx().replace(".maxnreg 24\n", "").replace("entry spill(", "entry pressure(")


def test_defaults():
    """By default: no line information, no register limit, no debug information."""
    assert CompileOptions() == CompileOptions(lineinfo=False, max_registers=None, debug=False)


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_registers=23), r"CompileOptions.max_registers must be None or an int from 24 to "
                             r"255 registers per thread \(got 23\)"),
    (dict(max_registers=256), r"from 24 to 255 .*\(got 256\)"),
    (dict(max_registers=64.0), r"\(got 64.0\)"),
    (dict(max_registers=True), r"\(got True\)"),
    (dict(lineinfo=1), r"CompileOptions.lineinfo must be True or False \(got 1\)"),
    (dict(debug="yes"), r"CompileOptions.debug must be True or False \(got 'yes'\)"),
])
def test_bad_values_are_refused(kwargs, message):
    """A wrong type or a register limit ptxas would not obey is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=message):
        CompileOptions(**kwargs)


def test_key_text_is_what_the_linker_gets():
    """link_options() is cuda.core's own rendering of the very LinkerOptions the compile uses."""
    options = CompileOptions(lineinfo=True, max_registers=64, debug=True)
    built = linker_options(Target.parse("sm_90"), options)
    assert link_options("sm_90", options) == tuple(o.decode() for o in built.as_bytes("nvjitlink"))
    assert link_options("sm_90", options) == ("-arch=sm_90", "-maxrregcount=64", "-verbose", "-g",
                                              "-lineinfo", "-no-cache")
    assert link_options("sm_90") == ("-arch=sm_90", "-verbose", "-no-cache")


def test_compile_hands_the_linker_that_object(monkeypatch):
    """compile_ptx passes the Linker the same LinkerOptions object the key is made from."""
    import cuda.core

    seen = []
    real = cuda.core.Linker

    def linker(*codes, options=None):
        seen.append(options)
        return real(*codes, options=options)

    monkeypatch.setattr(cuda.core, "Linker", linker)
    options = CompileOptions(lineinfo=True)
    compile_ptx(render(VectorAdd()), "sm_90", options=options)
    assert seen == [linker_options(Target.parse("sm_90"), options)]
    assert seen[0] is linker_options(Target.parse("sm_90"), options)


@pytest.mark.parametrize("options", [CompileOptions(lineinfo=True), CompileOptions(debug=True)])
def test_each_option_changes_the_cubin(options):
    """-lineinfo and -g each give another cubin than the defaults."""
    ptx = render(VectorAdd())
    assert compile_ptx(ptx, "sm_90", options=options).cubin != compile_ptx(ptx, "sm_90").cubin


def test_max_registers_limits_registers():
    """-maxrregcount=32 holds a kernel that wants more registers to 32 (it spills instead)."""
    free = compile_ptx(_pressure_ptx(), "sm_90").resources()["pressure"]
    held = compile_ptx(_pressure_ptx(), "sm_90",
                       options=CompileOptions(max_registers=32)).resources()["pressure"]
    assert free.registers > 32 >= held.registers
    assert held.stack_frame > 0


def test_register_limit_ptxas_changes_is_an_error(monkeypatch):
    """Where ptxas raises or drops the limit (its log says so), the compile fails loudly."""
    import specdsl._runtime.compile as compile_module

    monkeypatch.setattr(compile_module, "MIN_REGISTERS", 1)
    with pytest.raises(CompileError, match=r"did not apply -maxrregcount=16 to PTX for sm_90: "
                                           r"ptxas warning : For profile sm_90 adjusting per "
                                           r"thread register count of 16 to lower bound of 24"):
        compile_ptx(render(VectorAdd()), "sm_90", options=CompileOptions(max_registers=16))


def test_executor_compiles_with_its_options(tmp_path):
    """Executor(compile_options=...) compiles every module with them."""
    options = CompileOptions(lineinfo=True)
    executor = Executor(None, target="sm_90", cache_dir="off", compile_options=options)
    module = executor.ensure_module(VectorAdd())
    assert executor.compile_options is options
    assert module.cubin == compile_ptx(render(VectorAdd()), "sm_90", options=options).cubin


def test_executor_refuses_other_option_objects():
    """compile_options must be a CompileOptions."""
    with pytest.raises(ConfigError, match=r"compile_options must be a "
                                          r"specdsl.CompileOptions \(got \{'lineinfo'"):
        Executor(None, target="sm_90", cache_dir="off", compile_options={"lineinfo": True})


def test_toolchain_version_has_the_patch_level():
    """The toolchain in every key names nvJitLink's release with its patch level and build."""
    from cuda.bindings import nvjitlink

    major, minor = nvjitlink.version()
    assert re.fullmatch(rf"{major}\.{minor}\.\d+ cuda_{major}\.{minor}\.\S+", toolchain_version())


def test_version_read_from_a_compiler_binary(tmp_path):
    """The version comes from the binary's last identification string, skipping the format
    string that shares its prefix; a binary without one gives None."""
    from specdsl._runtime.compile import _embedded_version

    binary = tmp_path / "lib.so"
    binary.write_bytes(b"\0" * 100 + b"Cuda compilation tools, release 13.5, V13.5.37\0"
                       + b"Build cuda_13.5.r13.5/compiler.39125733_0\0" + b"\0" * 50
                       + b"Cuda compilation tools, release %d.%d,\0" + b"\0" * 100)
    assert _embedded_version(str(binary)) == "13.5.37 cuda_13.5.r13.5/compiler.39125733_0"
    binary.write_bytes(b"\0" * 4096)
    assert _embedded_version(str(binary)) is None


# -- specdsl verify --lineinfo --maxrregcount N -g ------------------------------------------------

PRESSURE_MODULE = '''
from pathlib import Path
from specdsl import baked, kernel_spec

@kernel_spec(template="pressure.ptx.j2", entry="pressure", template_dir=Path(__file__).parent)
class Pressure:
    live: int = baked(64)
'''


@pytest.fixture
def pressure(tmp_path, monkeypatch):
    """A user spec (module ``pressure_spec``) whose kernel wants more than 32 registers."""
    (tmp_path / "pressure.ptx.j2").write_text(_pressure_ptx().replace("%v<64>", "%v<{{ live }}>"))
    (tmp_path / "pressure_spec.py").write_text(PRESSURE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "pressure_spec:Pressure"


def _verify_registers(capsys, *argv: str) -> int:
    import json

    from specdsl._cli.main import main

    assert main(["verify", *argv, "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    return result["resources"][0]["registers"]


def test_verify_maxrregcount_limits_registers(capsys, pressure):
    """verify --maxrregcount 32 compiles with -maxrregcount=32: the report shows <= 32."""
    assert _verify_registers(capsys, pressure) > 32
    assert _verify_registers(capsys, pressure, "--maxrregcount", "32") <= 32


@pytest.mark.parametrize("spec, entry, registers, directives", [
    ("silumul", "silu_mul", 56, ".maxntid 1024, 1, 1"),
    ("rmsnorm", "rmsnorm", 40, ".reqntid 256, .minnctapersm 4"),
])
def test_verify_notes_a_limit_the_entry_overrides(capsys, spec, entry, registers, directives):
    """An entry whose own launch bounds set its register budget keeps it under
    --maxrregcount 32, and ptxas's log does not say so: verify passes the request with a
    NOTE line naming the entry, its registers and its directives (and JSON "notes")."""
    import json

    from specdsl._cli.main import main

    note = (f"{entry} keeps {registers} registers, above -maxrregcount=32: its own "
            f"{directives} set its budget instead")
    assert main(["verify", spec, "--maxrregcount", "32"]) == 0
    out = capsys.readouterr().out
    assert [line.split(": ", 1)[1] for line in out.splitlines()
            if line.startswith("NOTE ")] == [note]
    assert main(["verify", spec, "--maxrregcount", "32", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["notes"] == [note] and result["violations"] == []
    assert main(["verify", spec]) == 0
    assert "NOTE" not in capsys.readouterr().out


def test_verify_notes_nothing_where_the_limit_holds(capsys, pressure):
    """A kernel without launch bounds obeys --maxrregcount: no note."""
    import json

    from specdsl._cli.main import main

    assert main(["verify", pressure, "--maxrregcount", "32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["notes"] == []


def test_verify_takes_lineinfo_and_debug(capsys):
    """verify --lineinfo -g compiles (with -lineinfo -g) and reports the request."""
    from specdsl._cli.main import main

    assert main(["verify", "vectoradd", "--lineinfo", "-g"]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out


def test_verify_refuses_a_register_limit_ptxas_would_change(capsys):
    """verify --maxrregcount 8: one error line naming the limit, exit 2."""
    from specdsl._cli.main import main

    assert main(["verify", "vectoradd", "--maxrregcount", "8"]) == 2
    assert capsys.readouterr().err == (
        "specdsl verify: error: --maxrregcount must be from 24 to 255 registers per thread "
        "(got 8); to fail a request above N registers instead, give --max-registers N\n")


@pytest.mark.parametrize("count", ["10", "256"])
def test_verify_register_limit_error_names_the_option_typed(capsys, count):
    """--maxrregcount out of range: the error names --maxrregcount and 24..255, not
    CompileOptions."""
    from specdsl._cli.main import main

    assert main(["verify", "--maxrregcount", count, "rmsnorm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specdsl verify: error: --maxrregcount must be from 24 to 255 "
                          f"registers per thread (got {count});") and "CompileOptions" not in err


_FIRST_COMPILES_ON_THREADS = """
from concurrent.futures import ThreadPoolExecutor
from specdsl import render
from specdsl._runtime.compile import compile_ptx
from specdsl.kernels import VectorAdd
ptx = render(VectorAdd())
with ThreadPoolExecutor(8) as pool:
    print(sorted(set(pool.map(lambda _: type(compile_ptx(ptx, "sm_90")).__name__, range(8)))))
"""


def test_first_compiles_on_eight_threads_at_once():
    """A fresh process whose first compiles run on 8 threads at once compiles 8 times: the
    first import of cuda.core is made once, under a lock (specdsl._runtime.cudacore). Before,
    half of such processes raised ImportError: cannot import name 'Linker' from
    'cuda.core.cu13' (3 and 2 of 6 in two tries). Six processes at once, as the race needs a
    fresh interpreter: the code before passes all six about 1 to 9% of the time."""
    import subprocess
    import sys

    runs = [subprocess.Popen([sys.executable, "-c", _FIRST_COMPILES_ON_THREADS], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(6)]
    results = [run.communicate(timeout=300) for run in runs]
    assert [out for out, _ in results] == ["['Compiled']\n"] * 6, [err for _, err in results]
