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
SOURCE_BPS = 8e6
LADDER_BPS = (1e6, 2.5e6, 5e6, 8e6)  # the viewers'
TRANSCODED_BPS = 5e6


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


def watched(viewer, *decisions):
    """``viewer``'s ``live_decisions`` and ``frames`` rows: each decision (heard at, edge,
    bitrate, the frames that came on its stream) its own flow, whose frames arrive whole
    ``DELAY_S`` after the source sent each, at the rung the viewer pulls the bitrate at."""
    followed, frames = [], []
    for index, (heard_s, server, bitrate, numbers) in enumerate(decisions):
        flow = f"stream-{index + 1}"
        followed.append({"node": viewer, "time_s": heard_s, "server": server,
                         "bitrate_bps": bitrate, "flow": flow,
                         "migrated": str(index > 0 and decisions[index - 1][1] != server)})
        rung = sum(rate < bitrate for rate in LADDER_BPS)
        frames += [{"node": viewer, "agent": "viewer", "flow": flow, "frame": frame,
                    "frame_type": "I" if frame % GOP == 0 else "P", "rung": rung,
                    "complete": "True", "arrived_s": sent(frame) + DELAY_S}
                   for frame in numbers]
    return followed, frames


def a_run(run_dir, *viewers):
    """A run directory of ``viewers`` (:func:`watched`'s rows), all joined at ``JOINED_S``."""
    run_dir.mkdir()
    names = sorted({row["node"] for followed, _ in viewers for row in followed})
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump({
        "topology": {"nodes": {"streamer1": {"role": "streamer"}, "edge1": {"role": "edge"},
                               "edge2": {"role": "edge"}}
                     | {name: {"role": "viewer"} for name in names}},
        "workload": [{"agent": "streamer",
                      "params": {"fps": FPS, "gop": GOP, "bitrate": "8Mbps"}}]}))
    write_table(run_dir, "frames", [row for _, frames in viewers for row in frames])
    write_table(run_dir, "decisions_followed", [
        {"node": name, "requested_s": JOINED_S} for name in names])
    write_table(run_dir, "live_decisions", [row for followed, _ in viewers for row in followed])
    return run_playout(run_dir)


def test_a_freeze_after_a_switch_is_the_switchs_and_one_elsewhere_is_not(tmp_path):
    # v1 moves as frame 130 would have been sent: 130-139 never come, 140-149 come from the new
    # edge but are P frames decoded from them, so its picture freezes from slot 130 to the I
    # frame 150 (20 slots), 0.6 s after it heard the switch. Later it loses frame 260, a P
    # frame: a freeze 5.8 s after the switch, not the switch's. v2 never moves and loses frame
    # 200, an I frame: its GOP freezes, no switch's either.
    switch_s = sent(130)
    row = a_run(tmp_path / "run",
                watched("v1", (sent(0) - 0.1, "edge1", SOURCE_BPS, range(130)),
                        (switch_s, "edge2", SOURCE_BPS,
                         [n for n in range(140, FRAMES) if n != 260])),
                watched("v2", (sent(0) - 0.1, "edge1", SOURCE_BPS,
                               [n for n in range(FRAMES) if n != 200])))
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
    row = a_run(tmp_path / "run",
                watched("v1", (sent(0) - 0.1, "edge1", SOURCE_BPS,
                               [n for n in range(FRAMES) if n not in range(130, 140)])),
                watched("v2", (sent(0) - 0.1, "edge1", SOURCE_BPS,
                               [n for n in range(FRAMES) if n != 200])))
    assert row["freezes"] == 2
    assert {metric.name: row[metric.name] for metric in SWITCH_METRICS} == {
        metric.name: 0 for metric in SWITCH_METRICS}


def test_a_move_at_a_transcoded_rung_freezes_until_the_new_edges_i_frame(tmp_path):
    # Every frame comes, each once, the new edge's from frame 130 on, mid-GOP. v1 moves at the
    # source's bitrate: both edges pass the source through, so the new edge's P frames go on
    # decoding. v2 moves at a transcoded rung: 130-149 are P frames of the new edge's encoding,
    # whose I frame 100 it never got, so its picture freezes until frame 150, the switch's
    # freeze. v3 moves alike but the old edge sends on until frame 160 (its session outlives
    # the last pull): the player moves to the new edge's encoding at its I frame. v4 stays on
    # its edge and drops a rung at frame 130: a freeze until 150 too, no switch's.
    def moved(viewer, bitrate, old_until=130, server="edge2", new_bitrate=None):
        return watched(viewer, (sent(0) - 0.1, "edge1", bitrate, range(old_until)),
                       (sent(130), server, new_bitrate or bitrate, range(130, FRAMES)))

    row = a_run(tmp_path / "run", moved("v1", SOURCE_BPS), moved("v2", TRANSCODED_BPS),
                moved("v3", TRANSCODED_BPS, old_until=160),
                moved("v4", SOURCE_BPS, server="edge1", new_bitrate=TRANSCODED_BPS))
    assert (row["frames_lost"], row["stalls"]) == (0, 0)
    assert (row["freezes"], row["freeze_ms"]) == (2, pytest.approx(1e3 * 2 * 20 / FPS))
    assert (row["switches"], row["switches_interrupted"]) == (3, 1)
    assert (row["switch_freezes"], row["switch_stalls"]) == (1, 0)
    assert row["switch_freeze_ms"] == pytest.approx(1e3 * 20 / FPS)


def test_frames_on_a_stream_no_decision_names_are_refused(tmp_path):
    followed, frames = watched("v1", (sent(0) - 0.1, "edge1", SOURCE_BPS, range(10)))
    with pytest.raises(ValueError, match=r"frames\.csv: field flow: v1 got frames on stream-9"):
        a_run(tmp_path / "run", (followed, [row | {"flow": "stream-9"} for row in frames]))


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
