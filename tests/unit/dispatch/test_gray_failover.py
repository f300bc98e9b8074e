"""Gray failover on hand-made load report sequences: a path poor or a node silent for the
detection time, not one report less and not on one bad sample, and the center moving the
failing node's viewers to a healthy node or onto the standby route's relay."""

from __future__ import annotations

import pytest

from controller.policies.dispatch.gray_failover import GrayFailureDetector
from controller.policies.dispatch.policies import Dispatch, DispatchParams
from controller.policy import Client, LoadReport, Placement, State
from edgebed.protocol import path_metric
from tests.unit.dispatch.test_dispatch_policy import CENTERS, CLIENTS, MS, SERVERS, graph, request

DETECTION = 3.0
ORIGIN, RELAY = "10.0.3.1", "10.0.3.2"  # o1 at sz, r1 at hk


def topology():
    """The policy test's graph, with the origin o1 at sz and a second way from sz to ny
    through hk (longer than sz-gz-ny: the standby route), where relay r1 hangs off."""
    g = graph()

    def link(a, b, delay):
        g.add_edge(a, b, delay=delay, up=True)
        g.add_edge(b, a, delay=delay, up=True)

    link("sz", "hk", 60 * MS)
    link("hk", "ny", 80 * MS)
    link("o1", "sz", 0.5 * MS)
    link("r1", "hk", 0.5 * MS)
    return g


HOSTS = CLIENTS + (Client("o1", ORIGIN), Client("r1", RELAY))


def path(address: str, loss: float, rtt: float = 0.05) -> dict:
    return {path_metric(address, "rtt"): rtt, path_metric(address, "loss"): loss,
            path_metric(address, "jitter"): 0.001}


def reports(node: str, times, metrics=lambda t: {}) -> tuple[LoadReport, ...]:
    return tuple(LoadReport(node, t, 1e6, {"sessions": 1} | metrics(t)) for t in times)


def at(now: float, placements=(), requests=(), **loads) -> State:
    return State(topology(), SERVERS, HOSTS, tuple(placements), tuple(requests), now,
                 loads=loads)


def verdicts(detector: GrayFailureDetector, states) -> list[str | None]:
    """What the detector says of u1 in each state, fed in turn as the controller would."""
    said = []
    for state in states:
        detector.observe(state, ORIGIN)
        said.append(detector.verdict(state, "u1"))
    return said


def poor_from(start: float, good: set[float] = frozenset()):
    """u1's path metrics: lossy from ``start`` on, except at the times in ``good``."""
    return lambda t: path(ORIGIN, 0.10 if t >= start and t not in good else 0.0)


def test_a_poor_path_is_detected_after_the_detection_time_not_before():
    detector = GrayFailureDetector(DETECTION)
    metrics = poor_from(2.0)
    said = verdicts(detector, [at(t, u1=reports("u1", range(int(t) + 1), metrics))
                               for t in range(7)])
    # Poor from t=2: at t=4 two seconds of it, at t=5 three.
    assert said[:5] == [None] * 5
    assert said[5].startswith("path from the origin poor for 3.0 s") and "loss 10.0%" in said[5]
    assert said[6] is not None


def test_one_bad_sample_does_not_flap_and_a_good_one_ends_the_streak():
    detector = GrayFailureDetector(DETECTION)
    lone = lambda t: path(ORIGIN, 0.10 if t == 2 else 0.0)  # noqa: E731
    assert verdicts(detector, [at(t, u1=reports("u1", range(t + 1), lone))
                               for t in range(10)]) == [None] * 10
    detector = GrayFailureDetector(DETECTION)
    metrics = poor_from(1.0, good={3.0})
    said = verdicts(detector, [at(t, u1=reports("u1", range(t + 1), metrics))
                               for t in range(8)])
    assert said[:7] == [None] * 7 and said[7] is not None  # streak from 4, not from 1


def test_a_streak_outlives_the_reports_the_controller_still_keeps():
    # The controller hands a policy its last few reports only: the streak began earlier.
    detector = GrayFailureDetector(DETECTION)
    metrics = poor_from(0.0)
    said = verdicts(detector, [at(t, u1=reports("u1", [t - 1, t] if t else [0], metrics))
                               for t in range(5)])
    assert said == [None, None, None, said[3], said[4]] and said[3] is not None


def test_a_node_whose_reports_stop_or_whose_stream_stops_is_stalled():
    detector = GrayFailureDetector(DETECTION)
    last = reports("u1", [0.0, 1.0])
    assert detector.verdict(at(3.9, u1=last), "u1") is None
    assert detector.verdict(at(4.0, u1=last), "u1") == "no load report for 3.0 s"
    silent = reports("u1", [5.0], lambda t: {"stream.0.silent_s": 3.2})
    assert detector.verdict(at(5.1, u1=silent), "u1") == "its source stream silent for 3.2 s"
    assert detector.verdict(at(5.1, u1=reports("u1", [5.0], lambda t: {
        "stream.0.silent_s": 0.4})), "u1") is None
    assert detector.verdict(at(9.0), "u1") is None  # never reported: not started yet


def policy(on: bool = True, relays=()) -> Dispatch:
    return Dispatch(DispatchParams(centers=CENTERS, error_share=0.0, origin="o1",
                                   relays=list(relays), relay_insertion=False,
                                   gray_failover=on, detection_time=DETECTION))


STALLED = {"a1": reports("a1", [0.0, 1.0]), "b1": reports("b1", range(6)),
           "u1": reports("u1", range(6))}
ON_A1 = [Placement(request("v1"), "a1", via=("o1",)), Placement(request("w1"), "a1",
                                                                 via=("o1",))]


@pytest.mark.parametrize("now", [3.5, 5.0])
def test_the_viewers_of_a_stalled_node_move_to_healthy_nodes(now):
    decision = policy().decide(at(now, ON_A1, **STALLED))
    moved = {m.flow: m.server for m in decision.migrations}
    if now - 1.0 < DETECTION:
        assert moved == {}
    else:  # each to its nearest node with room for its center, never the stalled a1
        assert moved == {"v1/live": "b1", "w1/live": "u1"}


def test_failover_off_or_everything_healthy_moves_nobody():
    assert not policy(on=False).decide(at(5.0, ON_A1, **STALLED)).migrations
    healthy = {node: reports(node, range(6), lambda t: path(ORIGIN, 0.0)) for node in
               ("a1", "b1", "u1")}
    center = policy()
    for now in range(6):
        assert not center.decide(at(now, ON_A1, **healthy)).migrations
    assert center.failovers == []


def test_a_new_viewer_is_not_placed_on_a_stalled_node():
    decision = policy().decide(at(5.0, requests=[request("v2")], **STALLED))
    assert [a.server for a in decision.assignments] == ["b1"]


def test_a_poor_path_goes_onto_the_standby_routes_relay_and_stays_there():
    """u1's path from o1 (sz-gz-ny) turns lossy; its standby (sz-hk-ny) passes relay r1,
    whose leg to u1 probes clean: w1 stays on u1, its stream through r1. With the relay's
    leg lossy too, w1 moves to a node in the cn region instead."""
    def lossy(relay_loss):
        return {"u1": reports("u1", range(6), lambda t: path(ORIGIN, 0.1 if t >= 1 else 0)
                              | path(RELAY, relay_loss)),
                "a1": reports("a1", range(6)), "b1": reports("b1", range(6))}

    center = policy(relays=["r1"])
    direct = [Placement(request("w1"), "u1", via=("o1",))]
    decision = center.decide(at(5.0, direct, **lossy(0.0)))
    assert [(m.flow, m.server, m.via) for m in decision.migrations] == [
        ("w1/live", "u1", ("o1", "r1"))]
    assert [(flow, old, new) for _, flow, old, new, _ in center.failovers] == [
        ("w1/live", "u1", "via r1")]
    relayed = [Placement(request("w1"), "u1", via=("o1", "r1"))]
    assert not center.decide(at(5.0, relayed, **lossy(0.0))).migrations
    moved = policy(relays=["r1"]).decide(at(5.0, relayed, **lossy(0.1))).migrations
    assert [(m.flow, m.server != "u1") for m in moved] == [("w1/live", True)]
