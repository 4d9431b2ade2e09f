"""Test helper: assemble rendered PTX with nvJitLink (on the CPU) and fail loudly."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from specdsl._render.render import render
from specdsl._runtime.compile import Compiled, compile_ptx
from specdsl.errors import CompileError


def assemble(spec, target: str = "sm_90") -> Compiled:
    """Render ``spec`` and compile it for ``target``; returns the cubin and ptxas's log."""
    compiled = compile_ptx(render(spec, target), target, spec=spec)
    assert compiled.cubin[:4] == b"\x7fELF", "nvJitLink returned no ELF cubin"
    return compiled


def compile_each(jobs: Iterable[tuple[str, Any]], target: Any) -> list[Compiled | CompileError]:
    """``compile_ptx(ptx, target, spec=spec)`` for each ``(ptx, spec)`` of ``jobs``, in
    order: the cubin, or the CompileError it raised. nvJitLink lets go of the GIL while it
    assembles, so a thread per core assembles that many modules at once (1.8x on two cores);
    the tests that assemble hundreds of modules use it to stay within CI's time."""
    def one(job: tuple[str, Any]) -> Compiled | CompileError:
        ptx, spec = job
        try:
            return compile_ptx(ptx, target, spec=spec)
        except CompileError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(one, jobs))


def assert_no_spills(compiled: Compiled) -> None:
    """Fail if any entry of ``compiled`` spills or keeps a stack frame.

    Reads ptxas's spill figures where the nvJitLink build prints them, and the stack
    frame (where spills live) everywhere, so it holds on every toolchain.
    """
    resources = compiled.resources()
    assert resources, f"no resource report in the log:\n{compiled.log}"
    for entry, used in resources.items():
        assert not used.spills and used.stack_frame == 0, f"{entry} spills: {used}"


def assert_lines_demoted(ptx: str, loads: list[tuple[str, str, int]],
                         line_of: dict[str, str]) -> None:
    """Fail unless each of ``loads`` (guard or "", cursor, byte offset), loaded under an
    L2 policy, has exactly one ``applypriority.global.L2::evict_normal`` on its 128-byte
    line (templates/rows.ptx.j2, demote_lines): at the same offset from the line register
    ``line_of`` maps to the load's cursor, set by ``and.b64 line, cursor, -128``, by lanes
    0, 8, 16 and 24 (``%pline0``), and under ``%pline1`` (``%pline0`` and the load's own
    guard) exactly where the load is guarded."""
    demote = re.compile(r"@(%pline[01]) applypriority\.global\.L2::evict_normal "
                        r"\[(%rd\d+)\+(\d+)\], 128;")
    demotes = [(pred, line_of[line], int(offset)) for pred, line, offset in demote.findall(ptx)]
    assert sorted((cursor, offset) for _, cursor, offset in loads) == sorted(
        (cursor, offset) for _, cursor, offset in demotes)
    guarded = {(cursor, offset) for guard, cursor, offset in loads if guard}
    assert all((pred == "%pline1") == ((cursor, offset) in guarded)
               for pred, cursor, offset in demotes)
    for guard in {g.strip() for g, _, _ in loads if g}:
        assert f"and.pred            %pline1, %pline0, {guard[1:]};" in ptx
    rounded = [f"and.b64             {reg}, {cursor}, -128;" for reg, cursor in line_of.items()]
    for line in ["and.b32             %r10, %r4, 7;", "setp.eq.u32         %pline0, %r10, 0;",
                 *rounded]:
        assert line in ptx


_KEPT_POLICY_LINES = re.compile(
    r"^.*(createpolicy\.fractional\.L2::evict_last|\.reg \.b64   %keep;).*\n", re.M)


def without_kept_policy(ptx: str, hint: str = ".L2::cache_hint") -> str:
    """``ptx`` of an ``l2_evict_last`` request without its policy: the ``createpolicy`` and
    ``%keep`` declaration lines, and ``hint`` and the ``%keep`` operand on every load (pass
    Softmax's ``".L1::no_allocate.L2::cache_hint"``). For rows the default loads plainly, the
    result is the request's PTX without the field."""
    return _KEPT_POLICY_LINES.sub("", ptx).replace(hint, "").replace("], %keep;", "];")
