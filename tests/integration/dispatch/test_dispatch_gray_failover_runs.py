"""Gray failover through the dispatch center on a real Mininet network
(topologies/dispatch/dispatch.yaml): mid-stream the media node cn1, serving cn viewers, stalls
(node_stall: its edge_server stopped, its links and kernel still up, so no carrier is lost and
the switches' fast failover sees nothing) and resumes long after. With gray failover the
centers notice its load reports stopping and move its viewers to healthy nodes; without it
they stay frozen until cn1 resumes. Checked on what the viewers received (their frames
table) and the controller's decision records."""

from __future__ import annotations

import json
import os

import pytest

from experiments.measurements import read_table
from tests.conftest import ROOT
from tests.integration.conftest import assert_nothing_left, edgebed, only_run_dir

SCENARIO = ROOT / "topologies" / "dispatch" / "dispatch.yaml"
STALLED = "cn1"  # the nearest node of the cn viewers: the centers place them there first
STALL_AT, RESUME_AT, DURATION = 8.0, 20.0, 24.0
DETECTION_S = 3.0  # the policy's detection_time
REPORT_PERIOD_S = 1.0  # the media nodes' load reports
FPS, GOP = 25, 50  # the streamer's
# The center sees cn1 silent DETECTION_S after its last report, which came at most one report
# period before the stall; the next report of any node (each reports every period) makes the
# center decide, and the viewer pulls from its new node at once. A GOP over that is the room
# a player waiting for the next I frame would need.
FREEZE_BOUND_S = DETECTION_S + REPORT_PERIOD_S + GOP / FPS
# The schedule of the scenario is replaced by the stall; the media nodes' path probes go (the
# cross-border links' own burst loss would make nodes abroad probe poor now and then, and the
# stall is what is measured here).
CUT = 'schedule:\n'
PATH_PROBES = ",\n             report_paths: [cn0, hk1]"
STALL = (f"schedule:\n  - {{at: {STALL_AT:g}s, action: node_stall, node: {STALLED}}}\n"
         f"  - {{at: {RESUME_AT:g}s, action: node_resume, node: {STALLED}}}\n")


def run(tmp_path, failover: bool):
    name = "on" if failover else "off"
    text = SCENARIO.read_text()
    assert PATH_PROBES in text and text.count(CUT) == 1
    scenario = tmp_path / f"dispatch-gray-{name}.yaml"
    scenario.write_text(text.replace(PATH_PROBES, "").split(CUT)[0] + STALL)
    env = {**os.environ, "EDGEBED_GRAY_FAILOVER": str(failover).lower(),
           "EDGEBED_DETECTION_TIME": f"{DETECTION_S:g}", "EDGEBED_DURATION": f"{DURATION:g}s",
           "EDGEBED_REPORT_PERIOD": f"{REPORT_PERIOD_S:g}s",
           # One candidate each: a viewer stays where its center put it (no probing).
           "EDGEBED_CANDIDATES": "1", "EDGEBED_DATABASE_ERROR_ABROAD": "0"}
    result = edgebed("run", str(scenario), "--runs-dir", str(tmp_path / name), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(tmp_path / name)
    return run_dir, json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    from tests.integration.conftest import SystemState
    before = SystemState.now()
    tmp_path = tmp_path_factory.mktemp("dispatch-gray")
    found = {}
    for failover in (True, False):
        run_dir, summary = run(tmp_path, failover)
        # Nothing of the run is left, stopped or otherwise.
        assert_nothing_left(before, summary["prefix"])
        found[failover] = run_dir
    return found


def viewers_on(run_dir, node: str) -> list[str]:
    """The viewers the centers placed on ``node`` at their join."""
    return sorted(row["flow"].split("/")[0] for row in read_table(run_dir, "decisions")
                  if row["kind"] == "place" and row["server"] == node)


def migrated(run_dir) -> dict[str, str]:
    """Each flow the policy moved, to the node it moved it to (its last move)."""
    return dict(moved.split("@") for row in read_table(run_dir, "policy_trace")
                if row["migrated"] for moved in row["migrated"].split(";"))


def freeze(run_dir, viewer: str) -> tuple[float, str, str]:
    """The viewer's longest wait between two whole frames from a second before the stall to
    the end, with the stream (flow) of the frame before and after it: a new stream id is a
    pull from another node."""
    origin = json.loads((run_dir / "summary.json").read_text())["timeline_origin_s"]
    frames = sorted((float(row["arrived_s"]), row["flow"]) for row in read_table(run_dir, "frames")
                    if row["node"] == viewer and row["complete"] == "True"
                    and float(row["arrived_s"]) >= origin + STALL_AT - 1)
    assert len(frames) > 1, f"{viewer} got no frames around the stall"
    gap, before, after = max((b[0] - a[0], a[1], b[1]) for a, b in zip(frames, frames[1:]))
    return gap, before, after


def test_the_center_moves_a_stalled_nodes_viewers_within_detection_and_a_gop(arms):
    on, off = arms[True], arms[False]
    stranded = viewers_on(on, STALLED)
    assert stranded, f"precondition: the centers placed viewers on {STALLED}"
    assert viewers_on(off, STALLED), f"precondition: {STALLED} serves viewers without failover"
    moves = migrated(on)
    for viewer in stranded:
        # The decision was recorded: the viewer's flow moved off the stalled node ...
        assert moves.get(f"{viewer}/live", STALLED) != STALLED, (viewer, moves)
        # ... and the viewer froze no longer than the detection allows, the frames after the
        # freeze coming from its new node.
        gap, before, after = freeze(on, viewer)
        print(f"\n{viewer} on {STALLED} stalled: gray failover on, frozen {gap:.2f} s "
              f"(bound {FREEZE_BOUND_S:g} s)")
        assert gap <= FREEZE_BOUND_S, (viewer, gap)
        assert after != before, (viewer, before, after)
    assert not migrated(off)  # without gray failover the center moves nobody
    for viewer in viewers_on(off, STALLED):
        gap, _, _ = freeze(off, viewer)
        print(f"{viewer} on {STALLED} stalled: gray failover off, frozen {gap:.2f} s")
        # Frozen until cn1 resumed (RESUME_AT - STALL_AT = 12 s): far past the bound.
        assert gap > FREEZE_BOUND_S, (viewer, gap)
