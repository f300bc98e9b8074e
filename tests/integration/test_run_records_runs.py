"""The verbs that read past runs, on a real run of the default scenario: ``edgebed runs``,
``edgebed compare`` and ``edgebed report`` (markdown and PNG plots), and ``--version``."""

from __future__ import annotations

import json

from tests.conftest import ROOT
from tests.integration.conftest import assert_nothing_left, edgebed, only_run_dir


def test_runs_compare_and_report_read_a_real_run(tmp_path, state_before):
    runs = tmp_path / "runs"
    result = edgebed("run", str(ROOT / "topologies" / "demo.yaml"), "--duration", "6s",
                     "--runs-dir", str(runs))
    assert result.returncode == 0, result.stdout + result.stderr
    run = only_run_dir(runs)
    assert_nothing_left(state_before, json.loads((run / "manifest.json").read_text())["prefix"])

    listing = edgebed("runs", "--runs-dir", str(runs))
    assert listing.returncode == 0, listing.stderr
    assert run.name in listing.stdout and "completed" in listing.stdout
    assert "demo" in listing.stdout

    compared = edgebed("compare", str(run), run.name, "--runs-dir", str(runs))
    assert compared.returncode == 0, compared.stderr
    assert "viewer1" in compared.stdout and "flows (A → B" in compared.stdout

    reported = edgebed("report", run.name, "--runs-dir", str(runs))
    assert reported.returncode == 0, reported.stderr
    text = (run / "report" / "report.md").read_text()
    assert "## Flows" in text and "viewer1" in text
    for name in ("delay", "loss", "throughput"):
        png = run / "report" / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert f"plots/{name}.png" in text

    missing = edgebed("report", str(tmp_path / "nothing-here"))
    assert missing.returncode == 2 and "not a run directory" in missing.stderr
    version = edgebed("--version")
    assert version.returncode == 0 and version.stdout.startswith("edgebed ")
