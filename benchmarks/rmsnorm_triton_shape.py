"""Where torch.compile's lead on RMSNorm rows without the residual comes from: the built-in
PTX against edits of it toward the Triton kernel's shape of the work, one change at a time
(docs/kernels/rmsnorm.md, "Keeping x in L2").

Run on the GPU machine from the repository root::

    python3 benchmarks/rmsnorm_triton_shape.py [--set shape|hints] [--out DIR]   # about a minute

The Triton kernel torch.compile generates for ``F.rms_norm`` (read from ``TRITON_CACHE_DIR``
on 2026-12-01, Triton 3.6) holds 32 registers at 512 threads, loads x with
``.L1::evict_last`` under an L2 evict_last policy, reduces, loads the weight, re-reads x from
L1 under evict_first, and never lifts the policy. ``--set shape`` (the default) times these
edits of the built-in, each alone or together:

- ``w after``: the weight's loads moved after the reduction (32 registers at 512 threads),
  with ``.minnctapersm`` raised to the CTAs that then fit;
- ``x ld.global``: x through the coherent path instead of ``.nc``;
- ``x evict_last``: x under an L2 evict_last policy (``createpolicy``, ``.L2::cache_hint``);
- ``Triton's shape``: x loaded ``.L1::evict_last`` under evict_last, re-read after the
  reduction ``.L1::evict_first`` under evict_first, the weight ``.L1::evict_last`` under
  evict_last; with and without the L2 policies.

``--set hints`` times ways to have the policy's gain without leaving x's lines at evict_last:
a fraction of the loads under it, y stored under evict_first, the ``.L2::256B`` prefetch size
on x, an evict_unchanged policy.

Every edit is checked to write the built-in's outputs bit for bit. Each time comes with the
next kernel's 24 MB L2 re-read (``cache_hints.time_and_reuse``), and torch.compile's kernel
is timed in the same rounds. bf16, 16384 tokens; five rounds in alternating order, the first
a warm-up.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _path in (str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from cache_hints import Variants, time_texts  # noqa: E402
from cases_norm import EPS  # noqa: E402
from harness import Launcher  # noqa: E402

from specdsl import render  # noqa: E402
from specdsl.kernels import RMSNorm  # noqa: E402

#: (hidden, CTAs an SM for edits that keep x in registers, for edits that re-read it): the
#: most at which ptxas fits each without spills.
SHAPES = ((8192, 4, 4), (12288, 3, 5), (10240, 3, 5))
#: Timed rounds, after a warm-up round, in alternating order.
TIMED_ROUNDS = 4

_X_LOAD = re.compile(r"^(\s*)ld\.global\.nc\.v4\.b32(\s+\{ %w[^}]*\}, \[%rd4\+\d+\]);$", re.M)
_W_LOAD = re.compile(r"^\s*ld\.global\.nc\.v4\.b32\s+\{ %g[^}]*\}, \[%rd5\+\d+\];\n", re.M)
_Y_STORE = re.compile(r"^(\s*)st\.global\.v4\.b32(\s+\[%rd6\+\d+\], \{[^}]*\});$", re.M)
_RSQRT = re.compile(r"^\s*rsqrt\.approx\.f32.*\n", re.M)


def with_policies(ptx: str) -> str:
    """``ptx`` with two L2 policies created before x's first load: ``%pl`` (evict_last)
    and ``%pf`` (evict_first)."""
    if "%pl;" in ptx:
        return ptx
    ptx = ptx.replace(".reg .b64   %rd<16>;",
                      ".reg .b64   %rd<16>;\n    .reg .b64   %pl;\n    .reg .b64   %pf;", 1)
    first = _X_LOAD.search(ptx).start()
    return (ptx[:first] + "    createpolicy.fractional.L2::evict_last.b64 %pl, 1.0;\n"
            "    createpolicy.fractional.L2::evict_first.b64 %pf, 1.0;\n" + ptx[first:])


def _load(qualifiers: str, policy: str | None) -> tuple[str, str]:
    """The opcode and the trailing operand of a v4 load with ``qualifiers`` and ``policy``."""
    if policy:
        return f"ld.global{qualifiers}.L2::cache_hint.v4.b32", f", {policy}"
    return f"ld.global{qualifiers}.v4.b32", ""


def edit(ptx: str, *, ctas: int | None = None, weight_after: bool = False, x: str = ".nc",
         x_policy: str | None = None, reread: tuple[str, str | None] | None = None,
         weight: tuple[str, str | None] = (".nc", None)) -> str:
    """The built-in ``ptx`` of a register-resident row without the residual, edited: x's
    loads with qualifiers ``x`` under ``x_policy``; the weight's loads moved after the
    reduction (``weight_after``) with ``weight``'s qualifiers and policy; x loaded again
    there with ``reread``'s (the held words overwritten: the same values); ``.minnctapersm
    ctas``."""
    if x_policy or (reread and reread[1]) or weight[1]:
        ptx = with_policies(ptx)
    x_words = [m.group(2) for m in _X_LOAD.finditer(ptx)]
    op, tail = _load(x, x_policy)
    ptx = _X_LOAD.sub(lambda m: f"{m.group(1)}{op}{m.group(2)}{tail};", ptx)
    after = ""
    if weight_after:
        loads = _W_LOAD.findall(ptx)
        ptx = _W_LOAD.sub("", ptx)
        op, tail = _load(*weight)
        after += "".join(line.replace("ld.global.nc.v4.b32", op).replace("];", f"]{tail};")
                         for line in loads)
    if reread:
        op, tail = _load(*reread)
        after += "".join(f"    {op}{words}{tail};\n" for words in x_words)
    if after:
        end = _RSQRT.search(ptx).end()
        ptx = ptx[:end] + after + ptx[end:]
    if ctas:
        ptx = re.sub(r"\.minnctapersm \d+", f".minnctapersm {ctas}", ptx)
    return ptx


def store_y(ptx: str, qualifiers: str = "", policy: str | None = None) -> str:
    """``ptx`` with y's stores given ``qualifiers`` and ``policy``."""
    if policy:
        ptx = with_policies(ptx)
    hint, tail = (".L2::cache_hint", f", {policy}") if policy else ("", "")
    return _Y_STORE.sub(lambda m: f"{m.group(1)}st.global{qualifiers}{hint}.v4.b32{m.group(2)}{tail};",
                        ptx)


def shape_edits(ptx: str, hold: int, reread: int) -> dict[str, str]:
    """``--set shape``: the built-in and its edits toward Triton's shape, by name."""
    triton = dict(weight_after=True, x=".L1::evict_last", x_policy="%pl",
                  reread=(".L1::evict_first", "%pf"), weight=(".L1::evict_last", "%pl"))
    return {
        "built-in": ptx,
        f"w after, {hold} CTAs": edit(ptx, ctas=hold, weight_after=True),
        f"w after, x ld.global, {hold} CTAs": edit(ptx, ctas=hold, weight_after=True, x=""),
        f"w after, x evict_last, {hold} CTAs": edit(ptx, ctas=hold, weight_after=True, x_policy="%pl"),
        f"Triton's shape, {reread} CTAs": edit(ptx, ctas=reread, **triton),
        f"Triton's shape without L2 policies, {reread} CTAs": edit(
            ptx, ctas=reread, weight_after=True, x=".L1::evict_last",
            reread=(".L1::evict_first", None), weight=(".L1::evict_last", None)),
        f"x re-read plainly, {reread} CTAs": edit(ptx, ctas=reread, weight_after=True, x="",
                                                  reread=("", None), weight=("", None)),
    }


def hint_edits(ptx: str, hold: int, reread: int) -> dict[str, str]:
    """``--set hints``: the policy's gain sought without x's lines left at evict_last."""
    kept = edit(ptx, x_policy="%pl")
    return {
        "built-in": ptx,
        "x evict_last": kept,
        "x evict_last, fraction 0.5": kept.replace("evict_last.b64 %pl, 1.0;", "evict_last.b64 %pl, 0.5;"),
        "x evict_last, fraction 0.25": kept.replace("evict_last.b64 %pl, 1.0;", "evict_last.b64 %pl, 0.25;"),
        "y evict_first": store_y(ptx, policy="%pf"),
        "y evict_first, .L1::no_allocate": store_y(ptx, ".L1::no_allocate", "%pf"),
        "x .L2::256B": _X_LOAD.sub(lambda m: f"{m.group(1)}ld.global.nc.L2::256B.v4.b32{m.group(2)};", ptx),
        "x evict_unchanged": kept.replace("L2::evict_last.b64 %pl", "L2::evict_unchanged.b64 %pl"),
    }


SETS: dict[str, Callable[[str, int, int], dict[str, str]]] = {"shape": shape_edits, "hints": hint_edits}


def time_shape(torch: Any, launcher: Launcher, variant: Variants, reused: Any, hidden: int,
               texts: dict[str, str]) -> list[str]:
    """Table rows of each text of RMSNorm(hidden) and of torch.compile's RMSNorm: us (mean of
    the rounds' medians), the ratio to the built-in, the range, the next kernel's re-read."""
    spec = RMSNorm(hidden=hidden)

    def eager(x: Any, weight: Any) -> Any:
        return torch.nn.functional.rms_norm(x, (hidden,), weight, EPS)

    compiled = torch.compile(eager, dynamic=False)

    def peer(sets: list[list[Any]]) -> dict[str, Callable[[int], Any]]:
        compiled(sets[0][0], sets[0][1])   # compiled outside the timed rounds
        return {"torch.compile": lambda i: compiled(sets[i % len(sets)][0], sets[0][1])}

    found = time_texts(torch, launcher, variant, spec, 16384, texts, TIMED_ROUNDS, 40, reused,
                       others=peer)
    if found["differs"]:
        raise SystemExit(f"RMSNorm {hidden}: {found['differs'][0]} writes other outputs than "
                         "the built-in")
    base, times = found["us"]["built-in"], found["times"]
    return [f"| {hidden} | {name} | {us:.1f} | {base / us:.3f}x | {min(times[name]):.1f} to "
            f"{max(times[name]):.1f} | {found['reuse'][name]:.2f} |"
            for name, us in found["us"].items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="shape")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the .md table")
    options = parser.parse_args(argv)

    import torch

    launcher = Launcher(torch)
    variant = Variants(Path(tempfile.mkdtemp(prefix="specdsl-triton-shape-")))
    reused = torch.randn(24 * 2**20 // 4, device="cuda")   # 24 MB, under the 60 MB L2
    rows = ["| hidden | variant | us | vs built-in | range over the rounds | "
            "next kernel's 24 MB L2 re-read, us |", "| ---: | --- | ---: | ---: | --- | ---: |"]
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    for hidden, hold, reread in SHAPES:
        texts = SETS[options.set](render(RMSNorm(hidden=hidden)), hold, reread)
        for row in time_shape(torch, launcher, variant, reused, hidden, texts):
            print(row, flush=True)
            rows.append(row)
        (out / f"rmsnorm_triton_{options.set}.md").write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
