"""What the controller knows of the network: the scenario's static topology, handed over as data."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import networkx as nx

from topologies.naming import host_mac, service_mac


@dataclass(frozen=True)
class Attachment:
    """A host interface and the switch port it is cabled to."""

    host: str
    interface: str
    address: str  # IPv4, dotted
    mac: str
    switch: str
    port: int
    delay_up: float = 0.0  # seconds, host -> switch
    delay_down: float = 0.0  # switch -> host


@dataclass(frozen=True)
class Trunk:
    """A link between two switch ports, with each direction's configured delay and rate."""

    link: int  # the scenario's link index
    a: str
    a_port: int
    b: str
    b_port: int
    delay_ab: float = 0.0  # seconds
    delay_ba: float = 0.0
    bw_ab: float = 0.0  # bits/s; 0: unlimited
    bw_ba: float = 0.0


@dataclass(frozen=True)
class ServiceView:
    name: str
    address: str
    protocol: str  # "udp" or "tcp"
    port: int | None
    demand: float
    servers: dict[str, float]  # server host -> capacity (inf: unlimited)

    @property
    def mac(self) -> str:
        return service_mac(self.address)


@dataclass
class NetworkView:
    """Switches (name -> datapath id), where every host interface is attached, the links
    between switches, the services, and each host's role and labels."""

    switches: dict[str, int]
    attachments: list[Attachment]
    trunks: list[Trunk]
    services: dict[str, ServiceView] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    labels: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.switch_of_dpid = {dpid: name for name, dpid in self.switches.items()}
        self.by_address = {a.address: a for a in self.attachments}
        self._first_attachment = {}
        for attachment in self.attachments:
            self._first_attachment.setdefault(attachment.host, attachment)
        self.service_by_address = {s.address: s for s in self.services.values()}

    @classmethod
    def from_scenario(cls, scenario) -> "NetworkView":
        """The view of a resolved :class:`topologies.scenario.Scenario`."""
        nodes = scenario.nodes
        attachments, trunks = [], []
        for link in scenario.links:
            a, b = nodes[link.a.node], nodes[link.b.node]
            if a.is_switch and b.is_switch:
                trunks.append(Trunk(link.index, a.name, a.ports[link.a.interface], b.name,
                                    b.ports[link.b.interface], link.forward.delay or 0.0,
                                    link.reverse.delay or 0.0, link.forward.bw or 0.0,
                                    link.reverse.bw or 0.0))
                continue
            for host_end, switch_end, up, down in ((link.a, link.b, link.forward, link.reverse),
                                                   (link.b, link.a, link.reverse, link.forward)):
                host, switch = nodes[host_end.node], nodes[switch_end.node]
                if not host.is_switch and switch.is_switch:
                    address = str(host.interfaces[host_end.interface].ip)
                    attachments.append(Attachment(host.name, host_end.interface, address,
                                                  host_mac(address), switch.name,
                                                  switch.ports[switch_end.interface],
                                                  up.delay or 0.0, down.delay or 0.0))
        services = {name: ServiceView(name, str(s.address), s.protocol, s.port, s.demand,
                                      dict(s.servers))
                    for name, s in scenario.services.items()}
        hosts = [n for n in nodes.values() if not n.is_switch]
        return cls({n.name: n.dpid for n in nodes.values() if n.is_switch}, attachments,
                   trunks, services, {n.name: n.role for n in hosts},
                   {n.name: dict(n.labels) for n in hosts})

    def to_json(self) -> dict:
        data = asdict(self)
        for service in data["services"].values():  # JSON has no infinity
            service["servers"] = {k: (None if math.isinf(v) else v)
                                  for k, v in service["servers"].items()}
        return data

    @classmethod
    def from_json(cls, data: dict) -> "NetworkView":
        services = {}
        for name, s in data.get("services", {}).items():
            servers = {k: (math.inf if v is None else float(v)) for k, v in s["servers"].items()}
            services[name] = ServiceView(**(s | {"servers": servers}))
        return cls(dict(data["switches"]), [Attachment(**a) for a in data["attachments"]],
                   [Trunk(**t) for t in data["trunks"]], services, dict(data.get("roles", {})),
                   dict(data.get("labels", {})))

    def attachment(self, host: str) -> Attachment:
        """The host's first attached interface (its address is the host's address)."""
        if host not in self._first_attachment:
            raise KeyError(f"host {host} is not attached to any switch")
        return self._first_attachment[host]

    def switch_graph(self, down: frozenset[int] = frozenset()) -> nx.MultiDiGraph:
        """Switches and the trunks that are up, one edge per direction keyed by link index,
        weighted by that direction's delay (plus a hop, so equal delays prefer fewer hops)."""
        graph = nx.MultiDiGraph()
        graph.add_nodes_from(self.switches)
        for trunk in self.trunks:
            if trunk.link in down:
                continue
            graph.add_edge(trunk.a, trunk.b, key=trunk.link, port=trunk.a_port,
                           weight=trunk.delay_ab + HOP_COST_S, delay=trunk.delay_ab,
                           bw=trunk.bw_ab)
            graph.add_edge(trunk.b, trunk.a, key=trunk.link, port=trunk.b_port,
                           weight=trunk.delay_ba + HOP_COST_S, delay=trunk.delay_ba,
                           bw=trunk.bw_ba)
        return graph

    def policy_graph(self, down: frozenset[int] = frozenset()) -> nx.MultiDiGraph:
        """Hosts and switches with every link's per-direction delay, bw and state, as
        :class:`controller.policy.State` describes."""
        graph = nx.MultiDiGraph()
        for trunk in self.trunks:
            up = trunk.link not in down
            graph.add_edge(trunk.a, trunk.b, key=trunk.link, delay=trunk.delay_ab,
                           bw=trunk.bw_ab, up=up)
            graph.add_edge(trunk.b, trunk.a, key=trunk.link, delay=trunk.delay_ba,
                           bw=trunk.bw_ba, up=up)
        for a in self.attachments:
            graph.add_edge(a.host, a.switch, key=f"{a.host}:{a.interface}", delay=a.delay_up,
                           bw=0.0, up=True)
            graph.add_edge(a.switch, a.host, key=f"{a.host}:{a.interface}",
                           delay=a.delay_down, bw=0.0, up=True)
        return graph


# A microsecond per hop: breaks ties between equal-delay paths toward fewer hops without
# ever outweighing a real delay difference.
HOP_COST_S = 1e-6
