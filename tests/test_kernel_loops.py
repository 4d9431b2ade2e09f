"""The chunk loops of every built-in carry their counter, cursors and per-row state from
trip to trip (tests/ptxsim.py's check_loops), and the model fails the loops that do not.

Before this check, Fp8Quant's codes of a 16-byte vector were packed into %r6 and %r7, and
%r7 was also the chunk counter: rows of f16/bf16 longer than 65536 elements (hidden a
multiple of 8) left the loop after one chunk, or walked on past the row when the codes
were zero, in every scale mode (the H200 run: Fp8Quant group, bf16, hidden 131072, row 1's
second half never written).
"""

from __future__ import annotations

import pytest

from ptxsim import SimError, check_loops, loops, row_coverage
from specdsl import render
from specdsl.kernels import Fp8Quant, RMSNorm, Softmax
from test_kernel_digests import pinned_requests

#: Rows longer than the registers of 1024 threads, in every chunked path: whole chunks
#: only (131072 bf16), a partial last chunk (65544, 131073), the most chunks (2^20), with
#: 16-byte, 8-byte and 1-element vectors.
LONG = [(dtype, length) for dtype in ("bf16", "f16", "f32")
        for length in (65544, 65540, 131072, 131073, 2**18)]


def chunked_requests() -> list:
    """Every chunked request: the pinned ones, then each long row in every mode."""
    requests = [spec for spec in pinned_requests() if getattr(spec, "chunks", 1) > 1]
    for dtype, length in LONG:
        requests += [Fp8Quant(dtype=dtype, hidden=length, scale_mode=mode)
                     for mode in ("dynamic", "static_param", "group") if
                     mode != "group" or length % 128 == 0]
        requests += [Fp8Quant(dtype=dtype, hidden=length, scale_mode="static_baked",
                              static_scale=0.5),
                     RMSNorm(hidden=length, dtype=dtype),
                     RMSNorm(hidden=length, dtype=dtype, fused_residual=True),
                     Softmax(cols=length, dtype=dtype), Softmax(cols=length, dtype=dtype,
                                                                 scale=-0.5)]
    requests.append(Fp8Quant(hidden=2**20, scale_mode="group"))
    return list(dict.fromkeys(requests))


@pytest.mark.parametrize("spec", chunked_requests(), ids=repr)
def test_every_chunk_loop_carries_its_state(spec):
    """Each loop of the PTX tests a counter carried from the trip before, and leaves every
    carried value (cursors, running max and sum, scale, predicates) derived from itself."""
    ptx = render(spec)
    assert spec.chunks > 1 and loops(ptx)
    check_loops(ptx)


def _aliased_counter() -> str:
    """Fp8Quant group, bf16, 131072 as it rendered before: codes packed into the counter."""
    ptx = render(Fp8Quant(hidden=131072, scale_mode="group"))
    broken = ptx.replace("%qr1", "%chunk")
    assert broken != ptx
    return broken


def test_model_fails_a_counter_a_scratch_register_aliases():
    """The H200 failure's PTX (the codes' second word packed into the chunk counter) is
    refused, naming the instruction that overwrote the counter."""
    with pytest.raises(SimError, match=r"loop PASS2: its test \('setp.lt.u32 +%p3, %chunk, 2'\) "
                                       r"derives from no value carried from the trip before: "
                                       r"%chunk is overwritten by 'mov.b32 +%chunk, \{ %h2, %h3 \}'"):
        check_loops(_aliased_counter())


def test_coverage_model_trusts_no_aliased_counter():
    """row_coverage (which runs each loop its setp's number of trips) refuses that PTX
    instead of reporting a full row."""
    with pytest.raises(SimError, match="derives from no value carried"):
        row_coverage(_aliased_counter(), "ld", ("%rd4",), 16, 1024)


def test_model_fails_an_overwritten_running_max():
    """A running max that the body replaces with a scratch value is refused."""
    ptx = render(Softmax(cols=131072))
    broken = ptx.replace("mov.b32             %m0, %m1;", "mov.b32             %m0, %f0;")
    assert broken != ptx
    with pytest.raises(SimError, match=r"loop PASS1: %m0 carries a value into the next trip, "
                                       r"but the body overwrites it \('mov.b32 +%m0, %f0'\)"):
        check_loops(broken)


def test_model_fails_a_value_the_loop_overwrites_before_its_use_after():
    """A register set before the loop and read after it must survive the body."""
    ptx = """
    .reg .b32 %r<4>;
    .reg .b32 %chunk;
    .reg .pred %p<4>;
    mov.u32 %r1, 5;
    mov.u32 %chunk, 0;
LOOP:
    mov.u32 %r1, 7;
    add.u32 %chunk, %chunk, 1;
    setp.lt.u32 %p3, %chunk, 2;
    @%p3 bra LOOP;
    add.u32 %r2, %r1, 1;
"""
    with pytest.raises(SimError, match=r"loop LOOP: %r1 is set before the loop and read after "
                                       r"it \('add.u32 %r2, %r1, 1'\), but the body overwrites "
                                       r"it \('mov.u32 %r1, 7'\)"):
        check_loops(ptx)


def test_counters_are_their_own_register():
    """Every loop counts in %chunk, a register no macro's numbered scratch can alias."""
    for spec in (Fp8Quant(hidden=131072), RMSNorm(hidden=131072, fused_residual=True),
                 Softmax(cols=131072)):
        ptx = render(spec)
        assert ".reg .b32   %chunk;" in ptx and "%r7, %r7, 1" not in ptx
        assert ptx.count("add.u32             %chunk, %chunk, 1;") == len(loops(ptx))
