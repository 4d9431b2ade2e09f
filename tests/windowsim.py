"""Test helper: which elements of one row a windowed row kernel reads or writes
(``templates/window.ptx.j2``), modeled for every thread of the CTA at one phase.

A row of a length that is not a multiple of a 16-byte vector starts at ``phase`` elements
past a vector boundary; the kernel walks the aligned vectors that cover it, branching
around the element-by-element code of its edge vectors. ``ptxsim.row_coverage`` follows
vector accesses of threads that all take the same path; this model runs the threads side
by side (NumPy arrays over the CTA) through the branches, each thread on its own path:

* u32/s32 ``mov``, ``add``, ``sub``, ``mul.lo``, ``and`` and ``setp`` on registers it
  knows (``%tid.x``; ``%ctaid.x`` and ``%clusterid.x`` are row 0; ``ld.param.u32`` of
  ``rows`` and ``%nctaid.x`` are 1, the row the last of the array, or 2 with ``last``
  false), and ``and.pred``/``or.pred``; the thread's first element ``%first0`` is
  ``tid * lanes - phase`` whatever the PTX computes for it (the phase of row 0 is 0: the
  model sets it);
* forward branches (``@%p bra``, ``@!%p bra``, ``bra``): a thread that takes one waits
  at its label; a loop's closing branch must be taken by every running thread alike;
* each cursor (a pointer to the thread's first element) moves by ``add.u64 c, c, n``
  (``n`` bytes) and returns to the thread's first element with ``mov.u64 c, %rd..``,
  which starts a new pass (for the first cursor named);
* an access ``ld``/``st`` of 1 to 16 bytes at ``[cursor+offset]`` under its guard
  covers that many bytes' elements.

Any other instruction is left out: it touches no register the model follows. A guard or
branch on a predicate the model cannot evaluate fails the test that runs it.
"""

from __future__ import annotations

import re

import numpy as np

from ptxsim import SimError, check_loops

__all__ = ["window_coverage", "every_phase", "loads_in_array"]

_SIZES = {"v4.b32": 16, "v2.b32": 8, "b32": 4, "b16": 2, "b8": 1}
_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}
_GUARDED = re.compile(r"^@(!?)(%\w+)\s+(.*)$")
_BRANCH = re.compile(r"^bra(?:\.uni)?\s+(\w+);$")
_SETP = re.compile(r"^setp\.(\w+)\.([us]32)\s+(%\w+),\s*([%\w]+),\s*([%\w-]+);$")
_ARITH = re.compile(r"^(mov|add|sub|mul\.lo|and)\.[bsu]32\s+(%\w+),\s*([%\w.-]+)"
                    r"(?:,\s*([%\w-]+))?;$")
_STEP = re.compile(r"^add\.u64\s+(%\w+),\s*\1,\s*(\d+);$")
#: a cursor set to its row's start (mov), or k bytes into it (add from another register)
_RESET = re.compile(r"^(?:mov\.u64\s+(%\w+),\s*%rd\d+|add\.u64\s+(%\w+),\s*%rd\d+,\s*(\d+));$")
_ROWS = re.compile(r"^ld\.param\.u32\s+(%\w+),\s*\[rows\];$")
_LOGIC = re.compile(r"^(and|or)\.pred\s+(%\w+),\s*(%\w+),\s*(%\w+);$")


def window_coverage(ptx: str, op: str, cursors: tuple[str, ...], element_bytes: int,
                    lanes: int, threads: int, phase: int,
                    last: bool = True) -> list[dict[int, int]]:
    """``[{row element: times}, ...]``, one dict a pass, of the accesses ``op`` (``"ld"``
    or ``"st"``) through ``cursors`` (arrays of ``element_bytes``-byte elements) by
    ``threads`` threads, for a row at ``phase`` (0 to lanes - 1), the last of its array
    or (``last`` false) one with a next row. An element outside the row shows as its
    (negative or too large) index.

    Raises:
        SimError: from :func:`ptxsim.check_loops`, or a branch or guard on a predicate the
            model does not know, a loop whose threads disagree, a misaligned cursor step.
    """
    check_loops(ptx)
    lines = [line.split("//")[0].strip() for line in ptx.splitlines()]
    lines = [line for line in lines if line and not line.startswith((".", "{", "}"))]
    labels = {line[:-1]: i for i, line in enumerate(lines) if line.endswith(":")}
    access = re.compile(rf"^{op}\.global[.\w:]*?\.(v4\.b32|v2\.b32|b32|b16|b8)\s+.*"
                        rf"\[({'|'.join(map(re.escape, cursors))})\+(\d+)\]")
    tid = np.arange(threads, dtype=np.int64)
    first = tid * lanes - phase
    regs: dict[str, np.ndarray] = {"%tid.x": tid, "%first0": first}
    preds: dict[str, np.ndarray] = {}
    cursor = {c: first.copy() for c in cursors}
    waiting = np.full(threads, -1)  # the line of the label a thread waits for
    passes: list[list[np.ndarray]] = []  # the element indices each pass touched

    rows = 1 if last else 2

    def value(operand: str) -> np.ndarray | None:
        if operand in ("%ctaid.x", "%clusterid.x"):
            return np.zeros(threads, dtype=np.int64)
        if operand == "%nctaid.x":
            return np.full(threads, rows, dtype=np.int64)
        if operand.startswith("%"):
            return regs.get(operand)
        try:
            return np.full(threads, int(operand, 0), dtype=np.int64)
        except ValueError:  # a float immediate: not a value the model follows
            return None

    def predicate(name: str, negate: str, line: str) -> np.ndarray:
        if name not in preds:
            raise SimError(f"a predicate the model does not know: {line}")
        return ~preds[name] if negate else preds[name]

    i, steps = 0, 0
    while i < len(lines):
        steps += 1
        if steps > 1_000_000:
            raise SimError("the model ran away (a loop that never ends?)")
        line = lines[i]
        if line.endswith(":"):
            waiting[waiting == i] = -1
            i += 1
            continue
        active = waiting < 0
        guard = np.ones(threads, dtype=bool)
        if m := _GUARDED.match(line):
            line = m[3]
            if _BRANCH.match(line) or access.match(line) or m[2] in preds:
                guard = predicate(m[2], m[1], lines[i])
            elif _SETP.match(line) or _ARITH.match(line) or _STEP.match(line):
                raise SimError(f"a predicate the model does not know: {lines[i]}")
        if m := _BRANCH.match(line):
            target = labels[m[1]]
            taken = active & guard
            if target < i:  # a loop's closing branch: every running thread alike
                if taken.any() and not taken[active].all():
                    raise SimError(f"threads disagree on a loop's branch: {lines[i]}")
                if taken.any():
                    i = target + 1
                    continue
            else:
                waiting[taken] = target
        elif line.startswith("ret"):
            waiting[active & guard] = len(lines)
        elif m := _SETP.match(line):
            a, b = value(m[4]), value(m[5])
            if a is None or b is None:
                preds.pop(m[3], None)
            else:
                if m[2] == "u32":
                    a, b = a & 0xFFFFFFFF, b & 0xFFFFFFFF
                else:
                    a, b = (a + 2**31) % 2**32 - 2**31, (b + 2**31) % 2**32 - 2**31
                fresh = _COMPARE[m[1]](a, b)
                preds[m[3]] = np.where(active & guard, fresh, preds.get(m[3], fresh))
        elif m := _ROWS.match(line):
            regs[m[1]] = np.full(threads, rows, dtype=np.int64)
        elif m := _LOGIC.match(line):
            a, b = predicate(m[3], "", lines[i]), predicate(m[4], "", lines[i])
            fresh = (a & b) if m[1] == "and" else (a | b)
            preds[m[2]] = np.where(active & guard, fresh, preds.get(m[2], fresh))
        elif (m := _ARITH.match(line)) and m[2] != "%first0":  # the model sets %first0
            a = value(m[3])
            b = value(m[4]) if m[4] else a
            if a is None or b is None:
                regs.pop(m[2], None)
            else:
                fresh = _arith(m[1], a, b)
                regs[m[2]] = np.where(active & guard, fresh, regs.get(m[2], fresh))
        elif m := _STEP.match(line):
            if m[1] in cursor:
                if int(m[2]) % element_bytes:
                    raise SimError(f"a cursor step of part of an element: {lines[i]}")
                step = int(m[2]) // element_bytes
                cursor[m[1]] = cursor[m[1]] + np.where(active & guard, step, 0)
        elif m := _RESET.match(line):
            name, into = m[1] or m[2], int(m[3] or 0)
            if name in cursor:
                if into % element_bytes:
                    raise SimError(f"a cursor placed in part of an element: {lines[i]}")
                cursor[name] = first + into // element_bytes
                if name == cursors[0]:
                    passes.append([])
        elif m := access.match(line):
            if not passes:
                passes.append([])
            size, offset = _SIZES[m[1]], int(m[3])
            if offset % element_bytes or size % element_bytes:
                raise SimError(f"an access of part of an element: {lines[i]}")
            starts = cursor[m[2]][active & guard] + offset // element_bytes
            passes[-1].append((starts[:, None] + np.arange(size // element_bytes)).ravel())
        i += 1
    found = []
    for touched in passes:
        elements, counts = np.unique(np.concatenate(touched or [np.zeros(0, np.int64)]),
                                     return_counts=True)
        found.append(dict(zip(elements.tolist(), counts.tolist(), strict=True)))
    return found


def _arith(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The u32/s32 operation ``op`` of ``_ARITH`` (``mov`` copies ``a``)."""
    if op == "mov":
        return a
    return {"add": np.add, "sub": np.subtract, "mul.lo": np.multiply,
            "and": np.bitwise_and}[op](a, b)


def every_phase(ptx: str, op: str, cursors: tuple[str, ...], element_bytes: int, lanes: int,
                threads: int, last: bool = True) -> list[list[dict[int, int]]]:
    """:func:`window_coverage` at each phase a row can start at, 0 to ``lanes`` - 1."""
    return [window_coverage(ptx, op, cursors, element_bytes, lanes, threads, phase, last)
            for phase in range(lanes)]


def merged(passes: list[dict[int, int]]) -> dict[int, int]:
    """``{index: times}`` over all of ``passes`` (one dict a pass, as the models give)."""
    total: dict[int, int] = {}
    for touched in passes:
        for index, times in touched.items():
            total[index] = total.get(index, 0) + times
    return total


def loads_in_array(ptx: str, cursors: tuple[str, ...], element_bytes: int, lanes: int,
                   threads: int, length: int, passes: int = 1,
                   reread: int | None = None) -> list[str]:
    """What is wrong with the loads through ``cursors`` of a row of ``length`` elements,
    at every phase, as the last row of its array and as one with a next row ([]: nothing).

    Each pass must load every element of the row once; with ``reread``, the last pass
    only the elements of the window's first ``reread`` vectors (a chunked row's pass 2,
    which finds the last chunk still in the registers). A whole edge vector may also load,
    once each, the elements of the previous row before the row's start (at most lanes - 1
    of them) and, where a next row follows, of that row after its end; never anything past
    the array's end (the last row's tail)."""
    wrong = []
    for last in (True, False):
        after = set() if last else set(range(length, length + lanes - 1))
        allowed = set(range(-(lanes - 1), 0)) | after
        for phase, found in enumerate(every_phase(ptx, "ld", cursors, element_bytes, lanes,
                                                  threads, last)):
            if len(found) != passes:
                wrong.append(f"phase {phase}, last={last}: {len(found)} passes")
            for number, touched in enumerate(found, 1):
                end = length if reread is None or number < passes else reread * lanes - phase
                inside = {i: n for i, n in touched.items() if 0 <= i < length}
                outside = {i: n for i, n in touched.items() if not 0 <= i < length}
                if inside != dict.fromkeys(range(end), 1):
                    wrong.append(f"phase {phase}, last={last}: the row's elements not once each")
                if set(outside) - allowed or set(outside.values()) - {1}:
                    wrong.append(f"phase {phase}, last={last}: loads outside the row "
                                 f"{sorted(set(outside) - allowed)[:8]}")
    return wrong
