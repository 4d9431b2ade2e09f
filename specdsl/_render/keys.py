"""Module keys: derived from the declaration, or hand-written.

A derived key reads like ``rmsnorm-3f1c...``: the entry name, then 40 hex digits
(160 bits) of one SHA-256 over labelled, length-prefixed fields: the key schema,
the Jinja version, the spec class's qualified name, the digest of its template and
every template it reaches, the target and its PTX ISA version, and each baked
field's canonical value (floats by their exact bits, enums by name, bools apart
from ints). Anything that can change the PTX is in it, so equal derived keys
imply identical PTX.
"""

from __future__ import annotations

import functools
from typing import Any

import jinja2

from .._base.digest import labelled_sha256
from .._spec.decorator import request_info, spec_info
from .._spec.fields import canonical
from .._spec.target import Target
from ..errors import SpecDefinitionError

__all__ = ["derived_key", "hand_key", "checked_hand_key", "key_inputs", "KEY_SCHEMA", "DIGEST_HEX"]

#: Bump when the key's inputs or the rendering rules (filters, context, Environment
#: options) change; it also names the folder of cached compiled templates.
KEY_SCHEMA = "specdsl-derived-key/1"
#: Hex digits of the digest kept in a key: 40 (160 bits).
DIGEST_HEX = 40


def key_inputs(spec: Any, target: Target | str | int = "sm_90") -> tuple[tuple[str, str], ...]:
    """The labelled inputs of ``spec``'s derived key, in the order they are hashed.

    ``(("schema", KEY_SCHEMA), ("jinja2", version), ("class", "module.QualName"),
    ("entry", ...), ("template", name), ("templates", digest of every template reached),
    ("target", "sm_90"), ("ptx_isa", "8.0"), ("baked.<field>", canonical value), ...)``.
    :func:`derived_key` hashes exactly these pairs, so this is also what
    ``specdsl key --explain`` prints.

    Raises:
        NotASpecError: ``spec`` is no request (a spec class, or no kernel spec; a
            ``TypeError`` too).
        TargetError: a malformed target string.
    """
    info = request_info(spec)
    target = target if isinstance(target, Target) else Target.parse(target)
    return (
        ("schema", KEY_SCHEMA),
        ("jinja2", jinja2.__version__),
        ("class", info.cls_name),
        ("entry", info.entry),
        ("template", info.template),
        ("templates", info.facts.digest),
        ("target", target.sm),
        ("ptx_isa", target.ptx_isa),
        *((f"baked.{name}", repr(canonical(getattr(spec, name)))) for name in info.baked),
    )


@functools.lru_cache(maxsize=8192)
def _derived(spec: Any, target: Target) -> str:
    digest = labelled_sha256(key_inputs(spec, target)).hex()
    return f"{spec_info(spec).entry}-{digest[:DIGEST_HEX]}"


def derived_key(spec: Any, target: Target | str | int = "sm_90") -> str:
    """The module key of ``spec`` for ``target``, derived from its baked fields.

    Stable across processes and machines; never uses Python's ``hash()``. Memoized
    per (request, target), so a reused request costs one dictionary lookup.

    Returns:
        ``"<entry>-<40 hex digits>"``.

    Raises:
        NotASpecError: ``spec`` is no request (a spec class, or no kernel spec; a
            ``TypeError`` too).
        TargetError: a malformed target string.
    """
    return _derived(spec, target if isinstance(target, Target) else Target.parse(target))


def hand_key(spec: Any) -> str | None:
    """The request's hand-written key from its class's ``key()`` method, or ``None``.

    Raises:
        NotASpecError: ``spec`` is no request (a spec class, or no kernel spec).
        SpecDefinitionError: ``key()`` returned something other than a str with a
            non-blank character (a blank key, like an empty one, names nothing).
    """
    info = request_info(spec)
    if not info.has_key:
        return None
    return checked_hand_key(type(spec), spec.key())


def checked_hand_key(cls: type, value: Any) -> str:
    """``value``, what ``cls.key()`` returned, if it is a str with a non-blank character.

    Raises:
        SpecDefinitionError: anything else (a blank key, like an empty one, names nothing).
    """
    if not isinstance(value, str) or not value.strip():
        raise SpecDefinitionError(
            f"{cls.__qualname__}.key() must return a non-blank str (got {value!r})")
    return value
