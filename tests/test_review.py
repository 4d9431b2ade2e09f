"""The review workflow: specdsl diff, verify and render --out, on built-in and user specs."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import attrs
import pytest

from specdsl import derived_key, render
from specdsl._cli.main import main
from specdsl._runtime.compile import compile_ptx
from specdsl._spec.target import Target
from specdsl.kernels import VectorAdd

USER_MODULE = '''
"""User kernels for the review tests, with their own template folder."""
from specdsl import baked, kernel_spec, launch


@kernel_spec(template="scale.ptx.j2", entry="scale", template_dir="user_templates")
class Scale:
    """out[i] = x[i] * factor + bias for i < n (f32)."""
    factor: float = baked(2.0)
    bias: float = baked(0.0)
    block: int = launch(128)

    variants = {"factor": [2.0, 0.5], "bias": [0.0, 1.0]}


@kernel_spec(template="spill.ptx.j2", entry="spill", template_dir="user_templates")
class Spill:
    """Keeps `live` loaded values alive at once under .maxnreg 24: spills when live is large."""
    live: int = baked(8)

    @classmethod
    def variants(cls):
        return [cls(live=8), cls(live=64)]
'''

SCALE_TEMPLATE = '''{% include "header.ptx.j2" %}

.visible .entry {{ entry }}(
    .param .u64 .ptr .global .align 4 x,
    .param .u64 .ptr .global .align 4 out,
    .param .u32 n
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<6>;
    .reg .f32   %f<4>;
    .reg .b64   %rd<6>;

    ld.param.u64        %rd1, [x];
    ld.param.u64        %rd2, [out];
    ld.param.u32        %r1, [n];
    mov.u32             %r2, %ctaid.x;
    mov.u32             %r3, %ntid.x;
    mov.u32             %r4, %tid.x;
    mad.lo.u32          %r5, %r2, %r3, %r4;
    setp.ge.u32         %p1, %r5, %r1;
    @%p1 bra            DONE;
    mul.wide.u32        %rd3, %r5, 4;
    add.u64             %rd4, %rd1, %rd3;
    add.u64             %rd5, %rd2, %rd3;
    ld.global.f32       %f1, [%rd4];
    fma.rn.f32          %f2, %f1, {{ factor|f32 }}, {{ bias|f32 }};
    st.global.f32       [%rd5], %f2;
DONE:
    ret;
}
'''

SPILL_TEMPLATE = '''{% include "header.ptx.j2" %}
{{ require(live <= 128, "Spill.live must be at most 128") }}

.visible .entry {{ entry }}(
    .param .u64 .ptr .global .align 4 src,
    .param .u64 .ptr .global .align 4 dst
)
.maxnreg 24
{
    .reg .b32   %v<{{ live }}>;
    .reg .b32   %s;
    .reg .b64   %rd<3>;

    ld.param.u64        %rd1, [src];
    ld.param.u64        %rd2, [dst];
{% for i in range(live) %}
    ld.volatile.global.u32 %v{{ i }}, [%rd1+{{ i * 4 }}];
{% endfor %}
    mov.b32             %s, %v{{ live - 1 }};
{% for i in range(live - 1)|reverse %}
    mul.lo.u32          %s, %s, %v{{ i }};
    xor.b32             %s, %s, %v{{ (i * 7) % live }};
{% endfor %}
    st.global.u32       [%rd2], %s;
    ret;
}
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A fresh module `userkernels` (Scale, Spill) with its own template_dir."""
    (tmp_path / "user_templates").mkdir()
    (tmp_path / "user_templates" / "scale.ptx.j2").write_text(SCALE_TEMPLATE)
    (tmp_path / "user_templates" / "spill.ptx.j2").write_text(SPILL_TEMPLATE)
    (tmp_path / "userkernels.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "userkernels", raising=False)
    import userkernels

    yield userkernels
    sys.modules.pop("userkernels", None)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- diff ----------------------------------------------------------------------------------

def test_diff_two_dtypes_is_a_unified_diff_headed_by_keys(capsys):
    """diff of f32 and f16 VectorAdd exits 1 with a unified diff headed by both derived keys."""
    code, out, _ = run(capsys, "diff", "vectoradd", "dtype=f32", "--", "dtype=f16")
    key_a, key_b = derived_key(VectorAdd()), derived_key(VectorAdd(dtype="f16"))
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"--- {key_a} (vectoradd dtype=f32 block=256, sm_90)"
    assert lines[1] == f"+++ {key_b} (vectoradd dtype=f16 block=256, sm_90)"
    words = [" ".join(line.split()) for line in lines]
    assert "- add.rn.f32 %r4, %r4, %r8;" in words and "+ add.rn.f16x2 %r4, %r4, %r8;" in words


def test_diff_launch_only_change_is_identical(capsys):
    """Requests that differ only in a launch field render the same PTX: one line, exit 0."""
    code, out, _ = run(capsys, "diff", "vectoradd", "--", "block=128")
    assert code == 0
    assert out == (f"identical: vectoradd dtype=f32 block=256 and vectoradd dtype=f32 block=128 "
                   f"render the same PTX for sm_90 (derived key {derived_key(VectorAdd())})\n")


def test_diff_across_targets(capsys):
    """--target-b compares one request across two targets; options may follow SPEC."""
    code, out, _ = run(capsys, "diff", "vectoradd", "dtype=bf16", "--target-b", "sm_90a")
    assert code == 1
    lines = out.splitlines()
    assert lines[1].startswith(f"+++ {derived_key(VectorAdd(dtype='bf16'), 'sm_90a')} ")
    assert "-.target sm_90" in lines and "+.target sm_90a" in lines


def test_diff_inline_option_value(capsys):
    """--target-b=sm_90a after SPEC is read like --target-b sm_90a."""
    code, out, _ = run(capsys, "diff", "vectoradd", "--target-b=sm_90a")
    assert code == 1 and "+.target sm_90a" in out.splitlines()


def test_diff_b_starts_from_a(capsys, user):
    """Request B keeps A's fields and applies only the assignments after '--'."""
    code, out, _ = run(capsys, "diff", "userkernels:Scale", "factor=3.0", "bias=1.0",
                       "--", "bias=0.25")
    assert code == 1
    b = user.Scale(factor=3.0, bias=0.25)
    assert out.splitlines()[1] == (f"+++ {derived_key(b)} "
                                   "(userkernels:Scale factor=3.0 bias=0.25 block=128, sm_90)")
    changed = [line for line in out.splitlines()[2:] if line[:1] in "+-"]
    assert changed == ["-    fma.rn.f32          %f2, %f1, 0f40400000, 0f3F800000;",
                       "+    fma.rn.f32          %f2, %f1, 0f40400000, 0f3E800000;"]


def test_diff_without_request_b_is_an_error(capsys):
    """diff with neither '--' nor --target-b exits 2 and says what is missing."""
    code, out, err = run(capsys, "diff", "vectoradd", "dtype=f16")
    assert code == 2 and out == ""
    assert "diff needs request B: give its fields after '--'" in err


def test_diff_rejects_a_second_spec(capsys):
    """A word without '=' after SPEC is refused, naming it."""
    code, _, err = run(capsys, "diff", "vectoradd", "rmsnorm", "--", "dtype=f16")
    assert code == 2 and "expected field=value (got 'rmsnorm')" in err


# --- verify --------------------------------------------------------------------------------

def _rows(out: str) -> dict[str, list[str]]:
    """Table rows of verify's output by request text (the words before the entry name)."""
    rows = {}
    for line in out.splitlines()[2:]:
        if line.startswith(("FAIL", " ")) or "passed," in line:
            continue
        cells = line.split()
        split = next(i for i, c in enumerate(cells) if "=" not in c and i > 0)
        rows[" ".join(cells[:split])] = cells[split:]
    return rows


def test_verify_default_request_table(capsys):
    """verify vectoradd prints one row with ptxas's numbers for the default request."""
    code, out, err = run(capsys, "verify", "vectoradd")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("verify: 1 request(s) for sm_90")
    assert lines[1].split() == ["request", "entry", "regs", "spill-st", "spill-ld", "stack",
                                "smem", "cmem", "compile"]
    entry, regs, stores, loads, stack, smem, cmem, _, unit = _rows(out)["vectoradd dtype=f32"]
    assert entry == "vector_add" and unit == "ms"
    assert 8 <= int(regs) <= 64 and (stores, loads, stack, smem) == ("0", "0", "0", "0")
    assert int(cmem) >= 4 * 8 + 8  # three pointers and n are kernel parameters in bank 0
    assert lines[-1] == "1 passed, 0 failed"


def test_verify_several_requests_by_words(capsys, user):
    """SPEC field=value groups name several requests, each its own row."""
    code, out, _ = run(capsys, "verify", "vectoradd", "dtype=f16", "userkernels:Scale",
                       "factor=3.0")
    rows = _rows(out)
    assert code == 0
    assert list(rows) == ["vectoradd dtype=f16", "userkernels:Scale factor=3.0 bias=0.0"]
    assert rows["userkernels:Scale factor=3.0 bias=0.0"][0] == "scale"


def test_verify_no_spills_catches_a_spilling_kernel(capsys, user):
    """--no-spills fails (exit 1) on a kernel that spills, naming the request and the bytes."""
    code, out, _ = run(capsys, "verify", "userkernels:Spill", "live=64", "--no-spills")
    stores, loads, stack = _rows(out)["userkernels:Spill live=64"][2:5]
    assert code == 1 and int(stack) > 0 and out.splitlines()[-1] == "0 passed, 1 failed"
    assert int(stores) > 0 and int(loads) > 0
    assert (f"FAIL userkernels:Spill live=64: spill spills {stores} bytes (stores) and "
            f"{loads} bytes (loads) per thread (--no-spills)") in out.splitlines()


def test_verify_without_spill_figures_counts_the_stack_frame(capsys, user, monkeypatch):
    """A log with only nvJitLink's own summary (no ptxas lines) shows '?' for the spill
    columns and fails --no-spills on the stack frame, saying so."""
    from specdsl._base.wording import with_article
    from specdsl._runtime import compile as compile_module

    real = compile_module.compile_ptx

    def summary_only(*args, **kwargs):
        compiled = real(*args, **kwargs)
        log = "\n".join(line for line in compiled.log.splitlines()
                        if not line.startswith("ptxas"))
        return attrs.evolve(compiled, log=log)

    monkeypatch.setattr("specdsl._review.verify.compile_ptx", summary_only)
    code, out, _ = run(capsys, "verify", "userkernels:Spill", "live=64", "--no-spills")
    stores, loads, stack = _rows(out)["userkernels:Spill live=64"][2:5]
    assert code == 1 and (stores, loads) == ("?", "?") and int(stack) > 200
    assert (f"FAIL userkernels:Spill live=64: spill has {with_article(stack + '-byte')} "
            "stack frame per "
            f"thread, counted as spills: nvJitLink's log gave no spill figures "
            f"(--no-spills)") in out.splitlines()


def test_verify_no_spills_passes_a_small_kernel(capsys, user):
    """The same kernel with few live values does not spill and passes --no-spills."""
    code, out, _ = run(capsys, "verify", "userkernels:Spill", "live=8", "--no-spills")
    assert code == 0 and _rows(out)["userkernels:Spill live=8"][2:4] == ["0", "0"]


def test_verify_variants_names_only_the_failing_request(capsys, user):
    """verify --variants walks the spec's variants; only the spilling one fails; quiet stderr."""
    code, out, err = run(capsys, "verify", "userkernels:Spill", "--variants", "--no-spills")
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert code == 1 and err == ""
    assert list(_rows(out)) == ["userkernels:Spill live=8", "userkernels:Spill live=64"]
    assert len(fails) == 1 and fails[0].startswith("FAIL userkernels:Spill live=64: spill spills")


def test_verify_progress_on_a_terminal(capsys, monkeypatch, user):
    """With stderr on a terminal, each request of a long run is counted as [i/n] on stderr."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, _, err = run(capsys, "verify", "userkernels:Spill", "--variants")
    assert code == 0
    assert err.splitlines() == ["[1/2] userkernels:Spill live=8", "[2/2] userkernels:Spill live=64"]


def test_verify_max_registers(capsys, user):
    """--max-registers N fails an entry above N, naming the request and the count."""
    code, out, _ = run(capsys, "verify", "userkernels:Scale", "--max-registers", "4")
    regs = _rows(out)["userkernels:Scale factor=2.0 bias=0.0"][1]
    assert code == 1 and int(regs) > 4
    assert (f"FAIL userkernels:Scale factor=2.0 bias=0.0: scale uses {regs} registers, "
            "more than --max-registers 4") in out


def test_verify_max_registers_must_be_positive(capsys):
    """--max-registers 0 is refused with exit 2."""
    code, _, err = run(capsys, "verify", "vectoradd", "--max-registers", "0")
    assert code == 2 and "--max-registers must be a positive int (got 0)" in err


def test_verify_reports_a_render_error_and_goes_on(capsys, user):
    """A request whose template refuses it is a FAIL row; the other requests still compile."""
    code, out, _ = run(capsys, "verify", "userkernels:Spill", "live=200", "userkernels:Spill")
    rows = _rows(out)
    assert code == 1
    assert rows["userkernels:Spill live=200"][:2] == ["-", "error"]
    assert rows["userkernels:Spill live=8"][0] == "spill"
    assert "FAIL userkernels:Spill live=200: RenderError:" in out
    assert "Spill.live must be at most 128" in out


def test_verify_json(capsys, user):
    """--json prints one object per request with fields, derived key, resources, violations."""
    code, out, _ = run(capsys, "verify", "userkernels:Spill", "--variants", "--no-spills", "--json")
    data = json.loads(out)
    assert code == 1 and [d["fields"] for d in data] == [{"live": 8}, {"live": 64}]
    small, big = data
    assert small["spec"] == "userkernels:Spill" and small["target"] == "sm_90"
    assert small["derived_key"] == derived_key(user.Spill(live=8))
    assert small["violations"] == [] and small["error"] is None
    assert small["resources"][0]["entry"] == "spill"
    assert small["resources"][0]["spill_stores"] == 0
    spilled = big["resources"][0]
    # nvJitLink builds that print no ptxas lines report the spill as a stack frame
    assert spilled["spill_stores"] > 0 or (not spilled["spills_reported"]
                                           and spilled["stack_frame"] > 0)
    assert len(big["violations"]) == 1
    assert big["compile_seconds"] > 0


def test_verify_without_specs_covers_every_builtin(capsys, monkeypatch, user):
    """verify with no SPEC compiles each built-in's representative request, in order."""
    import specdsl._cli.review

    builtins = {"vectoradd": VectorAdd, "userkernels:Spill": user.Spill}
    monkeypatch.setattr(specdsl._cli.review, "builtin_specs", lambda: builtins)
    code, out, _ = run(capsys, "verify", "--json")
    assert code == 0
    assert [d["request"] for d in json.loads(out)] == ["vectoradd dtype=f32",
                                                       "userkernels:Spill live=8"]


def _user_module(tmp_path, monkeypatch, name: str, classes: str, body: str = "") -> None:
    """Write module ``name`` (``classes`` under one ``@kernel_spec``) and its template ``e``.

    The template defines entry ``e`` with ``body`` before its ``ret``; the module is
    importable for the rest of the test.
    """
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "e.ptx.j2").write_text(
        '{% include "header.ptx.j2" %}\n.visible .entry {{ entry }}()\n{\n'
        + body + "    ret;\n}\n")
    (tmp_path / f"{name}.py").write_text(
        "from specdsl import baked, kernel_spec\n\n"
        '@kernel_spec(template="e.ptx.j2", entry="e", template_dir="t")\n'
        + textwrap.dedent(classes).lstrip("\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_verify_spec_without_default_or_variants_is_refused(capsys, tmp_path, monkeypatch):
    """A SPEC with a field that has no default and no variants: exit 2 naming the field."""
    _user_module(tmp_path, monkeypatch, "nodefault", """
        class Sized:
            hidden: int = baked()
    """)
    code, out, err = run(capsys, "verify", "nodefault:Sized")
    assert code == 2 and out == ""
    assert "Sized has no default request: field(s) hidden have no default" in err


# --- render --out --------------------------------------------------------------------------

def test_render_out_variants_writes_one_file_per_request(capsys, tmp_path):
    """render --variants --out writes each VectorAdd dtype to a readable file, printing paths."""
    code, out, _ = run(capsys, "render", "vectoradd", "--variants", "--out", str(tmp_path / "ptx"))
    expected = []
    for dtype in ("f32", "f16", "bf16"):
        digest = derived_key(VectorAdd(dtype=dtype)).split("-")[1][:12]
        expected.append(str(tmp_path / "ptx" / f"vectoradd-dtype_{dtype}-{digest}.ptx"))
    assert code == 0 and out.splitlines() == expected
    assert sorted(p.name for p in (tmp_path / "ptx").iterdir()) == sorted(
        p.rsplit("/", 1)[1] for p in expected)


def test_render_out_file_has_header_then_the_ptx(capsys, tmp_path):
    """Each file is a header comment naming request, class, target and key, then the PTX."""
    run(capsys, "render", "vectoradd", "dtype=f16", "--target", "sm_90a", "--out", str(tmp_path))
    (path,) = tmp_path.iterdir()
    spec = VectorAdd(dtype="f16")
    header = [
        "// Rendered by `specdsl render --out` for review; regenerate it, do not edit it.",
        "// request:     vectoradd dtype=f16",
        "// spec class:  specdsl.kernels.vector_add.VectorAdd "
        "(template vector_add.ptx.j2, entry vector_add)",
        "// target:      sm_90a (PTX ISA 8.0)",
        f"// derived key: {derived_key(spec, 'sm_90a')}",
    ]
    assert path.read_text() == "\n".join(header) + "\n" + render(spec, "sm_90a")


def test_render_out_is_deterministic(capsys, tmp_path, user):
    """Rendering the same requests twice writes byte-identical files."""
    texts = []
    for folder in ("one", "two"):
        run(capsys, "render", "userkernels:Scale", "--variants", "--out", str(tmp_path / folder))
        texts.append({p.name: p.read_bytes() for p in (tmp_path / folder).iterdir()})
    assert texts[0] == texts[1] and len(texts[0]) == 4


def test_render_out_user_spec_names_and_compiles(capsys, tmp_path, user):
    """A user spec's file is named by its class and fields, and still compiles with nvJitLink."""
    code, out, _ = run(capsys, "render", "userkernels:Scale", "factor=0.5", "userkernels:Spill",
                       "--out", str(tmp_path))
    paths = out.splitlines()
    digest = derived_key(user.Scale(factor=0.5)).split("-")[1][:12]
    assert code == 0 and len(paths) == 2
    assert paths[0].endswith(f"/scale-factor_0.5-bias_0.0-{digest}.ptx")
    text = Path(paths[0]).read_text()
    assert "// request:     userkernels:Scale factor=0.5 bias=0.0" in text
    assert compile_ptx(text, Target.parse("sm_90")).cubin[:4] == b"\x7fELF"


def test_render_out_variants_with_pinned_field(capsys, tmp_path, user):
    """--variants with a field word keeps the other axes of the variants and pins that field."""
    code, out, _ = run(capsys, "render", "userkernels:Scale", "bias=0.25", "--variants",
                       "--out", str(tmp_path))
    names = [p.rsplit("/", 1)[1] for p in out.splitlines()]
    assert code == 0 and [n.rsplit("-", 1)[0] for n in names] == [
        "scale-factor_2.0-bias_0.25", "scale-factor_0.5-bias_0.25"]


def test_render_variants_without_out_is_refused(capsys):
    """render --variants without --out is refused (exit 2) instead of rendering one request."""
    code, out, err = run(capsys, "render", "vectoradd", "--variants")
    assert code == 2 and out == ""
    assert err == ("specdsl render: error: render --variants writes one file per request: "
                   "give --out DIR\n")


@pytest.mark.parametrize("argv, second", [
    (["vectoradd", "rmsnorm", "hidden=4096"], "rmsnorm"),
    (["vectoradd", "dtype=f16", "RMSNorm"], "RMSNorm"),
    (["rmsnorm", "hidden=4096", "userspecs:Toy"], "userspecs:Toy"),
])
def test_render_of_several_requests_without_out_is_refused(capsys, argv, second):
    """A second SPEC without --out says that several requests need --out DIR (exit 2)."""
    code, out, err = run(capsys, "render", *argv)
    assert (code, out) == (2, "")
    assert err == ("specdsl render: error: render of several requests writes one file per "
                   f"request: give --out DIR ({second!r} starts a second request)\n")


def test_render_of_a_word_that_is_no_spec_still_asks_for_field_value(capsys):
    """A stray word that names no spec is still refused as a malformed field word."""
    code, _, err = run(capsys, "render", "vectoradd", "dtype")
    assert err == "specdsl render: error: expected field=value (got 'dtype')\n" and code == 2


def test_variants_pin_on_a_spec_with_a_required_field(capsys, tmp_path, monkeypatch):
    """--variants with a pinned field works when another field has no default but has variants."""
    _user_module(tmp_path, monkeypatch, "required", """
        class Sized:
            hidden: int = baked()
            wide: bool = baked(False)
            variants = {"hidden": [64, 128], "wide": [False, True]}
    """)
    code, out, _ = run(capsys, "verify", "required:Sized", "wide=true", "--variants", "--json")
    assert code == 0
    assert [d["fields"] for d in json.loads(out)] == [{"hidden": 64, "wide": True},
                                                      {"hidden": 128, "wide": True}]


def test_verify_prints_the_compile_log(capsys, tmp_path, monkeypatch):
    """A compile failure shows nvJitLink's error and the PTX around it, not just a headline."""
    _user_module(tmp_path, monkeypatch, "brokenkernels", """
        class Broken:
            pass
    """, body="    add.rn.bf16x9 %r1, %r1, %r1;\n")
    code, out, _ = run(capsys, "verify", "brokenkernels:Broken")
    assert code == 1 and "FAIL brokenkernels:Broken: CompileError: nvJitLink could not" in out
    assert "Unknown modifier '.bf16x9'" in out
    assert ">   " in out and "add.rn.bf16x9 %r1, %r1, %r1;" in out and "\x00" not in out


def test_verify_skips_requests_the_target_cannot_run(capsys):
    """On sm_80 the bf16 VectorAdd variant and split Softmax are SKIPs: exit 0, counted apart."""
    code, out, _ = run(capsys, "verify", "vectoradd", "softmax", "--variants", "--target", "sm_80")
    assert code == 0
    assert "SKIP vectoradd dtype=bf16: bf16 VectorAdd uses add.rn.bf16x2, which needs sm_90 " \
           "or newer" in out
    assert "SKIP softmax cols=4096 scale=1.0 dtype=bf16 split=8 block=32 rows_per_cta=1 " \
           "l2_evict_last=false keep_exponentials=false min_ctas_per_sm=none: split = 8 (a " \
           "thread block cluster a row) needs sm_90 or newer" in out
    assert out.rstrip().endswith("28 passed, 0 failed, 11 skipped (not for sm_80)")
    code, out, _ = run(capsys, "verify", "vectoradd", "dtype=bf16", "--target", "sm_80",
                       "--json")
    (record,) = json.loads(out)
    assert code == 0 and record["skipped"].endswith("needs sm_90 or newer")
    assert record["violations"] == [] and record["error"] is None


def test_render_out_skips_requests_the_target_cannot_run(capsys, tmp_path):
    """render --variants --out writes what the target can run and names what it skipped."""
    code, out, err = run(capsys, "render", "vectoradd", "--variants", "--target", "sm_80",
                         "--out", str(tmp_path))
    assert code == 0 and len(out.split()) == 2 and len(list(tmp_path.iterdir())) == 2
    assert "skipped vectoradd dtype=bf16: bf16 VectorAdd uses add.rn.bf16x2" in err


def test_rendering_one_unsupported_request_is_an_error():
    """Asked for directly, a request the target cannot run raises UnsupportedTargetError,
    a RenderError naming the request, with the template's reason apart."""
    from specdsl.errors import RenderError, UnsupportedTargetError

    with pytest.raises(UnsupportedTargetError) as caught:
        render(VectorAdd(dtype="bf16"), "sm_80")
    assert isinstance(caught.value, RenderError)
    assert str(caught.value).startswith("VectorAdd(dtype=DType.BF16, block=256) for sm_80: ")
    assert caught.value.reason == "bf16 VectorAdd uses add.rn.bf16x2, which needs sm_90 or newer"
