"""The key ledger (run-time proof of hand-written keys) and the checking switch."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from importlib.metadata import entry_points

import pytest

import specdsl._proof.ledger as ledger_module
import specdsl._proof.switch as switch_module
from specdsl import DType, IncompleteKeyError, KeyLedger, baked, kernel_spec, launch, render
from specdsl._proof.switch import (
    checking_enabled,
    key_checking,
    parse_switch,
    proof_suspended,
    set_default_checking,
    suspend_key_proof,
)
from specdsl._spec.target import Target
from specdsl.errors import CheckingSwitchError


@kernel_spec(template="rmsnorm.ptx.j2", entry="rmsnorm")
class ShapeKeyedRMSNorm:
    """The incident: the built-in RMSNorm template under a hand-written key holding only the shape.

    ``tag`` is baked but the template never reads it; ``rows`` is a launch field.
    """

    hidden: int = baked(4096)
    eps: float = baked(1e-5)
    dtype: DType = baked(DType.BF16)
    fused_residual: bool = baked(False)
    block: int = baked(512)
    tag: int = baked(0)
    rows: int = launch(1)

    def key(self) -> str:
        return f"rmsnorm-{self.hidden}"


@kernel_spec(template="rmsnorm.ptx.j2", entry="rmsnorm")
class OtherRMSNorm:
    """A second class over the same template, for two classes sharing a call-site key."""

    hidden: int = baked(4096)
    eps: float = baked(1e-5)
    dtype: DType = baked(DType.BF16)
    fused_residual: bool = baked(False)
    block: int = baked(512)


@pytest.fixture
def Norm() -> type:
    return ShapeKeyedRMSNorm


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list:
    """Counts the renders the ledger makes (the requests rendered, in order)."""
    seen: list = []

    def counting(spec, target="sm_90"):
        seen.append(spec)
        return render(spec, target)

    monkeypatch.setattr(ledger_module, "render", counting)
    return seen


def _recorded(Norm: type, request=None, key: str = "rmsnorm-4096") -> KeyLedger:
    request = request if request is not None else Norm(eps=1e-5)
    ledger = KeyLedger()
    ledger.record(key, request, "sm_90", render(request, "sm_90"))
    return ledger


# -- the incident -------------------------------------------------------------------------


def test_incident_eps_missing_from_key_raises(Norm: type) -> None:
    """eps 1e-5 compiled under 'rmsnorm-4096', then eps 1e-6 under it: an error naming eps."""
    first, second = Norm(eps=1e-5), Norm(eps=1e-6)
    ledger = _recorded(Norm, first)
    with pytest.raises(IncompleteKeyError) as info:
        ledger.prove("rmsnorm-4096", second, "sm_90")
    err = info.value
    assert err.key == "rmsnorm-4096"
    assert err.first is first and err.request is second
    assert err.differing_fields == ("eps",)
    message = str(err)
    assert "'rmsnorm-4096'" in message
    assert repr(first) in message and repr(second) in message
    assert "eps: 1e-05 != 1e-06" in message
    assert "A parameter baked into the PTX is missing from the key" in message


def test_incident_through_a_compile_only_executor(Norm: type) -> None:
    """The executor (nvJitLink, no GPU) raises on the second eps under the shape-only key."""
    from specdsl import Executor

    executor = Executor(device=None, target="sm_90", cache_dir="off")
    with key_checking(True):
        executor.ensure_module(Norm(eps=1e-5))
        executor.ensure_module(Norm(eps=1e-5, rows=64))
        with pytest.raises(IncompleteKeyError, match="eps: 1e-05 != 1e-06"):
            executor.ensure_module(Norm(eps=1e-6))
    assert executor.stats.compiles == 1  # the second eps was refused, not built


def test_launch_only_difference_is_proven(Norm: type) -> None:
    """Two requests differing only in a launch field share the PTX: proven, no error."""
    ledger = _recorded(Norm, Norm(rows=1))
    ledger.prove("rmsnorm-4096", Norm(rows=4096), "sm_90")
    assert ledger.proven_count() == 1  # one derived key: rows is not in it


def test_template_ignored_baked_difference_is_proven(Norm: type, renders: list) -> None:
    """A baked field the template never reads changes the derived key, not the PTX: proven."""
    ledger = _recorded(Norm, Norm(tag=0))
    ledger.prove("rmsnorm-4096", Norm(tag=7), "sm_90")
    assert [r.tag for r in renders] == [7]
    assert ledger.proven_count() == 2


def test_several_differing_fields_are_all_named(Norm: type) -> None:
    """The error lists every differing baked field with both values, and no launch field."""
    ledger = _recorded(Norm, Norm(eps=1e-5, dtype="f32", rows=1))
    with pytest.raises(IncompleteKeyError) as info:
        ledger.prove("rmsnorm-4096", Norm(eps=1e-6, dtype="f16", rows=8), "sm_90")
    assert info.value.differing_fields == ("eps", "dtype")
    assert "dtype: DType.F32 != DType.F16" in str(info.value)


def test_negative_zero_is_a_different_value(Norm: type) -> None:
    """eps 0.0 and -0.0 render different immediates: the ledger tells them apart."""
    ledger = _recorded(Norm, Norm(eps=0.0))
    with pytest.raises(IncompleteKeyError, match=r"eps: 0\.0 != -0\.0"):
        ledger.prove("rmsnorm-4096", Norm(eps=-0.0), "sm_90")


# -- the fast path ------------------------------------------------------------------------


def test_recorded_request_hit_renders_nothing(Norm: type, renders: list) -> None:
    """A hit from the request that was compiled is proven without rendering."""
    request = Norm()
    ledger = _recorded(Norm, request)
    for _ in range(3):
        ledger.prove("rmsnorm-4096", request, "sm_90")
        ledger.prove("rmsnorm-4096", Norm(), Target.parse("sm_90"))
    assert renders == []


def test_proven_request_renders_once(Norm: type, renders: list) -> None:
    """A new request is rendered on its first hit only; later hits find it proven."""
    ledger = _recorded(Norm, Norm(tag=0))
    for _ in range(5):
        ledger.prove("rmsnorm-4096", Norm(tag=1), "sm_90")
        ledger.prove("rmsnorm-4096", Norm(tag=2), "sm_90")
        ledger.prove("rmsnorm-4096", Norm(tag=0), "sm_90")
    assert [r.tag for r in renders] == [1, 2]


def test_refuted_request_raises_every_time(Norm: type) -> None:
    """A mismatch is never remembered as proven: each hit raises again."""
    ledger = _recorded(Norm)
    for _ in range(2):
        with pytest.raises(IncompleteKeyError):
            ledger.prove("rmsnorm-4096", Norm(eps=1e-6), "sm_90")


# -- records, targets, keys without a record ------------------------------------------------


def test_targets_are_proven_separately(Norm: type) -> None:
    """One key under two targets: each target's PTX is its own reference."""
    ledger = _recorded(Norm)
    ledger.record("rmsnorm-4096", Norm(), "sm_100", render(Norm(), "sm_100"))
    ledger.prove("rmsnorm-4096", Norm(rows=64), "sm_100")
    with pytest.raises(IncompleteKeyError, match="for sm_100"):
        ledger.prove("rmsnorm-4096", Norm(eps=1e-6), "sm_100")


def test_prove_without_record_takes_request_as_reference(Norm: type) -> None:
    """A key never recorded adopts its first proven request as reference, then checks others."""
    ledger = KeyLedger()
    first = Norm(eps=1e-5)
    ledger.prove("rmsnorm-4096", first, "sm_90")
    assert ledger.first_request("rmsnorm-4096", "sm_90") is first
    with pytest.raises(IncompleteKeyError) as info:
        ledger.prove("rmsnorm-4096", Norm(eps=1e-6), "sm_90")
    assert info.value.first is first


def test_second_record_with_other_ptx_raises(Norm: type) -> None:
    """Recording different PTX under a key that has a reference is a mismatch (checking on)."""
    ledger = _recorded(Norm)
    other = Norm(eps=1e-6)
    with key_checking(True), pytest.raises(IncompleteKeyError, match="eps"):
        ledger.record("rmsnorm-4096", other, "sm_90", render(other, "sm_90"))


def test_second_record_with_checking_off_keeps_first(Norm: type) -> None:
    """With checking off a conflicting record raises nothing and keeps the first reference."""
    first = Norm(eps=1e-5)
    ledger = _recorded(Norm, first)
    with key_checking(False):
        ledger.record("rmsnorm-4096", Norm(eps=1e-6), "sm_90", render(Norm(eps=1e-6)))
    assert ledger.first_request("rmsnorm-4096") is first


def test_record_without_ptx_renders_reference_when_needed(Norm: type) -> None:
    """record(..., ptx=None) (a cubin from disk) still lets later hits be proven."""
    ledger = KeyLedger()
    ledger.record("rmsnorm-4096", Norm(eps=1e-5), "sm_90", None)
    ledger.prove("rmsnorm-4096", Norm(rows=32), "sm_90")
    with pytest.raises(IncompleteKeyError, match="eps"):
        ledger.prove("rmsnorm-4096", Norm(eps=1e-6), "sm_90")


def test_key_first_compiled_while_suspended_is_proven_next_hit(Norm: type) -> None:
    """Misses are recorded inside suspend_key_proof; the next hit outside is proven."""
    ledger = KeyLedger()
    with suspend_key_proof():
        assert proof_suspended()
        ledger.record("rmsnorm-4096", Norm(eps=1e-5), "sm_90", render(Norm(eps=1e-5)))
    assert not proof_suspended()
    with pytest.raises(IncompleteKeyError):
        ledger.prove("rmsnorm-4096", Norm(eps=1e-6), "sm_90")


def test_key_must_be_a_nonempty_str(Norm: type) -> None:
    """A key that is not a non-blank str is refused with its value named."""
    with pytest.raises(TypeError, match=r"non-blank str \(got ''"):
        KeyLedger().record("", Norm(), "sm_90", "ptx")
    with pytest.raises(TypeError, match=r"non-blank str \(got '  '"):
        KeyLedger().prove("  ", Norm(), "sm_90")
    with pytest.raises(TypeError, match="got 42"):
        KeyLedger().prove(42, Norm(), "sm_90")


def test_two_classes_with_the_same_ptx_share_a_key(Norm: type) -> None:
    """Another spec class rendering the same PTX under the key is proven (no false positive)."""
    ledger = _recorded(Norm, Norm())
    ledger.prove("rmsnorm-4096", OtherRMSNorm(eps=1e-5), "sm_90")
    assert ledger.proven_count() == 2


def test_two_classes_with_different_ptx_name_both_classes(Norm: type) -> None:
    """Two spec classes under one call-site key rendering different PTX: both classes named."""
    ledger = _recorded(Norm, Norm())
    with pytest.raises(IncompleteKeyError) as info:
        ledger.prove("rmsnorm-4096", OtherRMSNorm(eps=2e-5), "sm_90")
    assert "different spec classes (ShapeKeyedRMSNorm and OtherRMSNorm)" in str(info.value)
    assert info.value.differing_fields == ("eps", "tag")  # tag: absent from OtherRMSNorm
    # the advice is the kernel, not a field list that names the other class's fields
    assert str(info.value).splitlines()[-1].startswith(
        "The key does not tell two kernels apart (ShapeKeyedRMSNorm and OtherRMSNorm): "
        "without this error the request would silently run the first request's kernel. "
        "Put the kernel (its spec class) in the key")
    assert "missing from the key" not in str(info.value)


# -- threads and memory -----------------------------------------------------------------------


def test_sixteen_threads_no_false_positive_no_missed_mismatch(Norm: type) -> None:
    """16 threads prove and record over shared keys: exactly the bad requests raise."""
    ledger = KeyLedger()
    keys = [f"rmsnorm-{h}" for h in (1024, 2048, 4096, 8192)]
    for hidden, key in zip((1024, 2048, 4096, 8192), keys, strict=True):
        ledger.record(key, Norm(hidden=hidden), "sm_90", render(Norm(hidden=hidden)))
    barrier = threading.Barrier(16)
    results: list[tuple[bool, bool]] = []  # (expected to raise, raised)
    lock = threading.Lock()

    def worker(index: int) -> None:
        barrier.wait()
        for round_ in range(40):
            hidden = (1024, 2048, 4096, 8192)[(index + round_) % 4]
            key = f"rmsnorm-{hidden}"
            bad = (index + round_) % 5 == 0
            request = Norm(hidden=hidden, eps=1e-6 if bad else 1e-5,
                           tag=round_ % 3, rows=1 + index % 4)
            fresh = f"fresh-{index}-{round_ % 4}"
            ledger.record(fresh, Norm(hidden=hidden), "sm_90", render(Norm(hidden=hidden)))
            try:
                ledger.prove(key, request, "sm_90")
                raised = False
            except IncompleteKeyError as exc:
                raised = "eps" in exc.differing_fields
            with lock:
                results.append((bad, raised))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 16 * 40
    assert [r for r in results if r[0] != r[1]] == []
    assert sum(bad for bad, _ in results) == 16 * 8
    assert len(ledger) == 4 + 16 * 4  # no lost record


def test_memory_bounded_by_distinct_derived_keys(Norm: type) -> None:
    """Thousands of hits over 6 distinct requests keep 6 proven entries under one key."""
    ledger = _recorded(Norm, Norm(tag=0))
    for _ in range(500):
        for tag in range(6):
            ledger.prove("rmsnorm-4096", Norm(tag=tag, rows=1 + tag % 2), "sm_90")
    assert len(ledger) == 1
    assert ledger.proven_count() == 6


# -- the checking switch ---------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    (None, None), ("", None), ("0", False), ("1", True), ("TRUE", True), ("no", False),
    (" on ", True), ("Off", False)])
def test_switch_values(value: str | None, expected: bool | None) -> None:
    """SPECDSL_CHECK_KEYS takes specdsl.config's switch words; unset or empty means the default."""
    assert parse_switch(value) is expected


@pytest.mark.parametrize("value", ["01", "2", "y", "enabled", "1 0"])
def test_switch_refuses_other_values(value: str) -> None:
    """Anything else is an error naming the variable, the value and the accepted words."""
    with pytest.raises(CheckingSwitchError) as info:
        parse_switch(value)
    assert str(info.value) == (f"SPECDSL_CHECK_KEYS must be 1/0, true/false, yes/no or on/off "
                               f"(any case), or unset (got {value!r})")


@pytest.mark.skipif(
    not any(e.name == "specdsl" for e in entry_points(group="pytest11")),
    reason="specdsl is not installed: its pytest11 entry point is not registered")
def test_plugin_turns_checking_on_in_this_run() -> None:
    """The specdsl pytest plugin has turned checking on for this very test session."""
    assert switch_module.checking_default().source in ("set_default_checking", "environment")
    assert checking_enabled()


def test_key_checking_overrides_and_restores() -> None:
    """key_checking(False) switches off inside the block, nests, and restores on exit."""
    before = checking_enabled()
    with key_checking(False):
        assert checking_enabled() is False
        with key_checking(True):
            assert checking_enabled() is True
        assert checking_enabled() is False
    assert checking_enabled() is before


def test_key_checking_is_context_local() -> None:
    """A thread's key_checking(False) is invisible to a concurrent thread."""
    inside, seen = threading.Event(), []
    release = threading.Event()

    def switch_off() -> None:
        with key_checking(False):
            inside.set()
            release.wait(5)

    t = threading.Thread(target=switch_off)
    t.start()
    inside.wait(5)
    seen.append(checking_enabled())
    release.set()
    t.join()
    assert seen == [True]


def test_key_checking_refuses_non_bool() -> None:
    """key_checking takes a bool, not a truthy value."""
    with pytest.raises(TypeError, match=r"True or False \(got 'no'"), key_checking("no"):
        pass


def test_environment_wins_over_plugin_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """SPECDSL_CHECK_KEYS=0 beats set_default_checking(True) (the plugin's setting)."""
    monkeypatch.setenv("SPECDSL_CHECK_KEYS", "0")
    try:
        previous = set_default_checking(True)
        assert checking_enabled() is False
    finally:
        monkeypatch.delenv("SPECDSL_CHECK_KEYS")
        set_default_checking(previous)
    assert checking_enabled() is True


def _python(flags: list[str], env_value: str | None, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPECDSL_CHECK_KEYS", "PYTHONOPTIMIZE")}
    if env_value is not None:
        env["SPECDSL_CHECK_KEYS"] = env_value
    return subprocess.run([sys.executable, *flags, "-c", code], env=env,
                          capture_output=True, text=True, timeout=60)


PRINT_SWITCH = "from specdsl import checking_enabled; print(checking_enabled())"


@pytest.mark.parametrize("flags, env_value, expected", [
    ([], None, "True"), (["-O"], None, "False"), (["-O"], "1", "True"), ([], "0", "False"),
])
def test_default_follows_debug_and_environment(flags, env_value, expected) -> None:
    """On by default, off under python -O; SPECDSL_CHECK_KEYS overrides both ways."""
    result = _python(flags, env_value, PRINT_SWITCH)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_bad_environment_value_is_a_clear_error() -> None:
    """SPECDSL_CHECK_KEYS=maybe fails on first use with the variable and value named."""
    result = _python([], "maybe", PRINT_SWITCH)
    assert result.returncode == 1
    assert ("CheckingSwitchError: SPECDSL_CHECK_KEYS must be 1/0, true/false, yes/no or on/off "
            "(any case), or unset (got 'maybe')") in result.stderr


@pytest.mark.parametrize("env_value, enabled, source", [
    (None, True, "set_default_checking"), ("off", False, "environment"),
    ("YES", True, "environment")])
def test_checking_default_names_its_source(monkeypatch: pytest.MonkeyPatch, env_value,
                                           enabled, source) -> None:
    """checking_default() tells the default and whether the environment or a caller set it."""
    if env_value is None:
        monkeypatch.delenv("SPECDSL_CHECK_KEYS", raising=False)
    else:
        monkeypatch.setenv("SPECDSL_CHECK_KEYS", env_value)
    previous = set_default_checking(True)
    try:
        assert switch_module.checking_default() == switch_module.CheckingDefault(enabled, source)
    finally:
        monkeypatch.delenv("SPECDSL_CHECK_KEYS", raising=False)
        set_default_checking(previous)


def test_checking_default_without_a_setting_is_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    """With neither the variable nor set_default_checking, __debug__ decides."""
    monkeypatch.delenv("SPECDSL_CHECK_KEYS", raising=False)
    previous = set_default_checking(None)
    try:
        assert switch_module.checking_default() == switch_module.CheckingDefault(
            __debug__, "__debug__")
    finally:
        set_default_checking(previous)


def test_mismatch_recorded_while_off_marks_the_key_incomplete() -> None:
    """Executors sharing a ledger: other PTX recorded with checking off makes every later
    proof under that key raise, even for a request equal to the first one."""
    from handkeyed import HandKeyedAdd
    from specdsl import Executor

    ledger = KeyLedger()
    first = Executor(None, target="sm_90", cache_dir="off", ledger=ledger)
    second = Executor(None, target="sm_90", cache_dir="off", ledger=ledger)
    with key_checking(True):
        first.ensure_module(HandKeyedAdd(dtype="f32"))
    with key_checking(False):
        second.ensure_module(HandKeyedAdd(dtype="f16"))  # holds the f16 module under "vadd"
    with key_checking(True), pytest.raises(IncompleteKeyError) as info:
        second.ensure_module(HandKeyedAdd(dtype="f32"))
    assert info.value.key == "vadd" and info.value.differing_fields == ("dtype",)
