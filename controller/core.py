"""The controller's logic without OpenFlow: it keeps the network's state, asks the policy for
decisions, and says what every switch should hold."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import MappingProxyType

import networkx as nx

from edgebed import protocol
from edgebed import clock

from . import persistence, rules
from .desired import DesiredRules, FlowRecord
from .loads import LOAD_HISTORY, LOAD_MAX_AGE, LoadReports
from .policy import (ON_LOAD, Client, Decision, Placement, Policy, Rejection, Request, Server,
                     State, Terms)
from .traces import PolicyTrace
from .view import NetworkView

# The most candidates, relays and attributes a decision carries (the control protocol's limits).
MAX_TERMS = 16


@dataclass
class Outcome:
    """What one call changed: the decision (if the policy was asked), the flows placed or moved
    (flow -> server), the flows that left (flow -> the server they were on) and the switches
    whose desired state changed."""

    decision: Decision = field(default_factory=Decision)
    placed: dict[str, str] = field(default_factory=dict)
    switches: set[str] = field(default_factory=set)
    left: dict[str, str] = field(default_factory=dict)


class ControllerCore:
    """State: which links are down, each server's recent load reports, the placed flows and
    their pinned paths. Everything the switches hold is recomputed from it."""

    def __init__(self, view: NetworkView, policy: Policy, fast_failover: bool = True,
                 load_history: int = LOAD_HISTORY, load_max_age: float = LOAD_MAX_AGE):
        self.view = view
        self.policy = policy
        self.fast_failover = fast_failover
        self.on_load = getattr(policy, "on_load", "nothing")
        if self.on_load not in ON_LOAD:
            raise ValueError(f"policy {getattr(policy, 'name', policy)!r}: on_load must be one "
                             f"of {', '.join(ON_LOAD)}, not {self.on_load!r}")
        self.down: frozenset[int] = frozenset()
        self.loads = LoadReports((name for service in view.services.values()
                                  for name in service.servers), load_history, load_max_age)
        self.flows: dict[str, FlowRecord] = {}
        # Link delays announced since the start (link -> forward, reverse seconds).
        self.link_delays: dict[int, tuple[float, float]] = {}
        # Every policy call since the app last took them (:meth:`take_traces`).
        self.traces: list[PolicyTrace] = []
        self._ports_down: set[tuple[str, int]] = set()
        self.switch_rules = DesiredRules(view, fast_failover)
        # Each flow's steering key, and the flows by client and service, so a join checks
        # the flows of its own client instead of every placed one.
        self._steered: dict[tuple, dict[int | None, str]] = {}
        self._steering_of: dict[str, tuple] = {}
        # The hosts never change during a run: built once, not per decision.
        self._clients = tuple(Client(a.host, a.address, view.labels.get(a.host, {}))
                              for a in view.attachments)
        self._graph = None  # the policy's view of the network while no link changes
        self._trunk_of_port = {(t.a, t.a_port): t.link for t in view.trunks} | {
            (t.b, t.b_port): t.link for t in view.trunks}

    # state the policy sees

    def servers(self) -> tuple[Server, ...]:
        return tuple(Server(name, service.name, self.view.attachment(name).address, capacity,
                            self.loads.latest_load(name),
                            self.view.labels.get(name, {}))
                     for service in self.view.services.values()
                     for name, capacity in sorted(service.servers.items()))

    def load_history(self) -> MappingProxyType:
        """Every server's kept load reports, oldest first, as :attr:`State.loads` holds them."""
        return self.loads.history()

    @property
    def load_counts(self) -> dict[str, int]:
        """Load reports kept and refused, by reason."""
        return self.loads.counts

    def state(self, requests: tuple[Request, ...] = (), now: float = 0.0,
              reallocating: bool = False) -> State:
        placed = tuple(record.placement for record in self.flows.values())
        if self._graph is None:
            # Frozen: every decision is handed the same graph until a link changes.
            self._graph = nx.freeze(self.view.policy_graph(self.down))
        return State(self._graph, self.servers(), self._clients,
                     () if reallocating else placed, requests, now,
                     placed if reallocating else (), self.load_history())

    # what switches hold

    def desired(self, switch: str) -> rules.SwitchRules:
        """Everything ``switch`` should hold (a copy)."""
        return self.switch_rules.desired(switch)

    def changes(self, switch: str, installed: rules.SwitchRules,
                everything: bool = False) -> rules.Changes:
        """What to send ``switch``, holding ``installed``, for it to hold what it should
        (:meth:`DesiredRules.changes`)."""
        return self.switch_rules.changes(switch, installed, everything)

    def _set_forwarding(self) -> None:
        """Forwarding from the links as they are now, and every switch's desired state anew."""
        self.switch_rules.set_forwarding(self.down)
        self._graph = None

    def _refresh(self, flow: str) -> set[str]:
        """Recompute one flow's steering key and rules after it changed; returns the switches
        its rules were or are on."""
        steering = self._steering_of.pop(flow, None)
        if steering is not None:
            self._steered[steering[:2]].pop(steering[2], None)
        record = self.flows.get(flow)
        if record is not None:
            steering = self._steering_key(record.placement.request)
            self._steering_of[flow] = steering
            self._steered.setdefault(steering[:2], {})[steering[2]] = flow
        return self.switch_rules.refresh(flow, record)

    def adopt(self, flow: str, record: FlowRecord) -> None:
        """Take ``flow`` as placed by an earlier controller, as ``record`` says."""
        self.flows[flow] = record
        self._refresh(flow)

    # events

    def port_changed(self, switch: str, port: int, up: bool) -> set[str]:
        """A switch reported a port up or down; returns the switches to resynchronise."""
        (self._ports_down.discard if up else self._ports_down.add)((switch, port))
        down = frozenset(self._trunk_of_port[end] for end in self._ports_down
                         if end in self._trunk_of_port)
        if down == self.down:
            return set()
        self.down = down
        self._set_forwarding()
        for flow, record in self.flows.items():
            if record.path:  # pinned paths follow the links that are up
                self._refresh(flow)
        return set(self.view.switches)

    def link_delay_changed(self, link: int, forward: float | None = None,
                           reverse: float | None = None) -> set[str]:
        """Link ``link`` (the scenario's index) now delays ``forward`` (its first endpoint to
        its second) and ``reverse`` seconds (None: that direction is unchanged), as a network
        event announced to the controller (a scheduled impairment the runner applies): the
        policy sees the new delay from its next decision on, and forwarding, which follows the
        shortest delay, is recomputed. Only links between two switches are kept in the view
        with a delay that can change; returns the switches to resynchronise."""
        index = next((i for i, trunk in enumerate(self.view.trunks) if trunk.link == link),
                     None)
        if index is None:
            raise KeyError(f"link {link} is not a link between two switches")
        trunk = self.view.trunks[index]
        changed = dataclasses.replace(
            trunk, delay_ab=trunk.delay_ab if forward is None else forward,
            delay_ba=trunk.delay_ba if reverse is None else reverse)
        if changed == trunk:
            return set()
        self.view.trunks[index] = changed
        self.link_delays[link] = (changed.delay_ab, changed.delay_ba)
        self._set_forwarding()
        for flow, record in self.flows.items():
            if record.path:
                self._refresh(flow)
        return set(self.view.switches)

    def report_load(self, server: str, load: float, **report) -> bool:
        """Keep a load report from ``server``; returns whether it was kept
        (:meth:`LoadReports.report`)."""
        return self.loads.report(server, load, **report)

    def react_to_load(self, now: float = 0.0) -> Outcome:
        """What the policy's ``on_load`` says a kept load report calls for."""
        if self.on_load == "rebalance":
            return self.rebalance(now)
        if self.on_load == "redecide":
            return self.reallocate(now)
        return Outcome()

    def place(self, requests: list[Request], now: float = 0.0) -> Outcome:
        """Ask the policy about ``requests`` (flows already placed are skipped) and carry out
        what it decides."""
        outcome = Outcome()
        # A client's packets to a service are steered by addresses and, for a flow with a
        # client port, that port: a client has one flow per service and port, and a flow
        # without a port takes all its traffic to the service.
        clashing: list[tuple[Request, str]] = []
        asked: dict[tuple, dict[int | None, str]] = {}  # this call's, by client and service
        seen: set[str] = set()
        waiting = []
        for request in requests:
            if request.flow in self.flows or request.flow in seen:
                continue  # placed already, or asked for twice in this call
            key = self._steering_key(request)
            clash = self._clash(request, self._steered.get(key[:2], {})) or self._clash(
                request, asked.get(key[:2], {}))
            if clash is not None:
                clashing.append((request, clash))
            else:
                asked.setdefault(key[:2], {})[key[2]] = request.flow
                seen.add(request.flow)
                waiting.append(request)
        waiting = tuple(waiting)
        if waiting:
            outcome.decision = self._decide(self.state(waiting, now), "place")
        outcome.decision.rejections += [
            Rejection(r.flow, f"{r.client} already has flow {clash} for {r.service}"
                              + (f" from port {r.client_port}" if r.client_port else ""))
            for r, clash in clashing]
        by_flow = {request.flow: request for request in waiting}
        for assignment in outcome.decision.assignments:
            self._check_server(by_flow[assignment.flow].service, assignment.server)
            self._check_terms(by_flow[assignment.flow].service, assignment.terms)
            self.flows[assignment.flow] = FlowRecord(
                Placement.of(by_flow[assignment.flow], assignment.server, assignment.terms),
                tuple(assignment.path) if assignment.path else None)
            outcome.placed[assignment.flow] = assignment.server
            outcome.switches |= self._refresh(assignment.flow)
        for migration in outcome.decision.migrations:
            self._migrate(migration.flow, migration.server, migration.terms, outcome)
        return outcome

    def _decide(self, state: State, kind: str) -> Decision:
        """The policy's decision on ``state``, traced."""
        started = clock.real_elapsed_ns()
        decision = self.policy.decide(state)
        elapsed_ms = (clock.real_elapsed_ns() - started) / 1e6
        # A copy: the core adds its own refusals to the decision, which are not the policy's.
        answered = Decision(list(decision.assignments), list(decision.migrations),
                            list(decision.rejections))
        self.traces.append(PolicyTrace.of(state, kind, getattr(self.policy, "name", "?"),
                                          answered, elapsed_ms))
        return decision

    def take_traces(self) -> list[PolicyTrace]:
        """The policy calls traced since the last time, oldest first."""
        traces, self.traces = self.traces, []
        return traces

    @staticmethod
    def _steering_key(request: Request) -> tuple:
        return request.client, request.service, request.client_port

    @staticmethod
    def _clash(request: Request, ports: dict[int | None, str]) -> str | None:
        """The flow among ``ports`` (the flows of the request's client and service, by client
        port) that ``request``'s packets would also match, if any."""
        port = request.client_port
        if port is None:
            return next(iter(ports.values()), None)
        return ports.get(port) or ports.get(None)

    def rebalance(self, now: float = 0.0) -> Outcome:
        """Ask the policy with no new requests: it may migrate placed flows."""
        outcome = Outcome(decision=self._decide(self.state((), now), "rebalance"))
        for migration in outcome.decision.migrations:
            self._migrate(migration.flow, migration.server, migration.terms, outcome)
        return outcome

    def reallocate(self, now: float = 0.0) -> Outcome:
        """A new period: every placed flow is decided again, with this period's placements as
        the previous state (live_edge's model works in periods). A flow the policy puts on
        another server migrates; one it gives other terms (bitrate, candidates, via,
        attributes) keeps its server with the new terms; one it rejects keeps what it has (a
        period's decision never cuts a running stream)."""
        requests = tuple(record.placement.request for record in self.flows.values())
        outcome = Outcome()
        if not requests:
            return outcome
        outcome.decision = self._decide(self.state(requests, now, reallocating=True),
                                        "reallocate")
        for assignment in outcome.decision.assignments:
            placement = self.flows[assignment.flow].placement
            if assignment.server != placement.server:
                self._migrate(assignment.flow, assignment.server, assignment.terms, outcome)
            elif assignment.terms != placement.terms:
                self._check_terms(placement.request.service, assignment.terms)
                # A period restates every term: what it leaves out is no longer wanted.
                self.flows[assignment.flow].placement = Placement.of(
                    placement.request, placement.server, assignment.terms)
                self.flows[assignment.flow].version += 1
                outcome.placed[assignment.flow] = placement.server
        return outcome

    def steer(self, flow: str, server: str, now: float = 0.0) -> Outcome:
        """Move a placed flow to ``server``: a client confirming one of its candidates, or an
        operator's or experiment's decision. The policy may refuse (ValueError, its reason)."""
        if flow not in self.flows:
            raise KeyError(f"no placed flow {flow!r}")
        refuse = getattr(self.policy, "refuse_steer", None)
        refusal = refuse(self.state(now=now), flow, server) if refuse is not None else None
        if refusal is not None:
            raise ValueError(refusal)
        outcome = Outcome()
        self._migrate(flow, server, Terms(), outcome)
        return outcome

    def pin(self, flow: str, waypoints: tuple[str, ...]) -> Outcome:
        """Pin a placed flow's client-to-server direction through ``waypoints`` (switches)."""
        record = self.flows[flow]
        client = self.view.attachment(record.placement.request.client)
        rules.explicit_path(self.view, client, waypoints, (), self.down)  # raises if impossible
        record.path = tuple(waypoints)
        return Outcome(switches=self._refresh(flow))

    def leave(self, flow: str) -> Outcome:
        """``flow`` ended (its client said so): it holds no capacity and no rules any more, and
        the policy's next call sees the state without it (a balancer's tasks and stream chains
        are built from the placements). Leaving a flow not placed changes nothing."""
        record = self.flows.pop(flow, None)
        return Outcome(switches=self._refresh(flow),
                       left={} if record is None else {flow: record.placement.server})

    def _migrate(self, flow: str, server: str, terms: Terms, outcome: Outcome) -> None:
        """Move ``flow`` to ``server``; ``terms`` replace the flow's where they say something."""
        record = self.flows[flow]
        self._check_server(record.placement.request.service, server)
        self._check_terms(record.placement.request.service, terms)
        if server != record.placement.server:
            record.former_servers = tuple(sorted(
                (set(record.former_servers) | {record.placement.server}) - {server}))
        record.placement = Placement.of(record.placement.request, server,
                                        record.placement.terms.updated(terms))
        record.migrations += 1
        record.version += 1
        outcome.placed[flow] = server
        outcome.switches |= self._refresh(flow)

    def _check_server(self, service: str, server: str) -> None:
        if server not in self.view.services[service].servers:
            raise ValueError(f"{server} does not serve {service}")

    def _check_terms(self, service: str, terms: Terms) -> None:
        """What a decision message can carry: candidates serve the service, relays are hosts
        of the network, attributes are a few named scalars."""
        for candidate in terms.candidates:
            self._check_server(service, candidate)
        for relay in terms.via:
            self.view.attachment(relay)  # KeyError for a node that is not a host
        if len(terms.candidates) > MAX_TERMS or len(terms.via) > MAX_TERMS or len(
                terms.attributes) > MAX_TERMS:
            raise ValueError(f"at most {MAX_TERMS} candidates, relays and attributes each")
        for name, value in terms.attributes.items():
            if not (value is None or isinstance(value, (bool, int, str))
                    or isinstance(value, float) and math.isfinite(value)):
                raise ValueError(f"attribute {name!r} is not a scalar: {value!r}")

    # persistence: a restarted controller takes over the flows placed before

    def snapshot(self) -> dict:
        return persistence.snapshot(self)

    def restore(self, snapshot: dict) -> None:
        persistence.restore(self, snapshot)

    def request_for(self, client: str, service: str, demand: float | None = None,
                    bitrates: tuple[float, ...] = (), flow: str | None = None,
                    port: int | None = None) -> Request:
        """A request as the controller names it: flow ``client/service`` (``:port`` with a
        client port) unless given."""
        if service not in self.view.services:
            raise KeyError(f"unknown service {service!r}")
        default = f"{client}/{service}" + (f":{port}" if port is not None else "")
        return Request(flow or default, client, service,
                       self.view.services[service].demand if demand is None else demand,
                       tuple(bitrates), dict(self.view.labels.get(client, {})), port)

    def decision_message(self, request_id: int, flow: str,
                         migrated: bool = False) -> protocol.Decision:
        """The control protocol's ``decision`` about a placed flow: its server and terms, the
        hosts they name with their addresses."""
        record = self.flows[flow]
        placement = record.placement

        def hops(names) -> list[protocol.Hop]:
            return [protocol.Hop(name=name, address=self.view.attachment(name).address)
                    for name in names]

        return protocol.Decision(id=request_id, flow=flow, client=placement.request.client,
                                 service=placement.request.service,
                                 port=placement.request.client_port, server=placement.server,
                                 address=self.view.attachment(placement.server).address,
                                 bitrate=placement.bitrate,
                                 candidates=hops(placement.candidates),
                                 via=hops(placement.via), attributes=dict(placement.attributes),
                                 path=list(record.path) if record.path else None,
                                 migrated=migrated, version=record.version)

    def client_of(self, address: str) -> str | None:
        attachment = self.view.by_address.get(address)
        return attachment.host if attachment else None
