"""surveillance's balancers on the controller's policy interface (:mod:`controller.policy`)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import Field

from controller.policies.surveillance.balancer import (BALANCERS, Balancer, Choice, Cluster,
                                                       Refusal, make)
from controller.policies.surveillance.load import (HEAVY_ABOVE, LIGHT_BELOW, Hardware,
                                                   LoadWeights, Usage, node_load, node_weights)
from controller.policy import (Assignment, Decision, Migration, ModelPolicy, PolicyParams,
                               Rejection, Request, Server, State)

HARDWARE_LABELS = ("cpu_ghz", "memory_gb", "bandwidth_mbps", "disk_gb")


class SurveillanceParams(PolicyParams):
    """What every surveillance policy takes."""

    cameras: tuple[str, ...] | None = Field(None, description="the cameras clients may ask "
                                                              "for; none: any")
    weights: LoadWeights = Field(default_factory=LoadWeights, description="R1..R4")
    shift: float = Field(1.0, gt=0, description="MAXL* = MAXL - min MAXL + shift")
    light_below: float = Field(LIGHT_BELOW, gt=0, le=1, description="light queue: L below")
    heavy_above: float = Field(HEAVY_ABOVE, gt=0, description="heavy queue: L above")
    max_depth: int = Field(4, ge=0, description="deepest cascade (sv_improved)")
    seed: int = Field(0, description="seed of p2c's draws")
    report_period: float = Field(1.0, gt=0, description="the nodes' load report period (s)")
    missed_reports: int = Field(3, ge=1, description="periods without a report after which a "
                                                     "node is taken for dead")
    stopped_after: float = Field(2.0, gt=0, description="a camera whose origin node reports "
                                                        "its stream silent this long (s) has "
                                                        "stopped")


def hardware_of(servers: list[Server]) -> list[Hardware]:
    """The servers' hardware figures from their labels (docs/schemes/surveillance.md)."""
    columns = []
    for label in HARDWARE_LABELS:
        values = [float(server.labels[label]) if label in server.labels else None
                  for server in servers]
        known = [value for value in values if value is not None]
        fill = statistics.fmean(known) if known else 1.0
        columns.append([fill if value is None else value for value in values])
    return [Hardware(*figures) for figures in zip(*columns)]


def reported_load(state: State, server: Server, weights: LoadWeights) -> float:
    """L from ``server``'s last report (docs/schemes/surveillance.md)."""
    report = state.latest_load(server.name)
    if report is None:
        return server.load
    memory_gb, link_mbps = server.labels.get("memory_gb"), server.labels.get("bandwidth_mbps")
    memory, bw_in, bw_out = (report.metrics.get(name) for name in ("memory", "bw_in", "bw_out"))
    usage = Usage(
        cpu=report.metrics.get("cpu"),
        memory=memory / (float(memory_gb) * 1e9) if memory is not None and memory_gb else None,
        bandwidth=(max(bw_in or 0.0, bw_out or 0.0) / (float(link_mbps) * 1e6)
                   if link_mbps and (bw_in is not None or bw_out is not None) else None))
    if usage.cpu is None and usage.memory is None and usage.bandwidth is None:
        return report.load
    return node_load(usage, weights)


def camera_of(request: Request, state: State) -> str | None:
    client = next((c for c in state.clients if c.name == request.client), None)
    camera = request.labels.get("camera", client.labels.get("camera") if client else None)
    return None if camera is None else str(camera)


def camera_sources(state: State) -> dict[str, str]:
    """Each camera a host streams (label ``cameras``) -> that host's address."""
    sources = {}
    for client in state.clients:
        for camera in str(client.labels.get("cameras", "")).split(","):
            if camera.strip():
                sources[camera.strip()] = client.address
    return sources


@dataclass
class Round:
    """One service's requests of a call with what the balancer sees: the cluster built from the
    state, the live servers' capacities, addresses and the demand placed on them, each request's
    camera, and where each camera streams from."""

    cluster: Cluster
    capacity: dict[str, float]
    placed: Counter
    requests: list[Request]
    cameras: list[str | None]
    addresses: dict[str, str]
    sources: dict[str, str]
    stopped: set[str]


class SurveillancePolicy(ModelPolicy):
    """A balancer as a controller policy (docs/schemes/surveillance.md)."""

    name: str
    Params = SurveillanceParams
    balancer_class: type[Balancer]
    on_load = "rebalance"  # a report re-queues the node; dead nodes' flows move (repair)

    def __init__(self, params: SurveillanceParams | None = None) -> None:
        super().__init__(params)
        self.balancer = make(self.balancer_class.name, self.params.max_depth, self.params.seed)
        self._chains: dict[str, dict[str, list[str]]] = {}  # service -> camera -> chain
        self.last_chains: dict[str, tuple[str, ...]] = {}  # flow -> origin .. serving node
        self.stranded = 0  # flows on a dead node that no live node could take

    def decide(self, state: State) -> Decision:
        self.last_chains = {}
        return super().decide(state)

    def services(self, state: State, by_service) -> list[str]:
        """Every service with servers (a call without requests repairs), and any requested."""
        return sorted(set(by_service) | {server.service for server in state.servers})

    def view(self, state: State, service: str) -> list[Server]:
        """The service's live servers (a dead one has missed ``missed_reports`` periods)."""
        deadline = self.params.report_period * self.params.missed_reports
        return sorted((server for server in state.servers_of(service)
                       if not (state.loads.get(server.name)
                               and state.load_age(server.name) > deadline)),
                      key=lambda server: server.name)

    def no_servers_reason(self, service: str) -> str:
        return f"service {service!r} has no live node server"

    def instance(self, state: State, service: str, servers: list[Server],
                 requests: list[Request]) -> Round:
        capacity = {server.name: server.capacity for server in servers}
        placed = Counter()
        for placement in state.placements:
            if placement.server in capacity:
                placed[placement.server] += placement.request.demand
        cluster = self._cluster(state, service, servers)
        return Round(cluster, capacity, placed, requests,
                     [camera_of(request, state) for request in requests],
                     {server.name: server.address for server in servers},
                     camera_sources(state), self._stopped(state, cluster))

    def allocate(self, round: Round) -> dict[str, str | Refusal]:
        """Each request's node, or why it has none; the cameras' chains as they end up."""
        cluster, capacity, placed = round.cluster, round.capacity, round.placed
        loads = {name: node.load for name, node in cluster.nodes.items()}
        answers: dict[str, str | Refusal] = {}
        for request, camera in zip(round.requests, round.cameras):
            if camera is None:
                answers[request.flow] = Refusal("the request names no camera (label camera)")
                continue
            if self.params.cameras is not None and camera not in self.params.cameras:
                answers[request.flow] = Refusal(f"unknown camera {camera!r}")
                continue
            if round.sources and camera not in round.sources:
                answers[request.flow] = Refusal(f"unknown camera {camera!r}: no camera host "
                                                f"streams it")
                continue
            if camera in round.stopped:
                answers[request.flow] = Refusal(f"camera {camera!r} stopped streaming")
                continue
            if self.balancer.active_notification:
                for name, node in cluster.nodes.items():
                    node.load = max(loads[name], placed[name] / capacity[name]
                                    if capacity[name] > 0 else 1.0)
            choice = self.balancer.choose(camera, cluster)
            if isinstance(choice, Choice) and (placed[choice.node] + request.demand
                                               > capacity[choice.node]):
                choice = Refusal(f"node {choice.node!r} has no room for {request.demand:g}")
            if isinstance(choice, Refusal):
                answers[request.flow] = choice
                continue
            placed[choice.node] += request.demand
            self.last_chains[request.flow] = tuple(cluster.assign(camera, choice))
            answers[request.flow] = choice.node
        return answers

    def outcomes(self, service: str, requests: list[Request], round: Round,
                 answers: dict[str, str | Refusal]) -> Iterator[Assignment | Rejection]:
        self._remember(service, round)
        for request, camera in zip(requests, round.cameras):
            answer = answers[request.flow]
            yield (Rejection(request.flow, answer.reason) if isinstance(answer, Refusal)
                   else Assignment(request.flow, answer,
                                   attributes=self._attributes(round, camera,
                                                               self.last_chains[request.flow])))

    def migrations(self, state: State, service: str, servers: list[Server],
                   requests: list[Request]) -> list[Migration]:
        """Repair (docs/schemes/surveillance.md), in a call without new requests."""
        if requests:
            return []  # the next call without requests repairs; reports make one every period
        live = {server.name for server in servers}
        placed = [p for p in state.placements if p.request.service == service]
        orphans = [p for p in placed if p.server not in live]
        round = self.instance(state, service, servers, [p.request for p in orphans])
        answers = self.allocate(round)
        self._remember(service, round)
        moves = []
        for placement, camera in zip(orphans, round.cameras):
            answer = answers[placement.request.flow]
            if isinstance(answer, Refusal):
                self.stranded += 1
                continue
            moves.append(Migration(placement.request.flow, answer, attributes=self._attributes(
                round, camera, self.last_chains[placement.request.flow])))
        for placement in placed:
            camera = camera_of(placement.request, state)
            if placement.server not in live or camera is None:
                continue
            chain = round.cluster.chain(camera)
            if placement.server not in chain:
                continue
            terms = self._attributes(round, camera, chain[:chain.index(placement.server) + 1])
            if terms.get("upstream") != placement.attributes.get("upstream"):
                moves.append(Migration(placement.request.flow, placement.server,
                                       attributes=terms))
        return moves

    def _stopped(self, state: State, cluster: Cluster) -> set[str]:
        """The cameras whose origin node reports their stream silent ``stopped_after`` or
        longer (metric ``stream.<camera>.silent_s``)."""
        stopped = set()
        for camera, chain in cluster.chains.items():
            report = state.latest_load(chain[0]) if chain else None
            silent = report.metrics.get(f"stream.{camera}.silent_s") if report else None
            if silent is not None and silent >= self.params.stopped_after:
                stopped.add(camera)
        return stopped

    def _remember(self, service: str, round: Round) -> None:
        self._chains[service] = {camera: list(chain)
                                 for camera, chain in round.cluster.chains.items()}

    @staticmethod
    def _attributes(round: Round, camera: str, chain) -> dict:
        """A decision's attributes (docs/schemes/surveillance.md) for a client of ``camera``
        served at the end of ``chain``."""
        attributes = {"camera": camera, "depth": len(chain) - 1}
        if camera.isdigit():
            attributes["stream"] = int(camera)
        upstream = (round.addresses.get(chain[-2]) if len(chain) > 1
                    else round.sources.get(camera))
        if upstream is not None:
            attributes["upstream"] = upstream
        return attributes

    def _cluster(self, state: State, service: str, servers: list[Server]) -> Cluster:
        weights = node_weights(hardware_of(servers), self.params.weights, self.params.shift)
        cluster = Cluster.of({server.name: float(w) for server, w in zip(servers, weights)},
                             light_below=self.params.light_below,
                             heavy_above=self.params.heavy_above)
        for server in servers:
            cluster.report(server.name, reported_load(state, server, self.params.weights))
        remembered = self._chains.get(service, {})
        for placement in state.placements:
            if placement.server not in cluster.nodes:
                continue
            camera = camera_of(placement.request, state)
            if camera is None:
                continue
            chain = cluster.chains.setdefault(camera, [])
            if placement.server not in chain:
                chain.append(placement.server)
            cluster.nodes[placement.server].tasks += 1
            cluster.clients[camera, placement.server] += 1
        for camera, chain in cluster.chains.items():
            order = remembered.get(camera, [])
            # Remembered relays (no clients of their own) stay while a node after them serves;
            # a chain is cut where a node is gone.
            alive = []
            for name in order:
                if name not in cluster.nodes:
                    break
                alive.append(name)
            kept = [name for name in alive
                    if any(cluster.clients[camera, later] for later in alive[alive.index(name):])]
            chain[:] = kept + sorted(name for name in chain if name not in kept)
        return cluster


def _policy(balancer: type[Balancer]) -> type[SurveillancePolicy]:
    doc = (balancer.__doc__ or "").strip()
    return type(f"Surveillance_{balancer.name}", (SurveillancePolicy,),
                {"name": balancer.name, "balancer_class": balancer, "__doc__": doc,
                 "__module__": __name__})


SURVEILLANCE_POLICIES = tuple(_policy(balancer) for balancer in BALANCERS.values())
