"""The flow rules and groups each switch should hold, computed from a :class:`NetworkView`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import networkx as nx

from .view import Attachment, NetworkView, ServiceView

CLASSIFY, FORWARD = 0, 1
ETH_ARP, ETH_IPV4, ETH_IPV6, ETH_LLDP = 0x0806, 0x0800, 0x86DD, 0x88CC
IP_PROTO = {"udp": 17, "tcp": 6}
PRIORITY_PUNT = 300
PRIORITY_STEER = 200
PRIORITY_CATCH = 100
PRIORITY_PATH = 200
PRIORITY_DESTINATION = 100

# Cookies say which part of the controller a rule belongs to, so a glance at a switch's flow
# dump (and a reconciliation after restart) can tell them apart.
COOKIE_MARK = 0xFF << 56  # the cookie bits that say "edgebed installed this"
COOKIE_BASE = 0xEB << 56
COOKIES = {"base": COOKIE_BASE | 1, "forward": COOKIE_BASE | 2, "service": COOKIE_BASE | 3,
           "path": COOKIE_BASE | 4}

Match = tuple[tuple[str, object], ...]
Action = tuple  # ("output", port) | ("group", id) | ("set_field", field, value) | ("controller",)


def match(**fields) -> Match:
    """A match as a sorted tuple of OXM fields, hashable and comparable."""
    return tuple(sorted(fields.items()))


@dataclass(frozen=True)
class Rule:
    """One flow entry: apply ``actions``, then continue at table ``goto`` if set."""

    table: int
    priority: int
    match: Match
    actions: tuple[Action, ...] = ()
    goto: int | None = None
    layer: str = "base"

    @property
    def key(self) -> tuple:
        """What makes two entries the same entry in a switch (OpenFlow: table, priority,
        match)."""
        return self.table, self.priority, self.match

    @property
    def cookie(self) -> int:
        return COOKIES[self.layer]


@dataclass(frozen=True)
class Bucket:
    watch_port: int | None
    actions: tuple[Action, ...]


@dataclass(frozen=True)
class Group:
    """A fast-failover group: the first bucket whose watched port is up forwards."""

    group_id: int
    buckets: tuple[Bucket, ...]


@dataclass
class SwitchRules:
    """The whole desired state of one switch."""

    rules: dict[tuple, Rule] = field(default_factory=dict)
    groups: dict[int, Group] = field(default_factory=dict)

    def add(self, rule: Rule) -> None:
        self.rules[rule.key] = rule

    def merged(self, other: "SwitchRules") -> "SwitchRules":
        return SwitchRules(self.rules | other.rules, self.groups | other.groups)

    def apply(self, changes: "Changes") -> None:
        """Take ``changes`` as carried out: what a switch holds after it was sent them."""
        for group in changes.groups_added + changes.groups_modified:
            self.groups[group.group_id] = group
        for rule in changes.rules_added:
            self.rules[rule.key] = rule
        for rule in changes.rules_deleted:
            del self.rules[rule.key]
        for group_id in changes.groups_deleted:
            del self.groups[group_id]


@dataclass
class Changes:
    """What to send a switch to get from one state to another, in a safe order: groups before
    the rules that use them, rules before the groups they stopped using are deleted."""

    groups_added: list[Group] = field(default_factory=list)
    groups_modified: list[Group] = field(default_factory=list)
    rules_added: list[Rule] = field(default_factory=list)
    rules_deleted: list[Rule] = field(default_factory=list)
    groups_deleted: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any((self.groups_added, self.groups_modified, self.rules_added,
                    self.rules_deleted, self.groups_deleted))

    def count(self) -> int:
        return (len(self.groups_added) + len(self.groups_modified) + len(self.rules_added)
                + len(self.rules_deleted) + len(self.groups_deleted))


def diff(installed: SwitchRules, desired: SwitchRules,
         keys: Iterable[tuple] | None = None) -> Changes:
    """The changes that turn ``installed`` into ``desired``. An entry whose actions changed is
    re-added (OpenFlow ADD replaces an identical match and priority in place, without a window
    in which neither version is in the table). With ``keys`` only those rules are compared
    (the others and the groups are known to be equal), so keeping a switch in step costs what
    changed, not what it holds."""
    changes = Changes()
    if keys is not None:
        for key in keys:
            rule, held = desired.rules.get(key), installed.rules.get(key)
            if rule is not None and rule != held:
                changes.rules_added.append(rule)
            elif rule is None and held is not None:
                changes.rules_deleted.append(held)
        return changes
    for group_id, group in desired.groups.items():
        if group_id not in installed.groups:
            changes.groups_added.append(group)
        elif installed.groups[group_id] != group:
            changes.groups_modified.append(group)
    changes.rules_added = [rule for key, rule in desired.rules.items()
                           if installed.rules.get(key) != rule]
    changes.rules_deleted = [rule for key, rule in installed.rules.items()
                             if key not in desired.rules]
    changes.groups_deleted = [g for g in installed.groups if g not in desired.groups]
    return changes


def base_rules(view: NetworkView) -> SwitchRules:
    """What every switch holds whatever happens: punts, drops, table misses, service catches."""
    rules = SwitchRules()
    rules.add(Rule(CLASSIFY, PRIORITY_PUNT, match(eth_type=ETH_ARP), (("controller",),)))
    for dropped in (ETH_IPV6, ETH_LLDP):
        rules.add(Rule(CLASSIFY, PRIORITY_PUNT, match(eth_type=dropped)))
    for service in view.services.values():
        rules.add(Rule(CLASSIFY, PRIORITY_CATCH, match(eth_type=ETH_IPV4,
                                                       ipv4_dst=service.address),
                       (("controller",),)))
    rules.add(Rule(CLASSIFY, 0, match(), goto=FORWARD))
    return rules


def forwarding(view: NetworkView, down: frozenset[int] = frozenset(),
               fast_failover: bool = True) -> dict[str, SwitchRules]:
    """Destination rules (and fast-failover groups) for every switch, with the trunks in
    ``down`` (link indexes) out of service."""
    graph = view.switch_graph(down)
    # Shortest paths *toward* each switch: Dijkstra from it over the reversed graph gives every
    # switch's distance and a consistent tree, so hop-by-hop destination forwarding is
    # loop-free.
    reverse = graph.reverse(copy=False)
    distance_to = {target: nx.single_source_dijkstra_path_length(reverse, target)
                   for target in graph}
    next_hops = {target: nx.single_source_dijkstra_path(reverse, target) for target in graph}
    group_ids = {name: index + 1 for index, name in enumerate(sorted(view.switches))}
    result = {name: SwitchRules() for name in view.switches}
    for switch in view.switches:
        for target in view.switches:
            if target == switch or switch not in distance_to[target]:
                continue  # local, or unreachable while links are down
            primary_port = _best_port(graph, switch, next_hops[target][switch][-2])
            backup_port = _loop_free_alternate(graph, distance_to, switch, target,
                                               primary_port) if fast_failover else None
            if backup_port is None:
                output = ("output", primary_port)
            else:
                result[switch].groups[group_ids[target]] = Group(group_ids[target], (
                    Bucket(primary_port, (("output", primary_port),)),
                    Bucket(backup_port, (("output", backup_port),))))
                output = ("group", group_ids[target])
            for host in view.attachments:
                if host.switch == target:
                    result[switch].add(_destination(host, output))
    for host in view.attachments:
        result[host.switch].add(_destination(host, ("output", host.port)))
    return result


def _destination(host: Attachment, output: Action) -> Rule:
    return Rule(FORWARD, PRIORITY_DESTINATION, match(eth_dst=host.mac), (output,),
                layer="forward")


def _best_link(graph: nx.MultiDiGraph, switch: str, neighbour: str) -> int:
    """The lowest-weight link (its index) from ``switch`` to ``neighbour``; links may be
    parallel."""
    edges = graph.get_edge_data(switch, neighbour)
    return min(edges, key=lambda link: (edges[link]["weight"], edges[link]["port"]))


def _best_port(graph: nx.MultiDiGraph, switch: str, neighbour: str) -> int:
    return graph.edges[switch, neighbour, _best_link(graph, switch, neighbour)]["port"]


def _loop_free_alternate(graph, distance_to, switch: str, target: str,
                         primary_port: int) -> int | None:
    """The port to fall back on when the primary port fails, or None. A link qualifies when
    it is not the primary one and the neighbour behind it has a shortest path to ``target``
    that avoids ``switch`` (RFC 5286, inequality 1; a parallel link to the primary neighbour
    always does); the cheapest detour wins."""
    distances = distance_to[target]
    best, best_cost = None, float("inf")
    for neighbour, edges in graph.adj[switch].items():
        if neighbour not in distances or not (
                distances[neighbour] < _distance(distance_to, neighbour, switch)
                + distances[switch]):
            continue
        for data in edges.values():
            cost = data["weight"] + distances[neighbour]
            if data["port"] != primary_port and cost < best_cost:
                best, best_cost = data["port"], cost
    return best


def _distance(distance_to, source: str, target: str) -> float:
    return distance_to[target].get(source, float("inf"))


def steering(view: NetworkView, service: ServiceView, client: Attachment,
             server: Attachment, client_port: int | None = None) -> tuple[str, list[Rule]]:
    """The two rules that bind a client's flow to a server, both on the client's switch: its
    packets to the service address go to the server, and the server's answers come back from
    the service address. With ``client_port`` the flow is only what the client sends from that
    transport port (and the answers to it), so one host can have a flow per port, each on a
    server of its own. Returns the switch and the rules."""
    protocol = IP_PROTO[service.protocol]
    destination, source = f"{service.protocol}_dst", f"{service.protocol}_src"
    outbound = dict(eth_type=ETH_IPV4, ip_proto=protocol, ipv4_src=client.address,
                    ipv4_dst=service.address)
    inbound = dict(eth_type=ETH_IPV4, ip_proto=protocol, ipv4_src=server.address,
                   ipv4_dst=client.address)
    if service.port is not None:
        outbound[destination] = service.port
        inbound[source] = service.port
    if client_port is not None:
        outbound[source] = client_port
        inbound[destination] = client_port
    return client.switch, [
        Rule(CLASSIFY, PRIORITY_STEER, match(**outbound),
             (("set_field", "eth_dst", server.mac), ("set_field", "ipv4_dst", server.address)),
             goto=FORWARD, layer="service"),
        Rule(CLASSIFY, PRIORITY_STEER, match(**inbound),
             (("set_field", "eth_src", service.mac), ("set_field", "ipv4_src", service.address)),
             goto=FORWARD, layer="service")]


def explicit_path(view: NetworkView, client: Attachment, waypoints: Iterable[str],
                  flow_match: Match, down: frozenset[int] = frozenset()) -> list[tuple[str, Rule]]:
    """Rules pinning one direction of a flow to a path: from the client's switch through each
    waypoint switch in turn, the shortest path between consecutive stops; after the last
    waypoint the destination rules take over. Each rule also matches the port the packet
    should arrive on, so a packet that comes back to a switch of the path later (on its way
    from the last waypoint) is forwarded by destination, never around the pinned path again.
    Raises ``ValueError`` when a waypoint is not a switch or no path exists."""
    graph = view.switch_graph(down)
    stops = [client.switch] + list(waypoints)
    for stop in stops[1:]:
        if stop not in view.switches:
            raise ValueError(f"waypoint {stop} is not a switch of this network")
    hops = [client.switch]
    for start, end in zip(stops, stops[1:]):
        try:
            hops += nx.dijkstra_path(graph, start, end)[1:]
        except nx.NetworkXNoPath:
            raise ValueError(f"no path from {start} to {end} while links are down") from None
    rules = []
    in_port = client.port
    for switch, following in zip(hops, hops[1:]):
        link = _best_link(graph, switch, following)
        rules.append((switch, Rule(FORWARD, PRIORITY_PATH, match(**dict(flow_match),
                                                                 in_port=in_port),
                                   (("output", graph.edges[switch, following, link]["port"]),),
                                   layer="path")))
        in_port = graph.edges[following, switch, link]["port"]
    return rules
