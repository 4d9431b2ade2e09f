"""Nsight Compute over ``benchmarks/ncu_targets.py``: kernel time and DRAM bytes per implementation (GPU).

Run on the GPU machine from the repository root (ncu on the PATH, or ``--ncu``)::

    python3 benchmarks/ncu_report.py --out $OUT [--timeout 170] [-- large --impls specdsl,liger]

It runs ``ncu --clock-control none`` (required on these machines: ncu may not lock the
clocks there) over the targets script, reading for every kernel ``gpu__time_duration.sum``,
``dram__bytes_read.sum``, ``dram__bytes_write.sum`` and
``dram__throughput.avg.pct_of_peak_sustained_elapsed`` (and ``launch__grid_size``, which names
the markers), with ncu's default cache control (caches flushed before each kernel, so the
DRAM bytes are a cold launch's). Per target (kernel, shape, implementation) it adds up the
kernels the target launched and prints a table: time in us, DRAM bytes read plus written
against the spec's ``bytes_moved`` (1.00x: no byte moved twice), the DRAM rate and the DRAM
throughput as a percentage of peak (time-weighted over the target's kernels).

Written under ``--out``: ``ncu.csv`` (ncu's own output), ``ncu_targets.json`` (the targets)
and ``ncu_report.md`` (the table, also printed). ``--csv FILE --manifest FILE`` makes the
table from those two files again, without a GPU.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed", "launch__grid_size")
MARKER = "vector_add"
#: ncu's units (``--print-units base`` gives the first of each kind) in bytes, seconds, %.
UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
         "B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2.0**10, "MiB": 2.0**20,
         "GiB": 2.0**30, "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
         "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "%": 1.0}
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def ncu_command(ncu: str, csv_path: Path, manifest: Path, target_args: list[str]) -> list[str]:
    """The ncu command line that profiles the marked range of ``ncu_targets.py``."""
    script = Path(__file__).resolve().parent / "ncu_targets.py"
    return [ncu, "--clock-control", "none", "--profile-from-start", "off",
            "--target-processes", "application-only", "--metrics", ",".join(METRICS),
            "--csv", "--print-units", "base", "--log-file", str(csv_path),
            sys.executable, str(script), "--manifest", str(manifest), *target_args]


def parse_number(text: str) -> float:
    """A metric value as ncu prints it: ``"268,435,456"``, ``"65.54"``, ``"9,5"``.

    Raises:
        ValueError: not a number.
    """
    text = text.strip().strip('"')
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    elif text.count(",") == 1 and "." not in text:
        text = text.replace(",", ".")  # a decimal comma (a locale ncu was run under)
    return float(text)


def parse_csv(text: str) -> list[dict]:
    """ncu's ``--csv`` output as ``[{"id", "name", "metrics": {name: value}}]`` in launch
    order; values in bytes, seconds and percent (``launch__grid_size`` in CTAs). Lines
    that are not CSV records (``==PROF==`` messages) are skipped.

    Raises:
        ValueError: no ``ID`` column, or a unit this script does not know for a time or
            byte metric.
    """
    lines = [line for line in text.splitlines() if line.startswith('"')]
    start = next((i for i, line in enumerate(lines) if '"Metric Name"' in line), None)
    if start is None:
        return []
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    if "ID" not in (reader.fieldnames or ()):
        raise ValueError(f"ncu CSV header without an ID column: {reader.fieldnames}")
    kernels: dict[int, dict] = {}
    for row in reader:
        try:
            kernel_id = int(row["ID"])
        except (TypeError, ValueError):
            continue  # a repeated header
        entry = kernels.setdefault(kernel_id, {"id": kernel_id, "metrics": {},
                                               "name": row.get("Kernel Name") or ""})
        name, unit = row.get("Metric Name"), (row.get("Metric Unit") or "").strip()
        if name not in METRICS:
            continue
        if name != "launch__grid_size" and unit not in UNITS:
            raise ValueError(f"metric {name}: unit {unit!r} is not one of {sorted(UNITS)}")
        try:
            value = parse_number(row.get("Metric Value") or "")
        except ValueError:
            continue  # "n/a" where ncu could not collect it
        entry["metrics"][name] = value if name == "launch__grid_size" else value * UNITS[unit]
    return [kernels[k] for k in sorted(kernels)]


def is_marker(kernel: dict) -> bool:
    """Whether ``kernel`` is a marker launch (``vector_add``)."""
    return kernel["name"].split("(")[0].strip() == MARKER


def attribute(kernels: list[dict], targets: list[dict]) -> list[dict]:
    """Each target with the sums of the kernels after its marker: ``kernels`` (count),
    ``seconds``, ``dram_read``, ``dram_write`` (bytes) and ``dram_pct`` (time-weighted)."""
    measured: dict[int, list[dict]] = {}
    current = None
    for kernel in kernels:
        if is_marker(kernel):
            current = int(kernel["metrics"].get("launch__grid_size", 0)) or None
            if current is not None:
                measured[current] = []
        elif current is not None:
            measured[current].append(kernel)
    rows = []
    for target in targets:
        row = dict(target)
        found = measured.get(target["id"])
        if found is None:
            row.setdefault("error", "no marker in the ncu output")
        elif found:
            seconds = sum(k["metrics"].get("gpu__time_duration.sum", 0.0) for k in found)
            row.update(kernels=len(found), seconds=seconds,
                       dram_read=sum(k["metrics"].get("dram__bytes_read.sum", 0.0) for k in found),
                       dram_write=sum(k["metrics"].get("dram__bytes_write.sum", 0.0) for k in found),
                       dram_pct=sum(k["metrics"].get(METRICS[3], 0.0)
                                    * k["metrics"].get("gpu__time_duration.sum", 0.0)
                                    for k in found) / seconds if seconds else 0.0)
        else:
            row.setdefault("error", "no kernel after its marker")
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: per target, us, DRAM MB read + written, DRAM / bytes_moved, TB/s, % of peak."""
    lines = ["| kernel | shape | impl | kernels | us | DRAM MB read + write | DRAM / bytes_moved "
             "| DRAM TB/s | DRAM % of peak |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        shape = f"tokens={row['tokens']} {row['series']}"
        if "seconds" not in row:
            lines.append(f"| {row['kernel']} | {shape} | {row['impl']} | n/a ({row['error']}) "
                         f"| | | | | |")
            continue
        dram = row["dram_read"] + row["dram_write"]
        rate = dram / row["seconds"] / 1e12 if row["seconds"] else 0.0
        lines.append(f"| {row['kernel']} | {shape} | {row['impl']} | {row['kernels']} | "
                     f"{row['seconds'] * 1e6:.1f} | {row['dram_read'] / 1e6:.1f} + "
                     f"{row['dram_write'] / 1e6:.1f} | {dram / row['bytes_moved']:.3f}x | "
                     f"{rate:.2f} | {row['dram_pct']:.1f} |")
    return "\n".join(lines) + "\n"


def find_ncu(given: str | None) -> str | None:
    """``given``, or ncu on the PATH, or the CUDA toolkit's."""
    for candidate in (given, "ncu", "/usr/local/cuda/bin/ncu"):
        if candidate and (shutil.which(candidate) or Path(candidate).is_file()):
            return shutil.which(candidate) or candidate
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."),
                        help="folder for ncu.csv, ncu_targets.json and ncu_report.md")
    parser.add_argument("--ncu", help="the ncu executable (default: on the PATH)")
    parser.add_argument("--timeout", type=float, default=170.0,
                        help="seconds before ncu is stopped (default 170)")
    parser.add_argument("--csv", help="no GPU: read this ncu.csv instead of running ncu")
    parser.add_argument("--manifest", help="with --csv: the ncu_targets.json of that run")
    parser.add_argument("target_args", nargs="*",
                        help="after --: arguments for ncu_targets.py (default: large)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.csv:
        if not args.manifest:
            parser.error("--csv needs --manifest (the ncu_targets.json of the same run)")
        csv_path, manifest = Path(args.csv), Path(args.manifest)
    else:
        ncu = find_ncu(args.ncu)
        if ncu is None:
            print("ncu not found: give --ncu PATH (Nsight Compute's command line)")
            return 2
        csv_path, manifest = out / "ncu.csv", out / "ncu_targets.json"
        command = ncu_command(ncu, csv_path, manifest, args.target_args)
        print(" ".join(command), flush=True)
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}  # numbers with a decimal point
        try:
            done = subprocess.run(command, env=env, timeout=args.timeout)
            if done.returncode:
                print(f"ncu exited with {done.returncode}; reading what it wrote")
        except subprocess.TimeoutExpired:
            print(f"ncu stopped after {args.timeout:.0f} s (--timeout); reading what it wrote")
    if not csv_path.is_file() or not manifest.is_file():
        print(f"nothing to read: {csv_path} or {manifest} is missing")
        return 1
    rows = attribute(parse_csv(csv_path.read_text(errors="replace")),
                     json.loads(manifest.read_text()))
    text = table(rows)
    (out / "ncu_report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
