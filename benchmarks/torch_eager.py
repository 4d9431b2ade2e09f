"""Host time of one specdsl.torch call, step by step: the eager fast path against the
registered op through torch's dispatcher, and against torch.nn.functional.rms_norm.

Run from the repository root, on the GPU machine (CUDA tensors, real launches)::

    python3 benchmarks/torch_eager.py [--calls 100] [--repeats 200] [--out DIR]

or anywhere with ``--stand-in``: CPU tensors stand in for CUDA ones in the
implementations (``_validate.placed`` and ``on_cuda`` take the CPU, ``_runtime``'s
launcher is a no-op), so the rows give the host cost of everything but the launch
itself and the CUDA allocation.

The table is printed; it is also written to ``DIR/torch_eager.md`` with ``--out DIR``
(default: the ``OUT`` environment variable, as the GPU machine sets it). Without either,
nothing is written: a run from a checkout leaves its tree clean.

Every row calls one thing on one row of 4096 bf16 (``rms_norm``; ``fused_add_rms_norm``
for the in-place path): ``--calls`` back-to-back calls timed with ``time.perf_counter``
after a device synchronize (a batch far shorter than the launch queue), ``--repeats``
times; the median is reported in ns per call. The rows: whole calls, then the fast
path's steps (the gate, the implementation and its parts), the gate's reads one by one,
and ways to allocate the output.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def stand_in(torch, modules) -> None:
    """Let CPU tensors pass for tensors on CUDA device 0; launches do nothing."""
    _runtime, _validate = modules

    def placed(first, *others):  # _validate.placed read for read, the CPU as CUDA device 0
        if not (first.is_cpu and first.is_contiguous()):
            return -1
        index = first.get_device() + 1
        for t in others:
            if not (t.is_cpu and t.get_device() + 1 == index and t.is_contiguous()):
                return -1
        return index

    def bind(plan, index):  # _runtime._bind, with a launcher that launches nothing
        return _runtime._bound.setdefault((plan, index), lambda *args: None)

    _validate.on_cuda = lambda op, name, t: None
    _validate.placed = placed
    _runtime._bind = bind
    torch._C._cuda_getDevice = lambda: 0  # CPU builds of torch have none


def rows(torch, device: str) -> dict[str, object]:
    """``{row name: a no-argument function making one call}``."""
    import specdsl.torch as sd
    from specdsl.torch import _eager, _norm, _runtime, _validate

    x = torch.randn(1, 4096, device=device, dtype=torch.bfloat16)
    weight, residual = torch.ones_like(x[0]), torch.randn_like(x)
    eps, shape = 1e-6, (1, 4096)
    op, fused_op = torch.ops.specdsl.rms_norm.default, torch.ops.specdsl.fused_add_rms_norm.default
    functional = torch.nn.functional.rms_norm
    key = (x.shape, x.dtype, weight.shape, weight.dtype, eps, False)  # no l2_evict_last
    sd.rms_norm(x, weight, eps)  # makes the plan and binds the launcher
    plan = _norm._RMS_NORM_PLANS[key]
    out = torch.empty_like(x)
    index = _validate.placed(x, weight)
    increment_version = torch.autograd.graph.increment_version
    grad, dispatch = torch.is_grad_enabled, torch._C._len_torch_dispatch_stack
    function_modes, transforms = (torch._C._is_torch_function_mode_enabled,
                                  torch._C._are_functorch_transforms_active)
    return {
        "specdsl.torch.rms_norm (fast path)": lambda: sd.rms_norm(x, weight, eps),
        "torch.ops.specdsl.rms_norm (op path)": lambda: op(x, weight, eps),
        "torch.nn.functional.rms_norm": lambda: functional(x, (4096,), weight, eps),
        "specdsl.torch.fused_add_rms_norm (fast path)":
            lambda: sd.fused_add_rms_norm(x, residual, weight, eps),
        "torch.ops.specdsl.fused_add_rms_norm (op path)":
            lambda: fused_op(x, residual, weight, eps),
        "step: argument check _validate.flag(l2_evict_last)": lambda: _validate.flag(
            "op", "l2_evict_last", False),
        "step: gate _eager.plain(x, weight)": lambda: _eager.plain(x, weight),
        "step: implementation _rms_norm(x, weight, eps)": lambda: _norm._rms_norm(x, weight, eps),
        "step:   plan key and lookup": lambda: _norm._RMS_NORM_PLANS.get(
            (x.shape, x.dtype, weight.shape, weight.dtype, eps, False)),
        "step:   _validate.placed(x, weight)": lambda: _validate.placed(x, weight),
        "step:   torch.empty_like(x)": lambda: torch.empty_like(x),
        "step:   _runtime.launch (lookup, launcher)": lambda: _runtime.launch(
            plan, (x, weight, out, 1), index),
        "step: version bump increment_version(residual)": lambda: increment_version(residual),
        "step: full checks (a combination's first call)": lambda: _norm._plan(
            _norm._RMS_NORM, x, weight, None, eps, False),
        "gate: torch.compiler.is_compiling()": torch.compiler.is_compiling,
        "gate: torch._C._len_torch_dispatch_stack()": dispatch,
        "gate: torch._C._is_torch_function_mode_enabled()": function_modes,
        "gate: torch._C._are_functorch_transforms_active()": transforms,
        "gate: torch._C._is_tracing()": torch._C._is_tracing,
        "gate: torch.is_grad_enabled()": grad,
        "gate: type(x) is torch.Tensor": lambda: type(x) is torch.Tensor,
        "gate: x.is_neg()": x.is_neg,
        "gate: x.requires_grad": lambda: x.requires_grad,
        "alloc: torch.empty(shape, dtype=, device=)":
            lambda: torch.empty(shape, dtype=x.dtype, device=x.device),
        "alloc: x.new_empty(shape)": lambda: x.new_empty(shape),
        "nothing: a Python no-op call": lambda: None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=200, help="timed batches per row")
    parser.add_argument("--stand-in", action="store_true",
                        help="CPU tensors stand in for CUDA ones; launches do nothing")
    parser.add_argument("--out", metavar="DIR", default=os.environ.get("OUT"),
                        help="also write torch_eager.md into DIR (default: $OUT; neither: "
                             "only print the table)")
    args = parser.parse_args()

    import torch

    from specdsl.torch import _runtime, _validate

    if args.stand_in:
        stand_in(torch, (_runtime, _validate))
    device = "cpu" if args.stand_in else "cuda"
    sync = (lambda: None) if args.stand_in else torch.cuda.synchronize
    found = rows(torch, device)

    def batch(call) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(args.calls):
            call()
        return (time.perf_counter() - start) / args.calls * 1e9

    for call in found.values():  # warm-up
        batch(call)
    times: dict[str, list[float]] = {name: [] for name in found}
    for _ in range(args.repeats):  # rows take turns, so drifts reach them all alike
        for name, call in found.items():
            times[name].append(batch(call))
    where = ("CPU tensors standing in for CUDA ones, launches a no-op" if args.stand_in
             else torch.cuda.get_device_name())
    lines = [f"# specdsl.torch call, step by step (1 x 4096 bf16; torch {torch.__version__})",
             "", f"{where}; ns per call: median of {args.repeats} batches of {args.calls}.",
             "", "| row | ns | min |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {statistics.median(ts):.0f} | {min(ts):.0f} |"
              for name, ts in times.items()]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "torch_eager.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
