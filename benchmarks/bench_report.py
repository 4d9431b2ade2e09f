"""Tables and charts of ``benchmarks/kernels.py`` results: pure functions of its JSON (no GPU).

The results are a dict, as ``kernels.json`` holds them::

    {"device": ..., "torch": ..., "triton": ..., "liger": ..., "date": ..., "elapsed_s": ...,
     "copy_bytes_per_s": 4.24e12,             # 1 GiB device-to-device copy, read + write
     "cases": [{"kernel": "RMSNorm", "tokens": 16384, "series": "hidden=4096", "detail": "",
                "bytes_moved": 268443648,
                "copy": {"event_us": ..., "graph_us": ...},        # same-size copy
                "impls": {"specdsl": {"event_us": 70.2, "graph_us": 66.1, ...},
                          "liger": {"error": "n/a (...)"}, ...}}, ...]}

:func:`markdown` writes the tables, :func:`plot` one PNG per kernel page (matplotlib,
imported only there: ``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path

#: Implementations in column order, with their labels.
IMPLS = ("specdsl", "liger", "compile", "eager")
#: Columns shown only in tables whose cases have them: the unfused specdsl pair a fused
#: kernel replaces (``benchmarks/cases_fused.py``), right after specdsl.
OPTIONAL_IMPLS = ("unfused",)
LABELS = {"specdsl": "specdsl", "unfused": "specdsl unfused pair", "liger": "Liger",
          "compile": "torch.compile", "eager": "torch eager", "copy": "copy, same bytes"}
COLORS = {"specdsl": "tab:blue", "unfused": "tab:purple", "liger": "tab:orange",
          "compile": "tab:green", "eager": "tab:red", "copy": "tab:gray"}
#: Kernels in table order; each kernel's chart goes to the PNG of its docs page.
KERNEL_ORDER = ("RMSNorm", "RMSNorm+residual", "Softmax", "RoPE", "SiluMul", "Fp8Quant")
PAGES = {"RMSNorm": "rmsnorm", "RMSNorm+residual": "rmsnorm", "Softmax": "softmax",
         "RoPE": "rope", "SiluMul": "silu_mul", "Fp8Quant": "fp8_quant"}
#: The small-shapes table (events beside graph replay) covers up to this many tokens.
SMALL_TOKENS = 256
#: Issue 15's goal: at least GOAL_PERCENT of the copy rate at every shape of GOAL_BYTES or more.
GOAL_BYTES = 256 * 2**20
GOAL_PERCENT = 95.0


def page_of(kernel: str) -> str:
    """The file stem of ``kernel``'s chart: its docs page's (``rmsnorm``), else a slug."""
    return PAGES.get(kernel) or re.sub(r"[^a-z0-9]+", "_", kernel.lower()).strip("_")


def percent_of_copy(bytes_moved: int, microseconds: float, copy_bytes_per_s: float) -> float:
    """``bytes_moved`` in ``microseconds`` as a percentage of the copy rate."""
    return bytes_moved / (microseconds * 1e-6) / copy_bytes_per_s * 100


def case_order(case: dict) -> tuple:
    """Table order: kernel (:data:`KERNEL_ORDER`), the series' numbers, then tokens."""
    kernel = case["kernel"]
    rank = KERNEL_ORDER.index(kernel) if kernel in KERNEL_ORDER else len(KERNEL_ORDER)
    numbers = tuple(int(n) for n in re.findall(r"\d+", case["series"]))
    return rank, kernel, numbers, case["series"], case["tokens"]


def columns(cases: Iterable[dict]) -> tuple[str, ...]:
    """The implementations a table of ``cases`` shows: :data:`IMPLS`, with each of
    :data:`OPTIONAL_IMPLS` that some case has after specdsl."""
    cases = list(cases)
    extra = tuple(i for i in OPTIONAL_IMPLS if any(i in c["impls"] for c in cases))
    return IMPLS[:1] + extra + IMPLS[1:]


def _us(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


class Footnotes:
    """Numbers each distinct reason once: a cell says ``n/a [2]``, the note says why."""

    def __init__(self) -> None:
        self.reasons: dict[str, int] = {}

    def mark(self, reason: str) -> str:
        """``"n/a [n]"`` for ``reason`` (numbered on first sight)."""
        number = self.reasons.setdefault(reason, len(self.reasons) + 1)
        return f"n/a [{number}]"

    def lines(self) -> list[str]:
        """The notes, one a line: ``[n] reason``."""
        return [f"[{n}] {reason}" for reason, n in self.reasons.items()]


def _cell_error(entry: dict | None, notes: Footnotes) -> str | None:
    if entry is None:
        return notes.mark("not run")
    if "event_us" not in entry:
        reason = entry.get("error", "no time recorded")
        return notes.mark(reason[len("n/a ("):-1] if reason.startswith("n/a (") else reason)
    return None


def bandwidth_table(cases: list[dict], copy_rate: float, notes: Footnotes) -> list[str]:
    """Markdown lines: per shape, each implementation's event time, TB/s and % of the
    copy rate, and specdsl's speed-up over each peer (peer time / specdsl time)."""
    shown = columns(cases)
    header = ["shape", "MB moved"]
    for impl in shown:
        header += [f"{LABELS[impl]} us", "TB/s (% copy)"]
    header += [f"vs {LABELS[impl]}" for impl in shown[1:]]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for case in cases:
        impls = case["impls"]
        row = [f"tokens={case['tokens']} {case['series']}{case.get('detail', '')}",
               f"{case['bytes_moved'] / 1e6:.2f}"]
        for impl in shown:
            entry = impls.get(impl)
            failed = _cell_error(entry, notes)
            if failed:
                row += [failed, "-"]
                continue
            us = entry["event_us"]
            rate = case["bytes_moved"] / (us * 1e-6) / 1e12
            row += [_us(us), f"{rate:.2f} ({percent_of_copy(case['bytes_moved'], us, copy_rate):.1f}%)"]
        ours = impls.get("specdsl", {}).get("event_us")
        for impl in shown[1:]:
            theirs = impls.get(impl, {}).get("event_us")
            row.append(f"{theirs / ours:.2f}x" if ours and theirs else "-")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def small_table(cases: list[dict], notes: Footnotes) -> list[str]:
    """Markdown lines for the shapes of at most :data:`SMALL_TOKENS` tokens: event time /
    graph-replay time of the same-size copy and of each implementation, in us."""
    shown = columns(c for c in cases if c["tokens"] <= SMALL_TOKENS)
    header = ["kernel", "shape", "copy, same bytes"] + [LABELS[impl] for impl in shown]
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for case in cases:
        if case["tokens"] > SMALL_TOKENS:
            continue
        row = [case["kernel"], f"tokens={case['tokens']} {case['series']}{case.get('detail', '')}"]
        for entry in [case.get("copy")] + [case["impls"].get(impl) for impl in shown]:
            failed = _cell_error(entry, notes)
            if failed:
                row.append(failed)
                continue
            if "graph_us" in entry:
                graph = _us(entry["graph_us"])
            else:
                graph = notes.mark(f"graph: {entry.get('graph_error', 'not captured')}")
            row.append(f"{_us(entry['event_us'])} / {graph}")
        lines.append("| " + " | ".join(row) + " |")
    return lines if len(lines) > 2 else []


def goal_lines(cases: list[dict], copy_rate: float) -> list[str]:
    """Markdown bullets against issue 15's goals: specdsl under :data:`GOAL_PERCENT` of the
    copy rate at shapes of :data:`GOAL_BYTES` or more, and every shape where a peer's event
    time is below specdsl's."""
    short, behind = [], []
    for case in cases:
        label = f"{case['kernel']} tokens={case['tokens']} {case['series']}"
        ours = case["impls"].get("specdsl", {}).get("event_us")
        if ours is None:
            continue
        percent = percent_of_copy(case["bytes_moved"], ours, copy_rate)
        if case["bytes_moved"] >= GOAL_BYTES and percent < GOAL_PERCENT:
            short.append(f"{label} ({percent:.1f}%)")
        for impl in IMPLS[1:]:
            theirs = case["impls"].get(impl, {}).get("event_us")
            if theirs is not None and theirs < ours:
                behind.append(f"{label}: {LABELS[impl]} {_us(theirs)} us, specdsl {_us(ours)} us")
    return [f"- specdsl under {GOAL_PERCENT:.0f}% of the copy rate at {GOAL_BYTES >> 20} MiB "
            f"or more: {'; '.join(short) or 'none'}.",
            f"- a peer faster than specdsl: {'; '.join(behind) or 'none'}."]


def header_lines(results: dict) -> list[str]:
    """What the run ran on: device, versions, the copy rate, date and duration."""
    copy = results["copy_bytes_per_s"]
    return [f"Device: {results.get('device', '?')}; torch {results.get('torch', '?')}, "
            f"Triton {results.get('triton', '?')}, Liger-Kernel {results.get('liger', '?')}; "
            f"{results.get('date', '?')}, {results.get('elapsed_s', 0):.0f} s.",
            f"Copy rate: {copy / 1e12:.2f} TB/s (1 GiB device-to-device copy, bytes read "
            f"plus bytes written). Times are medians of CUDA events around single launches; "
            f"'vs X' is X's time / specdsl's (above 1.00x: specdsl is faster)."]


def markdown(results: dict) -> str:
    """The report: where specdsl misses issue 15's goals; per kernel, the bandwidth table;
    the small shapes with graph replay; the numbered reasons of every ``n/a``."""
    cases = sorted(results["cases"], key=case_order)
    notes = Footnotes()
    lines = header_lines(results) + ["", "Against the goals:", ""]
    lines += goal_lines(cases, results["copy_bytes_per_s"])
    for kernel in dict.fromkeys(case["kernel"] for case in cases):
        lines += ["", f"### {kernel}", ""]
        lines += bandwidth_table([c for c in cases if c["kernel"] == kernel],
                                 results["copy_bytes_per_s"], notes)
    small = small_table(cases, notes)
    if small:
        lines += ["", "### Small shapes: CUDA events / CUDA-graph replay, us per launch", ""]
        lines += small
    if notes.reasons:
        lines += ["", "Not available:", ""] + [f"- {line}" for line in notes.lines()]
    return "\n".join(lines) + "\n"


def write_json(results: dict, path: Path) -> None:
    """Write ``results`` as JSON (written whole to a temporary name, then renamed)."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(results, indent=1) + "\n")
    partial.replace(path)


def read_json(path: Path) -> dict:
    """Results written by :func:`write_json`.

    Raises:
        ValueError: the file is not such a results object.
    """
    results = json.loads(Path(path).read_text())
    if not isinstance(results, dict) or "cases" not in results or "copy_bytes_per_s" not in results:
        raise ValueError(f"{path} is not a kernels.py results file (expected 'cases' and "
                         f"'copy_bytes_per_s')")
    return results


def _panels(cases: Iterable[dict]) -> dict[str, dict[tuple[str, str], list[dict]]]:
    pages: dict[str, dict[tuple[str, str], list[dict]]] = {}
    for case in sorted(cases, key=case_order):
        pages.setdefault(page_of(case["kernel"]), {}).setdefault(
            (case["kernel"], case["series"]), []).append(case)
    return pages


def plot(results: dict, out_dir: Path) -> list[Path]:
    """One PNG per kernel page, ``<out_dir>/<page>.png`` (800 x 500 pixels): the percentage
    of the copy rate (CUDA-event times) against tokens, log x, one line per implementation
    and a dashed one for the same-size copy; one panel per series (hidden size, columns).

    Returns the paths written. Raises ImportError where matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    copy_rate = results["copy_bytes_per_s"]
    written = []
    for page, panels in _panels(results["cases"]).items():
        grid_columns = 1 if len(panels) == 1 else 2
        rows = math.ceil(len(panels) / grid_columns)
        fig, axes = plt.subplots(rows, grid_columns, figsize=(8, 5), dpi=100, sharey=True,
                                 squeeze=False)
        kernels = {kernel for kernel, _ in panels}
        top = 110.0
        for ax, ((kernel, series), cases) in zip(axes.flat, panels.items(), strict=False):  # spare cells
            for impl in columns(cases) + ("copy",):
                points = [(c["tokens"], percent_of_copy(c["bytes_moved"], entry["event_us"],
                                                         copy_rate))
                          for c in cases
                          for entry in [c.get("copy") if impl == "copy" else c["impls"].get(impl)]
                          if entry and "event_us" in entry]
                if points:
                    top = max(top, 1.05 * max(y for _, y in points))
                    ax.plot(*zip(*points, strict=True), marker="o", markersize=3, label=LABELS[impl],
                            color=COLORS[impl], linestyle="--" if impl == "copy" else "-",
                            linewidth=1 if impl == "copy" else 1.5)
            ax.set_xscale("log", base=2)
            tokens = sorted({c["tokens"] for c in cases})
            ax.set_xticks(tokens, [str(t) for t in tokens])
            ax.minorticks_off()
            ax.set_title(f"{kernel}, {series}" if len(kernels) > 1 else series, fontsize=9)
            ax.grid(True, alpha=0.3)
            ax.tick_params(labelsize=8)
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        axes[0][0].set_ylim(0, top)  # shared by every panel
        axes[0][0].legend(fontsize=7, loc="upper left")
        fig.supxlabel("tokens (rows)", fontsize=9)
        fig.supylabel("% of the copy rate", fontsize=9)
        fig.suptitle(f"{' and '.join(sorted(kernels))}, bf16: {results.get('device', '')}",
                     fontsize=10)
        fig.tight_layout()
        path = Path(out_dir) / f"{page}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
