"""The executor without a GPU: compile-only modules, caching, the ledger, threads, errors."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

import specdsl._runtime.builds as builds_module
from fakedriver import DEFAULT_STREAM, FUNCTION, CUresult, FakeDriver
from handkeyed import HandKeyedAdd
from specdsl import (
    CompileError,
    ConfigError,
    DType,
    Executor,
    IncompleteKeyError,
    LaunchError,
    TargetError,
    derived_key,
    key_checking,
)
from specdsl._review.variants import representative_request
from specdsl._runtime.compile import compile_ptx, ptx_excerpt
from specdsl.kernels import ALL, VectorAdd


@pytest.fixture
def executor(tmp_path):
    return Executor(None, target="sm_90", cache_dir="off")


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_compile_only_every_builtin(executor, cls):
    """Every built-in kernel's representative request compiles to an sm_90 ELF cubin whose
    log reports its entry's registers."""
    from specdsl._runtime.resources import parse_resources
    from specdsl._spec.decorator import spec_info

    request = representative_request(cls)
    module = executor.ensure_module(request)
    assert module.cubin[:4] == b"\x7fELF"
    assert module.target.sm == "sm_90" and module.kernel is None
    assert parse_resources(module.log, arch=90)[spec_info(request).entry].registers > 0


def test_miss_then_hit(executor):
    """The first request compiles (a miss); an equal request is a hit; stats say so."""
    executor.ensure_module(VectorAdd())
    executor.ensure_module(VectorAdd())
    stats = executor.stats
    assert (stats.misses, stats.hits, stats.compiles, stats.disk_hits) == (1, 1, 1, 0)
    assert stats.compile_seconds > 0


def test_launch_field_shares_the_module(executor):
    """Requests differing only in a launch field (block) share one module."""
    first = executor.ensure_module(VectorAdd(block=128))
    assert executor.ensure_module(VectorAdd(block=512)) is first
    assert executor.stats.compiles == 1


def test_baked_field_gets_its_own_module(executor):
    """A different dtype is a different derived key and a different cubin."""
    f32 = executor.ensure_module(VectorAdd(dtype="f32"))
    f16 = executor.ensure_module(VectorAdd(dtype="f16"))
    assert f32.key != f16.key and f32.cubin != f16.cubin


def test_stats_is_a_snapshot(executor):
    """A stats object taken earlier does not change with later calls."""
    before = executor.stats
    executor.ensure_module(VectorAdd())
    assert before.misses == 0 and executor.stats.misses == 1


def test_module_key_is_derived_without_key_method(executor):
    """Without key() or key=, the module key is the derived key for the executor's target."""
    assert executor.ensure_module(VectorAdd()).key == derived_key(VectorAdd(), "sm_90")


def test_hand_written_key_missing_a_field_raises(executor):
    """key() forgets dtype: the second request (f16) under 'vadd' raises IncompleteKeyError."""
    with key_checking(True):
        executor.ensure_module(HandKeyedAdd(dtype="f32"))
        with pytest.raises(IncompleteKeyError, match="vadd") as info:
            executor.ensure_module(HandKeyedAdd(dtype="f16"))
    assert info.value.key == "vadd" and info.value.differing_fields == ("dtype",)


def test_call_site_key_missing_a_field_raises(executor):
    """A key= string at the call site is proven the same way."""
    with key_checking(True):
        executor.ensure_module(VectorAdd(dtype="f32"), key="add")
        with pytest.raises(IncompleteKeyError):
            executor.ensure_module(VectorAdd(dtype="bf16"), key="add")


def test_launch_only_difference_under_hand_key_is_proven(executor):
    """Same hand key, different block (launch-only): proven, no error, one module."""
    with key_checking(True):
        first = executor.ensure_module(HandKeyedAdd(block=128))
        assert executor.ensure_module(HandKeyedAdd(block=256)) is first


def test_checking_off_skips_the_proof(executor):
    """With checking off the second request gets the first module (the legacy behaviour)."""
    with key_checking(False):
        first = executor.ensure_module(HandKeyedAdd(dtype="f32"))
        assert executor.ensure_module(HandKeyedAdd(dtype="f16")) is first


def test_miss_is_recorded_while_checking_is_off(executor):
    """A miss compiled with checking off is still recorded: checking on proves later hits."""
    with key_checking(False):
        executor.ensure_module(HandKeyedAdd(dtype="f32"))
    assert executor.ledger.first_request("vadd", "sm_90") == HandKeyedAdd(dtype="f32")
    with key_checking(True), pytest.raises(IncompleteKeyError):
        executor.ensure_module(HandKeyedAdd(dtype="f16"))


def test_compile_only_launch_refused(executor):
    """launch() on a compile-only executor raises LaunchError."""
    with pytest.raises(LaunchError, match="compile-only"):
        executor.launch(VectorAdd(), 0, 0, 0, 1, grid=1, block=256)


def test_compile_only_needs_a_target():
    """Executor(None) without a target is a TargetError."""
    with pytest.raises(TargetError, match="needs a target"):
        Executor(None, cache_dir="off")


def test_malformed_check_keys_fails_when_the_executor_is_made(monkeypatch):
    """SPECDSL_CHECK_KEYS=maybe is a CheckingSwitchError from Executor(...), with the
    message its first use would give, not later on a hand-written key's first hit."""
    from specdsl import CheckingSwitchError

    monkeypatch.setenv("SPECDSL_CHECK_KEYS", "maybe")
    with pytest.raises(CheckingSwitchError) as info:
        Executor(None, target="sm_90", cache_dir="off")
    assert str(info.value) == ("SPECDSL_CHECK_KEYS must be 1/0, true/false, yes/no or on/off "
                               "(any case), or unset (got 'maybe')")


@pytest.mark.parametrize("key", ["", "  ", "\t", 42, b"k", [1]])
def test_bad_key_refused(executor, key):
    """key= that is no str with a non-blank character is a ConfigError naming the argument
    and the value (no LaunchError: nothing is launched), and nothing is compiled."""
    with pytest.raises(ConfigError) as info:
        executor.ensure_module(VectorAdd(), key=key)
    assert str(info.value) == ("key must be a non-blank str, or None for the spec's key() or "
                               f"its derived key (got {key!r})")
    with pytest.raises(ConfigError, match=r"^key must be a non-blank str"):
        executor.module_key(VectorAdd(), key=key)
    assert executor.stats.misses == 0


@pytest.mark.parametrize("key", ["", "  ", 42, [1]])
def test_bad_key_refused_by_launch_and_bind(fake_core, key):
    """launch and bind refuse the same keys with the same ConfigError, on either launch
    path, before anything reaches the driver."""
    ex, driver = fake_core
    with pytest.raises(ConfigError, match=r"^key must be a non-blank str") as info:
        ex.launch(VectorAdd(), *ARGS, grid=1, block=256, key=key)
    assert info.value.__context__ is None  # no "during handling of ..." in the traceback
    with pytest.raises(ConfigError, match=r"^key must be a non-blank str"):
        ex.bind(VectorAdd(), grid=1, block=256, key=key)
    assert driver.launches == [] and driver.core_calls == []


def test_unhashable_request_refused_by_launch(fake_core):
    """A launch whose spec is no request and cannot be hashed (a list) is a NotASpecError,
    as ensure_module says, before anything reaches the driver."""
    from specdsl import NotASpecError

    ex, driver = fake_core
    with pytest.raises(NotASpecError):
        ex.launch([VectorAdd()], *ARGS, grid=1, block=256)
    assert driver.launches == [] and driver.core_calls == []


def _counting_compile(monkeypatch, delay=0.0, fail_first=False):
    calls = []
    lock = threading.Lock()

    def compile_ptx_counted(ptx, target, *, spec=None, options=None):
        with lock:
            calls.append(spec)
            first = len(calls) == 1
        time.sleep(delay)
        if fail_first and first:
            raise CompileError("injected failure", log="injected", spec=spec, ptx=ptx)
        return compile_ptx(ptx, target, spec=spec, options=options)

    monkeypatch.setattr(builds_module, "compile_ptx", compile_ptx_counted)
    return calls


def test_sixteen_threads_compile_once(executor, monkeypatch):
    """16 threads asking for one new key at once: one compile, one module for all."""
    calls = _counting_compile(monkeypatch, delay=0.2)
    barrier = threading.Barrier(16)
    results = []

    def worker():
        barrier.wait()
        results.append(executor.ensure_module(VectorAdd(dtype="f16")))

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(results) == 16 and all(m is results[0] for m in results)
    assert executor.stats.misses == 1 and executor.stats.hits == 15


def test_failed_compile_is_not_cached(executor, monkeypatch):
    """A compile failure raises, caches nothing, and the next request compiles again."""
    kept = executor.ensure_module(VectorAdd(dtype="f32"))
    calls = _counting_compile(monkeypatch, fail_first=True)
    with pytest.raises(CompileError, match="injected"):
        executor.ensure_module(VectorAdd(dtype="f16"))
    module = executor.ensure_module(VectorAdd(dtype="f16"))
    assert len(calls) == 2 and module.cubin[:4] == b"\x7fELF"
    assert executor.ensure_module(VectorAdd(dtype="f32")) is kept


def test_failed_compile_reaches_every_waiting_thread(executor, monkeypatch):
    """Four threads asking at once for a key whose compile fails: one compile, and every
    thread (the one that compiled and the three waiting on it) gets that CompileError."""
    calls = _counting_compile(monkeypatch, delay=0.3, fail_first=True)
    barrier = threading.Barrier(4)
    outcomes = []

    def worker():
        barrier.wait()
        try:
            outcomes.append(executor.ensure_module(VectorAdd(dtype="bf16")))
        except CompileError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(outcomes) == 4 and all(o is outcomes[0] for o in outcomes)
    assert isinstance(outcomes[0], CompileError) and "injected" in str(outcomes[0])


def test_compile_error_shows_the_ptx_lines():
    """nvJitLink's complaint comes with its log, the spec and the PTX lines around it."""
    from specdsl import render

    ptx = render(VectorAdd()).replace("add.rn.f32          %r4, %r4, %r5;",
                                      "add.rn.f32          %r4, %r4, %bogus;")
    with pytest.raises(CompileError) as info:
        compile_ptx(ptx, "sm_90", spec=VectorAdd())
    error = info.value
    assert "bogus" in error.log and error.spec == VectorAdd()
    assert "%bogus" in error.excerpt and "\n>" in "\n" + error.excerpt
    assert "VectorAdd" in str(error)


def test_compile_refuses_ptx_holding_a_nul():
    """PTX with a NUL is refused before nvJitLink, which would compile only the text before
    it (while the signature is read from all of it); the error shows the line."""
    from specdsl import render

    ptx = render(VectorAdd()).replace("DONE:", "DONE:\x00\n.visible .entry hidden()\n{ ret; }", 1)
    with pytest.raises(CompileError, match=r"holds a NUL character on line \d+: nvJitLink would "
                                           r"compile only the text before it") as info:
        compile_ptx(ptx, "sm_90", spec=VectorAdd())
    assert "DONE:\\0" in info.value.excerpt and info.value.spec == VectorAdd()


def test_ptx_excerpt_marks_the_line():
    """ptx_excerpt numbers lines and marks the reported one with '>'."""
    text = ptx_excerpt("a\nb\nc\nd\ne", 3, context=1)
    assert text.splitlines() == ["     2 | b", ">    3 | c", "     4 | d"]


def test_import_and_render_without_cuda(tmp_path):
    """Importing specdsl (Executor included), rendering and keys load no cuda module."""
    code = (
        "import sys\n"
        "for name in ('cuda', 'cuda.core', 'cuda.bindings', 'cuda.pathfinder'):\n"
        "    sys.modules[name] = None\n"
        "import specdsl\n"
        "from specdsl import Executor\n"
        "from specdsl.kernels import VectorAdd\n"
        "assert '.entry vector_add' in specdsl.render(VectorAdd())\n"
        "print(specdsl.derived_key(VectorAdd()))\n"
        "print(sorted(m for m in sys.modules if m.startswith('cuda') and sys.modules[m]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


def test_hand_key_spelling_a_derived_key_gets_its_own_module(executor):
    """A key= string equal to another request's derived key never returns that module."""
    f32, f16 = VectorAdd(dtype="f32"), VectorAdd(dtype="f16")
    derived = executor.ensure_module(f32)
    written = executor.ensure_module(f16, key=derived.key)
    assert written is not derived and written.derived_key == derived_key(f16, "sm_90")


def test_bind_needs_a_device(executor):
    """A compile-only executor refuses to bind a launcher."""
    with pytest.raises(LaunchError, match="this executor is compile-only"):
        executor.bind(VectorAdd(), grid=1, block=256)


@pytest.fixture
def fake_driver(launch_path):
    """An executor on device 0 of a driver that records launches instead of making them,
    every kernel through cuLaunchKernel, on each launch path: ``(executor, driver)``."""
    driver = FakeDriver(core=False)
    return Executor(0, cache_dir="off", driver=driver), driver


@pytest.fixture
def fake_core(launch_path):
    """The same through cuda.core's launch: ``(executor, driver)``; each of
    ``driver.core_calls`` is one launch's ``(stream, config, kernel, *values)``."""
    driver = FakeDriver()
    return Executor(0, cache_dir="off", driver=driver), driver


ARGS = (0x7F0000000000, 0x7F0000001000, 0x7F0000002000, 1024)


def test_bound_launcher_makes_the_same_driver_call(fake_driver):
    """bind(...)(*args) and launch(...) pass the driver identical arguments and parameters."""
    ex, driver = fake_driver
    spec = VectorAdd()
    ex.launch(spec, *ARGS, grid=(4, 1, 1), block=256)
    bound = ex.bind(spec, grid=(4, 1, 1), block=256)  # kept: its parameter buffer is read below
    bound(*ARGS)
    (first, second) = driver.driver_calls
    assert first[:9] == second[:9] == (FUNCTION, 4, 1, 1, 256, 1, 1, 0, DEFAULT_STREAM)
    for call in driver.driver_calls:  # the kernelParams array points at the packed values
        assert call[9] == tuple(value.to_bytes(8, "little") for value in ARGS)


def test_bound_launcher_checks_arguments(fake_driver):
    """A bound launcher refuses bad arguments before the driver is called."""
    ex, driver = fake_driver
    bound = ex.bind(VectorAdd(), grid=1, block=256)
    with pytest.raises(LaunchError, match=r"parameter 'a' .* expects an address aligned to 16"):
        bound(0x7F0000000001, 0x7F0000001000, 0x7F0000002000, 1024)
    with pytest.raises(LaunchError, match=r"vector_add takes 4 argument\(s\)"):
        bound(1, 2)
    assert driver.driver_calls == []


def test_four_dimensional_grid_refused_after_a_valid_launch(fake_driver):
    """A grid of four ints is refused even when its first three match a cached geometry."""
    ex, driver = fake_driver
    spec = VectorAdd()
    ex.launch(spec, *ARGS, grid=(4, 1, 1), block=256)
    with pytest.raises(LaunchError, match=r"grid must be .*1 to 3 positive ints"):
        ex.launch(spec, *ARGS, grid=(4, 1, 1, 9), block=256)
    with pytest.raises(LaunchError, match=r"block must be .*1 to 3 positive ints"):
        ex.bind(spec, grid=4, block=(256, 1, 1, 1))
    assert len(driver.driver_calls) == 1


class _DeviceStream:
    """A torch-like stream object that says which device it belongs to."""

    def __init__(self, handle, device_index):
        self.cuda_stream, self.device_index = handle, device_index


class _BareStream:
    """A __cuda_stream__ object that says nothing of its device."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_stream_of_another_device_refused(fake_driver):
    """A stream that names another device is refused before the driver launches."""
    ex, driver = fake_driver
    calls = driver.driver_calls
    spec, args = VectorAdd(), ARGS
    ex.launch(spec, *args, grid=4, block=256, stream=_DeviceStream(0x55, 0))
    with pytest.raises(LaunchError, match=r"stream 0x66 belongs to device 1; this executor "
                                          r"launches on device 0"):
        ex.launch(spec, *args, grid=4, block=256, stream=_DeviceStream(0x66, 1))
    with pytest.raises(LaunchError, match=r"belongs to device 1"):
        ex.bind(spec, grid=4, block=256, stream=_DeviceStream(0x66, 1))
    assert [call[8] for call in calls] == [0x55]


def test_new_object_for_the_last_stream_reuses_its_check(launch_path):
    """A new stream object per call (torch.cuda.current_stream() makes one) with the last
    stream's handle and device is that stream: no new check; a same-handle object naming
    another device is still refused, and one naming none is asked of the driver."""
    driver = FakeDriver(core=False, stream_devices={0x55: 1})
    ex = Executor(0, cache_dir="off", driver=driver)
    spec, calls = VectorAdd(), driver.driver_calls
    for _ in range(3):
        ex.launch(spec, *ARGS, grid=4, block=256, stream=_DeviceStream(0x55, 0))
    assert [call[8] for call in calls] == [0x55] * 3
    with pytest.raises(LaunchError, match=r"stream 0x55 belongs to device 1"):
        ex.launch(spec, *ARGS, grid=4, block=256, stream=_DeviceStream(0x55, 1))
    with pytest.raises(LaunchError, match=r"stream 0x55 belongs to device 1"):
        ex.launch(spec, *ARGS, grid=4, block=256, stream=_BareStream(0x55))
    assert driver.asked == [0x55] and len(calls) == 3


def test_stream_device_asked_of_the_driver(launch_path):
    """A stream object that names no device is placed by the driver, once per object; a
    handle the driver does not know is refused; the current context's own stream handles
    (CU_STREAM_LEGACY) are not asked about."""
    driver = FakeDriver(core=False, stream_devices={0x70: 0, 0x71: 1})
    ex = Executor(0, cache_dir="off", driver=driver)
    spec, calls = VectorAdd(), driver.driver_calls
    mine = _BareStream(0x70)
    for _ in range(3):
        ex.launch(spec, *ARGS, grid=4, block=256, stream=mine)
    assert driver.asked == [0x70] and len(calls) == 3  # checked once per stream object
    with pytest.raises(LaunchError, match=r"stream 0x71 belongs to device 1"):
        ex.launch(spec, *ARGS, grid=4, block=256, stream=_BareStream(0x71))
    with pytest.raises(LaunchError, match=r"stream 0x72 is not a stream the driver knows"):
        ex.launch(spec, *ARGS, grid=4, block=256, stream=_BareStream(0x72))
    ex.launch(spec, *ARGS, grid=4, block=256, stream=_BareStream(1))  # CU_STREAM_LEGACY
    assert driver.asked == [0x70, 0x71, 0x72] and len(calls) == 4


def test_cuda_driver_names_a_stream_it_does_not_know(monkeypatch):
    """CudaDriver turns cuStreamGetDevice's error into a LaunchError naming the handle and
    the driver's error."""
    from cuda.bindings import driver as bindings

    from specdsl._runtime.driver import CudaDriver

    invalid = bindings.CUresult.CUDA_ERROR_INVALID_HANDLE
    monkeypatch.setattr(bindings, "cuStreamGetDevice", lambda stream: (invalid, None))
    with pytest.raises(LaunchError, match=r"stream 0x72 is not a stream the driver knows: "
                                          r"CUDA_ERROR_INVALID_HANDLE"):
        CudaDriver().stream_device(0x72)


def test_stream_without_a_handle_refused():
    """A stream object whose handle cannot be read is a LaunchError, not a crash."""
    class Closed:
        def __cuda_stream__(self):
            raise RuntimeError("stream is closed")

    from specdsl._runtime.streams import stream_handle

    with pytest.raises(LaunchError, match=r"gave no handle: stream is closed"):
        stream_handle(Closed())


def test_cuda_core_launch_failure_is_a_launch_error(launch_path):
    """A launch cuda.core refuses (a driver without a C entry point launches through it on
    either path) becomes a LaunchError naming the entry, the geometry and the request;
    an argument's own error stays the LaunchError the checks raise."""
    refused = RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources requested")
    ex = Executor(0, cache_dir="off", driver=FakeDriver(core_error=refused, c_entry=False))
    spec = VectorAdd()
    with pytest.raises(LaunchError, match=r"vector_add: cuda.core launch failed: "
                                          r"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.*"
                                          r"\(grid \(4, 1, 1\), block \(256, 1, 1\), "
                                          r"shared_mem 0; request VectorAdd\(dtype=DType.F32, "
                                          r"block=256\)\)"):
        ex.launch(spec, *ARGS, grid=4, block=256)
    with pytest.raises(LaunchError, match=r"parameter 'a' .* expects an address aligned to 16"):
        ex.launch(spec, 0x7F0000000001, *ARGS[1:], grid=4, block=256)
    with pytest.raises(LaunchError, match=r"cuda.core launch failed"):
        ex.bind(spec, grid=4, block=256)(*ARGS)


def test_driver_launch_failure_is_a_launch_error(launch_path):
    """An error cuLaunchKernel returns (from Python, or from C on the compiled path)
    becomes a LaunchError naming its CUDA name, the entry, the geometry and the request,
    from launch and from a bound launcher."""
    error = CUresult(701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    ex = Executor(0, cache_dir="off", driver=FakeDriver(core=False, driver_error=error))
    message = (r"vector_add: cuLaunchKernel failed with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES "
               r"\(grid \(4, 1, 1\), block \(256, 1, 1\), shared_mem 0; request "
               r"VectorAdd\(dtype=DType.F32, block=256\)\)")
    with pytest.raises(LaunchError, match=message):
        ex.launch(VectorAdd(), *ARGS, grid=4, block=256)
    with pytest.raises(LaunchError, match=message):
        ex.bind(VectorAdd(), grid=4, block=256)(*ARGS)


def test_launch_hot_path_follows_geometry_and_counts_hits(fake_core, launch_path):
    """Repeated launches take the cached module and geometry; a new grid, block or spec is
    checked afresh; each launch after the first counts as one cache hit."""
    ex, driver = fake_core
    assert ex.compiled == (launch_path == "compiled")
    spec, grid = VectorAdd(), (4, 1, 1)
    for _ in range(3):
        ex.launch(spec, *ARGS, grid=grid, block=256)
    ex.launch(spec, *ARGS, grid=8, block=(128,))
    ex.launch(VectorAdd(block=128), *ARGS, grid=8, block=128)  # equal baked fields: one module
    assert driver.launches == [((4, 1, 1), (256, 1, 1), ARGS)] * 3 + [
        ((8, 1, 1), (128, 1, 1), ARGS)] * 2
    assert ex.stats.hits == 4 and ex.stats.misses == 1
    with pytest.raises(LaunchError, match=r"vector_add: block.x must be at least 1 \(got 0\)"):
        ex.launch(spec, *ARGS, grid=grid, block=0)
    with pytest.raises(LaunchError, match=r"vector_add takes 4 argument\(s\)"):
        ex.launch(spec, *ARGS[:3], grid=grid, block=256)
    assert len(driver.launches) == 5


def test_launch_hot_path_proves_hand_keys(fake_core):
    """A hand-written key missing a baked field raises IncompleteKeyError through launch,
    also after the key's first request was launched from the hot path."""
    ex, driver = fake_core
    for _ in range(2):
        ex.launch(HandKeyedAdd(), *ARGS, grid=4, block=256)
    with pytest.raises(IncompleteKeyError, match=r"dtype"):
        ex.launch(HandKeyedAdd(dtype=DType.F16), *ARGS, grid=4, block=256)
    assert len(driver.launches) == 2


def test_a_subclass_overrides_launch(launch_path):
    """launch() is a method on either path: a subclass's own launch runs, and super() works."""
    class Counting(Executor):
        def launch(self, *args, **kwargs):
            self.calls += 1
            return super().launch(*args, **kwargs)

    ex = Counting(None, target="sm_90", cache_dir="off")
    ex.calls = 0
    with pytest.raises(LaunchError, match=r"this executor is compile-only"):
        ex.launch(VectorAdd(), 1, 2, 3, 4, grid=1, block=32)
    assert ex.calls == 1


@pytest.mark.parametrize("device", [None, 0], ids=["compile-only", "launched"])
def test_an_executor_is_freed_without_the_cycle_collector(launch_path, device):
    """No reference cycle keeps an executor (and its modules) alive once it is dropped,
    after launches and binds on a device too."""
    import gc
    import weakref

    gc.disable()
    try:
        ex = Executor(device, target="sm_90", cache_dir="off", driver=FakeDriver())
        if device is not None:
            ex.launch(VectorAdd(), *ARGS, grid=4, block=256)
            ex.bind(VectorAdd(), grid=4, block=256)(*ARGS)
        refs = [weakref.ref(ex), weakref.ref(ex.ensure_module(VectorAdd()))]
        del ex
        assert [ref() for ref in refs] == [None, None]
    finally:
        gc.enable()


def test_the_launch_path_is_chosen_once_per_executor(fake_core, launch_path, monkeypatch):
    """SPECDSL_PURE_PYTHON changed after an executor was made changes nothing for it: later
    modules keep its path."""
    from specdsl.speedups import PURE_PYTHON_ENV

    ex, driver = fake_core
    monkeypatch.setenv(PURE_PYTHON_ENV, "yes")
    ex.launch(VectorAdd(dtype=DType.F16), *ARGS, grid=4, block=256)
    module = ex.ensure_module(VectorAdd(dtype=DType.F16))
    assert (type(module.fire).__name__ == "DriverLaunch") == (launch_path == "compiled")
    assert ex.compiled == (launch_path == "compiled") and len(driver.launches) == 1


def test_no_geometry_is_checked_as_such_on_a_fresh_module(fake_core):
    """grid=None, block=None, shared_mem=None on a module's first launch is refused by the
    geometry check (a LaunchError), on either path."""
    ex, driver = fake_core
    with pytest.raises(LaunchError, match=r"grid must be"):
        ex.launch(VectorAdd(), 1, 2, grid=None, block=None, shared_mem=None)
    assert driver.launches == []


def test_a_first_launch_of_none_is_not_a_spec(fake_core):
    """launch(None, ...) as an executor's first launch, with checking off, is refused as no
    kernel spec (it never matches the empty last-launch state)."""
    from specdsl import NotASpecError, key_checking

    ex, driver = fake_core
    with key_checking(False), pytest.raises(NotASpecError):
        ex.launch(None, grid=1, block=32)
    assert driver.launches == []


def test_a_spec_class_is_refused_by_launch_and_bind(fake_core):
    """launch(VectorAdd, ...) and bind(VectorAdd, ...), on either launch path, say to pass a
    request; nothing reaches the driver."""
    from specdsl import NotASpecError

    ex, driver = fake_core
    message = r"^VectorAdd is a spec class; pass a request such as VectorAdd\(\.\.\.\)$"
    with pytest.raises(NotASpecError, match=message):
        ex.launch(VectorAdd, *ARGS, grid=1, block=256)
    with pytest.raises(NotASpecError, match=message):
        ex.bind(VectorAdd, grid=1, block=256)
    assert driver.launches == [] and driver.core_calls == []


def test_launch_is_a_documented_method_bound_to_the_held_launch_path(fake_core, launch_path):
    """Executor.launch is defined in Python with its full docstring; an executor's launch is
    its launch path's own method (the compiled LaunchPath, or the Python Launcher), an
    object it holds: Executor derives from object alone."""
    import inspect

    from specdsl._runtime.launching import Launcher

    ex, _ = fake_core
    doc = inspect.getdoc(Executor.launch)
    for error in ("LaunchError", "IncompleteKeyError", "RenderError", "CompileError"):
        assert f"{error}:" in doc or f"{error}," in doc
    assert "def launch(self, spec" in inspect.getsource(Executor)
    assert Executor.__mro__ == (Executor, object)
    holder = ex.launch.__self__
    assert type(holder).__name__ == ("LaunchPath" if launch_path == "compiled" else "Launcher")
    assert (launch_path == "compiled") != isinstance(holder, Launcher)


def test_compiled_path_reads_the_named_tuples_fields_where_they_are():
    """The positions the compiled launch path reads the launcher's named tuples at are
    the positions of their fields."""
    from specdsl._runtime.geometry import LastGeometry, LaunchGeometry
    from specdsl._runtime.launching import LastLaunch
    from specdsl._runtime.speedups import speedups
    from specdsl._runtime.streams import Streams

    built = speedups()
    if built is None:
        pytest.skip("the compiled launch path is not built")
    types_ = {t.__name__: t for t in (LastLaunch, Streams, LastGeometry, LaunchGeometry)}
    assert {key: types_[key[0]]._fields.index(key[1]) for key in built.FIELDS} == built.FIELDS


def test_a_driver_without_a_c_entry_point_launches_through_python(launch_path):
    """A driver whose launch_kernel_address is 0 gets the generated Python launchers on
    either path; their successful cuLaunchKernel (CUDA_SUCCESS) is no failure."""
    driver = FakeDriver(core=False, c_entry=False)
    ex = Executor(0, cache_dir="off", driver=driver)
    for _ in range(2):
        ex.launch(VectorAdd(), *ARGS, grid=4, block=256)
    assert ex.ensure_module(VectorAdd()).fire.__name__ == "fire"  # generated Python
    assert driver.launches == [((4, 1, 1), (256, 1, 1), ARGS)] * 2
