"""Folder names the command line takes (``render --out``, ``cache --dir``)."""

from __future__ import annotations

import argparse
import os

__all__ = ["folder_argument"]


def folder_argument(text: str) -> str:
    """An option's folder name (``--out``, ``cache --dir``), ``~`` expanded as
    ``SPECDSL_CACHE_DIR`` and ``cache_dir=`` expand it (the shell leaves ``--dir=~/x``
    alone); refuses ``""``, which would mean the working folder: an unset shell variable
    (``--dir "$CACHE"``) must not make ``cache clear`` act there, nor ``--out`` fall back
    to stdout."""
    if not text:
        raise argparse.ArgumentTypeError("an empty folder name (an unset variable?): give "
                                         "a folder, '.' for the working folder")
    return os.path.expanduser(text)
