"""The specdsl command line's contract: exit statuses, one-line errors, parsing, the
working folder, closed pipes; and a fuzz test of all of it (docs/cli.md)."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import gpu_available
from specdsl import derived_key, render
from specdsl._cli.main import main
from specdsl.kernels import RMSNorm, VectorAdd

ERROR_LINE = re.compile(r"^specdsl(?: [a-z-]+){0,2}: error: \S.*$")
#: stderr lines a command may print besides its one error line
QUIET_LINES = re.compile(r"^(specdsl [a-z-]+: note: |skipped |\[\d+/\d+\] )")
_modules = itertools.count()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(err: str, start: str = "specdsl") -> str:
    """The one ``specdsl VERB: error: ...`` line of ``err`` (other lines only notes)."""
    errors = [line for line in err.splitlines() if not QUIET_LINES.match(line)]
    assert len(errors) == 1 and ERROR_LINE.match(errors[0]), err
    assert errors[0].startswith(start) and "Traceback" not in err
    return errors[0]


def script() -> str:
    """The installed console script next to this Python (skip where there is none)."""
    path = Path(sys.executable).parent / "specdsl"
    found = str(path) if path.exists() else shutil.which("specdsl")
    if found is None:
        pytest.skip("the specdsl console script is not installed next to this Python")
    return found


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    """Writes a fresh user module in a folder on sys.path; returns its name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        name = f"climod_{next(_modules)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name
    return write


# --- the verbs, briefly --------------------------------------------------------------------

def test_list(capsys):
    """list names every built-in spec with its template and entry."""
    code, out, _ = run(capsys, "list")
    assert code == 0
    assert "vectoradd" in out and "vector_add.ptx.j2" in out and "entry vector_add" in out


def test_list_verbose_shows_fields(capsys):
    """list -v shows each field's role, type and default."""
    code, out, _ = run(capsys, "list", "-v")
    assert code == 0 and "    baked  dtype: DType = DType.F32  element type" in out
    assert "    launch block: int = 256  threads per CTA" in out


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


def test_key_of_two_specs_says_it_takes_one_request(capsys):
    """A second SPEC among key's words is named as such (exit 2), not as a bad field word."""
    code, out, err = run(capsys, "key", "vectoradd", "rmsnorm")
    assert (code, out) == (2, "")
    assert err == ("specdsl key: error: key takes one request: give its SPEC once, then "
                   "field=value words (got 'rmsnorm')\n")


# --- one line, exit 2 ----------------------------------------------------------------------

@pytest.mark.parametrize("spec", [":Foo", ":", "userspecs:", "userspecs:Toy.", "userspecs:a..b",
                                  "nosuch:"])
def test_malformed_module_class_is_one_plain_line(capsys, spec):
    """A SPEC with no module before ':' or no class after it is refused in plain words,
    before any import (no importlib message, no path into the standard library)."""
    code, out, err = run(capsys, "render", spec)
    assert (code, out) == (2, "")
    assert err == (f"specdsl render: error: expected MODULE:ClassName or "
                   f"path/file.py:ClassName (got {spec!r})\n")


@pytest.mark.parametrize("name", ["", ".userspecs", "userspecs.", "a..b"])
def test_malformed_module_name_is_one_plain_line(capsys, name):
    """check-keys with an empty or relative module name: a plain line, exit 2."""
    code, out, err = run(capsys, "check-keys", name, "--samples", "0")
    assert (code, out) == (2, "")
    assert err == (f"specdsl check-keys: error: cannot import module {name!r}: not a module "
                   "name (expected package.module, or a file such as ./kernels.py)\n")


@pytest.mark.parametrize("argv, message", [
    (["render", "vectoradd", "dtype=i32"], "VectorAdd.dtype = DType.I32 is invalid: expected one"),
    (["render", "vectoradd", "dtype"], "expected field=value (got 'dtype')"),
    (["render", "vectoradd", "width=3"], "VectorAdd has no field 'width' (fields: dtype, block)"),
    (["render", "vectoradd", "block=abc"], "VectorAdd.block must be an int (got 'abc')"),
    (["render", "vectoradd", "block=64", "block=128"],
     "VectorAdd.block is given twice ('block=128'); give each field once"),
    (["render", "nosuch"], "unknown spec 'nosuch': built-in specs are"),
    (["render", "RMSNrom"], "or give 'package.module:ClassName'; did you mean 'rmsnorm'?"),
    (["render", "vectoradd", "dtype=fp99"],
     "VectorAdd.dtype must be a DType, one of 'f32', 'f16', 'bf16' (got 'fp99', a str)"),
    (["render", "no.such.module:X"], "cannot import module 'no.such.module'"),
    # a target written where the SPEC goes is the first word's error, not a second request
    (["render", "sm_80a", "vectoradd"], "unknown spec 'sm_80a': built-in specs are"),
    (["render", "SM_90", "rmsnorm"], "; a target is given as --target sm_90"),
    (["key", "sm_90a", "rmsnorm"], "; a target is given as --target sm_90a"),
    (["verify", "sm_90", "rmsnorm"], "; a target is given as --target sm_90"),
    (["render", "rmsnorm", "hidden=4096", "sm_90"],  # a target where a field goes
     "expected field=value (got 'sm_90'); a target is given as --target sm_90"),
    # render takes one request: '--' would merge a second into it
    (["render", "vectoradd", "dtype=f16", "--", "dtype=f32"],
     "'--' separates two requests in specdsl diff only"),
    (["render", "vectoradd", "dtype=bf16", "--target", "sm_80"], "needs sm_90 or newer"),
    (["render", "rmsnorm", "hidden=4096", "l2_evict_last=y"], "RMSNorm.l2_evict_last must be "
     "a bool: true or false (or 1/0, yes/no, on/off, in any case; got 'y')"),
])
def test_errors_are_one_line(capsys, argv, message):
    """Bad input gives one line on stderr and exit status 2, not a traceback."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in assert_one_error_line(err, f"specdsl {argv[0]}: error: ")


def test_an_option_before_the_command_is_named(capsys):
    """specdsl --target sm_90 key vectoradd: the option's value is not taken for a COMMAND
    ("invalid choice: 'sm_90'"); the error says options go after the COMMAND."""
    code, out, err = run(capsys, "--target", "sm_90", "key", "vectoradd")
    assert (code, out) == (2, "")
    assert err == ("specdsl: error: --target sm_90 comes before the COMMAND: options go after "
                   "it (specdsl COMMAND --target sm_90 ...)\n")


@pytest.mark.parametrize("words", [["--target", "sm_90a"], ["--target=sm_90a"]])
def test_diff_target_among_b_words_is_bs(capsys, words):
    """diff vectoradd -- --target sm_90a compares sm_90 (A) with sm_90a (B), as --target-b
    does; it compared sm_90a with itself."""
    code, out, _ = run(capsys, "diff", "vectoradd", "--", *words)
    lines = out.splitlines()
    assert code == 1 and lines[0].endswith("(vectoradd dtype=f32 block=256, sm_90)")
    assert lines[1].endswith("(vectoradd dtype=f32 block=256, sm_90a)")


@pytest.mark.parametrize("argv", [
    ["render", "fp8quant", "--target", "sm_89"],
    ["diff", "fp8quant", "hidden=4096", "--target", "sm_89", "--", "hidden=8192"],
])
def test_a_request_the_target_cannot_run_is_named_in_cli_words(capsys, argv):
    """The refused request reads as the words that would ask for it again, not a Python repr."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err == (f"specdsl {argv[0]}: error: fp8quant dtype=bf16 hidden=4096 "
                   "scale_mode=dynamic static_scale=none split=1 block=256 l1_no_allocate=false "
                   "for sm_89: "
                   "Fp8Quant: cvt.rn.satfinite.e4m3x2.f32 needs sm_90 or newer, or sm_89 with PTX "
                   "ISA 8.1 or newer (in Python, Target(89, ptx_version=(8, 1)))\n")


@pytest.mark.parametrize("argv, line", [
    ([], "specdsl: error: the following arguments are required: COMMAND"),
    (["nosuch"], "specdsl: error: argument COMMAND: invalid choice: 'nosuch'"),
    (["render"], "specdsl render: error: the following arguments are required: SPEC"),
    (["render", "vectoradd", "--bogus"], "specdsl render: error: unrecognized arguments: --bogus"),
    (["render", "vectoradd", "--target"], "specdsl render: error: argument --target: expected "
                                          "one argument"),
    (["render", "vectoradd", "--target", "sm90"], "specdsl render: error: argument --target: "),
    (["verify", "--max-registers", "many"], "specdsl verify: error: argument --max-registers: "
                                            "invalid int value: 'many'"),
    (["run", "extra"], "specdsl run: error: unknown spec 'extra': built-in specs are "),
    (["run", "--tokens", "0"], "specdsl run: error: argument --tokens: expected a whole "
                               "number >= 1 (got '0')"),
    (["run", "silumul", "--tokens"], "specdsl run: error: argument --tokens: expected one "
                                     "argument"),
    (["check-keys", "--samples", "\u00b2"], "specdsl check-keys: error: argument --samples: "
                                           "expected a whole number >= 0 (got '\u00b2')"),
])
def test_argparse_errors_are_one_line(capsys, argv, line):
    """argparse's own errors follow the rule too: one line (no usage block), exit 2."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert assert_one_error_line(err).startswith(line)


def test_version(capsys):
    """--version prints the package version and returns 0 (main never raises SystemExit)."""
    import specdsl

    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == f"specdsl {specdsl.__version__}\n"


def test_help_returns_zero(capsys):
    """A verb's --help prints its options and returns 0."""
    code, out, _ = run(capsys, "verify", "--help")
    assert code == 0 and "--variants" in out and "--max-registers" in out


def test_version_has_one_source():
    """pyproject.toml takes its version from specdsl/_version.py, and the installed
    metadata and specdsl.__version__ both carry it."""
    import importlib.metadata
    import tomllib

    import specdsl
    from specdsl import _version

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "specdsl._version.__version__"}
    try:
        installed = importlib.metadata.version("specdsl")
    except importlib.metadata.PackageNotFoundError:  # used from a checkout (.ci/gpu)
        installed = _version.__version__
    assert specdsl.__version__ == _version.__version__ == installed


def test_user_module_with_a_syntax_error(capsys, module_dir):
    """A user module that does not parse: one line naming the file and line, exit 2."""
    name = module_dir("x = (\n")
    code, out, err = run(capsys, "key", f"{name}:Spec")
    line = assert_one_error_line(err, "specdsl key: error: ")
    assert code == 2 and out == ""
    assert f"cannot import module {name!r}: SyntaxError: " in line and f"{name}.py" in line


def test_user_module_that_raises_at_import(capsys, module_dir):
    """A user module that raises while it runs: one line with the error and where, exit 2."""
    name = module_dir("import math\nvalue = 1 / 0\n")
    code, _, err = run(capsys, "check-keys", name)
    line = assert_one_error_line(err, "specdsl check-keys: error: ")
    assert code == 2 and f"cannot import module {name!r}: ZeroDivisionError: " in line
    assert line.endswith(f"{name}.py:2)")


def test_user_template_with_an_unknown_filter_names_its_file(capsys, module_dir, tmp_path):
    """specdsl render of a spec whose template uses an unknown filter names the template
    file and line, not Jinja's '<introspection>'."""
    (tmp_path / "b.ptx.j2").write_text('{% include "header.ptx.j2" %}\n.visible .entry '
                                       '{{ entry }}()\n{\n// {{ factor | f31 }}\n}\n')
    name = module_dir("""
        from specdsl import baked, kernel_spec

        @kernel_spec(template="b.ptx.j2", entry="b", template_dir=".")
        class B:
            factor: float = baked(1.0)
    """)
    code, _, err = run(capsys, "render", f"{name}:B")
    line = assert_one_error_line(err, "specdsl render: error: ")
    assert code == 2 and (f"cannot import module {name!r}: SpecDefinitionError: B: template "
                          "'b.ptx.j2' line 4: No filter named 'f31'.") in line


def test_user_module_that_exits_at_import(capsys, module_dir):
    """A user module calling sys.exit() at import is an error like any other, exit 2."""
    name = module_dir("import sys\nsys.exit(3)\n")
    code, _, err = run(capsys, "render", f"{name}:Spec")
    assert code == 2 and "SystemExit: 3" in assert_one_error_line(err)


def test_an_unexpected_exception_is_one_line(capsys, monkeypatch):
    """A bug inside specdsl still gives one line, saying it is one and where, exit 2."""
    from specdsl._render.keys import hand_key

    monkeypatch.setattr("specdsl._cli.keys.key_inputs", hand_key)  # called with one too many
    code, _, err = run(capsys, "key", "vectoradd")
    line = assert_one_error_line(err, "specdsl key: error: internal error, a bug in specdsl")
    assert code == 2 and "TypeError: hand_key() takes 1 positional argument" in line
    assert re.search(r"\(at .*specdsl/_cli/keys\.py:\d+\)$", line)


def test_interrupt_is_one_line_and_status_130(capsys, monkeypatch):
    """Ctrl-C during a command: one 'interrupted' line and exit status 130, no traceback."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("specdsl._cli.keys.derived_key", interrupted)
    assert run(capsys, "key", "vectoradd") == (130, "", "specdsl key: interrupted\n")


def test_render_out_expands_home(capsys, tmp_path, monkeypatch):
    """render --out=~/ptx (which the shell leaves alone after '=') writes under the home
    directory, as cache --dir and SPECDSL_CACHE_DIR read ~, not into a folder named '~'."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    code, _, _ = run(capsys, "render", "vectoradd", "--out=~/ptx")
    assert code == 0 and list((tmp_path / "home" / "ptx").iterdir())
    assert not (tmp_path / "~").exists()


def test_render_out_onto_a_file_is_refused(capsys, tmp_path):
    """render --out naming an existing file: one line, exit 2, the file untouched."""
    target = tmp_path / "taken.ptx"
    target.write_text("mine")
    code, out, err = run(capsys, "render", "rmsnorm", "hidden=4096", "--out", str(target))
    assert code == 2 and out == "" and target.read_text() == "mine"
    assert f"--out {str(target)!r} is a file" in assert_one_error_line(err)


def test_render_out_naming_a_ptx_file_is_refused(capsys, tmp_path):
    """render --out kernel.ptx, not there yet: refused in one line (exit 2), pointing at a
    redirect, rather than made into a folder of that name; an existing folder of that name
    is written into."""
    target = tmp_path / "kernel.ptx"
    code, out, err = run(capsys, "render", "rmsnorm", "hidden=4096", "--out", str(target))
    assert code == 2 and out == "" and not target.exists()
    assert assert_one_error_line(err).endswith(
        f"argument --out: {str(target)!r} names a .ptx file, not a folder: --out writes one "
        f"file a request into a folder (made if missing); to save one render as a file, "
        f"leave --out out and redirect: > {target}")
    target.mkdir()
    code, _, _ = run(capsys, "render", "rmsnorm", "hidden=4096", "--out", str(target))
    assert code == 0 and len(list(target.iterdir())) == 1


# --- options anywhere ----------------------------------------------------------------------

@pytest.mark.parametrize("before, after", [
    (["render", "--target", "sm_90a", "vectoradd", "dtype=f16"],
     ["render", "vectoradd", "dtype=f16", "--target", "sm_90a"]),
    (["render", "--target", "sm_90a", "vectoradd", "dtype=f16"],
     ["render", "vectoradd", "--target=sm_90a", "dtype=f16"]),
    (["key", "--json", "rmsnorm", "hidden=4096", "eps=1e-5"],
     ["key", "rmsnorm", "hidden=4096", "--json", "eps=1e-5"]),
    (["diff", "--target-b", "sm_90a", "vectoradd", "dtype=f16", "--", "dtype=bf16"],
     ["diff", "vectoradd", "dtype=f16", "--", "dtype=bf16", "--target-b", "sm_90a"]),
    (["verify", "--json", "--no-spills", "vectoradd", "dtype=f16"],
     ["verify", "vectoradd", "--no-spills", "dtype=f16", "--json"]),
    (["check-keys", "--samples", "0", "handkeyed"], ["check-keys", "handkeyed", "--samples", "0"]),
    (["list", "--json", "vectoradd"], ["list", "vectoradd", "--json"]),
])
def test_options_before_or_after_the_words(capsys, before, after):
    """Every verb takes its options before, between or after the SPEC and field words."""
    first, second = run(capsys, *before), run(capsys, *after)
    strip = re.compile(r'"compile_seconds": [0-9.e-]+|\d+ ms')
    assert first[0] in (0, 1) and first[0] == second[0]
    assert strip.sub("", first[1]) == strip.sub("", second[1]) and first[1]


def test_diff_b_words_keep_their_place(capsys):
    """Words after '--' are request B's wherever the options sit."""
    code, out, _ = run(capsys, "diff", "vectoradd", "--target", "sm_90", "dtype=f16", "--",
                       "--target-b", "sm_90", "dtype=bf16")
    assert code == 1 and "(vectoradd dtype=f16 block=256, sm_90)" in out.splitlines()[0]
    assert "(vectoradd dtype=bf16 block=256, sm_90)" in out.splitlines()[1]


def test_deprecated_grid_flag_notes_and_works(capsys, tmp_path):
    """--grid still works as --variants, with one deprecation note on stderr."""
    old = run(capsys, "render", "vectoradd", "--grid", "--out", str(tmp_path / "a"))
    new = run(capsys, "render", "vectoradd", "--variants", "--out", str(tmp_path / "b"))
    assert old[0] == new[0] == 0 and len(old[1].split()) == len(new[1].split()) == 3
    assert old[2] == ("specdsl render: note: --grid is deprecated, use --variants (a spec's "
                      "variants; 'grid' names the CUDA launch grid)\n") and new[2] == ""


# --- variants with pinned fields -----------------------------------------------------------

def test_verify_pinned_variants_check_the_applications_requests(capsys):
    """verify rmsnorm hidden=2048 --variants compiles the block RMSNorm(hidden=2048) picks."""
    import json

    code, out, _ = run(capsys, "verify", "rmsnorm", "hidden=2048", "--variants", "--json")
    checked = {(d["fields"]["dtype"], d["fields"]["fused_residual"]): d["fields"]["block"]
               for d in json.loads(out)}
    assert code == 0 and len(checked) == 6
    for (dtype, fused), block in checked.items():
        assert block == RMSNorm(hidden=2048, dtype=dtype, fused_residual=fused).block


def test_variants_left_out_by_pins_are_noted(capsys, tmp_path):
    """render --variants notes on stderr how many variants the pins leave out, and why."""
    code, out, err = run(capsys, "render", "rmsnorm", "l2_evict_last=true", "--variants",
                         "--out", str(tmp_path))
    assert code == 0 and len(out.split()) == 20
    assert err == ("specdsl render: note: rmsnorm l2_evict_last=true --variants: 22 of 42 "
                   "variants left out as invalid, e.g. RMSNorm.l2_evict_last = True is "
                   "invalid: expected False for hidden=4100 bf16: the policy applies to rows "
                   "of whole 16-byte vectors (hidden a multiple of 8), and this row moves in "
                   "8-byte vectors\n")


def test_verify_notes_variants_left_out_by_pins(capsys):
    """verify --variants prints the same note, one a spec, and keeps its exit status."""
    code, out, err = run(capsys, "verify", "softmax", "cols=4097", "--variants",
                         "vectoradd", "dtype=f16")
    assert code == 0 and out.rstrip().endswith("5 passed, 0 failed")
    assert err == ("specdsl verify: note: softmax cols=4097 --variants: 8 of 15 variants "
                   "left out as invalid, e.g. Softmax.split = 8 is invalid: expected a split "
                   "of the row into equal whole 2-byte vectors (cols=4097 of bf16 is 4097 "
                   "vectors); the other 7 are 4 distinct requests (one a derived key)\n")
    assert "verify: 5 request(s) for sm_90" in out  # Softmax's 4 and VectorAdd's one


def test_the_note_counts_variants_with_the_pins_applied(capsys):
    """Variants that the pins make twins count once: with dtype=f16 pinned, RMSNorm's 42
    variants are 14 (hidden x fused_residual), of which l2_evict_last=true refuses 8."""
    code, out, err = run(capsys, "verify", "rmsnorm", "dtype=f16", "l2_evict_last=true",
                         "--variants")
    assert code == 0 and "verify: 6 request(s) for sm_90" in out
    assert err.startswith("specdsl verify: note: rmsnorm dtype=f16 l2_evict_last=true "
                          "--variants: 8 of 14 variants left out as invalid, e.g. ")


def test_no_valid_variant_names_a_refusal_of_the_pins(capsys):
    """When the pins leave nothing, the error quotes the first refusal, which names them."""
    code, out, err = run(capsys, "verify", "softmax", "split=2", "l2_evict_last=true",
                         "--variants")
    assert (code, out) == (2, "")
    assert err == ("specdsl verify: error: no variant of Softmax is valid with {'split': 2, "
                   "'l2_evict_last': True} (27 refused), e.g. Softmax.l2_evict_last = True is "
                   "invalid: expected False for cols=4096 bf16 with split=2: the policy "
                   "applies to rows on one CTA\n")


def test_pins_that_leave_every_variant_valid_print_no_note(capsys, tmp_path):
    """rmsnorm hidden=4097 --variants leaves no variant out: nothing on stderr."""
    code, out, err = run(capsys, "render", "rmsnorm", "hidden=4097", "--variants",
                         "--out", str(tmp_path))
    assert code == 0 and len(out.split()) == 6 and err == ""


def test_variants_pin_a_required_field_without_variants(capsys, module_dir):
    """alpha=2.0 --variants works on a spec whose alpha has no default and no variants."""
    templates = str(Path(__file__).parent / "user_templates")
    name = module_dir(f'''
        from specdsl import baked, kernel_spec

        @kernel_spec(template="legacy.ptx.j2", entry="legacy", template_dir={templates!r})
        class Scaled:
            scale: float = baked()
            n: int = baked(3)
    ''')
    code, out, err = run(capsys, "verify", f"{name}:Scaled", "scale=2.0", "--variants")
    assert code == 0, err
    assert f"{name}:Scaled scale=2.0 n=3" in out and out.rstrip().endswith("1 passed, 0 failed")
    # one request: say why, so that it is not taken for every variant
    assert err == (f"specdsl verify: note: {name}:Scaled scale=2.0 --variants: one request, as "
                   f"Scaled declares no 'variants' and has no bool, enum or Literal baked "
                   f"field to go through\n")


# --- modules and files ---------------------------------------------------------------------

def _spec_file(folder: Path, name: str = "filekernels.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(f'''
        from specdsl import baked, kernel_spec

        @kernel_spec(template="legacy.ptx.j2", entry="legacy",
                     template_dir={str(Path(__file__).parent / "user_templates")!r})
        class FromFile:
            n: int = baked(4)
            scale: float = baked(1.0)

            def key(self):
                return f"legacy-{{self.n}}"
    '''))
    return path


def test_check_keys_takes_a_file_path(capsys, tmp_path, monkeypatch):
    """check-keys ./file.py imports the file (no relative-import TypeError) and proves it."""
    monkeypatch.chdir(tmp_path)
    _spec_file(tmp_path)
    monkeypatch.delitem(sys.modules, "filekernels", raising=False)
    code, out, err = run(capsys, "check-keys", "./filekernels.py", "--samples", "0")
    assert code == 1, err
    assert "INCOMPLETE  filekernels.FromFile: key() reads n;" in out


def test_spec_from_a_file_path(capsys, tmp_path, monkeypatch):
    """SPEC may be path/file.py:ClassName; the class keeps its module name (the stem)."""
    path = _spec_file(tmp_path, "pathkernels.py")
    monkeypatch.delitem(sys.modules, "pathkernels", raising=False)
    code, out, _ = run(capsys, "key", f"{path}:FromFile", "n=5")
    module = sys.modules.pop("pathkernels")
    assert code == 0 and out.splitlines() == [f"derived: {derived_key(module.FromFile(n=5))}",
                                             "hand-written: legacy-5"]
    assert module.FromFile.__module__ == "pathkernels"


def test_file_named_like_a_standard_module_is_refused(capsys, tmp_path):
    """A file whose stem is a standard module's name never replaces that module."""
    import json

    _spec_file(tmp_path, "json.py")
    code, _, err = run(capsys, "check-keys", str(tmp_path / "json.py"))
    assert code == 2 and sys.modules["json"] is json
    assert "as module 'json': that is the name of another module" in assert_one_error_line(err)


def test_modules_in_the_working_folder_resolve_without_sys_path(capsys, tmp_path, monkeypatch):
    """A module found nowhere on sys.path is imported from the working folder, which is
    then taken off sys.path again."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    _spec_file(tmp_path, "cwdkernels.py")
    monkeypatch.delitem(sys.modules, "cwdkernels", raising=False)
    code, out, _ = run(capsys, "key", "cwdkernels:FromFile")
    sys.modules.pop("cwdkernels", None)
    assert code == 0 and "hand-written: legacy-4" in out
    assert str(tmp_path) not in sys.path and "" not in sys.path


# --- processes: python -m, the console script, the working folder, pipes --------------------

def _plant(folder: Path) -> None:
    """A difflib.py and a cuda package that shout if they are ever imported."""
    (folder / "difflib.py").write_text("raise SystemExit('HIJACKED difflib')\n")
    (folder / "cuda").mkdir()
    (folder / "cuda" / "__init__.py").write_text("raise SystemExit('HIJACKED cuda')\n")


def _commands() -> list[list[str]]:
    return [[sys.executable, "-m", "specdsl"], [script()]]


@pytest.mark.parametrize("how", ["python -m", "console script"])
def test_working_folder_never_shadows_imports(tmp_path, how):
    """A planted difflib.py and cuda/__init__.py in the working folder never run, under
    python -m specdsl and the console script; a user module there still resolves."""
    _plant(tmp_path)
    _spec_file(tmp_path, "mykernels.py")
    prefix = _commands()[0 if how == "python -m" else 1]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    for argv, status in ((["verify", "vectoradd"], 0),
                         (["diff", "vectoradd", "--", "dtype=f16"], 1),
                         (["verify", "mykernels:FromFile"], 0)):
        done = subprocess.run(prefix + argv, cwd=tmp_path, capture_output=True, text=True,
                              env=env)
        assert "HIJACKED" not in done.stdout + done.stderr, (argv, done.stderr)
        assert done.returncode == status, (argv, done.stderr)


@pytest.mark.parametrize("argv, status", [
    (["diff", "vectoradd", "--", "dtype=f16"], 1),
    (["render", "rmsnorm", "hidden=4096"], 0),
])
def test_closed_pipe_keeps_the_exit_status(argv, status):
    """A reader that goes away (| head) ends the output, not the run: the status stays the
    command's own and nothing is printed about the pipe."""
    process = subprocess.Popen([script(), *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()  # before the first write: every write meets a closed pipe
    _, err = process.communicate(timeout=120)
    assert process.returncode == status and err == b""


def test_python_dash_m():
    """python -m specdsl runs the same command line."""
    done = subprocess.run([sys.executable, "-m", "specdsl", "key", "vectoradd"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("derived: vector_add-")


@pytest.mark.parametrize("argv, status", [
    (["render", "nosuch"], 2), (["nosuch"], 2), (["verify", "vectoradd", "--max-registers",
                                                  "8"], 1), (["list"], 0)])
def test_subprocess_exit_statuses(argv, status):
    """As a process, the console script exits with the documented status, no traceback."""
    done = subprocess.run([script(), *argv], capture_output=True, text=True)
    assert done.returncode == status and "Traceback" not in done.stderr
    if status == 2:
        assert_one_error_line(done.stderr)


def test_run_as_main_reads_the_interpreter_command_line():
    """Only python [options] -m specdsl[...] counts as running specdsl as main."""
    from specdsl._cli.working_folder import run_as_main

    assert run_as_main(["python", "-m", "specdsl", "verify"])
    assert run_as_main(["python", "-X", "dev", "-W", "error", "-mspecdsl.cli"])
    assert not run_as_main(["python", "-m", "pytest", "-m", "specdsl"])
    assert not run_as_main(["python", "app.py", "-m", "specdsl"])
    assert not run_as_main(["python", "-c", "import specdsl"])


# --- the fuzz test ---------------------------------------------------------------------------

VERBS = ["list", "render", "key", "diff", "verify", "check-keys", "nosuch"] + (
    ["run"] if gpu_available() is not None else [])
SPECS = ["vectoradd", "rmsnorm", "softmax", "rope", "silumul", "fp8quant", "nosuch",
         "handkeyed:Legacy", "userspecs:Toy", "handkeyed", "no.such:X", "./missing.py:X"]
FIELDS = ["hidden=4096", "hidden=2048", "hidden=-1", "hidden=abc", "dtype=f16", "dtype=i32",
          "eps=1e-6", "eps=nan", "block=64", "block=7", "n=12", "scale=0.5", "nosuch=1", "=3",
          "fused_residual=maybe", "mode=exact", "dims=1,2,3", "limit=none"]
OPTIONS = ["--target", "sm_90", "sm_90a", "sm_80", "sm90", "--json", "--variants", "--grid",
           "--no-spills", "--max-registers", "0", "64", "--samples", "--explain", "-v",
           "--strict", "--out", "renders", "--bogus", "--", "--target-b", "-h", "--tokens"]


@pytest.fixture(scope="module")
def fuzz_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(verb=st.sampled_from(VERBS),
       words=st.lists(st.one_of(st.sampled_from(SPECS), st.sampled_from(FIELDS),
                                st.sampled_from(OPTIONS)), max_size=7))
def test_fuzz_never_a_traceback(fuzz_folder, verb, words):
    """Any mix of verbs, specs, field words and options: exit 0, 1 or 2, never a
    traceback; 2 always with one `specdsl VERB: error:` line, 0 and 1 never with one."""
    if verb == "verify":  # bound the compile time: no run over every built-in's variants
        assume(any(w in SPECS for w in words) or "--variants" not in words)
    if verb == "check-keys":
        words = words + ["--samples", "2"]
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(fuzz_folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([verb, *words])
    finally:
        os.chdir(cwd)
    text = err.getvalue()
    assert "Traceback" not in out.getvalue() + text
    assert code in (0, 1, 2), (verb, words, code, text)
    if code == 2:
        assert_one_error_line(text)
    else:
        assert ": error: " not in text, (verb, words, text)
    if code == 1:
        assert verb in ("diff", "verify", "check-keys", "run"), (verb, words)


# --- the documented examples exit as their pages imply ---------------------------------------

def implied_status(argv: list[str], shown: str) -> set[int]:
    """The exit statuses a page's example implies, by docs/cli.md's table: an error line
    means 2; a diff, FAIL, INCOMPLETE or an incomplete --json record means 1; any other
    output 0; a command shown without output, 0 (for diff, either answer)."""
    lines = shown.splitlines()
    if any(ERROR_LINE.match(line) for line in lines):
        return {2}
    if argv[:1] == ["diff"]:  # a unified diff, or one line saying there is none
        return {0, 1} if not shown else {0} if shown.startswith("identical") else {1}
    if not shown:
        return {0}
    found = ("FAIL ", "INCOMPLETE ", "ERROR ", '    "status": "incomplete"',
             '    "status": "error"')
    return {1} if any(line.startswith(found) for line in lines) else {0}


PAGES = [Path(__file__).resolve().parents[1] / "README.md"] + sorted(
    (Path(__file__).resolve().parents[1] / "docs").rglob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_documented_commands_exit_as_shown(page, tmp_path, monkeypatch):
    """Each specdsl command on a page exits with the status its shown output implies."""
    import test_docs

    shown: list[tuple[list[str], str]] = []
    ran: list[tuple[list[str], int]] = []
    commands, run_cli = test_docs.commands, test_docs._run_cli

    def listed(block):
        found = commands(block)
        shown.extend((test_docs._specdsl_argv(command) or [], out) for _, command, out in found)
        return found

    def recorded(argv):
        code, output = run_cli(argv)
        ran.append((argv, code))
        return code, output

    monkeypatch.setattr(test_docs, "commands", listed)
    monkeypatch.setattr(test_docs, "_run_cli", recorded)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    try:
        text = page.read_text()
        if page.name == "README.md":
            for block in test_docs.blocks(text):
                if block.language == "console" and "gpu" not in block.flags:
                    test_docs._check_console(test_docs.DOCS / ".." / page.name, block, [])
        else:
            test_docs.run_page(page, tmp_path)
    finally:
        for name in set(sys.modules) - before:
            if str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(tmp_path)):
                del sys.modules[name]
    wrong = []
    for argv, code in ran:
        at = next(i for i, (words, _) in enumerate(shown) if words == argv)
        _, output = shown.pop(at)
        if code not in implied_status(argv, output):
            wrong.append(f"specdsl {' '.join(argv)}: exit {code}, the page implies "
                         f"{sorted(implied_status(argv, output))}")
    assert not wrong, "\n".join(wrong)


def test_the_note_counts_the_requests_the_kept_variants_are(capsys):
    """Variants the pins make equal but for a launch field or a default (SiluMulQuant's 14336
    variants with split=8 pinned) compile once: the note says how many requests remain."""
    code, out, err = run(capsys, "verify", "silumulquant", "split=8", "--variants")
    assert code == 0 and "verify: 25 request(s) for sm_90" in out
    assert err.endswith("; the other 28 are 25 distinct requests (one a derived key)\n")
