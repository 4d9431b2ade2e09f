"""Time to the first launch of every built-in kernel in a new process: empty vs warm disk cache.

Run on the GPU machine from the repository root::

    python3 benchmarks/cold_start.py [--runs 3] [--out DIR]

Each measurement is a fresh ``python3`` process (so nothing is cached in memory) on a
disk-cache folder that is either empty (every template is parsed and compiled by
Jinja, every kernel rendered and compiled with nvJitLink) or warm (filled by an earlier
process: templates load from Jinja's bytecode cache, every kernel is rendered and its
cubin read and validated from disk). In the child, per kernel: device buffers for the
kernel's representative request (``specdsl._review.variants.representative_request``) and its
``example()`` case are made outside the timed region; the timed region is the first
``Executor.launch`` (render, disk cache or compile, module load, argument checks,
launch) and a stream synchronize. Also reported: the process's ``import specdsl`` and
``import cuda.core`` times and ``Executor(0)`` construction (CUDA context creation).
The median of ``--runs`` processes per scenario is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, math, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
import specdsl
t1 = time.perf_counter()
import cuda.core
t2 = time.perf_counter()
from specdsl.kernels import ALL
t3 = time.perf_counter()
import numpy as np
from specdsl import Executor
from specdsl._review.variants import representative_request
from specdsl.kernels.case import Output
import importlib
t3b = time.perf_counter()
executor = Executor(0, cache_dir=sys.argv[1])
t4 = time.perf_counter()
device = executor.device
stream = device.create_stream()
rng = np.random.default_rng(0)
result = {"import_specdsl_ms": (t1 - t0) * 1e3, "import_cuda_core_ms": (t2 - t1) * 1e3,
          "import_kernels_ms": (t3 - t2) * 1e3, "executor_ms": (t4 - t3b) * 1e3, "kernels": {}}
for cls in ALL:
    try:
        example = importlib.import_module(cls.__module__).example
        case = example(representative_request(cls), rng)
    except Exception as exc:  # a kernel without a runnable example: reported, not timed
        result.setdefault("skipped", {})[cls.__name__] = f"{type(exc).__name__}: {exc}"
        continue
    args = []
    for name, value in case.args:
        if isinstance(value, Output) or isinstance(value, np.ndarray):
            nbytes = (math.prod(value.shape) * value.dtype.size if isinstance(value, Output)
                      else value.nbytes)
            buf = device.allocate(max(nbytes, 1), stream=stream)
            buf.fill(0xFF, stream=stream)
            args.append(buf)
        else:
            args.append(value)
    stream.sync()
    start = time.perf_counter()
    executor.launch(case.spec, *args, grid=case.grid, block=case.block,
                    shared_mem=case.shared_mem, stream=stream)
    stream.sync()
    result["kernels"][cls.__name__] = (time.perf_counter() - start) * 1e3
stats = executor.stats
result["compiles"], result["disk_hits"] = stats.compiles, stats.disk_hits
print(json.dumps(result))
"""


def _child(folder: str) -> dict:
    # the same folder holds the cubins and Jinja's compiled templates and template facts
    env = dict(os.environ, SPECDSL_CACHE_DIR=folder)
    done = subprocess.run([sys.executable, "-c", CHILD, folder, str(ROOT)], capture_output=True,
                          text=True, timeout=300, env=env)
    if done.returncode != 0:
        raise SystemExit(f"child process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()

    empty, warm = [], []
    for _ in range(args.runs):
        folder = tempfile.mkdtemp(prefix="specdsl-cold-")
        empty.append(_child(folder))   # fills the folder
        warm.append(_child(folder))    # reads it back
    names = list(empty[0]["kernels"])

    def median(runs, pick):
        return statistics.median(pick(r) for r in runs)

    lines = [
        f"# Cold start: first launch of each built-in kernel in a new process "
        f"(median of {args.runs})",
        "",
        "| kernel | empty cache, ms | warm cache, ms |",
        "| --- | ---: | ---: |",
    ]
    for name in names:
        lines.append(f"| {name} | {median(empty, lambda r: r['kernels'][name]):.2f} | "
                     f"{median(warm, lambda r: r['kernels'][name]):.2f} |")
    total_empty = median(empty, lambda r: sum(r["kernels"].values()))
    total_warm = median(warm, lambda r: sum(r["kernels"].values()))
    lines.append(f"| **total** | **{total_empty:.2f}** | **{total_warm:.2f}** |")
    lines += [
        "",
        "| process step | empty, ms | warm, ms |",
        "| --- | ---: | ---: |",
    ]
    for key, label in (("import_specdsl_ms", "import specdsl"),
                       ("import_cuda_core_ms", "import cuda.core"),
                       ("import_kernels_ms", "import specdsl.kernels (spec classes, template checks)"),
                       ("executor_ms", "Executor(0) (CUDA context, disk cache, nvJitLink probe)")):
        lines.append(f"| {label} | {median(empty, lambda r: r[key]):.1f} | "
                     f"{median(warm, lambda r: r[key]):.1f} |")
    for name, why in empty[0].get("skipped", {}).items():
        lines.append(f"skipped {name}: {why}")
    lines += ["", f"compiles/disk hits per process: empty {empty[0]['compiles']}/"
                  f"{empty[0]['disk_hits']}, warm {warm[0]['compiles']}/{warm[0]['disk_hits']}"]
    text = "\n".join(lines)
    print(text)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "cold_start.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
