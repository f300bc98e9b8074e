"""Time dilation on real runs: the same scenario at N = 1 and N = 4 reads alike in virtual time.

A 2 Mbit/s stream crosses a link with 20 ms of delay and 2 % loss. Each run's figures are its
own tables (virtual time); the checks compare them with the configuration and with each other,
within what each run's own lateness accounts for, never against the test's wall clock (only a
lower bound: a run dilated N times cannot end in less than N times its duration)."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

from agents.probe import loss_interval
from experiments.cli_output import EXIT_NOT_READY
from experiments.dilation_choice import CALIBRATION_DIR, FACTORS
from experiments.measurements import read_table
from tests.integration.conftest import (SINGLE_SHOT_CONFIDENCE, assert_nothing_left, edgebed,
                                        emulator_made, only_run_dir)
from tests.integration.test_agent_runs import assert_verdict_matches_timing

DELAY_MS = 20.0
LOSS = 0.02
DURATION_S = 5.0
STREAM = f"""
name: dilation
duration: {DURATION_S:g}s
seed: 7
topology:
  subnet: 10.7.3.0/24
  nodes:
    streamer1: {{role: streamer}}
    viewer1: {{role: viewer}}
    s1: {{role: switch}}
  links:
    - endpoints: ["streamer1:eth1", "s1:eth1"]
    - endpoints: ["viewer1:eth1", "s1:eth2"]
      reverse: {{delay: {DELAY_MS:g}ms, loss: {LOSS:.0%}}}   # s1 -> viewer1
workload:
  - agent: viewer
    nodes: [viewer1]
    params: {{port: 5004}}
  - agent: streamer
    nodes: [streamer1]
    start: 0.5s
    params: {{to: viewer1, bitrate: 2Mbps, fps: 30, gop: 30, duration: 4s}}
"""


def _run(tmp_path, dilation: int):
    path = tmp_path / "scenario.yaml"
    path.write_text(textwrap.dedent(STREAM))
    runs = tmp_path / f"runs-{dilation}"
    began = time.monotonic()
    result = edgebed("run", str(path), "--runs-dir", str(runs), "--dilate", str(dilation),
                     timeout=600)
    took_s = time.monotonic() - began
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(runs)
    summary = json.loads((run_dir / "summary.json").read_text())
    media = {row["agent"]: row for row in read_table(run_dir, "flows")}["viewer"]
    return run_dir, summary, media, took_s


def _lateness_ms(summary: dict, media: dict, dilation: int) -> float:
    """What the wire counted as its own lateness per media packet, in virtual ms (the wire
    counts real microseconds)."""
    wire = summary["wires"].get("1")
    if not wire:
        return 0.0
    return wire["reverse"]["late_us"]["sum"] / int(media["unique"]) / 1e3 / dilation


def test_a_run_at_four_times_dilation_reads_like_one_undilated(tmp_path, state_before):
    runs = {n: _run(tmp_path, n) for n in (1, 4)}
    for n, (run_dir, summary, media, took_s) in runs.items():
        assert summary["time_dilation"] == n
        assert json.loads((run_dir / "manifest.json").read_text())["time_dilation"] == n
        assert took_s >= n * DURATION_S
        lost, received = int(media["lost"]), int(media["unique"])
        sent = lost + received
        assert sent > 700  # 2 Mbit/s for 4 s of ~1200-byte packets is ~850
        unasked = emulator_made(summary, (1, "reverse"))
        low, _ = loss_interval(max(0, lost - unasked), sent, SINGLE_SHOT_CONFIDENCE)
        _, high = loss_interval(lost, sent, SINGLE_SHOT_CONFIDENCE)
        assert low <= LOSS <= high, (n, lost, unasked, sent)
        delay = float(media["delay_mean_ms"])
        # No packet leaves the wire before its delay, in virtual time too.
        assert delay >= DELAY_MS, (n, delay)
        assert_verdict_matches_timing(summary["fidelity"], float(media["delay_p99_ms"]),
                                      DELAY_MS)
        assert_nothing_left(state_before, summary["prefix"])
    (_, plain, plain_media, _), (_, dilated, dilated_media, _) = runs[1], runs[4]
    # The mean delays agree within max(0.5 ms, 2 %), plus what each wire counted late.
    slack = (max(0.5, 0.02 * DELAY_MS) + _lateness_ms(plain, plain_media, 1)
             + _lateness_ms(dilated, dilated_media, 4))
    assert abs(float(dilated_media["delay_mean_ms"])
               - float(plain_media["delay_mean_ms"])) <= slack, (plain_media, dilated_media)
    # Goodput in virtual time: within 3 %, the loss's draws apart.
    plain_goodput, dilated_goodput = (float(plain_media["goodput_bps"]),
                                      float(dilated_media["goodput_bps"]))
    assert abs(dilated_goodput - plain_goodput) <= 0.03 * plain_goodput, (plain_goodput,
                                                                          dilated_goodput)
    # Ping keeps real time: its round trips are given in the run's time.
    for summary in (plain, dilated):
        rtt = summary["reachability"][0]["rtt_avg_ms"]
        assert DELAY_MS <= rtt < 3 * DELAY_MS, rtt


def test_auto_dilation_runs_at_the_first_factor_whose_calibration_run_was_clean(tmp_path,
                                                                                state_before):
    path = tmp_path / "scenario.yaml"
    path.write_text(textwrap.dedent(STREAM))
    runs = tmp_path / "runs"
    result = edgebed("run", str(path), "--runs-dir", str(runs), "--dilate", "auto",
                     "--duration", "2s", timeout=1200)
    calibrations = sorted((json.loads((run / "summary.json").read_text())
                           for run in (runs / CALIBRATION_DIR).iterdir()),
                          key=lambda summary: summary["time_dilation"])
    # Whichever factor this machine needed (a machine busy with other work may need more than
    # any): every calibration run before the last was flagged, and each went at the next
    # factor.
    assert [c["time_dilation"] for c in calibrations] == list(FACTORS[:len(calibrations)])
    assert not any(c["fidelity"]["ok"] for c in calibrations[:-1])
    runs_made = [path for path in runs.iterdir() if path.name != CALIBRATION_DIR]
    if not calibrations[-1]["fidelity"]["ok"]:
        # None was clean: the command refuses to run, names where the calibrations are, and
        # runs nothing else.
        assert len(calibrations) == len(FACTORS) and result.returncode == EXIT_NOT_READY, result.stdout
        errors = "".join(result.stderr.split())  # the console may wrap the message
        assert f"notimedilationupto{FACTORS[-1]}keptacalibrationrunclean" in errors
        assert str(runs / CALIBRATION_DIR) in errors
        assert runs_made == []
        for calibration in calibrations:
            assert_nothing_left(state_before, calibration["prefix"])
        return
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = runs_made
    summary = json.loads((run_dir / "summary.json").read_text())
    trials = summary["calibration"]
    assert [(t["time_dilation"], t["clean"]) for t in trials] == [
        (c["time_dilation"], c["fidelity"]["ok"]) for c in calibrations]
    assert summary["time_dilation"] == trials[-1]["time_dilation"]
    for trial in trials:
        assert Path(trial["run_dir"]).parent == runs / CALIBRATION_DIR
    assert f"time dilation {trials[-1]['time_dilation']:g}: clean" in result.stdout
    assert_nothing_left(state_before, summary["prefix"])
