"""The article error messages put before a type name or a number."""

from __future__ import annotations

import pytest

from specdsl._base.wording import with_article


@pytest.mark.parametrize("word, expected", [
    ("int", "an int"), ("object", "an object"), ("ndarray", "an ndarray"),
    ("str", "a str"), ("float", "a float"), ("bool", "a bool"), ("tuple", "a tuple"),
    ("NoneType", "a NoneType"), ("int64", "an int64"), ("uint8", "a uint8"),
    ("UnionType", "a UnionType"), ("RMSNorm", "an RMSNorm"), ("Fp8Quant", "an Fp8Quant"),
    ("SiluMul", "a SiluMul"), ("DType", "a DType"), ("Order", "an Order"), ("X", "an X"),
    ("8-byte", "an 8-byte"), ("11-byte", "an 11-byte"), ("18-byte", "an 18-byte"),
    ("80-byte", "an 80-byte"), ("100-byte", "a 100-byte"), ("1100-byte", "a 1100-byte"),
    ("11000-byte", "an 11000-byte"), ("16-byte", "a 16-byte"),
])
def test_article_follows_how_the_word_is_read(word, expected):
    """'an' before a vowel sound (int, ndarray, RMSNorm, 8-byte), 'a' before others."""
    assert with_article(word) == expected
