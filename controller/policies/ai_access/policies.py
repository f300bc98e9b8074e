"""ai_access's access algorithms and migration on the controller's policy interface
(:mod:`controller.policy`)."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import Field

from controller.policies.ai_access.access import ALLOCATORS, MODEL_ALLOCATORS, Allocation
from controller.policies.ai_access.migration import (ALPHA, REMAINING_SMOOTHING, THETA,
                                                     Migrator, PlacedFlow)
from controller.policies.ai_access.resources import (SPEC_UNIT_BYTES, FlowDemand, LoadWeights,
                                                     Measurement, Port, ServerLoad, ServerSpec,
                                                     ServerTracker)
from controller.policies.baseline import PolicyParams
from controller.policy import (Assignment, Migration, ModelPolicy, Placement, Rejection,
                               Request, Server, State)
from edgebed import units

PORT_ATTRIBUTE = "port"  # the decision attribute naming the receive port
ANY_PORT = "any"  # the one port of a server whose labels list none
SPEC_UNIT_MEMORY = 2 * SPEC_UNIT_BYTES  # the open unit and the one handed to a GPU server


class AiAccessParams(PolicyParams):
    """What every ai_access policy takes."""

    weights: LoadWeights = Field(default_factory=LoadWeights,
                                 description="weights of CPU, memory, network in L_i")
    migrate: bool = Field(False, description="migrate by load prediction on every report")
    theta: float = Field(THETA, gt=0, description="trigger: LSD of the forecast loads")
    alpha: float = Field(ALPHA, gt=0, lt=1, description="double smoothing constant")
    remaining_factor: float = Field(REMAINING_SMOOTHING, gt=0, le=1,
                                    description="u: smoothing of remaining bandwidth")
    max_age: float = Field(3.0, gt=0, description="seconds after which a server's last "
                                                  "report is stale")
    flow_memory: float = Field(SPEC_UNIT_MEMORY, gt=0, description="bytes a flow holds when "
                                                                   "its request does not say")
    seed: int = Field(0, description="seed of p2c's draws")
    join_window: float = Field(0.0, ge=0, le=5, description="seconds the controller gathers "
                                                            "joins from the first one waiting, "
                                                            "to decide them as one batch")


def server_spec(server: Server) -> ServerSpec:
    """The receive ports and memory a server's labels give (docs/schemes/ai_access.md); ValueError
    naming the server for labels that do not read."""
    memory = units.parse_size(server.labels["memory"]) if "memory" in server.labels \
        else math.inf
    text = server.labels.get("ports")
    if not text:
        return ServerSpec(server.name, (Port(ANY_PORT, server.capacity),), memory)
    ports = []
    for item in str(text).split(","):
        name, _, rate = item.strip().partition("=")
        if not name or not rate:
            raise ValueError(f"access server {server.name!r}: port {item!r} is not PORT=RATE "
                             f"(write ports: \"6100=100Mbps,6101=50Mbps\")")
        ports.append(Port(name, units.parse_rate(rate)))
    return ServerSpec(server.name, tuple(ports), memory)


def measurement_of(metrics, spec: ServerSpec) -> Measurement:
    """A load report's figures for ``spec``'s ports (port metrics of other ports included, so
    the check sees them)."""
    bandwidth, memory = {}, {}
    for name, value in metrics.items():
        if name.startswith("port."):
            port, _, kind = name[len("port."):].rpartition(".")
            if kind == "bw_in":
                bandwidth[port] = value
            elif kind == "memory":
                memory[port] = value
    return Measurement(bandwidth, memory, metrics.get("cpu", 0.0))


@dataclass(frozen=True)
class AccessView:
    """A service's access servers as one call sees them: their loads (placed flows counted),
    whether a new report came, and why servers were left out. Always true: a service whose
    servers are all unusable still answers each request with why."""

    loads: dict[str, ServerLoad]
    fresh: bool
    problems: list[str]


class AiAccessPolicy(ModelPolicy):
    """Base of the ai_access policies; ``allocator`` is the access algorithm's name."""

    name: str
    allocator: str
    Params = AiAccessParams
    on_load = "nothing"

    def __init__(self, params: AiAccessParams | None = None):
        super().__init__(params)
        self.on_load = "rebalance" if self.params.migrate else "nothing"
        self.join_window = self.params.join_window
        self.rng = random.Random(self.params.seed)
        self.trackers: dict[str, ServerTracker] = {}
        self.seen: dict[str, float] = {}  # server -> arrival time of its last report taken
        self.migrators: dict[str, Migrator] = {}
        self.refused_reports = 0
        self.last_ports: dict[str, str] = {}
        self.last_forecasts: dict[str, float] = {}

    def _loads(self, state: State, servers: list[Server]
               ) -> tuple[dict[str, ServerLoad], bool, list[str]]:
        """The servers' current loads (stale ones and ones whose labels do not read left out),
        whether a new report came, and why servers were left out."""
        loads, fresh, problems = {}, False, []
        for server in servers:
            try:
                spec = server_spec(server)
            except ValueError as error:
                problems.append(str(error))
                continue
            tracker = self.trackers.get(server.name)
            if tracker is None or tracker.spec != spec:
                tracker = self.trackers[server.name] = ServerTracker(spec)
            for report in state.loads.get(server.name, ()):
                if report.received <= self.seen.get(server.name, -1.0):
                    continue
                self.seen[server.name] = report.received
                try:
                    tracker.update(measurement_of(report.metrics, spec))
                    fresh = True
                except ValueError:
                    self.refused_reports += 1
            if tracker.load is None:
                loads[server.name] = ServerLoad.idle(spec)
            elif not state.is_stale(server.name, self.params.max_age):
                loads[server.name] = tracker.load
            else:
                problems.append(f"access server {server.name!r} has not reported for "
                                f"{state.load_age(server.name):.1f} s")
        return loads, fresh, problems

    def _with_placed(self, state: State, service: str, loads: dict[str, ServerLoad]
                     ) -> dict[str, ServerLoad]:
        """``loads`` with each port's bandwidth and memory at least what its placed flows
        asked for, and the flows counted per port."""
        demand = defaultdict(float)
        memory = defaultdict(float)
        flows = defaultdict(int)
        for placement in state.placements:
            load = loads.get(placement.server)
            if placement.request.service != service or load is None:
                continue
            port = self._port_of(placement)
            if port not in load.bandwidth:
                port = load.spec.ports[0].name  # placed before this policy knew it
            key = (placement.server, port)
            flow = self._demand(placement.request)
            demand[key] += flow.bandwidth
            memory[key] += flow.memory
            flows[key] += 1
        return {name: ServerLoad(
            load.spec,
            {port: max(used, demand[name, port]) for port, used in load.bandwidth.items()},
            {port: max(held, memory[name, port]) for port, held in load.memory.items()},
            load.cpu, {port: flows[name, port] for port in load.bandwidth})
            for name, load in loads.items()}

    def _port_of(self, placement: Placement) -> str | None:
        return str(placement.attributes.get(PORT_ATTRIBUTE,
                                             self.last_ports.get(placement.request.flow, "")))

    def _demand(self, request: Request) -> FlowDemand:
        memory = request.labels.get("memory")
        return FlowDemand(request.flow, request.demand,
                          units.parse_size(memory) if memory is not None
                          else self.params.flow_memory)

    def services(self, state: State, by_service) -> list[str]:
        # Services with placed flows are visited too: their servers' reports feed the trackers
        # and may call for migrations.
        return sorted(set(by_service) | {p.request.service for p in state.placements})

    def view(self, state: State, service: str) -> AccessView:
        servers = sorted(state.servers_of(service), key=lambda server: server.name)
        loads, fresh, problems = self._loads(state, servers)
        return AccessView(self._with_placed(state, service, loads), fresh, problems)

    def instance(self, state: State, service: str, view: AccessView, requests: list[Request]
                 ) -> tuple[list[FlowDemand], AccessView]:
        return [self._demand(request) for request in requests], view

    def allocate(self, instance: tuple[list[FlowDemand], AccessView]) -> Allocation:
        demands, view = instance
        return MODEL_ALLOCATORS[self.allocator](demands, view.loads.values(),
                                                self.params.weights,
                                          self.rng)

    def outcomes(self, service: str, requests: list[Request], instance, allocation: Allocation
                 ) -> Iterator[Assignment | Rejection]:
        problems = instance[1].problems
        for request in requests:
            if request.flow in allocation.placed:
                server, port = allocation.placed[request.flow]
                self.last_ports[request.flow] = port
                yield Assignment(request.flow, server, attributes={PORT_ATTRIBUTE: port})
            else:
                yield Rejection(request.flow, "; ".join(
                    [allocation.rejected.get(request.flow)
                     or f"service {service!r} has no usable access server", *problems]))

    def migrations(self, state: State, service: str, view: AccessView, requests: list[Request]
                   ) -> list[Migration]:
        if self.params.migrate and view.fresh and len(view.loads) > 1:
            return self._migrations(state, service, view.loads)
        return []

    def _migrations(self, state: State, service: str, loads: dict[str, ServerLoad]
                    ) -> list[Migration]:
        params = self.params
        migrator = self.migrators.setdefault(service, Migrator(
            params.weights, params.theta, params.alpha, params.remaining_factor))
        self.last_forecasts.update(migrator.observe(loads))
        placed = [PlacedFlow(self._demand(p.request), p.server,
                             self._port_of(p))
                  for p in state.placements
                  if p.request.service == service and p.server in loads]
        moves = migrator.plan(loads, placed)
        for move in moves:
            self.last_ports[move.flow] = move.port
        return [Migration(move.flow, move.target, attributes={PORT_ATTRIBUTE: move.port})
                for move in moves]


def _policy(allocator: str) -> type[AiAccessPolicy]:
    return type(f"AiAccess_{allocator}", (AiAccessPolicy,),
                {"name": allocator, "allocator": allocator,
                 "within_capacity": allocator in ALLOCATORS,
                 "__doc__": f"ai_access's {allocator} access (with migration when asked)."})


AI_ACCESS_POLICIES = tuple(_policy(name) for name in MODEL_ALLOCATORS)
