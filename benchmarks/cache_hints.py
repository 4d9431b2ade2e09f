"""The cache hints of RMSNorm, RMSNormQuant and Softmax (the "Cache hints" sections of
docs/kernels/rmsnorm.md and softmax.md).

Run on the GPU machine from the repository root::

    python3 benchmarks/cache_hints.py [--out DIR] [--match Softmax] [--no-peers]   # about a minute

Each case renders a built-in request and times its PTX against edits of the same text, in
one process and in alternating rounds (device events, median, input sets larger than L2):

- ``round 2``: the hints of before: ``.L1::no_allocate`` on the stores and on the residual's
  load, no L2 policy;
- ``plain``: no hint at all (rows with the residual: no evict_last policy, no demotion);
- ``evict_last, kept``: x (and residual) under an L2 evict_last policy, never demoted (for
  RMSNorm, RMSNormQuant and Softmax, the request with ``l2_evict_last=True``); ``evict_last, kept, N CTAs``: the same
  with ``min_ctas_per_sm=N`` (:data:`KEPT_CTAS`, the most CTAs an SM that ptxas fits
  without spills);
- ``evict_first``: the same under an evict_first policy;
- ``evict_last, demoted``: rows without the residual, x kept and demoted as the built-in
  does with the residual;
- ``stores plain``: chunked rows without the residual, y stored without ``.L1::no_allocate``;
- Softmax's rows in registers: ``round 2`` (x under an evict_first policy and
  ``.L1::no_allocate``, y stored with ``.L1::no_allocate``; rows of up to 5 vectors a thread,
  plain in the built-in) and ``evict_last, kept`` (rows of 6 to 8, which the built-in
  demotes, included).

Beside each time, the **next kernel's L2 reuse**: after the kernel, a 24 MB tensor is summed
twice and the second sum is timed; lines a kernel leaves at evict_last crowd that tensor out
of the 60 MB L2, and the second sum takes longer (about 12 us when it stays, 17 when it has
to come from DRAM). Every edit is checked to write the built-in's outputs bit for bit. Last,
the same two readings for Liger's and torch.compile's RMSNorm and fused add RMSNorm at 16384
tokens (``--no-peers`` leaves them out).

The edited modules launch through specdsl itself (:class:`Variants`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _path in (str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import attrs  # noqa: E402
import numpy as np  # noqa: E402
from harness import Launcher, device_times, torch_dtype  # noqa: E402

from specdsl import SpecError, baked, kernel_spec, render  # noqa: E402
from specdsl.kernels import Fp8Quant, RMSNorm, RMSNormQuant, SiluMulQuant, Softmax  # noqa: E402


class Variants:
    """PTX texts as specdsl requests: each text is written (entry renamed ``variant``) to a
    template file named by its SHA-256 in a folder of its own, and a spec class whose one
    baked field names that file includes it; so each edit is its own request, with its own
    derived key, compiled and launched by the :class:`specdsl.Executor`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "ptx_variant.ptx.j2").write_text("{% include variant %}\n")

        @kernel_spec(template="ptx_variant.ptx.j2", entry="variant", template_dir=str(folder))
        class PtxVariant:
            """A whole PTX module, entry ``variant``, in the template file ``variant``."""

            variant: str = baked(doc="the file name of the PTX text")

        self.spec_class = PtxVariant

    def __call__(self, ptx: str) -> Any:
        text = re.sub(r"\.entry \w+\(", ".entry variant(", ptx, count=1)
        name = f"v_{hashlib.sha256(text.encode()).hexdigest()[:24]}.ptx"
        path = self.folder / name
        if not path.exists():   # raw: PTX is not Jinja, whatever braces it holds
            path.write_text("{% raw %}" + text + "{% endraw %}")
        return self.spec_class(variant=name)


#: (label, request, tokens): RMSNorm's aligned rows in registers, with and without the
#: residual, a chunked row without it (the one kind that keeps .L1::no_allocate on its
#: stores), and Softmax's rows in registers.
CASES = [
    ("RMSNorm 16384 x 4096", RMSNorm(hidden=4096), 16384),
    ("RMSNorm 16384 x 8192", RMSNorm(hidden=8192), 16384),
    ("RMSNorm 16384 x 10240", RMSNorm(hidden=10240), 16384),
    ("RMSNorm 16384 x 12288", RMSNorm(hidden=12288), 16384),
    ("RMSNorm + residual 16384 x 4096", RMSNorm(hidden=4096, fused_residual=True), 16384),
    ("RMSNorm + residual 16384 x 8192", RMSNorm(hidden=8192, fused_residual=True), 16384),
    ("RMSNorm + residual 4096 x 16384", RMSNorm(hidden=16384, fused_residual=True), 4096),
    ("RMSNormQuant + residual 16384 x 4096, dynamic",
     RMSNormQuant(hidden=4096, fused_residual=True, scale_mode="dynamic"), 16384),
    ("RMSNormQuant 16384 x 6144, group", RMSNormQuant(hidden=6144, scale_mode="group"), 16384),
    ("RMSNormQuant 16384 x 8192, group", RMSNormQuant(hidden=8192, scale_mode="group"), 16384),
    ("RMSNormQuant 16384 x 8192, dynamic", RMSNormQuant(hidden=8192), 16384),
    ("RMSNorm 1024 x 131072 (chunks)", RMSNorm(hidden=131072), 1024),
    ("Softmax 16384 x 4096", Softmax(cols=4096), 16384),
    ("Softmax 16384 x 8192", Softmax(cols=8192), 16384),
    ("Softmax 16384 x 12288", Softmax(cols=12288), 16384),
    ("Softmax 16384 x 16384", Softmax(cols=16384), 16384),
    ("Softmax 4096 x 32768", Softmax(cols=32768), 4096),
]

#: ``min_ctas_per_sm`` of the ``evict_last, kept, N CTAs`` edit, by (hidden, fused_residual):
#: the most CTAs an SM at which ptxas fits the l2_evict_last request without spills (bf16;
#: 32 registers a thread, but 48 at 10240; 12288 spills at 4).
KEPT_CTAS = {(4096, False): 8, (8192, False): 4, (10240, False): 4, (4096, True): 8, (8192, True): 4}

_DEMOTION = re.compile(r"^.*(applypriority|%pline|%rd1[23], %rd[47], -128|%r10, %r4, 7|"
                       r"evict_last\.b64 %keep|\.reg \.b64   %keep;|the row is read: its lines|"
                       r"only vector-aligned).*\n", re.M)


def plain(ptx: str) -> str:
    """``ptx`` without the evict_last policy and the demotion of register-resident rows."""
    if "applypriority" not in ptx:
        return ptx
    return _DEMOTION.sub("", ptx).replace(".L2::cache_hint", "").replace("], %keep;", "];")


def round_2(ptx: str) -> str:
    """``ptx`` with the hints of round 2: .L1::no_allocate on stores and the residual's load."""
    ptx = plain(ptx)
    ptx = re.sub(r"ld\.global\.v4\.b32(\s+\{ %q)", r"ld.global.L1::no_allocate.v4.b32\1", ptx)
    return re.sub(r"st\.global\.v4\.b32", "st.global.L1::no_allocate.v4.b32", ptx)


def stores_plain(ptx: str) -> str:
    """``ptx`` with every store plain (chunked rows without the residual keep the hint on y)."""
    return ptx.replace("st.global.L1::no_allocate.", "st.global.")


def kept(ptx: str) -> str:
    """``ptx`` with x (and residual) loaded evict_last and never demoted."""
    if "applypriority" in ptx:
        return re.sub(r"^.*applypriority.*\n", "", ptx, flags=re.M)
    if "createpolicy" in ptx:
        return ptx   # chunked rows: pass 1 loads x evict_last already, for pass 2
    ptx = ptx.replace(".reg .b64   %rd<16>;", ".reg .b64   %rd<16>;\n    .reg .b64   %keep;", 1)
    ptx = ptx.replace("    // load the row", "    createpolicy.fractional.L2::evict_last.b64 %keep, 1.0;\n"
                      "    // load the row", 1)
    return re.sub(r"ld\.global\.nc\.v4\.b32(\s+\{ %w[^}]*\}, \[%rd4\+\d+\]);",
                  r"ld.global.nc.L2::cache_hint.v4.b32\1, %keep;", ptx)


def evict_first(ptx: str) -> str:
    """``kept(ptx)`` under an evict_first policy instead (not for chunked rows)."""
    if "createpolicy" in ptx and "applypriority" not in ptx:
        return ptx
    return kept(ptx).replace("L2::evict_last.b64 %keep", "L2::evict_first.b64 %keep")


def demoted(ptx: str) -> str:
    """Rows without the residual: ``kept(ptx)``, then x's lines demoted after the sum of
    squares as the built-in does with the residual (lanes 0, 8, 16, 24, one line each)."""
    if "applypriority" in ptx or "createpolicy" in ptx:
        return ptx
    text = kept(ptx)
    offsets = re.findall(r"ld\.global\.nc\.L2::cache_hint\.v4\.b32\s+\{[^}]*\}, \[%rd4\+(\d+)\]", text)
    lines = ["    and.b32             %r10, %r4, 7;", "    setp.eq.u32         %pline, %r10, 0;",
             "    and.b64             %rd12, %rd4, -128;"]
    lines += [f"    @%pline applypriority.global.L2::evict_normal [%rd12+{o}], 128;" for o in offsets]
    text = text.replace(".reg .b64   %keep;", ".reg .b64   %keep;\n    .reg .pred  %pline;", 1)
    return text.replace("    // CTA add-reduce", "\n".join(lines) + "\n    // CTA add-reduce", 1)


def softmax_variants(ptx: str) -> dict[str, str]:
    """Softmax rows in registers on one CTA, plain in the built-in: ``round 2``'s hints (x
    under an evict_first policy with ``.L1::no_allocate``, y stored with ``.L1::no_allocate``)
    and x under evict_last, kept. Rows of 16-byte vectors only (none for chunked rows)."""
    if "createpolicy" in ptx or "st.global.v4.b32" not in ptx:
        return {}

    def hinted(kind: str) -> str:
        text = ptx.replace(".reg .b64   %rd<8>;",
                           ".reg .b64   %rd<8>;\n    .reg .b64   %keep;\n    .reg .b64   %drop;", 1)
        text = re.sub(r"(\n    mov\.b32             %c, [^\n]*\n)",
                      rf"\1    createpolicy.fractional.L2::{kind}.b64 %keep, 1.0;\n", text, count=1)
        return re.sub(r"ld\.global\.nc\.v4\.b32(\s+\{[^}]*\}, \[%rd4\+\d+\]);",
                      r"ld.global.nc.L1::no_allocate.L2::cache_hint.v4.b32\1, %keep;", text)

    return {"round 2": hinted("evict_first").replace("st.global.v4.b32", "st.global.L1::no_allocate.v4.b32"),
            "evict_last, kept": hinted("evict_last")}


def edits(spec: Any, ptx: str) -> dict[str, str]:
    """The edits of the built-in ``ptx`` of ``spec`` that the script times, by name: those
    that differ from it (each edit leaves a text it does not apply to as it is)."""
    if isinstance(spec, Softmax):
        candidates = {**softmax_variants(ptx), **kept_requests(spec)}
    else:
        candidates = {"round 2": round_2(ptx), "plain": plain(ptx), "evict_last, kept": kept(ptx),
                      **kept_requests(spec),
                      "evict_first": evict_first(ptx), "evict_last, demoted": demoted(ptx),
                      "stores plain": stores_plain(ptx)}
    return {name: text for name, text in candidates.items() if text != ptx}


def kept_requests(spec: Any) -> dict[str, str]:
    """``spec`` with ``l2_evict_last=True`` and its other fields as they are (RMSNorm,
    RMSNormQuant, Softmax) as ``evict_last, kept`` (the PTX that :func:`kept` edits in, from
    the template: the policy alone, on the same geometry), and for RMSNorm with
    :data:`KEPT_CTAS` CTAs an SM; {} for other specs and for rows the field refuses. (At
    f16/bf16 hidden 8192, ``RMSNorm(hidden=8192, l2_evict_last=True)`` is the 4 CTAs edit:
    the field's default takes them there.)"""
    if not isinstance(spec, (RMSNorm, RMSNormQuant, Softmax)):
        return {}
    try:
        found = {"evict_last, kept": render(attrs.evolve(spec, l2_evict_last=True))}
    except SpecError:   # chunked, split or windowed rows, narrower vectors
        return {}
    if not isinstance(spec, RMSNorm):
        return found
    ctas = KEPT_CTAS.get((spec.hidden, spec.fused_residual))
    if ctas:
        found[f"evict_last, kept, {ctas} CTAs"] = render(
            attrs.evolve(spec, l2_evict_last=True, min_ctas_per_sm=ctas))
    return found


def arguments(torch: Any, spec: Any, tokens: int) -> list[Any]:
    """One input set of ``spec`` (Softmax, RMSNorm, RMSNormQuant, Fp8Quant, SiluMulQuant)
    in ``.param`` order: torch tensors of the spec's dtype on the GPU, then any row count.
    The scales are sized by ``scale_mode``: a row's, a group's (``[tokens, width / 128]``),
    or the one static scale, read (0.05)."""
    dtype = torch_dtype(torch, spec.dtype.ptx)
    if isinstance(spec, Softmax):
        x = torch.randn(tokens, spec.cols, device="cuda", dtype=dtype)
        return [x, torch.empty_like(x), np.uint32(tokens)]
    width = spec.d if isinstance(spec, SiluMulQuant) else spec.hidden   # of y and q
    scales = {"dynamic": (tokens,), "group": (tokens, width // 128)}.get(getattr(spec, "scale_mode", ""))
    scale = (torch.empty(scales, device="cuda", dtype=torch.float32) if scales else
             torch.full((1,), 0.05, device="cuda", dtype=torch.float32))   # static: read
    codes = [torch.empty(tokens, width, device="cuda", dtype=torch.uint8), scale]
    if isinstance(spec, SiluMulQuant):   # x holds gate and up side by side
        return [torch.randn(tokens, 2 * width, device="cuda", dtype=dtype), *codes,
                np.uint32(tokens)]
    x = torch.randn(tokens, width, device="cuda", dtype=dtype)
    if isinstance(spec, Fp8Quant):
        return [x, *codes[:1 if spec.scale_mode == "static_baked" else 2]]
    residual = [torch.randn_like(x)] if spec.fused_residual else []
    weight = torch.randn(width, device="cuda", dtype=dtype) * 0.5 + 1
    written = codes if isinstance(spec, RMSNormQuant) else [torch.empty_like(x)]
    return [x, *residual, weight, *written, np.uint32(tokens)]


def outputs(args: list[Any], spec: Any) -> list[Any]:
    """The tensors ``spec`` writes among ``args``: y, or q and the scales it computes (not a
    static scale, which it reads), and the residual it writes back."""
    computed = getattr(spec, "scale_mode", "") in ("dynamic", "group")
    if isinstance(spec, Fp8Quant):
        return args[1:3] if computed else args[1:2]
    if isinstance(spec, (RMSNormQuant, SiluMulQuant)):
        written = args[-3:-1] if computed else args[-3:-2]
    else:
        written = args[-2:-1]
    return written + ([args[1]] if getattr(spec, "fused_residual", False) else [])


def time_and_reuse(torch: Any, run: Any, sets: int, launches: int, reused: Any) -> tuple[float, float]:
    """Median device us of ``run(i)`` (input set ``i % sets``), and the median us of a second
    sum of ``reused`` right after ``run`` and a first sum (L2 hits, unless crowded out)."""
    seconds = device_times(torch, run, sets, launches)
    after = []
    for i in range(10):
        run(i)
        reused.sum()
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        reused.sum()
        end.record()
        torch.cuda.synchronize()
        after.append(start.elapsed_time(end) * 1e3)
    return statistics.median(seconds) * 1e6, statistics.median(after)


def time_texts(torch: Any, launcher: Launcher, variant: Variants, spec: Any, tokens: int,
               texts: dict[str, str], rounds: int, launches: int, reused: Any,
               others: Callable[[list[list[Any]]], dict[str, Callable[[int], Any]]] | None = None,
               ) -> dict[str, Any]:
    """Each PTX text of ``texts`` ({name: PTX}, entry renamed by :class:`Variants`) run as
    ``spec`` over ``tokens`` rows: first every text once on the first input set, its
    outputs kept, then ``rounds`` timed rounds in alternating order after a warm-up round
    (:func:`time_and_reuse`: the median us and the next kernel's re-read). ``others``, given
    the input sets (:func:`arguments`, three), returns more runs ({name: run(i)}, e.g.
    torch.compile on the same tensors) timed in the same rounds.

    Returns ``{"us": {name: mean of the rounds' medians}, "times": {name: [us a round]},
    "reuse": {name: median us}, "differs": [names whose outputs differ from the first
    text's]}``.
    """
    sets = [arguments(torch, spec, tokens) for _ in range(3)]
    grid, block = spec.launch_dims(tokens)
    # The built-in request first: its arrays' declarations check every set's sizes, which
    # the texts' requests (no declarations) would not.
    for args in sets:
        launcher.launch(spec, *args, grid=grid, block=block)
    requests = {name: variant(text) for name, text in texts.items()}
    runs: dict[str, Callable[[int], Any]] = {
        name: (lambda i, r=request: launcher.launch(r, *sets[i % len(sets)], grid=grid,
                                                    block=block))
        for name, request in requests.items()}
    residual = sets[0][1].clone() if getattr(spec, "fused_residual", False) else None
    written = {}
    for name in texts:
        runs[name](0)
        torch.cuda.synchronize()
        written[name] = [t.clone().view(torch.uint8) for t in outputs(sets[0], spec)]
        if residual is not None:   # written back in place: the next text starts alike
            sets[0][1].copy_(residual)
    first, *_ = written.values()
    differs = [name for name, tensors in written.items()
               if not all(torch.equal(a, b) for a, b in zip(tensors, first, strict=True))]
    runs.update(others(sets) if others else {})
    times: dict[str, list[float]] = {name: [] for name in runs}
    reuse: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds + 1):   # round 0 warms up
        for name in (list(runs) if round_ % 2 == 0 else list(reversed(runs))):
            us, after = time_and_reuse(torch, runs[name], len(sets), launches, reused)
            if round_:
                times[name].append(us)
                reuse[name].append(after)
    sets.clear()
    torch.cuda.empty_cache()
    return {"us": {n: statistics.mean(t) for n, t in times.items()}, "times": times,
            "reuse": {n: statistics.median(r) for n, r in reuse.items()}, "differs": differs}


def peer_rows(torch: Any, reused: Any, rounds: int, launches: int) -> list[str]:
    """Liger's and torch.compile's RMSNorm (and fused add RMSNorm) at the same shapes: their
    time and the next kernel's L2 reuse after them (Triton's loads carry their own policies)."""
    import liger_peers
    from cases_norm import EPS

    rows = []
    for fused, hidden in ((False, 4096), (False, 8192), (False, 10240), (False, 12288),
                          (True, 4096), (True, 8192)):
        x = [torch.randn(16384, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        r = [torch.randn_like(t) for t in x] if fused else None
        w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
        if fused:
            def eager(a: Any, b: Any, weight: Any, h: int = hidden) -> Any:
                s = a + b
                return torch.nn.functional.rms_norm(s, (h,), weight, EPS), s
            liger = liger_peers.fused_add_rms_norm(EPS).run
        else:
            def eager(a: Any, weight: Any, h: int = hidden) -> Any:
                return torch.nn.functional.rms_norm(a, (h,), weight, EPS)
            liger = liger_peers.rms_norm(EPS).run
        compiled = torch.compile(eager, dynamic=False)
        label = f"RMSNorm{' + residual' if fused else ''} 16384 x {hidden}"
        for name, fn in (("Liger", liger), ("torch.compile", compiled)):
            def run(i: int, fn: Any = fn) -> Any:
                return fn(x[i % 3], r[i % 3], w) if r is not None else fn(x[i % 3], w)
            run(0)
            measured = [time_and_reuse(torch, run, 3, launches, reused) for _ in range(rounds)]
            us = statistics.mean(m[0] for m in measured)
            rows.append(f"| {label} | {name} | {us:.1f} | - | "
                        f"{statistics.median(m[1] for m in measured):.2f} |")
            print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for cache_hints.md")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, alternating order")
    parser.add_argument("--launches", type=int, default=40, help="launches timed per round")
    parser.add_argument("--match", default="", help="only the cases whose label holds this text")
    parser.add_argument("--no-peers", action="store_true",
                        help="leave out Liger's and torch.compile's RMSNorm")
    options = parser.parse_args(argv)

    import torch

    launcher = Launcher(torch)
    variant = Variants(Path(tempfile.mkdtemp(prefix="specdsl-cache-hints-")))
    reused = torch.randn(24 * 2**20 // 4, device="cuda")   # 24 MB, under the 60 MB L2
    rows = ["| case | variant | us | vs built-in | next kernel's 24 MB L2 re-read, us |",
            "| --- | --- | ---: | ---: | ---: |"]
    for label, spec, tokens in CASES:
        if options.match not in label:
            continue
        ptx = render(spec)
        variants = {"built-in": ptx, **edits(spec, ptx)}
        found = time_texts(torch, launcher, variant, spec, tokens, variants, options.rounds,
                           options.launches, reused)
        if found["differs"]:
            raise SystemExit(f"{label}: {found['differs'][0]} writes other outputs than the built-in")
        base = found["us"]["built-in"]
        for name in variants:
            us = found["us"][name]
            rows.append(f"| {label} | {name} | {us:.1f} | {base / us:.3f}x | "
                        f"{found['reuse'][name]:.2f} |")
            print(rows[-1], flush=True)
    if not options.no_peers:
        rows += peer_rows(torch, reused, options.rounds, options.launches)
    Path(options.out).mkdir(parents=True, exist_ok=True)
    (Path(options.out) / "cache_hints.md").write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
