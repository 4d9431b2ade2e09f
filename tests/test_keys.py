"""Derived keys: complete by construction, stable, distinct wherever the PTX may differ."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specdsl import DType, RenderError, SpecDefinitionError, derived_key, hand_key, render
from specdsl._render.keys import DIGEST_HEX
from specdsl.kernels import ALL, VectorAdd
from strategies import TARGETS, launch_variations, requests, variations
from userspecs import Toy


def test_shape():
    """A derived key is the entry name plus at least 128 bits of hex digest."""
    key = derived_key(Toy())
    prefix, digest = key.rsplit("-", 1)
    assert prefix == "toy" and len(digest) == DIGEST_HEX and DIGEST_HEX * 4 >= 128
    int(digest, 16)


def test_launch_fields_do_not_enter():
    """Requests differing only in launch fields share a key (and a module)."""
    assert derived_key(Toy(block=32)) == derived_key(Toy(block=1024))


@pytest.mark.parametrize("a, b", [
    (Toy(offset=0.0), Toy(offset=-0.0)),
    (Toy(limit=None), Toy(limit=0)),
    (Toy(mode=1), Toy(mode=True)),
    (Toy(dtype="f16"), Toy(dtype="bf16")),
    (Toy(dims=(1, 2)), Toy(dims=(12,))),
])
def test_distinct_where_ptx_differs(a, b):
    """Values that render differently never share a derived key."""
    assert render(a) != render(b)
    assert derived_key(a) != derived_key(b)


def test_target_suffix_distinct():
    """sm_90 and sm_90a give different keys (and different PTX)."""
    assert derived_key(Toy(), "sm_90") != derived_key(Toy(), "sm_90a")
    assert render(Toy(), "sm_90") != render(Toy(), "sm_90a")


def test_vector_add_dtypes_distinct():
    """f16 and bf16 VectorAdd have distinct keys."""
    keys = {derived_key(VectorAdd(dtype=d)) for d in (DType.F32, DType.F16, DType.BF16)}
    assert len(keys) == 3


def test_target_as_string_or_object():
    """A target string and the equal Target give the same key."""
    from specdsl import Target

    assert derived_key(Toy(), "sm_90a") == derived_key(Toy(), Target.parse("sm_90a"))


_EDITED = """
import sys
from pathlib import Path
from specdsl import baked, kernel_spec, derived_key
folder = Path({folder!r})
(folder / "inc.ptx.j2").write_text({include!r})
@kernel_spec(template="main.ptx.j2", entry="k", template_dir=folder)
class K:
    n: int = baked(1)
print(derived_key(K()))
"""


@pytest.mark.parametrize("how", ["include", "import"])
def test_editing_a_reached_template_changes_the_key(tmp_path, how):
    """Editing an included or imported template changes the derived key."""
    if how == "include":
        main = '.entry {{ entry }}\n{% include "inc.ptx.j2" %}\n'
    else:
        main = '{% import "inc.ptx.j2" as m %}.entry {{ entry }}\n{{ m.body() }}\n'
    (tmp_path / "main.ptx.j2").write_text(main)
    keys = []
    for body in ("{% macro body() %}ret;{% endmacro %}ret;",
                 "{% macro body() %}exit;{% endmacro %}exit;"):
        code = _EDITED.format(folder=str(tmp_path), include=body)
        keys.append(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                   text=True, check=True).stdout.strip())
    assert keys[0].startswith("k-") and keys[0] != keys[1]


def test_template_pinned_within_a_process(tmp_path):
    """Within a process a template is read once: key and PTX stay consistent after an edit."""
    from specdsl import baked, kernel_spec

    (tmp_path / "p.ptx.j2").write_text('{% include "header.ptx.j2" %}\n.entry {{ entry }} // one\n')

    @kernel_spec(template="p.ptx.j2", entry="p", template_dir=tmp_path)
    class P:
        n: int = baked(1)

    before = (render(P()), derived_key(P()))
    (tmp_path / "p.ptx.j2").write_text('{% include "header.ptx.j2" %}\n.entry {{ entry }} // two\n')

    @kernel_spec(template="p.ptx.j2", entry="p", template_dir=tmp_path)
    class P:
        n: int = baked(1)

    assert (render(P()), derived_key(P())) == before


def test_hand_key_absent():
    """Specs without key() have no hand-written key."""
    assert hand_key(Toy()) is None


def test_hand_key_must_be_str(tmp_path):
    """A key() returning a non-string is a definition error."""
    from specdsl import baked, kernel_spec

    (tmp_path / "h.ptx.j2").write_text(".entry {{ entry }} // {{ n }}\n")

    @kernel_spec(template="h.ptx.j2", entry="h", template_dir=tmp_path)
    class H:
        n: int = baked(1)

        def key(self):
            return self.n

    with pytest.raises(SpecDefinitionError, match=r"H.key\(\) must return a non-blank str"):
        hand_key(H())
    H.key = lambda self: "   "  # blank, like empty, names nothing
    with pytest.raises(SpecDefinitionError,
                       match=r"H.key\(\) must return a non-blank str \(got '   '\)"):
        hand_key(H())


SPEC_CLASSES = (Toy, *ALL)


def _key_inputs(spec, target) -> tuple:
    """What a derived key is made of: the class, each baked field's canonical value, the
    target (the template digests are fixed within a process)."""
    from specdsl import Target
    from specdsl._spec.decorator import baked_values
    from specdsl._spec.fields import canonical

    return (type(spec), tuple(canonical(v) for v in baked_values(spec).values()),
            Target.parse(target))


@st.composite
def _pairs(draw):
    """(a, target a, b, target b): half the time b is a with its launch fields redrawn on
    the same target (equal keys by the rules), else a near neighbour or any request on
    any target (near neighbours collide often on some fields)."""
    cls = draw(st.sampled_from(SPEC_CLASSES))
    a, ta = draw(requests(cls)), draw(TARGETS)
    if draw(st.booleans()):
        return a, ta, draw(launch_variations(a)), ta
    return a, ta, draw(st.one_of(requests(cls), variations(a))), draw(TARGETS)


# Most random field combinations of the kernel specs are refused by their validators (and
# filtered out): expected, so the filter health check is off for these tests.
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(_pairs())
def test_equal_keys_imply_equal_ptx(pair):
    """For random pairs of requests drawn to collide often: equal derived keys => identical
    PTX. (The converse is not promised: see test_equal_ptx_need_not_share_a_key.)"""
    a, ta, b, tb = pair
    same_key = derived_key(a, ta) == derived_key(b, tb)
    event("same derived key" if same_key else "different derived keys")
    if not same_key:
        return
    try:
        ptx_a = render(a, ta)
    except RenderError:  # a request the target cannot render: so must its equal be
        with pytest.raises(RenderError):
            render(b, tb)
        return
    assert render(b, tb) == ptx_a


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(_pairs())
def test_equal_keys_iff_equal_baked_values_and_target(pair):
    """For random pairs: equal derived keys <=> same class, same canonical baked values and
    same target. Keys see every baked value (no forgotten field) and nothing else (no
    launch field, no salt)."""
    a, ta, b, tb = pair
    same_inputs = _key_inputs(a, ta) == _key_inputs(b, tb)
    event("same key inputs" if same_inputs else "different key inputs")
    assert (derived_key(a, ta) == derived_key(b, tb)) == same_inputs


def test_equal_ptx_need_not_share_a_key():
    """Equal PTX does not imply equal keys: two scales that round to one f32 immediate render
    the same PTX under two keys (a redundant compile, never a wrong kernel)."""
    a, b = Toy(scale=1e-6), Toy(scale=1.0000000001e-6)
    assert render(a) == render(b) and derived_key(a) != derived_key(b)


def test_int_enum_members_are_not_ints():
    """IntEnum members keep their class and name apart from the equal int."""
    import enum

    from specdsl._spec.fields import canonical

    class Level(enum.IntEnum):
        LOW = 1

    class Other(enum.IntEnum):
        LOW = 1

    assert canonical(Level.LOW) != canonical(1)
    assert canonical(Level.LOW) != canonical(Other.LOW)
    assert canonical(Level.LOW) == canonical(Level.LOW)


def test_flag_combinations_without_names_stay_apart():
    """IntFlag values that have no member name of their own keep distinct canonical forms."""
    import enum

    from specdsl._spec.fields import canonical

    class Flags(enum.IntFlag):
        A = 1
        B = 2

    assert canonical(Flags(0)) != canonical(Flags(4)) != canonical(Flags(8))
    assert canonical(Flags.A | Flags.B) == canonical(Flags(3))


@pytest.mark.parametrize("spec, target", [(Toy(), "sm_90"), (Toy(offset=-0.0, mode=True),
                                                            "sm_90a"),
                                           (VectorAdd(dtype="bf16"), "sm_90")])
def test_key_is_the_hash_of_its_inputs(spec, target):
    """derived_key is one SHA-256 over key_inputs' labelled, length-prefixed pairs (an
    independent rewrite of docs/keys.md's recipe), which name every baked field in order."""
    import hashlib

    from specdsl._render.keys import KEY_SCHEMA, key_inputs
    from specdsl._spec.decorator import spec_info

    inputs = key_inputs(spec, target)
    h = hashlib.sha256()
    for label, value in inputs:
        h.update(f"{label}:{len(value.encode())}:".encode() + value.encode())
    info = spec_info(spec)
    assert derived_key(spec, target) == f"{info.entry}-{h.hexdigest()[:DIGEST_HEX]}"
    assert inputs[0] == ("schema", KEY_SCHEMA) and ("target", target) in inputs
    assert [label for label, _ in inputs[8:]] == [f"baked.{n}" for n in info.baked]


def test_dtype_keeps_its_published_name_in_keys():
    """DType's members enter derived keys under the name the class was first published
    with, wherever its module lives now: moving the class changes no key."""
    from specdsl import DType, key_inputs
    from specdsl._spec.fields import canonical
    from specdsl.kernels import VectorAdd

    assert canonical(DType.BF16) == ("enum", "specdsl.dtype.DType", "BF16")
    assert key_inputs(VectorAdd(dtype="bf16"))[-1] == (
        "baked.dtype", "('enum', 'specdsl.dtype.DType', 'BF16')")
