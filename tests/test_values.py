"""The value pools of field types and the one order-keeping de-duplication."""

from __future__ import annotations

import enum
from typing import Literal

from specdsl._render.keys import derived_key
from specdsl._spec.dtype import DType
from specdsl._spec.values import candidates, field_members, unique
from specdsl.kernels import VectorAdd


class Mode(enum.Enum):
    FAST = "fast"
    EXACT = "exact"


def test_unique_keeps_first_seen_by_canonical_form():
    """0.0 and -0.0, 1 and True stay apart; repeats go, order stays."""
    assert [repr(v) for v in unique([1, 0.0, True, -0.0, 1, 0.0])] == ["1", "0.0", "True", "-0.0"]


def test_unique_takes_a_key():
    """key= decides equality: one request per derived key keeps the first of each module."""
    requests = [VectorAdd(block=64), VectorAdd(block=128), VectorAdd(dtype="f16")]
    assert unique(requests, key=derived_key) == [requests[0], requests[2]]


def test_unique_compares_values_without_a_canonical_form_by_repr():
    """A value canonical() refuses (a list) is compared by type and repr, not refused."""
    assert unique([[1], [1], [2]]) == [[1], [2]]


def test_finite_types_give_every_member():
    """bool, Enum, Literal and T | None of those have finitely many values; others none."""
    assert field_members(bool) == (False, True)
    assert field_members(Literal["neox", "gptj"]) == ("neox", "gptj")
    assert field_members(Mode | None) == (Mode.FAST, Mode.EXACT, None)
    assert field_members(int | None) is None and field_members(float) is None


def test_candidates_of_finite_types_are_their_members_default_first():
    """The candidates of a finite type are its members, the default first, no repeats."""
    assert candidates(DType, DType.F16)[:2] == [DType.F16, DType.F32]
    assert set(candidates(DType)) == set(DType)
    assert candidates(Mode | None, Mode.EXACT) == [Mode.EXACT, None, Mode.FAST]


def test_candidates_of_tuples_vary_one_item():
    """A tuple's candidates keep its length or change it by one, varying one item at a time."""
    pool = candidates(tuple[int, ...], (4, 8))
    assert pool[0] == (4, 8) and (4,) in pool and (4, 8, 8) in pool
    assert all(len(v) in (1, 2, 3) for v in pool)
