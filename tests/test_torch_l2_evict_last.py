"""specdsl.torch's ``l2_evict_last`` argument: the spec field of that name, opted into from a
PyTorch app (RMSNorm, its fused FP8 epilogues and Softmax).

On the CPU: every op's schema, the checks of the argument, trace-time refusals and what
tracing records. On a GPU (``gpu`` tests): the request each call launches differs from the
default one in the field alone, and its outputs are the default call's, bit for bit.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import specdsl.torch as sd  # noqa: E402
from specdsl import SpecError  # noqa: E402
from specdsl.kernels import softmax as softmax_kernel  # noqa: E402
from specdsl.kernels.case import relative_error  # noqa: E402
from specdsl.torch import specs  # noqa: E402
from torchlaunches import record_launches  # noqa: E402

MODES = ("dynamic", "static", "group")
#: The ops that take the argument: RMSNorm, Softmax and the RMSNorm FP8 epilogues.
OPS = ("rms_norm", "fused_add_rms_norm", "softmax") + tuple(
    f"{base}_{mode}" for base in ("rms_norm_quant", "fused_add_rms_norm_quant") for mode in MODES)


@pytest.fixture
def fake():
    """A FakeTensorMode in which tensors made with device="cuda" need no GPU."""
    with FakeTensorMode() as mode:
        yield mode


def cuda(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="cuda")


@pytest.mark.parametrize("op", OPS)
def test_every_op_takes_the_argument(op):
    """Each op's schema ends in a keyword-only ``bool l2_evict_last=False``."""
    argument = getattr(torch.ops.specdsl, op).default._schema.arguments[-1]
    assert (argument.name, str(argument.type), argument.kwarg_only, argument.default_value) == (
        "l2_evict_last", "bool", True, False)


def test_silu_and_mul_quant_does_not_take_it():
    """SiluMulQuant has no such field, so its ops have no such argument."""
    names = [a.name for a in torch.ops.specdsl.silu_and_mul_quant_dynamic.default._schema.arguments]
    assert "l2_evict_last" not in names


def test_specs_pass_the_field():
    """The request functions build the spec with the field and nothing else changed but
    what the field's default geometry changes."""
    bf16 = torch.bfloat16
    for kept, default in [
            (specs.rms_norm(4096, 1e-6, bf16, True, True), specs.rms_norm(4096, 1e-6, bf16, True)),
            (specs.softmax(8192, 0.5, bf16, 1, True), specs.softmax(8192, 0.5, bf16)),
            (specs.rms_norm_quant(4096, 1e-6, bf16, False, "group", True),
             specs.rms_norm_quant(4096, 1e-6, bf16, False, "group"))]:
        assert (kept.l2_evict_last, default.l2_evict_last) == (True, False)
        assert kept == attrs.evolve(default, l2_evict_last=True)
    # but for the CTAs an SM the field's own default takes (RMSNorm at hidden 8192: 4)
    kept, default = specs.rms_norm(8192, 1e-6, bf16, False, True), specs.rms_norm(8192, 1e-6, bf16)
    assert (kept.min_ctas_per_sm, default.min_ctas_per_sm) == (4, None)
    assert kept == attrs.evolve(default, l2_evict_last=True, min_ctas_per_sm=4)


_CALLS = {
    "rms_norm": lambda h, keep: sd.rms_norm(cuda(4, h), cuda(h), 1e-6, l2_evict_last=keep),
    "fused_add_rms_norm": lambda h, keep: sd.fused_add_rms_norm(
        cuda(4, h), cuda(4, h), cuda(h), 1e-6, l2_evict_last=keep),
    "softmax": lambda h, keep: sd.softmax(cuda(4, h), 0.5, l2_evict_last=keep),
    "rms_norm_quant": lambda h, keep: sd.rms_norm_quant(cuda(4, h), cuda(h), 1e-6,
                                                        l2_evict_last=keep),
    "fused_add_rms_norm_quant": lambda h, keep: sd.fused_add_rms_norm_quant(
        cuda(4, h), cuda(4, h), cuda(h), 1e-6, torch.ones(1, device="cuda"),
        l2_evict_last=keep),
}


@pytest.mark.parametrize("name", sorted(_CALLS))
@pytest.mark.parametrize("value", [1, 0, None, "yes", np.bool_(True)])
def test_anything_but_a_bool_refused(fake, name, value):
    """1, None or a NumPy bool is refused before the dispatcher (which would take 1 and
    None for a bool) and before the plans (whose keys cannot tell 1 from True)."""
    with pytest.raises(SpecError, match=rf"^specdsl\.torch\.{name}: l2_evict_last = "
                                        rf"{value!r} is invalid: expected True or False$"):
        _CALLS[name](4096, value)


@pytest.mark.parametrize("value,taken", [(1, True), (0.5, True), (np.bool_(True), True),
                                         (0, False), (None, False)])
def test_an_op_called_directly_takes_what_torch_makes_a_bool(fake, value, taken):
    """The op itself sees torch's bool: 1 asks for the policy (refused on a row of 4097),
    None for none (accepted), as docs/torch.md says."""
    def call():
        return torch.ops.specdsl.rms_norm.default(cuda(4, 4097), cuda(4097), 1e-6,
                                                  l2_evict_last=value)

    if taken:
        with pytest.raises(SpecError, match=r"RMSNorm\.l2_evict_last = True is invalid"):
            call()
    else:
        assert call().shape == (4, 4097)


def test_softmax_op_scale_defaults_to_one():
    """The op's schema gives scale the public function's default."""
    scale = torch.ops.specdsl.softmax.default._schema.arguments[1]
    assert (scale.name, scale.default_value) == ("scale", 1.0)


@pytest.mark.parametrize("fullgraph", [False, True])
def test_compile_refuses_a_non_bool(fullgraph):
    """Under torch.compile the Python function's check runs in Dynamo's trace: without
    fullgraph the SpecError reaches the caller; with it, Dynamo's Unsupported quotes it."""
    from torch._dynamo.exc import Unsupported

    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: sd.rms_norm(x, w, 1e-5, l2_evict_last=1),
                             fullgraph=fullgraph, backend="eager")
    with pytest.raises(Unsupported if fullgraph else SpecError) as caught:
        compiled(torch.randn(4, 256), torch.ones(256))
    assert "specdsl.torch.rms_norm: l2_evict_last = 1 is invalid: expected True or False" in str(
        caught.value)


@pytest.mark.parametrize("name", sorted(_CALLS))
def test_fake_takes_rows_of_whole_vectors(fake, name):
    """hidden 4096 bf16 traces with the policy: outputs shaped as without it."""
    outputs = _CALLS[name](4096, True)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    assert outputs[0].shape == (4, 4096)


@pytest.mark.parametrize("name,length,spec,why", [
    ("rms_norm", 4097, "RMSNorm", r"hidden=4097 bf16: the policy applies to rows of whole "
     r"16-byte vectors \(hidden a multiple of 8\), and this row is walked in a window"),
    ("fused_add_rms_norm", 131072, "RMSNorm", r"hidden=131072 bf16: the registers of 1024 "
     r"threads hold at most 65536 elements, and a longer row \(this one takes 4 chunks\)"),
    ("softmax", 131072, "Softmax", r"cols=131072 bf16: the registers of 1024 threads hold at "
     r"most 65536 elements, and a longer row \(this one takes 2 chunks\) takes two passes"),
    ("softmax", 4100, "Softmax", r"cols=4100 bf16: .* moves in 8-byte vectors"),
    ("rms_norm_quant", 4100, "RMSNormQuant", r"hidden=4100 bf16: .* moves in 8-byte vectors"),
    ("fused_add_rms_norm_quant", 4100, "RMSNormQuant", r"hidden=4100 bf16: .* 8-byte vectors"),
])
def test_fake_refuses_rows_the_policy_is_not_for(fake, name, length, spec, why):
    """A row the field refuses is refused at trace time, by the spec's message."""
    with pytest.raises(SpecError, match=rf"^specdsl\.torch\.{name}: x of shape \(4, {length}\): "
                                        rf"{spec}\.l2_evict_last = True is invalid: expected "
                                        rf"False for {why}"):
        _CALLS[name](length, True)


def test_make_fx_records_the_argument():
    """Tracing keeps the argument on the op's node, so the compiled graph launches the
    request with the policy."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def block(x, residual, weight):
        h = sd.fused_add_rms_norm(x, residual, weight, 1e-5, l2_evict_last=True)
        codes, _ = sd.rms_norm_quant(h, weight, 1e-5, group_size=128, l2_evict_last=True)
        return sd.softmax(h, 0.5, l2_evict_last=True), sd.rms_norm(h, weight, 1e-5), codes

    graph = make_fx(block, tracing_mode="fake")(
        torch.randn(4, 256), torch.randn(4, 256), torch.ones(256)).graph
    found = {str(n.target): n.kwargs.get("l2_evict_last") for n in graph.nodes
             if str(n.target).startswith("specdsl.")}
    assert found == {"specdsl.fused_add_rms_norm.default": True,
                     "specdsl.rms_norm_quant_group.default": True,
                     "specdsl.softmax.default": True, "specdsl.rms_norm.default": None}


# -- on a GPU ---------------------------------------------------------------------------------


def _randn(*shape, dtype, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=generator, device="cuda").to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


#: The names of :func:`_gpu_calls`: each public function, one op called directly.
GPU_CALLS = ("rms_norm", "fused_add_rms_norm", "softmax", "rms_norm op",
             *[f"{base} {mode}" for base in ("rms_norm_quant", "fused_add_rms_norm_quant")
               for mode in MODES])


def _gpu_calls(dtype):
    """``{name: (call(tensors, keep) -> outputs, inputs)}``; calls that write a tensor in
    place are given fresh copies of the inputs."""
    x, residual = _randn(37, 4096, dtype=dtype, seed=0), _randn(37, 4096, dtype=dtype, seed=1)
    weight = _randn(4096, dtype=dtype, seed=2) + 1
    static = torch.tensor([0.05], device="cuda")
    calls = {
        "rms_norm": (lambda t, k: (sd.rms_norm(*t, 1e-6, l2_evict_last=k),), (x, weight)),
        "fused_add_rms_norm": (lambda t, k: (sd.fused_add_rms_norm(*t, 1e-6, l2_evict_last=k),),
                               (x, residual, weight)),
        "softmax": (lambda t, k: (sd.softmax(*t, 0.5, l2_evict_last=k),), (x,)),
        "rms_norm op": (lambda t, k: (torch.ops.specdsl.rms_norm.default(
            *t, 1e-6, l2_evict_last=k),), (x, weight)),
    }
    for mode in MODES:
        scale = {"static": {"scale": static}, "group": {"group_size": 128}}.get(mode, {})
        calls[f"rms_norm_quant {mode}"] = (
            lambda t, k, s=scale: sd.rms_norm_quant(*t, 1e-6, l2_evict_last=k, **s), (x, weight))
        calls[f"fused_add_rms_norm_quant {mode}"] = (
            lambda t, k, s=scale: sd.fused_add_rms_norm_quant(*t, 1e-6, l2_evict_last=k, **s),
            (x, residual, weight))
    return calls


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", GPU_CALLS)
def test_the_policy_reaches_the_launch_and_changes_no_bit(monkeypatch, dtype, name):
    """With ``l2_evict_last=True`` the call launches the default call's request with the
    field set, and writes the same bits (outputs and in-place updates)."""
    call, inputs = _gpu_calls(dtype)[name]
    launched = record_launches(monkeypatch)
    plain_inputs, kept_inputs = [t.clone() for t in inputs], [t.clone() for t in inputs]
    plain, kept = call(plain_inputs, False), call(kept_inputs, True)
    default, policy = launched
    assert (default.l2_evict_last, policy) == (False, attrs.evolve(default, l2_evict_last=True))
    for a, b in zip((*plain, *plain_inputs), (*kept, *kept_inputs), strict=True):
        assert torch.equal(_bits(a), _bits(b))


@pytest.mark.gpu
def test_softmax_with_the_policy_never_splits_a_row(monkeypatch):
    """Two rows of 32768: the default call shares each row over a cluster; with the policy,
    one CTA a row, within the kernels' tolerance of float64."""
    x = _randn(2, 32768, dtype=torch.bfloat16, seed=3)
    launched = record_launches(monkeypatch)
    sd.softmax(x, 0.5)
    y = sd.softmax(x, 0.5, l2_evict_last=True)
    assert [(r.split, r.l2_evict_last) for r in launched] == [(launched[0].split, False),
                                                                 (1, True)]
    assert launched[0].split > 1
    reference = softmax_kernel.reference(x.double().cpu().numpy(), 0.5)
    assert relative_error(y.double().cpu().numpy(), reference) <= 1e-2


@pytest.mark.gpu
def test_compile_passes_the_policy(monkeypatch):
    """torch.compile(fullgraph=True) of a call with the policy launches it, with eager's bits."""
    x, weight = _randn(16, 2048, dtype=torch.bfloat16, seed=4), _randn(2048, dtype=torch.bfloat16,
                                                                       seed=5)
    expected = sd.rms_norm(x, weight, 1e-5, l2_evict_last=True)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, w: sd.rms_norm(a, w, 1e-5, l2_evict_last=True),
                             fullgraph=True)
    launched = record_launches(monkeypatch)
    got = compiled(x, weight)
    assert [r.l2_evict_last for r in launched] == [True]
    assert torch.equal(_bits(got), _bits(expected))


@pytest.mark.gpu
@pytest.mark.parametrize("op,args", [
    ("rms_norm", lambda x, w: (x, w, 1e-6)),
    ("softmax", lambda x, w: (x, 0.5)),
    ("fused_add_rms_norm_quant_group", lambda x, w: (x, x.clone(), w, 1e-6)),
])
def test_opcheck_with_the_policy(op, args):
    """torch.library.opcheck passes for calls that pass the argument."""
    x, weight = _randn(5, 1024, dtype=torch.bfloat16, seed=6), _randn(1024, dtype=torch.bfloat16,
                                                                      seed=7)
    torch.library.opcheck(getattr(torch.ops.specdsl, op).default, args(x, weight),
                          {"l2_evict_last": True})
