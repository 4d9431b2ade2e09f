"""specdsl.torch's eager fast path on the CPU: which calls skip the dispatcher, and that a
call gives the same result, error and version counters on either path.

A call's path shows in its traceback: the op path runs the implementation under torch's
``torch/_library`` layers, the fast path calls it from the public function. CPU tensors
reach the implementations, which refuse them; the ``stand_in`` fixture lets them pass
for CUDA tensors and records the launch instead, so calls can succeed.
"""

from __future__ import annotations

import re
import traceback
from pathlib import PurePath

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import specdsl.torch as sd  # noqa: E402
from specdsl import LaunchError, SpecError  # noqa: E402
from specdsl.torch import (  # noqa: E402
    _activation,
    _eager,
    _fused_quant,
    _norm,
    _quant,
    _rope,
    _runtime,
    _softmax,
    _validate,
)

OPS = torch.ops.specdsl
BF16 = torch.bfloat16


def t(*shape, dtype=BF16):
    """A CPU tensor of zeros."""
    return torch.zeros(shape, dtype=dtype)


def scale():
    """A static FP8 scale on the CPU."""
    return torch.ones(1)


#: Every public function, called on valid CPU tensors, beside its op called on the same
#: arguments: (public call, op call), each made from fresh tensors.
CALLS = {
    "rms_norm": (lambda: sd.rms_norm(t(2, 64), t(64), 1e-6),
                 lambda: OPS.rms_norm.default(t(2, 64), t(64), 1e-6)),
    "fused_add_rms_norm": (
        lambda: sd.fused_add_rms_norm(t(2, 64), t(2, 64), t(64), 1e-6),
        lambda: OPS.fused_add_rms_norm.default(t(2, 64), t(2, 64), t(64), 1e-6)),
    "softmax": (lambda: sd.softmax(t(2, 64), 0.5), lambda: OPS.softmax.default(t(2, 64), 0.5)),
    "rotary_embedding": (
        lambda: sd.rotary_embedding(t(2, dtype=torch.int64), t(2, 128), t(2, 64), 64),
        lambda: OPS.rotary_embedding.default(t(2, dtype=torch.int64), t(2, 128), t(2, 64), 64,
                                             10000.0, "neox", None)),
    "silu_and_mul": (lambda: sd.silu_and_mul(t(2, 64)),
                     lambda: OPS.silu_and_mul.default(t(2, 64))),
    "scaled_fp8_quant": (lambda: sd.scaled_fp8_quant(t(2, 64)),
                         lambda: OPS.dynamic_per_token_scaled_fp8_quant.default(t(2, 64))),
    "scaled_fp8_quant static": (
        lambda: sd.scaled_fp8_quant(t(2, 64), scale()),
        lambda: OPS.static_scaled_fp8_quant.default(t(2, 64), scale())),
    "per_token_group_quant_fp8": (
        lambda: sd.per_token_group_quant_fp8(t(2, 128)),
        lambda: OPS.per_token_group_quant_fp8.default(t(2, 128))),
    "rms_norm_quant": (
        lambda: sd.rms_norm_quant(t(2, 128), t(128), 1e-6, group_size=128),
        lambda: OPS.rms_norm_quant_group.default(t(2, 128), t(128), 1e-6)),
    "fused_add_rms_norm_quant": (
        lambda: sd.fused_add_rms_norm_quant(t(2, 64), t(2, 64), t(64), 1e-6, scale()),
        lambda: OPS.fused_add_rms_norm_quant_static.default(t(2, 64), t(2, 64), t(64), scale(),
                                                            1e-6)),
    "silu_and_mul_quant": (
        lambda: sd.silu_and_mul_quant(t(2, 64)),
        lambda: OPS.silu_and_mul_quant_dynamic.default(t(2, 64))),
}


def _refusal(call) -> BaseException:
    with pytest.raises((LaunchError, SpecError)) as info:
        call()
    return info.value


def _path(error: BaseException) -> str:
    """``"op"`` where the implementation ran under torch's custom-op layers, else ``"fast"``."""
    files = [PurePath(frame.filename) for frame in traceback.extract_tb(error.__traceback__)]
    return "op" if any(path.match("torch/_library/*.py") for path in files) else "fast"


# -- the gate ------------------------------------------------------------------------------


def test_plain_tensors_are_plain():
    """Plain CPU tensors, and a Parameter, need nothing of the dispatcher."""
    assert _eager.plain(t(2, 8), torch.nn.Parameter(t(8), requires_grad=False))


class Sub(torch.Tensor):
    """A tensor subclass (a user's, as DTensor or FakeTensor are torch's)."""


class SubParameter(torch.nn.Parameter):
    """A Parameter subclass (as some libraries' weights are)."""


class Mode(TorchDispatchMode):
    """A dispatch mode that passes every call on."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("tensors", [
    lambda: (t(2, 8).as_subclass(Sub), t(8)),
    lambda: (t(2, 8), SubParameter(t(8), requires_grad=False)),
    lambda: (t(2, 8), t(8).requires_grad_()),
    lambda: (torch._neg_view(t(2, 8)), t(8)),
    lambda: (torch.nested.as_nested_tensor([t(2, 8), t(3, 8)], layout=torch.jagged), t(8)),
    lambda: (torch.empty(2, 8, device="meta"), t(8)),
    lambda: ([1.0, 2.0], t(8)),
], ids=["subclass", "Parameter subclass", "requires_grad", "neg bit", "jagged nested",
        "meta", "not a tensor"])
def test_tensors_the_dispatcher_must_see(tensors):
    """Subclasses (a jagged nested tensor is one), tensors needing autograd, the neg bit,
    meta tensors and non-tensors take the op."""
    assert not _eager.plain(*tensors())


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
@pytest.mark.parametrize("call", [sd.rms_norm, OPS.rms_norm.default], ids=["fast", "op"])
def test_strided_nested_tensor_refused_by_torch(call):
    """A strided nested tensor (which the gate does not ask about) is refused by torch on
    either path."""
    nested = torch.nested.as_nested_tensor([t(2, 64), t(3, 64)])
    with pytest.raises(RuntimeError, match="NestedTensor"):
        call(nested, t(64), 1e-6)


def test_requires_grad_is_plain_without_grad_mode():
    """Under no_grad a tensor that requires grad needs no autograd kernel."""
    with torch.no_grad():
        assert _eager.plain(t(2, 8), t(8).requires_grad_())


def test_fake_tensor_mode_takes_the_op():
    """Under FakeTensorMode (a dispatch mode) even plain tensors take the op."""
    x, w = t(2, 8), t(8)
    with FakeTensorMode():
        assert not _eager.plain(x, w)


def test_dispatch_mode_takes_the_op():
    """Any torch dispatch mode takes the op."""
    with Mode():
        assert not _eager.plain(t(2, 8))


def test_function_mode_takes_the_op():
    """A torch function mode (``with torch.device(...)`` is one) takes the op."""
    x = t(2, 8)
    with torch.device("cpu"):
        assert not _eager.plain(x)


def test_compile_tracing_takes_the_op():
    """While torch.compile traces, the gate says no (without a graph break)."""
    torch._dynamo.reset()

    def branch(x):
        return x + 1 if _eager.plain(x) else x - 1

    compiled = torch.compile(branch, backend="eager", fullgraph=True)
    assert branch(t(3)).tolist() == [1, 1, 1] and compiled(t(3)).tolist() == [-1, -1, -1]


@pytest.mark.parametrize("transform", [
    lambda f: torch.vmap(f)(t(2, 8)),
    lambda f: torch.func.grad(lambda x: f(x).sum())(torch.ones(8)),
    lambda f: torch.func.functionalize(f)(t(8)),
], ids=["vmap", "grad", "functionalize"])
def test_functorch_transform_takes_the_op(transform):
    """Under a functorch transform the gate says no."""
    seen = []

    def record(x):
        seen.append(_eager.plain(x))
        return x * 2

    transform(record)
    assert seen == [False]


def test_export_traces_the_op():
    """torch.export records the op (it traces with fake tensors under its modes)."""

    class Norm(torch.nn.Module):
        def forward(self, x, weight):
            return sd.rms_norm(x, weight, 1e-6)

    program = torch.export.export(Norm(), (t(2, 64), t(64)))
    assert "torch.ops.specdsl.rms_norm.default" in program.graph_module.code


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning")
def test_jit_trace_takes_the_op():
    """While torch.jit.trace records, the gate says no."""
    seen = []

    def record(x):
        seen.append(_eager.plain(x))
        return x * 2

    torch.jit.trace(record, t(2, 8), check_trace=False)
    assert seen == [False]


# -- the per-call checks -----------------------------------------------------------------


@pytest.mark.parametrize("others,expected", [
    (lambda: (), 0),
    (lambda: (torch.empty(8, device="cuda"), torch.empty(1, device="cuda")), 0),
    (lambda: (torch.empty(8, device="cuda:1"),), -1),
    (lambda: (torch.empty(8),), -1),
    (lambda: (torch.empty(8, 2, device="cuda").t(),), -1),
], ids=["alone", "same device", "other device", "cpu", "strided"])
def test_placed(others, expected):
    """placed gives the CUDA ordinal where every tensor is contiguous on first's device."""
    with FakeTensorMode():
        assert _validate.placed(torch.empty(2, 8, device="cuda"), *others()) == expected


@pytest.mark.parametrize("first", [lambda: torch.empty(2, 8), lambda: torch.empty(
    8, 2, device="cuda").t()], ids=["cpu", "strided"])
def test_placed_refuses_first(first):
    """A first tensor off CUDA, or strided, is not placed."""
    with FakeTensorMode():
        assert _validate.placed(first()) == -1


@pytest.mark.parametrize("a,b,expected", [
    (slice(0, 8), slice(8, 16), False), (slice(0, 9), slice(8, 16), True),
    (slice(8, 16), slice(0, 9), True), (slice(0, 0), slice(0, 8), False),
], ids=["adjacent", "one shared", "one shared, other order", "empty"])
def test_overlap(a, b, expected):
    """overlap is true where two contiguous tensors share a byte."""
    flat = t(16)
    assert _validate.overlap(flat[a], flat[b]) is expected


# -- which path a public function takes ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(CALLS))
def test_plain_call_skips_the_dispatcher(name):
    """A call on plain tensors runs the implementation from the public function."""
    assert _path(_refusal(CALLS[name][0])) == "fast"


@pytest.mark.parametrize("name", sorted(CALLS))
def test_op_call_goes_through_the_dispatcher(name):
    """The op itself runs the implementation under torch's custom-op layers (this test's
    way of telling the paths apart)."""
    assert _path(_refusal(CALLS[name][1])) == "op"


@pytest.mark.parametrize("name", sorted(CALLS))
def test_same_refusal_on_both_paths(name):
    """A CPU tensor is refused with the same error on both paths."""
    fast, op = (_refusal(call) for call in CALLS[name])
    assert (type(fast), str(fast)) == (type(op), str(op))
    assert "expected a CUDA device" in str(fast)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_call_the_gate_refuses_takes_the_op(name, monkeypatch):
    """Where the gate says no, the public function calls the op."""
    monkeypatch.setattr(_eager, "plain", lambda *tensors: False)
    assert _path(_refusal(CALLS[name][0])) == "op"


@pytest.mark.parametrize("call", [
    lambda: sd.rms_norm(t(2, 64), t(64), 1),
    lambda: sd.softmax(t(2, 64), 1),
    lambda: sd.rotary_embedding(t(2, dtype=torch.int64), t(2, 128), t(2, 64), 64, 10000),
    lambda: sd.rotary_embedding(t(2, dtype=torch.int64), t(2, 128), t(2, 64), True),
], ids=["int eps", "int scale", "int theta", "bool head_dim"])
def test_scalars_the_schema_converts_take_the_op(call):
    """A scalar of another type than the schema's (which the op converts) takes the op."""
    assert _path(_refusal(call)) == "op"


BAD = {
    "x dtype": (lambda op: op(t(2, 64, dtype=torch.float64), t(64, dtype=torch.float64), 1e-6),
                r"x has dtype torch\.float64"),
    "weight dtype": (lambda op: op(t(2, 64), t(64, dtype=torch.float16), 1e-6),
                     r"weight has dtype torch\.float16"),
    "weight shape": (lambda op: op(t(2, 64), t(32), 1e-6), r"weight has shape \(32,\)"),
    "strided x": (lambda op: op(t(64, 2).t(), t(64), 1e-6), r"x is not contiguous"),
    "CPU": (lambda op: op(t(2, 64), t(64), 1e-6), r"x is on cpu; expected a CUDA device"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_refused_alike_on_both_paths(case):
    """A wrong dtype, a bad shape, a strided tensor, a CPU tensor: the same error type and
    message from the fast path and from the op."""
    call, message = BAD[case]
    fast, op = _refusal(lambda: call(sd.rms_norm)), _refusal(lambda: call(OPS.rms_norm.default))
    assert _path(fast) == "fast" and _path(op) == "op"
    assert (type(fast), str(fast)) == (type(op), str(op))
    assert re.search(message, str(fast))


# -- version counters ---------------------------------------------------------------------


def _versions(call, *tensors) -> list[int]:
    """How far ``call(*tensors)`` (refused: CPU tensors) moved each tensor's version."""
    before = [x._version for x in tensors]
    with pytest.raises(LaunchError):
        call(*tensors)
    return [x._version - b for x, b in zip(tensors, before, strict=True)]


@pytest.mark.parametrize("fast,op", [
    (lambda x, r: sd.fused_add_rms_norm(x, r, t(64), 1e-6),
     lambda x, r: OPS.fused_add_rms_norm.default(x, r, t(64), 1e-6)),
    (lambda x, r: sd.fused_add_rms_norm_quant(x, r, t(64), 1e-6),
     lambda x, r: OPS.fused_add_rms_norm_quant_dynamic.default(x, r, t(64), 1e-6)),
], ids=["fused_add_rms_norm", "fused_add_rms_norm_quant"])
def test_residual_version_advances_alike(fast, op):
    """The fast path bumps residual's version counter as the op does (before it refuses)."""
    assert _versions(fast, t(2, 64), t(2, 64)) == _versions(op, t(2, 64), t(2, 64)) == [0, 1]


def test_rotary_versions_advance_alike():
    """rotary_embedding bumps q's and k's version counters on both paths alike."""
    positions = t(2, dtype=torch.int64)

    def fast(q, k):
        sd.rotary_embedding(positions, q, k, 64)

    def op(q, k):
        OPS.rotary_embedding.default(positions, q, k, 64, 10000.0, "neox", None)

    assert _versions(fast, t(2, 128), t(2, 64)) == _versions(op, t(2, 128), t(2, 64)) == [1, 1]


def test_versions_in_inference_mode_advance_alike():
    """Under inference_mode a normal tensor's counter still advances, on both paths."""
    tensors = [t(2, 64) for _ in range(4)]
    with torch.inference_mode():
        fast = _versions(lambda x, r: sd.fused_add_rms_norm(x, r, t(64), 1e-6), *tensors[:2])
        op = _versions(lambda x, r: OPS.fused_add_rms_norm.default(x, r, t(64), 1e-6),
                       *tensors[2:])
    assert fast == op == [0, 1]


# -- with the GPU parts stood in for: plans, launches, autograd ----------------------------


_PLANS = [memo for module in (_norm, _softmax, _rope, _activation, _quant, _fused_quant)
          for memo in vars(module).values() if isinstance(memo, _validate.Plans)]


@pytest.fixture
def stand_in(monkeypatch):
    """The implementations take CPU tensors for CUDA ones (device ordinal 0) and record
    each launch as ``(plan, args, index)`` instead of making it."""

    def placed(first, *others):  # _validate.placed, with the CPU for a CUDA device
        tensors = (first, *others)
        return 0 if all(x.is_cpu and x.is_contiguous() for x in tensors) else -1

    launches = []
    monkeypatch.setattr(_validate, "on_cuda", lambda op, name, x: None)
    monkeypatch.setattr(_validate, "placed", placed)
    monkeypatch.setattr(_runtime, "launch", lambda *call, writes=(): launches.append(call))
    monkeypatch.setattr(_runtime, "cluster_sm_count", lambda index: 0)  # no clusters
    monkeypatch.setattr(_runtime, "sm_count", lambda index: 132)  # an H200's
    for memo in _PLANS:
        memo.clear()
    yield launches
    for memo in _PLANS:  # plans made for CPU tensors stay with this test
        memo.clear()


def test_a_plan_is_made_once(stand_in, monkeypatch):
    """A second call with the same dtypes, shapes and eps runs no full check."""
    made = []
    real = _norm._plan
    monkeypatch.setattr(_norm, "_plan", lambda *args: made.append(1) or real(*args))
    for _ in range(3):
        sd.rms_norm(t(3, 64), t(64), 1e-6)
    sd.rms_norm(t(4, 64), t(64), 1e-6)
    assert len(made) == 2 and len(stand_in) == 4


def test_launch_reads_the_plan(stand_in):
    """The launch gets the request, the arguments, the rows and their geometry."""
    x, w = t(3, 64), t(64)
    out = sd.rms_norm(x, w, 1e-6)
    plan, args, index = stand_in[0]
    assert plan.spec == sd.specs.rms_norm(64, 1e-6, BF16, False)
    assert args[:2] == (x, w) and args[2] is out and args[3] == plan.rows == 3
    assert (plan.dims, index) == (plan.spec.launch_dims(3), 0)


def test_strided_tensor_after_a_plan_refused_alike(stand_in):
    """A combination seen before, with a strided x, still gets the full check's error."""
    sd.rms_norm(t(2, 64), t(64), 1e-6)
    with pytest.raises(LaunchError, match=r"x is not contiguous \(shape \(2, 64\), strides "
                                          r"\(1, 2\)\)"):
        sd.rms_norm(t(64, 2).t(), t(64), 1e-6)


def test_overlap_after_a_plan_refused(stand_in):
    """A combination seen before, with residual overlapping x, is refused on each call."""
    x = t(2, 64)
    sd.fused_add_rms_norm(x, t(2, 64), t(64), 1e-6)
    with pytest.raises(LaunchError, match=r"x and residual overlap in memory"):
        sd.fused_add_rms_norm(x, x, t(64), 1e-6)
    assert len(stand_in) == 1


@pytest.mark.parametrize("case,message", [
    ("row too long", r"RMSNorm\.hidden = 1048584 is invalid"),
    ("bad eps", r"RMSNorm\.eps = -1\.0 is invalid"),
])
def test_spec_refusal_alike_on_both_paths(stand_in, case, message):
    """A row length or eps the kernel refuses: the same SpecError from both paths."""
    hidden, eps = (2**20 + 8, 1e-6) if case == "row too long" else (64, -1.0)
    fast, op = (_refusal(lambda f=f: f(t(1, hidden), t(hidden), eps))
                for f in (sd.rms_norm, OPS.rms_norm.default))
    assert (_path(fast), _path(op)) == ("fast", "op")
    assert (type(fast), str(fast)) == (type(op), str(op)) and re.search(message, str(fast))


def test_device_mismatch_after_a_plan_refused(stand_in):
    """A combination seen before, with weight on another device, gets the device error."""
    sd.rms_norm(t(2, 64), t(64), 1e-6)
    with pytest.raises(LaunchError, match=r"weight is on meta; expected cpu"):
        sd.rms_norm(t(2, 64), torch.empty(64, dtype=BF16, device="meta"), 1e-6)


@pytest.mark.parametrize("name", ["softmax", "silu_and_mul", "scaled_fp8_quant",
                                  "scaled_fp8_quant static", "per_token_group_quant_fp8",
                                  "rms_norm_quant", "fused_add_rms_norm_quant",
                                  "silu_and_mul_quant"])
def test_outputs_alike_on_both_paths(stand_in, name):
    """Both paths allocate outputs of the same shapes and dtypes, and launch alike."""
    fast, op = (call() for call in CALLS[name])
    fast, op = (r if isinstance(r, tuple) else (r,) for r in (fast, op))
    assert [(o.shape, o.dtype) for o in fast[:len(op)]] == [(o.shape, o.dtype) for o in op]
    (plan, args, _), (op_plan, op_args, _) = stand_in
    assert plan is op_plan and len(args) == len(op_args)


def test_completed_versions_advance_alike(stand_in):
    """A call that launches bumps residual once on either path."""
    x, fast_r, op_r = t(2, 64), t(2, 64), t(2, 64)
    sd.fused_add_rms_norm(x, fast_r, t(64), 1e-6)
    OPS.fused_add_rms_norm.default(x, op_r, t(64), 1e-6)
    assert fast_r._version == op_r._version == 1


def test_saved_tensor_sees_the_write(stand_in):
    """autograd refuses a backward through a tensor the fast path has since written."""
    weight = torch.ones(2, 64, dtype=BF16, requires_grad=True)
    residual = t(2, 64)
    y = (weight * residual).sum()  # saves residual for the backward
    sd.fused_add_rms_norm(t(2, 64), residual, t(64), 1e-6)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_requires_grad_gets_the_ops_autograd(stand_in):
    """An input needing autograd takes the op, whose result refuses a backward."""
    y = sd.rms_norm(t(2, 64).requires_grad_(), t(64), 1e-6)
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="autograd"):
        y.float().sum().backward()


def test_step_benchmark_runs_with_stand_ins(tmp_path):
    """benchmarks/torch_eager.py times every row on the CPU with its stand-ins."""
    import subprocess
    import sys

    script = PurePath(__file__).parent.parent / "benchmarks" / "torch_eager.py"
    done = subprocess.run([sys.executable, str(script), "--stand-in", "--calls", "2",
                           "--repeats", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "torch_eager.md").read_text()
    assert "| specdsl.torch.rms_norm (fast path) |" in table
    assert "| torch.ops.specdsl.rms_norm (op path) |" in table


def test_step_benchmark_without_out_writes_nothing(tmp_path):
    """Without --out (and no OUT variable) the benchmark prints its table and writes no
    file: a run from a checkout leaves the tree clean."""
    import os
    import subprocess
    import sys

    script = PurePath(__file__).parent.parent / "benchmarks" / "torch_eager.py"
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run([sys.executable, str(script), "--stand-in", "--calls", "2",
                           "--repeats", "2"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# specdsl.torch call, step by step (1 x 4096 bf16; torch ")
    assert "| specdsl.torch.rms_norm (fast path) |" in done.stdout
    assert list(tmp_path.iterdir()) == []
