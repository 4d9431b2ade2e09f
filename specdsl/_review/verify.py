"""Compile requests with nvJitLink and check what they cost: ``specdsl verify``.

No GPU is needed: nvJitLink assembles PTX on the CPU and its verbose log holds ptxas's
resource report (:mod:`specdsl._runtime.resources`). The request's array declarations are
matched with its ``.entry`` as an executor's build matches them
(:func:`~specdsl._runtime.arraychecks.plan_arrays`), so a misdeclared array fails here
without a GPU. :func:`verify_request` returns a :class:`Verified` record; the command line
prints a table or JSON from it.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._base.wording import with_article
from .._render.keys import derived_key
from .._render.render import render
from .._runtime.arraychecks import plan_arrays
from .._runtime.compile import CompileOptions, compile_ptx
from .._runtime.resources import Resources
from .._runtime.signature import entry_directives, parse_entry
from .._spec.decorator import spec_info
from .._spec.target import Target
from ..errors import (
    CompileError,
    PTXSignatureError,
    RenderError,
    SpecDefinitionError,
    SpecError,
    UnsupportedTargetError,
)

__all__ = ["Verified", "verify_request"]


@attrs.frozen
class Verified:
    """One request compiled by ``verify``.

    Attributes:
        request: the request; ``target``: what it was compiled for.
        key: its derived key.
        resources: one record per ``.entry`` of the module (empty on error).
        seconds: nvJitLink wall-clock time, in seconds (0.0 on error).
        violations: why the request fails the run's limits (empty: it passes).
        error: the render or compile error message, or ``None``.
        skipped: why the target cannot run the request (its template's
            ``require_target``), or ``None``; a skipped request neither passes nor fails.
        notes: what the run should know that is no violation: an entry that keeps more
            registers than ``-maxrregcount`` asked, because its own directives set its
            budget (ptxas does not always say so in its log).
    """

    request: Any
    target: Target
    key: str
    resources: tuple[Resources, ...]
    seconds: float
    violations: tuple[str, ...]
    error: str | None = None
    skipped: str | None = None
    notes: tuple[str, ...] = ()


def verify_request(request: Any, target: Target | str | int, *, no_spills: bool = False,
                   max_registers: int | None = None,
                   compile_options: CompileOptions | None = None) -> Verified:
    """Render and compile ``request`` for ``target`` with nvJitLink; check the limits.

    A render or compile failure is returned (``error`` and one violation), not
    raised, so a run over many requests reports every failing one. So is what an
    executor would refuse to build the module for: an array declaration that names no
    ``.ptr`` parameter of the entry or a dimension nothing gives (a violation
    ``"SpecDefinitionError: ..."``, with the entry's resources), or an ``.entry`` whose
    parameters cannot be read.

    Args:
        request: a request of a :func:`~specdsl.kernel_spec` class.
        target: the target to compile for.
        no_spills: a spill store or load (or, where the log has no spill figures, any
            stack frame) is a violation.
        max_registers: more registers per thread than this in an entry is a violation.
        compile_options: nvJitLink's ``-lineinfo``, ``-maxrregcount`` and ``-g``
            (:class:`~specdsl.CompileOptions`); none by default.

    Raises:
        SpecError: ``max_registers`` is not a positive int.
        CompileError: nvJitLink's log has no resource report for the spec's entry.
    """
    if max_registers is not None and (isinstance(max_registers, bool) or
                                      not isinstance(max_registers, int) or max_registers < 1):
        raise SpecError(f"--max-registers must be a positive int (got {max_registers!r})")
    target = Target.parse(target)
    key = derived_key(request, target)
    try:
        ptx = render(request, target)
        compiled = compile_ptx(ptx, target, spec=request, options=compile_options)
    except UnsupportedTargetError as exc:
        return Verified(request, target, key, (), 0.0, (), skipped=exc.reason)
    except (RenderError, CompileError) as exc:
        message = str(exc)
        return Verified(request, target, key, (), 0.0,
                        (f"{type(exc).__name__}: {message.splitlines()[0]}",), message)
    found = compiled.resources()
    entry = spec_info(request).entry
    if entry not in found:
        raise CompileError(f"nvJitLink's info log for {request!r} has no resource report "
                           f"for entry {entry!r}:\n{compiled.log}", log=compiled.log,
                           spec=request)
    violations = []
    try:  # what Builder.build checks before it compiles (specdsl._runtime.builds)
        plan_arrays(request, parse_entry(ptx, entry))
    except (SpecDefinitionError, PTXSignatureError) as exc:
        violations.append(f"{type(exc).__name__}: {exc}")
    for item in found.values():
        if no_spills and item.spills and item.spills_reported:
            violations.append(f"{item.entry} spills {item.spill_stores} bytes (stores) and "
                              f"{item.spill_loads} bytes (loads) per thread (--no-spills)")
        elif no_spills and item.spills:
            frame = with_article(f"{item.stack_frame}-byte")  # "an 8-byte", "a 16-byte"
            violations.append(f"{item.entry} has {frame} stack frame per "
                              f"thread, counted as spills: nvJitLink's log gave no spill "
                              f"figures (--no-spills)")
        if max_registers is not None and item.registers > max_registers:
            violations.append(f"{item.entry} uses {item.registers} registers, more than "
                              f"--max-registers {max_registers}")
    limit = compile_options.max_registers if compile_options is not None else None
    notes = tuple(_limit_not_applied(item.entry, item.registers, limit, ptx)
                  for item in found.values() if limit is not None and item.registers > limit)
    return Verified(request, target, key, tuple(found.values()), compiled.seconds,
                    tuple(violations), notes=notes)


# The directives that set an entry's register budget ahead of -maxrregcount: launch bounds
# and .maxnreg (PTX ISA, "Performance-Tuning Directives")
_BUDGET = (".maxnreg", ".maxntid", ".reqntid", ".minnctapersm")


def _limit_not_applied(entry: str, registers: int, limit: int, ptx: str) -> str:
    """The note for an entry that keeps ``registers`` above ``-maxrregcount=limit``,
    naming the directives of its own that ptxas let set its budget."""
    directives = [found for found in entry_directives(ptx, entry)
                  if found.split()[0] in _BUDGET]
    why = (f"its own {', '.join(directives)} set its budget instead" if directives
           else "ptxas did not apply the limit and its log does not say why")
    return f"{entry} keeps {registers} registers, above -maxrregcount={limit}: {why}"
