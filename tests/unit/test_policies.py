"""The baseline scheduling policies (round robin, least loaded) and the policy registry."""

from __future__ import annotations

import math
import random
from collections import Counter

import networkx as nx
import pytest

from controller import policies
from controller.policies.baseline import LeastLoaded, LeastLoadedParams, RoundRobin
from controller.policy import Migration, Placement, Rejection, Request, Server, State

INF = math.inf


def server(name, capacity=INF, load=0.0, service="video"):
    return Server(name, service, "10.0.0.1", capacity, load)


def request(flow, demand=1.0, service="video"):
    return Request(flow, "c1", service, demand)


def placed(flow, on, demand, service="video"):
    return Placement(request(flow, demand, service), on)


def make_state(servers, placements=(), requests=()):
    return State(nx.MultiDiGraph(), tuple(servers), (), tuple(placements), tuple(requests))


def place(policy, state):
    """The policy's decision, and the server it gave each request in order (None: rejected)."""
    decision = policy.decide(state)
    assigned = {assignment.flow: assignment.server for assignment in decision.assignments}
    rejected = {rejection.flow for rejection in decision.rejections}
    assert all((r.flow in assigned) != (r.flow in rejected) for r in state.requests)
    return [assigned.get(r.flow) for r in state.requests], decision


def requests(*demands, service="video"):
    return [request(f"r{index}", demand, service) for index, demand in enumerate(demands)]


def least_loaded(threshold=None, max_migrations=1):
    return LeastLoaded(LeastLoadedParams(rebalance_threshold=threshold,
                                         max_migrations=max_migrations))


def util(load, capacity):
    return load if capacity == INF else load / capacity


# Round robin


def test_round_robin_turns_by_name_per_service_and_across_calls():
    policy = RoundRobin()
    servers = [server("c"), server("a"), server("b"), server("y", service="chat"),
               server("x", service="chat")]
    mixed = [request("r0"), request("r1", service="chat"), request("r2"), request("r3"),
             request("r4", service="chat"), request("r5")]
    assert place(policy, make_state(servers, requests=mixed))[0] == [
        "a", "x", "b", "c", "y", "a"]
    assert place(policy, make_state(servers, requests=requests(1, 1)))[0] == ["b", "c"]


def test_round_robin_skips_servers_the_placed_and_assigned_demand_fills():
    servers = [server("a", capacity=2), server("b", capacity=3, load=50), server("c", capacity=3)]
    state = make_state(servers, [placed("p", "a", 2)], requests(2, 2, 2, 1))
    chosen, decision = place(RoundRobin(), state)
    # a is full from the start; b's report of 50 does not count for round robin.
    assert chosen == ["b", "c", None, "b"]
    assert "room for demand 2" in decision.rejections[0].reason
    assert decision.migrations == []


@pytest.mark.parametrize("policy", [RoundRobin(), least_loaded(threshold=0.1)],
                         ids=["round_robin", "least_loaded"])
def test_a_service_without_servers_is_rejected_with_a_reason(policy):
    state = make_state([server("a")], requests=[request("r0", service="ai"), request("r1")])
    chosen, decision = place(policy, state)
    assert chosen == [None, "a"]
    assert decision.rejections == [Rejection("r0", "service 'ai' has no servers")]


# Least loaded


def test_least_loaded_picks_the_lowest_utilization_counting_reports_and_this_call():
    servers = [server("a", 10, load=5), server("b", 20), server("c", 10, load=1),
               server("d", 10, load=8)]
    placements = [placed("pb", "b", 4), placed("pc", "c", 3), placed("pd", "d", 2)]
    # Utilizations a .5, b .2, c .3 (placed 3 beats reported 1), d .8 (reported 8 beats 2).
    # After r0, b is at .3 and ties c: the name decides; after r1 b is at .4.
    state = make_state(servers, placements, requests(2, 2, 2))
    assert place(least_loaded(), state)[0] == ["b", "b", "c"]


def test_least_loaded_compares_unlimited_servers_by_absolute_load():
    state = make_state([server("a", load=5), server("b", load=3)], requests=requests(3, 1))
    assert place(least_loaded(), state)[0] == ["b", "a"]


def test_least_loaded_never_exceeds_capacity_and_rejects_what_fits_nowhere():
    state = make_state([server("a", 4, load=3), server("b", 10, load=9)],
                       requests=requests(2, 1, 1, 1))
    chosen, decision = place(least_loaded(), state)
    assert chosen == [None, "a", "b", None]
    assert "room for demand 1" in decision.rejections[1].reason


# Least loaded: rebalancing

UNBALANCED = make_state([server("a", 10), server("b", 10)],
                        [placed("f3", "a", 3), placed("f1", "a", 1), placed("f2", "a", 2)])


def test_rebalance_moves_the_smallest_flow_and_narrows_the_spread():
    decision = least_loaded(threshold=0.3).decide(UNBALANCED)
    assert decision.migrations == [Migration("f1", "b")]
    assert abs(util(6 - 1, 10) - util(0 + 1, 10)) < util(6, 10) - util(0, 10)


def test_rebalance_stops_within_the_threshold_or_at_max_migrations():
    # a .6 / b 0 -> .5 / .1 (gap .4, still over .3) -> .3 / .3: within, so no third move.
    assert least_loaded(threshold=0.3, max_migrations=3).decide(UNBALANCED).migrations == [
        Migration("f1", "b"), Migration("f2", "b")]
    assert least_loaded(threshold=0.3, max_migrations=1).decide(UNBALANCED).migrations == [
        Migration("f1", "b")]


@pytest.mark.parametrize("threshold", [None, 0.6, 0.7])
def test_no_migration_within_the_threshold_or_without_one(threshold):
    assert least_loaded(threshold=threshold, max_migrations=5).decide(UNBALANCED).migrations == []


def test_rebalance_skips_flows_whose_move_would_not_narrow_the_gap():
    servers = [server("a", 10), server("b", 10)]
    # f0 changes nothing; f6 alone would swap a .6 / b 0 into a 0 / b .6.
    with_small_flows = make_state(servers, [placed("f0", "a", 0), placed("f2", "a", 2),
                                            placed("f4", "a", 4)])
    assert least_loaded(threshold=0.1).decide(with_small_flows).migrations == [
        Migration("f2", "b")]
    one_big_flow = make_state(servers, [placed("f6", "a", 6)])
    assert least_loaded(threshold=0.1).decide(one_big_flow).migrations == []


def test_rebalance_respects_the_target_capacity():
    state = make_state([server("a", 10), server("b", 2)], [placed("f3", "a", 3)])
    assert least_loaded(threshold=0.2).decide(state).migrations == []


def test_rebalance_never_widens_the_spread_of_the_service():
    # Moving f7 off b (1.0) to c (.5) would leave b at .3 and c at .507: a closer pair, but a
    # at 1.0 would then be .7 from b.
    servers = [server("a", 10, load=10), server("b", 10, load=10), server("c", 1000, load=500)]
    state = make_state(servers, [placed("f7", "b", 7)])
    assert least_loaded(threshold=0.3).decide(state).migrations == []


# Every policy, on random instances


POLICY_FACTORIES = {
    "round_robin": RoundRobin,
    "least_loaded": least_loaded,
    "least_loaded_rebalancing": lambda: least_loaded(threshold=0.2, max_migrations=3),
}


def random_state(rng: random.Random) -> State:
    servers, placements = [], []
    for service in ("video", "chat", "ai")[:rng.randint(1, 3)]:
        for index in range(rng.randint(0, 4)):
            name = f"{service}{index}"
            capacity = rng.choice([INF, *range(1, 21)])
            servers.append(Server(name, service, f"10.0.0.{len(servers) + 1}", capacity,
                                  float(rng.randint(0, 12)), {"zone": rng.choice("NS")}))
            room = 30 if capacity == INF else capacity
            for flow in range(rng.randint(0, 4)):
                demand = rng.randint(0, 6)
                if demand <= room:
                    room -= demand
                    placements.append(Placement(Request(f"{name}-f{flow}", "c1", service,
                                                        float(demand)), name))
    rng.shuffle(servers)
    pending = [Request(f"r{index}", "c1", rng.choice(["video", "chat", "ai", "none"]),
                       float(rng.randint(0, 8))) for index in range(rng.randint(0, 12))]
    return State(nx.MultiDiGraph(), tuple(servers), (), tuple(placements), tuple(pending))


def spread(servers, loads):
    utilizations = [util(loads[s.name], s.capacity) for s in servers]
    return max(utilizations) - min(utilizations)


def check_decision(policy, state, decision):
    """Every request assigned or rejected once, as the policy's rule says; migrations of placed
    flows within their service that do not widen its spread; no server that gained demand over
    its capacity."""
    by_name = {server.name: server for server in state.servers}
    counts_reports = isinstance(policy, LeastLoaded)
    outcomes = Counter([assignment.flow for assignment in decision.assignments]
                       + [rejection.flow for rejection in decision.rejections])
    assert outcomes == Counter(request.flow for request in state.requests)

    loads = {name: state.placed_load(name) for name in by_name}
    if counts_reports:
        loads = {name: max(load, by_name[name].load) for name, load in loads.items()}
    assigned = {assignment.flow: assignment.server for assignment in decision.assignments}
    # Replay the requests in order: each goes to a fitting server of its service, and for least
    # loaded to one no more utilized than any other fitting one; rejected means none fits.
    for pending in state.requests:
        candidates = [s for s in state.servers_of(pending.service)
                      if loads[s.name] + pending.demand <= s.capacity]
        if pending.flow not in assigned:
            assert candidates == []
            continue
        chosen = by_name[assigned[pending.flow]]
        assert chosen in candidates
        if counts_reports:
            assert util(loads[chosen.name], chosen.capacity) <= min(
                util(loads[s.name], s.capacity) for s in candidates)
        loads[chosen.name] += pending.demand

    before = dict(loads)
    flows = {placement.request.flow: placement for placement in state.placements}
    assert len({migration.flow for migration in decision.migrations}) == len(decision.migrations)
    for migration in decision.migrations:
        moving = flows[migration.flow]
        target = by_name[migration.server]
        assert target.service == moving.request.service and target.name != moving.server
        loads[moving.server] -= moving.request.demand
        loads[target.name] += moving.request.demand
    for service in {server.service for server in state.servers}:
        members = state.servers_of(service)
        assert spread(members, loads) <= spread(members, before) + 1e-9
    touched = set(assigned.values()) | {migration.server for migration in decision.migrations}
    for name in touched:
        assert loads[name] <= by_name[name].capacity


@pytest.mark.parametrize("policy_name", POLICY_FACTORIES)
def test_random_instances_are_fully_decided_within_capacity(policy_name):
    rng = random.Random(20240611)
    policy = POLICY_FACTORIES[policy_name]()
    outcomes = Counter()
    for _ in range(400):
        state = random_state(rng)
        decision = policy.decide(state)
        check_decision(policy, state, decision)
        outcomes.update(assigned=len(decision.assignments), rejected=len(decision.rejections),
                        migrated=len(decision.migrations))
    # The instances exercise every outcome the policy can have.
    assert outcomes["assigned"] > 100 and outcomes["rejected"] > 100
    assert (outcomes["migrated"] > 0) == (policy_name == "least_loaded_rebalancing")


@pytest.mark.parametrize("policy_name", POLICY_FACTORIES)
def test_policies_leave_state_alone_and_repeat_themselves(policy_name):
    rng = random.Random(7)
    states = [random_state(rng) for _ in range(30)]
    snapshot = [(s.servers, [x.labels.copy() for x in s.servers], s.placements, s.requests)
                for s in states]
    first, second = POLICY_FACTORIES[policy_name](), POLICY_FACTORIES[policy_name]()
    # Each state twice: round robin's turn moves on between the two calls.
    decisions = [[policy.decide(state) for state in states + states] for policy in (first, second)]
    assert decisions[0] == decisions[1]
    assert snapshot == [(s.servers, [x.labels for x in s.servers], s.placements, s.requests)
                        for s in states]


# Registry


def test_registry_lists_the_policies_and_creates_them():
    # Every scheme's package adds its own; these are the baselines' and live_edge's.
    assert {"df", "least_loaded", "lua", "mhcp", "optimal", "random",
            "round_robin"} <= set(policies.available())
    assert policies.available() == sorted(policies.available())
    assert isinstance(policies.create("round_robin", {}), RoundRobin)
    created = policies.create("least_loaded", {"rebalance_threshold": 0.3, "max_migrations": 2})
    assert created.name == "least_loaded"
    assert created.decide(UNBALANCED).migrations == [Migration("f1", "b"), Migration("f2", "b")]


def test_unknown_policy_is_named_with_the_valid_ones():
    for lookup in (lambda: policies.create("randomly", {}),
                   lambda: policies.params_model("randomly")):
        with pytest.raises(ValueError,
                           match=r"unknown policy 'randomly'.*least_loaded, lua, .*round_robin"):
            lookup()


@pytest.mark.parametrize("params, problem", [
    ({"threshold": 0.5}, "threshold: Extra inputs"),
    ({"rebalance_threshold": 0}, "rebalance_threshold: Input should be greater than 0"),
    ({"rebalance_threshold": 1.5}, "rebalance_threshold: Input should be less than"),
    ({"max_migrations": 0}, "max_migrations: Input should be greater than or equal to 1"),
])
def test_bad_params_name_the_parameter_and_the_valid_ones(params, problem):
    with pytest.raises(ValueError) as raised:
        policies.create("least_loaded", params)
    message = str(raised.value)
    assert "policy 'least_loaded'" in message and problem in message
    assert "valid params: candidates, rebalance_threshold, max_migrations" in message


def test_params_models_forbid_extra_keys_in_their_schema():
    for name in policies.available():
        schema = policies.params_model(name).model_json_schema()
        assert schema["additionalProperties"] is False
    assert policies.params_model("least_loaded").model_json_schema()["properties"][
        "max_migrations"]["default"] == 1
    with pytest.raises(ValueError, match=r"round_robin.*valid params: candidates\)"):
        policies.create("round_robin", {"cursor": 1})
