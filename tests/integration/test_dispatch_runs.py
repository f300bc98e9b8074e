"""Seed 001's emulated scenario (topologies/dispatch.yaml) on a real Mininet network: capacity
kept across three dispatch centers by tickets or not by a shared capacity figure, redirect
after a load report, and a cross-border link cut mid-stream. Everything is checked on what
the agents measured (the media nodes' sessions, the viewers' arrivals) and the controller's
decision records.

Two runs: tickets with hot-standby routes (OpenFlow fast-failover groups), and the baselines,
shared capacity with routes recomputed by the controller after the cut.
"""

from __future__ import annotations

import json
import os

import pytest

from experiments.measurements import read_table
from tests.conftest import ROOT
from tests.integration.conftest import assert_nothing_left, edgebed, only_run_dir
from tests.integration.test_controller_runs import addresses

SCENARIO = ROOT / "topologies" / "dispatch.yaml"
CAPACITY = 3  # streams per media node: the scenario's capacity over the service's demand
CUT_AT = 9.0  # seconds into the timeline: the cn-eu link goes down
DURATION = 14.0
STREAM_AT = 0.5  # the streamer starts
HOT_STANDBY_GAP_S = 1.0
FPS = 25  # the streamer's frames per second
# The media nodes' load reports: one when they start, then only when their sessions pass their
# capacity (an urgent report, seed 004's active notification), never on a period within the
# run. With periodic reports the oversell needed all four cn joins between two of cn1's reports,
# which six viewers' start-ups on a busy machine do not promise; now the report that shows the
# oversell comes because of it, whenever the joins come.
PERIODIC = 'report_period: "${EDGEBED_REPORT_PERIOD:=1s}"'
REPORTS = f'report_period: {2 * DURATION:g}s, report_thresholds: {{sessions: {CAPACITY + 1}}}'


def run(tmp_path, capacity: str, fast_failover: str):
    """One run of the scenario. Each viewer gets one candidate, the node its center admitted
    it to: with several it probes them and confirms the one whose echoes came back first,
    which on a busy machine is chance (cn1 and cn3 are a few milliseconds apart), and a viewer
    that confirms cn3 before pulling takes itself out of the burst on cn1 these runs are
    about. Candidates and confirmation are tested in tests/unit (test_follower,
    test_dispatch_policy). The load reports are REPORTS."""
    runs = tmp_path / capacity
    text = SCENARIO.read_text()
    assert PERIODIC in text
    scenario = tmp_path / f"dispatch-{capacity}.yaml"
    scenario.write_text(text.replace(PERIODIC, REPORTS))
    env = {**os.environ, "EDGEBED_CAPACITY": capacity, "EDGEBED_FAST_FAILOVER": fast_failover,
           "EDGEBED_CUT_AT": f"{CUT_AT}s", "EDGEBED_DURATION": f"{DURATION}s",
           "EDGEBED_CANDIDATES": "1"}
    result = edgebed("run", str(scenario), "--runs-dir", str(runs), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(runs)
    return run_dir, json.loads((run_dir / "summary.json").read_text())


def most_at_once(sessions: list[dict]) -> int:
    """The most sessions a media node served at the same time, from their start and end."""
    events = sorted([(float(s["started_s"]), 1) for s in sessions]
                    + [(float(s["ended_s"]), -1) for s in sessions])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


def concurrency(run_dir) -> dict[str, int]:
    by_node: dict[str, list[dict]] = {}
    for row in read_table(run_dir, "live_sessions"):
        by_node.setdefault(row["node"], []).append(row)
    return {node: most_at_once(rows) for node, rows in by_node.items()}


def outage(run_dir, viewer: str) -> tuple[float, int]:
    """The viewer's longest gap between packets (s) and the packets it lost."""
    address = addresses(run_dir)
    [flow] = [row for row in read_table(run_dir, "flows") if row["node"] == viewer]
    assert address[viewer]  # the viewer is the run's host
    return float(flow["gap_max_ms"]) / 1e3, int(flow["lost"])


def last_whole_frame(run_dir, node: str, before: int | None = None) -> int:
    """The highest source frame number ``node`` got whole (media nodes keep the source's), of
    those numbered below ``before`` when given."""
    return max(int(row["frame"]) for row in read_table(run_dir, "frames")
               if row["node"] == node and row["complete"] == "True"
               and (before is None or int(row["frame"]) < before))


def frames_before_teardown(run_dir, margin_s: float = 1.0) -> int:
    """How many frames the streamer had sent ``margin_s`` before the run's timeline ended and
    teardown stopped the agents (in no set order): by cn0's first arrival, 2 ms after the
    streamer's first frame, and 25 frames a second."""
    summary = json.loads((run_dir / "summary.json").read_text())
    first = min(float(row["time_s"]) for row in read_table(run_dir, "flow_seconds")
                if row["node"] == "cn0")
    return int((summary["timeline_origin_s"] + DURATION - margin_s - first) * FPS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, state_before_module):
    tmp_path = tmp_path_factory.mktemp("dispatch")
    tickets = run(tmp_path, "tickets", "true")
    shared = run(tmp_path, "shared", "false")
    for _, summary in (tickets, shared):
        assert_nothing_left(state_before_module, summary["prefix"])
    return tickets[0], shared[0]


@pytest.fixture(scope="module")
def state_before_module():
    from tests.integration.conftest import SystemState
    return SystemState.now()


def policy_redirects(run_dir) -> list[str]:
    """The policy's own redirects (``flow@server``), as its trace records them: the
    controller's decisions also hold the moves clients asked for by confirming a candidate."""
    return [moved for row in read_table(run_dir, "policy_trace") if row["migrated"]
            for moved in row["migrated"].split(";")]


def test_tickets_prevent_the_oversell_the_shared_capacity_shows(runs):
    tickets, shared = runs
    # The burst of four cn viewers through three centers: with a shared capacity figure each
    # center believes cn1 has room, and cn1 serves four streams at once ...
    assert concurrency(shared)["cn1"] > CAPACITY, concurrency(shared)
    # ... until its load report shows it, and the policy redirects the latest viewer.
    redirects = policy_redirects(shared)
    assert [moved.split("@")[1] for moved in redirects] == ["cn2"], redirects  # the one beyond 3
    origin = json.loads((shared / "summary.json").read_text())["timeline_origin_s"]
    [redirected_at] = [float(row["time"]) for row in read_table(shared, "policy_trace")
                       if row["migrated"]]
    assert redirected_at < origin + CUT_AT, (
        "precondition: the cn viewers joined and pulled before the cut (viewers that start "
        "that slowly need a later EDGEBED_CUT_AT)")
    # With tickets no node ever serves more than its capacity, and the policy redirects
    # nobody: a client that confirms another candidate (its probes found it better; on a busy
    # machine their round trips differ by chance) moves only where its center has a ticket.
    assert max(concurrency(tickets).values()) <= CAPACITY, concurrency(tickets)
    assert not policy_redirects(tickets)
    placed = {row["flow"]: row["server"] for row in read_table(tickets, "decisions")
              if row["kind"] == "place" and row["flow"] != "-"}
    assert len(placed) == 6, placed  # every viewer was served
    assert {placed["cnv1/live"], placed["cnv4/live"]} == {"cn1", "cn2"}  # dcn's one ticket each


def test_a_cross_border_link_cut_mid_stream_resources_the_viewer(runs):
    tickets, shared = runs
    # euv1 pulls from eu1, which gets the stream straight over the cn-eu link until it is cut;
    # the hot-standby route through the us takes over at once.
    gap, lost = outage(tickets, "euv1")
    assert gap < HOT_STANDBY_GAP_S, (gap, lost)
    # The stream ran on well past the cut (cn0, the ingest node, measured it) ...
    [ingest] = [row for row in read_table(tickets, "flows") if row["node"] == "cn0"]
    assert STREAM_AT + float(ingest["duration_s"]) > CUT_AT + 1, ingest
    # ... and euv1 followed it to the end, through eu1, with no second of its stream empty:
    # up to a second before teardown (when the agents stop, in no set order, eu1 may outlive
    # euv1), euv1 got whole the last frame eu1 got whole.
    made = frames_before_teardown(tickets)
    assert last_whole_frame(tickets, "euv1", before=made) >= last_whole_frame(tickets, "eu1",
                                                                           before=made)
    seconds = [row for row in read_table(tickets, "flow_seconds") if row["node"] == "euv1"]
    assert all(int(row["packets"]) > 0 for row in seconds[:-1]), seconds
    recomputed_gap, _ = outage(shared, "euv1")
    assert recomputed_gap > 0  # measured for the report; the controller recomputes the route
