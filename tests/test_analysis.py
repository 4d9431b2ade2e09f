"""check-keys: the static and sampled proof of hand-written key() methods."""

from __future__ import annotations

import itertools
import sys
import textwrap
from pathlib import Path

import attrs
import pytest

from specdsl import render
from specdsl._cli.main import main
from specdsl._proof.analysis import (
    _stand_in_reads,
    analyze_class,
    candidates,
    key_reads,
    sampled_proof,
    template_fields,
)
from specdsl._review.requests import parse_request
from specdsl._spec.dtype import DType

DYNAMIC_TEMPLATE = """\
{% include "header.ptx.j2" %}
{% include part %}
.visible .entry {{ entry }}() { ret; }
"""

# The built-in RMSNorm template under a hand-written key; `tag` is baked but never read by
# the template, `rows` is a launch field. No validators: the template's require() and the
# sampler's skipping of unrenderable requests are exercised too.
HEADER = """\
from specdsl import DType, baked, kernel_spec, launch


@kernel_spec(template="rmsnorm.ptx.j2", entry="rmsnorm")
class {name}:
    hidden: int = baked(4096)
    eps: float = baked(1e-5)
    dtype: DType = baked(DType.BF16)
    fused_residual: bool = baked(False)
    block: int = baked(512)
    tag: int = baked(0)
    rows: int = launch(1)

    def key(self) -> str:
"""

_names = itertools.count()


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Writes a module holding one norm spec class with the given key() body; returns its name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(key_body: str, cls: str = "Norm", extra: str = "") -> str:
        name = f"keyspecs_{next(_names)}"
        source = HEADER.format(name=cls) + textwrap.indent(textwrap.dedent(key_body), " " * 8)
        (tmp_path / f"{name}.py").write_text(source + "\n" + textwrap.dedent(extra))
        return name
    return write


def _load(module: str, cls: str = "Norm") -> type:
    import importlib

    return getattr(importlib.import_module(module), cls)


# -- the incident ----------------------------------------------------------------------------


def test_incident_fails_check_keys_naming_eps(user_module, capsys) -> None:
    """A shape-only key fails check-keys before anything runs: exit 1, eps named."""
    module = user_module('return f"rmsnorm-{self.hidden}"')
    assert main(["check-keys", module, "--samples", "50"]) == 1
    out = capsys.readouterr().out
    assert f"INCOMPLETE  {module}.Norm: key() reads hidden;" in out
    assert ("incomplete: the template reads block, dtype, eps, fused_residual but key() does "
            "not") in out
    assert "(they differ in eps)" in out
    assert f"checked 1 spec class in {module}: 1 with a hand-written key(), 1 incomplete" in out


def test_counterexample_requests_can_be_pasted(user_module, capsys) -> None:
    """The printed CLI words parse back to two requests with one key and different PTX."""
    module = user_module('return f"rmsnorm-{self.hidden}-{self.dtype.ptx}"')
    main(["check-keys", module, "--samples", "20"])
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if "counterexample" in line)
    Norm = _load(module)
    first, second = (parse_request(Norm, lines[at + j].split()[1:]) for j in (1, 2))
    assert first.key() == second.key()
    assert render(first) != render(second)
    assert [f"Python: {first!r}", f"{second!r}"] == [lines[at + 4].strip(), lines[at + 5].strip()]


# -- the static proof ------------------------------------------------------------------------


def test_complete_key_passes(user_module, capsys) -> None:
    """A key holding every field the template reads: exit 0, no counterexample."""
    module = user_module('return f"rmsnorm-{self.hidden}-{self.eps!r}-{self.dtype.ptx}-"'
                         ' f"{self.fused_residual}-{self.block}"')
    assert main(["check-keys", module, "--samples", "60"]) == 0
    out = capsys.readouterr().out
    assert f"ok          {module}.Norm" in out
    assert "0 rendered different PTX" in out


def test_over_specified_key_is_reported_not_failed(user_module, capsys) -> None:
    """A key reading the launch field and an ignored baked field is over-specified, exit 0."""
    module = user_module('return f"n-{self.hidden}-{self.eps!r}-{self.dtype.ptx}-"'
                         ' f"{self.fused_residual}-{self.block}-{self.rows}-{self.tag}"')
    assert main(["check-keys", module, "--samples", "10"]) == 0
    out = capsys.readouterr().out
    assert f"OVER-KEYED  {module}.Norm" in out
    assert "over-specified: key() reads rows, tag, which the template never reads" in out


def test_key_reads_through_properties_and_methods(user_module) -> None:
    """Fields read by a property or method that key() calls count as read by key()."""
    module = user_module(
        'return f"{self.shape}-{self.suffix()}"',
        extra="""
        Norm.shape = property(lambda self: f"{self.hidden}x{self.dtype.ptx}")
        Norm.suffix = lambda self: repr(self.eps)
        """)
    Norm = _load(module)
    assert key_reads(Norm()) == {"hidden", "dtype", "eps"}


def test_field_read_on_some_requests_only_is_missing(user_module) -> None:
    """A key that reads eps only for f32 requests is incomplete: f16 requests omit it."""
    module = user_module(
        'return f"{self.hidden}-{self.block}-{self.fused_residual}-{self.dtype.ptx}"'
        ' + (repr(self.eps) if self.dtype.ptx == "f32" else "")')
    report = analyze_class(_load(module), samples=0)
    assert report.missing == {"eps"}
    assert report.key_fields_any == {"hidden", "block", "fused_residual", "dtype", "eps"}


def test_dynamic_include_counts_as_reading_every_field(tmp_path: Path) -> None:
    """A template that includes a computed name is taken to read every baked field."""
    from specdsl import baked, kernel_spec

    (tmp_path / "dyn.ptx.j2").write_text(DYNAMIC_TEMPLATE)
    (tmp_path / "part.ptx.j2").write_text("// part\n")

    @kernel_spec(template="dyn.ptx.j2", entry="dyn", template_dir=tmp_path)
    class Dyn:
        part: str = baked("part.ptx.j2")
        width: int = baked(4)

        def key(self) -> str:
            return self.part

    assert template_fields(Dyn) == {"part", "width"}
    assert analyze_class(Dyn, samples=0).missing == {"width"}


def test_stand_in_returns_plausible_values_for_unbuildable_class() -> None:
    """The fallback stand-in serves field values, so f-strings over dtype.ptx work."""

    class Legacy:
        def key(self) -> str:
            return f"{self.hidden}x{self.dtype.ptx}"

    reads = _stand_in_reads(Legacy, {"hidden": 4096, "dtype": DType.BF16, "eps": 1e-6})
    assert reads == {"hidden", "dtype"}


def test_unbuildable_class_is_checked_statically_with_a_note() -> None:
    """A class whose validators refuse every drawn value is still proven statically."""
    from specdsl import baked, kernel_spec

    def never(instance, attribute, value) -> None:
        raise ValueError("expected a value no sampler draws")

    @kernel_spec(template="rmsnorm.ptx.j2", entry="rmsnorm")
    class Picky:
        hidden: int = baked(validator=never)
        eps: float = baked(1e-5)
        dtype: DType = baked(DType.BF16)
        fused_residual: bool = baked(False)
        block: int = baked(512)

        def key(self) -> str:
            return f"{self.hidden}x{self.dtype.ptx}"

    report = analyze_class(Picky, samples=10)
    assert report.missing == {"block", "eps", "fused_residual"}
    assert report.samples.pairs == 0
    assert "unvalidated stand-in" in report.note


def test_template_errors_are_reported_apart_from_keys(user_module, tmp_path, capsys) -> None:
    """A template crash on a drawn request (block=0 divides by zero) is named, not hidden."""
    module = user_module('return f"rmsnorm-{self.hidden}"')
    # block defaults to 0 here, so draws keep it often (with 512, since every row length
    # renders, the proof could find all its counterexamples before drawing a 0)
    path = tmp_path / f"{module}.py"
    path.write_text(path.read_text().replace("block: int = baked(512)", "block: int = baked(0)"))
    main(["check-keys", module, "--samples", "50"])
    out = capsys.readouterr().out
    assert "template error (not a key problem) on Norm(" in out
    assert "block=0" in out and "ZeroDivisionError" in out


def test_computed_defaults_are_left_to_the_class() -> None:
    """A field whose default is an attrs.Factory (RMSNorm.block) gets its computed value."""
    from specdsl._proof.sampling import valid_default_request
    from specdsl.kernels import RMSNorm
    from specdsl.kernels.rmsnorm import default_block

    request = valid_default_request(RMSNorm)
    assert request.block == default_block(request.hidden, request.dtype)


# -- the sampled proof -----------------------------------------------------------------------


def test_sampling_finds_what_static_reads_cannot(user_module) -> None:
    """key() reads eps but rounds it away: only the sampled proof catches the collision."""
    module = user_module('return f"{self.hidden}-{round(self.eps, 3)}-{self.dtype.ptx}-"'
                         ' f"{self.fused_residual}-{self.block}"')
    # 300 pairs: the sampler's seed holds the module's name, which the order of the tests
    # sets (keyspecs_<n>); at 100 one name in 12 drew no rendering pair that changes eps
    report = analyze_class(_load(module), samples=300, seed=3)
    assert report.missing == frozenset()
    assert [c.field for c in report.counterexamples] == ["eps"]
    example = report.counterexamples[0]
    assert example.first.key() == example.second.key()
    assert render(example.first) != render(example.second)


def test_sampling_is_seeded(user_module) -> None:
    """The same seed gives the same counterexample; the sampler is deterministic."""
    Norm = _load(user_module('return f"rmsnorm-{self.hidden}"'))
    runs = [sampled_proof(Norm, samples=200, seed=7) for _ in range(2)]
    assert runs[0] == runs[1]
    assert [c.field for c in runs[0].counterexamples] == ["block", "dtype", "eps", "fused_residual"]


def test_counterexample_launch_fields_stay_at_their_defaults(user_module) -> None:
    """A counterexample's launch field (rows) is its default in both requests, whatever the
    draws were, over several seeds."""
    Norm = _load(user_module('return f"rmsnorm-{self.hidden}"'))
    for seed in range(4):
        examples = sampled_proof(Norm, samples=60, seed=seed).counterexamples
        assert examples and all(c.first.rows == c.second.rows == 1 for c in examples), seed


def test_counterexample_is_the_default_request_and_one_change(user_module) -> None:
    """With no validators (draws the template renders but ptxas may refuse), each
    counterexample's first request is the default request and its second differs from it in
    the field named alone, over several seeds; both requests assemble with nvJitLink."""
    from specdsl._runtime.compile import compile_ptx

    Norm = _load(user_module('return f"rmsnorm-{self.hidden}"'))
    default = Norm()
    for seed in range(3):
        examples = sampled_proof(Norm, samples=60, seed=seed).counterexamples
        assert examples, seed
        for c in examples:
            assert c.first == default, (seed, c.first)
            assert c.second == attrs.evolve(default, **{c.field: getattr(c.second, c.field)})
            for request in (c.first, c.second):
                assert compile_ptx(render(request), "sm_90").cubin[:4] == b"\x7fELF"


def test_counterexample_computed_default_follows_the_field(user_module) -> None:
    """A field whose default the class computes from the differing one (block from hidden)
    takes the default request's value in the pair printed, not one computed from a draw:
    the first request is the default request, over several seeds."""
    module = user_module('return "norm"', extra="""
        import attrs

        @kernel_spec(template="rmsnorm.ptx.j2", entry="rmsnorm")
        class Computed:
            hidden: int = baked(4096)
            eps: float = baked(1e-5)
            dtype: DType = baked(DType.BF16)
            fused_residual: bool = baked(False)
            block: int = baked(attrs.Factory(
                lambda self: 256 if self.hidden <= 2048 else 512, takes_self=True))
            rows: int = launch(1)

            def key(self) -> str:
                return f"norm-{self.eps!r}-{self.dtype.ptx}-{self.fused_residual}"
        """)
    Computed = _load(module, "Computed")
    for seed in range(4):
        examples = sampled_proof(Computed, samples=60, seed=seed).counterexamples
        hidden = [c for c in examples if c.field == "hidden"]
        assert hidden and hidden[0].first == Computed(), (seed, hidden[0].first)


def test_counterexample_launch_field_kept_when_its_default_breaks_the_pair(user_module) -> None:
    """Where the default of a launch field would give the two requests different keys, the
    drawn value stays (the same in both) and the pair still shares a key."""
    Norm = _load(user_module('return f"{self.hidden}-{self.eps!r}" if self.rows == 1 '
                             'else f"{self.hidden}"'))
    examples = [c for seed in range(4)
                for c in sampled_proof(Norm, samples=60, seed=seed).counterexamples
                if c.field == "eps"]
    assert examples and all(c.first.rows == c.second.rows != 1 for c in examples)
    assert all(c.first.key() == c.second.key() for c in examples)


def test_counterexample_launch_field_without_default_is_equal_in_both(user_module) -> None:
    """A launch field with no default keeps its drawn value, the same in both requests."""
    module = user_module('return f"rmsnorm-{self.hidden}"', extra="""
        @kernel_spec(template="rmsnorm.ptx.j2", entry="rmsnorm")
        class Bare:
            rows: int = launch()
            hidden: int = baked(4096)
            eps: float = baked(1e-5)
            dtype: DType = baked(DType.BF16)
            fused_residual: bool = baked(False)
            block: int = baked(512)

            def key(self) -> str:
                return f"rmsnorm-{self.hidden}"
        """)
    examples = sampled_proof(_load(module, "Bare"), samples=60, seed=0).counterexamples
    assert examples and all(c.first.rows == c.second.rows for c in examples)


def test_candidates_start_at_default_and_keep_signed_zero() -> None:
    """Float candidates begin with the default and hold 0.0 and -0.0 apart."""
    values = candidates(float, 1e-5)
    assert values[0] == 1e-5
    assert any(v == 0 and str(v) == "-0.0" for v in values)
    assert any(v == 0 and str(v) == "0.0" for v in values)
    assert candidates(DType, DType.F16)[0] is DType.F16
    assert set(candidates(int | None, 8)) >= {None, 8, 16, 4}


# -- the command ---------------------------------------------------------------------------


def test_builtin_kernels_have_nothing_incomplete(capsys) -> None:
    """Without MODULE, check-keys checks specdsl.kernels and passes."""
    assert main(["check-keys", "--samples", "5"]) == 0
    assert "in specdsl.kernels:" in capsys.readouterr().out


def test_modules_are_found_in_the_current_folder(tmp_path, monkeypatch, capsys) -> None:
    """As with python -m, a module in the current folder is found without PYTHONPATH."""
    (tmp_path / "cwd_keyed.py").write_text(HEADER.format(name="Norm")
                                          + '        return f"rmsnorm-{self.hidden}"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_keyed", raising=False)
    assert main(["check-keys", "cwd_keyed", "--samples", "0"]) == 1
    assert "INCOMPLETE  cwd_keyed.Norm" in capsys.readouterr().out


def test_unknown_module_is_a_clear_error(capsys) -> None:
    """A module that cannot be imported: exit 2, one line naming it."""
    assert main(["check-keys", "no_such_module_xyz"]) == 2
    assert "cannot import module 'no_such_module_xyz'" in capsys.readouterr().err


def test_module_without_specs_is_a_clear_error(capsys) -> None:
    """A module with no @kernel_spec class: exit 2, naming the module."""
    assert main(["check-keys", "textwrap"]) == 2
    assert "module 'textwrap' defines no @kernel_spec classes" in capsys.readouterr().err


def test_key_that_raises_is_reported(user_module, capsys) -> None:
    """A key() that raises on a valid request is an ERROR line naming the class: a problem
    found (exit 1), not a command-line mistake."""
    module = user_module('raise KeyError("hidden")')
    assert main(["check-keys", module]) == 1
    out, err = capsys.readouterr()
    assert err == "" and f"ERROR       {module}.Norm: Norm.key() raised KeyError" in out


def test_negative_samples_refused(capsys) -> None:
    """--samples must be a whole number >= 0."""
    assert main(["check-keys", "--samples", "-1"]) == 2
    assert capsys.readouterr().err == ("specdsl check-keys: error: argument --samples: expected "
                                       "a whole number >= 0 (got '-1')\n")
