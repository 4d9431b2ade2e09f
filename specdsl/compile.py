"""PTX -> cubin with nvJitLink, through cuda.core's ``Linker``; no GPU or driver needed.

``cuda.core.Program(code_type="ptx")`` drives the same nvJitLink ``Linker``; specdsl
calls the Linker itself so it can ask for the verbose info log, which carries
ptxas's resource report (registers, spills, stack frame, shared and constant memory).
"""

from __future__ import annotations

import functools
import re
import time
from typing import TYPE_CHECKING, Any

import attrs

from .errors import CompileError, TargetError
from .target import Target, known_targets

if TYPE_CHECKING:
    from .resources import Resources

__all__ = ["Compiled", "compile_ptx", "link_options", "ptx_excerpt", "toolchain_version",
           "check_toolchain_target", "toolchain_targets"]

_LINE = re.compile(r"line (\d+)")


@attrs.frozen
class Compiled:
    """One compiled module.

    Attributes:
        cubin: the ELF cubin bytes for ``target``.
        log: nvJitLink's verbose info log (ptxas's resource report).
        seconds: wall-clock compile time, in seconds.
        target: what it was compiled for.
    """

    cubin: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    log: str
    seconds: float
    target: Target

    def resources(self) -> "dict[str, Resources]":
        """``{entry: Resources}`` from the log: registers, spills, stack, shared memory."""
        from .resources import parse_resources

        return parse_resources(self.log, arch=self.target.arch)


@functools.cache
def toolchain_version() -> str:
    """nvJitLink's version as ``"major.minor"`` (part of every disk-cache key).

    The first call loads libnvJitLink (about 100 MB; 50-150 ms), so an executor with a
    disk cache asks for it on a background thread when it starts.
    """
    from cuda.bindings import nvjitlink

    major, minor = nvjitlink.version()
    return f"{major}.{minor}"


@functools.lru_cache(maxsize=None)
def _toolchain_refusal(sm: str, isa: str) -> str | None:
    # nvJitLink has no call that lists its targets: link a module of one empty entry for
    # the target (about 5 ms), once per process and target. None: it links.
    from cuda.core import Linker, LinkerOptions, ObjectCode

    ptx = (f".version {isa}\n.target {sm}\n.address_size 64\n"
           f".visible .entry specdsl_probe()\n{{\n    ret;\n}}\n")
    linker = None
    try:
        linker = Linker(ObjectCode.from_ptx(ptx.encode()), options=LinkerOptions(arch=sm))
        linker.link("cubin")
    except Exception as exc:  # nvJitLinkError: ERROR_UNSUPPORTED_ARCH, or ptxas's refusal
        text = str(exc).replace("\x00", "").strip()
        return " ".join(line.strip() for line in text.splitlines() if line.strip())
    finally:
        if linker is not None:
            linker.close()
    return None


def toolchain_targets() -> tuple[Target, ...]:
    """The targets of :func:`~specdsl.target.known_targets` the installed nvJitLink
    compiles for (each probed once per process, at its default PTX ISA version)."""
    return tuple(t for t in known_targets() if _toolchain_refusal(t.sm, t.ptx_isa) is None)


def check_toolchain_target(target: Target | str) -> None:
    """Refuse a target the installed nvJitLink cannot compile for.

    The check links a module of one empty entry for ``target`` (once per process and
    target). nvJitLink 13, for one, no longer knows sm_101 (CUDA 13 names it sm_110),
    and an older nvJitLink refuses a PTX ISA version newer than its own.

    Raises:
        TargetError: naming the target, nvJitLink's version and message, and the
            targets it does compile for.
    """
    target = Target.parse(target)
    refusal = _toolchain_refusal(target.sm, target.ptx_isa)
    if refusal is not None:
        supported = ", ".join(t.sm for t in toolchain_targets()) or "none"
        try:
            version = toolchain_version()
        except Exception:  # no loadable libnvJitLink: the refusal says so
            version = "version unknown"
        raise TargetError(
            f"the installed nvJitLink ({version}) cannot compile for {target.sm} (PTX ISA "
            f"{target.ptx_isa}): {refusal}. Targets it compiles for: {supported}")


def link_options(target: Target | str) -> str:
    """The nvJitLink options :func:`compile_ptx` uses for ``target``, as one string.

    Part of every disk-cache key: a change here must change the string.
    """
    return f"nvJitLink -arch={Target.parse(target).sm} -verbose -no-cache"


def ptx_excerpt(ptx: str, line: int, context: int = 3) -> str:
    """PTX lines ``line - context .. line + context``, numbered, the reported one marked ``>``."""
    lines = ptx.splitlines()
    start, stop = max(1, line - context), min(len(lines), line + context)
    return "\n".join(f"{'>' if n == line else ' '}{n:5d} | {lines[n - 1]}"
                     for n in range(start, stop + 1))


def compile_ptx(ptx: str, target: Target | str = "sm_90", *, spec: Any = None) -> Compiled:
    """Assemble ``ptx`` to a cubin for ``target`` with nvJitLink.

    Args:
        ptx: a whole PTX module.
        target: the compute capability to compile for (``"sm_90"``, ``"sm_90a"``).
        spec: the request the PTX came from, for the error message.

    Raises:
        TargetError: the installed nvJitLink cannot compile for ``target`` at all
            (:func:`check_toolchain_target`; checked once the compile has failed).
        CompileError: nvJitLink rejected the PTX, or the PTX holds a NUL character
            (nvJitLink reads a C string: it would compile only the text before the NUL,
            while the kernel's signature is read from all of it); carries the log, the
            spec and the PTX lines around the first line the log reports.
    """
    from cuda.core import Linker, LinkerOptions, ObjectCode

    target = Target.parse(target)
    nul = ptx.find("\x00")
    if nul >= 0:
        line = ptx.count("\n", 0, nul) + 1
        excerpt = ptx_excerpt(ptx.replace("\x00", "\\0"), line)
        what = f"{spec!r}" if spec is not None else "PTX"
        raise CompileError(f"{what} holds a NUL character on line {line}: nvJitLink would "
                           f"compile only the text before it\n{excerpt}",
                           log="", spec=spec, ptx=ptx, excerpt=excerpt)
    started = time.perf_counter()
    linker = None
    try:
        # no_cache: a hit in CUDA's JIT cache (~/.nv/ComputeCache) skips ptxas and its
        # verbose resource report, which verify and Compiled.resources() read
        linker = Linker(ObjectCode.from_ptx(ptx.encode()),
                        options=LinkerOptions(arch=target.sm, verbose=True, no_cache=True))
        cubin = bytes(linker.link("cubin").code)
        log = linker.get_info_log()
    except Exception as exc:  # nvJitLinkError carries the error log in its text
        if toolchain_targets():  # nvJitLink works, but may not know this target: say so
            check_toolchain_target(target)
        log = str(exc)
        if linker is not None:
            log = (linker.get_error_log() or "") + log
        log = log.replace("\x00", "")  # the C string's terminator comes along
        match = _LINE.search(log)
        excerpt = ptx_excerpt(ptx, int(match.group(1))) if match else ""
        what = f"{spec!r}" if spec is not None else "PTX"
        message = f"nvJitLink could not compile {what} for {target.sm}:\n{log.strip()}"
        if excerpt:
            message += f"\n{excerpt}"
        raise CompileError(message, log=log, spec=spec, ptx=ptx, excerpt=excerpt) from None
    finally:
        if linker is not None:
            linker.close()
    return Compiled(cubin, log.rstrip("\x00"), time.perf_counter() - started, target)
