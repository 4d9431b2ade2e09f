"""Compiled templates and template facts kept across processes, verified before use.

Both live in ``<cache folder>/jinja/``, one framed entry per key
(:mod:`specdsl._base.cachefiles`), so a damaged, truncated or foreign file is a miss: the
template is compiled or parsed again, never run from a bad file.

- **Compiled templates** (:class:`VerifiedBytecodeCache`): Jinja's own
  ``FileSystemBytecodeCache`` unmarshals whatever file it finds, and one flipped bit in
  one once rendered a different register in valid-looking PTX. Here the code object's
  ``marshal`` bytes are stored framed; the key covers the template's name, file and
  source (SHA-256), the Jinja version and the exact Python build (and marshal format), and
  specdsl's own code (:func:`specdsl._base.digest.source_digest`, which holds the Environment's
  options and filters). Nothing is unmarshalled unless its SHA-256 matches, and only
  from a private folder of this user (:func:`specdsl._base.cachedir.prepare_folder`).
- **Template facts**: what a template file reads and references (a Jinja parse), keyed by
  its source, the Jinja version and specdsl's code; a JSON payload, checked again for its
  shape after the digest.

Off with ``SPECDSL_CACHE_DIR=off``; a folder that is refused or cannot be used turns
them off with a :class:`~specdsl.errors.CacheWarning` (they are opened while spec classes
are defined, at import, where an error would stop the import).
"""

from __future__ import annotations

import functools
import hashlib
import json
import marshal
import sys
import types
from pathlib import Path
from typing import Any

import jinja2

from .._base.cachedir import Writes, prepare_folder, warn_refused, warn_unusable
from .._base.cachefiles import (
    BYTECODE_MAGIC,
    FACTS_MAGIC,
    frame,
    read_entry,
    unframe,
    warn_once,
    write_entry,
)
from .._base.digest import labelled_sha256, source_digest
from ..config import knobs
from ..errors import CacheDirError, ConfigError

__all__ = ["TemplateStore", "VerifiedBytecodeCache", "store", "bytecode_cache", "load_facts",
           "store_facts"]

Facts = tuple[frozenset[str], tuple[str | None, ...]]


class TemplateStore:
    """Framed entries in ``<root>/jinja/``, one file per key, written through ``<root>/tmp/``.

    Args:
        root: the cache folder; a relative one is made absolute here, against the working
            folder.

    Attributes:
        root: the cache folder, absolute.
        folder: ``<root>/jinja``.

    Raises:
        CacheDirError: a folder is refused (see :func:`specdsl._base.cachedir.prepare_folder`).
        OSError: the folder, ``jinja/`` or ``tmp/`` does not exist and cannot be created.
        ConfigError: ``SPECDSL_CACHE_MAX_BYTES`` is not a size.
    """

    def __init__(self, root: Path) -> None:
        # absolute once: a later os.chdir must not move the folder entries are written to
        root = self.root = root.absolute()
        self.folder = root / "jinja"
        self.tmp = root / "tmp"
        self._writes = Writes(root, f"template cache {str(self.folder)!r}",
                              knobs.cache_max_bytes)
        for folder in (root, self.folder, self.tmp):
            prepare_folder(folder)

    @property
    def writable(self) -> bool:
        """False once a write failed (entries are still read)."""
        return self._writes.on

    def get(self, key: bytes, magic: bytes) -> bytes | None:
        """The payload stored under ``key`` in format ``magic``, or ``None`` (a miss)."""
        try:
            data = read_entry(self.folder / key.hex())
        except FileNotFoundError:
            return None
        return None if data is None else unframe(key, data, magic)

    def put(self, key: bytes, magic: bytes, payload: bytes) -> None:
        """Store ``payload`` under ``key``; a failed write warns once and stops writing."""
        entry = frame(key, payload, magic)
        self._writes.write(len(entry), lambda: write_entry(self.folder / key.hex(), entry,
                                                           self.tmp))


@functools.cache
def store() -> TemplateStore | None:
    """The template store of this process (``SPECDSL_CACHE_DIR`` or the default folder),
    or ``None`` when the cache is off or cannot be used (then with a warning)."""
    try:
        root = knobs.cache_dir
        if root is None:
            return None
        try:
            return TemplateStore(root)
        except CacheDirError as exc:
            warn_refused(root, exc)
        except OSError as exc:
            warn_unusable(root, exc)
    except ConfigError as exc:
        warn_once("environment", str(exc), f"specdsl: template cache off: {exc}")
    return None


def _python() -> str:
    # the exact interpreter build: its code objects and marshal format are fixed within it
    return f"{sys.implementation.cache_tag} {sys.version} marshal {marshal.version}"


class VerifiedBytecodeCache(jinja2.BytecodeCache):
    """Jinja's compiled templates in the process's :class:`TemplateStore` (:func:`store`),
    digest-checked before use."""

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        """SHA-256 of the template name and file (Jinja's own uses SHA-1)."""
        return hashlib.sha256(f"{name}|{filename}".encode()).hexdigest()

    def get_source_checksum(self, source: str) -> str:
        """SHA-256 of the template source."""
        return hashlib.sha256(source.encode()).hexdigest()

    @staticmethod
    def _key(bucket: jinja2.bccache.Bucket) -> bytes:
        return labelled_sha256([
            ("schema", "specdsl-jinja-bytecode/1"), ("jinja2", jinja2.__version__),
            ("python", _python()), ("specdsl", source_digest()),
            ("template", bucket.key), ("source", bucket.checksum)])

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        """Give ``bucket`` the stored code object, if a valid entry exists."""
        templates = store()
        payload = None if templates is None else templates.get(self._key(bucket), BYTECODE_MAGIC)
        if payload is None:
            return
        try:
            code = marshal.loads(payload)
        except (EOFError, ValueError, TypeError):
            return
        if isinstance(code, types.CodeType):
            bucket.code = code

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        """Store ``bucket``'s code object (a failed write only warns)."""
        templates = store()
        if templates is not None:
            templates.put(self._key(bucket), BYTECODE_MAGIC, marshal.dumps(bucket.code))


def bytecode_cache() -> VerifiedBytecodeCache | None:
    """The bytecode cache for a new Environment, or ``None`` when the cache is off."""
    return None if store() is None else VerifiedBytecodeCache()


def _facts_key(source_sha256: str) -> bytes:
    return labelled_sha256([("schema", "specdsl-template-facts/1"),
                            ("jinja2", jinja2.__version__), ("specdsl", source_digest()),
                            ("source", source_sha256)])


def load_facts(source_sha256: str) -> Facts | None:
    """The stored ``(names read, templates referenced)`` of the template file whose source
    has this SHA-256 (hex), or ``None``: missing, damaged or foreign."""
    templates = store()
    if templates is None:
        return None
    payload = templates.get(_facts_key(source_sha256), FACTS_MAGIC)
    if payload is None:
        return None
    try:
        data: Any = json.loads(payload)
        names, refs = data["names"], data["references"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(names, list) and isinstance(refs, list) and \
            all(isinstance(n, str) for n in names) and \
            all(r is None or isinstance(r, str) for r in refs):
        return frozenset(names), tuple(refs)
    return None


def store_facts(source_sha256: str, names: frozenset[str], refs: tuple[str | None, ...]) -> None:
    """Keep a template file's facts for later processes (see :func:`load_facts`)."""
    templates = store()
    if templates is not None:
        payload = json.dumps({"names": sorted(names), "references": list(refs)})
        templates.put(_facts_key(source_sha256), FACTS_MAGIC, payload.encode())
