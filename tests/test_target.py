"""Target: parsing, numeric comparison and the PTX ISA version to emit."""

import pytest

from specdsl import Target, TargetError
from specdsl._spec.target import known_targets


@pytest.mark.parametrize("text, arch, suffix, isa", [
    ("sm_80", 80, "", "8.0"), ("sm_89", 89, "", "8.0"), ("sm_90", 90, "", "8.0"),
    ("sm_90a", 90, "a", "8.0"), ("sm_100", 100, "", "8.6"), ("sm_120", 120, "", "8.7"),
    ("sm_100f", 100, "f", "8.8"),
])
def test_parse(text, arch, suffix, isa):
    """Targets parse into compute capability, suffix and PTX ISA version."""
    t = Target.parse(text)
    assert (t.arch, t.suffix, t.ptx_isa, t.sm, str(t)) == (arch, suffix, isa, text, text)


def test_compare_numerically():
    """sm_100 is newer than sm_90 (a string comparison would say otherwise)."""
    assert Target.parse("sm_100") > "sm_90"
    assert Target.parse("sm_90") < Target.parse("sm_100")
    assert Target.parse("sm_90a") >= "sm_90" and Target.parse("sm_90a") <= "sm_90"


def test_suffix_makes_a_distinct_target():
    """sm_90 and sm_90a rank equal but are different targets."""
    assert Target.parse("sm_90") != Target.parse("sm_90a")


def test_compute_capability():
    """compute_capability splits major and minor."""
    assert Target.parse("sm_89").compute_capability == (8, 9)


@pytest.mark.parametrize("bad", ["sm90", "sm_9", "compute_90", "sm_90b", "", "sm_90 a"])
def test_refuses_malformed(bad):
    """Malformed strings raise TargetError quoting the input."""
    with pytest.raises(TargetError, match="must look like 'sm_90'"):
        Target.parse(bad)


def test_refuses_unknown_arch():
    """An unknown compute capability lists the known ones."""
    with pytest.raises(TargetError, match=r"unknown compute capability sm_91 \(known: sm_75"):
        Target.parse("sm_91")


def test_parse_takes_a_compute_capability():
    """An int compute capability is the target of that name: 90 is sm_90."""
    assert Target.parse(90) == Target.parse("sm_90") == Target(90)
    assert Target.parse(100).sm == "sm_100"


@pytest.mark.parametrize("bad", [True, 90.0, b"sm_90", None])
def test_refuses_other_types(bad):
    """Only Targets, strings and ints are targets (a bool is no compute capability)."""
    with pytest.raises(TargetError, match=r"a compute capability like 90 \(got "):
        Target.parse(bad)


def test_refuses_unknown_int_arch():
    """An int that is no known compute capability is refused like its name."""
    with pytest.raises(TargetError, match=r"unknown compute capability sm_91"):
        Target.parse(91)


def test_every_target_argument_takes_an_int(tmp_path):
    """render, derived_key, key_inputs and Executor take 90 for sm_90, with equal keys."""
    from specdsl import Executor, derived_key, key_inputs, render
    from specdsl.kernels import VectorAdd

    request = VectorAdd(dtype="f16")
    assert render(request, 90) == render(request, "sm_90")
    assert derived_key(request, 90) == derived_key(request, "sm_90") != derived_key(
        request, "sm_90a")
    assert key_inputs(request, 90) == key_inputs(request, Target.parse("sm_90"))
    assert Executor(None, target=90, cache_dir="off").target == Target.parse("sm_90")


def test_refuses_too_old_isa():
    """An explicit PTX ISA older than the target needs is refused."""
    with pytest.raises(TargetError, match=r"PTX ISA 8.0 cannot target sm_100 \(needs 8.6"):
        Target(100, "", (8, 0))


def test_constructor_takes_the_name():
    """Target("sm_100") is the target users write: equal to Target(100) and Target.parse."""
    assert Target("sm_100") == Target(100) == Target.parse("sm_100")
    assert Target("sm_90a") == Target(90, "a") and hash(Target("sm_90a")) == hash(Target(90, "a"))
    assert Target("sm_89", ptx_version=(8, 1)).ptx_isa == "8.1"


def test_constructor_refuses_a_second_suffix():
    """A name that carries its suffix cannot be given another one."""
    with pytest.raises(TargetError, match=r"'sm_90a' already names its suffix \(got suffix='f'"):
        Target("sm_90a", "f")


@pytest.mark.parametrize("bad", [90.0, True, None])
def test_refuses_non_int_arch(bad):
    """arch is an int or a target name, nothing else."""
    with pytest.raises(TargetError, match="target arch must be an int such as 90"):
        Target(bad)


@pytest.mark.parametrize("text, message", [
    ("sm_80a", "sm_80a is no target: architecture-specific 'a' targets start at sm_90a"),
    ("sm_89a", "architecture-specific 'a' targets start at sm_90a"),
    ("sm_90f", "sm_90f is no target: family-specific 'f' targets start at sm_100f"),
    ("sm_75f", "family-specific 'f' targets start at sm_100f"),
])
def test_suffix_needs_its_arch(text, message):
    """'a' targets exist from sm_90, 'f' targets from sm_100 (PTX ISA, .target)."""
    with pytest.raises(TargetError, match=message):
        Target.parse(text)


def test_known_targets():
    """known_targets lists every target parse accepts: each arch bare, with 'a' from sm_90
    and with 'f' from sm_100, in rank order."""
    targets = known_targets()
    names = [t.sm for t in targets]
    assert len(names) == len(Target.KNOWN) + 7 + 6
    assert {"sm_75", "sm_90a", "sm_100f", "sm_121f"} <= set(names)
    assert not {"sm_90f", "sm_89a"} & set(names)
    assert all(Target.parse(name) == t for name, t in zip(names, targets, strict=True))
    assert [t.arch for t in targets] == sorted(t.arch for t in targets)
