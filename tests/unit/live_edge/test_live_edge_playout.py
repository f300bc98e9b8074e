"""The live_edge emulated kind's playout columns, without Mininet: every viewer's player from
the frames its tables say it got (built here by hand), and the stalls and freezes a server
switch is answered for (those that began within the window after the viewer heard it)."""

from __future__ import annotations

import csv

import pandas as pd
import pytest
import yaml

from experiments.kinds.live_edge.emulation_measures import run_playout
from experiments.kinds.live_edge.emulation_remarks import playout_table
from experiments.playout_columns import PLAYOUT_BUFFER_S, SWITCH_METRICS, SWITCH_WINDOW_S

FPS = 25
GOP = 50
ORIGIN = 100.0  # when frame 0 was sent (epoch seconds)
DELAY_S = 0.1
JOINED_S = ORIGIN - 0.2
FRAMES = 300


def write_table(run_dir, name, rows):
    (run_dir / "tables").mkdir(parents=True, exist_ok=True)
    with open(run_dir / "tables" / f"{name}.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def sent(frame):
    return ORIGIN + frame / FPS


def due(frame):
    """When a frame's slot comes, for a viewer that started on frame 0 and never stalled."""
    return sent(0) + DELAY_S + PLAYOUT_BUFFER_S + frame / FPS


def frame_rows(viewer, streams, rungs=None):
    """``viewer``'s ``frames`` rows: each stream (flow -> frame numbers), at its rung in
    ``rungs`` (flow -> rung; rung 0 unless said), arriving whole ``DELAY_S`` after the source
    sent each frame."""
    rungs = rungs or {}
    return [{"node": viewer, "agent": "viewer", "flow": flow, "frame": frame,
             "frame_type": "I" if frame % GOP == 0 else "P", "rung": rungs.get(flow, 0),
             "complete": "True", "arrived_s": sent(frame) + DELAY_S}
            for flow, numbers in streams.items() for frame in numbers]


def a_run(run_dir, frames, decisions):
    """A run directory of two viewers (v1, v2) with ``frames`` rows and ``live_decisions``
    ``decisions`` (viewer, heard at, moved)."""
    run_dir.mkdir()
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump({
        "topology": {"nodes": {"streamer1": {"role": "streamer"}, "edge1": {"role": "edge"},
                               "v1": {"role": "viewer"}, "v2": {"role": "viewer"}}},
        "workload": [{"agent": "streamer", "params": {"fps": FPS, "gop": GOP}}]}))
    write_table(run_dir, "frames", frames)
    write_table(run_dir, "decisions_followed", [
        {"node": viewer, "requested_s": JOINED_S} for viewer in ("v1", "v2")])
    write_table(run_dir, "live_decisions", [
        {"node": viewer, "time_s": at, "server": "edge1", "migrated": str(moved)}
        for viewer, at, moved in decisions])
    return run_playout(run_dir)


def test_a_freeze_after_a_switch_is_the_switchs_and_one_elsewhere_is_not(tmp_path):
    # v1 moves as frame 130 would have been sent: 130-139 never come, 140-149 come from the new
    # edge but are P frames decoded from them, so its picture freezes from slot 130 to the I
    # frame 150 (20 slots), 0.6 s after it heard the switch. Later it loses frame 260, a P
    # frame: a freeze 5.8 s after the switch, not the switch's. v2 never moves and loses frame
    # 200, an I frame: its GOP freezes, no switch's either.
    switch_s = sent(130)
    frames = (frame_rows("v1", {"stream-1": range(130),
                                "stream-2": [n for n in range(140, FRAMES) if n != 260]})
              + frame_rows("v2", {"stream-1": [n for n in range(FRAMES) if n != 200]}))
    row = a_run(tmp_path / "run", frames, [("v1", sent(0) - 0.1, False), ("v1", switch_s, True),
                                           ("v2", sent(0) - 0.1, False)])
    assert due(130) - switch_s == pytest.approx(PLAYOUT_BUFFER_S + DELAY_S)
    assert PLAYOUT_BUFFER_S + DELAY_S < SWITCH_WINDOW_S
    assert due(260) - switch_s > SWITCH_WINDOW_S
    assert (row["switches"], row["switches_interrupted"]) == (1, 1)
    assert (row["switch_freezes"], row["switch_stalls"]) == (1, 0)
    assert row["switch_freeze_ms"] == pytest.approx(1e3 * 20 / FPS)
    assert row["switch_stall_ms"] == 0
    # The run's playout, all views: three freezes (v1's two, v2's GOP), nothing stalled.
    assert (row["freezes"], row["stalls"]) == (3, 0)
    assert row["freeze_ms"] == pytest.approx(1e3 * (20 + 40 + 50) / FPS)
    assert row["frames_lost"] == 10 + 1 + 1 and row["frames_watched"] == 2 * FRAMES
    assert row["startup_mean_ms"] == pytest.approx(1e3 * (due(0) - JOINED_S))
    assert row["freeze_share_pct"] == pytest.approx(100 * 110 / (2 * FRAMES))


def test_a_run_with_no_switch_answers_no_stall_or_freeze_to_one(tmp_path):
    # The same losses, both viewers staying on their first edge all along.
    frames = (frame_rows("v1", {"stream-1": [n for n in range(FRAMES) if n not in
                                             range(130, 140)]})
              + frame_rows("v2", {"stream-1": [n for n in range(FRAMES) if n != 200]}))
    row = a_run(tmp_path / "run", frames, [("v1", sent(0) - 0.1, False),
                                           ("v2", sent(0) - 0.1, False)])
    assert row["freezes"] == 2
    assert {metric.name: row[metric.name] for metric in SWITCH_METRICS} == {
        metric.name: 0 for metric in SWITCH_METRICS}


def test_a_change_of_rung_freezes_and_a_move_at_the_same_rung_does_not(tmp_path):
    # v1 stays on its edge and moves from rung 2 to rung 1 at frame 130, mid-GOP: every frame
    # comes, but 130-149 are P frames of rung 1, whose I frame 100 it never got. v2 moves to
    # another edge at frame 130 at the same rung: the new edge's frames go on decoding.
    frames = (frame_rows("v1", {"stream-1": range(130), "stream-2": range(130, FRAMES)},
                         {"stream-1": 2, "stream-2": 1})
              + frame_rows("v2", {"stream-1": range(130), "stream-2": range(130, FRAMES)},
                           {"stream-1": 2, "stream-2": 2}))
    row = a_run(tmp_path / "run", frames, [("v1", sent(0) - 0.1, False),
                                           ("v1", sent(130), False),
                                           ("v2", sent(0) - 0.1, False),
                                           ("v2", sent(130), True)])
    assert (row["freezes"], row["stalls"], row["frames_lost"]) == (1, 0, 0)
    assert row["freeze_ms"] == pytest.approx(1e3 * 20 / FPS)
    # v1's change of rung is no server switch; v2's switch froze nothing.
    assert (row["switches"], row["switches_interrupted"], row["switch_freezes"]) == (1, 0, 0)


def test_the_playout_table_sums_the_runs_and_gives_the_switches_share(tmp_path):
    def run(policy, repetition, **figures):
        return {"policy": policy, "repetition": repetition, "startup_mean_ms": 700.0,
                "freezes": 3, "freeze_share_pct": 10.0, "frames_lost": 12,
                "frames_watched": 600, "stalls": 1, "stall_ms": 200.0, "freeze_ms": 1800.0,
                "switches": 1, "switches_interrupted": 1, "switch_stalls": 0,
                "switch_stall_ms": 0.0, "switch_freezes": 1, "switch_freeze_ms": 1000.0
                } | figures

    cells = pd.DataFrame([run("lua", 0), run("lua", 1, startup_mean_ms=900.0),
                          run("df", 0, switches=0, switches_interrupted=0, switch_freezes=0,
                              switch_freeze_ms=0.0, stall_ms=0.0, freeze_ms=0.0)])
    table = playout_table([("s, G = 400", cells, ["lua", "df"])])
    assert table.rows == (
        ("s, G = 400", "lua", "2", "800", "6", "10.0%", "24 of 1200", "2", "2", "2", "2",
         "2000", "50%"),
        ("s, G = 400", "df", "1", "700", "3", "10.0%", "12 of 600", "1", "0", "0", "0", "0",
         "n/a")), table.rows
