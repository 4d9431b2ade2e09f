"""specdsl.torch on the CPU: registration, fake implementations, input checks and tracing.

Fake (meta) tensors stand in for CUDA tensors: ``FakeTensorMode`` makes "cuda" tensors
without a GPU, which is what ``torch.compile`` traces with. Real CPU tensors reach the
real implementations, which refuse them after the same checks.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import specdsl.torch as sd  # noqa: E402
from specdsl import LaunchError, SpecError  # noqa: E402

#: The fused FP8 epilogues: one op a scale mode.
QUANT_MODES = ("dynamic", "static", "group")
FUSED_QUANT_OPS = tuple(f"{base}_{mode}" for base in ("rms_norm_quant", "fused_add_rms_norm_quant",
                                                      "silu_and_mul_quant")
                        for mode in QUANT_MODES)
OPS = ("rms_norm", "fused_add_rms_norm", "softmax", "rotary_embedding", "silu_and_mul",
       "dynamic_per_token_scaled_fp8_quant", "static_scaled_fp8_quant",
       "per_token_group_quant_fp8") + FUSED_QUANT_OPS
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
LEADING = ((5,), (2, 3))  # 2-D and 3-D inputs


@pytest.fixture
def fake():
    """A FakeTensorMode in which tensors made with device="cuda" need no GPU."""
    with FakeTensorMode() as mode:
        yield mode


#: A row longer than the row kernels take (RMSNorm's and Fp8Quant's MAX_HIDDEN, 2**20).
TOO_LONG = 2**20 + 8


def cuda(*shape, dtype=torch.bfloat16):
    """An uninitialized "cuda" tensor (fake inside the ``fake`` fixture)."""
    return torch.empty(shape, dtype=dtype, device="cuda")


def _written(op: str) -> set[str]:
    schema = getattr(torch.ops.specdsl, op).default._schema
    return {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}


@pytest.mark.parametrize("op", OPS)
def test_op_registered(op):
    """Every op is registered under the specdsl:: namespace."""
    assert getattr(torch.ops.specdsl, op).default.name() == f"specdsl::{op}"


IN_PLACE = {"fused_add_rms_norm": {"residual"}, "rotary_embedding": {"q", "k"},
            **{f"fused_add_rms_norm_quant_{mode}": {"residual"} for mode in QUANT_MODES}}


@pytest.mark.parametrize("op,mutated", sorted(IN_PLACE.items()))
def test_in_place_ops_declare_what_they_mutate(op, mutated):
    """The schemas of the in-place ops mark exactly the tensors they update as written."""
    assert _written(op) == mutated


@pytest.mark.parametrize("op", sorted(set(OPS) - set(IN_PLACE)))
def test_functional_ops_mutate_nothing(op):
    """The functional ops' schemas mark no argument as written."""
    assert _written(op) == set()


# -- fake implementations: shapes, dtypes, strides ---------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADING)
def test_fake_rms_norm(fake, dtype, lead):
    """rms_norm's result is x's shape, dtype, device and (contiguous) strides."""
    x = cuda(*lead, 4096, dtype=dtype)
    y = sd.rms_norm(x, cuda(4096, dtype=dtype), 1e-6)
    assert (y.shape, y.dtype, y.device, y.stride()) == (x.shape, dtype, x.device, x.stride())


@pytest.mark.parametrize("lead", LEADING)
def test_fake_fused_add_rms_norm(fake, lead):
    """fused_add_rms_norm returns a new tensor shaped like x."""
    x = cuda(*lead, 2048)
    y = sd.fused_add_rms_norm(x, cuda(*lead, 2048), cuda(2048), 1e-5)
    assert (y.shape, y.dtype, y.stride()) == (x.shape, x.dtype, x.stride())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADING)
def test_fake_softmax(fake, dtype, lead):
    """softmax's result is x's shape, dtype and strides."""
    x = cuda(*lead, 32768, dtype=dtype)
    y = sd.softmax(x, 0.125)
    assert (y.shape, y.dtype, y.stride()) == (x.shape, dtype, x.stride())


@pytest.mark.parametrize("lead", LEADING)
def test_fake_silu_and_mul(fake, lead):
    """silu_and_mul halves the last dimension, contiguous."""
    y = sd.silu_and_mul(cuda(*lead, 2 * 8192, dtype=torch.float16))
    assert (y.shape, y.dtype, y.is_contiguous()) == ((*lead, 8192), torch.float16, True)


@pytest.mark.parametrize("lead", LEADING)
def test_fake_dynamic_fp8_quant(fake, lead):
    """Dynamic quantization gives float8_e4m3fn codes like x and float32 scales [..., 1]."""
    q, scale = sd.scaled_fp8_quant(cuda(*lead, 4096))
    assert (q.shape, q.dtype) == ((*lead, 4096), torch.float8_e4m3fn)
    assert (scale.shape, scale.dtype, scale.is_contiguous()) == ((*lead, 1), torch.float32, True)


def test_fake_static_fp8_quant_returns_the_scale_given(fake):
    """Static quantization returns codes like x and the very scale tensor it was given."""
    static = cuda(1, dtype=torch.float32)
    q, scale = sd.scaled_fp8_quant(cuda(3, 4096), static)
    assert (q.shape, q.dtype, scale is static) == ((3, 4096), torch.float8_e4m3fn, True)


@pytest.mark.parametrize("lead", LEADING)
def test_fake_per_token_group_quant_fp8(fake, lead):
    """Per-group quantization gives codes like x and float32 scales [..., hidden / 128]."""
    q, scale = sd.per_token_group_quant_fp8(cuda(*lead, 7168))
    assert (q.shape, q.dtype) == ((*lead, 7168), torch.float8_e4m3fn)
    assert (scale.shape, scale.dtype, scale.is_contiguous()) == ((*lead, 56), torch.float32, True)


def _mode_arguments(mode: str) -> dict:
    """The keyword arguments that choose a fused op's scale mode."""
    return {"dynamic": {}, "static": {"scale": cuda(1, dtype=torch.float32)},
            "group": {"group_size": 128}}[mode]


@pytest.mark.parametrize("mode,scales", [("dynamic", 1), ("group", 32), ("static", None)])
@pytest.mark.parametrize("lead", LEADING)
@pytest.mark.parametrize("fused", [False, True])
def test_fake_rms_norm_quant(fake, mode, scales, lead, fused):
    """rms_norm_quant (and fused_add_rms_norm_quant) give codes like x and the mode's float32
    scales: [..., 1] a token, [..., hidden / 128] a group, or the static scale given."""
    x, weight = cuda(*lead, 4096, dtype=torch.float16), cuda(4096, dtype=torch.float16)
    arguments = _mode_arguments(mode)
    if fused:
        q, scale = sd.fused_add_rms_norm_quant(x, cuda(*lead, 4096, dtype=torch.float16), weight,
                                               1e-6, **arguments)
    else:
        q, scale = sd.rms_norm_quant(x, weight, 1e-6, **arguments)
    assert (q.shape, q.dtype) == (x.shape, torch.float8_e4m3fn)
    if scales is None:
        assert scale is arguments["scale"]
    else:
        assert (scale.shape, scale.dtype) == ((*lead, scales), torch.float32)


@pytest.mark.parametrize("mode,scales", [("dynamic", 1), ("group", 112), ("static", None)])
@pytest.mark.parametrize("lead", LEADING)
def test_fake_silu_and_mul_quant(fake, mode, scales, lead):
    """silu_and_mul_quant gives codes [..., d] and the mode's scales (d = 14336: 112 groups)."""
    arguments = _mode_arguments(mode)
    q, scale = sd.silu_and_mul_quant(cuda(*lead, 2 * 14336), **arguments)
    assert (q.shape, q.dtype, q.is_contiguous()) == ((*lead, 14336), torch.float8_e4m3fn, True)
    if scales is None:
        assert scale is arguments["scale"]
    else:
        assert (scale.shape, scale.dtype) == ((*lead, scales), torch.float32)


@pytest.mark.parametrize("call,error,message", [
    (lambda: sd.rms_norm_quant(cuda(2, 256), cuda(256), 1e-6, cuda(1, dtype=torch.float32), 128),
     LaunchError, r"rms_norm_quant: scale and group_size are both given; expected one of them"),
    (lambda: sd.silu_and_mul_quant(cuda(2, 256), group_size=64),
     SpecError, r"silu_and_mul_quant: group_size = 64 is invalid: expected 128"),
    (lambda: sd.per_token_group_quant_fp8(cuda(2, 256), group_size=True),
     SpecError, r"group_size = True is invalid"),
    (lambda: sd.fused_add_rms_norm_quant(cuda(2, 256), cuda(2, 256), cuda(256), 1e-6,
                                         cuda(2, dtype=torch.float32)),
     LaunchError, r"fused_add_rms_norm_quant: scale is a torch\.float32 tensor of shape \(2,\)"),
    (lambda: sd.rms_norm_quant(cuda(2, 256), cuda(128), 1e-6),
     LaunchError, r"rms_norm_quant: weight has shape \(128,\); expected \(256,\)"),
    (lambda: sd.silu_and_mul_quant(cuda(2, 255)),
     LaunchError, r"silu_and_mul_quant: x has shape \(2, 255\); expected an even last"),
])
def test_fake_fused_quant_refuses_bad_arguments(fake, call, error, message):
    """The fused epilogues refuse conflicting modes, other group sizes, bad scales and shapes."""
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("q_shape,k_shape", [((7, 32, 128), (7, 8, 128)),
                                             ((7, 32 * 128), (7, 8 * 128))])
def test_fake_rotary_embedding_returns_none(fake, q_shape, k_shape):
    """rotary_embedding takes q/k as [tokens, heads, head_dim] or [tokens, heads*head_dim]."""
    assert sd.rotary_embedding(cuda(7, dtype=torch.int64), cuda(*q_shape), cuda(*k_shape),
                               128, 500000.0) is None


def test_fake_rotary_embedding_batched_positions(fake):
    """positions [batch, seq] with q [batch, seq, heads * head_dim] is accepted."""
    assert sd.rotary_embedding(cuda(2, 3, dtype=torch.int64), cuda(2, 3, 4 * 64),
                               cuda(2, 3, 64), 64, style="gptj", rotary_dim=32) is None


# -- input checks (fake: the trace-time path) -----------------------------------------------


BAD_CALLS = {
    "x f64": (lambda: sd.rms_norm(cuda(4, 4096, dtype=torch.float64),
                                  cuda(4096, dtype=torch.float64), 1e-6),
              LaunchError, r"rms_norm: x has dtype torch\.float64; expected torch\.float32"),
    "weight dtype": (lambda: sd.rms_norm(cuda(4, 4096), cuda(4096, dtype=torch.float16), 1e-6),
                     LaunchError, r"weight has dtype torch\.float16; expected torch\.bfloat16, "
                                  r"the dtype of x"),
    "weight shape": (lambda: sd.rms_norm(cuda(4, 4096), cuda(2048), 1e-6),
                     LaunchError, r"weight has shape \(2048,\); expected \(4096,\)"),
    "0-d x": (lambda: sd.softmax(cuda()), LaunchError, r"x is a 0-d tensor"),
    "residual shape": (lambda: sd.fused_add_rms_norm(cuda(4, 4096), cuda(2, 4096), cuda(4096),
                                                     1e-6),
                       LaunchError, r"residual has shape \(2, 4096\); expected \(4, 4096\)"),
    "strided x": (lambda: sd.softmax(cuda(4096, 8).t()),
                  LaunchError, r"softmax: x is not contiguous \(shape \(8, 4096\), strides "
                               r"\(1, 8\)\).*call \.contiguous\(\)"),
    "strided residual": (lambda: sd.fused_add_rms_norm(cuda(8, 4096), cuda(4096, 8).t(),
                                                       cuda(4096), 1e-6),
                         LaunchError, r"residual is not contiguous.*updated in place"),
    "odd silu": (lambda: sd.silu_and_mul(cuda(4, 4097)),
                 LaunchError, r"silu_and_mul: x has shape \(4, 4097\); expected an even last"),
    "int32 positions": (lambda: sd.rotary_embedding(cuda(7, dtype=torch.int32), cuda(7, 4, 64),
                                                    cuda(7, 64), 64),
                        LaunchError, r"positions has dtype torch\.int32; expected torch\.int64"),
    "q tokens": (lambda: sd.rotary_embedding(cuda(7, dtype=torch.int64), cuda(6, 4, 64),
                                             cuda(7, 64), 64),
                 LaunchError, r"q has shape \(6, 4, 64\); expected positions' shape \(7,\)"),
    "k heads": (lambda: sd.rotary_embedding(cuda(7, dtype=torch.int64), cuda(7, 256),
                                            cuda(7, 96), 64),
                LaunchError, r"k has shape \(7, 96\): 96 elements a token, not a whole number"),
    "k dtype": (lambda: sd.rotary_embedding(cuda(7, dtype=torch.int64), cuda(7, 256),
                                            cuda(7, 64, dtype=torch.float16), 64),
                LaunchError, r"k has dtype torch\.float16; expected torch\.bfloat16, the dtype "
                             r"of q"),
    "head_dim 0": (lambda: sd.rotary_embedding(cuda(7, dtype=torch.int64), cuda(7, 256),
                                               cuda(7, 64), 0),
                   SpecError, r"head_dim = 0 is invalid"),
    "scale shape": (lambda: sd.scaled_fp8_quant(cuda(4, 4096), cuda(4, dtype=torch.float32)),
                    LaunchError, r"scale is a torch\.float32 tensor of shape \(4,\); expected one"),
    "scale dtype": (lambda: sd.scaled_fp8_quant(cuda(4, 4096), cuda(1)),
                    LaunchError, r"scale is a torch\.bfloat16 tensor"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_fake_refuses_bad_input(fake, case):
    """Bad input is refused at trace time with the error naming the argument and expectation."""
    call, error, message = BAD_CALLS[case]
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("call,message", [
    (lambda: sd.rms_norm(cuda(4, TOO_LONG), cuda(TOO_LONG), 1e-6),
     rf"specdsl\.torch\.rms_norm: x of shape \(4, {TOO_LONG}\): RMSNorm\.hidden = {TOO_LONG} "
     r"is invalid"),
    (lambda: sd.rms_norm(cuda(4, 4096), cuda(4096), 0.0),
     r"rms_norm: x of shape \(4, 4096\): RMSNorm\.eps = 0\.0 is invalid"),
    (lambda: sd.softmax(cuda(2, 262145)), r"softmax: x of shape \(2, 262145\): Softmax\.cols"),
    (lambda: sd.rotary_embedding(cuda(3, dtype=torch.int64), cuda(3, 2, 64), cuda(3, 64), 64,
                                 style="llama"), r"rotary_embedding: q of shape .*RoPE\.style"),
    (lambda: sd.silu_and_mul(cuda(3, 2 * 4100)), r"silu_and_mul: x of shape .*SiluMul\.d"),
    (lambda: sd.scaled_fp8_quant(cuda(3, TOO_LONG)),
     r"scaled_fp8_quant: x of shape .*Fp8Quant\.hidden"),
    (lambda: sd.per_token_group_quant_fp8(cuda(3, 4100)),
     r"per_token_group_quant_fp8: x of shape \(3, 4100\): Fp8Quant\.scale_mode = 'group' is "
     r"invalid: expected hidden to be a multiple of 128"),
    (lambda: sd.rms_norm_quant(cuda(3, 65544), cuda(65544), 1e-6),
     r"rms_norm_quant: x of shape \(3, 65544\): RMSNormQuant\.hidden = 65544 is invalid: "
     r"expected at most 65536 elements of bf16"),
    (lambda: sd.fused_add_rms_norm_quant(cuda(3, 4097), cuda(3, 4097), cuda(4097), 1e-6,
                                         group_size=128),
     r"fused_add_rms_norm_quant: x of shape .*RMSNormQuant\.scale_mode = 'group' is invalid"),
    (lambda: sd.silu_and_mul_quant(cuda(3, 2 * 2880), group_size=128),
     r"silu_and_mul_quant: x of shape \(3, 5760\): SiluMulQuant\.scale_mode = 'group' is "
     r"invalid: expected d to be a multiple of 128"),
])
def test_fake_refuses_what_the_kernel_refuses(fake, call, message):
    """A row length or value the kernel does not take is a SpecError already at trace time."""
    with pytest.raises(SpecError, match=message):
        call()


def test_different_devices_refused(fake):
    """Tensors on two devices are refused, naming both."""
    with pytest.raises(LaunchError, match=r"weight is on cuda:1; expected cuda:0, the device of x"):
        sd.rms_norm(cuda(4, 4096), torch.empty(4096, dtype=torch.bfloat16, device="cuda:1"), 1e-6)


# -- the real implementations on CPU tensors --------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda: sd.rms_norm(torch.zeros(2, 4096), torch.ones(4096), 1e-6),
    lambda: sd.fused_add_rms_norm(torch.zeros(2, 64), torch.zeros(2, 64), torch.ones(64), 1e-6),
    lambda: sd.softmax(torch.zeros(2, 64)),
    lambda: sd.rotary_embedding(torch.zeros(2, dtype=torch.int64), torch.zeros(2, 64),
                                torch.zeros(2, 64), 64),
    lambda: sd.silu_and_mul(torch.zeros(2, 64)),
    lambda: sd.scaled_fp8_quant(torch.zeros(2, 64)),
    lambda: sd.scaled_fp8_quant(torch.zeros(2, 64), torch.ones(1)),
    lambda: sd.per_token_group_quant_fp8(torch.zeros(2, 128)),
    lambda: sd.rms_norm_quant(torch.zeros(2, 128), torch.ones(128), 1e-6, group_size=128),
    lambda: sd.fused_add_rms_norm_quant(torch.zeros(2, 64), torch.zeros(2, 64), torch.ones(64),
                                        1e-6, torch.ones(1)),
    lambda: sd.silu_and_mul_quant(torch.zeros(2, 64)),
], ids=["rms_norm", "fused_add_rms_norm", "softmax", "rotary_embedding", "silu_and_mul",
        "dynamic_fp8", "static_fp8", "group_fp8", "rms_norm_quant", "fused_add_rms_norm_quant",
        "silu_and_mul_quant"])
def test_cpu_tensors_refused(call):
    """Every op refuses CPU tensors with a LaunchError asking for a CUDA device."""
    with pytest.raises(LaunchError, match=r"is on cpu; expected a CUDA device"):
        call()


def test_real_checks_match_fake_checks():
    """A real call refuses a bad dtype with the same message as the trace."""
    with pytest.raises(LaunchError, match=r"rms_norm: x has dtype torch\.int32"):
        sd.rms_norm(torch.zeros(2, 8, dtype=torch.int32), torch.ones(8), 1e-6)


def test_non_tensor_refused():
    """A non-tensor where the op's schema takes one is refused by torch before specdsl."""
    with pytest.raises((TypeError, RuntimeError)):
        sd.softmax([1.0, 2.0])


@pytest.mark.parametrize("device,message", [
    ("cpu", r"device = cpu is invalid: expected a CUDA device"),
    (-1, r"device = -1 is invalid: expected a CUDA device"),
    (object(), r"is invalid: expected a torch\.device, a string such as 'cuda:0'"),
])
def test_executor_refuses_what_is_not_a_cuda_device(device, message):
    """specdsl.torch.executor names the device it was given and what it takes."""
    with pytest.raises(LaunchError, match=message):
        sd.executor(device)


@pytest.mark.parametrize("device, named", [
    (None, "None (torch's current device)"), ("cuda", "cuda (torch's current device)"),
    (torch.device("cuda"), "cuda (torch's current device)"), ("cuda:0", "0"), (0, "0")])
def test_executor_without_cuda_is_a_launch_error(monkeypatch, device, named):
    """On a torch without CUDA (or with no device visible), executor() for the current
    device, "cuda", torch.device("cuda") or "cuda:0" is the LaunchError its docstring
    promises, not torch's AssertionError."""
    def no_cuda() -> int:
        raise AssertionError("Torch not compiled with CUDA enabled")

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_device", no_cuda)
    with pytest.raises(LaunchError) as info:
        sd.executor(device)
    assert str(info.value) == (f"device = {named} is invalid: expected a CUDA device (no CUDA "
                               f"device is visible)")


def test_use_executor_refuses_a_compile_only_executor():
    """The ops need an executor with a device: a compile-only one is refused."""
    from specdsl import Executor

    with pytest.raises(LaunchError, match=r"expected an Executor with a device"):
        sd.use_executor(Executor(None, target="sm_90", cache_dir="off"))


# -- tracing -------------------------------------------------------------------------------


def _block(positions, x, w, wq, wk):
    """Every op once, the in-place ones on tensors the function made itself."""
    h = sd.rms_norm(x, w, 1e-5)
    q, k = h @ wq, h @ wk
    sd.rotary_embedding(positions, q, k, 64, 500000.0)
    residual = q.clone()
    y = sd.fused_add_rms_norm(k.repeat(1, 2), residual, w, 1e-5)
    codes, scale = sd.scaled_fp8_quant(sd.silu_and_mul(y))
    return sd.softmax(codes.float() * scale, 0.5), residual


def _inputs():
    return (torch.arange(4), torch.randn(4, 256, dtype=torch.bfloat16),
            torch.ones(256, dtype=torch.bfloat16), torch.randn(256, 256, dtype=torch.bfloat16),
            torch.randn(256, 128, dtype=torch.bfloat16))


def _targets(graph) -> list[str]:
    names = []
    for node in graph.nodes:
        if node.op == "call_function":
            target = node.args[0] if "auto_functionalized" in str(node.target) else node.target
            names.append(str(target))
    return names


def test_make_fx_traces_every_op():
    """make_fx (fake tracing) records every specdsl op as one node."""
    from torch.fx.experimental.proxy_tensor import make_fx

    graph = make_fx(_block, tracing_mode="fake")(*_inputs()).graph
    found = [t for t in _targets(graph) if t.startswith("specdsl.")]
    assert found == ["specdsl.rms_norm.default", "specdsl.rotary_embedding.default",
                     "specdsl.fused_add_rms_norm.default", "specdsl.silu_and_mul.default",
                     "specdsl.dynamic_per_token_scaled_fp8_quant.default",
                     "specdsl.softmax.default"]


def _compiled_graphs(function, inputs) -> list:
    """The graphs torch.compile(fullgraph=True) hands its backend for ``function``, run on
    CPU ``inputs`` (which reach the real implementation, which refuses CPU)."""
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm

    compiled = torch.compile(function, fullgraph=True, backend=aot_autograd(fw_compiler=record))
    with torch.no_grad(), pytest.raises(LaunchError, match="is on cpu"):
        compiled(*inputs)
    return graphs


def test_compile_fullgraph_traces_without_breaks():
    """torch.compile(fullgraph=True) captures one graph holding every op; the in-place ops
    are functionalized; running it reaches the real implementation (which refuses CPU)."""
    graphs = _compiled_graphs(_block, _inputs())
    assert len(graphs) == 1
    targets = _targets(graphs[0].graph)
    assert {"specdsl.rotary_embedding.default", "specdsl.fused_add_rms_norm.default"} <= set(
        targets)
    text = graphs[0].code
    assert text.count("auto_functionalized") >= 2 and "specdsl.softmax.default" in text


def test_compile_refuses_bad_shapes_at_trace_time():
    """A shape the kernel refuses fails torch.compile while tracing, with specdsl's message."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: sd.rms_norm(x, w, 1e-6), fullgraph=True,
                             backend="aot_eager")
    with pytest.raises(Exception, match=rf"RMSNorm\.hidden = {TOO_LONG} is invalid"):
        compiled(torch.randn(4, TOO_LONG, dtype=torch.bfloat16),
                 torch.ones(TOO_LONG, dtype=torch.bfloat16))


def _quant_block(x, w, residual, scale):
    """Every FP8 op once, the in-place one on a tensor the function made itself."""
    q1, s1 = sd.rms_norm_quant(x, w, 1e-5, group_size=128)
    residual = residual.clone()
    q2, _ = sd.fused_add_rms_norm_quant(x, residual, w, 1e-5, scale)
    q3, s3 = sd.silu_and_mul_quant(torch.cat((x, x), -1))
    q4, s4 = sd.per_token_group_quant_fp8(x)
    return q1, s1, q2, q3, s3, q4, s4, residual


def _quant_inputs():
    return (torch.randn(4, 256, dtype=torch.bfloat16), torch.ones(256, dtype=torch.bfloat16),
            torch.randn(4, 256, dtype=torch.bfloat16), torch.tensor([0.05]))


def test_make_fx_traces_the_fp8_ops():
    """make_fx records each FP8 op as one node, the mode's op chosen outside the graph."""
    from torch.fx.experimental.proxy_tensor import make_fx

    graph = make_fx(_quant_block, tracing_mode="fake")(*_quant_inputs()).graph
    assert [t for t in _targets(graph) if t.startswith("specdsl.")] == [
        "specdsl.rms_norm_quant_group.default", "specdsl.fused_add_rms_norm_quant_static.default",
        "specdsl.silu_and_mul_quant_dynamic.default", "specdsl.per_token_group_quant_fp8.default"]


def test_compile_fullgraph_traces_the_fp8_ops():
    """torch.compile(fullgraph=True) captures the FP8 ops in one graph, the in-place one
    functionalized; running it reaches the real implementation (which refuses CPU)."""
    graphs = _compiled_graphs(_quant_block, _quant_inputs())
    assert len(graphs) == 1 and "auto_functionalized" in graphs[0].code
    assert "specdsl.fused_add_rms_norm_quant_static.default" in set(_targets(graphs[0].graph))
