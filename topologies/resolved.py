"""The resolved scenario the network is built from: nodes after inheritance, links with both
directions' impairments, the workload, captures, schedule and services, every name checked."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from . import model
from .loader import Position
from .model import SWITCH, Impairment, ScenarioDocument


@dataclass(frozen=True)
class Endpoint:
    """One end of a link: an interface on a node."""

    node: str
    interface: str

    def __str__(self) -> str:
        return f"{self.node}:{self.interface}"


@dataclass
class Node:
    """A host or switch after inheritance, with everything needed to create it."""

    name: str
    role: str
    kind: str | None
    group: str | None
    labels: dict[str, Any]
    env: dict[str, str]
    position: Position
    dpid: int | None = None
    interfaces: dict[str, ipaddress.IPv4Interface | None] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)  # switch interface -> OpenFlow port
    cpu: float | None = None  # cores the host may use (topologies.cpu_limits); None: no limit

    @property
    def is_switch(self) -> bool:
        return self.role == SWITCH

    @property
    def ip(self) -> ipaddress.IPv4Interface | None:
        """The address of the node's first interface (hosts only)."""
        return next(iter(self.interfaces.values()), None)


@dataclass
class Link:
    """A resolved link; ``forward`` applies from ``a`` to ``b`` and ``reverse`` from ``b`` to ``a``."""

    index: int
    a: Endpoint
    b: Endpoint
    forward: Impairment
    reverse: Impairment
    position: Position

    def endpoints(self) -> tuple[Endpoint, Endpoint]:
        return self.a, self.b


@dataclass
class Workload:
    """Agents to start: ``command`` for the command agent; for the others ``params`` as
    validated, with ``node_params`` naming the fields that hold node names."""

    agent: str
    nodes: list[str]
    command: list[str] | str | None
    start: float
    params: dict = field(default_factory=dict)
    node_params: tuple[str, ...] = ()
    may_fail: bool = False


@dataclass
class Capture:
    node: str
    interfaces: list[str]
    filter: str
    snaplen: int
    rotate_size: float | None
    rotate_files: int | None


@dataclass
class Event:
    """A scheduled change: ``link`` is set for link events and ``set``, ``node`` for node
    events; ``changes`` holds the fields a ``set`` changes, for ``directions``."""

    at: float
    action: str
    link: int | None = None  # index into Scenario.links
    node: str | None = None
    directions: tuple[str, ...] = ()
    changes: Impairment | None = None


@dataclass
class Service:
    """A service address and the hosts behind it, with each server's capacity (inf: none
    given)."""

    name: str
    address: ipaddress.IPv4Address
    protocol: str
    port: int | None
    demand: float
    servers: dict[str, float]  # server node -> capacity


@dataclass
class Scenario:
    """The resolved scenario: every name checked, every default applied."""

    name: str
    source: str
    document: ScenarioDocument
    nodes: dict[str, Node]
    links: list[Link]
    workload: list[Workload]
    captures: list[Capture]
    schedule: list[Event]
    services: dict[str, Service] = field(default_factory=dict)

    @property
    def seed(self) -> int:
        return self.document.seed

    def controller_apps(self) -> list[str]:
        """The controller's apps as os-ken loads them: edgebed's as its module, a user's file
        as an absolute path (written relative to the scenario), a module name as written."""
        return [model.EDGEBED_APP_MODULE if app == model.EDGEBED_APP
                else str(app_file(app, self.source) or app)
                for app in self.document.controller.apps]

    @property
    def duration(self) -> float:
        return self.document.duration

    @property
    def time_dilation(self) -> float:
        return self.document.time_dilation

    @property
    def hosts(self) -> list[Node]:
        return [n for n in self.nodes.values() if not n.is_switch]

    @property
    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_switch]

    def address(self, node_name: str | None) -> str | None:
        """What an agent is given for a node name: a host's address, a service's virtual one."""
        if node_name is None:
            return None
        if node_name in self.services:
            return str(self.services[node_name].address)
        return str(self.nodes[node_name].ip.ip)

    def agent_params(self, entry: Workload) -> dict:
        """A workload's params as its agent takes them: node names replaced by addresses
        (agents get addresses, scenarios say names)."""
        params = dict(entry.params)
        for field_name in entry.node_params:
            value = params[field_name]
            params[field_name] = ([self.address(v) for v in value] if isinstance(value, list)
                                  else self.address(value))
        return params

    def graph(self) -> nx.MultiGraph:
        """Nodes and links as a multigraph; edge key is the link index."""
        graph = nx.MultiGraph()
        for node in self.nodes.values():
            graph.add_node(node.name, role=node.role)
        for link in self.links:
            graph.add_edge(link.a.node, link.b.node, key=link.index)
        return graph

    def resolved(self) -> dict:
        """The scenario with every default and inherited value written out (for the run record)."""
        document = self.document.model_dump(mode="json", exclude={"topology"})
        document["topology"] = {
            "nodes": {n.name: {"role": n.role, "kind": n.kind, "group": n.group,
                               "labels": n.labels, "env": n.env,
                               **({"dpid": f"0x{n.dpid:016x}", "ports": n.ports} if n.is_switch
                                  else {"interfaces": {i: str(a) for i, a in n.interfaces.items()},
                                        **({"cpu": n.cpu} if n.cpu is not None else {})})}
                      for n in self.nodes.values()},
            "links": [{"endpoints": [str(link.a), str(link.b)],
                       "forward": link.forward.model_dump(exclude_none=True),
                       "reverse": link.reverse.model_dump(exclude_none=True)}
                      for link in self.links],
        }
        return document


def app_file(app: str, scenario_file: str) -> Path | None:
    """The file a controller app names (a path ending in .py, relative to the scenario's
    directory); None for a module name."""
    if not app.endswith(".py") and "/" not in app:
        return None
    return (Path(scenario_file).parent / app).resolve()
