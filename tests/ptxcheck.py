"""Test helper: assemble rendered PTX with nvJitLink (on the CPU) and fail loudly."""

from __future__ import annotations

from specdsl.compile import Compiled, compile_ptx
from specdsl.render import render


def assemble(spec, target: str = "sm_90") -> Compiled:
    """Render ``spec`` and compile it for ``target``; returns the cubin and ptxas's log."""
    compiled = compile_ptx(render(spec, target), target, spec=spec)
    assert compiled.cubin[:4] == b"\x7fELF", "nvJitLink returned no ELF cubin"
    return compiled
