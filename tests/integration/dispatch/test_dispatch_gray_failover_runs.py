"""Gray failover through the dispatch center on a real Mininet network
(topologies/dispatch/dispatch.yaml), each against the same run without it:

* mid-stream the media node cn1, serving cn viewers, stalls (node_stall: its edge_server
  stopped, its links and kernel still up, so no carrier is lost and the switches' fast
  failover sees nothing) and resumes long after. With gray failover the centers notice its
  load reports stopping and move its viewers to healthy nodes; without it they stay frozen
  until cn1 resumes;
* the direct cn-us link's burst loss ramps up (3%, 9%, 14% mean): us1's path from the origin probes
  poor, and with gray failover the center puts usv1's stream on the standby route's relay
  hk1 (cn-hk-us); without it (and without the relay insertion, which reacts to one poor
  report) usv1 stays on the lossy path.

Checked on what the viewers received (their frames table) and the controller's decision
records."""

from __future__ import annotations

import json
import os

import pytest

from experiments import scenarios
from experiments.measurements import read_table
from tests.conftest import ROOT
from tests.integration.conftest import assert_nothing_left, edgebed, only_run_dir
from topologies.loader import load_scenario_file

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
# The schedule of the scenario is replaced by the stall or the loss ramp (the scenario derived
# for each arm, experiments.scenarios.derive). For the stall the media nodes' path probes go
# (the cross-border links' own burst loss would make nodes abroad probe poor now and then, and
# the stall is what is measured there).
STALL = [{"at": f"{STALL_AT:g}s", "action": "node_stall", "node": STALLED},
         {"at": f"{RESUME_AT:g}s", "action": "node_resume", "node": STALLED}]
# The cn-us link's Gilbert-Elliott p, r staying 30%: mean loss 3.2%, 9.1%, 14.3% each way.
RAMP = [(STALL_AT, "1%"), (STALL_AT + 1, "3%"), (STALL_AT + 2, "5%")]
LOSSY = "cn:eth21"
RAMPED = [{"at": f"{at:g}s", "action": "set", "link": LOSSY, "set": {"burst": {"p": p, "r": "30%"}}}
          for at, p in RAMP]
ABROAD, RELAYED_NODE, RELAY = "usv1/live", "us1", "hk1"


def without_path_probes(workload: list[dict]) -> list[dict]:
    """``workload`` with no agent probing paths."""
    return [{**entry, "params": {name: value for name, value in entry.get("params", {}).items()
                                 if name != "report_paths"}} for entry in workload]


def run(tmp_path, failover: bool, schedule: list[dict] = STALL):
    name = ("on" if failover else "off") + ("-stall" if schedule == STALL else "-ramp")
    env = {**os.environ, "EDGEBED_GRAY_FAILOVER": str(failover).lower(),
           # The relay insertion moves a flow on one poor report: off here, so that only
           # gray failover (or nothing) reacts to the ramp.
           "EDGEBED_RELAYS": "false",
           "EDGEBED_DETECTION_TIME": f"{DETECTION_S:g}", "EDGEBED_DURATION": f"{DURATION:g}s",
           "EDGEBED_REPORT_PERIOD": f"{REPORT_PERIOD_S:g}s",
           # One candidate each: a viewer stays where its center put it (no probing).
           "EDGEBED_CANDIDATES": "1", "EDGEBED_DATABASE_ERROR_ABROAD": "0"}
    changes: dict[str, object] = {"schedule": schedule}
    if schedule == STALL:
        data, _ = load_scenario_file(SCENARIO, env)
        changes["workload"] = without_path_probes(data["workload"])
    scenario = tmp_path / f"dispatch-gray-{name}.yaml"
    scenarios.derive(SCENARIO, scenario, changes, env)
    result = edgebed("run", str(scenario), "--runs-dir", str(tmp_path / name), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(tmp_path / name)
    return run_dir, json.loads((run_dir / "summary.json").read_text())


def both_arms(tmp_path_factory, schedule: list[dict]) -> dict[bool, object]:
    """The run with gray failover (True) and without (False); nothing of either is left,
    stopped or otherwise."""
    from tests.integration.conftest import SystemState
    before = SystemState.now()
    tmp_path = tmp_path_factory.mktemp("dispatch-gray")
    found = {}
    for failover in (True, False):
        run_dir, summary = run(tmp_path, failover, schedule)
        assert_nothing_left(before, summary["prefix"])
        found[failover] = run_dir
    return found


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    return both_arms(tmp_path_factory, STALL)


@pytest.fixture(scope="module")
def ramped(tmp_path_factory):
    return both_arms(tmp_path_factory, RAMPED)


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


def incomplete_share(run_dir, node: str, since_s: float) -> tuple[float, int]:
    """The share of ``node``'s frames that arrived incomplete from ``since_s`` into the
    timeline to a second before its end, and how many frames arrived then."""
    origin = json.loads((run_dir / "summary.json").read_text())["timeline_origin_s"]
    frames = [row["complete"] == "True" for row in read_table(run_dir, "frames")
              if row["node"] == node
              and origin + since_s <= float(row["arrived_s"]) <= origin + DURATION - 1]
    assert frames, f"{node} got no frames after {since_s:g} s"
    return 1 - sum(frames) / len(frames), len(frames)


def test_a_lossy_path_puts_the_stream_on_the_standby_routes_relay(ramped):
    on, off = ramped[True], ramped[False]
    viewer = ABROAD.split("/")[0]
    for run_dir in (on, off):
        assert viewers_on(run_dir, RELAYED_NODE) == [viewer], "precondition: usv1 on us1"
    # The center gave usv1's flow the chain through hk1 (the origin and the relay followed it);
    # without gray failover nobody touched it.
    relayed = {node: [row for row in read_table(on, "decisions_followed")
                      if row["node"] == node and row["flow"] == ABROAD
                      and row["via"] == f"cn0;{RELAY}"] for node in ("cn0", RELAY)}
    assert all(relayed.values()), relayed
    assert migrated(on).get(ABROAD) == RELAYED_NODE
    assert ABROAD not in migrated(off)
    # Once the ramp is at its top and the center has had its detection time, a report period
    # and a GOP to act, us1 gets the stream's frames whole through the relay; on the direct
    # path a 14% loss breaks many five-packet frames. Measured where the stream enters us1:
    # the node passes on what it got, and its viewer's copy of a frame damaged on the way in
    # is damaged too, however whole the node's repackaging makes it look.
    since = RAMP[-1][0] + FREEZE_BOUND_S
    relayed_share, relayed_count = incomplete_share(on, RELAYED_NODE, since)
    direct_share, direct_count = incomplete_share(off, RELAYED_NODE, since)
    print(f"\n{RELAYED_NODE} frames incomplete from {since:g} s: gray failover on "
          f"{relayed_share:.1%} of {relayed_count}, off {direct_share:.1%} of {direct_count}")
    assert relayed_share < direct_share / 2, (relayed_share, direct_share)
