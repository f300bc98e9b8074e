"""surveillance: node load and weights, queues, every balancer on hand-checked states, stream
sharing, cascades and their collapse, the simulation of the paper's test and the controller
policies."""

from __future__ import annotations

import zlib

import networkx as nx
import numpy as np
import pytest
from pydantic import ValidationError

from controller.core import ControllerCore
from controller.policies import create
from controller.policies.surveillance import POLICIES
from controller.policies.surveillance.balancer import (BALANCERS, Choice, Cluster,
                                                       DynamicFeedback, Hashing, ImprovedFeedback,
                                                       LeastConnections, PowerOfTwoChoices,
                                                       Refusal, RoundRobin,
                                                       WeightedLeastConnections,
                                                       WeightedRoundRobin)
from controller.policies.surveillance.load import (Hardware, LoadWeights, Queue, Usage,
                                                   max_loads, node_load, node_weights, queue_of)
from controller.policies.surveillance.model import Workload, draw_trace, simulate
from controller.policies.surveillance.policies import reported_load
from controller.policy import Client, LoadReport, Placement, Request, Server, State
from controller.view import NetworkView
from experiments.scenarios import load


# --- load, maximum load, weights, queues -------------------------------------------------

def test_load_is_the_weighted_sum_of_the_indicators():
    usage = Usage(cpu=0.5, memory=0.2, bandwidth=0.8, disk=0.1)
    assert node_load(usage) == pytest.approx(0.4 * 0.5 + 0.1 * 0.2 + 0.4 * 0.8 + 0.1 * 0.1)


def test_an_indicator_not_measured_gives_its_weight_to_the_others():
    # Without disk, a node at full CPU, memory and link is at L = 1, not 0.9.
    assert node_load(Usage(cpu=1, memory=1, bandwidth=1)) == pytest.approx(1.0)
    assert node_load(Usage(cpu=0.5, memory=0.0, bandwidth=0.5)) == pytest.approx(0.4 / 0.9)
    with pytest.raises(ValueError, match="at least one"):
        node_load(Usage(None, None, None))


def test_load_weights_must_sum_to_one():
    with pytest.raises(ValidationError, match="sum to 1"):
        LoadWeights(cpu=0.5, memory=0.5, bandwidth=0.5, disk=0.0)


def test_weights_from_z_scores_by_hand():
    # Hardware 1x, 2x, 3x: every figure standardises to -1.2247, 0, +1.2247, so MAXL is the
    # same; shifted so the weakest is at 1: 1, 2.2247, 3.4495 (sum 6.6742).
    nodes = [Hardware(2 * k, 4 * k, 100 * k, 500 * k) for k in (1, 2, 3)]
    z = np.sqrt(1.5)
    assert max_loads(nodes) == pytest.approx([1, 1 + z, 1 + 2 * z])
    assert node_weights(nodes) == pytest.approx(np.array([1, 1 + z, 1 + 2 * z]) / (3 + 3 * z))
    assert node_weights(nodes).sum() == pytest.approx(1)


def test_weights_of_mixed_hardware_weigh_each_figure_by_r():
    # Only the CPU differs (weight 0.4): z = -1, +1 -> MAXL -0.4, +0.4 -> MAXL* 1, 1.8.
    nodes = [Hardware(2, 8, 100, 500), Hardware(4, 8, 100, 500)]
    assert max_loads(nodes) == pytest.approx([1.0, 1.8])
    assert node_weights(nodes, shift=0.2) == pytest.approx([0.2 / 1.2, 1.0 / 1.2])


def test_equal_hardware_gives_equal_weights_and_the_shift_must_be_positive():
    nodes = [Hardware(4, 8, 100, 500)] * 4
    assert node_weights(nodes) == pytest.approx([0.25] * 4)
    with pytest.raises(ValueError, match="positive"):
        max_loads(nodes, shift=0)


@pytest.mark.parametrize("load, queue", [(0.0, Queue.LIGHT), (0.5999, Queue.LIGHT),
                                         (0.6, Queue.MODERATE), (0.9, Queue.MODERATE),
                                         (0.9001, Queue.HEAVY), (1.3, Queue.HEAVY)])
def test_queues_by_threshold(load, queue):
    assert queue_of(load) == queue


# --- balancers ----------------------------------------------------------------------------

def cluster(weights: dict[str, float], loads: dict[str, float] | None = None,
            tasks: dict[str, int] | None = None) -> Cluster:
    made = Cluster.of(weights)
    for name, load in (loads or {}).items():
        made.report(name, load)
    for name, count in (tasks or {}).items():
        made.nodes[name].tasks = count
    return made


def picks(balancer, made: Cluster, cameras: list[str]) -> list[str]:
    """The nodes ``balancer`` picks for new cameras, one after another, each carried out."""
    chosen = []
    for camera in cameras:
        choice = balancer.choose(camera, made)
        made.assign(camera, choice)
        chosen.append(choice.node)
    return chosen


def test_round_robin_takes_turns_in_name_order():
    made = cluster({"a": 0.1, "b": 0.2, "c": 0.7})
    assert picks(RoundRobin(), made, ["k1", "k2", "k3", "k4"]) == ["a", "b", "c", "a"]


def test_weighted_round_robin_spreads_the_heavier_node_s_share():
    # Smooth WRR with weights 1:4 -> credits (1,4) b, (2,3) b, (3,2) a, (-1,6) b, (0,5) b.
    made = cluster({"a": 0.2, "b": 0.8})
    assert picks(WeightedRoundRobin(), made, [f"k{i}" for i in range(5)]) == list("bbabb")


def test_least_connections_and_wlc():
    made = cluster({"a": 0.25, "b": 0.75}, tasks={"a": 1, "b": 2})
    assert LeastConnections().choose("k", made) == Choice("a")
    assert WeightedLeastConnections().choose("k", made) == Choice("b")  # 2/0.75 < 1/0.25


def test_hashing_maps_a_camera_onto_the_same_node():
    made = cluster({"a": 0.3, "b": 0.3, "c": 0.4})
    expected = "abc"[zlib.crc32(b"camera7") % 3]
    assert Hashing().choose("camera7", made) == Choice(expected)


def test_power_of_two_choices_takes_the_less_loaded_of_two():
    made = cluster({"a": 0.5, "b": 0.5}, tasks={"a": 3, "b": 1})
    assert {PowerOfTwoChoices(seed).choose("k", made).node for seed in range(20)} == {"b"}
    three = cluster({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, tasks={"a": 0, "b": 5, "c": 9})
    chosen = {PowerOfTwoChoices(seed).choose("k", three).node for seed in range(40)}
    assert chosen == {"a", "b"}  # c loses every pair it is in


@pytest.mark.parametrize("name", [name for name, kind in BALANCERS.items()
                                  if not issubclass(kind, ImprovedFeedback)])
def test_every_balancer_but_the_improved_sends_a_streaming_camera_to_its_origin(name):
    made = cluster({"a": 0.5, "b": 0.5}, loads={"a": 0.95})
    made.assign("hot", Choice("a"))
    assert BALANCERS[name]().choose("hot", made) == Choice("a")  # heavy or not


def test_dynamic_feedback_uses_the_light_queue_then_the_moderate_one_never_heavy():
    made = cluster({"a": 0.2, "b": 0.3, "c": 0.5}, loads={"a": 0.1, "b": 0.7, "c": 0.95})
    balancer = DynamicFeedback()
    assert picks(balancer, made, ["k1", "k2"]) == ["a", "a"]  # only a is light
    made.report("a", 0.8)
    assert balancer.choose("k3", made) == Choice("b")  # a and b moderate: WRR, b's turn
    made = cluster({"a": 0.2, "b": 0.3, "c": 0.5}, loads={"a": 0.7, "b": 0.7, "c": 0.95})
    assert {DynamicFeedback().choose("k", made).node} <= {"a", "b"}
    made = cluster({"a": 0.5, "b": 0.5}, loads={"a": 0.95, "b": 0.91})
    assert isinstance(DynamicFeedback().choose("k", made), Refusal)


def test_dynamic_feedback_is_weighted_round_robin_within_the_light_queue():
    made = cluster({"a": 0.2, "b": 0.8, "c": 0.0}, loads={"c": 0.95})
    assert picks(DynamicFeedback(), made, [f"k{i}" for i in range(5)]) == list("bbabb")


def test_improved_new_camera_by_weighted_least_tasks_in_the_light_queue():
    made = cluster({"a": 0.2, "b": 0.3, "c": 0.5}, loads={"a": 0.1, "b": 0.1, "c": 0.7},
                   tasks={"a": 1, "b": 2, "c": 0})
    # c has no task but is moderate; a 1/0.2 = 5 against b 2/0.3 = 6.7.
    assert ImprovedFeedback().choose("k", made) == Choice("a")
    made.report("a", 0.65)
    made.report("b", 0.65)
    assert ImprovedFeedback().choose("k", made) == Choice("c")  # all moderate: c 0/0.5


def test_improved_cooperation_builds_and_collapses_a_multi_level_cascade():
    made = cluster({"a": 0.2, "b": 0.3, "c": 0.5})
    balancer = ImprovedFeedback()
    assert made.assign("hot", balancer.choose("hot", made)) == ["a"]  # all 0/W: by name
    assert made.assign("hot", balancer.choose("hot", made)) == ["a"]  # a light origin serves
    made.report("a", 0.7)  # the origin turns moderate: a light helper, fed by a
    choice = balancer.choose("hot", made)
    assert choice == Choice("b", feeder="a")  # b 0/0.3 = c 0/0.5 = 0: by name
    assert made.assign("hot", choice) == ["a", "b"]
    made.report("b", 0.95)  # the helper turns heavy: cascade again, from it
    choice = balancer.choose("hot", made)
    assert choice == Choice("c", feeder="b")
    assert made.assign("hot", choice) == ["a", "b", "c"]
    assert made.depth("hot", "c") == 2 and made.feeder_of("hot", "c") == "b"
    assert balancer.choose("hot", made) == Choice("c")  # the light tail serves
    made.report("a", 0.3)  # the origin is light again: it serves the next client
    assert balancer.choose("hot", made) == Choice("a")
    # Collapse: the last helper's client leaves -> c stops receiving; b's client leaves ->
    # b stops; the origin's two clients keep it.
    made.release("hot", "c")
    assert made.chain("hot") == ["a", "b"]
    made.release("hot", "b")
    assert made.chain("hot") == ["a"]
    made.release("hot", "a")
    made.release("hot", "a")
    assert "hot" not in made.chains


def test_a_relay_in_the_middle_stays_while_a_node_after_it_serves():
    made = cluster({"a": 0.5, "b": 0.5})
    made.assign("k", Choice("a"))
    made.assign("k", Choice("b", feeder="a"))
    made.release("k", "a")
    assert made.chain("k") == ["a", "b"]  # a has no client left but feeds b
    made.release("k", "b")
    assert made.chain("k") == []


def test_a_helper_is_fed_by_the_chain_s_tail():
    made = cluster({"a": 0.3, "b": 0.3, "c": 0.4})
    made.assign("k", Choice("a"))
    made.assign("k", Choice("b", feeder="a"))
    with pytest.raises(ValueError, match="tail"):
        made.assign("k", Choice("c", feeder="a"))


def test_improved_respects_the_cascade_depth_and_refuses_when_all_is_heavy():
    made = cluster({"a": 0.5, "b": 0.5}, loads={"a": 0.7})
    made.assign("k", Choice("a"))
    assert ImprovedFeedback(max_depth=0).choose("k", made) == Choice("a")  # moderate origin
    made.report("a", 0.95)
    assert isinstance(ImprovedFeedback(max_depth=0).choose("k", made), Refusal)
    made.report("b", 0.95)
    refusal = ImprovedFeedback().choose("k", made)
    assert isinstance(refusal, Refusal) and "heavy" in refusal.reason


def test_improved_never_assigns_to_a_heavy_node():
    rng = np.random.default_rng(4)
    for trial in range(300):
        n = int(rng.integers(1, 6))
        names = [f"n{i}" for i in range(n)]
        made = cluster(dict(zip(names, rng.dirichlet(np.ones(n)))),
                       loads={name: float(rng.uniform(0, 1.2)) for name in names},
                       tasks={name: int(rng.integers(0, 9)) for name in names})
        balancer = ImprovedFeedback(max_depth=int(rng.integers(0, 4)))
        for request in range(10):
            camera = f"k{rng.integers(0, 3)}"
            choice = balancer.choose(camera, made)
            chain = made.chain(camera)
            usable = [name for name in names if made.queue(name) != Queue.HEAVY]
            if isinstance(choice, Refusal):
                outside = [name for name in usable if name not in chain]
                assert not set(usable) & set(chain)
                assert not outside or (chain and len(chain) > balancer.max_depth)
                continue
            assert made.queue(choice.node) != Queue.HEAVY
            made.assign(camera, choice)
            made.report(choice.node, made.nodes[choice.node].load + float(rng.uniform(0, 0.2)))


def test_a_dead_node_leaves_no_client_assigned_to_it_or_behind_it():
    made = cluster({"a": 0.3, "b": 0.3, "c": 0.4})
    made.assign("k", Choice("a"))
    made.assign("k", Choice("b", feeder="a"))
    made.assign("k", Choice("b"))
    made.assign("j", Choice("c"))
    orphans = made.remove("a")
    assert sorted(orphans) == [("k", "a"), ("k", "b"), ("k", "b")]  # b was fed through a
    assert "k" not in made.chains and made.nodes["a"].tasks == made.nodes["b"].tasks == 0
    for balancer in BALANCERS.values():
        assert balancer().choose("k", made).node != "a"


# --- the simulation -------------------------------------------------------------------------

def test_the_trace_has_hot_cameras_ten_times_as_likely():
    trace = draw_trace(Workload(requests=100_000), seed=1)
    counts = np.bincount(trace.camera, minlength=100)
    assert counts[:10].mean() / counts[10:].mean() == pytest.approx(10, rel=0.05)
    assert np.all(np.diff(trace.arrival_s) >= 0) and trace.arrival_s.max() < 600


@pytest.mark.parametrize("name", list(BALANCERS))
def test_a_run_accounts_for_every_request_and_is_deterministic(name):
    workload = Workload(requests=300, horizon_s=120)
    first = simulate(workload, name, seed=3).metrics
    again = simulate(workload, name, seed=3).metrics
    assert {k: v for k, v in first.items() if k != "decision_us"} == {
        k: v for k, v in again.items() if k != "decision_us"}
    assert first["rejected"] == first["rejected_by_balancer"] + first["rejected_by_node"]
    assert 0 <= first["rejected"] < 300
    if not issubclass(BALANCERS[name], ImprovedFeedback):
        assert first["cascades"] == 0 and first["max_depth"] == 0
    assert first["peak_bandwidth"] <= 1 + 1e-9 and first["peak_cpu"] <= 1 + 1e-9


def test_active_notification_leaves_no_heavy_node_unnoticed():
    workload = Workload(session_mean_s=300, bitrate_mbps=2)
    improved = simulate(workload, "sv_improved", seed=0).metrics
    assert improved["heavy_unnoticed_max_s"] == 0
    assert improved["notifications"] == improved["overloads"]
    original = simulate(workload, "sv_feedback", seed=0).metrics
    assert original["notifications"] == 0
    assert 0 < original["heavy_unnoticed_max_s"] <= workload.period_s


# --- the controller policies ---------------------------------------------------------------

def servers(loads=(0.2, 0.1)) -> tuple[Server, ...]:
    return (Server("n1", "video", "10.0.0.1", 10e6, loads[0],
                   {"cpu_ghz": 4, "memory_gb": 4, "bandwidth_mbps": 10, "disk_gb": 100}),
            Server("n2", "video", "10.0.0.2", 20e6, loads[1],
                   {"cpu_ghz": 8, "memory_gb": 8, "bandwidth_mbps": 20, "disk_gb": 200}))


def request(i: int, camera: str | None = "cam1") -> Request:
    return Request(f"c{i}/video", f"c{i}", "video", 4e6,
                   labels={} if camera is None else {"camera": camera})


def test_every_balancer_is_a_policy():
    assert set(POLICIES) == set(BALANCERS)
    for name, policy in POLICIES.items():
        assert policy.name == name and policy.Params.model_validate({})


def test_policy_helper_takes_the_clients_beyond_the_origin_s_share():
    policy = POLICIES["sv_improved"]()
    state = State(nx.MultiDiGraph(), servers(), (),
                  requests=tuple(request(i) for i in range(6)))
    decision = policy.decide(state)
    # n1 takes 8 of its 10 Mbit/s (moderate), then n2 helps, fed by n1; with both moderate
    # (8/10, 12/20) the one with the least weighted tasks, n2, takes the last.
    assert [a.server for a in decision.assignments] == ["n1", "n1", "n2", "n2", "n2", "n2"]
    assert policy.last_chains["c2/video"] == ("n1", "n2")
    assert not decision.rejections
    more = policy.decide(State(nx.MultiDiGraph(), servers(), (),
                               requests=tuple(request(i) for i in range(12))))
    # n2 fills to 20 of 20 Mbit/s (heavy), then n1 (8 of 10, moderate) has no room left.
    assert [a.server for a in more.assignments] == ["n1"] * 2 + ["n2"] * 5
    assert len(more.rejections) == 5


def test_policy_rejects_unknown_and_missing_cameras():
    policy = POLICIES["sv_wlc"](POLICIES["sv_wlc"].Params(cameras=("cam1",)))
    state = State(nx.MultiDiGraph(), servers(), (),
                  requests=(request(0, "cam9"), request(1, None), request(2)))
    decision = policy.decide(state)
    reasons = {r.flow: r.reason for r in decision.rejections}
    assert reasons == {"c0/video": "unknown camera 'cam9'",
                       "c1/video": "the request names no camera (label camera)"}
    assert [a.flow for a in decision.assignments] == ["c2/video"]


def test_policy_shares_the_stream_of_a_placed_camera_and_forgets_a_dead_node():
    policy = POLICIES["sv_wlc"]()
    placed = (Placement(request(0), "n2"),)
    state = State(nx.MultiDiGraph(), servers(), (), placements=placed,
                  requests=(request(1),))
    assert policy.decide(state).assignments[0].server == "n2"
    gone = State(nx.MultiDiGraph(), servers()[:1], (), placements=placed,
                 requests=(request(2),))
    assert policy.decide(gone).assignments[0].server == "n1"


def reports(now: float, **loads: tuple[float, dict]) -> dict:
    return {server: (LoadReport(server, received, 0.0, metrics),)
            for server, (received, metrics) in loads.items()}


def test_policy_computes_l_from_the_reported_metrics():
    metrics = {"cpu": 0.5, "memory": 0.4e9, "bw_in": 1e6, "bw_out": 8e6}  # n1: 4 GB, 10 Mbit/s
    state = State(nx.MultiDiGraph(), servers(), (), now=1.0,
                  loads=reports(1.0, n1=(1.0, metrics)))
    assert reported_load(state, state.servers[0], LoadWeights()) == pytest.approx(
        (0.4 * 0.5 + 0.1 * 0.1 + 0.4 * 0.8) / 0.9)
    assert reported_load(state, state.servers[1], LoadWeights()) == 0.1  # never reported


def test_an_urgent_heavy_report_re_queues_the_node_before_the_next_period():
    policy = POLICIES["sv_improved"]()
    placed = (Placement(request(0), "n1"),)
    heavy = {"cpu": 1.0, "memory": 3.9e9, "bw_in": 4e6, "bw_out": 9.6e6}
    light = {"cpu": 0.1, "bw_out": 1e6}
    # n1 reported heavy at once (t = 1.5, within the period from 1 to 2): the next client of
    # its camera goes to a helper fed by n1, not to n1.
    state = State(nx.MultiDiGraph(), servers(), (), placements=placed, now=1.6,
                  loads=reports(1.6, n1=(1.5, heavy), n2=(1.0, light)),
                  requests=(request(1),))
    assert policy.decide(state).assignments[0].server == "n2"
    assert policy.last_chains["c1/video"] == ("n1", "n2")
    original = POLICIES["sv_feedback"]()
    assert original.decide(state).assignments[0].server == "n1"  # stream sharing, whatever L


def test_a_node_that_stops_reporting_is_removed_and_its_clients_go_elsewhere():
    policy = POLICIES["sv_improved"]()
    placed = (Placement(request(0), "n1"),)
    fresh = {"cpu": 0.1, "bw_out": 1e6}
    # n1 last reported at 1.0, missed 3 periods of 1 s by 4.5: dead. n2 reported at 4.0.
    state = State(nx.MultiDiGraph(), servers(), (), placements=placed, now=4.5,
                  loads=reports(4.5, n1=(1.0, fresh), n2=(4.0, fresh)),
                  requests=(request(0), request(1)))
    decision = policy.decide(state)
    assert {a.server for a in decision.assignments} == {"n2"}
    assert policy.last_chains["c1/video"] == ("n2",)
    everyone_dead = State(nx.MultiDiGraph(), servers(), (), now=9.0,
                          loads=reports(9.0, n1=(1.0, fresh), n2=(4.0, fresh)),
                          requests=(request(2),))
    assert policy.decide(everyone_dead).rejections[0].reason == (
        "service 'video' has no live node server")


def test_every_policy_says_how_it_reacts_to_a_report():
    # Every kept report asks the policy with no request: the node is re-queued, flows on dead
    # nodes move.
    assert {policy.on_load for policy in POLICIES.values()} == {"rebalance"}


CAMERA_HOSTS = (Client("camA", "10.0.0.50", {"cameras": "1,2"}),
                Client("camB", "10.0.0.51", {"cameras": 3}))


def test_a_decision_says_where_the_serving_node_pulls_the_stream_from():
    policy = POLICIES["sv_improved"]()
    state = State(nx.MultiDiGraph(), servers(), CAMERA_HOSTS,
                  requests=tuple(request(i, "1") for i in range(3)) + (request(3, "3"),))
    decision = policy.decide(state)
    terms = {a.flow: (a.server, dict(a.attributes)) for a in decision.assignments}
    # The origin n1 pulls camera 1 from its host; the helper n2 pulls it from n1 (a cascade);
    # camera 3 comes from camB.
    assert terms["c0/video"] == ("n1", {"camera": "1", "stream": 1, "depth": 0,
                                        "upstream": "10.0.0.50"})
    assert terms["c2/video"] == ("n2", {"camera": "1", "stream": 1, "depth": 1,
                                        "upstream": "10.0.0.1"})
    assert terms["c3/video"][1]["upstream"] == "10.0.0.51"


def test_a_camera_no_host_streams_is_unknown():
    policy = POLICIES["sv_improved"]()
    decision = policy.decide(State(nx.MultiDiGraph(), servers(), CAMERA_HOSTS,
                                   requests=(request(0, "9"), request(1, "2"))))
    assert [(r.flow, r.reason) for r in decision.rejections] == [
        ("c0/video", "unknown camera '9': no camera host streams it")]
    assert [a.flow for a in decision.assignments] == ["c1/video"]


def test_repair_moves_the_flows_of_a_dead_node_and_re_feeds_the_cascade_it_fed():
    policy = POLICIES["sv_improved"]()
    three = servers() + (Server("n3", "video", "10.0.0.3", 40e6, 0.1,
                                {"cpu_ghz": 8, "memory_gb": 8, "bandwidth_mbps": 20,
                                 "disk_gb": 200}),)
    first = policy.decide(State(nx.MultiDiGraph(), three, CAMERA_HOSTS,
                                requests=tuple(request(i, "1") for i in range(8))))
    placed = tuple(Placement(r, a.server, attributes=a.attributes)
                   for r, a in zip((request(i, "1") for i in range(8)), first.assignments))
    chain = policy.last_chains["c7/video"]
    assert len(chain) == 3, chain  # origin, helper, helper of the helper
    origin, middle, tail = chain
    fresh = {"cpu": 0.1, "bw_out": 1e6}
    # The middle node last reported at 1.0 and missed 3 periods by 4.5: dead.
    loads = reports(4.5, **{name: (4.0 if name != middle else 1.0, fresh)
                            for name in ("n1", "n2", "n3")})
    repair = policy.decide(State(nx.MultiDiGraph(), three, CAMERA_HOSTS, placements=placed,
                                 now=4.5, loads=loads))
    on_middle = {p.request.flow for p in placed if p.server == middle}
    on_tail = {p.request.flow for p in placed if p.server == tail}
    moved = {m.flow: m for m in repair.migrations}
    assert on_middle <= set(moved) and all(moved[f].server != middle for f in on_middle)
    # The tail's clients keep their node, now fed by the origin.
    for flow in on_tail:
        assert moved[flow].server == tail
        assert moved[flow].attributes["upstream"] == three[int(origin[1]) - 1].address
    assert not any(m.server == middle for m in repair.migrations)
    assert policy.stranded == 0


@pytest.mark.parametrize("name", ["sv_feedback", "sv_improved"])
def test_a_camera_that_stops_drops_its_sessions_and_frees_its_nodes(name):
    workload = Workload(requests=400, horizon_s=200, session_mean_s=100)
    hot = simulate(workload, name, seed=2, camera_stops={0: 100.0})
    plain = simulate(workload, name, seed=2)
    assert hot.metrics["dropped"] > 0 and plain.metrics["dropped"] == 0
    assert hot.metrics["rejected_offline"] > 0  # camera 1 is hot: requested after it stopped
    assert hot.metrics["rejected_offline"] <= hot.metrics["rejected_by_node"]
    after = hot.samples[hot.samples["time_s"] == 101.0]["bandwidth"].sum()
    before = hot.samples[hot.samples["time_s"] == 99.0]["bandwidth"].sum()
    assert after < before  # its streams are gone from the nodes' links


def test_cluster_stop_ends_every_session_of_the_camera():
    made = cluster({"a": 0.5, "b": 0.5})
    made.assign("k", Choice("a"))
    made.assign("k", Choice("b", feeder="a"))
    made.assign("k", Choice("b"))
    assert made.stop("k") == {"a": 1, "b": 2}
    assert made.chain("k") == [] and made.nodes["a"].tasks == made.nodes["b"].tasks == 0


def test_a_request_for_a_camera_its_origin_reports_silent_is_refused():
    policy = POLICIES["sv_improved"]()
    placed = (Placement(request(0, "1"), "n1"), Placement(request(1, "2"), "n2"))
    silent = {"cpu": 0.1, "stream.1.silent_s": 2.5, "stream.2.silent_s": 0.04}
    state = State(nx.MultiDiGraph(), servers(), CAMERA_HOSTS, placements=placed, now=3.0,
                  loads=reports(3.0, n1=(3.0, silent), n2=(3.0, {"stream.2.silent_s": 1.9})),
                  requests=(request(2, "1"), request(3, "2")))
    decision = policy.decide(state)
    assert [(r.flow, r.reason) for r in decision.rejections] == [
        ("c2/video", "camera '1' stopped streaming")]
    assert [(a.flow, a.server) for a in decision.assignments] == [("c3/video", "n2")]


# --- leaving: the controller releases the placement ----------------------------------------

def surveillance_core(policy: str) -> ControllerCore:
    """A controller core over topologies/surveillance/surveillance.yaml (node1-3 with room for 4, 3 and 2
    streams of 1 Mbit/s; client1-5 ask for camera 1) running ``policy``."""
    return ControllerCore(NetworkView.from_scenario(load("topologies/surveillance/surveillance.yaml")),
                          create(policy))


def join(core: ControllerCore, client: str) -> str | None:
    """``client`` joins the video service; the node it got (None: refused)."""
    outcome = core.place([core.request_for(client, "video")])
    return outcome.placed.get(f"{client}/video")


def test_a_flow_that_leaves_frees_its_node_s_room_for_a_later_request():
    core = surveillance_core("sv_feedback")
    # The original sends every client of a streaming camera to its origin: node1 (the
    # heaviest weight, first by weighted round robin) takes four, then has no room.
    assert [join(core, f"client{i}") for i in range(1, 6)] == ["node1"] * 4 + [None]
    left = core.leave("client1/video")
    assert left.left == {"client1/video": "node1"} and "client1/video" not in core.flows
    assert core.leave("client1/video").left == {}  # left already: nothing changes
    assert join(core, "client5") == "node1"  # the room client1 held


def test_a_cascade_whose_clients_left_collapses_back_to_the_origin():
    core = surveillance_core("sv_improved")
    # With no reports the improved balancer queues a node by its placed share of capacity:
    # node1 serves three (0.75: moderate), then node2 helps, fed by node1.
    assert [join(core, f"client{i}") for i in range(1, 6)] == ["node1"] * 3 + ["node2"] * 2
    assert core.policy.last_chains["client5/video"] == ("node1", "node2")
    for client in ("client3", "client4", "client5"):
        core.leave(f"{client}/video")
    # node1 is light again (2 of 4) and node2 serves nobody: the next client is served by the
    # origin straight from the camera. Had the placements stayed, node1 would be moderate
    # (3 of 4) and the client would go to the helper node2 at depth 1.
    assert join(core, "client5") == "node1"
    assert core.policy.last_chains["client5/video"] == ("node1",)
    assert core.flows["client5/video"].placement.attributes["depth"] == 0
