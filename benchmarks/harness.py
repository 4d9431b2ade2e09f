"""What the kernel benchmarks share: cases, implementations, the result check and the timing (GPU).

``benchmarks/kernels.py``, ``variants.py`` and ``ncu_targets.py`` build on it. Nothing here
imports torch at module level: the caller passes the module in, so the pure parts
(:func:`row_picks`, :class:`BenchCase` construction) run on a machine without a GPU.

A case (:class:`BenchCase`) is one kernel at one shape. Each way of computing it is an
:class:`Impl`: ``impl.run(*impl.prepare(inputs))`` returns the outputs, in the order of
``case.expected``. Before anything is timed, every implementation runs once on a copy of
one input set and its outputs are compared, on up to :data:`CHECK_ROWS` rows, with the
float64 reference of the kernel's module (``specdsl.kernels.<kernel>.reference``); a wrong
result or an exception is reported and that implementation is not timed.

Timing:

* **events**: after a warm-up, the GPU is kept busy with a sleep kernel while the host
  queues ``launches`` calls, each between two CUDA events, so the events measure device
  time only (no host gaps); the median is reported. It still includes each launch's fixed
  cost on the device (about 4 us for an empty kernel on an H200).
* **graph**: ``count`` calls captured in one CUDA graph, the graph replayed (queued behind
  a sleep kernel as above), the median replay divided by ``count``: the kernel-only time
  that small, launch-bound shapes need beside the event time.

Input sets rotate (:data:`ROTATE_BYTES` of them in all, more than the H200's 60 MB L2), so
no call finds its inputs in cache. Outputs are allocated at each call from torch's caching
allocator, by every implementation alike: the peers and torch allocate theirs, and specdsl's
(:attr:`BenchCase.outputs`, and the same-size copy's destination) are made the same way,
as ``specdsl.torch`` makes them. The allocator hands the same blocks back call after call,
so at small shapes an output stays in L2 between calls; outputs kept one per input set
instead cost specdsl 0.3 to 0.5 us a call at 256 tokens by graph replay (their dirty lines
written back during later calls; H200, 2026-12-02, ``output_allocation.py``) and put peers
under a same-size copy.
In-place outputs (the residual, RoPE's q and k) stay in their rotating input sets.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from specdsl.kernels.case import from_bits, relative_error, to_bits
from specdsl.review import format_request

__all__ = ["BenchCase", "Impl", "Launcher", "Unavailable", "IMPLS", "from_bits", "to_bits",
           "row_picks", "host", "clone_inputs", "describe_error", "implementations",
           "check_impl", "check_all", "measure_case", "device_times", "graph_seconds",
           "copy_bandwidth", "fields_label", "events_and_graph", "fresh_outputs",
           "torch_dtype"]

#: Inputs of all rotated sets together are at least this many bytes (H200 L2: 60 MB).
ROTATE_BYTES = 256 * 2**20
#: Rows of each output compared with the float64 reference (first, last, evenly spaced).
CHECK_ROWS = 16
#: A captured graph holds about this much device time (2 ms), within GRAPH_LAUNCHES.
GRAPH_SPAN_S = 2e-3
GRAPH_LAUNCHES = (8, 100)
#: Replays of a captured graph; the median is reported.
GRAPH_REPLAYS = 10
#: The implementations, in table order ("copy" is the same-size copy, timed beside them).
IMPLS = ("specdsl", "liger", "compile", "eager")


class Unavailable(Exception):
    """An implementation that cannot run a case (a missing package, an op the peer lacks)."""


@attrs.frozen
class Impl:
    """One way of computing a case: ``run(*prepare(inputs))`` returns its outputs.

    ``prepare`` runs outside the timed region (views, contiguous copies, cos/sin tables a
    peer's API takes as arguments); ``run`` is what is timed. ``run`` returns a tensor or
    a tuple of tensors in the order of :attr:`BenchCase.expected`.
    """

    prepare: Callable[[tuple], tuple]
    run: Callable[..., Any]


@attrs.frozen
class BenchCase:
    """One kernel at one shape, and everything needed to check and time it.

    Attributes:
        kernel: the kernel's name (``"RMSNorm"``, ``"RMSNorm+residual"``).
        tokens: rows (tokens) of the launch: the x axis of the plots.
        series: the rest of the shape (``"hidden=4096"``); one plot panel per series.
        bytes_moved: bytes one launch must move through device memory, from the spec's
            ``bytes_moved`` (each input read once, each output written once).
        make_inputs: builds one fresh set of device tensors (random, never zeros),
            specdsl's outputs included, as a tuple.
        run_specdsl: ``run_specdsl(launcher, inputs)`` launches the specdsl kernel and
            returns its outputs (views of tensors in ``inputs``).
        run_torch: the computation in torch, a pure function of ``torch_args(inputs)``;
            timed eagerly and under ``torch.compile(dynamic=False)``.
        torch_args: picks ``run_torch``'s arguments from an input set.
        expected: ``expected(inputs, rows)``: the float64 reference outputs (NumPy) of the
            rows ``rows`` (a device index tensor) of ``inputs``, before any call.
        tolerance: the largest allowed ``||out - ref|| / ||ref||`` per output (the kernel
            module's ``example(...).tolerance``).
        peers: ``{name: factory}``; ``factory()`` returns the peer's :class:`Impl` or raises
            (:class:`Unavailable` or the peer's own import error).
        detail: settings chosen per shape that the shape label shows but that do not
            start a new series (Softmax's ``" split=8"``).
        spec: the specdsl request timed, or None: recorded as its baked fields' text, so a
            row says what ran even where a label names only the fields the case gives (a
            default that changed since, such as a ``min_ctas_per_sm``, shows).
        outputs: positions in an input set of the tensors specdsl's kernel only writes;
            each timed call gets new ones (:func:`fresh_outputs`), as a peer allocates its
            outputs at each call. In-place outputs (read, then written) are not listed.
    """

    kernel: str
    tokens: int
    series: str
    bytes_moved: int
    make_inputs: Callable[[], tuple]
    run_specdsl: Callable[[Launcher, tuple], Any]
    run_torch: Callable[..., Any]
    torch_args: Callable[[tuple], tuple] = attrs.field(default=lambda inputs: inputs)
    expected: Callable[[tuple, Any], tuple] | None = None
    tolerance: float = 1e-2
    peers: Mapping[str, Callable[[], Impl]] = attrs.field(factory=dict)
    detail: str = ""
    spec: Any = None
    outputs: tuple[int, ...] = ()

    @property
    def shape(self) -> str:
        """The shape label of tables: ``"tokens=16 hidden=4096"`` (and the detail)."""
        return f"tokens={self.tokens} {self.series}{self.detail}"

    def renamed(self, kernel: str) -> BenchCase:
        """This case under an opt-in group's name (its own table and ``--kernels`` name)."""
        return attrs.evolve(self, kernel=kernel)


class Launcher:
    """Launches specdsl requests through the public :class:`specdsl.Executor` on torch's
    current stream (so a launch inside ``torch.cuda.graph`` is captured)."""

    def __init__(self, torch: Any) -> None:
        from specdsl import Executor

        self.torch = torch
        self.executor = Executor(torch.cuda.current_device(), cache_dir="off")

    def launch(self, spec: Any, *args: Any, grid: tuple, block: tuple) -> None:
        """Launch ``spec`` with ``args`` in ``.param`` order (torch tensors, NumPy scalars)."""
        self.executor.launch(spec, *args, grid=grid, block=block,
                             stream=self.torch.cuda.current_stream())


def write_report(folder: str | Path, name: str, text: str) -> Path:
    """Write a study's ``text`` to ``folder/name`` (the folder made if missing); the path."""
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def events_and_graph(timed: dict) -> str:
    """A timing record (``event_us``, and ``graph_us`` where the case took graph replay) as
    table text: ``"4.51 (1.61)"``, ``"132.02"``, or ``"-"`` without one."""
    if "event_us" not in timed:
        return "-"
    graph = timed.get("graph_us")
    return f"{timed['event_us']:.2f}" + (f" ({graph:.2f})" if graph is not None else "")


def fresh_outputs(torch: Any, inputs: tuple, positions: tuple[int, ...]) -> tuple:
    """``inputs`` with the tensors at ``positions`` replaced by new, uninitialized ones of
    the same shape and dtype (``torch.empty_like``: the caching allocator's blocks, as a
    peer's outputs at each call)."""
    if not positions:
        return inputs
    return tuple(torch.empty_like(value) if i in positions else value
                 for i, value in enumerate(inputs))


def fields_label(fields: dict, dtype: str = "bf16") -> str:
    """A case's non-default fields as the text after its shape: ``" block=128 unroll=1"``;
    a ``dtype`` other than the cases' bf16 first (``" dtype=f16 block=384"``)."""
    named = {"dtype": dtype, **fields} if dtype != "bf16" else fields
    return "".join(f" {k}={v}" for k, v in named.items())


def torch_dtype(torch: Any, name: str) -> Any:
    """The torch element type of a specdsl dtype name: ``"bf16"``, ``"f16"`` or ``"f32"``."""
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]


def describe_error(exc: BaseException) -> str:
    """``"TypeName: first line of the message"``, at most 160 characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 160 else text[:157] + "..."


def row_picks(tokens: int, count: int = CHECK_ROWS) -> list[int]:
    """Up to ``count`` row indices of ``tokens`` rows: the first, the last, evenly between."""
    if tokens < 1:
        raise ValueError(f"tokens = {tokens} is invalid: expected at least 1 row")
    if tokens <= count:
        return list(range(tokens))
    return sorted({i * (tokens - 1) // (count - 1) for i in range(count)})


def host(tensor: Any, rows: Any = None) -> Any:
    """float64 NumPy copy of ``tensor`` (of its ``rows``, an index tensor, if given)."""
    import numpy as np
    import torch  # only reached with a tensor in hand

    picked = tensor
    if rows is not None and tensor.element_size() == 1:  # fp8: not every op takes float8
        picked = tensor.view(torch.uint8).index_select(0, rows).view(tensor.dtype)
    elif rows is not None:
        picked = tensor.index_select(0, rows)
    return np.asarray(picked.float().cpu().numpy(), dtype=np.float64)


def as_outputs(result: Any) -> tuple:
    """A call's result as a tuple of tensors."""
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def clone_inputs(inputs: tuple) -> tuple:
    """A copy of an input set: tensors cloned, anything else shared."""
    return tuple(t.clone() if hasattr(t, "clone") else t for t in inputs)


def check_impl(torch: Any, case: BenchCase, impl: Impl, inputs: tuple, rows: Any,
               expected: tuple | None) -> float:
    """Run ``impl`` once on a copy of ``inputs``; the largest relative error of its outputs
    against ``expected`` on ``rows`` (0.0 where the case has no reference).

    Raises:
        ValueError: a wrong number of outputs or an output of the wrong size.
        Whatever the implementation raises.
    """
    outputs = as_outputs(impl.run(*impl.prepare(clone_inputs(inputs))))
    torch.cuda.synchronize()
    if expected is None:
        return 0.0
    if len(outputs) != len(expected):
        raise ValueError(f"{len(outputs)} outputs, the reference has {len(expected)}")
    errors = []
    for output, reference in zip(outputs, expected, strict=True):
        errors.append(relative_error(host(output, rows).reshape(reference.shape), reference))
    return max(errors)


def device_times(torch: Any, fn: Callable[[int], Any], sets: int, launches: int) -> list[float]:
    """Device seconds of ``launches`` calls ``fn(i)`` (input set ``i % sets``), host gaps hidden."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(launches)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(launches)]
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # ~25 ms of device work while the host queues the launches
    for i in range(launches):
        starts[i].record()
        fn(i % sets)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends, strict=True)]


def graph_seconds(torch: Any, fn: Callable[[int], Any], sets: int, count: int,
                  replays: int = GRAPH_REPLAYS) -> float:
    """Device seconds per call of ``count`` calls ``fn(i)`` captured in one CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch's docs ask
        for i in range(2):
            fn(i % sets)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(count):
            fn(i % sets)
    graph.replay()
    seconds = statistics.median(device_times(torch, lambda i: graph.replay(), 1, replays))  # noqa: F821
    del graph
    return seconds / count


def graph_count(event_seconds: float) -> int:
    """Calls to capture in one graph: about :data:`GRAPH_SPAN_S` of device time."""
    low, high = GRAPH_LAUNCHES
    return max(low, min(high, int(GRAPH_SPAN_S / max(event_seconds, 1e-9))))


def copy_bandwidth(torch: Any) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (bytes read plus bytes written)."""
    n = 2**30
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = device_times(torch, lambda i: dst.copy_(src), 1, 20)
    return 2 * n / statistics.median(times)


def implementations(torch: Any, case: BenchCase, launcher: Launcher,
                    compile_skip: str | None = None,
                    peers: bool = True) -> dict[str, Impl | str]:
    """``{name: Impl}`` for specdsl, each peer, torch.compile and torch eager; a name maps
    to ``"n/a (reason)"`` where that implementation cannot run the case.

    ``compile_skip``: the reason torch.compile is left out, or ``None`` to compile
    (``torch.compile(case.run_torch, dynamic=False)``: one compile per shape, at its first
    call, which is the check). ``peers=False`` leaves every peer out.
    """
    found: dict[str, Impl | str] = {
        "specdsl": Impl(prepare=lambda inputs: inputs,
                        run=lambda *inputs: case.run_specdsl(
                            launcher, fresh_outputs(torch, inputs, case.outputs))),
    }
    for name, factory in case.peers.items():
        if not peers:
            found[name] = "n/a (peers left out)"
            continue
        try:
            found[name] = factory()
        except Unavailable as exc:  # an op the peer does not have
            found[name] = f"n/a ({exc})"
        except Exception as exc:  # not installed, an incompatible torch or Triton
            found[name] = f"n/a ({describe_error(exc)})"
    if compile_skip is None:
        found["compile"] = Impl(prepare=case.torch_args,
                                run=torch.compile(case.run_torch, dynamic=False))
    else:
        found["compile"] = f"n/a ({compile_skip})"
    found["eager"] = Impl(prepare=case.torch_args, run=case.run_torch)
    return found


def _input_sets(case: BenchCase, first: tuple) -> list[tuple]:
    per_set = sum(t.numel() * t.element_size() for t in first if hasattr(t, "numel"))
    count = max(2, min(64, -(-ROTATE_BYTES // max(1, per_set))))
    return [first] + [case.make_inputs() for _ in range(count - 1)]


def _time(torch: Any, fn: Callable[[int], Any], sets: int, launches: int,
          graph: bool) -> dict[str, Any]:
    for i in range(3):  # warm-up: module load, autotuning, allocator
        fn(i % sets)
    torch.cuda.synchronize()
    seconds = statistics.median(device_times(torch, fn, sets, launches))
    timed: dict[str, Any] = {"event_us": seconds * 1e6}
    if graph:
        count = graph_count(seconds)
        try:
            timed["graph_us"] = graph_seconds(torch, fn, sets, count) * 1e6
            timed["graph_launches"] = count
        except Exception as exc:  # a call that cannot be captured: report, keep the events
            timed["graph_error"] = describe_error(exc)
            _settle(torch)
    return timed


def _settle(torch: Any) -> None:
    """Wait for the device after a failure, whose error may surface here again."""
    with contextlib.suppress(Exception):  # already reported by the caller
        torch.cuda.synchronize()


def check_all(torch: Any, case: BenchCase, impls: Mapping[str, Impl | str]
              ) -> tuple[dict[str, Impl], dict[str, dict]]:
    """Check every implementation of ``case`` on copies of one input set.

    Returns ``(passed, records)``: the implementations whose outputs match the reference,
    and per name ``{"rel_error", "first_call_s"}`` (the check's wall time, compilation
    included) or ``{"error": reason}``. Nothing raises: a failure is a record.
    """
    inputs = case.make_inputs()
    rows = torch.tensor(row_picks(case.tokens), device="cuda")
    expected = case.expected(inputs, rows) if case.expected is not None else None
    passed: dict[str, Impl] = {}
    records: dict[str, dict] = {}
    for name, impl in impls.items():
        if isinstance(impl, str):
            records[name] = {"error": impl}
            continue
        try:
            started = time.perf_counter()
            error = check_impl(torch, case, impl, inputs, rows, expected)
            records[name] = {"rel_error": error, "first_call_s": time.perf_counter() - started}
            if error <= case.tolerance:  # NaN fails too
                passed[name] = impl
            else:
                records[name] = {"error": f"wrong result: relative error {error:.2e} > "
                                          f"{case.tolerance:.0e}"}
        except Exception as exc:  # report this implementation, keep the others
            records[name] = {"error": describe_error(exc)}
            _settle(torch)
    return passed, records


def measure_case(torch: Any, case: BenchCase, impls: Mapping[str, Impl | str],
                 launches: int, graph: bool = True) -> dict[str, Any]:
    """Check every implementation of ``case`` (:func:`check_all`), then time those that
    passed, and a same-size copy, on fresh input sets.

    Returns a JSON-ready record: the case's ``kernel``, ``tokens``, ``series``, ``detail``,
    ``request`` (:func:`request_text`), ``bytes_moved``, ``tolerance``; ``copy`` (the same-size device-to-device copy's
    ``event_us`` and ``graph_us``); ``impls``: per name either ``{"error": reason}`` or
    ``event_us``, ``graph_us`` (with ``graph_launches``, or ``graph_error``),
    ``rel_error`` (against the reference) and ``first_call_s``. Failures are recorded,
    never raised, so one implementation cannot stop the run.
    """
    passed, records = check_all(torch, case, impls)
    sets = _input_sets(case, case.make_inputs())  # in-place kernels change their inputs
    for name, impl in passed.items():
        try:
            prepared = [impl.prepare(s) for s in sets]
            records[name].update(_time(torch, lambda i: impl.run(*prepared[i]), len(prepared),  # noqa: F821
                                       launches, graph))
            del prepared
        except Exception as exc:  # report this implementation, keep the others
            records[name] = {"error": describe_error(exc)}
            _settle(torch)
    half = max(1, case.bytes_moved // 2)
    sources = [torch.randint(0, 255, (half,), dtype=torch.uint8, device="cuda")
               for _ in range(max(2, min(64, -(-ROTATE_BYTES // half))))]
    copy = _time(torch, lambda i: torch.empty_like(sources[i]).copy_(sources[i]), len(sources),  # noqa: F821
                 launches, graph)
    del sets, sources
    torch.cuda.empty_cache()
    return {"kernel": case.kernel, "tokens": case.tokens, "series": case.series,
            "detail": case.detail, "request": request_text(case), "bytes_moved": case.bytes_moved,
            "tolerance": case.tolerance, "copy": copy, "impls": records}


def request_text(case: BenchCase) -> str:
    """The baked fields of the request ``case`` times, as command-line text
    (``"rmsnorm hidden=8192 eps=1e-06 ... min_ctas_per_sm=4"``), or ``""`` without one."""
    return "" if case.spec is None else format_request(case.spec, baked_only=True)
