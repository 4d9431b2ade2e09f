"""Compile targets: a compute capability plus the PTX ISA version to emit."""

from __future__ import annotations

import functools
import re
from typing import ClassVar

import attrs

from ..errors import TargetError

__all__ = ["Target", "known_targets"]

# Lowest PTX ISA version that knows each target, from the PTX ISA's
# "Release Notes" and "Target ISA notes" (section 9.7 / 13): sm_90a needs 8.0,
# sm_100 8.6, sm_120 8.7, the family ("f") targets 8.8.
_MIN_ISA: dict[int, tuple[int, int]] = {
    75: (6, 3), 80: (7, 0), 86: (7, 1), 87: (7, 4), 89: (7, 8), 90: (7, 8),
    100: (8, 6), 101: (8, 6), 103: (8, 8), 110: (9, 0), 120: (8, 7), 121: (8, 8),
}
# specdsl's templates are written against PTX ISA 8.0 (CUDA 12.0) or newer.
_ISA_FLOOR = (8, 0)
# The first compute capability with each suffix (PTX ISA, ".target"): architecture-specific
# targets from sm_90a (ISA 8.0), family-specific targets from sm_100f (ISA 8.8).
_SUFFIX_FROM = {"": 0, "a": 90, "f": 100}
_PATTERN = re.compile(r"sm_(\d{2,3})([af]?)")


@attrs.frozen(order=False)
class Target:
    """The render context a compile target supplies: ``sm_90``, ``sm_90a``, ...

    Made from its name, ``Target("sm_90a")``, or from its parts, ``Target(90, "a")``;
    :meth:`parse` also takes a Target or a compute capability alone (``90``).

    Attributes:
        arch: compute capability as one integer (``90`` for 9.0).
        suffix: ``""``, ``"a"`` (architecture-specific features, e.g. ``wgmma``; sm_90
            and newer) or ``"f"`` (family-specific features; sm_100 and newer).
        ptx_version: the PTX ISA version the templates emit in ``.version``,
            as ``(major, minor)``; by default the newer of the target's minimum
            and specdsl's floor (8.0).

    Targets compare numerically by compute capability (``sm_100 > sm_90``);
    ``sm_90`` and ``sm_90a`` are equal in rank but distinct targets.

    Raises:
        TargetError: a malformed name, an unknown compute capability, a suffix the
            compute capability does not have (``sm_80a``, ``sm_90f``), or a PTX ISA
            version older than the target needs.
    """

    arch: int
    suffix: str = ""
    ptx_version: tuple[int, int] = attrs.field(default=None)

    KNOWN: ClassVar[tuple[int, ...]] = tuple(sorted(_MIN_ISA))

    def __attrs_post_init__(self) -> None:
        if isinstance(self.arch, str):  # Target("sm_90a"): the name users write
            named = _parse_text(self.arch)
            if self.suffix not in ("", named.suffix):
                raise TargetError(f"target {self.arch!r} already names its suffix "
                                  f"(got suffix={self.suffix!r} too)")
            object.__setattr__(self, "arch", named.arch)
            object.__setattr__(self, "suffix", named.suffix)
        if type(self.arch) is not int:
            raise TargetError(f"target arch must be an int such as 90 or a name such as "
                              f"'sm_90' (got {self.arch!r})")
        if self.arch not in _MIN_ISA:
            known = ", ".join(f"sm_{a}" for a in self.KNOWN)
            raise TargetError(f"unknown compute capability sm_{self.arch} (known: {known})")
        if self.suffix not in _SUFFIX_FROM:
            raise TargetError(f"target suffix must be '', 'a' or 'f' (got {self.suffix!r})")
        if self.arch < _SUFFIX_FROM[self.suffix]:
            kind = "architecture" if self.suffix == "a" else "family"
            raise TargetError(f"sm_{self.arch}{self.suffix} is no target: {kind}-specific "
                              f"'{self.suffix}' targets start at sm_{_SUFFIX_FROM[self.suffix]}"
                              f"{self.suffix} (PTX ISA, '.target')")
        floor = max(_MIN_ISA[self.arch], _ISA_FLOOR, (8, 8) if self.suffix == "f" else (0, 0))
        if self.ptx_version is None:
            object.__setattr__(self, "ptx_version", floor)
        elif tuple(self.ptx_version) < floor:
            raise TargetError(
                f"PTX ISA {self.ptx_version[0]}.{self.ptx_version[1]} cannot target "
                f"{self.sm} (needs {floor[0]}.{floor[1]} or newer)")

    @classmethod
    def parse(cls, value: Target | str | int) -> Target:
        """Return a :class:`Target` for ``"sm_90"``, ``"sm_90a"``, ``"sm_100f"``, a compute
        capability as one int (``90``, the same target as ``"sm_90"``) or a Target.

        Every function that takes a target reads it here, so each takes all of these, and
        equal targets give equal keys: ``derived_key(spec, 90) == derived_key(spec, "sm_90")``.

        Raises:
            TargetError: ``value`` is not of the form ``sm_<digits>[a|f]``, names an
                unknown compute capability, or is of another type (a bool, a float).
        """
        if isinstance(value, Target):
            return value
        if type(value) is int:
            return _parse_arch(value)
        if not isinstance(value, str):
            raise TargetError(f"target must be a Target, a string like 'sm_90' or a compute "
                              f"capability like 90 (got {value!r})")
        return _parse_text(value)

    @classmethod
    def _from_text(cls, value: str) -> Target:
        match = _PATTERN.fullmatch(value.strip())
        if match is None:
            raise TargetError(f"target must look like 'sm_90' or 'sm_90a' (got {value!r})")
        return cls(int(match.group(1)), match.group(2))

    @property
    def sm(self) -> str:
        """The target name as PTX's ``.target`` directive and nvJitLink's ``-arch`` spell it."""
        return f"sm_{self.arch}{self.suffix}"

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)``, e.g. ``(9, 0)``."""
        return divmod(self.arch, 10)

    @property
    def ptx_isa(self) -> str:
        """The PTX ISA version for the ``.version`` directive, e.g. ``"8.0"``."""
        return f"{self.ptx_version[0]}.{self.ptx_version[1]}"

    def __lt__(self, other: Target | str | int) -> bool:
        return self.arch < Target.parse(other).arch

    def __le__(self, other: Target | str | int) -> bool:
        return self.arch <= Target.parse(other).arch

    def __gt__(self, other: Target | str | int) -> bool:
        return self.arch > Target.parse(other).arch

    def __ge__(self, other: Target | str | int) -> bool:
        return self.arch >= Target.parse(other).arch

    def __str__(self) -> str:
        return self.sm


def known_targets() -> tuple[Target, ...]:
    """Every target :meth:`Target.parse` accepts, at its default PTX ISA version:
    each known compute capability with each suffix it has, in rank order."""
    return tuple(Target(arch, suffix) for arch in Target.KNOWN for suffix in _SUFFIX_FROM
                 if arch >= _SUFFIX_FROM[suffix])


@functools.lru_cache(maxsize=64)
def _parse_text(value: str) -> Target:
    # Target strings repeat on hot paths (derived_key(spec, "sm_90")): parse each once.
    return Target._from_text(value)


@functools.lru_cache(maxsize=64)
def _parse_arch(value: int) -> Target:
    return Target(value)
