"""The baseline scheduling policies: round robin and least loaded."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Annotated

from pydantic import Field

from controller.policy import (Assignment, Decision, Migration, Placement, PolicyParams,
                               Rejection, Request, Server, State)


class BaselineParams(PolicyParams):
    """What both baseline policies take."""

    candidates: int = Field(0, ge=0, le=16, description="fitting servers handed to the client "
                                                        "to probe, best first (0: none)")


class RoundRobinParams(BaselineParams):
    """Round robin's parameters: only the candidates."""


class LeastLoadedParams(BaselineParams):
    """Parameters of least loaded: when and how much it rebalances, and the candidates."""

    rebalance_threshold: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="migrate when a service's most and least utilized servers are further "
                          "apart than this (utilization 0 to 1); none: never migrate")
    max_migrations: int = Field(1, ge=1, description="most flows migrated per decision")


def utilization(load: float, capacity: float) -> float:
    """``load`` as a fraction of ``capacity``. Unlimited servers have no fraction, so they compare
    by absolute load; a zero-capacity server counts as full."""
    if math.isinf(capacity):
        return load
    return load / capacity if capacity > 0 else math.inf


class _OneServerPerRequest:
    """Base of the policies here: places the requests in order, each on a fitting server chosen
    by ``_pick``, then asks ``_migrations`` for moves of placed flows."""

    name: str
    # Least loaded trusts a server's own report when it says more than the placed demand (the
    # server may be busy with work the controller did not place); round robin ignores reports.
    counts_reported_load = False

    def decide(self, state: State) -> Decision:
        loads: dict[str, float] = defaultdict(float)
        for placement in state.placements:
            loads[placement.server] += placement.request.demand
        if self.counts_reported_load:
            for server in state.servers:
                loads[server.name] = max(loads[server.name], server.load)
        decision = Decision()
        for request in state.requests:
            servers = sorted(state.servers_of(request.service), key=lambda server: server.name)
            fitting = [server for server in servers
                       if loads[server.name] + request.demand <= server.capacity]
            if not fitting:
                reason = (f"no server of {request.service!r} has room for demand "
                          f"{request.demand:g}" if servers
                          else f"service {request.service!r} has no servers")
                decision.rejections.append(Rejection(request.flow, reason))
                continue
            server = self._pick(fitting, loads)
            others = self._rank([s for s in fitting if s is not server], loads)
            count = self.params.candidates
            loads[server.name] += request.demand
            decision.assignments.append(Assignment(
                request.flow, server.name,
                candidates=tuple(s.name for s in [server] + others)[:count] if count else (),
                via=_relays(request, state)))
        decision.migrations = self._migrations(state, loads)
        return decision

    def _pick(self, fitting: list[Server], loads: dict[str, float]) -> Server:
        """One of ``fitting`` (servers of one service, sorted by name) given the current loads."""
        raise NotImplementedError

    def _rank(self, servers: list[Server], loads: dict[str, float]) -> list[Server]:
        """``servers`` in the order the policy prefers them after its pick."""
        return servers

    def _migrations(self, state: State, loads: dict[str, float]) -> list[Migration]:
        return []


def _relays(request: Request, state: State) -> tuple[str, ...]:
    """The ``via`` label of the request, else of its client: host names, list or
    comma-separated."""
    labels = request.labels or next((c.labels for c in state.clients
                                     if c.name == request.client), {})
    value = labels.get("via", ())
    names = value.split(",") if isinstance(value, str) else value
    return tuple(str(name).strip() for name in names if str(name).strip())


class RoundRobin(_OneServerPerRequest):
    """Gives each service's servers requests in turn, in name order, skipping servers the
    request does not fit on. The turn is remembered per service as the last server given a
    request, so servers joining or leaving between calls do not reset it."""

    name = "round_robin"
    Params = RoundRobinParams
    on_load = "nothing"

    def __init__(self, params: RoundRobinParams | None = None) -> None:
        self.params = params or RoundRobinParams()
        self._last_server: dict[str, str] = {}

    def _pick(self, fitting: list[Server], loads: dict[str, float]) -> Server:
        service = fitting[0].service
        last = self._last_server.get(service, "")
        server = next((server for server in fitting if server.name > last), fitting[0])
        self._last_server[service] = server.name
        return server


class LeastLoaded(_OneServerPerRequest):
    """Gives each request to the fitting server of its service with the lowest utilization (its
    load, the larger of reported and placed demand, plus what this call assigned it, over its
    capacity; ties go to the first name).

    With ``rebalance_threshold`` set it then migrates, service by service in name order: while
    the most and least utilized servers of a service are further apart than the threshold, it
    moves the smallest placed flow (ties by flow name) of the most utilized server that fits on
    the least utilized one and narrows their gap without either server passing the other's old
    utilization, so a service's spread never grows. A moved flow takes its demand with it. It
    stops at ``max_migrations`` moves per call, or when no flow qualifies."""

    name = "least_loaded"
    Params = LeastLoadedParams
    counts_reported_load = True
    on_load = "rebalance"

    def __init__(self, params: LeastLoadedParams | None = None) -> None:
        self.params = params or LeastLoadedParams()

    def _pick(self, fitting: list[Server], loads: dict[str, float]) -> Server:
        return self._rank(fitting, loads)[0]

    def _rank(self, servers: list[Server], loads: dict[str, float]) -> list[Server]:
        return sorted(servers, key=lambda server: (
            utilization(loads[server.name], server.capacity), server.name))

    def _migrations(self, state: State, loads: dict[str, float]) -> list[Migration]:
        if self.params.rebalance_threshold is None:
            return []
        migrations: list[Migration] = []
        # state.placements still shows a moved flow on its old server; without this it could be
        # moved again from there.
        moved: set[str] = set()
        for service in sorted({server.service for server in state.servers}):
            servers = state.servers_of(service)
            while len(migrations) < self.params.max_migrations:
                move = self._rebalancing_move(state, servers, loads, moved)
                if move is None:
                    break
                placement, target = move
                loads[placement.server] -= placement.request.demand
                loads[target.name] += placement.request.demand
                moved.add(placement.request.flow)
                migrations.append(Migration(placement.request.flow, target.name))
        return migrations

    def _rebalancing_move(self, state: State, servers: list[Server], loads: dict[str, float],
                          moved: set[str]) -> tuple[Placement, Server] | None:
        """The next flow to move off the service's most utilized server, and where to."""

        def utilization_of(server: Server, added: float = 0.0) -> float:
            return utilization(loads[server.name] + added, server.capacity)

        ranked = sorted(servers, key=lambda server: (utilization_of(server), server.name))
        coolest, hottest = ranked[0], ranked[-1]
        hot, cool = utilization_of(hottest), utilization_of(coolest)
        if hot - cool <= self.params.rebalance_threshold:
            return None
        flows = sorted((placement for placement in state.placements
                        if placement.server == hottest.name
                        and placement.request.flow not in moved),
                       key=lambda placement: (placement.request.demand, placement.request.flow))
        for placement in flows:
            demand = placement.request.demand
            after = (utilization_of(hottest, -demand), utilization_of(coolest, demand))
            if (loads[coolest.name] + demand <= coolest.capacity
                    and cool <= min(after) and max(after) <= hot
                    and abs(after[0] - after[1]) < hot - cool):
                return placement, coolest
        return None


POLICIES = (RoundRobin, LeastLoaded)
