"""Folder names the command line takes (``render --out``, ``cache --dir``)."""

from __future__ import annotations

import argparse
import os

__all__ = ["folder_argument", "render_folder_argument"]


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


def render_folder_argument(text: str) -> str:
    """``render --out``'s folder (as :func:`folder_argument`); refuses a name ending in
    ``.ptx`` that does not exist yet: render writes one file a request into the folder, and
    ``--out kernel.ptx`` would quietly make a folder of that name (an existing file is
    refused where the renders are written, naming it)."""
    folder = folder_argument(text)
    if folder.lower().endswith(".ptx") and not os.path.exists(folder):
        raise argparse.ArgumentTypeError(
            f"{text!r} names a .ptx file, not a folder: --out writes one file a request into "
            f"a folder (made if missing); to save one render as a file, leave --out out and "
            f"redirect: > {text}")
    return folder
