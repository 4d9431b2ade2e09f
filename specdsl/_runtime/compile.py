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

from .._spec.target import Target, known_targets
from ..errors import CompileError, ConfigError, TargetError
from .cudacore import load as load_cuda_core

if TYPE_CHECKING:
    from .resources import Resources

__all__ = ["Compiled", "CompileOptions", "compile_ptx", "link_options", "linker_options",
           "ptx_excerpt", "toolchain_version", "check_toolchain_target", "toolchain_targets",
           "MIN_REGISTERS", "MAX_REGISTERS"]

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

    def resources(self) -> dict[str, Resources]:
        """``{entry: Resources}`` from the log: registers, spills, stack, shared memory."""
        from .resources import parse_resources

        return parse_resources(self.log, arch=self.target.arch)


def _positive_flag(name: str) -> Any:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if type(value) is not bool:
            raise ConfigError(f"CompileOptions.{name} must be True or False (got {value!r})")
    return check


def _register_limit(instance: Any, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if type(value) is not int or not MIN_REGISTERS <= value <= MAX_REGISTERS:
        raise ConfigError(f"CompileOptions.max_registers must be None or an int from "
                          f"{MIN_REGISTERS} to {MAX_REGISTERS} registers per thread "
                          f"(got {value!r})")


#: The fewest registers per thread ``-maxrregcount`` may name: ptxas raises a smaller
#: limit to 24 on sm_80, sm_90, sm_100 and sm_120 ("adjusting per thread register count
#: of 16 to lower bound of 24", CUDA 13.5).
MIN_REGISTERS = 24
#: The most: 255 registers per thread (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability"); ptxas ignores a larger ``-maxrregcount``.
MAX_REGISTERS = 255
# ptxas's words when it changes or drops -maxrregcount instead of obeying it
_REGISTER_LIMIT_CHANGED = re.compile(r"adjusting per thread register count|"
                                     r"maxrregcount value specified \d+, will be ignored")


@attrs.frozen
class CompileOptions:
    """How nvJitLink compiles PTX: an :class:`~specdsl.Executor` setting, and part of
    every disk-cache key (through :func:`link_options`).

    Attributes:
        lineinfo: ``-lineinfo``: keep the PTX ``.loc`` line information in the cubin, for
            profilers' source views (Nsight Compute) and ``compute-sanitizer`` reports.
            Code is unchanged.
        max_registers: ``-maxrregcount=N``: at most ``N`` registers per thread, from 24 to
            255 (ptxas would silently raise a smaller limit or ignore a larger one, so
            those are refused here); ``None`` (the default) leaves the choice to ptxas.
            Fewer registers can mean more resident CTAs and more spills (``specdsl verify``
            reports both).
        debug: ``-g``: device debug information for ``cuda-gdb``; turns optimisation off,
            so kernels run much slower. Not for production.

    Raises:
        ConfigError: a field of the wrong type or out of range, naming it and the value.
    """

    lineinfo: bool = attrs.field(default=False, validator=_positive_flag("lineinfo"))
    max_registers: int | None = attrs.field(default=None, validator=_register_limit)
    debug: bool = attrs.field(default=False, validator=_positive_flag("debug"))


_DEFAULT_OPTIONS = CompileOptions()


@functools.cache
def toolchain_version() -> str:
    """nvJitLink's full version, patch level and build included, e.g.
    ``"13.5.37 cuda_13.5.r13.5/compiler.39125733_0"`` (part of every disk-cache key).

    nvJitLink's API (``nvJitLinkVersion``) gives only major and minor, so the version is
    read from the identification strings NVIDIA's compilers carry in their binaries
    (``Cuda compilation tools, release 13.5, V13.5.37`` and ``Build cuda_...``; ``ptxas
    --version`` prints the same), in the library file that cuda.bindings loaded (found
    through cuda.pathfinder). Where they are missing, the API version and the file's size
    and modification time stand in, so another build is still another key.

    The first call loads libnvJitLink (about 100 MB; 50-150 ms) and reads its tail (about
    5 ms), so an executor with a disk cache asks for it on a background thread when it
    starts.
    """
    load_cuda_core()
    from cuda.bindings import nvjitlink
    from cuda.pathfinder import load_nvidia_dynamic_lib

    major, minor = nvjitlink.version()  # loads the library
    path = load_nvidia_dynamic_lib("nvJitLink").abs_path  # the one loaded (memoized lookup)
    return _embedded_version(path) or f"{major}.{minor} ({_file_identity(path)})"


def _embedded_version(path: str) -> str | None:
    """``"13.5.37 cuda_13.5.r13.5/compiler.39125733_0"`` from a CUDA compiler binary."""
    import mmap

    with open(path, "rb") as lib, mmap.mmap(lib.fileno(), 0, access=mmap.ACCESS_READ) as data:
        release = _last_match(data, b"Cuda compilation tools, release ", _VERSION_STRING)
        build = _last_match(data, b"Build cuda_", _BUILD_STRING)
    if release is None or build is None:
        return None
    return f"{release} {build}"


def _last_match(data: Any, prefix: bytes, pattern: re.Pattern[bytes]) -> str | None:
    # the strings sit in read-only data near the end of the file: search back from there
    # (a format string such as "release %d.%d" shares the prefix and is skipped)
    end = len(data)
    while (start := data.rfind(prefix, 0, end)) >= 0:
        match = pattern.match(data[start:start + 128])
        if match:
            return match.group(1).decode()
        end = start
    return None


_VERSION_STRING = re.compile(rb"Cuda compilation tools, release [\d.]+, V(\d+\.\d+\.\d+)")
_BUILD_STRING = re.compile(rb"Build (cuda_[\w./-]+)")


def _file_identity(path: str) -> str:
    import os

    info = os.stat(path)
    return f"{os.path.basename(path)}, {info.st_size} bytes, mtime {info.st_mtime_ns}"


@functools.cache
def _toolchain_refusal(sm: str, isa: str) -> str | None:
    # nvJitLink has no call that lists its targets: link a module of one empty entry for
    # the target (about 5 ms), once per process and target. None: it links.
    load_cuda_core()
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
    """The targets of :func:`~specdsl._spec.target.known_targets` the installed nvJitLink
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


@functools.cache
def linker_options(target: Target, options: CompileOptions = _DEFAULT_OPTIONS) -> Any:
    """The cuda.core ``LinkerOptions`` :func:`compile_ptx` hands the ``Linker``.

    ``verbose`` always (the info log carries ptxas's resource report); ``no_cache``
    always: a hit in CUDA's JIT cache (``~/.nv/ComputeCache``) skips ptxas and its report,
    which ``verify`` and :meth:`Compiled.resources` read.
    """
    load_cuda_core()
    from cuda.core import LinkerOptions

    return LinkerOptions(arch=target.sm, verbose=True, no_cache=True,
                         lineinfo=options.lineinfo or None,
                         max_register_count=options.max_registers,
                         debug=options.debug or None)


def link_options(target: Target | str, options: CompileOptions | None = None) -> tuple[str, ...]:
    """The nvJitLink options :func:`compile_ptx` uses, one string each, as nvJitLink gets them.

    Made from the :func:`linker_options` object itself, by cuda.core's own
    ``LinkerOptions.as_bytes("nvjitlink")`` (the options the Linker passes on), so the
    disk-cache key can never disagree with the compile: e.g. ``("-arch=sm_90",
    "-maxrregcount=64", "-verbose", "-lineinfo", "-no-cache")``.
    """
    built = linker_options(Target.parse(target), options or _DEFAULT_OPTIONS)
    return tuple(option.decode() for option in built.as_bytes("nvjitlink"))


def ptx_excerpt(ptx: str, line: int, context: int = 3) -> str:
    """PTX lines ``line - context .. line + context``, numbered, the reported one marked ``>``."""
    lines = ptx.splitlines()
    start, stop = max(1, line - context), min(len(lines), line + context)
    return "\n".join(f"{'>' if n == line else ' '}{n:5d} | {lines[n - 1]}"
                     for n in range(start, stop + 1))


def compile_ptx(ptx: str, target: Target | str = "sm_90", *, spec: Any = None,
                options: CompileOptions | None = None) -> Compiled:
    """Assemble ``ptx`` to a cubin for ``target`` with nvJitLink.

    Args:
        ptx: a whole PTX module.
        target: the compute capability to compile for (``"sm_90"``, ``"sm_90a"``).
        spec: the request the PTX came from, for the error message.
        options: line information, a register limit, debug information; none by default.

    Raises:
        TargetError: the installed nvJitLink cannot compile for ``target`` at all
            (:func:`check_toolchain_target`; checked once the compile has failed).
        CompileError: nvJitLink rejected the PTX, or the PTX holds a NUL character
            (nvJitLink reads a C string: it would compile only the text before the NUL,
            while the kernel's signature is read from all of it); carries the log, the
            spec and the PTX lines around the first line the log reports; or ptxas did
            not apply ``options.max_registers`` as given (it changes limits it cannot meet).
    """
    load_cuda_core()
    from cuda.core import Linker, ObjectCode

    target = Target.parse(target)
    options = options or _DEFAULT_OPTIONS
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
        linker = Linker(ObjectCode.from_ptx(ptx.encode()),
                        options=linker_options(target, options))
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
    log = log.rstrip("\x00")
    changed = _REGISTER_LIMIT_CHANGED.search(log) if options.max_registers is not None else None
    if changed:
        line = next(text for text in log.splitlines() if changed.group(0) in text)
        what = f"{spec!r}" if spec is not None else "PTX"
        raise CompileError(f"nvJitLink did not apply -maxrregcount={options.max_registers} to "
                           f"{what} for {target.sm}: {line.strip()}", log=log, spec=spec, ptx=ptx)
    return Compiled(cubin, log, time.perf_counter() - started, target)
