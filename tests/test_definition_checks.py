"""Checks at class definition beyond the names a template reads: the ``.entry`` the
templates declare, and defaults their own fields refuse."""

from __future__ import annotations

import attrs
import pytest

from specdsl import SpecDefinitionError, SpecError, baked, kernel_spec, launch, render
from specdsl._templating.environment import declared_entries
from specdsl.errors import RenderError

BODY = '{% include "header.ptx.j2" %}\n.visible .entry ENTRY()\n{\n// {{ factor | f32 }}\n' \
       '    ret;\n}\n'


def _define(folder, body: dict, template: str = "k.ptx.j2", entry: str = "k"):
    namespace = {"__annotations__": {k: v[0] for k, v in body.items()},
                 **{k: v[1] for k, v in body.items()}, "__module__": __name__}
    return kernel_spec(template=template, entry=entry, template_dir=folder)(
        type("K", (), namespace))


def _template(folder, entry_text: str, name: str = "k.ptx.j2") -> None:
    (folder / name).write_text(BODY.replace("ENTRY", entry_text))


FACTOR = {"factor": (float, baked(2.0))}


# -- the template's .entry ------------------------------------------------------------------

@pytest.mark.parametrize("source, expected", [
    (".visible .entry {{ entry }}(", (None,)),
    (".visible .entry scale(\n", ("scale",)),
    (".entry scale\n", ("scale",)),
    (".entry $k(", ("$k",)),
    (".entry k_{{ n }}(", (None,)),
    (".entry k{% if a %}2{% endif %}(", (None,)),
    ("// was .entry old\n.entry {{ entry }}(", (None,)),
    ("{# .entry old #}\n.entry new(", ("new",)),
    (".entry_point x\nx.entry y(", ()),
])
def test_declared_entries_read_from_the_source(source, expected):
    """Each .entry is its literal name, or None where an expression makes the name;
    comments and look-alikes are left out."""
    assert declared_entries(source) == expected


def test_literal_entry_other_than_the_spec_s_is_a_definition_error(tmp_path):
    """A template declaring '.entry kk' for a spec with entry='k' fails at definition
    (it used to fail only at render: "defines no '.entry k'"), naming both names."""
    _template(tmp_path, "kk")
    with pytest.raises(SpecDefinitionError) as info:
        _define(tmp_path, FACTOR)
    assert str(info.value) == ("K: template 'k.ptx.j2' declares '.entry kk', but the spec's "
                               "entry is 'k': write '.entry {{ entry }}' in the template, or "
                               "entry='kk'")


def test_literal_entry_in_an_included_template_names_that_file(tmp_path):
    """An included file's literal .entry is named as the file that declares it."""
    (tmp_path / "k.ptx.j2").write_text('{% include "header.ptx.j2" %}\n'
                                       '{% include "decl.ptx.j2" %}\n// {{ factor | f32 }}\n')
    (tmp_path / "decl.ptx.j2").write_text(".visible .entry other()\n{\n    ret;\n}\n")
    with pytest.raises(SpecDefinitionError) as info:
        _define(tmp_path, FACTOR)
    assert str(info.value) == ("K: template 'decl.ptx.j2' (reached from 'k.ptx.j2') declares "
                               "'.entry other', but the spec's entry is 'k': write "
                               "'.entry {{ entry }}' in the template, or entry='other'")


@pytest.mark.parametrize("entry_text", ["k", "{{ entry }}"])
def test_matching_or_expression_entry_is_accepted(tmp_path, entry_text):
    """A literal name equal to entry=, or '{{ entry }}', defines and renders."""
    _template(tmp_path, entry_text)
    assert ".visible .entry k()" in render(_define(tmp_path, FACTOR)())


def test_entry_built_by_an_expression_is_left_to_render(tmp_path):
    """A name an expression builds cannot be read without rendering: render refuses it,
    though the spec's entry is a prefix of it."""
    _template(tmp_path, "k_{{ 'x' }}")
    cls = _define(tmp_path, FACTOR)
    with pytest.raises(RenderError) as info:
        render(cls())
    assert str(info.value) == "K(factor=2.0): template 'k.ptx.j2' defines no '.entry k'"


# -- defaults -------------------------------------------------------------------------------

def _from_text(value):
    if not isinstance(value, str):
        raise TypeError("expected text")
    return float(value)


@pytest.mark.parametrize("field, expected", [
    ({"factor": (float, baked("x"))},
     "K.factor: the default 'x' is refused: K.factor must be a float (got 'x', a str)"),
    ({"factor": (float, baked(float("nan")))},
     "K.factor: the default nan is refused: K.factor must be a finite float (NaN and infinity "
     "cannot be baked) (got nan, a float)"),
    ({"factor": (float, baked(-1.0, validator=attrs.validators.gt(0.0)))},
     "K.factor: the default -1.0 is refused: K.factor = -1.0 is invalid: 'factor' must be "
     "> 0.0: -1.0"),
    ({"factor": (float, baked(2.0)),
      "block": (int, launch(100, validator=attrs.validators.in_([128, 256])))},
     "K.block: the default 100 is refused: K.block = 100 is invalid: 'block' must be in "
     "[128, 256] (got 100)"),
    ({"factor": (float, baked(2.0, converter=_from_text))},
     "K.factor: the default 2.0 is refused: K.factor = 2.0 is invalid: expected text"),
])
def test_default_its_field_refuses_is_a_definition_error(tmp_path, field, expected):
    """A default its own field's type, validator or converter refuses fails when the class
    is defined (it used to fail only on K()), naming the field, the default and why."""
    _template(tmp_path, "{{ entry }}")
    with pytest.raises(SpecDefinitionError) as info:
        _define(tmp_path, field)
    assert str(info.value) == expected


def test_validator_reading_a_field_without_default_is_left_to_requests(tmp_path):
    """A default whose validator reads a required field cannot be judged at definition:
    the class is made, and a request gets the refusal."""
    def within_factor(instance, attribute, value):
        if value > instance.factor:
            raise ValueError("must not exceed factor")

    _template(tmp_path, "{{ entry }}")
    cls = _define(tmp_path, {"factor": (float, baked()),
                             "block": (int, launch(128, validator=within_factor))})
    assert cls(factor=256.0).block == 128
    with pytest.raises(SpecError) as info:
        cls(factor=2.0)
    assert str(info.value) == "K.block = 128 is invalid: must not exceed factor"


def test_factory_default_is_left_to_requests(tmp_path):
    """A factory default is computed for each request, so only a request checks it."""
    _template(tmp_path, "{{ entry }}")
    cls = _define(tmp_path, {"factor": (float, baked(attrs.Factory(lambda: "x")))})
    with pytest.raises(SpecError) as info:
        cls()
    assert str(info.value) == "K.factor must be a float (got 'x', a str)"


def test_factory_keyword_is_attrs_spelling_of_a_factory_default(tmp_path):
    """baked(factory=f) is baked(attrs.Factory(f)), as attrs.field spells it; with a default
    too, or a factory that cannot be called, it is refused naming both."""
    _template(tmp_path, "{{ entry }}")
    calls = []
    cls = _define(tmp_path, {"factor": (float, baked(factory=lambda: calls.append(1) or 3.0))})
    assert cls().factor == 3.0 and cls(factor=2.0).factor == 2.0 and calls == [1]
    with pytest.raises(SpecDefinitionError, match=r"^baked\(\.\.\.\) takes a default or a "
                                                  r"factory, not both \(got 1\.0 and "):
        baked(1.0, factory=float)
    with pytest.raises(SpecDefinitionError, match=r"^launch\(factory=\.\.\.\) must be "
                                                  r"callable \(got 5\)$"):
        launch(factory=5)


def test_computed_default_reading_a_later_field_says_so(tmp_path):
    """attrs sets fields in declaration order: a computed default that reads a field declared
    after it is a SpecDefinitionError naming both (not "'K' object has no attribute 'b'"),
    as is one reading a name that is no field; one that reads an earlier field works."""
    _template(tmp_path, "{{ entry }}")
    twice = attrs.Factory(lambda self: self.b * 2, takes_self=True)
    message = (r"^K\.a: its computed default reads 'b', which is declared after it; it sees "
               r"only the fields declared before it \(attrs sets them in order\): declare "
               r"'a' after 'b'$")
    late = _define(tmp_path, {**FACTOR, "a": (int, baked(twice)), "b": (int, baked(3))})
    with pytest.raises(SpecDefinitionError, match=message):
        late()
    assert late(a=1).a == 1  # given, the default is never computed
    early = _define(tmp_path, {**FACTOR, "b": (int, baked(3)), "a": (int, baked(twice))})
    assert early().a == 6 and early(b=5).a == 10
    other = _define(tmp_path, {**FACTOR, "a": (int, baked(attrs.Factory(lambda self: self.c,
                                                                         takes_self=True)))})
    with pytest.raises(SpecDefinitionError, match=r"^K\.a: its computed default reads 'c', "
                       r"which is no field of the class$"):
        other()
    itself = _define(tmp_path, {**FACTOR, "a": (int, baked(attrs.Factory(lambda self: self.a,
                                                                          takes_self=True)))})
    with pytest.raises(SpecDefinitionError, match=r"^K\.a: its computed default reads itself, "
                       r"which is not set while its default is computed$"):
        itself()


def test_a_property_failing_in_a_computed_default_is_the_request_s(tmp_path):
    """A property that raises its own AttributeError (tagged with the property's name) is a
    failure of the request, not a name the class lacks: a SpecError naming the field."""
    _template(tmp_path, "{{ entry }}")

    class Chunked:
        @property
        def chunk(self):
            if self.n > 100:
                raise AttributeError("no chunk for long rows")
            return self.n

    per_chunk = attrs.Factory(lambda self: self.chunk * 2, takes_self=True)
    namespace = {"__annotations__": {"factor": float, "n": int, "c": int}, "factor": baked(2.0),
                 "n": baked(50), "c": baked(per_chunk), "__module__": __name__}
    cls = kernel_spec(template="k.ptx.j2", entry="k", template_dir=tmp_path)(
        type("K", (Chunked,), namespace))
    assert cls().c == 100
    with pytest.raises(SpecError, match=r"^K\.c: its computed default failed \(factor=2\.0, "
                                        r"n=200\): AttributeError: no chunk for long rows$"):
        cls(n=200)


def test_computed_default_failing_names_the_field_or_the_earlier_refusal(tmp_path):
    """attrs validates only after every field is set, so a computed default meets earlier
    fields unchecked: block=0 dividing by zero is block's own refusal, not a bare
    ZeroDivisionError; a failure with every earlier field valid is a SpecError naming the
    field, the values it was computed from and the exception (kept as the cause)."""
    _template(tmp_path, "{{ entry }}")

    def positive(value):
        if value <= 0:
            raise ValueError("expected a positive block")

    per_thread = attrs.Factory(lambda self: 4096 // self.block, takes_self=True)
    cls = _define(tmp_path, {**FACTOR, "block": (int, baked(256, validator=positive)),
                             "unroll": (int, baked(per_thread))})
    assert cls(block=512).unroll == 8
    with pytest.raises(SpecError) as info:
        cls(block=0)
    assert str(info.value) == "K.block = 0 is invalid: expected a positive block"
    assert info.value.__cause__ is None
    odd = attrs.Factory(lambda self: 4096 // (self.block - 256), takes_self=True)
    failing = _define(tmp_path, {**FACTOR, "block": (int, baked(256)),
                                 "unroll": (int, baked(odd))})
    with pytest.raises(SpecError) as info:
        failing()
    assert str(info.value) == ("K.unroll: its computed default failed (factor=2.0, "
                               "block=256): ZeroDivisionError: integer division or modulo by "
                               "zero")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.skipif(not hasattr(attrs, "Converter"), reason="attrs.Converter: attrs >= 24.1")
def test_converter_reading_a_later_field_says_so(tmp_path):
    """The same for a converter given the instance: reading a later field is a
    SpecDefinitionError naming both, when the class is defined (its default is converted
    then) or, for a field without a default, by the request; reading an earlier one works."""
    _template(tmp_path, "{{ entry }}")
    scaled = attrs.Converter(lambda value, self: value * self.b, takes_self=True)
    message = (r"^K\.a: its converter reads 'b', which is declared after it; .*: declare 'a' "
               r"after 'b'$")
    with pytest.raises(SpecDefinitionError, match=message):
        _define(tmp_path, {**FACTOR, "a": (int, baked(1, converter=scaled)),
                           "b": (int, baked(3))})
    required = _define(tmp_path, {"a": (int, baked(converter=scaled)), **FACTOR,
                                  "b": (int, baked(3))})
    with pytest.raises(SpecDefinitionError, match=message):
        required(a=2)
    early = _define(tmp_path, {**FACTOR, "b": (int, baked(3)),
                               "a": (int, baked(1, converter=scaled))})
    assert early(a=2).a == 6
