"""The GPU benchmarks' pure parts, on the CPU: arguments, cases, tables, charts, ncu parsing.

``benchmarks/kernels.py``, ``ncu_targets.py`` and ``ncu_report.py`` run on the GPU machine;
what they compute from their measurements, and how they read their command lines, is
tested here from made-up results. Where torch is installed (the GPU machine), the torch
implementation of every case is also checked against the kernel's float64 reference on
CPU tensors (``benchfakes.py`` stands in for the device). ``cluster_cost.py``'s PTX texts
are checked to be the steps they name, and to assemble.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import numpy as np
import pytest

from specdsl.kernels import Fp8Quant, RMSNorm, RMSNormQuant, SiluMulQuant, Softmax

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_report  # noqa: E402
import harness  # noqa: E402
import kernels  # noqa: E402
import liger_peers  # noqa: E402
import ncu_report  # noqa: E402
import ncu_targets  # noqa: E402
import variants  # noqa: E402

COPY = 4.0e12  # bytes per second of the made-up runs


def _case(kernel="RMSNorm", tokens=16384, series="hidden=4096", bytes_moved=400_000_000,
          **impls) -> dict:
    return {"kernel": kernel, "tokens": tokens, "series": series, "detail": "",
            "bytes_moved": bytes_moved, "copy": {"event_us": 100.0, "graph_us": 98.0},
            "impls": impls}


def _results(*cases) -> dict:
    return {"device": "NVIDIA H200", "torch": "2.11", "triton": "3.6", "liger": "0.8.5",
            "date": "2026-12-01", "elapsed_s": 200.0, "copy_bytes_per_s": COPY,
            "cases": list(cases)}


def _built_cases() -> list:
    return [case for module in kernels.case_modules() for case in module.cases(None)]


# --- kernels.py: command line and case selection -------------------------------------------

def test_kernels_argument_accepts_any_case():
    """--kernels matches names case-insensitively and keeps their order."""
    args = kernels.parse_args(["--kernels", "softmax,RMSNORM"])
    assert args.kernels == ("Softmax", "RMSNorm")


def test_kernels_argument_refuses_an_unknown_name(capsys):
    """An unknown --kernels name exits with the name and the known kernels."""
    with pytest.raises(SystemExit):
        kernels.parse_args(["--kernels", "RMSNorm,LayerNorm"])
    err = capsys.readouterr().err
    assert "LayerNorm" in err and "Fp8Quant" in err


def test_quick_times_fewer_launches():
    """--quick defaults to 50 timed launches; an explicit --launches wins."""
    assert kernels.parse_args(["--quick"]).launches == 50
    assert kernels.parse_args(["--quick", "--launches", "7"]).launches == 7
    assert kernels.parse_args([]).launches == 100


def test_launches_must_be_positive(capsys):
    """--launches 0 is refused."""
    with pytest.raises(SystemExit):
        kernels.parse_args(["--launches", "0"])
    assert "--launches 0" in capsys.readouterr().err


def test_every_kernel_has_cases_at_both_hidden_sizes():
    """Each kernel has tokens 1 to 16384 at widths 4096 and 8192 (Softmax also longer rows)."""
    found = {}
    for case in _built_cases():
        found.setdefault(case.kernel, set()).add((case.tokens, case.series))
    assert set(found) == set(kernels.kernel_names())
    assert (16384, "hidden=8192") in found["RMSNorm+residual"]
    assert (1, "cols=131072") in found["Softmax"]
    assert {t for t, s in found["RoPE"] if s == "heads=64+8x128"} == {1, 16, 256, 4096, 16384}


def test_case_bytes_come_from_the_spec():
    """A case's bytes_moved is its spec's: RMSNorm 16384 x 4096 bf16 moves x, y and weight."""
    case = next(c for c in _built_cases() if c.kernel == "RMSNorm" and c.tokens == 16384
                and c.series == "hidden=4096")
    assert case.bytes_moved == (2 * 16384 + 1) * 4096 * 2
    assert case.tolerance == 1e-2


def test_softmax_split_is_a_detail_not_a_series():
    """Few long Softmax rows name their cluster split in the label, in the same series."""
    case = next(c for c in _built_cases() if c.kernel == "Softmax" and c.tokens == 1
                and c.series == "cols=131072")
    assert case.shape == "tokens=1 cols=131072 split=8"


def test_few_softmax_rows_keep_their_exponentials_as_a_detail():
    """Up to 8 rows an SM keep their exponentials, as specdsl.torch.softmax does: named in
    the label, in the same series; more rows, or a request without the registers, do not."""
    def shape(tokens, cols):
        return next(c for c in _built_cases() if c.kernel == "Softmax" and c.tokens == tokens
                    and c.series == f"cols={cols}").shape

    assert shape(256, 8192) == "tokens=256 cols=8192 keep_exponentials=True"
    assert shape(4096, 8192) == "tokens=4096 cols=8192"
    assert shape(256, 32768) == "tokens=256 cols=32768"  # 64 a thread: no room
    assert shape(1, 32768) == "tokens=1 cols=32768 split=8"  # split rows: not measured
    kept = variants.EXPERIMENTS["softmax-kept-rows"](None)
    assert {c.spec.keep_exponentials for c in kept} == {False, True}
    assert len(kept) == len({(c.tokens, c.series) for c in kept})


def test_opt_in_groups_run_only_when_named():
    """The fused-epilogue and row-length groups stay out of the default run (about 4
    minutes) and run where --kernels names them; --quick keeps two token counts of theirs."""
    cases = _built_cases()
    opt_in = set(kernels.opt_in_kernels())
    assert opt_in == {"RMSNormQuant", "RMSNormQuant+residual", "SiluMulQuant",
                      "Fp8Quant-group", "RMSNormQuant-long", "RMSNorm-odd", "Softmax-odd",
                      "Fp8Quant-odd", "RMSNorm-long"}
    assert not {c.kernel for c in kernels.select(cases, None, quick=False, opt_in=tuple(opt_in))
                } & opt_in
    chosen = kernels.select(cases, ("SiluMulQuant",), quick=True, opt_in=tuple(opt_in))
    assert [c.shape for c in chosen] == ["tokens=16 d=14336 dynamic split=8",
                                         "tokens=16384 d=14336 dynamic"]


def test_fused_cases_name_their_unfused_pair():
    """Each fused epilogue's case carries the unfused specdsl pair as a column, and its bytes
    are the fused kernel's (x in, codes and scales out: y never reaches memory)."""
    fused = [c for c in _built_cases() if c.kernel in ("RMSNormQuant", "RMSNormQuant+residual",
                                                        "SiluMulQuant")]
    assert len(fused) == 36 and all("unfused" in c.peers for c in fused)
    case = next(c for c in fused if c.shape == "tokens=16384 hidden=4096 dynamic")
    assert case.bytes_moved == (16384 + 1) * 4096 * 2 + 16384 * 4096 + 4 * 16384


def test_odd_lengths_sit_beside_the_nearest_multiple_of_8():
    """Each odd row length runs in the same table as the multiple of 8 nearest to it."""
    series = {}
    for case in _built_cases():
        series.setdefault(case.kernel, set()).add(case.series)
    assert series["RMSNorm-odd"] == {"hidden=4096", "hidden=4097", "hidden=4100", "hidden=4104"}
    assert series["Softmax-odd"] == {"cols=4096", "cols=4097", "cols=50257", "cols=50264"}
    assert series["Fp8Quant-odd"] == {"hidden=4096", "hidden=4097"}
    assert series["RMSNorm-long"] == {"hidden=65544", "hidden=131072"}


def test_unfused_column_only_where_cases_have_it():
    """The tables show the unfused pair's column (and its speed-up) for fused kernels only."""
    fused = _case("RMSNormQuant", specdsl={"event_us": 50.0}, unfused={"event_us": 80.0})
    plain = _case("RMSNorm", specdsl={"event_us": 100.0})
    text = bench_report.markdown(_results(fused, plain))
    fused_table = text.split("### RMSNormQuant")[1]
    assert "specdsl unfused pair us" in fused_table and "| 1.60x |" in fused_table
    assert "unfused" not in text.split("### RMSNorm\n")[1].split("###")[0]


def test_quick_keeps_two_token_counts_of_the_first_series():
    """--quick keeps tokens 16 and 16384 at the first hidden size of each chosen kernel."""
    chosen = kernels.select(_built_cases(), ("RMSNorm", "SiluMul"), quick=True)
    assert [(c.kernel, c.tokens, c.series) for c in chosen] == [
        ("RMSNorm", 16, "hidden=4096"), ("RMSNorm", 16384, "hidden=4096"),
        ("SiluMul", 16, "d=4096"), ("SiluMul", 16384, "d=4096")]


def test_compile_is_skipped_past_the_budget():
    """A shape reached after --compile-budget-s is not compiled, and the reason says so."""
    args = kernels.parse_args(["--compile-budget-s", "10"])
    case = _built_cases()[0]
    assert kernels.compile_skip(args, case, elapsed=9.0) is None
    assert "--compile-budget-s 10" in kernels.compile_skip(args, case, elapsed=11.0)


def test_compile_tokens_limits_compiled_shapes():
    """--compile-tokens compiles only the named token counts."""
    args = kernels.parse_args(["--compile-tokens", "16384"])
    by_tokens = {c.tokens: c for c in _built_cases() if c.kernel == "SiluMul"}
    assert kernels.compile_skip(args, by_tokens[16384], 0.0) is None
    assert "--compile-tokens" in kernels.compile_skip(args, by_tokens[16], 0.0)


def test_large_shapes_are_measured_first():
    """The measuring order puts 16384 tokens before 1 token."""
    ordered = sorted(_built_cases(), key=kernels.measure_order)
    assert ordered[0].tokens == 16384 and ordered[-1].tokens == 1


# --- harness.py ----------------------------------------------------------------------------

def test_row_picks_keep_first_and_last():
    """Checked rows include the first and the last and are at most CHECK_ROWS."""
    picks = harness.row_picks(16384)
    assert picks[0] == 0 and picks[-1] == 16383 and len(picks) == harness.CHECK_ROWS
    assert harness.row_picks(3) == [0, 1, 2]


def test_describe_error_keeps_the_first_line():
    """An exception becomes 'Type: first line', cut to 160 characters."""
    text = harness.describe_error(RuntimeError("Cannot launch\nTriton details"))
    assert text == "RuntimeError: Cannot launch"
    assert len(harness.describe_error(ValueError("x" * 500))) == 160


def test_graph_count_spans_about_two_milliseconds():
    """Graph captures hold ~2 ms of launches, 8 to 100 of them."""
    assert harness.graph_count(130e-6) == 15
    assert harness.graph_count(2e-6) == 100
    assert harness.graph_count(1e-3) == 8


def test_missing_peer_op_is_unavailable():
    """Liger's missing FP8 op raises Unavailable with the reason."""
    with pytest.raises(harness.Unavailable, match="no FP8"):
        liger_peers.missing("Liger-Kernel has no FP8 quantization")()


# --- bench_report.py -------------------------------------------------------------------------

def test_bandwidth_row_reports_rate_percent_and_speedups():
    """A row shows TB/s, % of the copy rate and peer time / specdsl time."""
    results = _results(_case(specdsl={"event_us": 100.0}, liger={"event_us": 110.0},
                             compile={"event_us": 200.0}, eager={"event_us": 400.0}))
    text = bench_report.markdown(results)
    row = next(line for line in text.splitlines() if line.startswith("| tokens=16384"))
    assert "| 100.0 | 4.00 (100.0%) |" in row
    assert row.endswith("| 1.10x | 2.00x | 4.00x |")


def test_failed_implementation_gets_a_numbered_reason():
    """An implementation's error shows as n/a [n] with the reason listed once below."""
    reason = "RuntimeError: Cannot launch Triton kernel since n = 131072 exceeds 65536."
    results = _results(_case(tokens=1, specdsl={"event_us": 5.0, "graph_us": 2.0},
                             liger={"error": reason}),
                       _case(tokens=16, specdsl={"event_us": 5.0, "graph_us": 2.0},
                             liger={"error": reason}))
    text = bench_report.markdown(results)
    assert text.count(reason) == 1
    assert f"- [1] {reason}" in text
    assert "n/a [1]" in text


def test_unavailable_reason_is_not_wrapped_twice():
    """A reason already written as 'n/a (...)' is listed without the wrapper."""
    results = _results(_case(specdsl={"event_us": 5.0}, liger={"error": "n/a (no module)"}))
    assert "- [1] no module" in bench_report.markdown(results)


def test_goal_lists_large_shapes_under_95_percent():
    """Shapes of 256 MiB or more under 95% of the copy rate are named with their percentage."""
    big = 300 * 2**20
    cases = [_case(tokens=16384, bytes_moved=big, specdsl={"event_us": big / COPY * 1e6 / 0.9}),
             _case(tokens=4096, bytes_moved=big, specdsl={"event_us": big / COPY * 1e6 / 0.97}),
             _case(tokens=16, bytes_moved=2**20, specdsl={"event_us": 5.0})]
    short = bench_report.goal_lines(cases, COPY)[0]
    assert "tokens=16384 hidden=4096 (90.0%)" in short
    assert "tokens=4096" not in short and "tokens=16 " not in short


def test_goal_names_a_faster_peer():
    """A shape where a peer's time is below specdsl's is listed with both times."""
    cases = [_case(specdsl={"event_us": 69.8}, liger={"event_us": 68.9},
                   compile={"event_us": 158.9})]
    faster = bench_report.goal_lines(cases, COPY)[1]
    assert faster == ("- a peer faster than specdsl: RMSNorm tokens=16384 hidden=4096: "
                      "Liger 68.9 us, specdsl 69.8 us.")


def test_small_shapes_show_events_beside_graph_replay():
    """Shapes up to 256 tokens get 'event / graph' cells; larger ones are left out."""
    results = _results(_case(tokens=16, specdsl={"event_us": 5.25, "graph_us": 2.5}),
                       _case(tokens=4096, specdsl={"event_us": 60.0, "graph_us": 57.0}))
    small = bench_report.small_table(results["cases"], bench_report.Footnotes())
    assert len(small) == 3
    assert "| 5.25 / 2.50 |" in small[2] and "| 100.0 / 98.0 |" in small[2]


def test_graph_failure_keeps_the_event_time():
    """A call that could not be captured shows its event time and a graph reason."""
    notes = bench_report.Footnotes()
    small = bench_report.small_table([_case(tokens=1, specdsl={"event_us": 5.0,
                                                               "graph_error": "capture"})],
                                     notes)
    assert "| 5.00 / n/a [1] |" in small[2]
    assert notes.lines()[0] == "[1] graph: capture"


def test_tables_follow_kernel_then_width_then_tokens():
    """Cases measured largest first are tabled by kernel, hidden size, then tokens."""
    cases = [_case("SiluMul", 16384, "d=4096"), _case("RMSNorm", 16384, "hidden=8192"),
             _case("RMSNorm", 1, "hidden=8192"), _case("RMSNorm", 16384, "hidden=4096")]
    ordered = sorted(cases, key=bench_report.case_order)
    assert [(c["kernel"], c["tokens"], c["series"]) for c in ordered] == [
        ("RMSNorm", 16384, "hidden=4096"), ("RMSNorm", 1, "hidden=8192"),
        ("RMSNorm", 16384, "hidden=8192"), ("SiluMul", 16384, "d=4096")]


def test_read_json_refuses_other_files(tmp_path):
    """A JSON file that is not a results file is refused with what was expected."""
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="copy_bytes_per_s"):
        bench_report.read_json(path)


def test_plot_writes_one_png_per_page(tmp_path):
    """--plot draws RMSNorm and its fused form on one rmsnorm.png of 800 x 500 pixels."""
    pytest.importorskip("matplotlib")
    results = _results(*[_case(kernel, tokens, "hidden=4096", specdsl={"event_us": 100.0},
                               eager={"event_us": 150.0})
                         for kernel in ("RMSNorm", "RMSNorm+residual", "Fp8Quant")
                         for tokens in (16, 16384)])
    written = bench_report.plot(results, tmp_path)
    assert sorted(p.name for p in written) == ["fp8_quant.png", "rmsnorm.png"]
    header = (tmp_path / "rmsnorm.png").read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
    assert (width, height) == (800, 500)


def test_from_json_prints_the_tables_last_and_writes_no_table_file(tmp_path, capsys):
    """kernels.py --from-json prints the tables as its last output and leaves --out to the
    charts (the docs point it at docs/kernels/img); a file it cannot read is one error
    line, exit 2."""
    source = tmp_path / "kernels.json"
    results = _results(_case(specdsl={"event_us": 100.0}))
    bench_report.write_json(results, source)
    assert kernels.main(["--from-json", str(source), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.endswith(bench_report.markdown(results) + "\n")
    assert list((tmp_path / "out").iterdir()) == []
    missing = tmp_path / "none.json"
    assert kernels.main(["--from-json", str(missing), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"kernels.py: error: --from-json {missing}: [Errno 2] "
                                       f"No such file or directory: '{missing}'\n")


# --- ncu_targets.py and ncu_report.py --------------------------------------------------------

_HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
           '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
           '"Metric Value"')


def _rows(kernel_id: int, name: str, grid: int, **metrics: tuple[str, str]) -> list[str]:
    metrics = {"launch__grid_size": ("", str(grid)), **metrics}
    return [f'"{kernel_id}","1","python3","h","{name}","1","7","(256, 1, 1)","({grid}, 1, 1)",'
            f'"0","9.0","Command line profiler metrics","{metric}","{unit}","{value}"'
            for metric, (unit, value) in metrics.items()]


def _ncu_csv() -> str:
    lines = ["==PROF== Connected to process 1", _HEADER]
    lines += _rows(0, "vector_add", 1, **{"gpu__time_duration.sum": ("nsecond", "1,024")})
    lines += _rows(1, "rmsnorm", 16384, **{
        "gpu__time_duration.sum": ("nsecond", "65,536"),
        "dram__bytes_read.sum": ("byte", "134,250,000"),
        "dram__bytes_write.sum": ("byte", "134,200,000"),
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "85.5")})
    lines += _rows(2, "vector_add", 2)
    lines += _rows(3, "triton_red_fused_add", 16384, **{
        "gpu__time_duration.sum": ("usecond", "30"),
        "dram__bytes_read.sum": ("Mbyte", "100"), "dram__bytes_write.sum": ("Mbyte", "50"),
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "80")})
    lines += _rows(4, "triton_red_fused_rms_norm", 16384, **{
        "gpu__time_duration.sum": ("usecond", "10"),
        "dram__bytes_read.sum": ("Mbyte", "50"), "dram__bytes_write.sum": ("Mbyte", "40"),
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "40")})
    return "\n".join(lines + ["==PROF== Disconnected from process 1"]) + "\n"


_TARGETS = [
    {"id": 1, "kernel": "RMSNorm", "tokens": 16384, "series": "hidden=4096", "impl": "specdsl",
     "bytes_moved": 268_443_648},
    {"id": 2, "kernel": "RMSNorm", "tokens": 16384, "series": "hidden=4096", "impl": "compile",
     "bytes_moved": 268_443_648},
    {"id": 3, "kernel": "RMSNorm", "tokens": 16384, "series": "hidden=4096", "impl": "liger",
     "bytes_moved": 268_443_648, "error": "ModuleNotFoundError: No module named 'liger_kernel'"},
]


def test_parse_number_reads_separators():
    """ncu's thousands separators and a decimal comma both read right."""
    assert ncu_report.parse_number('"268,435,456"') == 268435456.0
    assert ncu_report.parse_number("65.54") == 65.54
    assert ncu_report.parse_number("9,5") == 9.5


def test_parse_csv_converts_units():
    """Times become seconds and bytes bytes, whatever unit ncu printed."""
    kernels_found = ncu_report.parse_csv(_ncu_csv())
    assert [k["name"] for k in kernels_found] == ["vector_add", "rmsnorm", "vector_add",
                                                  "triton_red_fused_add",
                                                  "triton_red_fused_rms_norm"]
    assert kernels_found[1]["metrics"]["gpu__time_duration.sum"] == pytest.approx(65.536e-6)
    assert kernels_found[3]["metrics"]["dram__bytes_read.sum"] == pytest.approx(100e6)


def test_parse_csv_refuses_an_unknown_unit():
    """A time in a unit the script does not know is an error, not a wrong number."""
    text = "\n".join([_HEADER] + _rows(0, "k", 1, **{"gpu__time_duration.sum": ("fortnight", "1")}))
    with pytest.raises(ValueError, match="fortnight"):
        ncu_report.parse_csv(text)


def test_attribute_sums_the_kernels_after_each_marker():
    """A target's kernels are those between its marker and the next: times and bytes add up."""
    rows = ncu_report.attribute(ncu_report.parse_csv(_ncu_csv()), _TARGETS)
    specdsl, compiled, liger = rows
    assert specdsl["kernels"] == 1 and specdsl["seconds"] == pytest.approx(65.536e-6)
    assert compiled["kernels"] == 2 and compiled["seconds"] == pytest.approx(40e-6)
    assert compiled["dram_read"] + compiled["dram_write"] == pytest.approx(240e6)
    assert compiled["dram_pct"] == pytest.approx((80 * 30 + 40 * 10) / 40)
    assert "seconds" not in liger and "liger_kernel" in liger["error"]


def test_report_table_compares_dram_bytes_with_bytes_moved():
    """The table divides the DRAM bytes by the spec's bytes_moved."""
    text = ncu_report.table(ncu_report.attribute(ncu_report.parse_csv(_ncu_csv()), _TARGETS))
    specdsl_row = next(line for line in text.splitlines() if "| specdsl |" in line)
    assert "| 65.5 | 134.2 + 134.2 | 1.000x |" in specdsl_row
    assert "n/a (ModuleNotFoundError" in text


def test_ncu_command_leaves_clocks_alone():
    """ncu runs with --clock-control none, only the marked range, and every metric."""
    command = ncu_report.ncu_command("ncu", Path("o.csv"), Path("m.json"), ["large"])
    assert command[command.index("--clock-control") + 1] == "none"
    assert command[command.index("--profile-from-start") + 1] == "off"
    assert command[command.index("--metrics") + 1].split(",") == list(ncu_report.METRICS)
    assert command[-3:] == ["--manifest", "m.json", "large"]


def test_report_from_saved_files(tmp_path, capsys):
    """ncu_report.py --csv --manifest prints the table without running ncu."""
    (tmp_path / "ncu.csv").write_text(_ncu_csv())
    (tmp_path / "targets.json").write_text(json.dumps(_TARGETS))
    assert ncu_report.main(["--csv", str(tmp_path / "ncu.csv"), "--manifest",
                            str(tmp_path / "targets.json"), "--out", str(tmp_path)]) == 0
    assert "| RMSNorm | tokens=16384 hidden=4096 | compile | 2 | 40.0 |" in capsys.readouterr().out


def test_ncu_targets_refuse_unknown_groups(capsys):
    """An unknown group or implementation name exits with the known ones."""
    with pytest.raises(SystemExit):
        ncu_targets.parse_args(["huge"])
    assert "large" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ncu_targets.parse_args(["--impls", "specdsl,triton"])
    assert "triton" in capsys.readouterr().err


def test_ncu_large_group_covers_every_builtin_twice():
    """The large group has each kernel of the default run at 16384 x 4096 and 16384 x 8192."""
    found = ncu_targets.GROUPS["large"](None)
    default = [k for k in kernels.kernel_names() if k not in kernels.opt_in_kernels()]
    assert sorted((c.kernel, c.tokens) for c in found) == sorted(
        (k, 16384) for k in default for _ in range(2))


# --- with torch installed: every case's torch version against the reference ---------------

@pytest.fixture(scope="module")
def cpu_torch():
    """torch with device="cuda" dropped and torch.cuda's timing and sync made no-ops."""
    pytest.importorskip("torch")
    import benchfakes

    return benchfakes.CpuTorch()


@pytest.mark.parametrize("kernel", ["RMSNorm", "RMSNorm+residual", "Softmax", "RoPE",
                                    "SiluMul", "Fp8Quant", "RMSNormQuant",
                                    "RMSNormQuant+residual", "SiluMulQuant", "Fp8Quant-group",
                                    "RMSNormQuant-long", "RMSNorm-odd", "Softmax-odd",
                                    "Fp8Quant-odd", "RMSNorm-long"])
def test_torch_version_matches_the_reference(cpu_torch, kernel):
    """Each case's torch eager outputs, at 16 tokens, pass the check against the reference."""
    chosen = [c for m in kernels.case_modules() for c in m.cases(cpu_torch)
              if c.kernel == kernel and c.tokens == 16]
    for case in chosen:
        impls = {"eager": harness.Impl(prepare=case.torch_args, run=case.run_torch)}
        passed, records = harness.check_all(cpu_torch, case, impls)
        assert "eager" in passed, (case.shape, records)


class _RecordingLauncher:
    """Takes launches and runs nothing (the cases' run_specdsl on CPU tensors)."""

    def launch(self, spec, *args, grid, block) -> None:
        self.args = args


def test_outputs_name_what_specdsl_only_writes(cpu_torch):
    """Each case's ``outputs`` (the tensors the timing allocates at each call, as the peers
    do) are tensors its run_specdsl returns; whatever else it returns is an input its torch
    version reads (written in place: the residual, RoPE's q and k). A wrong position would
    time a kernel reading an uninitialized input, or writing into a rotating one."""
    cases = [c for m in kernels.case_modules() for c in m.cases(cpu_torch) if c.tokens == 16]
    cases += variants.EXPERIMENTS["floor"](cpu_torch)
    assert {c.kernel for c in cases} >= {"RMSNorm", "Softmax", "SiluMul", "RoPE", "Fp8Quant",
                                         "RMSNormQuant+residual", "SiluMulQuant", "VectorAdd"}
    for case in cases:
        inputs = case.make_inputs()
        returned = case.run_specdsl(_RecordingLauncher(), inputs)
        positions = {i for i, t in enumerate(inputs) if any(t is r for r in returned)}
        assert set(case.outputs) <= positions, case.shape
        read = case.torch_args(inputs)
        for i in positions - set(case.outputs):
            assert any(inputs[i] is t for t in read), (case.shape, i)
        for i in case.outputs:  # an input would reach the kernel uninitialized
            assert not any(inputs[i] is t for t in read), (case.shape, i)


def test_output_allocation_study_shares_the_first_sets_outputs():
    """output_allocation.py's "one output for all calls" puts the first set's outputs (the
    case's ``outputs``) in every set and leaves the inputs each set's own; every case it
    times names its outputs."""
    import output_allocation

    studied = output_allocation.cases(None)
    assert len(studied) == 10 and all(case.outputs for case in studied)
    sets = [("x0", "r0", "y0"), ("x1", "r1", "y1")]
    assert output_allocation.one_output_for_all(sets, (2,)) == [("x0", "r0", "y0"),
                                                                ("x1", "r1", "y0")]


def test_fresh_outputs_replaces_only_the_named_positions(cpu_torch):
    """fresh_outputs gives new tensors of the same shape and dtype at the positions named,
    and the very same objects elsewhere."""
    inputs = (cpu_torch.randn(4, 8), cpu_torch.empty(4, 8), np.uint32(4))
    assert harness.fresh_outputs(cpu_torch, inputs, ()) is inputs
    fresh = harness.fresh_outputs(cpu_torch, inputs, (1,))
    assert fresh[0] is inputs[0] and fresh[2] is inputs[2] and fresh[1] is not inputs[1]
    assert fresh[1].shape == inputs[1].shape and fresh[1].dtype == inputs[1].dtype


@pytest.mark.parametrize("spec,shapes,written", [
    (RMSNorm(hidden=256, fused_residual=True), [(8, 256), (8, 256), (256,), (8, 256), 8], [3, 1]),
    (RMSNormQuant(hidden=256, scale_mode="group"), [(8, 256), (256,), (8, 256), (8, 2), 8],
     [2, 3]),
    (RMSNormQuant(hidden=256, scale_mode="static"), [(8, 256), (256,), (8, 256), (1,), 8], [2]),
    (Fp8Quant(hidden=256, scale_mode="static_baked", static_scale=0.5), [(8, 256), (8, 256)],
     [1]),
    (Fp8Quant(hidden=256), [(8, 256), (8, 256), (8,)], [1, 2]),
    (SiluMulQuant(d=256, scale_mode="group"), [(8, 512), (8, 256), (8, 2), 8], [1, 2]),
    (Softmax(cols=256), [(8, 256), (8, 256), 8], [1])])
def test_ab_input_sets_fit_the_declared_arrays(cpu_torch, spec, shapes, written):
    """cache_hints.arguments sizes every array as the spec's ``arrays`` declares it for 8
    rows (the scales by scale_mode: a row's, a group's, the one static scale, none), and
    outputs() names the arrays the kernel writes. The A/B scripts launch the texts through
    a spec with no declarations, so a short array there would be written past unchecked."""
    import cache_hints

    args = cache_hints.arguments(cpu_torch, spec, 8)
    assert [a if isinstance(a, np.integer) else tuple(a.shape) for a in args] == shapes
    assert [id(t) for t in cache_hints.outputs(args, spec)] == [id(args[i]) for i in written]


def test_liger_rope_adapter_matches_the_reference(cpu_torch, monkeypatch):
    """Liger's RoPE, given Hugging Face's layout by the adapter, matches the reference."""
    import benchfakes

    benchfakes.install_fake_liger(monkeypatch)
    case = next(c for m in kernels.case_modules() for c in m.cases(cpu_torch)
                if c.kernel == "RoPE" and c.tokens == 16)
    passed, records = harness.check_all(cpu_torch, case, {"liger": case.peers["liger"]()})
    assert "liger" in passed, records


# --- variants.py: issue 15's copy-rate sweep ----------------------------------------------

def test_copy_rate_sweep_times_each_candidate_after_its_default():
    """copy-rate builds (without a GPU) every candidate of RMSNorm, RMSNorm+residual, Softmax
    and RoPE at 16384 tokens x 4096 and 8192 and at 16 tokens, the default request first."""
    cases = variants.experiment_cases("copy-rate", None)
    shapes: dict = {}
    for case in cases:
        shapes.setdefault((case.kernel, case.tokens, case.series.split()[0]), []).append(case)
    for kernel in ("RMSNorm", "RMSNorm+residual", "Softmax", "RoPE"):
        for tokens, widths in ((16384, (4096, 8192)), (16, (4096,))):
            for width in widths:
                first = {"RoPE": f"heads={width // 128}+8x128", "Softmax": f"cols={width}"}.get(
                    kernel, f"hidden={width}")
                found = shapes[(kernel, tokens, first)]
                assert variants.is_default(found[0]) and len(found) >= 2
                assert not any(variants.is_default(c) for c in found[1:])
    assert len(cases) <= 50  # about two minutes a round on an H200


@pytest.mark.parametrize("name", ["two-vector-ctas", "softmax-ctas", "softmax-kept-ctas"])
def test_ctas_sweeps_time_each_count_once(name):
    """A CTA sweep times, for each row, the default request first, then every other count
    from 1024 // block up to 2048 threads an SM, each once, whatever the default picks
    (RMSNorm 5120 defaults to 5, 8192 with l2_evict_last to 4; Softmax 4096 to 7)."""
    rows: dict = {}
    for case in variants.EXPERIMENTS[name](None):
        spec = case.spec
        rows.setdefault(attrs.evolve(spec, min_ctas_per_sm=None), []).append(spec)
    assert len(rows) > 1
    for plain, specs in rows.items():
        defaults = type(plain)(**{f: getattr(plain, f) for f in ("dtype", "l2_evict_last")},
                               **{f: getattr(plain, f) for f in ("hidden", "cols")
                                  if hasattr(plain, f)})
        counts = [spec.min_ctas_per_sm or 1024 // spec.block for spec in specs]
        assert specs[0] == defaults and len(set(specs)) == len(specs), specs
        assert sorted(counts) == list(range(1024 // plain.block, 2048 // plain.block + 1))


def test_experiments_time_each_request_once():
    """A candidate a default has come to equal is not timed again: RMSNormQuant 11520's
    block of before is the dynamic and static scales' default again, so it is timed once,
    against the group mode's 288 threads. Every other request is kept, in order."""
    def request(case):
        return (case.kernel, case.tokens, case.detail, case.spec)

    quant = [(case.shape, case.spec.block)
             for case in variants.experiment_cases("quant-mode-block", None)
             if "11520" in case.shape]
    assert quant == [("tokens=16384 hidden=11520 dynamic", 384),
                     ("tokens=16384 hidden=11520 static", 384),
                     ("tokens=16384 hidden=11520 dynamic block=288 min_ctas_per_sm=3", 288),
                     ("tokens=16384 hidden=11520 static block=288 min_ctas_per_sm=3", 288)]
    for name, build in variants.EXPERIMENTS.items():
        cases = build(None)
        firsts = list(dict.fromkeys(request(case) for case in cases))
        assert [request(case) for case in variants.experiment_cases(name, None)] == firsts


def test_every_case_records_the_request_it_times():
    """Each experiment's case carries its spec, recorded with defaults resolved: the label
    ``hidden=8192 l2_evict_last=True`` names no CTA count, the record does."""
    from harness import request_text

    for name, build in variants.EXPERIMENTS.items():
        if name == "copy-rate":
            continue  # built above; its cases come from the same builders
        for case in build(None):
            assert case.spec is not None and request_text(case).split()[0] == type(
                case.spec).__name__.lower(), (name, case.shape)
    kept = next(case for case in variants.EXPERIMENTS["evict-last"](None)
                if case.shape == "tokens=16384 hidden=8192 l2_evict_last=True")
    assert request_text(kept).endswith("l2_evict_last=true min_ctas_per_sm=4")


def test_copy_rate_row_reports_both_copy_percentages():
    """A row gives the event and graph times, % of the 1 GiB copy's rate, % of a same-size
    copy, Liger's and compile's times where they ran (graph replay too where taken), and the
    request timed."""
    record = {"kernel": "RMSNorm", "tokens": 16, "series": "hidden=4096", "detail": "",
              "request": "rmsnorm hidden=4096",
              "bytes_moved": 400_000_000, "copy": {"event_us": 95.0, "graph_us": 90.0},
              "impls": {"specdsl": {"event_us": 100.0, "graph_us": 92.0},
                        "liger": {"event_us": 110.0}}}
    assert variants.row_cells(record, 4.0e12) == (
        "RMSNorm | tokens=16 hidden=4096 | 100.00 | 92.00 | 100.0 | 95.0 | 95.00 (90.00) | "
        "110.00 | - | rmsnorm hidden=4096 |")
    record["impls"]["compile"] = {"event_us": 105.0, "graph_us": 91.0}
    assert variants.row_cells(record, 4.0e12).endswith(
        "| 110.00 | 105.00 (91.00) | rmsnorm hidden=4096 |")


def _cache_hint_edits() -> list:
    import cache_hints

    from specdsl import render

    edits = []
    for label, spec, _ in cache_hints.CASES:
        ptx = render(spec)
        edits += [(label, name, ptx, text) for name, text in cache_hints.edits(spec, ptx).items()]
    return edits


def test_cache_hint_edits_assemble_without_spills():
    """Every edit ``benchmarks/cache_hints.py`` times assembles with nvJitLink for sm_90,
    without spills, and keeps the built-in's instructions but for its hints (the same count of
    loads and stores): a bad edit fails here, not on the GPU machine."""
    import re

    from specdsl._runtime.compile import compile_ptx

    edits = _cache_hint_edits()
    assert {name for _, name, _, _ in edits} == {
        "round 2", "plain", "evict_last, kept", "evict_first", "evict_last, demoted",
        "stores plain", *(f"evict_last, kept, {n} CTAs" for n in (4, 8))}
    for label, name, built_in, text in edits:
        for resources in compile_ptx(text).resources().values():
            assert resources.spill_stores == 0, (label, name)
        for op in (r"\bld\.global", r"\bst\.global"):
            assert len(re.findall(op, text)) == len(re.findall(op, built_in)), (label, name, op)


def test_cache_hint_kept_edit_is_the_l2_evict_last_request():
    """For RMSNorm, ``evict_last, kept`` is the PTX of the request with ``l2_evict_last=True``
    and the same geometry (at 8192 the field's own default takes 4 CTAs an SM: that is the
    ``4 CTAs`` edit); without the residual, the edit of the built-in text
    (:func:`cache_hints.kept`) gives the same instructions (with it, the edit leaves the
    demotion's dead address arithmetic behind)."""
    import cache_hints

    from specdsl import render
    from specdsl.kernels import RMSNorm

    def instructions(ptx: str) -> list[str]:
        return [line.split("//")[0].strip() for line in ptx.splitlines()
                if line.strip() and not line.strip().startswith("//")]

    for spec in (RMSNorm(hidden=8192), RMSNorm(hidden=4096, fused_residual=True)):
        ptx = render(spec)
        assert cache_hints.edits(spec, ptx)["evict_last, kept"] == render(
            RMSNorm(hidden=spec.hidden, fused_residual=spec.fused_residual, l2_evict_last=True,
                    min_ctas_per_sm=spec.min_ctas_per_sm))
        if not spec.fused_residual:
            assert instructions(cache_hints.kept(ptx)) == instructions(
                cache_hints.edits(spec, ptx)["evict_last, kept"])
    assert cache_hints.edits(RMSNorm(hidden=8192), render(RMSNorm(hidden=8192)))[
        "evict_last, kept, 4 CTAs"] == render(RMSNorm(hidden=8192, l2_evict_last=True))


def test_cache_hint_round_2_edits_restore_the_round_2_hints():
    """``round 2`` puts back what this round removed: .L1::no_allocate on RMSNorm's stores and
    the residual's load (and no policy); Softmax's evict_first policy on x."""
    import cache_hints

    from specdsl import render
    from specdsl.kernels import RMSNorm, Softmax

    fused = cache_hints.round_2(render(RMSNorm(hidden=4096, fused_residual=True)))
    assert "applypriority" not in fused and "createpolicy" not in fused
    assert fused.count("st.global.L1::no_allocate.v4.b32") == 4
    assert fused.count("ld.global.L1::no_allocate.v4.b32 { %q") == 2
    softmax = cache_hints.softmax_variants(render(Softmax(cols=4096)))["round 2"]
    assert "createpolicy.fractional.L2::evict_first.b64 %keep, 1.0;" in softmax
    assert softmax.count("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.b32") == 2


def test_cache_hint_variants_are_requests_of_their_own(tmp_path):
    """Each PTX text becomes its own request (a template file named by its digest), renders
    back as given with the entry renamed, and gets its own derived key."""
    import cache_hints

    from specdsl import derived_key, render
    from specdsl.kernels import RMSNorm

    variant = cache_hints.Variants(tmp_path)
    ptx = render(RMSNorm(hidden=4096, fused_residual=True))
    first, second = variant(ptx), variant(cache_hints.round_2(ptx))
    assert first != second and variant(ptx) == first
    assert derived_key(first) != derived_key(second)
    assert render(first).rstrip() == ptx.replace(".entry rmsnorm(", ".entry variant(").rstrip()


def test_ptx_ab_renders_each_case_at_a_revision(tmp_path):
    """``benchmarks/ptx_ab.py render`` writes each case's PTX as the revision renders it, in
    the order of its cases, with a manifest the time step checks; every text assembles."""
    import shutil
    import subprocess

    import ptx_ab

    from specdsl._runtime.compile import compile_ptx

    root = BENCHMARKS.parent
    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    labels = ptx_ab.render_revision("HEAD", tmp_path)
    assert labels == [label for label, _, _ in ptx_ab.CASES]
    manifest = json.loads((tmp_path / "cases.json").read_text())
    assert manifest["rev"] == "HEAD"
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], text=True,
                          capture_output=True, check=True).stdout.strip()
    assert manifest["commit"] == head
    assert [label for label, _, _ in manifest["cases"]] == labels
    for number, label in enumerate(labels):
        text = (tmp_path / f"{number}.ptx").read_text()
        assert ".visible .entry " in text, label
        assert compile_ptx(text).resources(), label
    worktrees = subprocess.run(["git", "-C", str(root), "worktree", "list"], text=True,
                               capture_output=True, check=True).stdout
    assert "specdsl-ab-" not in worktrees   # the temporary worktree is gone


def test_ptx_ab_revision_renders_its_own_default_for_a_newer_field():
    """The render step's script builds each request from its fields, leaving out those the
    revision's class does not have (RMSNormQuant's min_ctas_per_sm at 5398c81): the
    revision renders its own default there, and the other fields as given."""
    import subprocess

    import ptx_ab

    from specdsl import render

    spec = RMSNormQuant(hidden=7168, scale_mode="group")
    fields = ptx_ab.case_fields(spec)
    assert fields["dtype"] == "bf16" and fields["block"] == 224
    newer = {**fields, "a_field_of_a_later_revision": 3}
    done = subprocess.run([sys.executable, "-c", ptx_ab._RENDER], cwd=BENCHMARKS.parent,
                          input=json.dumps([["case", "RMSNormQuant", newer]]), text=True,
                          capture_output=True, check=True)
    assert json.loads(done.stdout) == {"case": render(spec)}


def test_ptx_ab_time_step_refuses_a_baseline_of_other_cases(tmp_path):
    """The time step stops, before it needs a GPU, on a baseline rendered for other cases."""
    import ptx_ab

    (tmp_path / "cases.json").write_text(json.dumps({"rev": "x", "cases": [["other", "x"]]}))
    with pytest.raises(SystemExit, match="rendered for other cases"):
        ptx_ab.main(["time", "--baseline", str(tmp_path)])


def test_triton_shape_edits_assemble_without_spills():
    """Every edit ``benchmarks/rmsnorm_triton_shape.py`` times assembles with nvJitLink for
    sm_90 without spills, stores y as the built-in does (as many stores), and applies: no
    edit but the built-in gives the built-in's text."""
    import re

    import rmsnorm_triton_shape as shape

    from specdsl import render
    from specdsl._runtime.compile import compile_ptx
    from specdsl.kernels import RMSNorm

    for hidden, hold, reread in shape.SHAPES:
        built_in = render(RMSNorm(hidden=hidden))
        for edits in shape.SETS.values():
            texts = edits(built_in, hold, reread)
            assert [name for name, text in texts.items() if text == built_in] == ["built-in"]
            for name, text in texts.items():
                for resources in compile_ptx(text).resources().values():
                    assert resources.spill_stores == 0, (hidden, name)
                assert len(re.findall(r"\bst\.global", text)) == len(
                    re.findall(r"\bst\.global", built_in)), (hidden, name)


def test_l1_loads_study_pairs_each_request_with_the_field_off_and_on():
    """l1_loads.py times each case twice: the same request but for l1_no_allocate, off then
    on (no device work to build them)."""
    import l1_loads

    found = l1_loads.pairs(None)
    assert len(found) == 5 * len(l1_loads.TOKENS)
    for off, on in found:
        assert (off.spec.l1_no_allocate, on.spec.l1_no_allocate) == (False, True)
        assert attrs.evolve(off.spec, l1_no_allocate=True) == on.spec
        assert (off.kernel, off.tokens, off.bytes_moved) == (on.kernel, on.tokens, on.bytes_moved)


# --- cluster_cost.py: the PTX texts it times -----------------------------------------------


@pytest.mark.parametrize("hidden,split", [(4096, 2), (18432, 8)])
def test_cluster_cost_texts_are_the_steps_they_name(hidden, split):
    """Each text cluster_cost.py times is its own PTX, assembled by nvJitLink, and holds the
    step its label names: its edits of the rendered text found what they replace (a template
    change that moved a comment they match would leave the text unchanged, and the table
    would time the same kernel twice)."""
    import cluster_cost

    from specdsl._runtime.compile import compile_ptx

    texts = {label: text for label, (text, _) in cluster_cost.texts(hidden, split).items()}
    assert len(set(texts.values())) == len(texts) == 10
    steps = {"dynamic, CTA max only": ("barrier.cluster", "::cluster"),
             "dynamic, remote reads": ("ld.shared::cluster",),
             "dynamic, mbarrier, no guard": ("mbarrier.try_wait", "st.shared::cluster"),
             "dynamic, mbarrier": ("mbarrier.try_wait", "barrier.cluster.wait.aligned;\n    ret;"),
             "dynamic, pushed": ("st.shared::cluster",),
             "+ cluster launch": (f".reqnctapercluster {split}, 1, 1",)}
    for label, text in texts.items():
        wanted = steps.get(label, ())
        if label == "dynamic, CTA max only":
            assert not any(step in text for step in wanted), label
        else:
            assert all(step in text for step in wanted), label
        assert "mbarrier" not in text or "mbarrier" in label, label
        compile_ptx(text)


# --- variants.py: edited PTX texts ------------------------------------------------------------


def test_edited_cases_time_their_edit():
    """quant-rcp's edited cases launch a PTX text of their own, assembled by nvJitLink, that
    differs from the case's request in the reciprocal alone; an edit that finds nothing to
    replace is refused (the table would time the same kernel twice)."""
    from specdsl import render
    from specdsl._runtime.compile import compile_ptx

    cases = variants.EXPERIMENTS["quant-rcp"](None)
    edited = [case for case in cases if case.detail.endswith(" rcp.approx")]
    assert len(edited) == len(cases) // 2 == 6
    class Recorder:
        def launch(self, spec, *args, grid, block):
            self.spec = spec

    for case in edited:
        recorder = Recorder()
        case.run_specdsl(recorder, tuple(np.zeros(1) for _ in range(4)))
        text = render(recorder.spec)
        shipped = render(case.spec).replace(".entry silu_mul_quant(", ".entry variant(")
        assert [line for line in text.splitlines() if line not in shipped.splitlines()] == [
            "    rcp.approx.ftz.f32  %inv, %scale;"]
        compile_ptx(text)
    with pytest.raises(ValueError, match=r"rcp\.approx: the edit left"):
        variants._edited(cases[0], "rcp.approx", lambda text: text)
