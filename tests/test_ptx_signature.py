"""Kernel signatures parsed from PTX: every built-in template, and the PTX grammar's corners."""

from __future__ import annotations

import pytest

from specdsl import PTXSignatureError, render
from specdsl._review.variants import representative_request
from specdsl._runtime.compile import compile_ptx
from specdsl._runtime.signature import Param, entry_directives, entry_names, parse_entry
from specdsl._spec.decorator import spec_info
from specdsl.errors import CompileError
from specdsl.kernels import ALL, VectorAdd


def _module(params: str, entry: str = "k") -> str:
    return (".version 8.0\n.target sm_90\n.address_size 64\n"
            f".visible .entry {entry}(\n{params}\n)\n{{\n ret;\n}}\n")


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
    """Each built-in's representative request has a parseable entry whose pointers carry .ptr."""
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
    """Asking for an absent entry raises PTXSignatureError (a ValueError) listing the entries
    present."""
    with pytest.raises(PTXSignatureError, match=r"no '\.entry nope' \(entries: k\)"):
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


def _ptr(space=None, align=None, type_="u64"):
    return Param("a", type_, is_ptr=True, space=space, align=align)


# PTX ISA 5.1.6.3 "Kernel Parameter Attribute: .ptr": ".param .type .ptr .space .align N
# varname", ".param .type .ptr .align N varname", spaces between .ptr, .space and .align
# optional; 5.1.6.1: ".param .align N .b8 name[size]" and other arrays.
SPELLINGS = [
    (".param .u64 .ptr.global.align 16 a", _ptr("global", 16)),
    (".param .u64 .ptr.const.align 8 a", _ptr("const", 8)),
    (".param .u64 .ptr.local.align 4 a", _ptr("local", 4)),
    (".param .u64 .ptr.shared.align 16 a", _ptr("shared", 16)),
    (".param .u64 .ptr.align 8 a", _ptr(None, 8)),
    (".param .u64 .ptr .align 8 a", _ptr(None, 8)),
    (".param .u64 .ptr.global a", _ptr("global")),
    (".param .u64 .ptr a", _ptr()),
    (".param .u32 .ptr.global.align 16 a", _ptr("global", 16, "u32")),
    (".param .u64 .ptr .global .align 16 a", _ptr("global", 16)),
    (".param .u64 .ptr.global .align 16 a", _ptr("global", 16)),
    (".param .u64 .ptr .global.align 16 a", _ptr("global", 16)),
    (".param .u64.ptr.global.align 16 a", _ptr("global", 16)),
    (".param .align 8 .b8 a[24]", Param("a", "b8", count=24, align=8)),
    (".param .b8 .align 8 a[24]", Param("a", "b8", count=24, align=8)),
    (".param .b8 a [24]", Param("a", "b8", count=24)),
    (".param .u32 a[4]", Param("a", "u32", count=4)),
    (".param .align 16 .u32 a[4]", Param("a", "u32", count=4, align=16)),
    (".param .align 4 .u32 a", Param("a", "u32", align=4)),
    (".param .u32 .align 4 a", Param("a", "u32", align=4)),
    (".param .align 8 .u64 .ptr a", Param("a", "u64", is_ptr=True, slot_align=8)),
    (".param .align 16 .u64 .ptr.global.align 8 a",
     Param("a", "u64", is_ptr=True, space="global", align=8, slot_align=16)),
]


@pytest.mark.parametrize("declaration, expected", SPELLINGS, ids=[d for d, _ in SPELLINGS])
def test_ptx_isa_spellings_assemble_and_parse(declaration, expected):
    """Each spelling of the PTX ISA assembles with nvJitLink and parses to the same Param."""
    ptx = _module(declaration)
    assert compile_ptx(ptx, "sm_90").cubin[:4] == b"\x7fELF"
    assert parse_entry(ptx, "k").params == (expected,)


@pytest.mark.parametrize("declaration, problem", [
    (".param .u64 .ptr.global.align16 a", r"unknown word '\.align16'"),
    (".param .u64 .global a", r"a state space \(\.global\) must follow '\.ptr', once"),
    (".param .u64 .ptr.align 12 a", r"'\.align 12' is not a power of two"),
    (".param .u64 .align 8 .ptr a", r"'\.align' between the type and '\.ptr'"),
    (".param .u64 .ptr .align 8 .global a", r"a state space \(\.global\) must follow '\.ptr'"),
    (".param .u64 .global .ptr a", r"a state space \(\.global\) must follow '\.ptr'"),
    (".param .ptr .u64 a", r"'\.ptr' out of place"),
])
def test_spellings_nvjitlink_refuses_are_refused(declaration, problem):
    """What nvJitLink refuses is refused here too, with the declaration quoted."""
    with pytest.raises(CompileError):
        compile_ptx(_module(declaration), "sm_90")
    with pytest.raises(PTXSignatureError, match=problem + r".* in '\.param"):
        parse_entry(_module(declaration), "k")


@pytest.mark.parametrize("declaration, problem", [
    (".param .f32 .ptr a", r"'\.ptr' needs a \.u32 or \.u64 parameter \(got \.f32\)"),
    (".param .u64 .ptr.global.align 16 a[2]", r"'\.ptr' on an array"),
    (".param .u64 .ptr .ptr a", r"'\.ptr' out of place \(twice, or before the type\)"),
    (".param .u64 .align 8 .align 8 a", r"'\.align' out of place"),
    (".param .align 8 .u64 .align 8 a", r"two '\.align's"),
    (".param .u64 .ptr.global.const a", r"a state space \(\.const\) must follow '\.ptr', once"),
    (".param .u64 a b", r"unexpected 'b' after the name"),
    (".param .u64 a[0]", r"an array of 0 elements"),
    (".param .u64 16", r"unknown word '16'"),
    (".param .ptr a", r"'\.ptr' out of place"),
    (".param .u64", r"no parameter name"),
    (".param .u64 a+", r"unexpected text '\+'"),
])
def test_declarations_without_a_meaning_are_refused(declaration, problem):
    """Declarations that hold no pointer or value the executor could check are refused,
    even where ptxas is lenient (a float '.ptr')."""
    with pytest.raises(PTXSignatureError, match=problem):
        parse_entry(_module(declaration), "k")


def test_align_before_a_pointer_places_its_slot():
    """'.align 16' before a .ptr's type moves its slot in the parameter buffer; the one after
    '.ptr' is the pointee's. describe() spells both where PTX puts them."""
    _, second = parse_entry(_module(".param .u32 n, .param .align 16 .u64 .ptr.global"
                                        ".align 8 p"), "k").params
    assert (second.param_align, second.pointee_align) == (16, 8)
    assert second.describe() == ".align 16 .u64 .ptr .global .align 8 p"


def test_pointee_alignment_defaults_to_four_bytes():
    """A '.ptr' without '.align' points to 4-byte-aligned memory (PTX ISA 5.1.6.3); a value
    parameter has no pointee."""
    generic, aligned, value = parse_entry(
        _module(".param .u64 .ptr.global g, .param .u64 .ptr.align 16 h, .param .u64 n"),
        "k").params
    assert (generic.pointee_align, aligned.pointee_align, value.pointee_align) == (4, 16, None)


def test_entry_directives_read_what_follows_the_parameter_list():
    """The performance-tuning directives between ``)`` and ``{``, however spaced, on the
    ``)``'s line or their own, without comments (a ``{`` or a directive inside one does not
    count), for the named entry only; none for an entry without them or a missing one."""
    ptx = """.visible .entry foo
(
  .param .u64 a /* { */, .param .u32 n
) .maxntid 128, 1, 1 // a comment
/* .maxnreg 32 */
.minnctapersm   4     // 1024 threads an SM
{
  ret;
}
.visible .entry foobar( ) .reqntid 64 { ret; }
.visible .entry plain(.param .u32 n)
{
  ret;
}
"""
    assert entry_directives(ptx, "foo") == (".maxntid 128, 1, 1", ".minnctapersm 4")
    assert entry_directives(ptx, "foobar") == (".reqntid 64",)
    assert entry_directives(ptx, "plain") == ()
    assert entry_directives(ptx, "fo") == ()
