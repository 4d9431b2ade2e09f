"""SHA-256 helpers: labelled, length-prefixed fields, and the digest of specdsl's own code."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from pathlib import Path

__all__ = ["labelled_sha256", "source_digest"]


def labelled_sha256(fields: Iterable[tuple[str, str]]) -> bytes:
    """One SHA-256 over ``label:length:value`` for each field, in order (32 bytes).

    The label and the byte length before each value make the encoding unambiguous: no
    two different field lists hash the same bytes.
    """
    h = hashlib.sha256()
    for label, value in fields:
        data = value.encode()
        h.update(f"{label}:{len(data)}:".encode())
        h.update(data)
    return h.digest()


@functools.cache
def source_digest() -> str:
    """A SHA-256 (hex) of specdsl's own Python sources, computed once a process.

    What decides a rendering besides the request, its templates, the target and the Jinja
    version is specdsl's code: the Environment's options, filters such as ``f32``, the
    context, ``DType`` and ``Target`` properties. Cached renders and compiled templates
    are keyed by this digest, so a new specdsl never reads an old one's.
    """
    package = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix().encode()
        data = path.read_bytes()
        h.update(b"%d:%s%d:" % (len(name), name, len(data)))
        h.update(data)
    return h.hexdigest()
