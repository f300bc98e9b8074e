"""The policy interface: what a scheduling policy is given and what it decides."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol

import networkx as nx
from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class Server:
    """A host that can serve a service."""

    name: str
    service: str
    address: str  # IPv4 address, dotted
    capacity: float  # in the service's demand unit; inf when the scenario gives none
    load: float = 0.0  # last reported by the server (0 until it reports)
    labels: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class LoadReport:
    """One load report a server sent (the control protocol's ``load``): ``load`` in its
    service's demand unit and named ``metrics`` (``cpu``, ``memory``, ``bw_in``,
    ``port.eth1.bw_out``...: :data:`edgebed.protocol.METRIC_KINDS`). ``received`` is when it
    arrived, on the clock of :attr:`State.now`; ``sent`` the sender's CLOCK_REALTIME; ``urgent``
    that it was sent at once because a metric crossed a threshold."""

    server: str
    received: float
    load: float
    metrics: Mapping[str, float] = field(default_factory=dict, hash=False)
    sent: float = 0.0
    urgent: bool = False

    def value(self, metric: str) -> float | None:
        """``metric`` as reported (``"load"``: the load itself), None when not reported."""
        return self.load if metric == "load" else self.metrics.get(metric)


@dataclass(frozen=True)
class Client:
    """A host that sends requests (viewers, terminals, request clients)."""

    name: str
    address: str
    labels: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Request:
    """A flow asking to be placed: ``client`` wants ``service`` with ``demand``.

    ``flow`` names the flow and is unique within the controller (``client/service``, or
    ``client/service:port`` with a ``client_port``); ``bitrates`` lists what the client can
    take, best first, for policies that choose a bitrate (empty: the policy chooses none).
    ``client_port`` is the transport port the client sends this flow from, when one host
    stands for several terminals or cameras: it has a flow per port, each steered on its own
    (None: the flow is all the host's traffic to the service).
    """

    flow: str
    client: str
    service: str
    demand: float = 0.0
    bitrates: tuple[float, ...] = ()
    labels: dict = field(default_factory=dict, hash=False, compare=False)
    client_port: int | None = None


# A value of a decision's attribute map: small, typed, and what JSON carries as it is.
Attribute = bool | int | float | str | None


@dataclass(frozen=True)
class Terms:
    """What a decision tells the flow's hosts beside its server, carried as one piece from the
    policy through the controller to the decision message and the agent that follows it:

    * ``bitrate`` to serve the flow at (None: the policy chooses none);
    * ``candidates``: servers ranked best first for the client to probe before it confirms
      one with ``steer`` (dispatch); the decided server is the policy's own pick;
    * ``via``: relay hosts the flow goes through, in order from the client's side (relays,
      back-to-source, cascades, a streamer's edge); a forwarder at ``via[i]`` sends on to
      ``via[i + 1]``, the last one to the server;
    * ``attributes``: anything else a scheme's agents need, name -> bool, int, float, string
      or None (at most 16)."""

    bitrate: float | None = None
    candidates: tuple[str, ...] = ()
    via: tuple[str, ...] = ()
    attributes: Mapping[str, Attribute] = field(default_factory=dict, hash=False)

    def updated(self, newer: Terms) -> Terms:
        """These terms with what ``newer`` says replacing them, field by field (a migration
        that names no bitrate keeps the flow's)."""
        return Terms(self.bitrate if newer.bitrate is None else newer.bitrate,
                     newer.candidates or self.candidates, newer.via or self.via,
                     newer.attributes or self.attributes)


@dataclass(frozen=True, kw_only=True)
class _WithTerms:
    """The fields of :class:`Terms` besides the bitrate, by keyword, on placements and
    decisions (each has its own ``bitrate`` field, positional, as before there were terms)."""

    candidates: tuple[str, ...] = ()
    via: tuple[str, ...] = ()
    attributes: Mapping[str, Attribute] = field(default_factory=dict, hash=False)

    @property
    def terms(self) -> Terms:
        return Terms(self.bitrate, tuple(self.candidates), tuple(self.via),
                     dict(self.attributes))


@dataclass(frozen=True)
class Placement(_WithTerms):
    """A flow already placed: the request, the server it is on and its terms."""

    request: Request
    server: str
    bitrate: float | None = None

    @classmethod
    def of(cls, request: Request, server: str, terms: Terms) -> Placement:
        return cls(request, server, terms.bitrate, candidates=terms.candidates, via=terms.via,
                   attributes=terms.attributes)


@dataclass(frozen=True)
class State:
    """Everything a policy may look at. ``graph`` is a :class:`networkx.MultiDiGraph` of the
    scenario's nodes; each edge ``u -> v`` has ``delay`` (seconds, this direction), ``bw``
    (bits/s, 0 when unlimited) and ``up`` (bool). ``now`` is seconds since the controller
    started (policies that work in periods use it). ``placements`` hold capacity; ``previous``
    is where the requests being decided were in the last period (a new period re-decides every
    flow: they are requests again and hold no capacity, but switching server or dropping
    bitrate may cost QoE). ``loads`` holds each server's recent load reports, oldest first (a
    bounded history: the controller keeps the last few; servers that never reported have
    none)."""

    graph: nx.MultiDiGraph
    servers: tuple[Server, ...]
    clients: tuple[Client, ...]
    placements: tuple[Placement, ...] = ()
    requests: tuple[Request, ...] = ()
    now: float = 0.0
    previous: tuple[Placement, ...] = ()
    loads: Mapping[str, tuple[LoadReport, ...]] = field(
        default_factory=lambda: MappingProxyType({}))

    def servers_of(self, service: str) -> list[Server]:
        return [server for server in self.servers if server.service == service]

    def placed_load(self, server: str) -> float:
        """The demand of the flows placed on ``server``."""
        return sum(p.request.demand for p in self.placements if p.server == server)

    def latest_load(self, server: str) -> LoadReport | None:
        """``server``'s last load report, None if it never reported."""
        history = self.loads.get(server, ())
        return history[-1] if history else None

    def load_age(self, server: str) -> float:
        """Seconds since ``server``'s last report arrived (inf if it never reported)."""
        latest = self.latest_load(server)
        return math.inf if latest is None else self.now - latest.received

    def is_stale(self, server: str, max_age: float) -> bool:
        """``server`` has not reported for more than ``max_age`` seconds (or ever)."""
        return self.load_age(server) > max_age

    def load_window(self, server: str, window: float) -> tuple[LoadReport, ...]:
        """``server``'s reports that arrived in the last ``window`` seconds."""
        return tuple(report for report in self.loads.get(server, ())
                     if self.now - report.received <= window)

    def mean_load(self, server: str, window: float, metric: str = "load") -> float | None:
        """The mean of ``metric`` (``"load"`` or a metric's name) over the reports of the last
        ``window`` seconds that carry it; None when none do."""
        values = [value for report in self.load_window(server, window)
                  if (value := report.value(metric)) is not None]
        return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class Assignment(_WithTerms):
    """Put ``flow`` on ``server`` (at ``bitrate``, along ``path`` when given: the node names from
    the client to the server, switches included), with ``candidates``, ``via`` and
    ``attributes`` as :class:`Terms` says."""

    flow: str
    server: str
    bitrate: float | None = None
    path: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Migration(_WithTerms):
    """Move a placed flow to another server (the flow keeps running; the controller re-steers
    it). Terms it gives replace the flow's; those it leaves out (None, empty) stay."""

    flow: str
    server: str
    bitrate: float | None = None


@dataclass(frozen=True)
class Rejection:
    flow: str
    reason: str


@dataclass
class Decision:
    """What a policy decided for one call: every request in ``State.requests`` is either
    assigned or rejected; migrations move flows from ``State.placements``."""

    assignments: list[Assignment] = field(default_factory=list)
    migrations: list[Migration] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)


@dataclass(frozen=True)
class Host:
    """A host of a scenario as a policy's scenario check sees it: its role and labels."""

    name: str
    role: str
    labels: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class ScenarioProblem:
    """What a policy finds wrong with the scenario it is to run, before anything is built:
    ``message`` (and a ``hint``) about a key of its ``policy_params`` (``param``, a path into
    them) or about host ``node``."""

    message: str
    param: tuple[str | int, ...] = ()
    node: str | None = None
    hint: str = ""


OnLoad = Literal["redecide", "rebalance", "nothing"]
ON_LOAD: tuple[OnLoad, ...] = ("redecide", "rebalance", "nothing")


class PolicyParams(BaseModel):
    """Base of every policy's parameters (its ``Params``): unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicyLabels(BaseModel):
    """Base of the host labels a policy reads: its ``ClientLabels`` (of every host that is not a
    server) and ``ServerLabels`` (of the services' servers), checked when the scenario loads.
    Labels a policy does not declare are other policies' or the user's and are ignored, but one
    a letter or two from a declared name is refused as a misspelling."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class Policy(Protocol):
    """A scheduling policy. ``decide`` may keep state between calls on the policy object (a
    round-robin cursor, say); it must not change ``state``.

    ``on_load`` says what a load report that the controller accepts makes it do:
    ``"rebalance"`` asks the policy with no new requests (it may migrate placed flows),
    ``"redecide"`` decides every placed flow again as a new period does, ``"nothing"`` only
    keeps the report for the next decision (the default for a policy that does not say).

    ``join_window`` (seconds; optional, 0 for a policy that does not say) is how long the
    controller gathers joins from the first one waiting before it decides them in one call: a
    policy that matches a batch of requests as a whole sees the requests sent together as one
    batch, though the first of them reaches the controller alone.

    ``within_capacity`` (optional, True for a policy that does not say) is False for a
    baseline that places beyond the servers' capacity by design (ai_access's the paper's least
    connections): the policy contract then holds it to deciding every request, not to
    capacity."""

    name: str
    on_load: OnLoad

    def decide(self, state: State) -> Decision: ...

    def refuse_steer(self, state: State, flow: str, server: str) -> str | None:
        """Why placed ``flow`` may not move to ``server`` when a client confirms one of its
        candidates or an operator steers it, or None to let it. Optional: a policy that does
        not define it lets every steer to a server of the flow's service through."""

    @classmethod
    def scenario_problems(cls, params: PolicyParams, hosts: Mapping[str, Host],
                          servers: Mapping[str, tuple[str, ...]]) -> list[ScenarioProblem]:
        """What is wrong with a scenario for this policy with ``params``: its ``hosts`` by
        name and each service's ``servers``; the scenario check reports each problem at the
        file, line and key it is about. Optional: a policy that does not define it takes any
        scenario its parameters and labels validate for."""


class ModelPolicy:
    """Base of the policies that decide a call as one round of a scheme's model, service by
    service. For each service :meth:`services` picks (by default those with requests, in the
    order they came), it takes the scheme's :meth:`view` of the service's servers; with none
    usable every request of the service is rejected (:meth:`no_servers_reason`). Otherwise,
    when the service has requests, it builds the scheme's :meth:`instance` from the
    :class:`State`, runs :meth:`allocate` on it and turns the allocation into assignments and
    rejections (:meth:`outcomes`); then it asks for :meth:`migrations` of placed flows. What
    the call saw and decided is kept in ``last_period`` (service -> (instance, allocation)),
    for comparing a model's prediction with what was measured.

    A scheme supplies the instance, the allocator and the outcomes; its ``Params`` (a
    :class:`PolicyParams`) are validated before the constructor sees them."""

    name: str
    Params: type[PolicyParams] = PolicyParams
    on_load: OnLoad = "nothing"

    def __init__(self, params: PolicyParams | None = None) -> None:
        self.params = params or self.Params()
        self.last_period: dict[str, tuple[Any, Any]] = {}

    def decide(self, state: State) -> Decision:
        decision = Decision()
        self.last_period = {}
        by_service: dict[str, list[Request]] = defaultdict(list)
        for request in state.requests:
            by_service[request.service].append(request)
        for service in self.services(state, by_service):
            requests = by_service.get(service, [])
            view = self.view(state, service)
            if not view:
                reason = self.no_servers_reason(service)
                decision.rejections += [Rejection(request.flow, reason) for request in requests]
                continue
            if requests:
                instance = self.instance(state, service, view, requests)
                allocation = self.allocate(instance)
                self.last_period[service] = (instance, allocation)
                for outcome in self.outcomes(service, requests, instance, allocation):
                    (decision.assignments if isinstance(outcome, Assignment)
                     else decision.rejections).append(outcome)
            decision.migrations += self.migrations(state, service, view, requests)
        return decision

    def services(self, state: State, by_service: Mapping[str, list[Request]]
                 ) -> Iterable[str]:
        """The services this call visits, in order."""
        return list(by_service)

    def view(self, state: State, service: str) -> Any:
        """What the scheme sees of ``service``'s servers (by default its servers by name);
        false when none is usable."""
        return sorted(state.servers_of(service), key=lambda server: server.name)

    def no_servers_reason(self, service: str) -> str:
        return f"service {service!r} has no servers"

    def instance(self, state: State, service: str, view: Any, requests: list[Request]) -> Any:
        """The scheme's problem for ``requests`` of ``service``."""
        raise NotImplementedError

    def allocate(self, instance: Any) -> Any:
        """The scheme's allocator run on ``instance``."""
        raise NotImplementedError

    def outcomes(self, service: str, requests: list[Request], instance: Any,
                 allocation: Any) -> Iterable[Assignment | Rejection]:
        """An assignment or a rejection for each of ``requests``."""
        raise NotImplementedError

    def migrations(self, state: State, service: str, view: Any, requests: list[Request]
                   ) -> list[Migration]:
        """Moves of placed flows of ``service`` (by default none)."""
        return []
