"""Test helper: assemble rendered PTX with nvJitLink (on the CPU) and fail loudly."""

from __future__ import annotations

from specdsl._render.render import render
from specdsl._runtime.compile import Compiled, compile_ptx


def assemble(spec, target: str = "sm_90") -> Compiled:
    """Render ``spec`` and compile it for ``target``; returns the cubin and ptxas's log."""
    compiled = compile_ptx(render(spec, target), target, spec=spec)
    assert compiled.cubin[:4] == b"\x7fELF", "nvJitLink returned no ELF cubin"
    return compiled


def assert_no_spills(compiled: Compiled) -> None:
    """Fail if any entry of ``compiled`` spills or keeps a stack frame.

    Reads ptxas's spill figures where the nvJitLink build prints them, and the stack
    frame (where spills live) everywhere, so it holds on every toolchain.
    """
    resources = compiled.resources()
    assert resources, f"no resource report in the log:\n{compiled.log}"
    for entry, used in resources.items():
        assert not used.spills and used.stack_frame == 0, f"{entry} spills: {used}"
