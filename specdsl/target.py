"""Compile targets: a compute capability plus the PTX ISA version to emit."""

from __future__ import annotations

import functools
import re
from typing import ClassVar

import attrs

from .errors import TargetError

__all__ = ["Target"]

# Lowest PTX ISA version that knows each target, from the PTX ISA's
# "Release Notes" and "Target ISA notes" (section 9.7 / 13): sm_90a needs 8.0,
# sm_100 8.6, sm_120 8.7, the family ("f") targets 8.8.
_MIN_ISA: dict[int, tuple[int, int]] = {
    75: (6, 3), 80: (7, 0), 86: (7, 1), 87: (7, 4), 89: (7, 8), 90: (7, 8),
    100: (8, 6), 101: (8, 6), 103: (8, 8), 110: (9, 0), 120: (8, 7), 121: (8, 8),
}
# specdsl's templates are written against PTX ISA 8.0 (CUDA 12.0) or newer.
_ISA_FLOOR = (8, 0)
_PATTERN = re.compile(r"sm_(\d{2,3})([af]?)")


@attrs.frozen(order=False)
class Target:
    """The render context a compile target supplies: ``sm_90``, ``sm_90a``, ...

    Attributes:
        arch: compute capability as one integer (``90`` for 9.0).
        suffix: ``""``, ``"a"`` (architecture-specific features, e.g. ``wgmma``)
            or ``"f"`` (family-specific features).
        ptx_version: the PTX ISA version the templates emit in ``.version``,
            as ``(major, minor)``; by default the newer of the target's minimum
            and specdsl's floor (8.0).

    Targets compare numerically by compute capability (``sm_100 > sm_90``);
    ``sm_90`` and ``sm_90a`` are equal in rank but distinct targets.

    Raises:
        TargetError: from :meth:`parse` for a malformed or unknown string.
    """

    arch: int
    suffix: str = ""
    ptx_version: tuple[int, int] = attrs.field(default=None)

    KNOWN: ClassVar[tuple[int, ...]] = tuple(sorted(_MIN_ISA))

    def __attrs_post_init__(self) -> None:
        if self.arch not in _MIN_ISA:
            known = ", ".join(f"sm_{a}" for a in self.KNOWN)
            raise TargetError(f"unknown compute capability sm_{self.arch} (known: {known})")
        if self.suffix not in ("", "a", "f"):
            raise TargetError(f"target suffix must be '', 'a' or 'f' (got {self.suffix!r})")
        floor = max(_MIN_ISA[self.arch], _ISA_FLOOR, (8, 8) if self.suffix == "f" else (0, 0))
        if self.ptx_version is None:
            object.__setattr__(self, "ptx_version", floor)
        elif tuple(self.ptx_version) < floor:
            raise TargetError(
                f"PTX ISA {self.ptx_version[0]}.{self.ptx_version[1]} cannot target "
                f"{self.sm} (needs {floor[0]}.{floor[1]} or newer)")

    @classmethod
    def parse(cls, value: "Target | str") -> "Target":
        """Return a :class:`Target` for ``"sm_90"``, ``"sm_90a"``, ``"sm_100f"`` or a Target.

        Raises:
            TargetError: ``value`` is not of the form ``sm_<digits>[a|f]`` or names
                an unknown compute capability.
        """
        if isinstance(value, Target):
            return value
        if not isinstance(value, str):
            raise TargetError(f"target must be a Target or a string like 'sm_90' (got {value!r})")
        return _parse_text(value)

    @classmethod
    def _from_text(cls, value: str) -> "Target":
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

    def __lt__(self, other: "Target | str") -> bool:
        return self.arch < Target.parse(other).arch

    def __le__(self, other: "Target | str") -> bool:
        return self.arch <= Target.parse(other).arch

    def __gt__(self, other: "Target | str") -> bool:
        return self.arch > Target.parse(other).arch

    def __ge__(self, other: "Target | str") -> bool:
        return self.arch >= Target.parse(other).arch

    def __str__(self) -> str:
        return self.sm


@functools.lru_cache(maxsize=64)
def _parse_text(value: str) -> Target:
    # Target strings repeat on hot paths (derived_key(spec, "sm_90")): parse each once.
    return Target._from_text(value)
