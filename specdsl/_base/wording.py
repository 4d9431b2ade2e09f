"""Words for error messages: the right indefinite article before a type name or number.

Messages say what came: "(got 5, an int)", "(got 'x', a str)", "an 8-byte stack frame".
The article follows how the word is read aloud, not its first letter alone.
"""

from __future__ import annotations

import re

__all__ = ["with_article"]

# "u" read as "you": uint8, UnionType, UUID, user..., utf8, usize.
_YOU = re.compile(r"u(?:ni|int|u|s[aeiu]|t|ri|re)", re.IGNORECASE)
# Letters whose names start with a vowel sound: F (eff), H, L, M, N, R, S, X.
_VOWEL_NAMED = frozenset("fhlmnrsx")
# Two letters a word may open with: a word opening otherwise is read letter by letter
# (ndarray: "en-d-array", MPSTensor, HTTPResponse), and the first letter's name decides.
_ONSETS = frozenset({"fl", "fr", "hy", "ly", "my", "ny", "rh", "sc", "sh", "sk", "sl", "sm",
                     "sn", "sp", "sq", "st", "sv", "sw", "sy"})


def with_article(word: str) -> str:
    """``word`` after ``a`` or ``an`` as it is read: ``an int``, ``an object``, ``an
    ndarray``, ``an RMSNorm``, ``a str``, ``a float``, ``a uint8``, ``an 8-byte``,
    ``an 11-byte``, ``a 100-byte``."""
    return f"{'an' if _takes_an(word) else 'a'} {word}"


def _takes_an(word: str) -> bool:
    digits = re.match(r"\d+", word)
    if digits:  # eight..., eleven, eighteen (and their thousands, millions...)
        number = digits.group()
        return number.startswith("8") or (len(number) % 3 == 2 and number[:2] in ("11", "18"))
    first, pair = word[:1].lower(), word[:2].lower()
    if first in "aeio":
        return bool(first)
    if first == "u":
        return not _YOU.match(word)
    if first in _VOWEL_NAMED:  # a lone letter (X, F2) is read by its name too
        return len(pair) < 2 or not pair[1].isalpha() or (
            pair[1] not in "aeiouy" and pair not in _ONSETS)
    return False
