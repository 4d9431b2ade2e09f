"""Resource records parsed from nvJitLink's verbose info log (ptxas's report)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from specdsl._runtime.compile import compile_ptx
from specdsl._runtime.resources import Resources, parse_resources

# nvJitLink 13.0's info log for TWO_ENTRIES below (sm_90), verbatim.
LOG_13_0 = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'second' for 'sm_90'
ptxas info    : Function properties for second
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 4 registers, used 0 barriers
ptxas info    : Compile time = 3.731 ms
ptxas info    : Compiling entry function 'spiller' for 'sm_90'
ptxas info    : Function properties for spiller
ptxas         .     256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 512 bytes smem
ptxas info    : Compile time = 1.854 ms
info    : 0 bytes gmem, 64 bytes cmem[3]
info    : Function properties for 'spiller':
info    : used 10 registers, used 1 barriers, 256 stack, 1536 bytes smem, 540 bytes cmem[0], 0 bytes lmem
info    : Function properties for 'second':
info    : used 4 registers, used 1 barriers, 0 stack, 0 bytes smem, 536 bytes cmem[0], 0 bytes lmem
"""  # noqa: E501 - verbatim log lines

TWO_ENTRIES = """\
.version 8.0
.target sm_90
.address_size 64

.const .align 4 .b32 table[16];

.visible .entry spiller(
    .param .u64 .ptr .global .align 16 out,
    .param .u32 idx
)
{
    .local .align 4 .b32 buf[64];
    .shared .align 4 .b32 sm[128];
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [idx];
    and.b32 %r1, %r1, 63;
    mul.wide.u32 %rd2, %r1, 4;
    mov.u64 %rd3, buf;
    add.u64 %rd3, %rd3, %rd2;
    st.local.u32 [%rd3], %r1;
    ld.const.u32 %r2, [table+4];
    st.shared.u32 [sm], %r2;
    bar.sync 0;
    ld.local.u32 %r3, [buf+8];
    add.u32 %r3, %r3, %r2;
    st.global.u32 [%rd1], %r3;
    ret;
}

.visible .entry second(
    .param .u64 out
)
{
    ret;
}
"""


def _spilling_ptx(live: int = 64) -> str:
    loads = "\n".join(f"    ld.volatile.global.u32 %v{i}, [%rd1+{4 * i}];" for i in range(live))
    chain = "\n".join(f"    mul.lo.u32 %s, %s, %v{i};\n    xor.b32 %s, %s, %v{(i * 7) % live};"
                      for i in reversed(range(live - 1)))
    return f""".version 8.0
.target sm_90
.address_size 64

.visible .entry spill(
    .param .u64 .ptr .global .align 4 src,
    .param .u64 .ptr .global .align 4 dst
)
.maxnreg 24
{{
    .reg .b32 %v<{live}>;
    .reg .b32 %s;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
{loads}
    mov.b32 %s, %v{live - 1};
{chain}
    st.global.u32 [%rd2], %s;
    ret;
}}
"""


def test_parse_recorded_log_exactly():
    """The recorded nvJitLink 13.0 log parses to exact records, in ptxas's entry order."""
    found = parse_resources(LOG_13_0)
    assert list(found) == ["second", "spiller"]
    assert found["spiller"] == Resources(
        entry="spiller", registers=10, spill_stores=8, spill_loads=12, stack_frame=256,
        shared_memory=512, constant_banks=((0, 540), (3, 64)), barriers=1, local_memory=0)
    assert found["second"] == Resources(
        entry="second", registers=4, constant_banks=((0, 536), (3, 64)))


def test_constant_memory_sums_banks_and_spills_flag():
    """constant_memory is the sum over banks; spills is true when either figure is non-zero."""
    found = parse_resources(LOG_13_0)
    assert found["spiller"].constant_memory == 604 and found["spiller"].spills
    assert found["second"].constant_memory == 600 and not found["second"].spills


def test_linker_summary_stands_in_for_missing_ptxas_lines():
    """Without ptxas's section, nvJitLink's summary gives registers, stack and smem."""
    log = "\n".join(LOG_13_0.splitlines()[11:])
    spiller = parse_resources(log)["spiller"]
    assert (spiller.registers, spiller.stack_frame, spiller.shared_memory) == (10, 256, 1536)
    assert (spiller.spill_stores, spiller.spill_loads) == (0, 0)


def test_older_ptxas_cmem_on_the_used_line():
    """A ptxas line that lists cmem banks itself (older toolchains) fills constant_banks."""
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
           "ptxas info    : Function properties for k\n"
           "    24 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, 380 bytes cmem[0], 8 bytes cmem[2]\n")
    assert parse_resources(log)["k"] == Resources(
        entry="k", registers=40, spill_stores=4, spill_loads=4, stack_frame=24,
        constant_banks=((0, 380), (2, 8)))


def test_unknown_lines_and_empty_log():
    """Lines of no known format are ignored; an empty log reports no entries."""
    assert parse_resources("") == {}
    assert parse_resources("ptxas warning : something new\ninfo    : hello\n") == {}


def test_live_compile_reports_declared_memory():
    """nvJitLink's log for TWO_ENTRIES shows the declared shared, const and local memory."""
    found = compile_ptx(TWO_ENTRIES, "sm_90").resources()
    spiller = found["spiller"]
    assert set(found) == {"spiller", "second"}
    assert spiller.shared_memory == 128 * 4          # .shared .b32 sm[128]
    assert spiller.stack_frame >= 64 * 4             # .local .b32 buf[64]
    assert spiller.barriers == 1                     # bar.sync 0
    banks = dict(spiller.constant_banks)
    assert banks[0] > 0 and sorted(banks.values())[0] == 16 * 4  # .const .b32 table[16]
    assert found["second"].shared_memory == 0 and found["second"].barriers == 0


def test_live_compile_sees_spills():
    """64 values kept live under .maxnreg 24 spill: stores and loads are reported."""
    spill = compile_ptx(_spilling_ptx(), "sm_90").resources()["spill"]
    assert spill.spills and spill.registers <= 24 and spill.stack_frame >= spill.spill_stores
    if spill.spills_reported:  # some nvJitLink builds print only the stack frame
        assert spill.spill_stores > 0 and spill.spill_loads > 0


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
def test_agrees_with_ptxas_command_line(tmp_path):
    """Stack frame, spills, shared memory and barriers equal standalone `ptxas -v`'s figures."""
    source = tmp_path / "two.ptx"
    source.write_text(TWO_ENTRIES)
    run = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(source), "-o", str(tmp_path / "o")],
                         capture_output=True, text=True, check=True)
    section = (run.stdout + run.stderr).split("Compiling entry function 'spiller'")[1]
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                      r"loads", section)
    used = re.search(r"used (\d+) barriers.* (\d+) bytes smem", section)
    spiller = compile_ptx(TWO_ENTRIES, "sm_90").resources()["spiller"]
    assert (spiller.stack_frame, spiller.spill_stores, spiller.spill_loads) == tuple(
        int(g) for g in frame.groups())
    assert (spiller.barriers, spiller.shared_memory) == tuple(int(g) for g in used.groups())


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_module_scope_shared_memory_counted(target):
    """Module-scope .shared arrays count (ptxas omits them; nvJitLink's figure, less the
    1 KiB reservation where it includes one) on every target."""
    from specdsl import render
    from specdsl._runtime.compile import compile_ptx
    from specdsl.kernels import RMSNorm, Softmax

    spec = RMSNorm(hidden=4096, eps=1e-6, block=256)
    resources = compile_ptx(render(spec, target), target).resources()["rmsnorm"]
    assert resources.shared_memory == 8 * 4  # one f32 partial sum per warp of 8 warps
    softmax = Softmax(cols=4096)  # 8 warps: a max and a sum slot each
    assert compile_ptx(render(softmax, target), target).resources()["softmax"].shared_memory == 64


def test_summary_only_log_counts_stack_as_spills():
    """Without ptxas's spill line (some nvJitLink builds), a stack frame counts as spilling."""
    log = ("info    : 0 bytes gmem\n"
           "info    : Function properties for 'softmax':\n"
           "info    : used 64 registers, used 1 barriers, 8 stack, 1280 bytes smem, "
           "548 bytes cmem[0], 0 bytes lmem\n")
    used = parse_resources(log)["softmax"]
    assert not used.spills_reported and used.stack_frame == 8 and used.spills
    clean = parse_resources(log.replace("8 stack", "0 stack"))["softmax"]
    assert not clean.spills
