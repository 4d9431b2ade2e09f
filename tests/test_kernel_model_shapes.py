"""Every built-in request the shapes of public LLM configs imply is accepted with the kernels'
defaults and assembles for sm_90 with nvJitLink, without spills.

The figures are the ``config.json`` fields of each model's Hugging Face repository (named in
the table): ``hidden_size``, ``intermediate_size`` (DeepSeek-V3 also ``moe_intermediate_size``),
``num_attention_heads``, ``num_key_value_heads``, ``head_dim`` (else hidden / heads; DeepSeek-V3:
``qk_rope_head_dim``, the rotated part of its MLA heads, with one shared rotated key head),
``vocab_size`` and ``rope_theta``.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import pytest

from ptxcheck import assert_no_spills, compile_each
from specdsl import CompileError, render
from specdsl.kernels import Fp8Quant, RMSNorm, RMSNormQuant, RoPE, SiluMul, SiluMulQuant, Softmax
from specdsl.kernels.softmax import suggested_split


class Shape(NamedTuple):
    """One model's kernel-relevant sizes (source: its Hugging Face ``config.json``)."""

    source: str
    hidden: int
    intermediate: tuple[int, ...]
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    theta: float


MODELS = [
    Shape("meta-llama/Meta-Llama-3-8B", 4096, (14336,), 32, 8, 128, 128256, 500000.0),
    Shape("meta-llama/Meta-Llama-3-70B", 8192, (28672,), 64, 8, 128, 128256, 500000.0),
    Shape("meta-llama/Llama-3.1-405B", 16384, (53248,), 128, 8, 128, 128256, 500000.0),
    Shape("Qwen/Qwen2.5-7B", 3584, (18944,), 28, 4, 128, 152064, 1000000.0),
    Shape("Qwen/Qwen2.5-72B", 8192, (29568,), 64, 8, 128, 152064, 1000000.0),
    Shape("mistralai/Mistral-7B-v0.3", 4096, (14336,), 32, 8, 128, 32768, 1000000.0),
    Shape("microsoft/Phi-3-mini-4k-instruct", 3072, (8192,), 32, 32, 96, 32064, 10000.0),
    Shape("microsoft/phi-4", 5120, (17920,), 40, 10, 128, 100352, 250000.0),
    Shape("google/gemma-2-9b", 3584, (14336,), 16, 8, 256, 256000, 10000.0),
    Shape("google/gemma-2-27b", 4608, (36864,), 32, 16, 128, 256000, 10000.0),
    Shape("deepseek-ai/DeepSeek-V3", 7168, (18432, 2048), 128, 1, 64, 129280, 10000.0),
    Shape("openai/gpt-oss-120b", 2880, (2880,), 64, 8, 64, 201088, 150000.0),
    Shape("openai/gpt-oss-20b", 2880, (2880,), 64, 8, 64, 201088, 150000.0),
]

DTYPES = ("bf16", "f16", "f32")


def implied_requests(shape: Shape, dtype: str) -> list:
    """The requests a decoder of ``shape`` makes, each naming only shapes, the dtype and
    the FP8 scale mode: RMSNorm (plain and with the residual), RoPE, SiluMul and FP8
    quantization of the MLP input and output widths (standalone, and fused after RMSNorm
    and SiluMul: dynamic per token, static, and per group of 128 where the width is whole
    groups), and the sampling softmax over the vocabulary (one CTA a row, and the cluster
    split suggested for one decode row)."""
    requests = [RMSNorm(hidden=shape.hidden, dtype=dtype),
                RMSNorm(hidden=shape.hidden, dtype=dtype, fused_residual=True),
                RoPE(dtype=dtype, q_heads=shape.heads, kv_heads=shape.kv_heads,
                     head_dim=shape.head_dim, theta=shape.theta),
                Fp8Quant(hidden=shape.hidden, dtype=dtype),
                Softmax(cols=shape.vocab, dtype=dtype),
                Softmax(cols=shape.vocab, dtype=dtype,
                        split=suggested_split(shape.vocab, dtype, rows=1))]
    for width in shape.intermediate:
        requests += [SiluMul(d=width, dtype=dtype), Fp8Quant(hidden=width, dtype=dtype)]
    for mode in ("dynamic", "static", "group"):
        if mode == "group" and shape.hidden % 128:
            continue
        for fused in (False, True):
            requests.append(RMSNormQuant(hidden=shape.hidden, dtype=dtype,
                                         fused_residual=fused, scale_mode=mode))
        if mode == "group":
            requests.append(Fp8Quant(hidden=shape.hidden, dtype=dtype, scale_mode="group"))
    for width in shape.intermediate:
        for mode in ("dynamic", "static", "group"):
            if mode == "group" and width % 128:
                continue
            if dtype == "f32" and width > 32768:
                continue  # 53248 f32 is longer than a CTA's registers hold: refused
            requests.append(SiluMulQuant(d=width, dtype=dtype, scale_mode=mode))
    return requests


def test_table_is_plausible():
    """Each row's head layout divides as the configs say: GQA groups, and hidden = heads x
    head_dim where the config sets no head_dim of its own (Gemma 2, DeepSeek-V3 and
    gpt-oss do)."""
    for shape in MODELS:
        assert shape.heads % shape.kv_heads == 0, shape.source
        if not any(name in shape.source for name in ("gemma", "DeepSeek", "gpt-oss")):
            assert shape.hidden == shape.heads * shape.head_dim, shape.source


@pytest.mark.parametrize("dtype", DTYPES)
def test_model_shapes_build_and_assemble(dtype):
    """Every request the table implies is built with defaults (none refused) and its PTX,
    deduplicated, assembles for sm_90 without spills."""
    unique: dict[str, object] = {}
    for shape in MODELS:
        for spec in implied_requests(shape, dtype):
            unique.setdefault(hashlib.sha256(render(spec).encode()).hexdigest(), spec)
    jobs = [(render(spec), spec) for spec in unique.values()]
    for (_, spec), compiled in zip(jobs, compile_each(jobs, "sm_90"), strict=True):
        assert not isinstance(compiled, CompileError), compiled
        assert compiled.cubin[:4] == b"\x7fELF", spec
        assert_no_spills(compiled)
