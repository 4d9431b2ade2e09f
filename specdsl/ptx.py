"""Kernel ``.entry`` signatures parsed from PTX text: parameter names, types and attributes.

The grammar follows the PTX ISA, section 5.1.6 "Parameter State Space" (kernel
parameters: ``.param .type [.ptr [.space] [.align N]] name`` and
``.param [.align N] .b8 name[size]`` for by-value aggregates) and section 11.1
"Kernel and function directives". The executor reads a module's signature once and
checks every launch's arguments against it.
"""

from __future__ import annotations

import re

import attrs

__all__ = ["Param", "EntrySignature", "parse_entry", "entry_names", "SCALAR_TYPES"]

#: PTX fundamental types a kernel parameter may have: name -> (kind, bits).
#: kind is "u" (unsigned), "s" (signed), "b" (untyped bits) or "f" (float).
SCALAR_TYPES: dict[str, tuple[str, int]] = {
    f"{kind}{bits}": (kind, bits)
    for kind, widths in (("u", (8, 16, 32, 64)), ("s", (8, 16, 32, 64)),
                         ("b", (8, 16, 32, 64)), ("f", (16, 32, 64)))
    for bits in widths
}
_SPACES = ("global", "const", "local", "shared")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*\(")
_NAME = re.compile(r"([A-Za-z_$%][\w$]*)(?:\[(\d+)\])?")


@attrs.frozen
class Param:
    """One kernel parameter as declared in PTX.

    Attributes:
        name: the parameter's PTX name.
        type: its PTX type without the dot (``"u64"``, ``"f32"``, ``"b8"``).
        count: element count of an array parameter (``.b8 s[24]``), else ``None``.
        is_ptr: declared with ``.ptr``: a pointer passed as an integer address.
        space: the ``.ptr`` state space (``"global"``, ...), ``None`` for generic or a value.
        align: the ``.align`` value in bytes (the pointee's alignment for a ``.ptr``
            parameter, the parameter's own alignment otherwise), or ``None``.
    """

    name: str
    type: str
    count: int | None = None
    is_ptr: bool = False
    space: str | None = None
    align: int | None = None

    @property
    def kind(self) -> str:
        """``"u"``, ``"s"``, ``"b"`` or ``"f"``."""
        return SCALAR_TYPES[self.type][0]

    @property
    def bits(self) -> int:
        """Width of one element, in bits."""
        return SCALAR_TYPES[self.type][1]

    @property
    def size(self) -> int:
        """Bytes the parameter occupies in the parameter buffer."""
        return self.bits // 8 * (self.count or 1)

    @property
    def param_align(self) -> int:
        """Alignment of the parameter's slot in the parameter buffer, in bytes."""
        if self.count is not None or not self.is_ptr:
            # an .align on an array or a value parameter places its slot (PTX ISA 5.1.6.1);
            # on a .ptr parameter it describes the pointee, not the slot
            return max(self.align or 1, self.bits // 8)
        return self.bits // 8

    def describe(self) -> str:
        """The declaration as PTX spells it, e.g. ``.u64 .ptr .global .align 16 a``."""
        words = [f".{self.type}"]
        if self.is_ptr:
            words.append(".ptr")
            if self.space:
                words.append(f".{self.space}")
        if self.align is not None:
            words.append(f".align {self.align}")
        suffix = f"[{self.count}]" if self.count is not None else ""
        return " ".join(words + [self.name + suffix])


@attrs.frozen
class EntrySignature:
    """A kernel's parameter list, in declaration order.

    Attributes:
        entry: the ``.entry`` name.
        params: one :class:`Param` per ``.param``.
    """

    entry: str
    params: tuple[Param, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """Parameter names, in order."""
        return tuple(p.name for p in self.params)


def _strip_comments(ptx: str) -> str:
    return _COMMENTS.sub(" ", ptx)


def entry_names(ptx: str) -> tuple[str, ...]:
    """Names of every ``.entry`` in a PTX module, in order."""
    return tuple(m.group(1) for m in _ENTRY.finditer(_strip_comments(ptx)))


def parse_entry(ptx: str, entry: str) -> EntrySignature:
    """Parse the parameter list of ``.entry <entry>`` in ``ptx``.

    Args:
        ptx: a PTX module's text.
        entry: the kernel's ``.entry`` name.

    Returns:
        The kernel's :class:`EntrySignature`.

    Raises:
        ValueError: no such entry, or a parameter declaration this parser does not
            understand (the message quotes it).
    """
    text = _strip_comments(ptx)
    for match in _ENTRY.finditer(text):
        if match.group(1) == entry:
            break
    else:
        found = ", ".join(entry_names(ptx)) or "none"
        raise ValueError(f"PTX has no '.entry {entry}' (entries: {found})")
    start = match.end()
    stop = text.find(")", start)
    if stop < 0:
        raise ValueError(f".entry {entry}: parameter list is not closed with ')'")
    body = text[start:stop].strip()
    if not body:
        return EntrySignature(entry, ())
    return EntrySignature(entry, tuple(_parse_param(entry, d) for d in body.split(",")))


def _parse_param(entry: str, declaration: str) -> Param:
    words = declaration.split()
    if not words or words[0] != ".param":
        raise ValueError(f".entry {entry}: expected '.param ...', got {declaration.strip()!r}")
    type_ = None
    is_ptr = False
    space = None
    align = None
    i = 1
    while i < len(words) - 1:
        word = words[i]
        if word == ".align":
            if i + 1 >= len(words) - 1 or not words[i + 1].isdigit():
                raise ValueError(f".entry {entry}: '.align' needs a byte count in "
                                 f"{declaration.strip()!r}")
            align = int(words[i + 1])
            i += 2
            continue
        if word == ".ptr":
            is_ptr = True
        elif word.startswith(".") and word[1:] in _SPACES:
            space = word[1:]
        elif word.startswith(".") and word[1:] in SCALAR_TYPES:
            if type_ is not None:
                raise ValueError(f".entry {entry}: two types in {declaration.strip()!r}")
            type_ = word[1:]
        else:
            raise ValueError(f".entry {entry}: unknown word {word!r} in {declaration.strip()!r}")
        i += 1
    name = _NAME.fullmatch(words[-1]) if len(words) > 1 else None
    if type_ is None or name is None:
        raise ValueError(f".entry {entry}: cannot read {declaration.strip()!r} as "
                         "'.param .type [.ptr [.space] [.align N]] name'")
    count = int(name.group(2)) if name.group(2) is not None else None
    if is_ptr and type_ not in ("u32", "u64"):
        raise ValueError(f".entry {entry}: '.ptr' needs a .u32 or .u64 parameter "
                         f"(got .{type_} in {declaration.strip()!r})")
    if space is not None and not is_ptr:
        raise ValueError(f".entry {entry}: a state space without '.ptr' in "
                         f"{declaration.strip()!r}")
    if align is not None and (align <= 0 or align & (align - 1)):
        raise ValueError(f".entry {entry}: '.align {align}' is not a power of two")
    return Param(name=name.group(1), type=type_, count=count, is_ptr=is_ptr, space=space,
                 align=align)
