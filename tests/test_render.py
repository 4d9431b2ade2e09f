"""Rendering: exact immediates, refusals, determinism across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptxcheck import assemble
from specdsl import RenderError, Target, render
from specdsl._render.render import render_context
from specdsl.kernels import VectorAdd
from userspecs import Toy

ROOT = Path(__file__).resolve().parent.parent


def test_immediates_in_output():
    """Baked floats reach the PTX as exact f32 immediates."""
    ptx = render(Toy(scale=1e-6, offset=-0.0))
    assert "mov.f32 %f1, 0f358637BD;" in ptx
    assert "mov.f32 %f2, 0f80000000;" in ptx


def test_header_carries_target():
    """The module header names the target and its PTX ISA version."""
    ptx = render(Toy(), "sm_100")
    assert ".version 8.6\n.target sm_100\n.address_size 64" in ptx


def test_toy_assembles():
    """The toy template assembles with nvJitLink for sm_90."""
    assemble(Toy(scale=3.5))


def test_context_has_no_launch_fields():
    """Templates see baked fields, target and entry, never launch fields."""
    context = render_context(Toy(block=64))
    assert "block" not in context
    assert context["target"] == Target.parse("sm_90") and context["entry"] == "toy"


def test_unrepresentable_value_refused():
    """A baked value the PTX type cannot hold fails rendering with the request named."""
    with pytest.raises(RenderError, match=r"Toy\(scale=1e\+39.*1e\+39 overflows f32"):
        render(Toy(scale=1e39))


def test_template_require_failure():
    """A template's require(...) failure is a RenderError naming the request."""
    with pytest.raises(RenderError, match=r"VectorAdd\(dtype=DType.BF16.*needs sm_90 or newer"):
        render(VectorAdd(dtype="bf16"), "sm_80")


def test_raw_float_refused(tmp_path):
    """Printing a raw float is refused: it would not be a PTX immediate."""
    from specdsl import baked, kernel_spec

    (tmp_path / "raw.ptx.j2").write_text(".entry {{ entry }} // {{ eps }}\n")

    @kernel_spec(template="raw.ptx.j2", entry="raw", template_dir=tmp_path)
    class Raw:
        eps: float = baked(1e-6)

    with pytest.raises(RenderError, match=r"raw float 1e-06; write it through .*\|f32"):
        render(Raw())


def test_nonfinite_field_needs_the_filters_consent(tmp_path):
    """allow_nonfinite=True lets a field hold inf, but |f32 still refuses it, saying how a
    template asks for it; |f32(allow_nonfinite=true) writes the infinity."""
    from specdsl import baked, kernel_spec

    header = '{% include "header.ptx.j2" %}\n'
    (tmp_path / "plain.ptx.j2").write_text(header + ".entry {{ entry }} // {{ bound | f32 }}\n")
    (tmp_path / "meant.ptx.j2").write_text(
        header + ".entry {{ entry }} // {{ bound | f32(allow_nonfinite=true) }}\n")

    @kernel_spec(template="plain.ptx.j2", entry="plain", template_dir=tmp_path)
    class Plain:
        bound: float = baked(float("inf"), allow_nonfinite=True)

    @kernel_spec(template="meant.ptx.j2", entry="meant", template_dir=tmp_path)
    class Meant:
        bound: float = baked(float("inf"), allow_nonfinite=True)

    with pytest.raises(RenderError, match=r"f32 immediate must be finite \(got inf\); .* "
                                          r"\| f32\(allow_nonfinite=true\)"):
        render(Plain())
    assert "// 0f7F800000" in render(Meant())


def test_underflow_message_gives_no_advice():
    """A value that rounds to zero says so and the smallest magnitude, without suggesting
    0.0 (which the field's own rule may refuse)."""
    with pytest.raises(RenderError, match=r"1e-50 rounds to zero in f32 \(its smallest "
                                          r"non-zero magnitude is 1.4013e-45\)$"):
        render(Toy(scale=1e-50))


def test_bad_target_refused():
    """A malformed target string is a TargetError (a ValueError)."""
    with pytest.raises(ValueError, match="must look like 'sm_90'"):
        render(Toy(), "hopper")


_CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
from specdsl import render, derived_key
from specdsl.kernels import VectorAdd
from userspecs import Toy
requests = [Toy(), Toy(scale=1e-6, offset=-0.0, dims=(3, 1), limit=0), VectorAdd(dtype="bf16")]
print(json.dumps([[render(r, t), derived_key(r, t)]
                  for r in requests for t in ("sm_90", "sm_90a")]))
"""


def test_deterministic_across_hash_seeds():
    """Two processes with different PYTHONHASHSEED render identical PTX and keys."""
    outputs = []
    for seed in ("1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", _CHILD.format(tests=str(ROOT / "tests"))],
                              env=env, capture_output=True, text=True, check=True)
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1]
    assert len({key for _, key in outputs[0]}) == 6


def test_missing_header_refused(tmp_path):
    """A template without .version/.target fails at render, saying to include the header."""
    from specdsl import kernel_spec

    (tmp_path / "bare.ptx.j2").write_text(".visible .entry {{ entry }}() { ret; }\n")

    @kernel_spec(template="bare.ptx.j2", entry="bare", template_dir=tmp_path)
    class Bare:
        pass

    with pytest.raises(RenderError, match=r"renders no .version/.target directive: start it "
                                          r"with \{% include \"header.ptx.j2\" %\}"):
        render(Bare())


def test_rendering_digest_is_the_source_digest():
    """rendering_digest() names specdsl's code: it is specdsl._base.digest.source_digest()."""
    import importlib

    from specdsl._base.digest import source_digest

    # the module (the package exports the function render())
    render_module = importlib.import_module("specdsl._render.render")
    assert render_module.rendering_digest() == source_digest()


def test_renders_from_key_only_for_plain_values():
    """Plain data and specdsl enums qualify; a user enum's methods do not."""
    from specdsl._render.render import renders_from_key
    from specdsl.kernels import RMSNorm
    from userspecs import Toy, UserEnumSpec

    assert renders_from_key(RMSNorm(hidden=4096)) and renders_from_key(Toy())
    assert not renders_from_key(UserEnumSpec())


def _printing(tmp_path, line: str, **fields):
    """A spec whose template prints ``line`` (with the given baked fields) in a comment."""
    from specdsl import kernel_spec

    (tmp_path / "p.ptx.j2").write_text('{% include "header.ptx.j2" %}\n// ' + line +
                                       "\n.visible .entry {{ entry }}()\n{\n    ret;\n}\n")
    namespace = {"__annotations__": {k: v[0] for k, v in fields.items()},
                 **{k: v[1] for k, v in fields.items()}, "__module__": __name__}
    return kernel_spec(template="p.ptx.j2", entry="p", template_dir=tmp_path)(
        type("Printer", (), namespace))


def test_object_printing_more_than_one_line_refused(tmp_path):
    """A field value whose text (a user enum's __str__) holds a newline would add PTX
    statements: printing it is a RenderError."""
    import enum

    from specdsl import baked

    class Evil(enum.Enum):
        ONE = "one"

        def __str__(self):
            return "one\n.visible .entry evil()\n{ ret; }"

    cls = _printing(tmp_path, "{{ mode }}", mode=(Evil, baked(Evil.ONE)))
    with pytest.raises(RenderError, match=r"template printed <Evil.ONE: 'one'> as 'one\\n"
                                          r"\.visible .*not one line of printable ASCII"):
        render(cls())


def test_printed_control_character_refused(tmp_path):
    """A printed str holding a control character (here a Literal option, which the class
    author chose) is a RenderError, whatever its source."""
    from typing import Literal

    from specdsl import baked

    cls = _printing(tmp_path, "{{ mode }}", mode=(Literal["a\x1bb"], baked("a\x1bb")))
    with pytest.raises(RenderError, match=r"template printed 'a\\x1bb', which holds '\\x1b'"):
        render(cls())


def test_multi_line_macro_output_is_printed(tmp_path):
    """A macro's output may span lines: it is the template's own text."""
    cls = _printing(tmp_path, '{% macro two() %}// one\n// two{% endmacro %}{{ two() }}')
    assert "// // one\n// two\n.visible .entry p()" in render(cls())


def test_control_character_in_template_text_refused(tmp_path):
    """A NUL in a template's own text (which nvJitLink would stop reading at) is a
    RenderError naming the PTX line (the header takes lines 1 to 6)."""
    cls = _printing(tmp_path, "cut\x00here")
    with pytest.raises(RenderError, match=r"renders the control character '\\x00' on PTX line "
                                          r"7; PTX source is printable ASCII"):
        render(cls())


@pytest.mark.parametrize("line, message", [
    ("{{ dtype.ptx_name }}", "a DType has no attribute 'ptx_name' (a template reads ptx, "
                             "storage, bits, size, vector_lanes, is_float and name)"),
    ("{{ target.smm }}", "a Target has no attribute 'smm' (a template reads sm, arch, suffix, "
                         "ptx_isa, ptx_version and compute_capability)")])
def test_a_missing_attribute_lists_what_a_template_reads(tmp_path, line, message):
    """An attribute a DType or Target lacks is named with those it has, not as
    'specdsl._spec.dtype.DType object' (a private module path)."""
    from specdsl import DType, baked

    cls = _printing(tmp_path, line, dtype=(DType, baked(DType.F32)))
    with pytest.raises(RenderError) as caught:
        render(cls())
    assert str(caught.value).endswith(f"template 'p.ptx.j2' line 2: {message}")
    assert "specdsl._spec" not in str(caught.value)
    for name in message.partition("reads ")[2].rstrip(")").replace(" and", ",").split(", "):
        assert not isinstance(getattr(DType.F32 if "DType" in message else Target.parse(90),
                                      name), type(None)), name


def test_a_user_class_named_like_ours_keeps_jinja_s_message(tmp_path):
    """Only specdsl's own DType and Target get the list: a user's enum named Target keeps
    Jinja's message, which names its class."""
    import enum

    from specdsl import baked

    class Target(enum.Enum):  # the user's own, named like specdsl's on purpose
        WIDE = "wide"

    cls = _printing(tmp_path, "{{ kind.width }}", kind=(Target, baked(Target.WIDE)))
    with pytest.raises(RenderError, match=r"line 2: '.*Target object' has no attribute "
                                          r"'width'$"):
        render(cls())
