"""Every built-in request `specdsl verify --variants` walks, on every target `Target.parse`
accepts: it assembles with the installed nvJitLink, or it is refused up front."""

from __future__ import annotations

import hashlib

import pytest

from specdsl import CompileError, RenderError, Target, TargetError, kernels, render
from specdsl._review.variants import spec_variants
from specdsl._runtime.compile import check_toolchain_target, compile_ptx, toolchain_version
from specdsl._spec.target import known_targets
from specdsl.errors import UnsupportedTargetError
from specdsl.kernels import Fp8Quant, RMSNorm, Softmax

REQUESTS = [request for cls in kernels.ALL for request in spec_variants(cls)]


def _proven(cache, target: Target) -> set[str]:
    # PTX digests proven to assemble; no cache (pytest -p no:cacheprovider): none
    return set(cache.get(f"specdsl/assembled/{target.sm}", [])) if cache else set()


@pytest.mark.parametrize("target", known_targets(), ids=str)
def test_variants_assemble_or_are_refused(target, pytestconfig):
    """Each variant request renders and assembles for the target, or is refused with
    UnsupportedTargetError (render) or TargetError (nvJitLink lacks the target): never
    a CompileError from ptxas.

    nvJitLink runs once per distinct (PTX, target, nvJitLink version): PTX proven to
    assemble is remembered in pytest's cache, so a rerun compiles only what changed.
    """
    try:
        check_toolchain_target(target)
    except TargetError:
        ptx = render(Softmax(cols=4096), target)
        with pytest.raises(TargetError, match=f"cannot compile for {target.sm}"):
            compile_ptx(ptx, target)
        return
    cache = getattr(pytestconfig, "cache", None)
    proven = _proven(cache, target)
    failures = []
    for request in REQUESTS:
        try:
            ptx = render(request, target)
        except UnsupportedTargetError:
            continue
        digest = hashlib.sha256(f"{toolchain_version()}\0{target.sm}\0{ptx}".encode()).hexdigest()
        if digest in proven:
            continue
        try:
            compile_ptx(ptx, target, spec=request)
        except CompileError as exc:
            failures.append(str(exc).splitlines()[0] + "\n  " + exc.log.strip().splitlines()[-1])
        else:
            proven.add(digest)
    if cache:
        cache.set(f"specdsl/assembled/{target.sm}", sorted(proven))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_rmsnorm_half_types_need_sm80(dtype):
    """RMSNorm f16/bf16 on sm_75 is refused at render, naming the cvt it lacks
    (it failed inside ptxas before)."""
    with pytest.raises(UnsupportedTargetError, match=rf"cvt\.rn\.{dtype}x2\.f32 .*needs sm_80"):
        render(RMSNorm(hidden=4096, dtype=dtype), "sm_75")


def test_rmsnorm_f32_assembles_for_sm75():
    """RMSNorm f32 needs no sm_80 instruction: it assembles for sm_75."""
    assert compile_ptx(render(RMSNorm(hidden=4096, dtype="f32"), "sm_75"), "sm_75").cubin


def test_softmax_needs_sm80():
    """Softmax (createpolicy, L2 cache hints) is refused for sm_75 at render."""
    with pytest.raises(UnsupportedTargetError, match=r"createpolicy.*need sm_80 or newer"):
        render(Softmax(cols=4096, dtype="f32"), "sm_75")


def test_fp8_on_sm89_needs_ptx_isa_81():
    """Fp8Quant on sm_89 is refused at the default PTX ISA 8.0 and assembles with 8.1."""
    with pytest.raises(UnsupportedTargetError, match=r"sm_89 with PTX ISA 8\.1"):
        render(Fp8Quant(), "sm_89")
    target = Target(89, ptx_version=(8, 1))
    assert compile_ptx(render(Fp8Quant(), target), target).cubin


def test_unknown_ptx_isa_is_a_target_error():
    """A PTX ISA version nvJitLink does not know is refused with TargetError, not CompileError."""
    target = Target(90, ptx_version=(99, 0))
    with pytest.raises(TargetError, match=r"cannot compile for sm_90 \(PTX ISA 99\.0\).*"
                                          r"Targets it compiles for: .*sm_90"):
        compile_ptx(render(RMSNorm(hidden=4096), target), target)


def test_bad_ptx_stays_a_compile_error():
    """PTX that is wrong for a known target is still a CompileError with ptxas's log."""
    ptx = render(RMSNorm(hidden=4096)).replace("rsqrt.approx.f32", "rsqrt.bogus.f32")
    with pytest.raises(CompileError) as info:
        compile_ptx(ptx, "sm_90")
    assert not isinstance(info.value, TargetError) and "Unknown modifier '.bogus'" in info.value.log


def test_render_error_is_not_a_target_error():
    """UnsupportedTargetError is a RenderError: callers that skip it skip no other error."""
    assert issubclass(UnsupportedTargetError, RenderError)
    assert not issubclass(UnsupportedTargetError, TargetError)
