"""specdsl list, key and check-keys: fields, key --explain, --json schemas and --strict."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specdsl import derived_key
from specdsl._cli.main import main
from specdsl._render.keys import DIGEST_HEX, KEY_SCHEMA
from specdsl.kernels import RMSNorm, VectorAdd

TEMPLATES = Path(__file__).parent / "user_templates"
_modules = itertools.count()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _unread_module(folder: Path) -> str:
    """A module whose spec bakes a field its template never reads (an UnreadFieldWarning)."""
    name = f"unread_{next(_modules)}"
    (folder / f"{name}.py").write_text(textwrap.dedent(f'''
        from specdsl import baked, kernel_spec

        @kernel_spec(template="legacy.ptx.j2", entry="legacy", template_dir={str(TEMPLATES)!r})
        class Unread:
            n: int = baked(4)
            scale: float = baked(1.0)
            unused: int = baked(3)
    '''))
    return name


# --- list ------------------------------------------------------------------------------------

def test_list_spec_shows_every_field(capsys):
    """list SPEC gives each field's role, type, default (or that it is computed) and doc."""
    code, out, _ = run(capsys, "list", "rmsnorm")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "rmsnorm    rmsnorm_tuned.ptx.j2   entry rmsnorm"
    assert lines[1:] == [
        "    baked  hidden: int (required)  row length in elements",
        "    baked  eps: float = 1e-06  added to mean(x^2); > 0",
        "    baked  dtype: DType = DType.BF16  element type: f32, f16 or bf16",
        "    baked  fused_residual: bool = False  residual = x + residual first; "
        "y = rmsnorm(residual)",
        "    baked  block: int = (computed from the other fields)  threads per CTA (one CTA "
        "per row)",
        "    baked  rows_per_cta: int = (computed from the other fields)  rows a CTA "
        "normalizes together (one barrier for all)",
        "    baked  streaming_stores: bool = False  store y (and s) with st.global.cs",
        "    baked  l2_evict_last: bool = False  x (and residual) under an L2 evict_last "
        "policy, never demoted",
        "    baked  min_ctas_per_sm: int | None = (computed from the other fields)  CTAs an SM "
        "must hold (.minnctapersm); None: 1024 / block",
    ]


def test_list_columns_align_for_long_names(capsys, tmp_path, monkeypatch):
    """Every line's template and entry columns start where the others' do, whatever the
    length of the names (rmsnormquant, a file's path:Class)."""
    (tmp_path / "longnames.py").write_text(textwrap.dedent("""
        from specdsl import DType, baked, kernel_spec

        @kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
        class AVeryLongSpecClassName:
            dtype: DType = baked(DType.F32)
    """))
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "list", "longnames.py:AVeryLongSpecClassName", "rmsnormquant",
                       "vectoradd")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3 + 1 + 8 + 2  # three specs and their fields
    heads = [line for line in lines if not line.startswith(" ")]
    assert len({line.index(" vector_add.ptx.j2") if "vector_add" in line else
                line.index(" rmsnorm_quant.ptx.j2") for line in heads}) == 1
    assert len({line.index(" entry ") for line in heads}) == 1


def test_list_shows_enum_defaults_by_name(capsys, tmp_path, monkeypatch):
    """A user enum's default shows as Mode.FMA, like DType.F32, not as its repr."""
    (tmp_path / "enummodes.py").write_text(textwrap.dedent("""
        import enum
        from specdsl import DType, baked, kernel_spec, launch

        class Mode(enum.Enum):
            FMA = "fma"

        @kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
        class Moded:
            dtype: DType = baked(DType.F32)
            mode: Mode = launch(Mode.FMA)
    """))
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "list", "enummodes.py:Moded")
    assert code == 0 and out.splitlines()[1:] == ["    baked  dtype: DType = DType.F32",
                                                  "    launch mode: Mode = Mode.FMA"]


def test_list_json_schema(capsys):
    """list --json: one object a spec with class, template, entry and each field."""
    code, out, _ = run(capsys, "list", "rmsnorm", "handkeyed:Legacy", "--json")
    rmsnorm, legacy = json.loads(out)
    assert code == 0 and set(rmsnorm) == {"spec", "class", "template", "entry",
                                          "has_key_method", "fields"}
    assert (rmsnorm["spec"], rmsnorm["class"], rmsnorm["entry"]) == (
        "rmsnorm", "specdsl.kernels.rmsnorm.RMSNorm", "rmsnorm")
    hidden, eps, dtype, _, block = rmsnorm["fields"][:5]
    assert hidden == {"name": "hidden", "role": "baked", "type": "int", "default_kind":
                      "required", "default": None, "computed_from_fields": False,
                      "doc": "row length in elements"}
    assert (eps["default_kind"], eps["default"]) == ("value", 1e-6)
    assert dtype["default"] == "bf16" and dtype["type"] == "DType"
    assert (block["default_kind"], block["computed_from_fields"]) == ("computed", True)
    assert legacy["has_key_method"] and not rmsnorm["has_key_method"]
    assert legacy["spec"] == "handkeyed:Legacy"


def test_list_json_without_specs_covers_every_builtin(capsys):
    """list --json alone describes every built-in spec."""
    from specdsl._review.requests import builtin_specs

    code, out, _ = run(capsys, "list", "--json")
    assert code == 0 and [d["spec"] for d in json.loads(out)] == sorted(builtin_specs())


# --- key -------------------------------------------------------------------------------------

def _reference_key(inputs: list[tuple[str, str]], entry: str) -> str:
    """The derived key from its inputs, as docs/keys.md describes it (an independent
    rewrite of the labelled, length-prefixed SHA-256)."""
    h = hashlib.sha256()
    for label, value in inputs:
        data = value.encode()
        h.update(f"{label}:{len(data)}:".encode() + data)
    return f"{entry}-{h.hexdigest()[:DIGEST_HEX]}"


def test_key_explain_lists_the_inputs_that_hash_to_the_key(capsys):
    """key --explain prints each input; hashing the printed inputs gives the key."""
    code, out, _ = run(capsys, "key", "rmsnorm", "hidden=4096", "--explain", "--target", "sm_90a")
    lines = out.splitlines()
    key = derived_key(RMSNorm(hidden=4096), "sm_90a")
    assert code == 0 and lines[0] == f"derived: {key}"
    inputs = [tuple(line.split(None, 1)) for line in lines[2:]
              if line.startswith("    ") and not line.startswith("      ")]
    labels = [label for label, _ in inputs]
    assert labels == ["schema", "jinja2", "class", "entry", "template", "templates", "target",
                      "ptx_isa", "baked.hidden", "baked.eps", "baked.dtype",
                      "baked.fused_residual", "baked.block", "baked.rows_per_cta",
                      "baked.streaming_stores", "baked.l2_evict_last", "baked.min_ctas_per_sm"]
    assert dict(inputs)["schema"] == KEY_SCHEMA and dict(inputs)["target"] == "sm_90a"
    assert dict(inputs)["baked.eps"] == "('float', '3eb0c6f7a0b5ed8d')"
    assert _reference_key(inputs, "rmsnorm") == key


def test_key_explain_names_each_template_digest(capsys):
    """Under 'templates', --explain lists every template reached with its SHA-256."""
    from specdsl._spec.decorator import spec_info

    code, out, _ = run(capsys, "key", "vectoradd", "--explain")
    for name, digest in spec_info(VectorAdd).facts.sources:
        assert any(line.split() == [name, digest] for line in out.splitlines()), name
    assert code == 0 and "vector_add.ptx.j2" in out and "header.ptx.j2" in out


def test_key_json_schema(capsys):
    """key --json: one object with the request, both keys, the inputs and the templates."""
    code, out, _ = run(capsys, "key", "handkeyed:Legacy", "n=12", "--json")
    data = json.loads(out)
    from handkeyed import Legacy

    assert code == 0 and set(data) == {"spec", "request", "fields", "target", "derived_key",
                                       "hand_written_key", "inputs", "templates"}
    assert data["derived_key"] == derived_key(Legacy(n=12))
    assert data["hand_written_key"] == "legacy-12" and data["fields"]["n"] == 12
    assert data["request"] == "handkeyed:Legacy n=12 scale=1.0 block=128"
    inputs = [(item["label"], item["value"]) for item in data["inputs"]]
    assert _reference_key(inputs, "legacy") == data["derived_key"]
    assert {t["name"] for t in data["templates"]} >= {"legacy.ptx.j2", "header.ptx.j2"}


# --- check-keys --json ---------------------------------------------------------------------

def test_check_keys_json_schema(capsys):
    """check-keys --json: one object a class with status, fields and counterexamples."""
    code, out, _ = run(capsys, "check-keys", "handkeyed", "--samples", "40", "--json")
    reports = {d["class"]: d for d in json.loads(out)}
    legacy = reports["handkeyed.Legacy"]
    assert code == 1 and set(legacy) == {
        "class", "spec", "status", "has_key_method", "template", "template_fields",
        "key_fields", "key_fields_any", "missing", "over_specified", "counterexamples",
        "samples", "note", "error"}
    assert legacy["status"] == "incomplete" and legacy["missing"] == ["scale"]
    assert legacy["key_fields"] == ["n"] and legacy["template_fields"] == ["n", "scale"]
    (example,) = legacy["counterexamples"]
    assert set(example) == {"key", "field", "target", "first", "second", "diff_command"}
    assert example["field"] == "scale" and example["diff_command"].startswith(
        "specdsl diff handkeyed:Legacy ")
    assert set(legacy["samples"]) == {"pairs", "shared", "skipped", "render_failure"}
    assert reports["handkeyed.HandKeyedAdd"]["status"] == "incomplete"


def test_check_keys_json_counterexample_command_runs(capsys):
    """The diff_command of a counterexample shows the PTX difference (exit 1)."""
    code, out, _ = run(capsys, "check-keys", "handkeyed:Legacy", "--samples", "40", "--json")
    command = shlex.split(json.loads(out)[0]["counterexamples"][0]["diff_command"])
    assert code == 1 and command[:2] == ["specdsl", "diff"]
    assert main(command[1:]) == 1


def test_check_keys_counterexample_is_the_default_request_and_one_change(capsys):
    """The pair printed is the default request (the launch field block at its 128, scale at
    its 1.0) and the same with scale at its nearest candidate, 10.0: only the field that
    matters differs, at values its author would try (the draws were 0.0 and -1.0)."""
    code, out, _ = run(capsys, "check-keys", "handkeyed:Legacy", "--samples", "40")
    assert code == 1 and out.splitlines()[2:8] == [
        "    counterexample: key 'legacy-64' for both, different PTX for sm_90 (they differ "
        "in scale):",
        "        handkeyed:Legacy n=64 scale=1.0 block=128",
        "        handkeyed:Legacy n=64 scale=10.0 block=128",
        "        specdsl diff handkeyed:Legacy n=64 scale=1.0 block=128 -- n=64 scale=10.0 "
        "block=128",
        "        Python: Legacy(n=64, scale=1.0, block=128)",
        "                Legacy(n=64, scale=10.0, block=128)",
    ]


def test_check_keys_summary_says_a_field_with_a_counterexample_is_not_sampled_again(capsys):
    """HandKeyedAdd's one field has its counterexample within 4 pairs, of 60 asked for: the
    summary says why sampling stopped, which would otherwise read as a run cut short."""
    code, out, _ = run(capsys, "check-keys", "handkeyed:HandKeyedAdd", "--samples", "60")
    summary = [line for line in out.splitlines() if line.startswith("    sampled: ")]
    assert code == 1 and summary == [
        "    sampled: 4 pairs differing in one baked field, 4 shared a key, 1 rendered "
        "different PTX, 3 not renderable (a field is not sampled again once it has a "
        "counterexample)"]


def test_check_keys_json_for_a_derived_key_class(capsys):
    """A class without key() has status 'derived' and exit 0."""
    code, out, _ = run(capsys, "check-keys", "specdsl.kernels", "--json", "--samples", "0")
    assert code == 0 and {d["status"] for d in json.loads(out)} == {"derived"}


RAISING = """
from specdsl import DType, baked, kernel_spec

@kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
class Broken:
    dtype: DType = baked(DType.F32)

    def key(self):
        raise RuntimeError("no key today")

@kernel_spec(template="vector_add.ptx.j2", entry="vector_add")
class Unkeyed:
    dtype: DType = baked(DType.F32)

    def key(self):
        return "vector_add"
"""


@pytest.fixture
def raising(tmp_path, monkeypatch):
    """A module of two keyed classes: Broken's key() raises, Unkeyed's is incomplete."""
    name = f"raising_{next(_modules)}"
    (tmp_path / f"{name}.py").write_text(RAISING)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_check_keys_reports_a_raising_key_and_goes_on(capsys, raising):
    """A key() that raises is an ERROR line for its class, counted; the next class is still
    checked; exit 1 (a problem found), not 2."""
    code, out, err = run(capsys, "check-keys", raising, "--samples", "0")
    lines = out.splitlines()
    assert code == 1 and err == ""
    assert lines[0] == (f"ERROR       {raising}.Broken: Broken.key() raised RuntimeError: no "
                        f"key today (called on Broken(dtype=DType.F32))")
    assert any(line.startswith(f"INCOMPLETE  {raising}.Unkeyed: ") for line in lines)
    assert lines[-1] == (f"checked 2 spec classes in {raising}: 2 with a hand-written key(), "
                         f"1 incomplete, 0 over-specified, 1 failed")


def test_check_keys_json_reports_a_raising_key(capsys, raising):
    """--json: the raising class is an object with status 'error' and the error."""
    code, out, _ = run(capsys, "check-keys", raising, "--samples", "0", "--json")
    broken, unkeyed = json.loads(out)
    assert code == 1 and broken == {
        "class": f"{raising}.Broken", "spec": f"{raising}:Broken", "status": "error",
        "has_key_method": True, "template": "vector_add.ptx.j2",
        "error": "Broken.key() raised RuntimeError: no key today (called on "
                 "Broken(dtype=DType.F32))"}
    assert unkeyed["status"] == "incomplete" and unkeyed["error"] is None


# --- --strict and -W ----------------------------------------------------------------------

def test_strict_makes_an_unread_field_an_error(capsys, tmp_path, monkeypatch):
    """--strict: an UnreadFieldWarning stops the command with one line, exit 2."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _unread_module(tmp_path)
    code, out, err = run(capsys, "key", f"{name}:Unread", "--strict")
    (line,) = err.splitlines()
    assert code == 2 and out == ""
    assert line.startswith(f"specdsl key: error: cannot import module {name!r}: "
                           "UnreadFieldWarning: Unread: template 'legacy.ptx.j2' never reads "
                           "baked field(s) unused")
    assert line.endswith(f"{name}.py:4)")


def test_without_strict_an_unread_field_is_a_warning(capsys, tmp_path, monkeypatch):
    """Without --strict the same spec works (exit 0), the warning shown once."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _unread_module(tmp_path)
    with pytest.warns(Warning, match="never reads baked field"):
        code, out, _ = run(capsys, "key", f"{name}:Unread")
    assert code == 0 and out.startswith("derived: legacy-")


@pytest.mark.parametrize("how", ["-W", "PYTHONWARNINGS"])
def test_warning_option_for_specdsl_categories_works(tmp_path, how):
    """-W error::specdsl.errors.UnreadFieldWarning (or PYTHONWARNINGS) fails the command,
    though Python itself drops the option at start-up."""
    name = _unread_module(tmp_path)
    option = "error::specdsl.errors.UnreadFieldWarning"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    argv = [sys.executable, "-m", "specdsl", "key", f"{name}:Unread"]
    if how == "-W":
        argv[1:1] = ["-W", option]
    else:
        env["PYTHONWARNINGS"] = option
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert f"specdsl key: error: cannot import module {name!r}: UnreadFieldWarning: " in (
        done.stderr)
    assert "Traceback" not in done.stderr


def test_check_keys_names_a_builtin_where_a_module_goes(capsys):
    """check-keys rmsnorm (a built-in spec's name) points to its module and class."""
    code, out, err = run(capsys, "check-keys", "rmsnorm")
    assert (code, out) == (2, "")
    assert err.rstrip().endswith("; 'rmsnorm' is a built-in spec: its module is specdsl.kernels "
                                 "(specdsl.kernels:RMSNorm)")


def test_check_keys_suggests_the_file_with_py(capsys, tmp_path):
    """A file named without its .py is suggested with it."""
    _unread_module(tmp_path)
    stem = next(tmp_path.glob("unread_*.py")).with_suffix("")
    code, _, err = run(capsys, "check-keys", str(stem))
    assert code == 2 and err.rstrip().endswith(
        f"cannot import {str(stem)!r}: no such file; did you mean '{stem}.py'?")


def test_check_keys_lists_the_classes_of_a_module_without_the_one_named(capsys, tmp_path,
                                                                          monkeypatch):
    """MODULE:Nope, with nothing close to Nope, lists the module's spec classes."""
    name = _unread_module(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = run(capsys, "check-keys", f"{name}:Nope")
    assert code == 2 and err.rstrip().endswith(f"module {name!r} has no 'Nope' (its spec "
                                               f"classes: Unread)")
