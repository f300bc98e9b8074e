"""A batch of simultaneous access requests on a real Mininet network
(topologies/ai_access/ai_joins.yaml): one terminal agent sends 30 joins at once through the
control protocol, ADGA in the controller decides them, the controller installs each flow's
steering and answers, and each flow sends its units to the receive port it was given.

Checked on what was recorded: every join got an answer and a grant, every join was decided
once by the policy, each flow's units reached the server and port it was granted (the
decision installed), units were accepted, and the response time the kind computes for each
flow is from its request to the completion of its first accepted unit (a unit can complete
only after the grant that let it be sent). Nothing is timed.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from experiments.kinds.ai_access.joins import join_outcomes, placing_calls, run_figures
from experiments.kinds.ai_access.emulation import moves
from experiments.measurements import read_table
from tests.conftest import ROOT
from tests.integration.conftest import SystemState, assert_nothing_left, edgebed, only_run_dir

SCENARIO = ROOT / "topologies" / "ai_access" / "ai_joins.yaml"
JOINS = 30
SERVERS = ("ar1", "ar2", "ar3")
RECEIVE_PORTS = {"ar1": {"6100", "6102"}, "ar2": {"6100"}, "ar3": {"6100", "6102"}}


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    before = SystemState.now()
    runs = tmp_path_factory.mktemp("ai_joins")
    env = {**os.environ, "EDGEBED_JOINS": str(JOINS), "EDGEBED_DURATION": "12s",
           "EDGEBED_POLICY": "ai_adga"}
    result = edgebed("run", str(SCENARIO), "--runs-dir", str(runs), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(runs)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert_nothing_left(before, summary["prefix"])
    return run_dir


def test_every_join_of_the_batch_is_answered_granted_and_decided_once(joined):
    outcomes = join_outcomes(joined)
    assert len(outcomes) == JOINS and len({o["stream"] for o in outcomes}) == JOINS
    assert all(o["answered"] and o["server"] in SERVERS and o["grant_ms"] >= 0
               for o in outcomes), outcomes
    assert sum(placing_calls(joined)) == JOINS
    placed = Counter(move["flow"] for move in moves(joined) if move["kind"] == "place")
    assert sorted(placed) == sorted(o["flow"] for o in outcomes)
    assert set(placed.values()) == {1}


def test_each_flow_s_units_reach_the_server_it_was_granted_on_one_of_its_ports(joined):
    granted = {str(row["stream"]): (row["server"], row["port"])
               for row in read_table(joined, "ai_joins")}
    arrived = {(row["stream"], row["node"]) for row in read_table(joined, "ai_units")
               if row["agent"] == "ai_receiver"}
    assert arrived and all(granted[stream][0] == node for stream, node in arrived), arrived
    # Each grant names one of its server's receive ports (the scenario's `ports` labels).
    assert all(port in RECEIVE_PORTS[server] for server, port in granted.values()), granted


def test_the_response_time_runs_from_the_request_to_the_first_accepted_unit(joined):
    requested = {int(row["stream"]): float(row["requested_s"])
                 for row in read_table(joined, "ai_joins")}
    completed: dict[int, list[float]] = {}
    for row in read_table(joined, "ai_units"):
        if row["agent"] == "ai_receiver" and row["complete"] == "1":
            completed.setdefault(int(row["stream"]), []).append(float(row["completed_s"]))
    assert completed, "no unit was accepted"
    outcomes = {o["stream"]: o for o in join_outcomes(joined)}
    for stream, outcome in outcomes.items():
        if stream not in completed:
            assert outcome["response_ms"] is None
            continue
        expected = (min(completed[stream]) - requested[stream]) * 1e3
        assert outcome["response_ms"] == pytest.approx(expected)
        # Its first unit was sent only once its grant came back.
        assert outcome["response_ms"] >= outcome["grant_ms"] >= 0
    figures = run_figures(joined)
    assert figures["accepted"] == len(completed) > 0
    assert figures["joins"] == figures["answered"] == figures["granted"] == JOINS
    assert figures["response_p50_ms"] <= figures["response_p95_ms"]
