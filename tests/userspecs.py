"""Small user spec classes over a toy template, shared by the foundation tests."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Literal

import attrs

from specdsl import DType, baked, kernel_spec, launch

TEMPLATES = Path(__file__).parent / "user_templates"


@kernel_spec(template="toy.ptx.j2", entry="toy", template_dir=TEMPLATES)
class Toy:
    """A kernel that stores ``scale * x + offset`` with baked constants."""

    scale: float = baked(1.0)
    offset: float = baked(0.0)
    n: int = baked(64, validator=attrs.validators.ge(1))
    dtype: DType = baked(DType.F32)
    flag: bool = baked(False)
    limit: int | None = baked(None)
    mode: Literal["fast", "exact", 1, True] = baked("fast")
    dims: tuple[int, ...] = baked((1, 2))
    block: int = launch(128)


class Flavour(enum.Enum):
    """A user enum: its str() is user code the toy template calls."""

    PLAIN = "plain"

    def __str__(self) -> str:
        return self.value


@kernel_spec(template="toy.ptx.j2", entry="toy", template_dir=TEMPLATES)
class UserEnumSpec:
    """The toy kernel with a baked value of a user enum type."""

    scale: float = baked(1.0)
    offset: float = baked(0.0)
    n: int = baked(64)
    dtype: DType = baked(DType.F32)
    flag: bool = baked(False)
    limit: int | None = baked(None)
    mode: Flavour = baked(Flavour.PLAIN)
    dims: tuple[int, ...] = baked((1, 2))


@kernel_spec(template="blob.ptx.j2", entry="blob", template_dir=TEMPLATES)
class Blob:
    """Copies a ``.b8`` aggregate parameter of ``4 * words`` bytes to ``out``."""

    words: int = baked(4)
    block: int = launch(32)
