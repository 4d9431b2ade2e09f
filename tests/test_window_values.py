"""The values of a window's edge code (``templates/window.ptx.j2``), run on the CPU for every
phase a row can start at: RMSNorm's funnel-shifted weight (``shift_setup``, ``shifted``)
and the fill of a whole-loaded edge vector's elements outside the row (``finish``).

A row at phase p starts p elements past a 16-byte boundary while the weight starts aligned,
so a window vector needs weight elements ``start .. start + lanes - 1``, which straddle two
aligned vectors; and an edge vector loaded whole holds elements of the neighbour rows,
which must take the fill value. The GPU tests check the outputs against float64 at every
phase; this model checks the values where no GPU is. It executes the rendered PTX of those
blocks for one thread (a straight line of u32/u64 arithmetic, ``setp``, ``selp``, ``prmt``
and vector loads from a fake weight) and compares the words they build with what they
should hold. (``tests/windowsim.py`` checks which elements are loaded and stored.)
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from specdsl import render
from specdsl.kernels import Fp8Quant, RMSNorm, Softmax

BASE = 1 << 20  # the weight's (fake) device address: 16-byte aligned
GARBAGE = 0xDEADBEEF  # what a register holds before it is written
_GUARD = re.compile(r"^@(!?)(%\w+)\s+(.*)$")


def _prmt(a: int, b: int, selector: int) -> int:
    """PTX ISA "prmt" (default mode): result byte i is byte (selector nibble i) of b:a."""
    source = (b << 32 | a).to_bytes(8, "little")
    return int.from_bytes(bytes(source[(selector >> 4 * i) & 7] for i in range(4)), "little")


def run(lines: list[str], regs: dict[str, int], memory: bytes = b"",
        preds: dict[str, bool] | None = None) -> dict[str, int]:
    """Execute a straight line of PTX instructions on scalar registers (``regs``, updated);
    a branch must not be taken (its guard false)."""
    preds = dict(preds or {})

    def val(operand: str) -> int:
        if operand.startswith("%"):  # a register never written holds garbage (B at phase 0)
            return regs.get(operand, GARBAGE)
        return int(operand, 0)

    for line in lines:
        line = line.split("//")[0].strip().rstrip(";")
        if not line or line.endswith(":"):
            continue
        if m := _GUARD.match(line):
            if preds[m[2]] == (m[1] == "!"):
                continue
            line = m[3]
        op, _, rest = line.partition(" ")
        args = [a.strip() for a in rest.replace("{", "").replace("}", "").split(",")]
        if op.startswith("ld.global"):
            base, _, offset = args[-1].strip("[]").partition("+")
            address = regs[base] + int(offset or 0)
            words = np.frombuffer(memory, dtype="<u4", count=4, offset=address - BASE)
            for name, word in zip(args[:-1], words, strict=True):
                regs[name] = int(word)
        elif op.startswith("setp."):
            _, cmp, kind = op.split(".")
            a, b = val(args[1]) % 2**32, val(args[2]) % 2**32
            if kind == "s32":
                a, b = (a + 2**31) % 2**32 - 2**31, (b + 2**31) % 2**32 - 2**31
            preds[args[0]] = {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b,
                              "gt": a > b, "ge": a >= b}[cmp]
        elif op == "bra":
            raise AssertionError(f"a branch the model does not take: {line}")
        elif op == "selp.b32":
            regs[args[0]] = val(args[1]) if preds[args[3]] else val(args[2])
        elif op == "prmt.b32":
            regs[args[0]] = _prmt(val(args[1]), val(args[2]), val(args[3]))
        elif op in ("mov.b32", "mov.u32"):
            regs[args[0]] = val(args[1])
        elif op == "mul.wide.u32":
            regs[args[0]] = val(args[1]) * val(args[2])
        elif op in ("add.u64", "sub.u64", "add.s32", "sub.u32", "and.b32", "shr.u32"):
            a, b = val(args[1]), val(args[2])
            result = {"add": a + b, "sub": a - b, "and": a & b, "shr": a >> b}[op.split(".")[0]]
            regs[args[0]] = result & (2**64 - 1 if op.endswith("64") else 2**32 - 1)
        else:
            raise AssertionError(f"an instruction the model does not run: {line}")
    return regs


def _blocks(ptx: str) -> tuple[list[str], list[str], list[str]]:
    """(shift_setup's lines, the first shifted vector's lines, its destination words)."""
    lines = ptx.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s+mul\.wide\.u32\s+%rd11,", line))
    end = next(i for i, line in enumerate(lines) if "setp.ne.u32         %pj2" in line)
    first = lines.index("PW0_shift:")
    last = lines.index("PW0_shifted:")
    words = [m for line in lines[first:last]
             for m in re.findall(r"^\s+(?:prmt|mov)\.b32\s+(%g\d+),", line)]
    return lines[start:end + 1], lines[first + 1:last], words


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_shifted_weight_matches_the_row_at_every_phase(dtype):
    """For every phase and threads inside the row, the words built from the two aligned
    weight vectors hold weight[start .. start + lanes - 1], in order."""
    hidden = 4097 if dtype != "f32" else 2049
    spec = RMSNorm(hidden=hidden, dtype=dtype)
    assert spec.windowed
    ptx = render(spec)
    assert "PW0_shift:" in ptx  # the funnel, not the element-by-element weight
    setup, shifted, words = _blocks(ptx)
    lanes, esize = spec.vector, spec.dtype.size
    weight = np.arange(1, hidden + 1 + lanes, dtype=f"<u{esize}")  # every element distinct
    memory = weight.tobytes()
    for phase in range(lanes):
        for tid in (1, 2, 7, spec.block // 2):
            first = tid * lanes - phase  # the thread's first window vector starts here
            if not 0 <= first <= hidden - 2 * lanes + 1:
                continue  # the template's own test sends these element by element
            regs = {"%r6": phase, "%rd5": BASE + first * esize}
            regs = run(setup + shifted, regs, memory)
            built = np.array([regs[w] for w in words], dtype="<u4").view(f"<u{esize}")
            assert built.tolist() == weight[first:first + lanes].tolist(), (phase, tid)


@pytest.mark.parametrize("mutation", [
    ("0x5432, 0x3210", "0x6543, 0x3210"),  # the half selector off by one element
    ("setp.ne.u32         %pj1, %wd0, 0;", "setp.eq.u32         %pj1, %wd0, 0;"),  # word pick
])
def test_the_model_catches_a_wrong_pick(mutation):
    """A wrong selector or word pick builds other words than weight[23 .. 30] (thread 3,
    phase 1, bf16)."""
    ptx = render(RMSNorm(hidden=4097))
    broken = ptx.replace(*mutation)
    assert broken != ptx
    weight = np.arange(1, 4097 + 8, dtype="<u2")
    for text, same in ((ptx, True), (broken, False)):
        setup, shifted, words = _blocks(text)
        regs = run(setup + shifted, {"%r6": 1, "%rd5": BASE + (8 * 3 - 1) * 2}, weight.tobytes())
        built = np.array([regs[w] for w in words], dtype="<u4").view("<u2")
        assert (built.tolist() == weight[23:31].tolist()) == same


def _finish_block(ptx: str, slot: int) -> list[str]:
    """The lines of ``finish`` for sweep ``slot`` (after its guard, up to its label)."""
    lines = ptx.splitlines()
    first = next(i for i, line in enumerate(lines) if f"@!%pedge{slot} bra" in line)
    return lines[first + 1:lines.index(f"EDGE{slot}_kept:")]


def fill_errors(ptx: str, kernel: Any, fill: int) -> list[tuple[int, int]]:
    """(phase, window vector) of each edge whose words ``finish`` (in ``ptx``) leaves other
    than the loaded elements inside the row and ``fill`` outside: the head edge (thread 0,
    starting at -phase) and the tail (the thread whose vector holds the row's last element),
    at every phase > 0."""
    lanes, block = kernel.vector, kernel.block
    length = getattr(kernel, "hidden", None) or kernel.cols
    prefix = "%a" if isinstance(kernel, Fp8Quant) else "%w"
    loaded = np.arange(0x1001, 0x1001 + lanes, dtype="<u2")  # what the load put in the words
    wrong = []
    for phase in range(1, lanes):
        tail = (length - 1 + phase) // lanes  # the window vector holding the last element
        for vector in (0, tail):
            sweep, tid = divmod(vector, block)
            words = [f"{prefix}{4 * sweep + k}" for k in range(4)]
            regs = {"%first": (tid * lanes - phase) % 2**32,  # the thread's first element
                    **dict(zip(words, loaded.view("<u4").tolist(), strict=True))}
            regs = run(_finish_block(ptx, sweep), regs)
            got = np.array([regs[w] for w in words], dtype="<u4").view("<u2").tolist()
            start = vector * lanes - phase
            want = [int(loaded[e]) if 0 <= start + e < length else fill for e in range(lanes)]
            if got != want:
                wrong.append((phase, vector))
    return wrong


@pytest.mark.parametrize("kernel,fill", [
    (RMSNorm(hidden=4097), 0x0000), (RMSNorm(hidden=4097, dtype="f16"), 0x0000),
    (Softmax(cols=4097), 0xFF80), (Softmax(cols=4097, dtype="f16"), 0xFC00),
    (Softmax(cols=50257), 0xFF80), (Fp8Quant(hidden=4097), 0x0000)])
def test_edge_fill_keeps_the_row_and_fills_the_rest(kernel, fill):
    """A whole-loaded edge vector keeps its elements inside the row and gets the fill in
    the others (0 for the sums of RMSNorm and Fp8Quant's maximum, -inf for Softmax's)."""
    assert fill_errors(render(kernel), kernel, fill) == []


def test_the_fill_model_catches_swapped_halves():
    """Filling the high half where the low one is outside the row (selectors swapped) is
    caught at every phase."""
    kernel = Softmax(cols=4097)
    ptx = render(kernel)
    swapped = (ptx.replace("0x3254;", "0xSWAP;").replace("0x7610;", "0x3254;")
               .replace("0xSWAP;", "0x7610;"))
    assert swapped != ptx
    assert {phase for phase, _ in fill_errors(swapped, kernel, 0xFF80)} == set(range(1, 8))
