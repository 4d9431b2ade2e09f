"""Placeholder: the key ledger (issue 3) is being written."""

from __future__ import annotations

import contextlib

__all__ = ["KeyLedger", "key_checking", "suspend_key_proof", "checking_enabled"]


class KeyLedger:
    """Proves hand-written keys at run time (being written)."""


def checking_enabled() -> bool:
    return __debug__


@contextlib.contextmanager
def key_checking(enabled: bool = True):
    yield


@contextlib.contextmanager
def suspend_key_proof():
    yield
