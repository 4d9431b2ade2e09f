"""Target: parsing, numeric comparison and the PTX ISA version to emit."""

import pytest

from specdsl import Target, TargetError


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


def test_refuses_non_string():
    """Only strings and Targets are targets."""
    with pytest.raises(TargetError, match="got 90"):
        Target.parse(90)


def test_refuses_too_old_isa():
    """An explicit PTX ISA older than the target needs is refused."""
    with pytest.raises(TargetError, match=r"PTX ISA 8.0 cannot target sm_100 \(needs 8.6"):
        Target(100, "", (8, 0))
