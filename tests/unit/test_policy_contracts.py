"""The contract every policy keeps, checked over every policy the scan of controller/policies/
finds (a new scheme's policies are covered without editing this file), on states hypothesis
draws: every request is assigned or rejected exactly once, no server ends up with more than
its capacity (unless the policy is a baseline that says it places beyond it:
``within_capacity = False``), and two policies made with the same parameters decide the same.

A policy package may shape the drawn states with its own labels: a function
``contract_state(state: State, rng: random.Random) -> State`` beside its ``POLICIES`` (live_edge's
is in controller/policies/live_edge/__init__.py). Without one the generic state is used.

Capacity is used by an assignment's or placement's bitrate when it has one (a policy choosing
bitrates serves that much), else by its request's demand.
"""

from __future__ import annotations

import math
import random
import sys
from collections import defaultdict

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import controller.policies
from controller import policies
from controller.policy import Assignment, Client, Decision, Placement, Request, Server, State
from edgebed import discovery

SERVICES = ("video", "chat")
LADDER = (1e6, 2.5e6, 5e6, 8e6)


def _hooks() -> dict[str, object]:
    """Each policy's package's ``contract_state`` hook (None where there is none)."""
    found = {}
    for module in discovery.modules(sys.modules[controller.policies.__name__]):
        entries = getattr(module, "POLICIES", ())
        for policy in entries.values() if isinstance(entries, dict) else entries:
            found[policy.name] = getattr(module, "contract_state", None)
    return found


HOOKS = _hooks()


@st.composite
def states(draw) -> State:
    """A star network around one switch: servers of one or two services, clients, a few flows
    already placed and the requests to decide."""
    graph = nx.MultiDiGraph()
    graph.add_node("s1", role="switch")
    capacity = st.one_of(st.just(math.inf), st.floats(0, 40e6, allow_nan=False))
    servers = []
    for number in range(draw(st.integers(1, 4))):
        service = SERVICES[number % len(SERVICES)] if draw(st.booleans()) else SERVICES[0]
        limit = draw(capacity)
        servers.append(Server(f"e{number}", service, f"10.0.0.{number + 1}", limit,
                              load=draw(st.floats(0, 10e6)) if draw(st.booleans()) else 0.0))
    clients = [Client(f"v{number}", f"10.0.1.{number + 1}")
               for number in range(draw(st.integers(1, 6)))]
    for node in [*servers, *clients]:
        delay = draw(st.floats(0.001, 0.05))
        graph.add_node(node.name, role="host")
        graph.add_edge(node.name, "s1", delay=delay, bw=0, up=True)
        graph.add_edge("s1", node.name, delay=delay, bw=0, up=True)
    demand = st.floats(1e5, 8e6)
    requests, placements = [], []
    for client in clients:
        for service in draw(st.lists(st.sampled_from(SERVICES), unique=True, max_size=2)):
            request = Request(f"{client.name}/{service}", client.name, service, draw(demand),
                              bitrates=tuple(sorted(draw(st.sets(st.sampled_from(LADDER))),
                                                    reverse=True)))
            serving = [server for server in servers if server.service == service]
            if serving and draw(st.integers(0, 3)) == 0:
                placements.append(Placement(request, draw(st.sampled_from(serving)).name))
            else:
                requests.append(request)
    return State(graph=graph, servers=tuple(servers), clients=tuple(clients),
                 placements=tuple(placements), requests=tuple(requests),
                 now=draw(st.floats(0, 100)))


CAPACITY_SLACK = 1e-6


def used(request: Request, bitrate: float | None) -> float:
    return request.demand if bitrate is None else bitrate


def check_contract(state: State, decision: Decision, within_capacity: bool = True) -> None:
    requested = {request.flow: request for request in state.requests}
    decided = [assignment.flow for assignment in decision.assignments] + [
        rejection.flow for rejection in decision.rejections]
    assert sorted(decided) == sorted(requested), "every request assigned or rejected, once"
    capacity = {server.name: server.capacity for server in state.servers}
    usage: dict[str, float] = defaultdict(float)
    placed = {placement.request.flow: placement for placement in state.placements}
    moved = {migration.flow: migration for migration in decision.migrations}
    assert set(moved) <= set(placed), "migrations move placed flows"
    for flow, placement in placed.items():
        if flow in moved:
            usage[moved[flow].server] += used(placement.request, moved[flow].bitrate)
        else:
            usage[placement.server] += used(placement.request, placement.bitrate)
    # What was already over capacity before this decision is the network's, not the policy's.
    before = dict(usage) if not moved else {}
    for assignment in decision.assignments:
        request = requested[assignment.flow]
        assert assignment.server in capacity, f"{assignment.flow} to an unknown server"
        usage[assignment.server] += used(request, assignment.bitrate)
    # A millionth of a capacity is a solver's feasibility tolerance and float rounding of
    # sums (live_edge's SLACK), far below any bitrate step: not over capacity.
    for server, total in usage.items() if within_capacity else ():
        if total > capacity[server] * (1 + CAPACITY_SLACK) + 1e-6:
            assert total <= before.get(server, 0.0) * (1 + CAPACITY_SLACK) + 1e-6, (
                f"{server}: {total:g} used of {capacity[server]:g}")


def shaped(name: str, state: State, seed: int) -> State:
    hook = HOOKS.get(name)
    return hook(state, random.Random(seed)) if hook else state


@pytest.mark.parametrize("name", policies.available())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states(), seed=st.integers(0, 2**16))
def test_every_request_is_decided_within_capacity_and_deterministically(name, state, seed):
    state = shaped(name, state, seed)
    first, second = policies.create(name), policies.create(name)
    decision = first.decide(state)
    check_contract(state, decision, getattr(first, "within_capacity", True))
    assert second.decide(state) == decision, "the same parameters decide the same"


def test_every_discovered_policy_is_covered():
    """The parametrisation above is the scan's list, so a scheme's new policy is in it."""
    assert set(HOOKS) == set(policies.available())


def test_the_contract_catches_a_policy_that_overfills_or_forgets():
    """A decision putting everything on one small server, or leaving a request out, fails."""
    graph = nx.MultiDiGraph()
    state = State(graph=graph, servers=(Server("e0", "video", "10.0.0.1", 1e6),),
                  clients=(Client("v0", "10.0.1.1"),),
                  requests=(Request("a", "v0", "video", 8e5), Request("b", "v0", "video", 8e5)))
    overfull = Decision(assignments=[Assignment("a", "e0"), Assignment("b", "e0")])
    with pytest.raises(AssertionError, match="e0: 1.6e"):
        check_contract(state, overfull)
    with pytest.raises(AssertionError, match="every request"):
        check_contract(state, Decision(assignments=[Assignment("a", "e0")]))
