"""Kernel signatures parsed from PTX: every built-in template, and the PTX grammar's corners."""

from __future__ import annotations

import pytest

from specdsl import render
from specdsl.variants import representative_request
from specdsl.kernels import ALL, VectorAdd
from specdsl.ptx import Param, entry_names, parse_entry
from specdsl.spec import spec_info


def _module(params: str, entry: str = "k") -> str:
    return f".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry {entry}(\n{params}\n)\n{{\n ret;\n}}\n"


def test_vector_add_signature():
    """VectorAdd: three 16-byte-aligned global pointers and a u64 count, in order."""
    signature = parse_entry(render(VectorAdd()), "vector_add")
    pointer = Param("a", "u64", is_ptr=True, space="global", align=16)
    assert signature.params == (
        pointer, attrs_evolve(pointer, "b"), attrs_evolve(pointer, "out"), Param("n", "u64"))


def attrs_evolve(param: Param, name: str) -> Param:
    import attrs

    return attrs.evolve(param, name=name)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_builtin_template_parses(cls):
    """Each built-in kernel's representative request has a parseable entry whose pointers carry .ptr."""
    spec = representative_request(cls)
    signature = parse_entry(render(spec), spec_info(spec).entry)
    assert signature.entry == spec_info(spec).entry
    assert signature.params, "a kernel without parameters cannot read or write memory"
    for param in signature.params:
        if param.is_ptr:
            assert param.type == "u64" and param.space == "global" and param.align
    assert any(p.is_ptr for p in signature.params)


def test_comments_are_ignored():
    """Line and block comments inside the parameter list do not become parameters."""
    ptx = _module(".param .u32 n, // count, with a comma\n /* .param .u32 ghost, */ .param .f32 s")
    assert parse_entry(ptx, "k").names == ("n", "s")


def test_ptr_without_space_and_align():
    """'.ptr .align 8' (generic space) is read with no space and align 8."""
    (param,) = parse_entry(_module(".param .u64 .ptr .align 8 p"), "k").params
    assert (param.is_ptr, param.space, param.align) == (True, None, 8)


def test_aggregate_parameter():
    """'.param .align 8 .b8 s[24]' is a 24-byte aggregate aligned to 8."""
    (param,) = parse_entry(_module(".param .align 8 .b8 s[24]"), "k").params
    assert (param.type, param.count, param.size, param.param_align) == ("b8", 24, 24, 8)


def test_entry_is_chosen_by_name():
    """In a module with two entries, each one's own parameters are returned."""
    ptx = _module(".param .u32 a", "first") + _module(".param .f64 b", "second")
    assert entry_names(ptx) == ("first", "second")
    assert parse_entry(ptx, "second").params == (Param("b", "f64"),)


def test_empty_parameter_list():
    """An entry without parameters parses to an empty signature."""
    assert parse_entry(_module(""), "k").params == ()


def test_missing_entry_names_the_entries_found():
    """Asking for an absent entry raises ValueError listing the entries present."""
    with pytest.raises(ValueError, match=r"no '\.entry nope' \(entries: k\)"):
        parse_entry(_module(".param .u32 a"), "nope")


def test_ptr_on_a_float_is_refused():
    """'.ptr' on an .f32 parameter is not PTX: refused with the declaration quoted."""
    with pytest.raises(ValueError, match=r"'\.ptr' needs a \.u32 or \.u64 parameter"):
        parse_entry(_module(".param .f32 .ptr x"), "k")


def test_unknown_word_is_refused():
    """An unknown attribute is an error, never silently skipped."""
    with pytest.raises(ValueError, match=r"unknown word '\.texref'"):
        parse_entry(_module(".param .texref t"), "k")


def test_align_must_be_a_power_of_two():
    """'.align 12' is refused."""
    with pytest.raises(ValueError, match="not a power of two"):
        parse_entry(_module(".param .u64 .ptr .global .align 12 p"), "k")


def test_describe_round_trips_the_declaration():
    """describe() spells the declaration as PTX does."""
    (param,) = parse_entry(_module(".param .u64 .ptr .global .align 16 a"), "k").params
    assert param.describe() == ".u64 .ptr .global .align 16 a"
