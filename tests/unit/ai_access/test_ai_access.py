"""ai_access's resource model, access algorithms and migration planning (pure code)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from controller.policies.ai_access import access
from controller.policies.ai_access.access import (adga, capacity_least_connections,
                                                  deal_groups, group_size, grouped_adga,
                                                  least_connections, maximum_matching,
                                                  power_of_two_choices,
                                                  weighted_least_connections)
from controller.policies.ai_access.migration import (DoubleSmoothing, Migrator, PlacedFlow,
                                                     acceptable_flows, load_spread)
from controller.policies.ai_access.resources import (FlowDemand, LoadWeights, Measurement, Port,
                                                     ServerLoad, ServerSpec, ServerTracker)

MB = 1e6


def spec(name, *rates, memory=100 * MB):
    return ServerSpec(name, tuple(Port(str(6100 + i), rate) for i, rate in enumerate(rates)),
                      memory)


def idle(*specs):
    return [ServerLoad.idle(s) for s in specs]


def flows(*bandwidths, memory=1 * MB):
    return [FlowDemand(f"f{i}", bw, memory) for i, bw in enumerate(bandwidths)]


def p2c(flows_, loads):
    return power_of_two_choices(flows_, loads, LoadWeights(), random.Random(1))


# The allocators that test capacity; the paper's least connections does not.
ALLOCATORS = [adga, grouped_adga, capacity_least_connections, weighted_least_connections, p2c]


def random_instance(rng: random.Random):
    servers = [spec(f"r{i}", *[rng.choice([20, 50, 100]) for _ in range(rng.randint(1, 3))],
                    memory=rng.choice([5, 10, 40]) * MB) for i in range(rng.randint(1, 6))]
    demands = [FlowDemand(f"f{k}", rng.choice([1, 5, 10, 30, 60]), rng.choice([0.5, 1, 4]) * MB)
               for k in range(rng.randint(0, 60))]
    return servers, demands


# Resource model


def test_smoothing_of_bandwidth_and_memory_follows_the_spec_factor():
    tracker = ServerTracker(spec("r1", 100, 50))
    tracker.update(Measurement({"6100": 10.0, "6101": 0.0}, {"6100": 2 * MB}, cpu=0.1))
    load = tracker.update(Measurement({"6100": 20.0, "6101": 5.0}, {"6100": 4 * MB}, cpu=0.3))
    # 0.8 * new + 0.2 * old
    assert load.bandwidth == pytest.approx({"6100": 18.0, "6101": 4.0})
    assert load.memory == pytest.approx({"6100": 3.6 * MB, "6101": 0.0})
    assert load.network_utilisation == pytest.approx(22 / 150)
    assert load.memory_utilisation == pytest.approx(0.036)
    assert load.degree(LoadWeights()) == pytest.approx((0.3 + 0.036 + 22 / 150) / 3)
    assert load.degree(LoadWeights(cpu=2, memory=0, network=0)) == pytest.approx(0.3)


@pytest.mark.parametrize("measurement, field", [
    (Measurement({"9999": 1.0}, {}, 0.1), "unknown ports"),
    (Measurement({"6100": -1.0}, {}, 0.1), "bandwidth of port 6100"),
    (Measurement({"6100": float("nan")}, {}, 0.1), "bandwidth of port 6100"),
    (Measurement({}, {"6100": "lots"}, 0.1), "memory of port 6100"),
    (Measurement({}, {}, 1.5), "cpu"),
])
def test_a_malformed_measurement_is_refused_and_leaves_the_load_as_it_was(measurement, field):
    tracker = ServerTracker(spec("r1", 100))
    before = tracker.update(Measurement({"6100": 10.0}, {}, 0.2))
    with pytest.raises(ValueError, match=field):
        tracker.update(measurement)
    assert tracker.load is before


def test_weights_must_not_all_be_zero():
    with pytest.raises(ValueError):
        LoadWeights(cpu=0, memory=0, network=0)


# Matching and access


@pytest.mark.parametrize("seed", range(40))
def test_matching_is_maximum_against_an_assignment_solver(seed):
    rng = np.random.default_rng(seed)
    edges = rng.random((rng.integers(1, 30), rng.integers(1, 12))) < rng.uniform(0.05, 0.6)
    matched = maximum_matching(edges)
    columns = [c for c in matched if c >= 0]
    assert len(columns) == len(set(columns))
    assert all(edges[row, c] for row, c in enumerate(matched) if c >= 0)
    rows, cols = linear_sum_assignment(edges.astype(float), maximize=True)
    assert len(columns) == int(edges[rows, cols].sum())


@pytest.mark.parametrize("allocator", ALLOCATORS, ids=lambda a: getattr(a, "__name__", "p2c"))
@pytest.mark.parametrize("seed", range(25))
def test_no_port_rate_or_server_memory_is_exceeded_and_every_flow_is_answered(allocator, seed):
    servers, demands = random_instance(random.Random(seed))
    allocation = allocator(demands, idle(*servers))
    assert set(allocation.placed) | set(allocation.rejected) == {f.flow for f in demands}
    assert not set(allocation.placed) & set(allocation.rejected)
    by_name = {s.name: s for s in servers}
    demand = {f.flow: f for f in demands}
    used: dict = {}
    memory: dict = {}
    for flow, (server, port) in allocation.placed.items():
        used[server, port] = used.get((server, port), 0) + demand[flow].bandwidth
        memory[server] = memory.get(server, 0) + demand[flow].memory
    for (server, port), bandwidth in used.items():
        assert bandwidth <= by_name[server].port(port).rate
    for server, held in memory.items():
        assert held <= by_name[server].memory
    # A rejected flow really fits nowhere once the others are placed.
    for flow in allocation.rejected:
        f = demand[flow]
        assert not any(
            memory.get(s.name, 0) + f.memory <= s.memory
            and any(used.get((s.name, p.name), 0) + f.bandwidth <= p.rate for p in s.ports)
            for s in servers)


@pytest.mark.parametrize("seed", range(60))
def test_each_adga_round_places_a_maximum_matching(seed, monkeypatch):
    """Every round's matching is as large as an assignment solver finds on that round's graph."""
    rounds = []
    real = access.round_matching

    def checked(rooms, bandwidth, memory):
        matched = real(rooms, bandwidth, memory)
        edges = access._edges(rooms, bandwidth, None, memory)  # the whole round's graph
        assert all(edges[row, column] for row, column in enumerate(matched) if column >= 0)
        rows, cols = linear_sum_assignment(edges.astype(float), maximize=True)
        rounds.append((int((matched >= 0).sum()), int(edges[rows, cols].sum())))
        return matched

    monkeypatch.setattr(access, "round_matching", checked)
    servers, demands = random_instance(random.Random(seed))
    adga(demands, idle(*servers))
    assert rounds or not demands
    assert all(found == best for found, best in rounds)


def test_adga_gives_each_server_one_flow_per_round_and_spreads_over_ports():
    allocation = adga(flows(*[10] * 8), idle(spec("r1", 100, 100), spec("r2", 100, 100)))
    assert allocation.rounds == 4
    assert sorted(allocation.placed.values()).count(("r1", "6100")) == 2


def test_a_flow_larger_than_any_port_is_rejected_by_every_policy():
    demands = [FlowDemand("huge", 500, 1 * MB), FlowDemand("ok", 10, 1 * MB)]
    for allocator in ALLOCATORS:
        allocation = allocator(demands, idle(spec("r1", 100, 100), spec("r2", 200)))
        assert allocation.placed.keys() == {"ok"}
        assert "500 bit/s" in allocation.rejected["huge"]


def test_memory_limits_the_flows_a_server_takes():
    allocation = capacity_least_connections(flows(*[1] * 5, memory=30 * MB),
                                            idle(spec("r1", 100)))
    assert len(allocation.placed) == 3 and len(allocation.rejected) == 2


def test_group_size_is_the_average_allocation():
    assert group_size(100, 4) == 25
    assert group_size(101, 4) == 26
    assert group_size(3, 4) == 1
    assert group_size(0, 0) == 1


def test_groups_are_dealt_in_snake_order_with_close_demands():
    groups = deal_groups(flows(8, 7, 6, 5, 4, 3, 2, 1), 4)
    assert [[f.bandwidth for f in group] for group in groups] == [[8, 5, 4, 1], [7, 6, 3, 2]]


def test_grouped_adga_places_equal_groups_in_one_round_when_servers_have_room():
    allocation = grouped_adga(flows(*[1] * 100), idle(*[spec(f"r{i}", 100) for i in range(4)]))
    assert allocation.rounds == 1
    per_server = {}
    for server, _ in allocation.placed.values():
        per_server[server] = per_server.get(server, 0) + 1
    assert per_server == {"r0": 25, "r1": 25, "r2": 25, "r3": 25}


def test_grouped_adga_shrinks_groups_a_small_server_cannot_take():
    allocation = grouped_adga(flows(*[10] * 12), idle(spec("big", 100), spec("small", 30)))
    assert not allocation.rejected
    small = sum(server == "small" for server, _ in allocation.placed.values())
    assert small == 3


def test_least_connections_and_weighted_least_connections_differ_on_unequal_servers():
    servers = idle(spec("fast", 300), spec("slow", 100))
    lc = capacity_least_connections(flows(*[1] * 8), servers)
    wlc = weighted_least_connections(flows(*[1] * 8), servers)
    count = lambda allocation, name: sum(s == name for s, _ in allocation.placed.values())
    assert count(lc, "fast") == 4
    assert count(wlc, "fast") == 6


def per_server(allocation):
    counts: dict = {}
    for server, _ in allocation.placed.values():
        counts[server] = counts.get(server, 0) + 1
    return counts


def test_adga_and_the_papers_least_connections_differ_where_a_server_has_no_room():
    # The paper's argument: ADGA draws an edge only where the server's remaining bandwidth and
    # memory cover the flow, least connections looks at connections alone. "small" already
    # holds one flow and has no room for a second, "big" holds two and has room: least
    # connections sends the next flow to "small", ADGA to "big".
    small = ServerLoad(spec("small", 15), {"6100": 10.0}, {"6100": 1 * MB}, 0.0, {"6100": 1})
    big = ServerLoad(spec("big", 100), {"6100": 20.0}, {"6100": 2 * MB}, 0.0, {"6100": 2})
    demand = flows(10)
    assert least_connections(demand, [small, big]).placed == {"f0": ("small", "6100")}
    assert adga(demand, [small, big]).placed == {"f0": ("big", "6100")}
    assert grouped_adga(demand, [small, big]).placed == {"f0": ("big", "6100")}


def test_the_papers_least_connections_deals_flows_evenly_whatever_the_servers_have():
    allocation = least_connections(flows(*[30] * 12, memory=5 * MB),
                                   idle(spec("big", 1000, 1000), spec("small", 40)))
    assert not allocation.rejected
    assert per_server(allocation) == {"big": 6, "small": 6}
    ports = [port for server, port in allocation.placed.values() if server == "big"]
    assert ports.count("6100") == ports.count("6101") == 3
    capped = capacity_least_connections(flows(*[30] * 12, memory=5 * MB),
                                        idle(spec("big", 1000, 1000), spec("small", 40)))
    assert per_server(capped) == {"big": 11, "small": 1}


def test_power_of_two_choices_is_deterministic_for_a_seed():
    servers = idle(*[spec(f"r{i}", 100) for i in range(5)])
    first = p2c(flows(*[3] * 30), servers)
    assert first.placed == p2c(flows(*[3] * 30), servers).placed


# Prediction and migration


def test_double_smoothing_on_a_hand_computed_series():
    smoothing = DoubleSmoothing(alpha=0.5)
    assert smoothing.update(0.2) == pytest.approx(0.2)
    # S1 = 0.3, S2 = 0.25; level 0.35, trend 0.05
    assert smoothing.update(0.4) == pytest.approx(0.4)
    # S1 = 0.35, S2 = 0.3; level 0.4, trend 0.05
    assert smoothing.update(0.4) == pytest.approx(0.45)
    assert smoothing.forecast(ahead=2) == pytest.approx(0.5)


def test_double_smoothing_follows_a_linear_trend_exactly_once_settled():
    smoothing = DoubleSmoothing(alpha=0.6)
    for t in range(60):
        forecast = smoothing.update(0.1 + 0.01 * t)
    assert forecast == pytest.approx(0.1 + 0.01 * 60, abs=1e-6)


def test_load_spread_is_the_population_standard_deviation():
    assert load_spread([0.1, 0.3]) == pytest.approx(0.1)
    assert load_spread([0.5]) == 0.0


def loaded(server_spec, port_bandwidth, cpu, memory=0.0):
    return ServerLoad(server_spec, dict(port_bandwidth),
                      {p.name: memory / len(server_spec.ports) for p in server_spec.ports}, cpu)


def test_reactive_migration_forecasts_the_last_load_prediction_extrapolates_its_trend():
    a, b = spec("a", 100), spec("b", 100)
    weights = LoadWeights(cpu=0, memory=0, network=1)
    reactive, predicting = Migrator(weights, forecast="last"), Migrator(weights)
    for bandwidth in (10, 20, 30):
        loads = {"a": loaded(a, {"6100": bandwidth}, 0), "b": loaded(b, {"6100": 10}, 0)}
        last, forecast = reactive.observe(loads), predicting.observe(loads)
    assert last == pytest.approx({"a": 0.3, "b": 0.1})
    assert forecast["a"] > 0.3 and forecast["b"] == pytest.approx(0.1)
    assert reactive.spread == pytest.approx(0.1)


def test_the_trigger_fires_only_above_theta():
    a, b = spec("a", 100), spec("b", 100)
    weights = LoadWeights(cpu=0, memory=0, network=1)
    below = Migrator(weights)
    below.observe({"a": loaded(a, {"6100": 50}, 0), "b": loaded(b, {"6100": 30}, 0)})
    assert below.spread == pytest.approx(0.1) and not below.triggered
    above = Migrator(weights)
    above.observe({"a": loaded(a, {"6100": 51}, 0), "b": loaded(b, {"6100": 30}, 0)})
    assert above.triggered


def test_acceptable_flows_from_remaining_ports_and_memory():
    assert acceptable_flows([25, 9, 40], 100, bandwidth=10, memory=1) == 6
    assert acceptable_flows([25, 9, 40], 3.5, bandwidth=10, memory=1) == 3
    assert acceptable_flows([5], 100, bandwidth=10, memory=1) == 0


def test_migration_moves_the_smallest_flows_as_many_as_the_targets_ports_admit():
    hot, cool = spec("hot", 100), spec("cool", 100, 100, 100)
    placed = [PlacedFlow(FlowDemand(f"f{i}", bw, 1), "hot", "6100")
              for i, bw in enumerate([30, 10, 10, 10, 10, 10, 10, 5])]
    # The load degree is the CPU's alone here, so the ports only limit how many flows move:
    # cool's ports have 5, 5 and 20 bit/s left, room for one 5 bit/s and two 10 bit/s flows.
    migrator = Migrator(LoadWeights(cpu=1, memory=0, network=0))
    loads = {"hot": loaded(hot, {"6100": 95}, cpu=0.9),
             "cool": loaded(cool, {"6100": 95, "6101": 95, "6102": 80}, cpu=0.1)}
    migrator.observe(loads)
    assert migrator.triggered
    moves = migrator.plan(loads, placed)
    assert [(m.flow, m.port) for m in moves] == [("f7", "6102"), ("f1", "6102")]
    # The 5 bit/s flow took 5 of port 6102's 20: one 10 bit/s flow still fits there, not two.
    assert acceptable_flows([5, 5, 15], 100, bandwidth=10, memory=1) == 1


def test_remaining_bandwidth_is_smoothed_over_periods_with_u():
    server = spec("a", 100)
    migrator = Migrator()
    migrator.observe({"a": loaded(server, {"6100": 90}, 0)})
    migrator.observe({"a": loaded(server, {"6100": 20}, 0)})
    assert migrator.remaining["a"]["6100"] == pytest.approx(0.8 * 80 + 0.2 * 10)


def test_migration_count_is_capped_by_the_targets_memory():
    hot, cool = spec("hot", 100), spec("cool", 100, memory=35)
    placed = [PlacedFlow(FlowDemand(f"f{i}", 1, 10), "hot", "6100") for i in range(20)]
    migrator = Migrator(LoadWeights(cpu=0, memory=0, network=1))
    loads = {"hot": loaded(hot, {"6100": 90}, 0), "cool": loaded(cool, {"6100": 0}, 0)}
    migrator.observe(loads)
    assert len(migrator.plan(loads, placed)) == acceptable_flows([100], 35, 1, 10) == 3


def test_migration_narrows_the_spread_and_never_overshoots():
    a, b, c = spec("a", 100), spec("b", 100), spec("c", 100)
    placed = [PlacedFlow(FlowDemand(f"f{i}", 3, 1), "a", "6100") for i in range(30)]
    migrator = Migrator(LoadWeights(cpu=0, memory=0, network=1))
    loads = {"a": loaded(a, {"6100": 90}, 0), "b": loaded(b, {"6100": 30}, 0),
             "c": loaded(c, {"6100": 30}, 0)}
    migrator.observe(loads)
    moves = migrator.plan(loads, placed)
    moved = len(moves) * 3
    assert {m.target for m in moves} == {"b", "c"}
    assert 90 - moved >= 50 - 3  # stops once a reaches the mean, within one flow


@pytest.mark.parametrize("allocator", [*ALLOCATORS, least_connections],
                         ids=lambda a: getattr(a, "__name__", "p2c"))
def test_every_placed_flow_has_a_grant_time_in_order_of_rounds(allocator):
    allocation = allocator(flows(*[1] * 40), idle(*[spec(f"r{i}", 100) for i in range(4)]))
    assert allocation.granted.keys() == allocation.placed.keys()
    assert all(seconds >= 0 for seconds in allocation.granted.values())


# The policies on the controller's interface

from types import MappingProxyType  # noqa: E402

import networkx as nx  # noqa: E402

from controller.policies.ai_access import POLICIES as AI_POLICIES  # noqa: E402
from controller.policies.ai_access.policies import AiAccessParams  # noqa: E402
from controller.policy import LoadReport, Placement, Request, Server, State  # noqa: E402

PORTS = {"ports": "6100=100Mbps,6101=50Mbps", "memory": "10MB"}


def access_server(name, **labels):
    return Server(name, "ai", "10.0.0.9", float("inf"), labels={**PORTS, **labels})


def report(server, received, cpu=0.1, **port_bw):
    metrics = {"cpu": cpu, **{f"port.{port}.bw_in": bw for port, bw in port_bw.items()}}
    return LoadReport(server, received, 0.0, metrics)


def ai_state(servers, requests=(), placements=(), loads=None, now=10.0):
    return State(nx.MultiDiGraph(), tuple(servers), (), tuple(placements), tuple(requests),
                 now, loads=MappingProxyType(loads or {}))


def ai_request(flow, bandwidth=10e6, **labels):
    return Request(flow, "t1", "ai", bandwidth, labels=labels)


def create(name, **params):
    return AI_POLICIES[name](AiAccessParams(**params))


@pytest.mark.parametrize("name", ["ai_adga", "ai_adga_grouped", "ai_lc_capacity", "ai_wlc",
                                  "ai_p2c"])
def test_policies_place_by_measured_load_and_reject_what_fits_nowhere(name):
    policy = create(name)
    servers = [access_server("a"), access_server("b")]
    # a reports its 100 Mbit/s port nearly full; b is idle.
    loads = {"a": (report("a", 9.5, **{"6100": 95e6, "6101": 45e6}),),
             "b": (report("b", 9.5),)}
    decision = policy.decide(ai_state(servers, [ai_request("f1", 20e6),
                                                ai_request("huge", 500e6)], loads=loads))
    assert [(a.flow, a.server) for a in decision.assignments] == [("f1", "b")]
    assert [r.flow for r in decision.rejections] == ["huge"]
    assert decision.assignments[0].attributes == {"port": "6100"}


def test_a_malformed_report_is_counted_and_a_stale_server_takes_nothing():
    policy = create("ai_lc_capacity")
    servers = [access_server("a"), access_server("b")]
    loads = {"a": (report("a", 1.0),),  # stale at now = 10 (max_age 3 s)
             "b": (report("b", 9.0, **{"6199": 1e6}),)}  # a port b does not have
    decision = policy.decide(ai_state(servers, [ai_request("f1")], loads=loads))
    assert policy.refused_reports == 1
    # b's only report was refused: b counts as never measured (idle); a is stale.
    assert [(a.flow, a.server) for a in decision.assignments] == [("f1", "b")]


def test_a_server_without_ports_has_one_of_its_capacity_and_bad_labels_are_named():
    policy = create("ai_adga")
    plain = Server("plain", "ai", "10.0.0.9", 15e6)
    decision = policy.decide(ai_state([plain], [ai_request("f1"), ai_request("f2")]))
    assert [a.flow for a in decision.assignments] == ["f1"]  # 10 of 15 Mbit/s, not 20
    broken = access_server("broken", ports="6100:100Mbps")
    decision = policy.decide(ai_state([broken], [ai_request("f3")]))
    assert "'broken': port '6100:100Mbps' is not PORT=RATE" in decision.rejections[0].reason


def test_flows_placed_but_not_yet_measured_hold_their_demand():
    policy = create("ai_lc_capacity")
    servers = [access_server("a")]
    placed = [Placement(ai_request(f"p{i}", 40e6), "a",
                        attributes={"port": "6100" if i < 2 else "6101"}) for i in range(3)]
    decision = policy.decide(ai_state(servers, [ai_request("f1", 20e6)], placed))
    # 6100 holds 80 of 100 Mbit/s, 6101 40 of 50: only 6100 takes 20 more.
    assert [(a.flow, a.server) for a in decision.assignments] == [("f1", "a")]
    assert policy.last_ports["f1"] == "6100"


def test_migrating_policy_moves_flows_off_the_overloaded_server_on_reports():
    policy = create("ai_adga", migrate=True, weights={"cpu": 0, "memory": 0, "network": 1})
    assert policy.on_load == "rebalance"
    servers = [access_server("a"), access_server("b")]
    placements = []
    for index in range(6):
        placements.append(Placement(ai_request(f"f{index}", 20e6), "a"))
        policy.last_ports[f"f{index}"] = "6100" if index < 4 else "6101"
    loads = {"a": (report("a", 9.5, **{"6100": 95e6, "6101": 45e6}),),
             "b": (report("b", 9.5),)}
    decision = policy.decide(ai_state(servers, placements=placements, loads=loads))
    assert decision.migrations and all(m.server == "b" for m in decision.migrations)
    assert all(m.attributes["port"] in ("6100", "6101") for m in decision.migrations)
    assert len(decision.migrations) <= 3  # b's ports take 150 Mbit/s; the spread stops earlier
    # The same reports again are not new: no second round of moves.
    assert not policy.decide(ai_state(servers, placements=placements, loads=loads)).migrations
