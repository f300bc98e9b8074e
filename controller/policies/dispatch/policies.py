"""The dispatch scheme's policy on the plain-Python policy interface (:mod:`controller.policy`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from controller.policy import (Assignment, Decision, Host, Migration, ModelPolicy, Rejection,
                               Request, ScenarioProblem, State)

from .access import Geography, LocationDatabase, MediaNode, candidates, rank
from .capacity import SharedCapacity, Tickets
from .gray_failover import GrayFailureDetector, core_routes, standby_relay
from .params import DispatchClientLabels, DispatchParams, DispatchServerLabels
from .quality import VIA, probed_path
from .rooms import Transcoding
from .routing import Mode, choose_relay, schedule


@dataclass
class DispatchRound:
    """One service's call as the centers see it: the requests, the media nodes, the geography
    between sites, the location database and the capacity book (placed flows counted)."""

    state: State
    service: str
    nodes: list[MediaNode]
    requests: list[Request]
    geography: Geography
    database: LocationDatabase
    book: object
    transcoders: frozenset[str] = frozenset()  # with transcoding: the transcoder nodes
    failing: Mapping[str, str] = field(default_factory=dict)  # gray failures: node -> why


class Dispatch(ModelPolicy):
    """Nearest-by-database dispatch with candidates for probing, capacity control across the
    centers and redirect (docs/schemes/dispatch.md)."""

    name = "dispatch"
    Params = DispatchParams
    ClientLabels = DispatchClientLabels
    ServerLabels = DispatchServerLabels
    on_load = "rebalance"

    def __init__(self, params: DispatchParams | None = None) -> None:
        super().__init__(params)
        self._labels: dict[str, dict] = {}  # client -> its labels, this call's
        self._shared: SharedCapacity | None = None
        self._reports_seen: dict[str, float] = {}
        # Passive transcoding: the room is the stream; its members are the flows placed on a
        # transcoder, each with its protocol, so that a flow gone from the placements leaves.
        self.transcoding = Transcoding()
        self.transcoding.open(self._room, self.params.source_protocol)
        self._transcoded: dict[str, str] = {}  # flow -> its protocol
        # (time, "started" | "stopped", room, protocol) for every transcoder passive ran.
        self.transcoder_events: list[tuple[float, str, str, str]] = []
        self.detector = GrayFailureDetector(self.params.detection_time)
        # (time, flow, from, to or "via RELAY", why) for every viewer gray failover moved.
        self.failovers: list[tuple[float, str, str, str, str]] = []

    @property
    def _room(self) -> str:
        return f"stream-{self.params.stream}"

    @classmethod
    def scenario_problems(cls, params: DispatchParams, hosts: Mapping[str, Host],
                          servers: Mapping[str, tuple[str, ...]]) -> list[ScenarioProblem]:
        """A dispatch scenario needs its dispatch centers as hosts of role ``dispatch``, every
        viewer a region some media node serves (and a center that is one of them), and its
        origin and relays as hosts: what the policy would otherwise reject request by request
        at run time."""
        problems = []
        centers = [name for name, host in hosts.items() if host.role == "dispatch"]
        hint = (f"hosts of role dispatch: {', '.join(centers)}" if centers
                else "add a host of role dispatch for each region")
        if not centers:  # one problem, not one per center named
            problems.append(ScenarioProblem("a dispatch scenario needs a dispatch center: no "
                                            "host has role dispatch", ("centers",), hint=hint))
        for name in params.centers if centers else ():
            host = hosts.get(name)
            if host is None or host.role != "dispatch":
                what = "is not a host of the scenario" if host is None else \
                    f"is a host of role {host.role or 'none'}, not dispatch"
                problems.append(ScenarioProblem(f"dispatch center {name!r} {what}",
                                                ("centers", name), hint=hint))
        served = {hosts[server].labels.get("region") for names in servers.values()
                  for server in names if server in hosts}
        for name, host in hosts.items():
            if host.role != "viewer":
                continue
            region, center = host.labels.get("region"), host.labels.get("center")
            if region is None:
                problems.append(ScenarioProblem(f"viewer {name} has no region label",
                                                node=name, hint="the dispatch policy places "
                                                                "viewers by their region"))
            elif region not in served:
                problems.append(ScenarioProblem(
                    f"region {region!r} of viewer {name} has no media node", node=name,
                    hint=f"regions with media nodes: {', '.join(sorted(map(str, served - {None})))}"))
            if center is not None and center not in params.centers:
                problems.append(ScenarioProblem(
                    f"center {center!r} of viewer {name} is not a dispatch center", node=name,
                    hint=f"policy_params.centers: {', '.join(params.centers)}"))
        named = [(("relays", i), relay) for i, relay in enumerate(params.relays)]
        if params.origin is not None:
            named.insert(0, (("origin",), params.origin))
        for param, name in named:
            if name not in hosts:
                problems.append(ScenarioProblem(f"{name!r} is not a host of the scenario",
                                                param))
        return problems

    # what the state says

    def _site(self, state: State, host: str) -> str | None:
        """The switch ``host`` hangs off (its true site): hosts have one attachment."""
        return next(iter(state.graph.successors(host)), None) if host in state.graph else None

    def _demand(self, state: State, service: str) -> float:
        """The service's demand per flow (the first flow's that has one)."""
        return next((r.demand for r in (*state.requests, *(p.request for p in state.placements))
                     if r.service == service and r.demand > 0), 0.0)

    def _nodes(self, state: State, service: str) -> list[MediaNode]:
        demand = self._demand(state, service)
        nodes = []
        for server in sorted(state.servers_of(service), key=lambda s: s.name):
            site = self._site(state, server.name)
            if site is None:
                continue
            capacity = server.capacity if math.isinf(server.capacity) or demand <= 0 \
                else math.floor(server.capacity / demand + 1e-9)
            report = state.latest_load(server.name)
            sessions = None if report is None else report.value("sessions")
            load = sessions if sessions is not None else (
                (report.load / demand if demand > 0 else report.load) if report else 0.0)
            labels = server.labels
            nodes.append(MediaNode(server.name, str(labels.get("region", "")),
                                   str(labels.get("room", site)), site, capacity, load,
                                   float(labels.get("cost", 0) or 0),
                                   float(labels.get("preference", 0) or 0)))
        return nodes

    def _protocol(self, labels: dict) -> str:
        """The protocol a client plays (its label, else the stream's own)."""
        return str(labels.get("protocol") or self.params.source_protocol)

    def _transcoded_for(self, labels: dict) -> bool | None:
        """With transcoding, whether the client needs a transcoder node (its protocol is not
        the stream's); None without transcoding (any node serves it)."""
        if self.params.transcoding is None:
            return None
        return self._protocol(labels) != self.params.source_protocol

    @staticmethod
    def _transcoders(state: State, service: str) -> frozenset[str]:
        return frozenset(server.name for server in state.servers_of(service)
                         if server.labels.get("transcoder"))

    def _center(self, labels: dict) -> str:
        centers = self.params.centers
        named = labels.get("center")
        if named is not None:
            if named not in centers:
                raise KeyError(f"unknown dispatch center {named!r} "
                               f"(centers: {', '.join(centers)})")
            return str(named)
        region = labels.get("region")
        return next((c for c, served in centers.items() if served and served == region),
                    next(iter(centers)))

    def _control(self, state: State, nodes: list[MediaNode], clients: dict) -> object:
        """The centers' capacity view with the placed flows counted."""
        capacities = {node.name: int(min(node.capacity, 2**31)) for node in nodes}
        centers = list(self.params.centers)
        if self.params.capacity_control == "tickets":
            book = Tickets(capacities, centers)
            of_client: dict[str, str] = {}  # placements of one client share its labels
            for placement in state.placements:
                if placement.server in capacities:
                    request = placement.request
                    if request.labels:
                        center = self._center(clients.get(request.client, {}) | request.labels)
                    else:
                        center = of_client.get(request.client)
                        if center is None:
                            center = of_client[request.client] = self._center(
                                clients.get(request.client, {}))
                    book.admit(center, placement.server)
            return book
        if self._shared is None or set(self._shared.capacity) != set(capacities):
            self._shared = SharedCapacity(capacities, centers)
            self._reports_seen = {}
        for node in nodes:
            report = state.latest_load(node.name)
            if report is not None and report.received > self._reports_seen.get(node.name, -1):
                self._reports_seen[node.name] = report.received
                self._shared.report(node.name, node.load)
        return self._shared

    # deciding

    @staticmethod
    def _client_labels(state: State) -> dict[str, dict]:
        return {client.name: dict(client.labels) for client in state.clients}

    def _leaves(self, state: State) -> None:
        """Passive transcoding's leaves: the transcoded flows neither placed nor asking any
        more left the room; the last one of a protocol to leave stops its transcoder."""
        present = {p.request.flow for p in state.placements} | {r.flow for r in state.requests}
        for flow, protocol in list(self._transcoded.items()):
            if flow in present:
                continue
            del self._transcoded[flow]
            stopped = self.transcoding.leave(self._room, flow, protocol) is not None
            if stopped and self.params.transcoding == "passive":
                self.transcoder_events.append((state.now, "stopped", self._room, protocol))

    def _join(self, flow: str, protocol: str, now: float) -> bool:
        """A flow placed on a transcoder joins the room; whether that started its transcoder
        (never under ``always``: it runs from the start)."""
        self._transcoded[flow] = protocol
        started = self.transcoding.join(self._room, flow, protocol) is not None
        if started and self.params.transcoding == "passive":
            self.transcoder_events.append((now, "started", self._room, protocol))
            return True
        return False

    def decide(self, state: State) -> Decision:
        labels = self._client_labels(state)
        if self.params.transcoding is not None:
            self._leaves(state)
        absent = [center for center in self.params.centers if center not in labels]
        if absent and state.clients:
            # The centers are the scenario's dispatch hosts; a name that is none is a typo or
            # a scenario without its dispatch centers, and no request is decided on a guess.
            reason = (f"dispatch center {absent[0]!r} is not a host of the scenario (give each "
                      "region's dispatch host in policy_params.centers)")
            return Decision(rejections=[Rejection(r.flow, reason) for r in state.requests])
        self._labels = labels
        return super().decide(state)

    def refuse_steer(self, state: State, flow: str, server: str) -> str | None:
        """A client confirms the candidate its probes found best: the move needs room at that
        node in its center's view, as a new client would (with tickets, one of the center's
        tickets there; the flow's old one is given back by the move). Without it the client
        stays where the center put it; otherwise several clients confirming the same node
        oversell it, which is what the capacity control is there to prevent."""
        [placement] = [p for p in state.placements if p.request.flow == flow]
        nodes = self._nodes(state, placement.request.service)
        if placement.server == server or server not in {node.name for node in nodes}:
            return None  # no move, or none the controller's own check lets through
        labels = self._client_labels(state)
        merged = labels.get(placement.request.client, {}) | placement.request.labels
        transcoded = self._transcoded_for(merged)
        if transcoded is not None and transcoded != (
                server in self._transcoders(state, placement.request.service)):
            return (f"{server} does not serve {self._protocol(merged)} viewers "
                    f"({'no ' if transcoded else ''}transcoder)")
        center = self._center(merged)
        if self._control(state, nodes, labels).has_room(center, server):
            return None
        return f"{server} has no room for {placement.request.client} at {center}"

    def services(self, state: State, by_service) -> list[str]:
        # Services without requests are visited too: their oversold nodes redirect flows.
        return sorted(set(by_service) | {server.service for server in state.servers})

    def view(self, state: State, service: str) -> list[MediaNode]:
        return self._nodes(state, service)

    def no_servers_reason(self, service: str) -> str:
        return f"service {service!r} has no media nodes"

    def instance(self, state: State, service: str, nodes: list[MediaNode],
                 requests: list[Request]) -> DispatchRound:
        """The centers' view for this call: geography, location database, capacity book."""
        labels = self._labels
        regions = {node.site: node.region for node in nodes}
        for request in requests:
            site = self._site(state, request.client)
            region = (request.labels | labels.get(request.client, {})).get("region")
            if site is not None and region is not None:
                regions.setdefault(site, str(region))
        # Paths between sites and media nodes never pass through a client host (hosts have
        # one link): dropping them makes the shortest paths cost the core network, not the
        # thousands of clients.
        clients = {client.name for client in state.clients} - {node.name for node in nodes}
        core = state.graph.subgraph([n for n in state.graph if n not in clients])
        geography = Geography.from_graph(core, regions, [node.name for node in nodes])
        database = LocationDatabase(geography, self.params.error_share,
                                    abroad_error_share=self.params.abroad_error_share,
                                    home_region=self.params.home_region,
                                    same_region_share=self.params.same_region_share,
                                    seed=self.params.seed)
        failing = {}
        if self.params.gray_failover:
            self.detector.observe(state, self._address(state, self.params.origin))
            failing = self.detector.failing(state, [node.name for node in nodes])
        return DispatchRound(state, service, nodes, requests, geography, database,
                             self._control(state, nodes, labels),
                             self._transcoders(state, service), failing)

    def allocate(self, round: DispatchRound) -> dict[str, tuple[str, ...] | str]:
        """Each request's ranked candidates (the admitted node first), or why it has none."""
        labels, state, nodes, book = self._labels, round.state, round.nodes, round.book
        served_regions = {node.region for node in nodes}
        answers: dict[str, tuple[str, ...] | str] = {}
        for request in round.requests:
            merged = labels.get(request.client, {}) | request.labels
            site = self._site(state, request.client)
            region = merged.get("region")
            if site is None or region is None:
                answers[request.flow] = f"{request.client} has no region label or is not attached"
                continue
            if region not in served_regions:
                answers[request.flow] = (f"region {region!r} of {request.client} has no media "
                                         f"node of {round.service!r}")
                continue
            try:
                center = self._center(merged)
            except KeyError as error:
                answers[request.flow] = str(error.args[0])
                continue
            transcoded = self._transcoded_for(merged)
            usable = nodes if transcoded is None else [
                node for node in nodes if (node.name in round.transcoders) == transcoded]
            if self.params.gray_failover:
                # A new viewer goes nowhere a current one is being moved away from.
                usable = [node for node in usable if node.name not in round.failing] or usable
            if not usable:
                answers[request.flow] = (f"no {'transcoder' if transcoded else 'media'} node "
                                         f"serves {self._protocol(merged)} viewers of "
                                         f"{round.service!r}")
                continue
            offered = self._offer(usable, round.database.locate(request.client, site),
                                  round.geography, book, center)
            # A viewer needing a transcoder pulls from one wherever the scheduling is
            # single-point: the origin only forwards the stream as it was pushed.
            if self.params.scheduling is Mode.SINGLE and not transcoded:
                answers[request.flow] = self._single_point(usable, offered, book, center,
                                                           request.client)
                continue
            taken = next((node for node in offered if book.admit(center, node.name)), None)
            if taken is None:
                answers[request.flow] = f"no media node has room for {request.client} at {center}"
                continue
            # The ranked list goes out with the decision: the client probes it and confirms
            # the best with ``steer``; ``taken`` is the database's pick among those with room.
            answers[request.flow] = (taken.name, *(node.name for node in offered))
        return answers

    def _single_point(self, nodes: list[MediaNode], offered: list[MediaNode], book,
                      center: str, client: str) -> tuple[str] | str:
        """Single-point: the origin, else a node of its machine room with room for
        ``center`` (:func:`~.routing.schedule`; past the room, the best of ``offered``, as
        multi-point), admitted in the book; the only candidate. Or why none."""
        origin = next((node for node in nodes if node.name == self.params.origin), None)
        if origin is None:
            return (f"single-point scheduling needs the origin {self.params.origin!r} to be "
                    f"a media node of the service")
        pull = schedule(Mode.SINGLE, origin, offered,
                        [node for node in nodes if node.room == origin.room],
                        lambda node: book.has_room(center, node.name))
        if pull is None or not book.admit(center, pull.node):
            return f"no media node has room for {client} at {center}"
        return (pull.node,)

    def outcomes(self, service: str, requests: list[Request], round: DispatchRound,
                 answers: dict[str, tuple[str, ...] | str]) -> Iterator[Assignment | Rejection]:
        attributes = {}
        if self.params.back_source and self.params.origin is not None:
            upstream = self._address(round.state, self.params.origin)
            if upstream is not None:
                attributes = {"stream": self.params.stream, "upstream": upstream}
        for request in requests:
            answer = answers[request.flow]
            if isinstance(answer, str):
                yield Rejection(request.flow, answer)
                continue
            extra = {}
            if answer[0] in round.transcoders and self.params.transcoding is not None:
                protocol = self._protocol(self._labels.get(request.client, {})
                                          | request.labels)
                extra = {"transcode": f"{self.params.source_protocol}->{protocol}",
                         "transcoder_started": self._join(request.flow, protocol,
                                                          round.state.now)}
            yield Assignment(request.flow, answer[0], candidates=answer[1:],
                             attributes=attributes | extra)

    def migrations(self, state: State, service: str, nodes: list[MediaNode],
                   requests: list[Request]) -> list[Migration]:
        if requests:
            return []
        round = self.instance(state, service, nodes, requests)
        moves = self._failovers(round)
        # The flows of a failing node are gray failover's alone: kept on a standby relay, the
        # relay insertion would take them off it again, the direct path still probing poor.
        held = {p.request.flow for p in state.placements if p.server in round.failing}
        for more in (self._redirects(round, held), self._relayed(state, nodes)):
            moves += [move for move in more if move.flow not in held]
            held |= {move.flow for move in more}
        return moves

    @staticmethod
    def _address(state: State, name: str | None) -> str | None:
        return next((host.address for host in (*state.clients, *state.servers)
                     if host.name == name), None)

    def _failovers(self, round: DispatchRound) -> list[Migration]:
        """Gray failover: the viewers of each failing node (``round.failing``) re-sourced. A
        node that is well but whose path from the origin is poor keeps its viewers when the
        standby route from the origin's site to its own passes a relay whose leg to the node
        probes fine: the stream comes through the relay (``via``). Otherwise each viewer goes
        to its next ranked node that is not failing and has room for its center."""
        state, origin = round.state, self.params.origin
        healthy = [node for node in round.nodes if node.name not in round.failing]
        moves = []
        for node in round.nodes:
            why = round.failing.get(node.name)
            placed = [p for p in state.placements if p.server == node.name]
            if why is None or not placed:
                continue
            relay = self._standby_relay(state, node) if self.detector.path_only(
                state, node.name) else None
            for placement in placed:
                if relay is not None:
                    if placement.via != (origin, relay):
                        moves.append(Migration(placement.request.flow, node.name,
                                               via=(origin, relay)))
                        self.failovers.append((state.now, placement.request.flow, node.name,
                                               f"via {relay}", why))
                    continue
                target = self._next_node(round, placement, healthy)
                if target is not None:
                    moves.append(Migration(placement.request.flow, target.name,
                                           via=(origin,) if origin else ()))
                    self.failovers.append((state.now, placement.request.flow, node.name,
                                           target.name, why))
        return moves

    def _standby_relay(self, state: State, node: MediaNode) -> str | None:
        """The relay on the standby route from the origin's site to ``node``'s whose leg to
        the node, as the node probes it, is not poor; None without one."""
        origin, relays = self.params.origin, self.params.relays
        origin_site = self._site(state, origin) if origin else None
        if origin_site is None or not relays:
            return None
        sites = {relay: site for relay in relays if (site := self._site(state, relay))}
        relay = standby_relay(core_routes(state, [node.name, origin, *sites]), origin_site,
                              node.site, sites)
        if relay is None:
            return None
        leg = probed_path(state.latest_load(node.name), self._address(state, relay) or "")
        return relay if leg is not None and not VIA.poor(leg) else None

    def _relayed(self, state: State, nodes: list[MediaNode]) -> list[Migration]:
        """The flows whose back-source chain changes: through the relay that
        :func:`~.routing.choose_relay` picks from the probed paths, or direct (step 6 in
        docs/schemes/dispatch.md)."""
        origin = self.params.origin
        relays = self.params.relays if self.params.relay_insertion else []
        addresses = {host.name: host.address for host in (*state.clients, *state.servers)}
        if origin is None or origin not in addresses:
            return []
        origin_site = self._site(state, origin)
        at_origin = [state.latest_load(node.name) for node in nodes if node.site == origin_site]
        placed: dict[str, list] = {}
        for placement in state.placements:
            placed.setdefault(placement.server, []).append(placement)
        moves = []
        for node in nodes:
            report = state.latest_load(node.name)
            direct = probed_path(report, addresses[origin])
            if direct is None or node.name not in placed:
                continue
            relayed = {}
            for relay in relays:
                if relay not in addresses:
                    continue
                second = probed_path(report, addresses[relay])
                first = next((quality for near in sorted(
                    (r for r in at_origin if r is not None), key=lambda r: -r.received)
                    if (quality := probed_path(near, addresses[relay])) is not None), None)
                if first is not None and second is not None:
                    relayed[relay] = (first, second)
            relay = choose_relay(direct, relayed)
            chain = (origin, relay) if relay else (origin,)
            moves += [Migration(placement.request.flow, node.name, via=chain)
                      for placement in placed.get(node.name, ())
                      if (placement.via or (origin,)) != chain]
        return moves

    def _offer(self, nodes, believed, geography, book, center) -> list[MediaNode]:
        ranked = rank(nodes, believed, geography,
                      has_room=lambda node: book.has_room(center, node.name),
                      near_band=self.params.near_band)
        return candidates(ranked, self.params.candidates, other_regions=self.params.other_regions)

    def _redirects(self, round: DispatchRound, moved: set[str]) -> list[Migration]:
        """Once a node's last report shows it oversold, the latest flows placed on it beyond
        its capacity (of those not in ``moved``), each to the best other node with room for
        its center. The excess is counted on the placements, not the report: a report still
        shows the sessions of flows already redirected until their pulls time out, and must
        not redirect them again."""
        state, moves = round.state, []
        for node in round.nodes:
            if state.latest_load(node.name) is None or node.load <= node.capacity:
                continue
            placed = [p for p in state.placements if p.server == node.name]
            excess = len(placed) - int(node.capacity)
            for placement in reversed(placed[-excess:] if excess > 0 else []):
                if placement.request.flow in moved:
                    continue
                target = self._next_node(round, placement,
                                         [n for n in round.nodes if n.name != node.name])
                if target is not None:
                    moves.append(Migration(placement.request.flow, target.name))
        return moves

    def _next_node(self, round: DispatchRound, placement, nodes: list[MediaNode]
                   ) -> MediaNode | None:
        """The best of ``nodes`` with room for the center of ``placement``'s viewer, ranked
        for where the database believes it is; the move is booked (the old node's room given
        back). A move keeps a viewer on the kind of node it needs (transcoder or not)."""
        client = placement.request.client
        merged = self._labels.get(client, {}) | placement.request.labels
        center, kind, book = self._center(merged), self._transcoded_for(merged), round.book
        ranked = rank([n for n in nodes if kind is None or (n.name in round.transcoders) == kind],
                      round.database.locate(client, self._site(round.state, client)),
                      round.geography, has_room=lambda n: book.has_room(center, n.name),
                      near_band=self.params.near_band)
        target = next((n for n in ranked if book.admit(center, n.name)), None)
        if target is not None:
            book.release(center, placement.server)
        return target


POLICIES = (Dispatch,)
