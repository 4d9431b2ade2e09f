"""Rendering in a new process, no GPU: template caches off, empty, and warm.

Run from the repository root (any machine; no GPU needed)::

    python3 benchmarks/cold_render.py [--runs 15] [--out DIR]

Each measurement is a fresh ``python3`` process that times ``import specdsl.kernels``
(every spec class is defined, which reads each template's facts: from the cache folder
or by parsing) and then the first render of each built-in kernel's representative
request (each template compiled by Jinja, or loaded from the verified bytecode cache).
The cache folder (``SPECDSL_CACHE_DIR``) is ``off``, a new empty folder (the process
fills it), or that folder again (warm). Interpreter start-up is not included. The
median of ``--runs`` processes per scenario is reported; the three scenarios are
interleaved, so a busy machine slows them alike.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
import specdsl.kernels
t1 = time.perf_counter()
from specdsl import render
from specdsl.grid import representative_request
for cls in specdsl.kernels.ALL:
    render(representative_request(cls))
t2 = time.perf_counter()
print((t1 - t0) * 1e3, (t2 - t1) * 1e3)
"""


def _child(cache: str) -> tuple[float, float]:
    env = dict(os.environ, SPECDSL_CACHE_DIR=cache)
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], env=env, check=True,
                          capture_output=True, text=True, timeout=300)
    first, second = done.stdout.split()
    return float(first), float(second)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()

    runs: dict[str, list[tuple[float, float]]] = {"off": [], "empty": [], "warm": []}
    for _ in range(args.runs):
        runs["off"].append(_child("off"))
        folder = tempfile.mkdtemp(prefix="specdsl-render-")
        runs["empty"].append(_child(folder))
        runs["warm"].append(_child(folder))
        shutil.rmtree(folder)
    lines = [f"# Rendering in a new process (median of {args.runs})", "",
             "| template caches | import specdsl.kernels, ms | first render of every built-in, ms |",
             "| --- | ---: | ---: |"]
    for name, label in (("off", "off"), ("empty", "empty folder"), ("warm", "warm")):
        lines.append(f"| {label} | {statistics.median(a for a, _ in runs[name]):.1f} | "
                     f"{statistics.median(b for _, b in runs[name]):.1f} |")
    text = "\n".join(lines)
    print(text)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "cold_render.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
