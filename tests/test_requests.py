"""Requests from command-line words and back: parsing, formatting, their round trip."""

from __future__ import annotations

import re
import shlex

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdsl import SpecError
from specdsl._review.requests import format_request, format_value, parse_assignments, parse_request
from specdsl.kernels import ALL, RMSNorm, RoPE, VectorAdd
from strategies import requests
from userspecs import Toy


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                   HealthCheck.too_slow])
@given(data=st.data(), cls=st.sampled_from([*ALL, Toy]))
def test_formatted_words_parse_back_to_the_request(data, cls):
    """parse_request(format_request(r)) == r for every built-in and the toy spec's types
    (floats by repr, enums, Literal members, None, bools, tuples)."""
    request = data.draw(requests(cls))
    words = shlex.split(format_request(request))
    assert parse_request(cls, words[1:]) == request


def test_str_literal_values_are_words_not_reprs():
    """A str field formats as its bare value (style=gptj), which the CLI parses back."""
    assert format_request(RoPE(style="gptj")).split()[7] == "style=gptj"
    assert parse_request(RoPE, ["style=gptj"]) == RoPE(style="gptj")


def test_literal_true_and_one_stay_apart():
    """Toy.mode holds Literal 1 and True: each formats to a word that parses back to itself."""
    for mode in (1, True, "exact"):
        word = f"mode={format_value(Toy(mode=mode).mode)}"
        assert parse_request(Toy, [word]).mode == Toy(mode=mode).mode


def test_baked_only_leaves_out_launch_fields():
    """format_request(baked_only=True) names the baked fields alone, as review labels do."""
    assert format_request(VectorAdd(dtype="f16", block=128), baked_only=True) == (
        "vectoradd dtype=f16")
    assert format_request(RMSNorm(hidden=4096, block=512)) == (
        "rmsnorm hidden=4096 eps=1e-06 dtype=bf16 fused_residual=false block=512 "
        "rows_per_cta=1 streaming_stores=false l2_evict_last=false min_ctas_per_sm=none")


def test_parse_assignments_types_values_without_building():
    """parse_assignments parses each word by its field's type and checks nothing else."""
    assert parse_assignments(RMSNorm, ["hidden=0x800", "eps=1e-5", "fused_residual=on"]) == {
        "hidden": 2048, "eps": 1e-5, "fused_residual": True}


@pytest.mark.parametrize("words, message", [
    (["hidden"], "expected field=value (got 'hidden')"),
    (["hidden=1", "hidden=2"], "RMSNorm.hidden is given twice"),
    (["eps=small"], "RMSNorm.eps must be a float (got 'small')"),
    (["width=3"], "RMSNorm has no field 'width'"),
])
def test_parse_errors_name_the_field(words, message):
    """A word that cannot be parsed is a SpecError naming the field and the value."""
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_assignments(RMSNorm, words)


def test_missing_required_field_is_a_spec_error():
    """A request without its required field is a SpecError naming the class once and the
    field."""
    with pytest.raises(SpecError, match=r"^RMSNorm is missing required field\(s\) 'hidden'"):
        parse_request(RMSNorm, ["eps=1e-5"])


def test_a_fixed_tuple_takes_exactly_its_items():
    """A tuple[int, int] field refuses three values rather than dropping one."""
    from specdsl import baked, kernel_spec
    from userspecs import TEMPLATES

    @kernel_spec(template="legacy.ptx.j2", entry="legacy", template_dir=TEMPLATES)
    class Paired:
        n: int = baked(4)
        scale: float = baked(1.0)
        pair: tuple[int, int] = baked((1, 2))

    assert parse_request(Paired, ["pair=3,4"]).pair == (3, 4)
    with pytest.raises(SpecError, match=re.escape("Paired.pair must be 2 comma-separated "
                                                  "values (got '1,2,3')")):
        parse_request(Paired, ["pair=1,2,3"])


@pytest.mark.parametrize("text, dims", [("3", (3,)), ("1,2", (1, 2)), ("4, 5", (4, 5)),
                                        ("", ())])
def test_tuple_text_is_comma_separated(text, dims):
    """A tuple field's text is comma-separated items (blanks around them ignored); empty
    text is the empty tuple."""
    assert parse_assignments(Toy, [f"dims={text}"]) == {"dims": dims}


@pytest.mark.parametrize("text", ["1,,2", "1,2,", ",1", "[1,2]", "(1,2)", "1,2]"])
def test_tuple_text_refuses_brackets_and_empty_items(text):
    """Brackets and empty items are refused, never read past: one spelling, the one
    format_request writes."""
    with pytest.raises(SpecError, match=re.escape(
            f"Toy.dims must be comma-separated values without brackets or empty items, "
            f"such as 1,2 (got {text!r})")):
        parse_assignments(Toy, [f"dims={text}"])


def test_unknown_field_suggests_the_closest():
    """An unknown field name in text is a SpecArgumentError with Python's 'did you mean'."""
    from specdsl.errors import SpecArgumentError

    fields = ", ".join(field.name for field in attrs.fields(RMSNorm))
    with pytest.raises(SpecArgumentError, match=re.escape(
            f"RMSNorm has no field 'hiden' (fields: {fields}); did you mean 'hidden'?")):
        parse_assignments(RMSNorm, ["hiden=4096"])


def test_missing_field_in_text_says_how_to_give_it():
    """A request from text without its required field says to give it as text
    (hidden=VALUE), not as a Python call."""
    with pytest.raises(SpecError, match=re.escape(
            "RMSNorm is missing required field(s) 'hidden' (baked) (no default): give "
            "hidden=VALUE")):
        parse_request(RMSNorm, [])
