"""Kernel ``.entry`` signatures parsed from PTX text: parameter names, types and attributes.

The grammar follows the PTX ISA, section 5.1.6 "Parameter State Space": kernel
parameters are ``.param .type name``, ``.param [.align N] .type name[count]`` for
arrays and by-value aggregates (5.1.6.1, "Kernel Function Parameters"), and pointers
``.param .type .ptr [.space] [.align N] name`` with ``.space`` one of ``.const``,
``.global``, ``.local``, ``.shared`` (5.1.6.2 "Kernel Function Parameter Attributes"
and 5.1.6.3 "Kernel Parameter Attribute: .ptr", which also lets the attributes run
together: ``.ptr.global.align 16``); and section 11.2.1 "Kernel and Function
Directives: .entry". Every spelling the tests accept is also assembled by nvJitLink
there. The executor reads a module's signature once and checks every launch's
arguments against it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

from ..errors import PTXSignatureError

__all__ = ["Param", "EntrySignature", "parse_entry", "entry_names", "entry_directives",
           "SCALAR_TYPES"]

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
# A directive word (".ptr", ".u64"), a number, an identifier (PTX ISA 4.4) or "[count]".
_TOKEN = re.compile(r"\s*(\.[A-Za-z_]\w*|\d+|[A-Za-z_$%][\w$]*|\[\s*\d+\s*\])")
_NAME = re.compile(r"[A-Za-z_$%][\w$]*")


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
            parameter, the parameter's own alignment otherwise), or ``None`` where the
            declaration gives none (see :attr:`pointee_align`).
        slot_align: for a ``.ptr`` parameter, the ``.align`` written before its type (the
            alignment of its own slot in the parameter buffer), or ``None``.
    """

    name: str
    type: str
    count: int | None = None
    is_ptr: bool = False
    space: str | None = None
    align: int | None = None
    slot_align: int | None = None

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
    def pointee_align(self) -> int | None:
        """For a ``.ptr`` parameter, the alignment in bytes that the compiled code may assume
        of the memory it points to: its ``.align``, else 4 (PTX ISA 5.1.6.3: "If no
        alignment is specified, the memory pointed to is assumed to be aligned to a 4 byte
        boundary"). ``None`` for other parameters."""
        if not self.is_ptr:
            return None
        return self.align if self.align is not None else 4

    @property
    def param_align(self) -> int:
        """Alignment of the parameter's slot in the parameter buffer, in bytes."""
        if self.count is not None or not self.is_ptr:
            # an .align on an array or a value parameter places its slot (PTX ISA 5.1.6.1);
            # on a .ptr parameter the one after .ptr describes the pointee (5.1.6.3) and
            # only one before the type places the slot
            return max(self.align or 1, self.bits // 8)
        return max(self.slot_align or 1, self.bits // 8)

    def describe(self) -> str:
        """The declaration as PTX spells it, e.g. ``.u64 .ptr .global .align 16 a``."""
        words = [f".align {self.slot_align}", f".{self.type}"] if self.slot_align else [
            f".{self.type}"]
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


# A performance-tuning directive and its operands (PTX ISA, "Performance-Tuning Directives")
_DIRECTIVE = re.compile(r"\.(?:maxnreg|maxntid|reqntid|minnctapersm|maxclusterrank|"
                        r"reqnctapercluster|explicitcluster|noreturn|pragma)\b[^.{;]*")


def entry_directives(ptx: str, entry: str) -> tuple[str, ...]:
    """The performance-tuning directives of ``.entry <entry>`` in ``ptx``, as written
    between its parameter list and its body (``(".reqntid 256", ".minnctapersm 4")``),
    comments dropped and spaces collapsed; ``()`` where it has none or no such entry."""
    text = _strip_comments(ptx)
    match = next((m for m in _ENTRY.finditer(text) if m.group(1) == entry), None)
    if match is None:
        return ()
    close = text.find(")", match.end())
    body = text.find("{", close)
    if close < 0 or body < 0:
        return ()
    return tuple(" ".join(found.split()).rstrip(", ")
                 for found in _DIRECTIVE.findall(text[close + 1:body]))


def parse_entry(ptx: str, entry: str) -> EntrySignature:
    """Parse the parameter list of ``.entry <entry>`` in ``ptx``.

    Args:
        ptx: a PTX module's text.
        entry: the kernel's ``.entry`` name.

    Returns:
        The kernel's :class:`EntrySignature`.

    Raises:
        PTXSignatureError: no such entry, or a parameter declaration this parser does
            not understand (the message quotes it); a ``ValueError`` too.
    """
    text = _strip_comments(ptx)
    for match in _ENTRY.finditer(text):
        if match.group(1) == entry:
            break
    else:
        found = ", ".join(entry_names(ptx)) or "none"
        raise PTXSignatureError(f"PTX has no '.entry {entry}' (entries: {found})")
    start = match.end()
    stop = text.find(")", start)
    if stop < 0:
        raise PTXSignatureError(f".entry {entry}: parameter list is not closed with ')'")
    body = text[start:stop].strip()
    if not body:
        return EntrySignature(entry, ())
    return EntrySignature(entry, tuple(_parse_param(entry, d) for d in body.split(",")))


def _parse_param(entry: str, declaration: str) -> Param:
    """One declaration, in the order nvJitLink requires: ``.param [.align N] .type
    [.align N | .ptr [.space] [.align N]] name [[count]]``."""
    quoted = " ".join(declaration.split())

    def refuse(problem: str) -> PTXSignatureError:
        return PTXSignatureError(f".entry {entry}: {problem} in {quoted!r} (expected "
                                 "'.param [.align N] .type [.ptr[.space][.align N]] name' or "
                                 "'.param [.align N] .type name[count]')")

    words = _tokens(declaration, refuse)
    words.reverse()  # pop() takes the next word

    def take(accept: Callable[[str], bool]) -> str | None:
        return words.pop() if words and accept(words[-1]) else None

    def alignment() -> int | None:
        if take(lambda w: w == ".align") is None:
            return None
        number = take(str.isdigit)
        if number is None:
            raise refuse("'.align' needs a byte count")
        if int(number) <= 0 or int(number) & (int(number) - 1):
            raise refuse(f"'.align {number}' is not a power of two")
        return int(number)

    def misplaced(what: str) -> PTXSignatureError:  # the next word is not the expected one
        word = words[-1] if words else None
        if word is None:
            return refuse(f"no {what}")
        if word.startswith(".") and word[1:] in _SPACES:
            return refuse(f"a state space ({word}) must follow '.ptr', once")
        if word.startswith(".") and word[1:] in SCALAR_TYPES:
            return refuse("two types")
        if word in (".ptr", ".align"):
            return refuse(f"'{word}' out of place (twice, or before the type)")
        return refuse(f"unknown word {word!r}")

    if take(lambda w: w == ".param") is None:
        raise refuse("expected '.param ...'")
    lead = alignment()
    type_ = take(lambda w: w.startswith(".") and w[1:] in SCALAR_TYPES)
    if type_ is None:
        raise misplaced("type")
    trailing = alignment()
    is_ptr = take(lambda w: w == ".ptr") is not None
    space = pointee = None
    if is_ptr:
        if trailing is not None:
            raise refuse("'.align' between the type and '.ptr' (write it after '.ptr')")
        if type_[1:] not in ("u32", "u64"):
            raise refuse(f"'.ptr' needs a .u32 or .u64 parameter (got {type_})")
        space_word = take(lambda w: w.startswith(".") and w[1:] in _SPACES)
        space = space_word[1:] if space_word else None
        pointee = alignment()
    elif lead is not None and trailing is not None:
        raise refuse("two '.align's")
    name = take(lambda w: _NAME.fullmatch(w) is not None)
    if name is None:
        raise misplaced("parameter name")
    bracket = take(lambda w: w.startswith("["))
    count = int(bracket[1:-1].strip()) if bracket else None
    if words:
        raise refuse(f"unexpected {words[-1]!r} after the name")
    if is_ptr and count is not None:
        raise refuse("'.ptr' on an array")
    if count is not None and count <= 0:
        raise refuse(f"an array of {count} elements")
    if is_ptr:
        return Param(name=name, type=type_[1:], is_ptr=True, space=space, align=pointee,
                     slot_align=lead)
    return Param(name=name, type=type_[1:], count=count,
                 align=lead if lead is not None else trailing)


def _tokens(declaration: str, refuse: Callable[[str], PTXSignatureError]) -> list[str]:
    """``.param .u64 .ptr.global.align 16 a`` -> ``['.param', '.u64', '.ptr', '.global',
    '.align', '16', 'a']``: PTX lets attributes run together (PTX ISA 5.1.6.3)."""
    tokens: list[str] = []
    position = 0
    while True:
        match = _TOKEN.match(declaration, position)
        if match is None:
            rest = declaration[position:].strip()
            if rest:
                raise refuse(f"unexpected text {rest[:20]!r}")
            return tokens
        tokens.append(match.group(1))
        position = match.end()
