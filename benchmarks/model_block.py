"""The decoder block of docs/torch.md at 1 and 64 tokens, in ms per step (GPU).

Run on the GPU machine from the repository root::

    python3 benchmarks/model_block.py [--quick] [--out DIR]

The block is the one ``docs/torch.md`` shows, run from the page itself (its ``class
DecoderBlock`` code block), so the figures are for the code the docs show: a Llama-style
layer with the sizes of Llama 3.2 1B in bf16 (hidden 2048, 32 heads of 64, 8 KV heads,
intermediate 8192). Four columns:

* **eager torch**: ``DecoderBlock(TorchOps)``, not compiled;
* **torch.compile**: the same under ``torch.compile(fullgraph=True, dynamic=False)``
  (Inductor, mode ``default``);
* **+ specdsl**: ``DecoderBlock(SpecdslOps)`` compiled the same way;
* **+ Liger**: Liger-Kernel's RMSNorm, RoPE and SwiGLU (FP8 quantization stays torch's; Liger
  has none) compiled with ``fullgraph=False``, as Liger's autograd Functions may break the
  graph; ``n/a`` where ``liger-kernel`` is not installed or fails (the reason is printed).

Two rows a token count: **launched**, each step called from Python (host launch costs
included), and **CUDA graph**, the step captured once in a ``torch.cuda.CUDAGraph`` after a
warm-up on a side stream and replayed. Timing: after a warm-up, CUDA events around a batch of
steps; the median over the batches, divided by the batch. Each column's output at every
token count is compared with eager torch's (largest relative L2 error), and the first call of
each column (its compile) is timed. The table is printed and written to ``$OUT/model_block.md``
(or ``--out``). ``--quick`` times 1 token only, with fewer batches.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PAGE = ROOT / "docs" / "torch.md"
COLUMNS = ("eager torch", "torch.compile", "+ specdsl", "+ Liger")


def doc_namespace() -> dict:
    """The names docs/torch.md's block example defines (DecoderBlock, TorchOps, SpecdslOps)."""
    blocks = re.findall(r"```python\n(.+?)```", PAGE.read_text(), re.S)
    namespace: dict = {"__name__": "docs_torch_block"}
    exec(compile(next(b for b in blocks if "class DecoderBlock" in b), str(PAGE), "exec"),
         namespace)
    return namespace


def liger_ops(torch: Any, base: type) -> tuple[type | None, str]:
    """``(LigerOps, "")``: ``base`` with Liger-Kernel's RMSNorm, RoPE and SwiGLU, or
    ``(None, reason)`` where liger-kernel cannot be imported."""
    try:
        from liger_kernel.transformers.functional import liger_rms_norm, liger_rope, liger_swiglu
    except Exception as exc:  # not installed, or an incompatible torch/triton
        return None, f"liger-kernel unavailable: {exc}"
    import liger_peers  # benchmarks/ is on sys.path: the script's own folder

    class LigerOps(base):
        """Liger-Kernel's kernels; FP8 quantization is torch's (inherited)."""

        @staticmethod
        def rms_norm(x, weight, eps):
            return liger_rms_norm(x, weight, eps)

        @staticmethod
        def add_rms_norm(x, residual, weight, eps):
            summed = x + residual
            return liger_rms_norm(summed, weight, eps), summed

        @staticmethod
        def rope(positions, q, k, head_dim, theta):
            """Hugging Face's layout: q (1, heads, tokens, head_dim), cos and sin
            (1, tokens, head_dim)."""
            tokens = q.shape[0]
            inv_freq = theta ** (-2.0 * torch.arange(head_dim // 2, device=q.device) / head_dim)
            angle = positions[:, None].float() * inv_freq
            angle = torch.cat((angle, angle), -1)[None]
            cos, sin = angle.cos().to(q.dtype), angle.sin().to(q.dtype)

            def heads(t):
                return t.view(1, tokens, -1, head_dim).transpose(1, 2)

            rotated = liger_rope(heads(q), heads(k), cos, sin)
            return tuple(t.transpose(1, 2).reshape(tokens, -1) for t in rotated[:2])

        @staticmethod
        def silu_and_mul(x):
            # Liger's kernel takes one row stride for gate, up and out: contiguous halves
            gate, up = (t.contiguous() for t in x.chunk(2, dim=-1))
            return liger_swiglu(gate, up)

    return LigerOps, f"liger-kernel {liger_peers.version()}"


def per_step_ms(torch: Any, step: Callable[[], Any], batches: int, per_batch: int) -> float:
    """Median over ``batches`` of the CUDA-event time of ``per_batch`` steps, per step, in ms."""
    for _ in range(per_batch):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(batches):
        start.record()
        for _ in range(per_batch):
            step()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / per_batch)
    return statistics.median(samples)


def graphed(torch: Any, fn: Callable, *args: Any) -> Callable[[], None]:
    """``fn(*args)`` captured in a CUDA graph (warmed up on a side stream first): its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*args)
    return graph.replay


def relative_error(y: Any, reference: Any) -> float:
    """``||y - reference|| / ||reference||`` in f32."""
    return ((y.float() - reference.float()).norm() / reference.float().norm()).item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 token only, fewer batches")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)
    import torch

    started = time.perf_counter()
    tokens_list = (1,) if args.quick else (1, 64)
    batches, per_batch = (5, 10) if args.quick else (30, 20)
    names = doc_namespace()
    block_class, torch_ops = names["DecoderBlock"], names["TorchOps"]
    liger, liger_note = liger_ops(torch, torch_ops)
    variants = {"eager torch": (torch_ops, None), "torch.compile": (torch_ops, True),
                "+ specdsl": (names["SpecdslOps"], True), "+ Liger": (liger, False)}
    cells: dict[tuple[int, str], dict[str, str]] = {}
    notes = [f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {liger_note}"]
    inputs = {}
    for tokens in tokens_list:
        generator = torch.Generator(device="cuda").manual_seed(tokens)
        inputs[tokens] = (torch.arange(1000, 1000 + tokens, device="cuda"),
                          torch.randn(tokens, 2048, generator=generator, device="cuda"
                                      ).to(torch.bfloat16))
    references: dict[int, Any] = {}
    with torch.no_grad():
        for column, (ops, fullgraph) in variants.items():
            if ops is None:
                continue
            block = block_class(ops)
            fn = block if fullgraph is None else torch.compile(block, fullgraph=fullgraph,
                                                                 dynamic=False)
            for tokens in tokens_list:
                positions, x = inputs[tokens]
                try:
                    first = time.perf_counter()
                    y = fn(positions, x)
                    torch.cuda.synchronize()
                    cells.setdefault((tokens, "first call, s"), {})[column] = \
                        f"{time.perf_counter() - first:.2f}"
                    references.setdefault(tokens, y.clone())
                    cells.setdefault((tokens, "rel. error vs eager"), {})[column] = \
                        f"{relative_error(y, references[tokens]):.1e}"
                    cells.setdefault((tokens, "launched, ms"), {})[column] = \
                        f"{per_step_ms(torch, lambda: fn(positions, x), batches, per_batch):.3f}"
                    replay = graphed(torch, fn, positions, x)
                    cells.setdefault((tokens, "CUDA graph, ms"), {})[column] = \
                        f"{per_step_ms(torch, replay, batches, per_batch):.3f}"
                except Exception as exc:  # report the column, keep the others
                    notes.append(f"{column} at {tokens} tokens failed: "
                                 f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    order = ("launched, ms", "CUDA graph, ms", "rel. error vs eager", "first call, s")
    lines = ["| tokens | measure | " + " | ".join(COLUMNS) + " |",
             "| ---: | --- | " + " | ".join("---:" for _ in COLUMNS) + " |"]
    for tokens in tokens_list:
        for measure in order:
            row = cells.get((tokens, measure), {})
            lines.append(f"| {tokens} | {measure} | "
                         + " | ".join(row.get(c, "n/a") for c in COLUMNS) + " |")
    notes.append(f"total {time.perf_counter() - started:.0f} s; median of {batches} batches "
                 f"of {per_batch} steps")
    text = "\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n"
    print(text)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "model_block.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
