"""Per-entry resource usage from nvJitLink's verbose info log (ptxas's report).

``compile_ptx(...).log`` holds two reports. The embedded ptxas writes, per entry::

    ptxas info    : Compiling entry function 'vector_add' for 'sm_90'
    ptxas info    : Function properties for vector_add
    ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 20 registers, used 0 barriers, 512 bytes smem

and nvJitLink then summarizes the linked cubin::

    info    : 0 bytes gmem, 64 bytes cmem[3]
    info    : Function properties for 'vector_add':
    info    : used 20 registers, used 5 barriers, 0 stack, 1536 bytes smem, 560 bytes cmem[0],
              0 bytes lmem   (one line in the log, wrapped here)

Registers, barriers, stack frame, spills and static shared memory are read from
ptxas's lines (nvJitLink's shared-memory figure adds the 1 KiB the system reserves
per CTA on sm_8x and newer, and its barrier count is not the kernel's own);
constant and local memory from nvJitLink's. Where ptxas's report of an entry is
missing, nvJitLink's figures stand in. The line formats are those printed by
``ptxas -v`` (CUDA Toolkit documentation, "ptxas options: --verbose").
"""

from __future__ import annotations

import re
from typing import Any

import attrs

__all__ = ["Resources", "parse_resources"]

_PTXAS_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '([^']+)'(?: for 'sm_(\d+))?")
_PTXAS_PROPS = re.compile(r"^ptxas info\s*: Function properties for '?([^':]+)'?:?\s*$")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                          r"(\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"^ptxas info\s*: Used (\d+) registers(.*)$")
_LINK_PROPS = re.compile(r"^info\s*: Function properties for '([^']+)':\s*$")
_LINK_USED = re.compile(r"^info\s*: used (\d+) registers(.*)$")
_LINK_MODULE = re.compile(r"^info\s*: \d+ bytes gmem(.*)$")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_LMEM = re.compile(r"(\d+) bytes lmem")
_STACK = re.compile(r"(\d+) stack\b")


@attrs.frozen
class Resources:
    """What one compiled entry uses, per thread unless stated otherwise.

    Attributes:
        entry: the PTX ``.entry`` name.
        registers: 32-bit registers per thread.
        spill_stores: bytes of registers spilled to local memory (stores) per thread.
        spill_loads: bytes reloaded from those spills per thread.
        stack_frame: bytes of per-thread stack (local arrays and spills).
        shared_memory: bytes of static ``.shared`` memory per CTA (dynamic shared
            memory is a launch argument and is not in the report).
        constant_banks: ``((bank, bytes), ...)``: bank 0 holds the kernel parameters
            and driver constants; the module's ``.const`` variables sit in another bank
            (``cmem[3]`` on sm_90) shared by every entry of the module.
        barriers: named barriers (``bar.sync`` ids) the entry uses.
        local_memory: bytes of local memory nvJitLink reports (``lmem``).
        spills_reported: whether the log had ptxas's spill line for the entry (some
            nvJitLink builds print only their own summary, which has no spill figures).
    """

    entry: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    shared_memory: int = 0
    constant_banks: tuple[tuple[int, int], ...] = ()
    barriers: int = 0
    local_memory: int = 0
    spills_reported: bool = True

    @property
    def constant_memory(self) -> int:
        """Bytes of constant memory the entry sees, summed over its banks."""
        return sum(size for _, size in self.constant_banks)

    @property
    def spills(self) -> bool:
        """True when ptxas spilled registers (any spill store or load).

        Where the log has no spill figures, any stack frame counts: spills live there.
        """
        if not self.spills_reported:
            return self.stack_frame > 0
        return self.spill_stores > 0 or self.spill_loads > 0

    def as_dict(self) -> dict[str, object]:
        """The record as JSON-ready values (``constant_banks`` as ``{"0": bytes, ...}``)."""
        return {
            "entry": self.entry, "registers": self.registers,
            "spill_stores": self.spill_stores, "spill_loads": self.spill_loads,
            "stack_frame": self.stack_frame, "shared_memory": self.shared_memory,
            "constant_memory": self.constant_memory,
            "constant_banks": {str(bank): size for bank, size in self.constant_banks},
            "barriers": self.barriers, "local_memory": self.local_memory,
            "spills_reported": self.spills_reported,
        }


def _banks(text: str) -> dict[int, int]:
    return {int(bank): int(size) for size, bank in _CMEM.findall(text)}


def _first(pattern: re.Pattern[str], text: str) -> int | None:
    match = pattern.search(text)
    return int(match.group(1)) if match else None


#: Shared memory the system reserves per CTA on sm_80 and newer (CUDA C++ Programming
#: Guide, "Shared Memory" for compute capability 8.x and 9.0), in bytes.
SYSTEM_RESERVED_SMEM = 1024


def _static_shared(own: dict[str, Any] | None, link: dict[str, Any], arch: int) -> int:
    # ptxas omits "bytes smem" for module-scope .shared variables; nvJitLink's figure
    # then gives it. For sm_90 that figure includes the per-CTA reservation, for sm_80,
    # sm_100 and sm_120 it does not (nvJitLink 13: a kernel declaring 64 bytes reports
    # 1088 for sm_90 and 64 for the others; tests/test_resources.py checks each).
    if own and own.get("shared_memory") is not None:
        return int(own["shared_memory"])
    linked = int(link.get("shared_memory", 0))
    reserved = SYSTEM_RESERVED_SMEM if 90 <= arch < 100 else 0
    return max(0, linked - reserved)


def parse_resources(log: str, arch: int | None = None) -> dict[str, Resources]:
    """Parse a verbose nvJitLink info log into ``{entry name: Resources}``.

    Entries appear in the order the log first names them. Lines that match no
    known format are ignored, so a newer toolchain's extra lines do no harm; an
    entry the log does not report is simply absent (the caller decides whether
    that is an error).

    Args:
        log: ``specdsl._runtime.compile.compile_ptx(...).log`` (``Compiled.log``).
        arch: the compute capability compiled for (``90``), to take the system's shared
            memory reservation out of nvJitLink's figure where ptxas's line does not name
            the target; ``Compiled.resources()`` passes it.

    Returns:
        One :class:`Resources` per ``.entry`` of the module; ``.func`` device
        functions are not included.
    """
    ptxas: dict[str, dict[str, Any]] = {}
    linker: dict[str, dict[str, Any]] = {}
    module_banks: dict[int, int] = {}
    arch = arch or 0               # compute capability compiled for, e.g. 90
    current: str | None = None     # entry ptxas is compiling
    described: str | None = None   # function whose properties ptxas prints next
    link_described: str | None = None
    for raw in log.splitlines():
        line = raw.strip()
        if match := _PTXAS_ENTRY.match(line):
            current = match.group(1)
            ptxas.setdefault(current, {})
            if match.group(2):
                arch = int(match.group(2))
            continue
        if match := _PTXAS_PROPS.match(line):
            described = match.group(1)
            continue
        if (match := _PTXAS_FRAME.search(line)) and described is not None:
            if described == current:
                record = ptxas[current]
                record["stack_frame"], record["spill_stores"], record["spill_loads"] = (
                    int(match.group(1)), int(match.group(2)), int(match.group(3)))
            described = None
            continue
        if (match := _PTXAS_USED.match(line)) and current is not None:
            rest = match.group(2)
            record = ptxas[current]
            record["registers"] = int(match.group(1))
            record["barriers"] = _first(_BARRIERS, rest) or 0
            record["shared_memory"] = _first(_SMEM, rest)  # None: ptxas did not say
            record["banks"] = _banks(rest)
            continue
        if match := _LINK_MODULE.match(line):
            for bank, size in _banks(match.group(1)).items():
                module_banks[bank] = max(module_banks.get(bank, 0), size)
            continue
        if match := _LINK_PROPS.match(line):
            link_described = match.group(1)
            continue
        if (match := _LINK_USED.match(line)) and link_described is not None:
            rest = match.group(2)
            linker[link_described] = {
                "registers": int(match.group(1)),
                "barriers": _first(_BARRIERS, rest) or 0,
                "stack_frame": _first(_STACK, rest) or 0,
                "shared_memory": _first(_SMEM, rest) or 0,
                "banks": _banks(rest),
                "local_memory": _first(_LMEM, rest) or 0,
            }
            link_described = None
    entries = list(ptxas) + [name for name in linker if name not in ptxas]
    result: dict[str, Resources] = {}
    for name in entries:
        own, link = ptxas.get(name), linker.get(name, {})
        base = own if own and "registers" in own else link
        if not base:
            continue
        banks: dict[int, int] = dict(link.get("banks") or (own or {}).get("banks") or {})
        for bank, size in module_banks.items():
            banks[bank] = banks.get(bank, 0) + size
        result[name] = Resources(
            entry=name,
            registers=int(base.get("registers", 0)),
            spill_stores=int((own or {}).get("spill_stores", 0)),
            spill_loads=int((own or {}).get("spill_loads", 0)),
            stack_frame=int((own or {}).get("stack_frame", link.get("stack_frame", 0))),
            shared_memory=_static_shared(own, link, arch),
            constant_banks=tuple(sorted(banks.items())),
            barriers=int(base.get("barriers", 0)),
            local_memory=int(link.get("local_memory", 0)),
            spills_reported="spill_stores" in (own or {}),
        )
    return result
