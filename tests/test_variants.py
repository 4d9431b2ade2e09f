"""A spec's variants: declared `variants`, the enum/Literal/bool fallback, pinning, refusals."""

from __future__ import annotations

import enum
from typing import Literal

import attrs
import pytest

import specdsl._review.variants as variants_module
from specdsl import DType, SpecError, baked, kernel_spec, launch
from specdsl._review.variants import (
    default_request,
    pinned_variants,
    representative_request,
    spec_variants,
    split_pinned_variants,
)
from specdsl._spec.values import field_members
from specdsl.errors import SpecDefinitionError
from specdsl.kernels import RMSNorm, VectorAdd
from specdsl.kernels.rmsnorm import default_block

# A template that reads no field: any baked fields are allowed, the PTX is one empty entry.
EMPTY = '{% include "header.ptx.j2" %}\n.visible .entry {{ entry }}()\n{\n    ret;\n}\n'


class Mode(enum.Enum):
    FAST = "fast"
    EXACT = "exact"


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    folder = tmp_path_factory.mktemp("variants_templates")
    (folder / "empty.ptx.j2").write_text(EMPTY)
    return str(folder)


def spec_class(templates, body: dict):
    """A spec class over the empty template with the given annotated fields and attributes."""
    annotations = {k: v[0] for k, v in body.items() if isinstance(v, tuple)}
    namespace = {k: (v[1] if isinstance(v, tuple) else v) for k, v in body.items()}
    namespace["__annotations__"] = annotations
    namespace["__module__"] = __name__
    cls = type("Varied", (), namespace)
    return kernel_spec(template="empty.ptx.j2", entry="varied", template_dir=templates)(cls)


def test_builtin_fallback_runs_dtype_members_the_validator_allows():
    """VectorAdd's variants are its three allowed dtypes, the default first."""
    assert [r.dtype for r in spec_variants(VectorAdd)] == [DType.F32, DType.F16, DType.BF16]


def test_fallback_is_the_product_of_bool_enum_literal_fields(templates):
    """Without variants: product of bool, Enum and Literal members; other fields at default."""
    cls = spec_class(templates, {
        "n": (int, baked(64)),
        "flag": (bool, baked(True)),
        "mode": (Mode, baked(Mode.EXACT)),
        "width": (Literal[2, 4], baked(2)),
    })
    requests = spec_variants(cls)
    assert len(requests) == 2 * 2 * 2 and {r.n for r in requests} == {64}
    assert requests[0] == cls()
    assert [(r.flag, r.mode, r.width) for r in requests[:3]] == [
        (True, Mode.EXACT, 2), (True, Mode.EXACT, 4), (True, Mode.FAST, 2)]


def test_fallback_never_varies_launch_fields(templates):
    """A bool launch field keeps its default: launch fields cannot change the PTX."""
    cls = spec_class(templates, {"fast": (bool, launch(False))})
    assert spec_variants(cls) == (cls(),)


def test_optional_members_include_none():
    """T | None of an enumerable T adds None after T's members."""
    assert field_members(Mode | None) == (Mode.FAST, Mode.EXACT, None)
    assert field_members(int | None) is None and field_members(float) is None


def test_variants_mapping_is_a_product(templates):
    """variants = {field: [values]} is the cartesian product, in declaration order."""
    cls = spec_class(templates, {
        "n": (int, baked(1)), "m": (int, baked(1)), "variants": {"n": [1, 2], "m": [3, 4]}})
    assert [(r.n, r.m) for r in spec_variants(cls)] == [(1, 3), (1, 4), (2, 3), (2, 4)]


def test_variants_classmethod_of_requests_and_mappings(templates):
    """A classmethod may return requests and {field: value} mappings; duplicates are merged."""
    def variants(cls):
        return [cls(n=8), {"n": 16}, {"n": 8}]

    cls = spec_class(templates, {"n": (int, baked(1)), "variants": classmethod(variants)})
    assert [r.n for r in spec_variants(cls)] == [8, 16]


def test_variants_with_an_invalid_value_names_the_item(templates):
    """A variants item the validator refuses is a SpecError naming the item."""
    cls = spec_class(templates, {
        "n": (int, baked(1, validator=attrs.validators.ge(1))),
        "variants": [{"n": 4}, {"n": 0}]})
    with pytest.raises(SpecError, match=r"Varied.variants item 1: Varied.n = 0 is invalid"):
        spec_variants(cls)


@pytest.mark.parametrize("variants, message", [
    (42, r"Varied.variants must be a mapping \{field: \[values\]\} or an iterable"),
    ([{"nosuch": 1}], r"Varied.variants item 0 \{'nosuch': 1\}: .*nosuch"),
    ([7], r"Varied.variants item 0 must be a Varied request or a \{field: value\} mapping "
          r"\(got 7\)"),
    ({"n": 3}, r"Varied.variants\['n'\] must be a list of values \(got 3\)"),
    ([], r"Varied.variants is empty"),
])
def test_malformed_variants_are_refused(templates, variants, message):
    """Malformed variants raise SpecDefinitionError saying what was expected."""
    cls = spec_class(templates, {"n": (int, baked(1)), "variants": variants})
    with pytest.raises(SpecDefinitionError, match=message):
        spec_variants(cls)


def test_variants_item_error_takes_the_article_of_the_class_name(templates):
    """A class name read with a vowel sound takes 'an': 'an RMSNorm request'."""
    namespace = {"__annotations__": {"n": int}, "n": baked(1), "variants": [7],
                 "__module__": __name__}
    cls = kernel_spec(template="empty.ptx.j2", entry="varied", template_dir=templates)(
        type("RMSVaried", (), namespace))
    with pytest.raises(SpecDefinitionError) as info:
        spec_variants(cls)
    assert str(info.value) == ("RMSVaried.variants item 0 must be an RMSVaried request or a "
                               "{field: value} mapping (got 7)")


def test_no_default_request_names_the_field(templates):
    """A field without a default and no variants: SpecError naming the field."""
    cls = spec_class(templates, {"hidden": (int, baked())})
    with pytest.raises(SpecError, match=r"Varied has no default request: field\(s\) hidden "
                                        r"have no default"):
        spec_variants(cls)
    with pytest.raises(SpecError, match="field\\(s\\) hidden"):
        default_request(cls)


def test_more_than_max_variants_are_refused(templates, monkeypatch):
    """Variants over MAX_VARIANTS requests are refused, never cut short."""
    monkeypatch.setattr(variants_module, "MAX_VARIANTS", 3)
    cls = spec_class(templates, {"a": (bool, baked(False)), "b": (bool, baked(False))})
    with pytest.raises(SpecDefinitionError, match=r"has 4 variants, more than MAX_VARIANTS=3"):
        spec_variants(cls)


def _wide_or_narrow(templates):
    """A spec of two fields whose validator refuses wide=True with n > 4."""
    def check(instance, attribute, value):
        if instance.wide and value > 4:
            raise ValueError("wide needs n <= 4")

    return spec_class(templates, {
        "wide": (bool, baked(False)), "n": (int, baked(1, validator=check))})


def test_pinned_variants_set_fields_and_drop_invalid(templates):
    """Pinning a field sets it on every variant; combinations it makes invalid drop out."""
    cls = _wide_or_narrow(templates)
    assert [(r.wide, r.n) for r in pinned_variants(cls, {"n": 8})] == [(False, 8)]
    with pytest.raises(SpecError, match=r"^no variant of Varied is valid with "
                                        r"\{'n': 8, 'wide': True\} \(1 refused\), e\.g\. "
                                        r"Varied\.n = 8 is invalid: wide needs n <= 4$"):
        pinned_variants(cls, {"n": 8, "wide": True})


def test_split_pinned_variants_gives_those_left_out_and_why(templates):
    """split_pinned_variants keeps pinned_variants' requests and names each one left out."""
    cls = _wide_or_narrow(templates)
    split = split_pinned_variants(cls, {"n": 8})
    assert split.requests == pinned_variants(cls, {"n": 8}) and split.total == 2
    assert [(r.values, r.message) for r in split.refused] == [
        ({"wide": True, "n": 8}, "Varied.n = 8 is invalid: wide needs n <= 4")]


@pytest.mark.parametrize("choices", [[DType.F32, DType.BF16], (DType.BF16, DType.F32)])
def test_members_a_validator_never_allows_are_no_variants(templates, choices):
    """Without variants, an enum field walks only the members its in_ validator allows, so
    pins leave none of the others out: no refusal to note (the default first)."""
    cls = spec_class(templates, {
        "n": (int, baked()),
        "dtype": (DType, baked(DType.F32, validator=attrs.validators.in_(choices))),
        "flag": (bool, baked(False))})
    split = split_pinned_variants(cls, {"n": 8})
    assert [(r.dtype, r.flag) for r in split.requests] == [
        (DType.F32, False), (DType.F32, True), (DType.BF16, False), (DType.BF16, True)]
    assert (split.refused, split.total) == ((), 4)


def test_representative_request_is_the_default_or_the_first_variant(templates):
    """A class with every default stands for its default; one without, for its first variant."""
    full = spec_class(templates, {"n": (int, baked(3)), "variants": [{"n": 5}]})
    partial = spec_class(templates, {"n": (int, baked()), "variants": [{"n": 5}, {"n": 6}]})
    assert representative_request(full) == full(n=3)
    assert representative_request(partial) == partial(n=5)


def test_pinned_field_recomputes_dependent_defaults():
    """RMSNorm hidden=2048 variants carry the block RMSNorm(hidden=2048) itself chooses."""
    pinned = pinned_variants(RMSNorm, {"hidden": 2048})
    assert len(pinned) == 6 and {r.hidden for r in pinned} == {2048}
    assert all(r == RMSNorm(hidden=2048, dtype=r.dtype, fused_residual=r.fused_residual)
               for r in pinned)
    assert {r.block for r in pinned} == {default_block(2048, d) for d in
                                         (DType.BF16, DType.F16, DType.F32)}
    assert default_block(2048, DType.BF16) not in {r.block for r in spec_variants(RMSNorm)
                                                   if r.dtype is DType.BF16}


def test_pinned_request_variant_keeps_a_named_computed_field(templates):
    """A variant given as a request keeps a computed field it set to another value."""
    computed = attrs.Factory(lambda self: self.n * 2, takes_self=True)

    def variants(cls):
        return [cls(n=1), cls(n=1, m=7)]

    cls = spec_class(templates, {"n": (int, baked(1)), "m": (int, baked(computed)),
                                 "variants": classmethod(variants)})
    assert [(r.n, r.m) for r in pinned_variants(cls, {"n": 5})] == [(5, 10), (5, 7)]


def test_pin_supplies_a_required_field_without_variants(templates):
    """Without variants, a pinned value may give the field that has no default."""
    cls = spec_class(templates, {"alpha": (float, baked()), "flag": (bool, baked(False))})
    assert [(r.alpha, r.flag) for r in pinned_variants(cls, {"alpha": 2.0})] == [
        (2.0, False), (2.0, True)]
    with pytest.raises(SpecError, match=r"field\(s\) alpha have no default"):
        pinned_variants(cls, {"flag": True})


def test_pinned_finite_field_is_not_varied(templates):
    """Without variants, a pinned bool stays pinned: the product runs over the others."""
    cls = spec_class(templates, {"a": (bool, baked(False)), "b": (bool, baked(False))})
    assert [(r.a, r.b) for r in pinned_variants(cls, {"a": True})] == [(True, False),
                                                                        (True, True)]


def test_grid_module_is_a_deprecated_alias():
    """specdsl.grid still imports, warns DeprecationWarning, and names the same functions."""
    import importlib
    import sys

    sys.modules.pop("specdsl.grid", None)
    with pytest.warns(DeprecationWarning, match="specdsl.grid is deprecated"):
        grid = importlib.import_module("specdsl.grid")
    assert grid.spec_grid is spec_variants and grid.pinned_grid is pinned_variants
    assert grid.MAX_GRID == variants_module.MAX_VARIANTS


def test_choices_are_tested_as_the_validator_tests_them(templates):
    """An IntEnum member is in [1, 2] as in_ sees it, and a converter given the instance is
    never run to read the choices (it would get no request)."""
    class Level(enum.IntEnum):
        LOW = 1
        MID = 2
        HIGH = 3

    levels = spec_class(templates, {
        "mode": (Level, baked(Level.LOW, validator=attrs.validators.in_([1, 2])))})
    assert [r.mode for r in spec_variants(levels)] == [Level.LOW, Level.MID]
    if hasattr(attrs, "Converter"):
        def fast_only(value, self):
            return Mode.FAST if self is not None and value is Mode.EXACT else value

        converted = spec_class(templates, {"mode": (Mode, baked(
            Mode.FAST, converter=attrs.Converter(fast_only, takes_self=True),
            validator=attrs.validators.in_([Mode.FAST, Mode.EXACT])))})
        assert {r.mode for r in spec_variants(converted)} == {Mode.FAST}
