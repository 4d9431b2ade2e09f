"""Test helper: run a straight-line stretch of rendered PTX in a model of one cluster of CTAs,
follow which vectors of a row each pass touches, and check what each chunk loop carries
from one trip to the next.

Enough of PTX for the reductions of ``templates/reduce.ptx.j2`` and ``softmax.ptx.j2``:
warp shuffles, ``redux.sync.max.u32`` over a whole warp (of values never negative nor NaN),
f32 add/max/min, u32 compare and address arithmetic, ``.shared`` and
distributed shared memory stores, CTA and cluster barriers. Any other
instruction fails the test that runs it (the model must grow with the macros).

Every register holds one float64 per (case, thread): ``case`` runs independent inputs
side by side. Warps run one at a time, each to its next barrier, in a chosen order, so a
load that a missing barrier would let run before its store reads an unwritten slot;
that, and any access outside a ``.shared`` array, is an error.
"""

from __future__ import annotations

import re
import struct

import numpy as np

__all__ = ["SimError", "shared_arrays", "check_cluster_protocol", "segments", "run",
           "row_coverage", "registers", "accesses", "loops", "check_loops"]

_SHARED = re.compile(r"\.shared\s+(?:\.align\s+\d+\s+)?\.b32\s+(\w+)(?:\[(\d+)\])?\s*;")
_GUARD = re.compile(r"@(!?)(%\w+)\s+")
_WINDOW = 1 << 20  # a cluster address: (CTA rank + 1) * _WINDOW + offset in its shared memory


class SimError(AssertionError):
    """The PTX did something the reduction must never do (or the model cannot run)."""


def shared_arrays(ptx: str) -> dict[str, int]:
    """``{name: entries}`` of every ``.shared .b32`` array or scalar declared in ``ptx``."""
    return {name: int(count or 1) for name, count in _SHARED.findall(ptx)}


def check_cluster_protocol(ptx: str) -> int:
    """Check the order of a kernel's cluster steps (``reduce.ptx.j2``); the number of
    cluster reductions.

    In order: ``cluster_setup``'s relaxed arrive, then the reductions, the first waiting on
    that arrive, each pushing its value into another CTA (``mapa``, ``st.shared::cluster``)
    before its one barrier (arrive with release, wait with acquire). Nothing after the last
    barrier, and no load from another CTA's shared memory: a CTA may then exit at once.

    Raises:
        SimError: naming what is missing or out of order.
    """
    opcodes = []
    for raw in ptx.splitlines():
        code = raw.split("//")[0].strip().rstrip(";")
        op = _parse(code)[2] if code else ""
        if op.startswith("barrier.cluster") or "::cluster" in op:
            opcodes.append(op)
    reductions = opcodes.count("st.shared::cluster.b32")
    expected = (["barrier.cluster.arrive.relaxed.aligned", "barrier.cluster.wait.aligned"]
                + ["mapa.shared::cluster.u32", "st.shared::cluster.b32",
                   "barrier.cluster.arrive.release.aligned",
                   "barrier.cluster.wait.acquire.aligned"] * reductions)
    if not reductions or opcodes != expected:
        raise SimError(f"cluster protocol: expected {expected}, found {opcodes}")
    return reductions


def segments(ptx: str, kind: str = "CTA") -> list[tuple[dict[str, str], list[str]]]:
    """The stretches of ``ptx`` between ``// {kind} <op>-reduce of ...`` and
    ``// end of {kind} <op>-reduce``, with the facts the opening comment names (``acc``:
    one register, or several reduced side by side, comma-separated)."""
    found, lines = [], ptx.splitlines()
    opening = re.compile(rf"\s*// {kind} (\w+)-reduce of (%\w+(?:,%\w+)*) over (\d+) "
                         rf"(?:warp|CTA)\(s\) in (\w+) \((\w+) (%\w+), (\w+) (%\w+)"
                         rf"(?:, (\w+) (%\w+))?\)")
    for i, line in enumerate(lines):
        match = opening.fullmatch(line)
        if match:
            end = next(j for j in range(i + 1, len(lines))
                       if lines[j].strip() == f"// end of {kind} {match[1]}-reduce")
            facts = dict(op=match[1], acc=match[2], count=match[3], smem=match[4],
                         **{match[5]: match[6], match[7]: match[8]},
                         **({match[9]: match[10]} if match[9] else {}))
            found.append((facts, lines[i + 1:end]))
    return found


def _f32(text: str) -> float:
    return struct.unpack(">f", bytes.fromhex(text[2:]))[0]


def _operands(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


def run(lines: list[str], *, ctas: int, threads: int, registers: dict[str, np.ndarray],
        shared: dict[str, int], order: str = "forward") -> dict[str, np.ndarray]:
    """Run ``lines`` for ``ctas`` CTAs of ``threads`` threads; returns the registers.

    Args:
        registers: initial values, each shaped ``(cases, ctas * threads)``; thread t of
            CTA k is column ``k * threads + t``.
        shared: ``{name: entries}`` (see :func:`shared_arrays`): every CTA has its own
            copy, unwritten at the start.
        order: ``"forward"`` or ``"reverse"``: the order warps run between barriers.

    Raises:
        SimError: an unsupported instruction, an access outside a shared array, or a
            load of a slot no thread has stored yet.
    """
    regs = {name: np.array(value, dtype=np.float64) for name, value in registers.items()}
    cases = next(iter(regs.values())).shape[0]
    bases = {name: 16 * i * 1024 for i, name in enumerate(sorted(shared))}
    memory = {(k, name): np.zeros((cases, size)) for k in range(ctas)
              for name, size in shared.items()}
    written = {key: np.zeros(value.shape[1], dtype=bool) for key, value in memory.items()}
    phases, current = [], []
    for raw in lines:
        code = raw.split("//")[0].strip()
        if code.startswith(("bar.sync", "barrier.cluster.wait")):
            phases.append(current)
            current = []
        elif code and not code.startswith("barrier.cluster.arrive"):
            current.append(_parse(code.rstrip(";")))
    phases.append(current)
    warps = [(k, w) for k in range(ctas) for w in range(threads // 32)]
    if order == "reverse":
        warps.reverse()
    for phase in phases:
        for cta, warp in warps:
            columns = slice(cta * threads + 32 * warp, cta * threads + 32 * warp + 32)
            for code in phase:
                _step(code, regs, columns, cta, bases, shared, memory, written)
    return regs


def _locate(address: np.ndarray, bases: dict[str, int], sizes: dict[str, int],
            cta: int) -> tuple[np.ndarray, str, np.ndarray]:
    """(CTA rank, array name, entry index) of each lane's byte address."""
    cluster = address >= _WINDOW  # a distributed shared memory address (mapa)
    rank = np.where(cluster, address // _WINDOW - 1, cta).astype(int)
    offset = np.where(cluster, address - (rank + 1) * _WINDOW, address)
    for name, base in bases.items():
        if base <= offset[0] < base + 16 * 1024:
            index = (offset - base) / 4
            if np.any(index != np.floor(index)) or np.any(index < 0) or \
                    np.any(index >= sizes[name]):
                raise SimError(f"access outside .shared {name}[{sizes[name]}]: "
                               f"entries {sorted(set(index.astype(int).tolist()))}")
            return rank, name, index.astype(int)
    raise SimError(f"address {offset[0]} is in no .shared array")


def _parse(code: str) -> tuple[str, tuple[str, str] | None, str, list[str]]:
    """(text, (negated "!" or "", guard register) or None, opcode, operands)."""
    guard = _GUARD.match(code)
    op, _, rest = code[guard.end() if guard else 0:].partition(" ")
    return code, (guard[1], guard[2]) if guard else None, op, _operands(rest)


def _step(instruction: tuple, regs: dict[str, np.ndarray], columns: slice, cta: int,
          bases: dict[str, int], sizes: dict[str, int], memory: dict, written: dict) -> None:
    code, guard, op, args = instruction
    lanes = columns.stop - columns.start
    cases, width = next(iter(regs.values())).shape
    active = np.ones((cases, lanes), dtype=bool)
    if guard:
        active = regs[guard[1]][:, columns] != 0
        if guard[0]:
            active = ~active

    def value(text: str) -> np.ndarray:
        if text in regs:
            return regs[text][:, columns]
        if text in bases:
            constant = float(bases[text])
        elif text.startswith("0f"):
            constant = _f32(text)
        else:
            constant = float(int(text, 0))
        return np.broadcast_to(constant, (cases, lanes))

    def write(name: str, result: np.ndarray) -> None:
        if name not in regs:
            regs[name] = np.full((cases, width), np.nan)
        target = regs[name]
        target[:, columns] = np.where(active, result, target[:, columns]) if guard else result

    if op == "redux.sync.max.u32":
        if args[2] != "0xffffffff":
            raise SimError(f"{code}: the model reduces whole warps only")
        source = value(args[1])
        if np.any(source < 0) or np.any(np.isnan(source)):
            raise SimError(f"{code}: a negative or NaN value, whose bits do not order as u32")
        write(args[0], np.repeat(source.max(axis=1, keepdims=True), lanes, axis=1))
    elif op == "shfl.sync.bfly.b32":
        source = value(args[1])
        write(args[0], source[:, np.arange(32) ^ int(args[2])])
    elif op in ("add.f32", "max.f32", "min.f32"):
        fn = {"add.f32": np.add, "max.f32": np.fmax, "min.f32": np.fmin}[op]
        write(args[0], fn(value(args[1]), value(args[2])))
    elif op in ("setp.eq.u32", "setp.lt.u32"):
        fn = np.equal if op == "setp.eq.u32" else np.less
        write(args[0], fn(value(args[1]), value(args[2])).astype(np.float64))
    elif op in ("mov.u32", "mov.b32"):
        write(args[0], value(args[1]))
    elif op == "min.u32":
        write(args[0], np.minimum(value(args[1]), value(args[2])))
    elif op == "mad.lo.u32":
        write(args[0], value(args[1]) * value(args[2]) + value(args[3]))
    elif op == "mapa.shared::cluster.u32":
        write(args[0], (value(args[2]) + 1) * _WINDOW + value(args[1]))
    elif op in ("st.shared.b32", "ld.shared.b32", "st.shared::cluster.b32"):
        is_store = op.startswith("st")
        base, _, offset = (args[0] if is_store else args[1]).strip("[]").partition("+")
        address = value(base) + int(offset or "0")
        data = value(args[1]) if is_store else None
        if np.any(active != active[0]) or np.any(address != address[0]):
            raise SimError(f"{code}: guards or addresses differ between cases (the model "
                           f"needs the same control flow and addresses in every case)")
        on = np.flatnonzero(active[0])
        result = np.full((cases, lanes), np.nan)
        if len(on):
            ranks, name, index = _locate(address[0, on], bases, sizes, cta)
            for rank in np.unique(ranks):
                mine = ranks == rank
                lanes_of, entries = on[mine], index[mine]
                if is_store:
                    memory[(rank, name)][:, entries] = data[:, lanes_of]
                    written[(rank, name)][entries] = True
                elif not written[(rank, name)][entries].all():
                    raise SimError(f"{code}: a lane reads {name} of CTA {rank} before any "
                                   f"thread stored it (a missing barrier?)")
                else:
                    result[:, lanes_of] = memory[(rank, name)][:, entries]
        if not is_store:
            write(args[0], result)
    else:
        raise SimError(f"the model cannot run {code!r}")


# --- which vectors of a row each pass touches ---------------------------------------------

_SETP = re.compile(r"setp\.lt\.u32\s+(%\w+),\s*%\w+,\s*(\d+);")
#: a row guard of a CTA that takes several rows (``setp.lt.u32 %prow1, %r9, %r2``: row < rows)
_ROW_SETP = re.compile(r"setp\.lt\.u32\s+(%\w+),\s*%\w+,\s*%\w+;")
_AND_PRED = re.compile(r"and\.pred\s+(%\w+),\s*(%\w+),\s*(%\w+);")
_LOOP_END = re.compile(r"@(%\w+) bra\s+(\w+);")


def row_coverage(ptx: str, op: str, cursors: tuple[str, ...], vector_bytes: int,
                 threads: int) -> list[dict[int, int]]:
    """Model which vectors of one row the accesses ``op`` (``"ld"`` or ``"st"``) through
    ``cursors`` reach, for each pass over the row: ``[{vector index: times}, ...]``.

    Follows what the row templates (rmsnorm, softmax, fp8_quant) do: every thread ``t`` of
    the CTA accesses ``[cursor+offset]`` at vector ``(base + offset) / vector_bytes + t``
    unless its guard ``@%p`` was set by ``setp.lt.u32 %p, %tid, N`` with ``t >= N`` (a row
    guard of a CTA that takes several rows, ``setp.lt.u32 %prow, %row, %rows``, lets every
    thread through: the model's launch holds every row; ``and.pred`` takes the stricter
    of two guards, so a CTA's rows ``i`` show as vectors ``i * row vectors + v``); a
    cursor moves by ``add.u64 c, c, step``, is reset to the row's start by ``mov.u64
    c, %rd..`` and placed ``k`` bytes into the row by ``add.u64 c, %rd.., k`` (each of
    which begins a new pass); a loop ``LABEL: ... @%p3 bra LABEL`` runs ``N`` times,
    ``N`` from its ``setp.lt.u32 %p3, %chunk, N``.

    The trip count is trusted only once :func:`check_loops` has shown that each loop
    carries its counter and cursors (and every other value) from trip to trip.

    Raises:
        SimError: a guard predicate set by no ``setp.lt.u32`` before its use, or a loop
            that :func:`check_loops` refuses.
    """
    check_loops(ptx)
    lines = [line.split("//")[0].strip() for line in ptx.splitlines()]
    names = "|".join(map(re.escape, cursors))
    access = re.compile(rf"^(?:@(%\w+) )?{op}\.global[.\w:]*\s+.*\[({names})\+(\d+)\]")
    passes: list[dict[int, int]] = []
    state = {"base": {c: 0 for c in cursors}, "guards": {}}

    def run(start: int, stop: int) -> None:
        i = start
        while i < stop:
            line = lines[i]
            if line.endswith(":") and not line.startswith("DONE"):
                end = next(j for j in range(i + 1, len(lines))
                           if (m := _LOOP_END.match(lines[j])) and m.group(2) == line[:-1])
                trips = int(_SETP.match(lines[end - 1]).group(2))
                for _ in range(trips):
                    run(i + 1, end)
                i = end + 1
                continue
            if m := _SETP.match(line):
                state["guards"][m.group(1)] = int(m.group(2))
            elif m := _ROW_SETP.match(line):
                state["guards"][m.group(1)] = threads
            elif m := _AND_PRED.match(line):
                # a predicate no setp.lt.u32 set (Fp8Quant's group-leader %p1) does not limit
                state["guards"][m.group(1)] = min(state["guards"].get(m.group(2), threads),
                                                  state["guards"].get(m.group(3), threads))
            elif m := re.match(r"add\.u64\s+(%\w+),\s*\1,\s*(\d+);", line):
                if m.group(1) in cursors:
                    state["base"][m.group(1)] += int(m.group(2))
            elif m := (re.match(r"mov\.u64\s+(%\w+),\s*%rd\d+;()", line)
                       or re.match(r"add\.u64\s+(%\w+),\s*%rd\d+,\s*(\d+);", line)):
                if m.group(1) in cursors:
                    state["base"][m.group(1)] = int(m.group(2) or 0)
                    if m.group(1) == cursors[0]:
                        passes.append({})
            elif m := access.match(line):
                if not passes:
                    passes.append({})
                guard, cursor, offset = m.group(1), m.group(2), int(m.group(3))
                if guard and guard not in state["guards"]:
                    raise SimError(f"guard {guard} used before any setp: {line}")
                limit = state["guards"][guard] if guard else threads
                first = (state["base"][cursor] + offset) // vector_bytes
                for t in range(min(limit, threads)):
                    passes[-1][first + t] = passes[-1].get(first + t, 0) + 1
            i += 1

    run(0, len(lines))
    return passes


# --- what a chunk loop carries from one trip to the next ----------------------------------

_REG = re.compile(r"\.reg\s+\.\w+\s+(%\w+)(?:<(\d+)>)?\s*;")
_NAME = re.compile(r"%\w+")
#: opcodes (by prefix) that write no register: every operand is read
_NO_DESTINATION = ("st.", "bra", "bar.", "barrier.", "ret", "red.", "prefetch", "fence.",
                   "membar.", "trap", "exit")


def registers(ptx: str) -> set[str]:
    """Every register ``ptx`` declares (``.reg .b32 %r<12>;``: ``%r0`` to ``%r11``)."""
    names: set[str] = set()
    for name, count in _REG.findall(ptx):
        names.update(f"{name}{i}" for i in range(int(count))) if count else names.add(name)
    return names


def _top_level(text: str) -> list[str]:
    """The operands of ``text``: commas inside ``{ }`` and ``[ ]`` do not split."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char in "{[" and 1) or (-1 if char in "}]" else 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return parts + [current.strip()] if current.strip() else parts


def accesses(code: str, names: set[str]) -> tuple[list[str], list[str]]:
    """``(registers written, registers read)`` by one instruction (its text without the
    ``;``), among the declared ``names``. The first operand is the destination (a ``{ }``
    vector, or ``%p|%q`` of setp), except for stores, branches, barriers and reductions,
    which write no register. A guard is read. (The old value of a guarded destination
    stays where the guard is off: :func:`check_loops` counts it as read in a loop body.)"""
    guard = _GUARD.match(code)
    operands = _top_level(code[guard.end() if guard else 0:].partition(" ")[2])
    split = 0 if _opcode(code).startswith(_NO_DESTINATION) or not operands else 1
    written = [n for n in _NAME.findall(" ".join(operands[:split])) if n in names]
    read = [n for n in _NAME.findall(" ".join(operands[split:])) if n in names]
    if guard:
        read.append(guard[2])
    return written, read


def _opcode(code: str) -> str:
    """The opcode of one instruction, after its guard."""
    guard = _GUARD.match(code)
    return code[guard.end() if guard else 0:].partition(" ")[0]


def _instructions(lines: list[str]) -> list[str]:
    """The instructions among ``lines`` (comments, directives, braces and labels left out)."""
    return [c for c in lines if c and not c.startswith((".", "{", "}")) and not c.endswith(":")]


def loops(ptx: str) -> list[tuple[str, list[str], list[str], list[str]]]:
    """``(label, before, body, after)`` for each loop ``LABEL: ... @%p bra LABEL;``: the
    instructions before the label, inside the body (its closing branch left out) and
    after it.

    A body may branch forward to its own labels (a window's edge vectors,
    templates/window.ptx.j2): the model then reads both arms as one straight line, which
    is what a register carried around the loop must survive.

    Raises:
        SimError: a body that branches out of itself (a label outside it).
    """
    lines = [line.split("//")[0].strip() for line in ptx.splitlines()]
    found = []
    for i, line in enumerate(lines):
        if not line.endswith(":") or " " in line:
            continue
        label = line[:-1]
        end = next((j for j in range(i + 1, len(lines))
                    if (m := _LOOP_END.match(lines[j])) and m.group(2) == label), None)
        if end is None:
            continue
        body = _instructions([c.rstrip(";") for c in lines[i + 1:end]])
        inner = {c[:-1] for c in lines[i + 1:end] if c.endswith(":")}
        targets = [c.split()[-1] for c in body if "bra" in c.split()[:2]]
        if any(t not in inner for t in targets):
            raise SimError(f"loop {label}: the model needs a body whose branches stay inside it")
        found.append((label, _instructions([c.rstrip(";") for c in lines[:i]]), body,
                      _instructions([c.rstrip(";") for c in lines[end + 1:]])))
    return found


def check_loops(ptx: str) -> None:
    """Check what every loop of ``ptx`` carries from one trip to the next.

    * The closing branch must test a value carried from the trip before: its predicate
      must derive from a register the body reads before writing it and updates from its
      own value (the counter, ``add.u32 %chunk, %chunk, 1``). A counter that a scratch register
      aliases is overwritten before it is read (``mov.b32 %r7, {%h2, %h3}``): the loop
      then ends early, or never, with the data.
    * Every other carried register (read before it is written: the cursors, a running max
      or sum, a scale or a predicate set before the loop) must leave the body holding a
      value derived from the one it found (``max.f32 %m1, %m1, %m0`` then ``mov.b32 %m0,
      %m1``), or the next trip reads something else.
    * A register set before the loop and read after it must not be overwritten by the body
      (a guarded load after the loop reads nothing: the row templates guard a sweep's
      stores as its loads, so an element a guard keeps is never stored).

    Loaded values derive from memory, not from their address: a cursor's value never
    reaches the branch through the data it loads.

    Raises:
        SimError: naming the loop, the register and the instruction that overwrote it.
    """
    names = registers(ptx)
    problems = []
    for label, before, body, after in loops(ptx):
        depends: dict[str, frozenset[str]] = {}  # register -> the entry values it derives from
        exposed: set[str] = set()
        overwritten: dict[str, str] = {}  # register -> the instruction that lost its entry value
        for code in body:
            writes, reads = accesses(code, names)
            reads += writes if _GUARD.match(code) else []  # the old value where the guard is off
            exposed.update(r for r in reads if r not in depends)
            if _opcode(code).startswith("ld."):  # the data, not the address: only a kept old value
                reads = [r for r in reads if r in writes]
            source = frozenset().union(*(depends.get(r, {r}) for r in reads))
            for w in writes:
                if w not in source and w not in overwritten:
                    overwritten[w] = code
                depends[w] = source
        carried = {r for r in exposed if r in depends and r in depends[r]}
        for r in sorted(exposed - carried):
            if r in depends:
                problems.append(f"loop {label}: {r} carries a value into the next trip, but "
                                f"the body overwrites it ({overwritten[r]!r})")
        branch = _LOOP_END.match(_closing(ptx, label))[1]
        if not depends.get(branch, {branch}) & carried:
            test = next(c for c in reversed(body) if branch in accesses(c, names)[0])
            problems.append(f"loop {label}: its test ({test!r}) derives from no value carried "
                            f"from the trip before: "
                            + ", ".join(f"{r} is overwritten by {code!r}" for r, code in
                                        overwritten.items() if r in accesses(test, names)[1]))
        set_before = {w for code in before for w in accesses(code, names)[0]}
        for r in sorted(set(overwritten) - exposed & set_before):
            first = next((code for code in after
                          if any(r in part for part in accesses(code, names))), None)
            if first is not None and r in accesses(first, names)[1]:
                problems.append(f"loop {label}: {r} is set before the loop and read after it "
                                f"({first!r}), but the body overwrites it ({overwritten[r]!r})")
    if problems:
        raise SimError("; ".join(problems))


def _closing(ptx: str, label: str) -> str:
    """The branch that closes the loop ``label``."""
    return next(line.split("//")[0].strip() for line in ptx.splitlines()
                if (m := _LOOP_END.match(line.strip())) and m.group(2) == label)
