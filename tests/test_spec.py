"""@kernel_spec: typed, validated, frozen requests and checks at class definition."""

from __future__ import annotations

import re

import attrs
import pytest

from specdsl import DType, SpecDefinitionError, SpecError, baked, kernel_spec, launch
from specdsl._spec.decorator import spec_info
from userspecs import TEMPLATES, Toy


def test_frozen_slotted_hashable():
    """Requests are frozen, slotted and usable as dict keys."""
    toy = Toy()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        toy.n = 3
    assert not hasattr(toy, "__dict__")
    assert {toy: 1}[Toy()] == 1


def test_roles_recorded():
    """Baked and launch fields are listed by role in declaration order."""
    info = spec_info(Toy)
    assert info.baked == ("scale", "offset", "n", "dtype", "flag", "limit", "mode", "dims")
    assert info.launch == ("block",)


def test_values_are_coerced():
    """Ints become floats for float fields, strings become enum members, lists tuples."""
    toy = Toy(scale=2, dtype="bf16", dims=[3, 4])
    assert toy.scale == 2.0 and type(toy.scale) is float
    assert toy.dtype is DType.BF16
    assert toy.dims == (3, 4)


def test_negative_zero_is_a_different_request():
    """0.0 and -0.0 render differently, so they are different requests."""
    assert Toy(offset=0.0) != Toy(offset=-0.0)
    assert len({Toy(offset=0.0), Toy(offset=-0.0)}) == 2


def test_literal_keeps_one_and_true_apart():
    """A Literal field holding both 1 and True keeps them distinct."""
    assert Toy(mode=1).mode == 1 and Toy(mode=1).mode is not True
    assert Toy(mode=True).mode is True
    assert Toy(mode=1) != Toy(mode=True)


@pytest.mark.parametrize("field, value, expected", [
    ("n", True, "Toy.n must be an int (got True, a bool)"),
    ("n", 2.0, "Toy.n must be an int (got 2.0, a float)"),
    ("n", 0, "Toy.n = 0 is invalid: 'n' must be >= 1"),
    ("scale", float("nan"), "Toy.scale must be a finite float"),
    ("scale", float("inf"), "Toy.scale must be a finite float"),
    ("scale", "1.0", "Toy.scale must be a float (got '1.0', a str)"),
    ("scale", True, "Toy.scale must be a float (got True, a bool)"),
    ("flag", 1, "Toy.flag must be a bool (True or False) (got 1, an int)"),
    ("dtype", "f12", "Toy.dtype must be a DType"),
    ("limit", "3", "Toy.limit must be an int (got '3', a str)"),
    ("mode", "slow", "Toy.mode must be one of 'fast', 'exact', 1, True (got 'slow'"),
    ("dims", {1: 2}, "Toy.dims must be a tuple of int (got {1: 2}, a dict)"),
    ("dims", (1, 2.5), "Toy.dims[1] must be an int (got 2.5, a float)"),
    ("block", [128], "Toy.block must be an int (got [128], a list)"),
])
def test_refused_values(field, value, expected):
    """Each refused value is a SpecError naming the field, the value and the expectation."""
    with pytest.raises(SpecError) as info:
        Toy(**{field: value})
    assert expected in str(info.value)


@pytest.mark.parametrize("values, expected", [
    ({"dims": (1, "x")}, "Bad.dims[1] must be an int (got 'x', a str)"),
    ({"dims": {1, 2}}, "Bad.dims must be a tuple of int (got {1, 2}, a set)"),
    ({"dims": "12"}, "Bad.dims must be a tuple of int (got '12', a str)"),
    ({"rows": ((1,), (2, "y"))}, "Bad.rows[1][1] must be an int (got 'y', a str)"),
    ({"rows": (3,)}, "Bad.rows[0] must be a tuple of int (got 3, an int)"),
    ({"pair": (1, "a")}, "Bad.pair[1] must be a float (got 'a', a str)"),
    ({"pair": (1,)}, "Bad.pair must be a tuple of 2 items (int, float) (got (1,), a tuple)"),
    ({"pair": 3}, "Bad.pair must be a tuple (int, float) (got 3, an int)"),
])
def test_tuple_errors_name_the_item_and_the_expected_items(tmp_path, values, expected):
    """A refused tuple item is named by its index (nested ones by each index); a value
    that is no tuple is told the item types plainly."""
    (tmp_path / "t.ptx.j2").write_text(".entry {{ entry }} // {{ dims }} {{ rows }} {{ pair }}\n")
    cls = _define("t.ptx.j2", {"dims": (tuple[int, ...], baked((1, 2))),
                               "rows": (tuple[tuple[int, ...], ...], baked(((1,),))),
                               "pair": (tuple[int, float], baked((1, 2.0)))},
                  template_dir=tmp_path)
    with pytest.raises(SpecError) as info:
        cls(**values)
    assert type(info.value) is SpecError and str(info.value) == expected


def test_refused_values_take_the_article_their_type_name_is_read_with():
    """'(got 5, an int)', 'an object', 'a str': the article follows the type's name."""
    from specdsl.kernels import RMSNorm

    dtypes = "DType, one of 'f32', 'f16', 'bf16'"  # the types its validator allows
    for value, got in [(5, "5, an int"), ("x", "'x', a str"), (2.5, "2.5, a float")]:
        with pytest.raises(SpecError) as info:
            RMSNorm(hidden=4096, dtype=value)
        assert type(info.value) is SpecError
        assert str(info.value) == f"RMSNorm.dtype must be a {dtypes} (got {got})"
    with pytest.raises(SpecError) as info:
        RMSNorm(hidden=object())
    assert re.fullmatch(r"RMSNorm\.hidden must be an int \(got <object object at 0x\w+>, an "
                        r"object\)", str(info.value))


def test_enum_message_lists_what_the_validator_allows(tmp_path):
    """A refused enum value's message lists the members the field's validator allows
    (``attrs.validators.in_``, or a check with ``choices``), else every member."""
    (tmp_path / "t.ptx.j2").write_text(".entry {{ entry }} // {{ a }} {{ b }} {{ c }}\n")
    narrow = _define("t.ptx.j2", {
        "a": (DType, baked(DType.F32, validator=attrs.validators.in_([DType.F32, DType.BF16]))),
        "b": (DType, baked(DType.F16, validator=[lambda v: True,
                                                 attrs.validators.in_((DType.F16,))])),
        "c": (DType, baked(DType.F32))}, template_dir=tmp_path)
    for field, listed in [("a", "a DType, one of 'f32', 'bf16'"),
                          ("b", "a DType, one of 'f16'"),
                          ("c", "a DType ('f32', 'f16', 'bf16', 'f8e4m3',")]:
        with pytest.raises(SpecError, match=rf"^Bad\.{field} must be {re.escape(listed)}"):
            narrow(**{field: "fp99"})
    with pytest.raises(SpecError, match=r"^Bad\.a = DType\.F16 is invalid"):
        narrow(a="f16")  # a member it does not allow: the validator's own message


def test_ndarray_value_takes_an():
    """A NumPy array given for an int field: '(got array([8]), an ndarray)'."""
    np = pytest.importorskip("numpy")
    with pytest.raises(SpecError) as info:
        Toy(n=np.array([8]))
    assert str(info.value) == "Toy.n must be an int (got array([8]), an ndarray)"


def test_enum_field_named_with_a_vowel_takes_an(tmp_path):
    """An enum type read with a vowel sound: 'must be an Order (...)'."""
    import enum

    class Order(enum.Enum):
        ROW = "row"

    (tmp_path / "t.ptx.j2").write_text(".entry {{ entry }} // {{ order }}\n")
    cls = _define("t.ptx.j2", {"order": (Order, baked(Order.ROW))}, template_dir=tmp_path)
    with pytest.raises(SpecError) as info:
        cls(order=1)
    assert str(info.value) == "Bad.order must be an Order ('row') (got 1, an int)"


def test_spec_error_is_value_error():
    """SpecError is also a ValueError for callers that do not know specdsl."""
    with pytest.raises(ValueError):
        Toy(n=-1)


def test_numpy_scalars_accepted():
    """NumPy integer and float scalars are accepted and normalized to Python types."""
    np = pytest.importorskip("numpy")
    toy = Toy(n=np.int64(8), scale=np.float32(0.5))
    assert type(toy.n) is int and toy.n == 8 and toy.scale == 0.5


def test_dtype_fields_take_aliases_and_foreign_dtypes():
    """A DType field takes torch's and NumPy's names and NumPy dtypes."""
    np = pytest.importorskip("numpy")
    assert Toy(dtype="bfloat16").dtype is DType.BF16
    assert Toy(dtype=np.float16).dtype is DType.F16
    assert Toy(dtype=np.dtype("float32")).dtype is DType.F32
    assert Toy(dtype="half") == Toy(dtype="f16")


def test_dtype_field_says_why_a_name_is_ambiguous():
    """An ambiguous dtype name is refused naming the field, the valid names and the reason."""
    with pytest.raises(SpecError, match=r"^Toy.dtype must be a DType \('f32', 'f16', .*\) \(got "
                                        r"'float', a str\): 'float' is refused: ambiguous: "
                                        r"float32 in torch"):
        Toy(dtype="float")


def test_numpy_array_refused():
    """An array is not a scalar."""
    np = pytest.importorskip("numpy")
    with pytest.raises(SpecError, match=r"Toy\.n must be an int"):
        Toy(n=np.array([8]))


def _define(template: str, body: dict, *, template_dir=TEMPLATES):
    namespace = {"__annotations__": {k: v[0] for k, v in body.items()},
                 **{k: v[1] for k, v in body.items()}, "__module__": __name__}
    cls = type("Bad", (), namespace)
    return kernel_spec(template=template, entry="toy", template_dir=template_dir)(cls)


def test_field_without_role_refused():
    """Every field needs a role."""
    with pytest.raises(SpecDefinitionError, match=r"Bad.n has no role: declare it with baked"):
        _define("toy.ptx.j2", {"n": (int, 3)})


def test_missing_template_refused():
    """A missing template fails at class definition, naming the class and the template."""
    with pytest.raises(SpecDefinitionError, match=r"Bad: template 'nope.ptx.j2' not found"):
        _define("nope.ptx.j2", {"n": (int, baked(3))})


def test_template_reading_launch_field_refused(tmp_path):
    """A template that reads a launch field fails at class definition."""
    (tmp_path / "t.ptx.j2").write_text(".entry {{ entry }} // {{ block }}\n")
    with pytest.raises(SpecDefinitionError,
                       match=r"Bad: template 't.ptx.j2' reads launch field 'block'"):
        _define("t.ptx.j2", {"block": (int, launch(128))}, template_dir=tmp_path)


def test_template_reading_unknown_name_refused(tmp_path):
    """A template that reads a name that is no baked field fails, naming the variable."""
    (tmp_path / "t.ptx.j2").write_text(".entry {{ entry }} // {{ hiden }}\n")
    with pytest.raises(SpecDefinitionError, match=r"reads 'hiden', which is neither a baked"):
        _define("t.ptx.j2", {"hidden": (int, baked(8))}, template_dir=tmp_path)


def test_included_template_names_checked(tmp_path):
    """Names read by an included template are checked too, and the error names the file
    that reads the name, not only the spec's own template."""
    (tmp_path / "t.ptx.j2").write_text('.entry {{ entry }}\n{% include "inc.ptx.j2" %}\n')
    (tmp_path / "inc.ptx.j2").write_text("// {{ block }} {{ hiden }}\n")
    with pytest.raises(SpecDefinitionError, match=re.escape(
            "Bad: template 'inc.ptx.j2' (reached from 't.ptx.j2') reads launch field 'block'")):
        _define("t.ptx.j2", {"block": (int, launch(1))}, template_dir=tmp_path)
    with pytest.raises(SpecDefinitionError, match=re.escape(
            "Bad: template 'inc.ptx.j2' (reached from 't.ptx.j2') reads 'hiden', which")):
        _define("t.ptx.j2", {"block": (int, baked(1))}, template_dir=tmp_path)


def test_launch_field_through_a_dynamic_include_is_named_at_render(tmp_path):
    """A launch field read through a dynamic include (unseen at definition) fails at render
    as a launch field, naming the included file and its line, not as 'block' is undefined."""
    from specdsl import render
    from specdsl.errors import RenderError

    (tmp_path / "t.ptx.j2").write_text('{% include "header.ptx.j2" %}\n{% include part %}\n'
                                       '.visible .entry {{ entry }}()\n{\n    ret;\n}\n')
    (tmp_path / "inc.ptx.j2").write_text("// n\n// {{ block }}\n")
    cls = _define("t.ptx.j2", {"part": (str, baked("inc.ptx.j2")), "block": (int, launch(1))},
                  template_dir=tmp_path)
    with pytest.raises(RenderError, match=re.escape(
            "template 't.ptx.j2' ('inc.ptx.j2' line 2, reached from it) reads launch field "
            "'block'; launch fields never reach the PTX")):
        render(cls())


def test_ptx_vector_brace_hint(tmp_path):
    """'{%r1' in PTX opens a Jinja tag; the error says how to write it."""
    (tmp_path / "t.ptx.j2").write_text(".entry {{ entry }}\nld.v2.b32 {%r1, %r2}, [x];\n")
    with pytest.raises(SpecDefinitionError, match=r"write it with a space, '\{ %r1"):
        _define("t.ptx.j2", {"n": (int, baked(1))}, template_dir=tmp_path)


@pytest.mark.parametrize("line, message", [
    ("// {{ n | f31 }}", "No filter named 'f31'."),
    ("// {{ n is nosuchtest }}", "No test named 'nosuchtest'."),
])
def test_unknown_filter_or_test_names_the_template(tmp_path, line, message):
    """An unknown filter or test is refused at definition naming the template file and
    line (Jinja's introspection calls every template '<introspection>')."""
    (tmp_path / "t.ptx.j2").write_text(f".entry {{{{ entry }}}}\n\n{line}\n")
    with pytest.raises(SpecDefinitionError) as info:
        _define("t.ptx.j2", {"n": (int, baked(1))}, template_dir=tmp_path)
    assert str(info.value) == f"Bad: template 't.ptx.j2' line 3: {message}"


@pytest.mark.parametrize("line, message", [
    ("// {{ n | f31 }}", "No filter named 'f31'."),
    ("// {{ n is nosuchtest }}", "No test named 'nosuchtest'."),
    ("{% if %}", "Expected an expression, got 'end of statement block'"),
])
def test_error_in_an_included_template_names_it_as_a_render_error_does(tmp_path, line,
                                                                      message):
    """A definition error in an included file names the spec's template and the file
    and line it reaches, as a render error names them."""
    (tmp_path / "t.ptx.j2").write_text('.entry {{ entry }}\n{% include "inc.ptx.j2" %}\n')
    (tmp_path / "inc.ptx.j2").write_text(f"// one\n{line}\n")
    with pytest.raises(SpecDefinitionError) as info:
        _define("t.ptx.j2", {"n": (int, baked(1))}, template_dir=tmp_path)
    assert str(info.value) == (
        f"Bad: template 't.ptx.j2' ('inc.ptx.j2' line 2, reached from it): {message}")


def test_unknown_test_in_an_if_names_the_file_at_render(tmp_path):
    """Jinja leaves an unknown test inside {% if %} to run time; the render error names
    the included file and its line."""
    from specdsl import render
    from specdsl.errors import RenderError

    (tmp_path / "t.ptx.j2").write_text('{% include "header.ptx.j2" %}\n'
                                       '{% include "inc.ptx.j2" %}\n'
                                       '.visible .entry {{ entry }}()\n{\n    ret;\n}\n')
    (tmp_path / "inc.ptx.j2").write_text("// n\n{% if n is nosuchtest %}//{% endif %}\n")
    cls = _define("t.ptx.j2", {"n": (int, baked(1))}, template_dir=tmp_path)
    with pytest.raises(RenderError) as info:
        render(cls())
    assert str(info.value) == ("Bad(n=1): template 't.ptx.j2' ('inc.ptx.j2' line 2, reached "
                               "from it): No test named 'nosuchtest' found.")


def test_reserved_field_name_refused():
    """'target' and 'entry' are context names, not fields."""
    with pytest.raises(SpecDefinitionError, match=r"Bad\.target: the name is reserved"):
        _define("toy.ptx.j2", {"target": (str, baked("x"))})


def test_unsupported_type_refused():
    """A field type the key cannot see exactly is refused at definition."""
    with pytest.raises(SpecDefinitionError, match="unsupported field type"):
        _define("toy.ptx.j2", {"n": (list, baked(None))})


def test_missing_template_dir_refused(tmp_path):
    """template_dir must be a folder."""
    with pytest.raises(SpecDefinitionError, match="is not a folder"):
        _define("toy.ptx.j2", {"n": (int, baked(1))}, template_dir=tmp_path / "missing")


def test_bad_entry_refused():
    """The entry must be a PTX identifier."""
    with pytest.raises(SpecDefinitionError, match="entry must be an identifier"):
        kernel_spec(template="toy.ptx.j2", entry="my-kernel")


def test_plain_one_argument_validators(tmp_path):
    """A validator may be a plain check(value), alone or in a list with attrs validators."""
    def positive(value):
        if value <= 0:
            raise ValueError("expected a positive value")

    cls = _define("toy.ptx.j2", {
        "scale": (float, baked(1.0, validator=[positive, attrs.validators.le(10.0)])),
        "offset": (float, baked(0.0)), "n": (int, baked(4)), "dtype": (DType, baked(DType.F32)),
        "flag": (bool, baked(False)), "limit": (int | None, baked(None)),
        "mode": (str, baked("fast")), "dims": (tuple[int, ...], baked((1,))),
    })
    assert cls(scale=2.0).scale == 2.0
    with pytest.raises(SpecError,
                       match=r"^Bad\.scale = -1\.0 is invalid: expected a positive value$"):
        cls(scale=-1.0)
    with pytest.raises(SpecError, match=r"^Bad.scale = 11.0 is invalid: 'scale' must be <= 10.0"):
        cls(scale=11.0)


def test_attrs_validator_message_is_readable():
    """attrs' own validators give their message, not a tuple of their internals."""
    cls = _define("legacy.ptx.j2", {
        "n": (int, baked(1)), "scale": (float, baked(1.0)),
        "block": (int, launch(256, validator=attrs.validators.in_([128, 256]))),
    })
    with pytest.raises(SpecError) as info:
        cls(block=100)
    assert str(info.value) == "Bad.block = 100 is invalid: 'block' must be in [128, 256] (got 100)"


@pytest.mark.parametrize("default, kind", [(1, "int"), (True, "bool"), ("x", "str"),
                                           (DType.F32, "DType"), (None, "float")])
def test_unannotated_field_refused(default, kind):
    """A field without an annotation says how to write one, of its default's type."""
    namespace = {"__module__": __name__, "__annotations__": {"scale": float},
                 "n": baked(default), "scale": baked(1.0)}
    with pytest.raises(SpecDefinitionError, match=rf"^Bad.n has no type annotation: write "
                                                  rf"'n: {kind} = baked\(\.\.\.\)' "):
        kernel_spec(template="legacy.ptx.j2", entry="x", template_dir=TEMPLATES)(
            type("Bad", (), namespace))


def test_unread_baked_field_warns(tmp_path):
    """A baked field the template never reads is reported at class definition."""
    from specdsl import UnreadFieldWarning

    (tmp_path / "t.ptx.j2").write_text(".entry {{ entry }} // {{ n }}\n")
    with pytest.warns(UnreadFieldWarning, match=r"Bad: template 't.ptx.j2' never reads baked "
                                                r"field\(s\) dtype: each value compiles"):
        _define("t.ptx.j2", {"n": (int, baked(1)), "dtype": (DType, baked(DType.F32))},
                template_dir=tmp_path)


# -- validators: every way of saying "no" refuses -----------------------------------------

def _scaled(validator=None, converter=None, default=1.0, **extra):
    """A spec over the legacy template whose 'scale' field takes ``validator``/``converter``."""
    return _define("legacy.ptx.j2", {
        "n": (int, baked(1)),
        "scale": (float, baked(default, validator=validator, converter=converter)),
        **extra,
    })


def test_validator_returning_false_refuses():
    """baked(validator=lambda v: v > 0) refuses -1.0: a False return is a refusal."""
    cls = _scaled(validator=lambda v: v > 0)
    assert cls(scale=2.0).scale == 2.0
    with pytest.raises(SpecError, match=r"^Bad.scale = -1.0 is invalid: validator .*<lambda> "
                                        r"returned False$"):
        cls(scale=-1.0)


def test_validator_returning_numpy_false_refuses():
    """A NumPy bool False refuses like False."""
    np = pytest.importorskip("numpy")
    cls = _scaled(validator=lambda v: np.float64(v) > 0)
    with pytest.raises(SpecError, match="returned False"):
        cls(scale=-1.0)


def test_attrs_protocol_validator_returning_false_refuses():
    """A check(instance, attribute, value) that returns False refuses too."""
    def positive(instance, attribute, value):
        return value > 0

    with pytest.raises(SpecError, match=r"Bad.scale = -1.0 is invalid: validator .*positive "
                                        r"returned False"):
        _scaled(validator=positive)(scale=-1.0)


def test_false_return_refuses_inside_a_list():
    """In a list with attrs validators, a False return still refuses (attrs' and_ ignores
    return values, so each check is read on its own)."""
    cls = _scaled(validator=[attrs.validators.le(10.0), lambda v: v != 3.0])
    assert cls(scale=2.0).scale == 2.0
    with pytest.raises(SpecError, match="returned False"):
        cls(scale=3.0)
    with pytest.raises(SpecError, match=r"must be <= 10\.0"):
        cls(scale=11.0)


def test_launch_field_validator_returning_false_refuses():
    """Launch fields read their validators' verdicts the same way."""
    cls = _define("legacy.ptx.j2", {
        "n": (int, baked(1)), "scale": (float, baked(1.0)),
        "block": (int, launch(128, validator=lambda b: b % 32 == 0)),
    })
    with pytest.raises(SpecError, match=r"Bad.block = 100 is invalid: .*returned False"):
        cls(block=100)


def test_assertion_in_validator_is_a_spec_error():
    """An assert in a validator refuses with its message; a bare assert names the check."""
    def under_ten(value):
        assert value < 10, "expected a value under 10"

    namespace: dict = {}  # compiled here, not in this module, which pytest rewrites
    exec("def bare(value):\n    assert value != 5\n", namespace)
    cls = _scaled(validator=[under_ten, namespace["bare"]])
    with pytest.raises(SpecError, match=r"^Bad.scale = 12.0 is invalid: expected a value under "
                                        r"10"):
        cls(scale=12.0)
    with pytest.raises(SpecError, match=r"Bad.scale = 5.0 is invalid: validator .*bare failed "
                                        r"an assert"):
        cls(scale=5.0)


@pytest.mark.parametrize("verdict", [0, "", "no", [], 1])
def test_ambiguous_validator_return_refused(verdict):
    """A return that is neither None nor a bool (0, '', a list, a regex match) is refused as
    ambiguous, never read as a pass or a fail."""
    with pytest.raises(SpecError, match=re.escape(f"returned {verdict!r}; a validator accepts "
                                                  "by returning None or True")):
        _scaled(validator=lambda v: verdict if v == 2.0 else None)(scale=2.0)


def test_validator_returning_none_or_true_accepts():
    """None (the attrs protocol) and True both accept."""
    assert _scaled(validator=[lambda v: None, lambda v: True])(scale=2.0).scale == 2.0


# -- converters: attrs' forms --------------------------------------------------------------

needs_converter = pytest.mark.skipif(not hasattr(attrs, "Converter"),
                                     reason="attrs.Converter needs attrs >= 24.1")


@needs_converter
def test_converter_taking_self_sees_earlier_fields():
    """attrs.Converter(f, takes_self=True) gets the instance, with earlier fields set."""
    def times_n(value, instance):
        return value * instance.n

    cls = _scaled(converter=attrs.Converter(times_n, takes_self=True))
    assert cls(n=3, scale=2.0).scale == 6.0


@needs_converter
def test_converter_taking_field_gets_the_attribute():
    """attrs.Converter(f, takes_field=True) gets the field's attrs Attribute."""
    seen = []

    def record(value, field):
        seen.append(field.name)
        return value

    cls = _scaled(converter=attrs.Converter(record, takes_field=True))
    seen.clear()  # the definition checked the default through it
    assert cls(scale=2).scale == 2.0
    assert seen == ["scale"]


@needs_converter
def test_converter_taking_self_and_field():
    """takes_self and takes_field together pass (value, instance, field)."""
    def both(value, instance, field):
        return value + instance.n + len(field.name)

    cls = _scaled(converter=attrs.Converter(both, takes_self=True, takes_field=True))
    assert cls(n=2, scale=1.0).scale == 1.0 + 2 + len("scale")


def test_list_of_converters_runs_in_order():
    """A list of converters runs left to right, as attrs.converters.pipe does; the result
    is then coerced to the field's type."""
    cls = _scaled(converter=[str.strip, float, abs], default="1.0")
    assert cls(scale=" -2.5 ").scale == 2.5
    assert _scaled(converter=attrs.converters.pipe(str.strip, float),
                   default="1")(scale=" 3 ").scale == 3.0


@needs_converter
def test_pipe_with_a_converter_taking_self():
    """A pipe holding an attrs.Converter with takes_self passes the instance through."""
    cls = _scaled(converter=[float, attrs.Converter(lambda v, inst: v * inst.n,
                                                    takes_self=True)])
    assert cls(n=4, scale="0.5").scale == 2.0


@needs_converter
def test_converter_errors_name_the_field():
    """A converter's ValueError, TypeError or AssertionError is a SpecError naming the field."""
    def strict(value, instance):
        assert value != 0, "zero is not a scale"
        return value

    cls = _scaled(converter=attrs.Converter(strict, takes_self=True))
    with pytest.raises(SpecError, match=r"^Bad.scale = 0 is invalid: zero is not a scale"):
        cls(scale=0)
    with pytest.raises(SpecError, match=r"^Bad.scale = 'x' is invalid: could not convert"):
        _scaled(converter=float)(scale="x")


# -- classes attrs or dataclasses already made ---------------------------------------------

@pytest.mark.parametrize("maker, name", [
    (attrs.define, "attrs"), (attrs.frozen, "attrs"), (attrs.mutable, "attrs"),
    (__import__("dataclasses").dataclass, "dataclasses"),
    (__import__("dataclasses").dataclass(frozen=True), "dataclasses"),
])
def test_class_already_made_is_refused(maker, name):
    """@kernel_spec over @attrs.define/@attrs.frozen/@dataclass says what to write instead."""
    namespace = {"__annotations__": {"n": int, "scale": float}, "n": baked(1),
                 "scale": baked(1.0), "__module__": __name__}
    made = maker(type("Made", (), namespace))
    with pytest.raises(SpecDefinitionError, match=rf"Made is already a class made by {name}: "
                                                  r"@kernel_spec makes the .* Remove the "
                                                  r"@attrs.define"):
        kernel_spec(template="legacy.ptx.j2", entry="x", template_dir=TEMPLATES)(made)


def test_subclass_of_a_spec_is_still_a_spec():
    """A plain subclass of a spec class (which inherits attrs' fields) is not refused."""
    @kernel_spec(template="toy.ptx.j2", entry="toy", template_dir=TEMPLATES)
    class Keyed(Toy):
        def key(self):
            return f"toy-{self.n}"

    assert Keyed(n=8).n == 8 and Keyed(n=8).key() == "toy-8"


# -- bad calls: every one a SpecError naming the class and the fields -----------------------

def test_missing_required_field_is_a_spec_error():
    """RMSNorm() names the class and the missing field; the error is a SpecError (so a
    ValueError) and still the TypeError a bad call always was."""
    from specdsl import SpecArgumentError
    from specdsl.kernels import RMSNorm

    with pytest.raises(SpecArgumentError) as info:
        RMSNorm()
    assert str(info.value) == ("RMSNorm is missing required field(s) 'hidden' (baked) (no "
                               "default): write RMSNorm(hidden=...)")
    assert isinstance(info.value, SpecError) and isinstance(info.value, ValueError)
    assert isinstance(info.value, TypeError)


def test_every_missing_field_is_named():
    """Two missing required fields are both named, with their roles."""
    cls = _define("legacy.ptx.j2", {"n": (int, baked()), "scale": (float, baked()),
                                    "block": (int, launch())})
    with pytest.raises(SpecError, match=r"Bad is missing required field\(s\) 'scale' \(baked\), "
                                        r"'block' \(launch\) \(no default\): write "
                                        r"Bad\(scale=\.\.\., block=\.\.\.\)$"):
        cls(4)


def test_unknown_keyword_is_a_spec_error():
    """An unknown keyword names the class, the word, the fields and the nearest field."""
    with pytest.raises(SpecError, match=r"^Toy has no field 'scal' \(fields: scale, offset, n, "
                                        r"dtype, flag, limit, mode, dims, block\); did you mean "
                                        r"'scale'\?$"):
        Toy(scal=2.0)


def test_too_many_positional_values_is_a_spec_error():
    """More positional values than fields is refused, naming the fields in order."""
    with pytest.raises(SpecError, match=r"^Toy takes at most 9 field value\(s\) by position "
                                        r"\(scale, offset, n, .*block\), got 10"):
        Toy(1.0, 0.0, 8, "f32", False, None, "fast", (1,), 128, 7)


def test_positional_values_still_work():
    """Fields may still be given by position, in declaration order."""
    assert Toy(2.0, 1.0, 8) == Toy(scale=2.0, offset=1.0, n=8)


def test_checked_init_keeps_the_signature_and_shows_in_tracebacks():
    """inspect.signature shows the fields; a traceback shows the generated __init__'s line."""
    import inspect
    import traceback

    from specdsl.kernels import RMSNorm

    assert list(inspect.signature(RMSNorm).parameters) == [
        "hidden", "eps", "dtype", "fused_residual", "block", "rows_per_cta", "streaming_stores",
        "l2_evict_last", "min_ctas_per_sm"]
    try:
        RMSNorm(hidden=0)
    except SpecError as exc:
        frames = traceback.extract_tb(exc.__traceback__)
    assert any(f.filename.startswith("<specdsl __init__") and f.line for f in frames)


# -- text baked into PTX -------------------------------------------------------------------

def _labelled(tmp_path):
    (tmp_path / "label.ptx.j2").write_text(
        '{% include "header.ptx.j2" %}\n// {{ label }} {{ tags | join(",") }}\n'
        ".visible .entry {{ entry }}()\n{\n    ret;\n}\n")

    @kernel_spec(template="label.ptx.j2", entry="label", template_dir=tmp_path)
    class Label:
        label: str = baked("plain")
        tags: tuple[str, ...] = baked(())
        note: str = launch("")

    return Label


@pytest.mark.parametrize("text", [
    "x\n.visible .entry evil()\n{\n    ret;\n}", "a\rb", "cut\x00off", "tab\there", "caf\u00e9",
    "\x7f",
])
def test_baked_str_must_be_one_printable_ascii_line(tmp_path, text):
    """A baked str holding a newline (a second .entry), a NUL, a control character or
    non-ASCII text is refused at construction: it would be written into the PTX."""
    Label = _labelled(tmp_path)
    with pytest.raises(SpecError, match=r"Label.label must be one line of printable ASCII "
                                        r"text \(a baked str is written into the PTX\)"):
        Label(label=text)


def test_str_members_of_a_baked_tuple_are_checked(tmp_path):
    """Each str inside a baked tuple obeys the same rule, named by its position."""
    Label = _labelled(tmp_path)
    with pytest.raises(SpecError, match=r"Label.tags\[1\] must be one line of printable ASCII"):
        Label(tags=("ok", "two\nlines"))
    assert Label(tags=["a", "b c"]).tags == ("a", "b c")


def test_str_subclass_is_taken_as_its_text(tmp_path):
    """A str subclass whose __str__ says something else is stored as its plain text, so
    the template prints what was checked."""
    from specdsl import render

    class Sneaky(str):
        def __str__(self):
            return "ok\n.visible .entry evil()\n{ ret; }"

    Label = _labelled(tmp_path)
    request = Label(label=Sneaky("ok"))
    assert type(request.label) is str and request.label == "ok"
    assert render(request).count(".entry") == 1


def test_launch_str_is_not_written_into_ptx(tmp_path):
    """A launch str never reaches the template, so it may hold any text."""
    assert _labelled(tmp_path)(note="two\nlines").note == "two\nlines"
