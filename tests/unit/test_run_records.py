"""Reading past runs back (runs, compare, report) from directories in the runner's layout.
The integration test tests/integration/test_run_records_runs.py does the same on a real run; here
the tables are written by the agents' own table writer, with known values."""

from __future__ import annotations

import json

from agents.agent import TABLES as TABLE_COLUMNS
from experiments.cli import main
from experiments.runs import RunRecord, compare


def make_run(root, name, status, loss, delay, flagged=False):
    run = root / name
    (run / "tables").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "scenario": "demo", "seed": 1, "status": status, "started": "2026-12-01T10:00:00.000Z",
        "ended": "2026-12-01T10:00:12.500Z", "backends": {}}))
    (run / "summary.json").write_text(json.dumps({
        "status": status, "fidelity": {"ok": not flagged, "flags": ["CPU saturated"] if flagged
                                       else []},
        "processes": [{"node": "v1", "command": "sleep 1", "exit_code": 0, "stopped": "exited",
                       "failed": False}]}))
    flows = dict.fromkeys(TABLE_COLUMNS["flows"], "")
    flows.update(node="viewer1", agent="viewer", flow="video", unique="100", packets="100",
                 loss_fraction=str(loss), delay_mean_ms=str(delay), delay_p99_ms=str(delay + 2),
                 goodput_bps="2000000")
    (run / "tables" / "flows.csv").write_text(",".join(flows) + "\n"
                                              + ",".join(flows.values()) + "\n")
    header = ",".join(TABLE_COLUMNS["flow_seconds"])
    rows = [f"viewer1,viewer,video,{s},{100 - s},{(100 - s) * 1200},{s},{delay + s},0.5"
            for s in range(5)]
    (run / "tables" / "flow_seconds.csv").write_text("\n".join([header, *rows]) + "\n")
    return run


def test_runs_lists_status_duration_and_verdict(tmp_path, capsys):
    make_run(tmp_path, "demo-a", "completed", 0.01, 12.0)
    make_run(tmp_path, "demo-b", "failed", 0.05, 30.0, flagged=True)
    assert main(["runs", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "demo-a" in out and "demo-b" in out and "12.5" in out
    assert "flagged" in out


def test_compare_puts_the_flows_side_by_side(tmp_path, capsys):
    a = make_run(tmp_path, "demo-a", "completed", 0.01, 12.0)
    b = make_run(tmp_path, "demo-b", "completed", 0.05, 30.0)
    joined = compare(RunRecord.read(a), RunRecord.read(b))
    row = joined.iloc[0]
    assert (row["delay_mean_ms_a"], row["delay_mean_ms_b"]) == (12.0, 30.0)
    assert abs(row["loss_fraction_change"] - 0.04) < 1e-9
    assert main(["compare", "demo-a", "demo-b", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1.00%" in out and "5.00%" in out and "30.00" in out


def test_report_has_tables_and_plots(tmp_path, capsys):
    run = make_run(tmp_path, "demo-a", "completed", 0.01, 12.0)
    assert main(["report", str(run)]) == 0
    text = (run / "report" / "report.md").read_text()
    assert "| viewer1 | viewer | video | 100 | 1.00 % | 12.00 |" in text
    for name in ("delay", "loss", "throughput"):
        assert (run / "report" / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["report", str(tmp_path / "none")]) == 2


def test_an_error_naming_a_long_path_stays_on_one_line(tmp_path, capsys):
    # CI's temporary directories are deep: a wrapped message broke the path over two lines
    missing = tmp_path / ("a-directory-name-long-enough-to-pass-the-console-width-" * 2) / "none"
    assert main(["report", str(missing)]) == 2
    assert f"{missing} is not a run directory (no manifest.json)\n" in capsys.readouterr().err
