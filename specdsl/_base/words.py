"""English for error messages: a type named with its article ("an int", "a str")."""

from __future__ import annotations

from typing import Any

__all__ = ["a_type_name"]

#: Names read with a vowel sound though spelled with a consonant, or the other way round
#: ("an ndarray", "a uint8").
_AN = ("ndarray",)
_A = ("u",)


def a_type_name(value: Any) -> str:
    """``value``'s type name after "a" or "an": ``a_type_name(5) == "an int"``."""
    name = type(value).__name__
    vowel = name[:1].lower() in "aeiou" and not name.lower().startswith(_A)
    return f"{'an' if vowel or name.startswith(_AN) else 'a'} {name}"
