"""ai_access's emulated cluster (topologies/ai_access/ai_access.yaml) on a real Mininet network: twelve AI
data flows from three terminal hosts join the access service through the controller, least
connections gives each of the three heterogeneous access servers four, and ar3, whose processing
budget (350 packets/s) is below what four flows send (400 packets/s, more in their send
windows), drops over its budget. Two runs, migration by load prediction off and on.

The access servers hand the units they completed to the GPU servers g1 and g2 in rotation, as
ar1, the cluster manager, grants them on the side band: checked on what the GPU servers
received against what the access servers completed and handed over.

Everything is checked on what was counted: the receivers' first copies (loss before repair, per
second), what each receiver's worker took and dropped over its budget, the load the servers
reported (the load degree L_i from it by the policy's resource model: the run summary's,
experiments/kinds/ai_access/emulation.py), and the controller's decisions. Loss comparisons
hold the two runs' loss fractions to binomial intervals at the single-shot confidence; nothing
is timed (the window compared is the seconds after the migration in both runs, by the
timeline's origin).
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

import pytest

from agents.probe import loss_interval
from controller.policies.ai_access.migration import THETA
from agents.control import TIMEOUT
from experiments.kinds.ai_access.emulation import (access_responses, first_copies, moves,
                                                   run_degrees, spread)
from experiments.measurements import read_table
from tests.conftest import ROOT
from tests.integration.conftest import (SINGLE_SHOT_CONFIDENCE, SystemState, emulator_made,
                                        assert_nothing_left, edgebed, only_run_dir)

SCENARIO = ROOT / "topologies" / "ai_access" / "ai_access.yaml"
DURATION = 16.0
SERVERS = ("ar1", "ar2", "ar3")
OVERLOADED = "ar3"
FLOWS = 12
SETTLE_S = 2.0  # after the last migration: the moved flow's unit in flight, the smoothing
GPUS = ("g1", "g2")  # ar1's order of rotation
# Units handed over this long before the end were received before the GPU servers stopped
# (the transfer of 100 KB on an idle 1 Gbit/s-class veth takes milliseconds; the GPU server
# reads what waits on its connections before it ends).
HANDOFF_MARGIN_S = 2.0


def run(tmp_path, migrate: bool):
    runs = tmp_path / ("migrate" if migrate else "still")
    env = {**os.environ, "EDGEBED_MIGRATE": str(migrate).lower(),
           "EDGEBED_DURATION": f"{DURATION:g}s"}
    result = edgebed("run", str(SCENARIO), "--runs-dir", str(runs), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(runs)
    return run_dir, json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    before = SystemState.now()
    tmp_path = tmp_path_factory.mktemp("ai_access")
    still = run(tmp_path, migrate=False)
    moving = run(tmp_path, migrate=True)
    for _, summary in (still, moving):
        assert_nothing_left(before, summary["prefix"])
    return still, moving


def receiver_summary(run_dir, node: str) -> dict:
    """The ai_receiver's JSON summary line in the node's log."""
    for line in reversed((run_dir / "logs" / f"{node}.log").read_text().splitlines()):
        if line.startswith("{") and '"agent": "ai_receiver"' in line:
            return json.loads(line)
    raise AssertionError(f"no ai_receiver summary in {node}'s log")


def test_least_connections_gives_each_server_four_flows(runs):
    for run_dir, summary in runs:
        placed = Counter(move["server"] for move in moves(run_dir) if move["kind"] == "place")
        assert placed == {server: FLOWS // len(SERVERS) for server in SERVERS}, placed
        refused = [json.loads(line) for node in ("t1", "t2", "t3")
                   for line in (run_dir / "logs" / f"{node}.log").read_text().splitlines()
                   if line.startswith("{") and '"agent": "ai_terminal"' in line]
        assert len(refused) == 3 and not any(terminal["refused"] for terminal in refused)


def test_without_migration_the_overloaded_server_loses_first_copies(runs):
    (run_dir, summary), _ = runs
    assert not [move for move in moves(run_dir) if move["kind"] == "migrate"]
    losses = first_copies(run_dir)
    lost, expected = losses[OVERLOADED]
    overloaded = receiver_summary(run_dir, OVERLOADED)
    # Its worker dropped what it could not take, and every first copy it lost is one of those
    # drops or one the emulator counted (the links have no configured loss).
    assert overloaded["over_budget"] > 0
    assert 0 < lost <= overloaded["over_budget"] + emulator_made(summary), (lost, overloaded)
    low, _ = loss_interval(lost, expected, SINGLE_SHOT_CONFIDENCE)
    for server in SERVERS:
        if server == OVERLOADED:
            continue
        # The others have the budget for their flows: what they lost, the emulator counted.
        other_lost, other_expected = losses[server]
        assert receiver_summary(run_dir, server)["over_budget"] == 0
        assert other_lost <= emulator_made(summary), (server, other_lost, summary["emulator_loss"])
        _, high = loss_interval(other_lost, other_expected, SINGLE_SHOT_CONFIDENCE)
        assert high < low, (server, other_lost, other_expected, lost, expected)
    print(f"without migration: {OVERLOADED} lost {lost} of {expected} first copies "
          f"({lost / expected:.1%}), {overloaded['over_budget']} dropped over its budget")


def test_migration_moves_flows_off_the_overloaded_server(runs):
    _, (run_dir, summary) = runs
    migrations = summary["scheme"]["migrations"]
    assert migrations, summary["scheme"]["notes"]
    assert all(move["source"] == OVERLOADED for move in migrations), migrations
    # The terminals followed them: each moved flow's decisions_followed ends on its last
    # migration's server.
    followed = {}
    for row in sorted(read_table(run_dir, "decisions_followed"), key=lambda r: r["time_s"]):
        followed[row["flow"]] = row["server"]
    last = {move["flow"]: move["server"] for move in migrations}
    assert all(followed[flow] == server for flow, server in last.items()), (last, followed)
    print("migrations: " + "; ".join(summary["scheme"]["notes"]))


def window(runs) -> tuple[tuple[float, float], tuple[float, float]]:
    """The same stretch of both runs' timelines: from SETTLE_S after the migrating run's last
    migration to a second before its end (CLOCK_REALTIME seconds, per run)."""
    (_, still), (_, moving) = runs
    last = moving["scheme"]["migrations"][-1]["t"]
    offsets = (last + SETTLE_S, DURATION - 1.0)
    assert offsets[1] - offsets[0] >= 4.0, f"the last migration came late: {last:.1f} s"
    return tuple((summary["timeline_origin_s"] + offsets[0],
                  summary["timeline_origin_s"] + offsets[1]) for summary in (still, moving))


def test_with_migration_the_loss_falls(runs):
    (still_dir, _), (moving_dir, _) = runs
    still_window, moving_window = window(runs)
    figures = []
    for run_dir, (start, end) in ((still_dir, still_window), (moving_dir, moving_window)):
        counts = first_copies(run_dir, start, end).values()
        lost, expected = sum(c[0] for c in counts), sum(c[1] for c in counts)
        figures.append((lost, expected, loss_interval(lost, expected, SINGLE_SHOT_CONFIDENCE)))
    (still_lost, still_expected, (still_low, _)), \
        (moving_lost, moving_expected, (_, moving_high)) = figures
    print(f"first copies lost, all servers, after the migration: without "
          f"{still_lost}/{still_expected} ({still_lost / still_expected:.2%}), with "
          f"{moving_lost}/{moving_expected} ({moving_lost / moving_expected:.2%})")
    assert moving_high < still_low, figures


def test_with_migration_the_loads_even_out(runs):
    (_, still), (_, moving) = runs
    still_window, moving_window = window(runs)
    still_spread, still_means = spread(run_degrees(runs[0][0]), *still_window)
    moving_spread, moving_means = spread(run_degrees(runs[1][0]), *moving_window)
    print(f"spread of the servers' mean L_i after the migration: without {still_spread:.3f} "
          f"{still_means}, with {moving_spread:.3f} {moving_means}")
    # With migration the loads come within the trigger's spread and below the spread without
    # (which stays about at theta here, 0.107 to 0.109 in four runs, from ar3's saturated
    # worker; the policy's own view, with the placed flows' demands, is wider). Here: 0.010 and
    # 0.013 after two flows moved, 0.077 after one.
    assert moving_spread < THETA and moving_spread < still_spread
    assert moving_means[OVERLOADED] < still_means[OVERLOADED]


def test_each_join_is_timed_at_the_terminal_around_the_policy_call_that_granted_it(runs):
    for run_dir, _ in runs:
        responses = access_responses(run_dir)
        assert len(responses) == FLOWS, responses
        joins = {row["flow"]: float(row["requested_s"])
                 for row in read_table(run_dir, "decisions_followed")
                 if row["agent"] == "ai_terminal" and row["response_ms"]}
        # The controller stamps its policy_trace row after the policy call and before it
        # answers the join (controller/app.py): on the hosts' shared CLOCK_REALTIME that row
        # lies between the terminal's request and the grant's arrival, unless the terminal's
        # timing is wrong (a grant that was not its request's, a clock that is not the
        # request's).
        decided = {move["flow"]: move["time"] for move in moves(run_dir)
                   if move["kind"] == "place"}
        for flow, response_ms in responses.items():
            requested = joins[flow]
            assert requested - 1e-6 <= decided[flow] <= requested + response_ms / 1e3 + 1e-6, (
                flow, requested, response_ms, decided[flow])
            # One try's wait: no join here needed a retransmission on the idle side band.
            assert 0 < response_ms < TIMEOUT * 1e3, (flow, response_ms)
        ordered = sorted(responses.values())
        print(f"{run_dir.name}: access response time at the terminals, {len(ordered)} joins: "
              f"median {ordered[len(ordered) // 2]:.1f} ms, max {ordered[-1]:.1f} ms")


def test_every_completed_unit_reaches_one_gpu_server_and_they_take_them_in_turn(runs):
    for run_dir, summary in runs:
        completed = Counter(row["node"] for row in read_table(run_dir, "ai_units")
                            if row["complete"] == "1")
        handed = read_table(run_dir, "gpu_handoffs")
        # Every unit an access server completed was handed over, or still waited when it
        # stopped (completed in its last moments, or its grant not yet back).
        for server in SERVERS:
            pending = receiver_summary(run_dir, server)["handoff"]["pending_at_stop"]
            assert sum(row["node"] == server for row in handed) + pending == completed[server], (
                server, completed[server], pending)
        received = read_table(run_dir, "gpu_units")
        at = defaultdict(list)
        for row in received:
            at[row["stream"], row["unit"]].append(row)
        # No unit at two GPU servers, or twice at one; each at the one its grant named, in the
        # manager's rotation (grant s to GPUS[s % 2]); and each one a server handed over.
        assert all(len(rows) == 1 for rows in at.values()), [r for r in at.values() if len(r) > 1]
        sequences = sorted(int(row["sequence"]) for row in received)
        assert len(set(sequences)) == len(sequences)
        for row in received:
            assert row["node"] == GPUS[int(row["sequence"]) % len(GPUS)], row
        handed_keys = {(row["stream"], row["unit"]): row["sequence"] for row in handed}
        assert all(handed_keys.get(key) == rows[0]["sequence"] for key, rows in at.items())
        # Every unit handed over before the margin reached a GPU server, and its bytes.
        cut = summary["timeline_origin_s"] + DURATION - HANDOFF_MARGIN_S
        early = [row for row in handed if float(row["time_s"]) < cut]
        assert early and all((row["stream"], row["unit"]) in at and at[row["stream"], row["unit"]][
            0]["bytes"] == row["bytes"] for row in early), "units handed over but not received"
        # Up to the first grant not received (if any: at the end), the GPU servers took the
        # units in turn, so their counts are within one of each other.
        gap = next((s for s, expected in zip(sequences, range(len(sequences))) if s != expected),
                   len(sequences))
        counts = Counter(row["node"] for row in received if int(row["sequence"]) < gap)
        assert gap >= len(early) and max(counts.values()) - min(
            counts.get(gpu, 0) for gpu in GPUS) <= 1, (gap, counts)
        manager = receiver_summary(run_dir, "ar1")["cluster_manager"]
        print(f"{run_dir.parent.name}: {sum(completed.values())} units completed, "
              f"{len(handed)} handed over, {len(received)} at the GPU servers {dict(counts)} "
              f"(grants {manager['grants']}, repeated {manager['repeated']})")
