"""A scenario file turned into the resolved model the network is built from.

:func:`load` reads the file (:mod:`topologies.loader`), checks each value against the schema
(:mod:`topologies.model`), then checks the document as a whole: it expands node ranges,
applies inheritance (defaults < kind < group < node), resolves every reference, assigns
addresses, datapath ids and OpenFlow port numbers, and collects *every* problem before raising
:class:`~topologies.problems.ScenarioInvalid`. Nothing here touches the system.
"""

from __future__ import annotations

import difflib
import importlib.util
import ipaddress
import re
import shlex
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import networkx as nx
from pydantic import BaseModel, ValidationError

from edgebed import units

from . import model
from .loader import Position, SourceMap, ScenarioSyntaxError, load_scenario_file, load_scenario_text
from .model import SWITCH, Impairment, ScenarioDocument
from . import commands
from .plugins import Plugins

from .naming import MAX_PORT, MAX_SWITCHES
from .problems import Problem, ScenarioInvalid, did_you_mean, validation_problems

LINUX_IFNAMSIZ = 15  # IFNAMSIZ (16) less the terminating NUL
INTERFACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
RANGE = re.compile(r"\[(\d+)-(\d+)\]")
MAX_RANGE = 4096
MAX_BANDWIDTH = 100e9


def impairment_problems(impairment: Impairment) -> list[tuple[str, str]]:
    """What is wrong with one direction's impairment as a whole (each field on its own is the
    schema's job), as (message, hint) pairs: the same checks for links, schedules and live
    changes."""
    problems = []
    if (impairment.jitter or 0) > (impairment.delay or 0):
        problems.append((f"jitter {impairment.jitter * 1e3:g}ms is larger than delay "
                         f"{(impairment.delay or 0) * 1e3:g}ms",
                         "the delay would have to go negative; raise delay or lower jitter"))
    if impairment.bw is not None and impairment.bw > MAX_BANDWIDTH:
        problems.append((f"bw {impairment.bw / 1e9:g}Gbps is more than a veth can carry",
                         "at most 100Gbps"))
    if impairment.loss and impairment.burst:  # p: 0 clears a burst (BurstLoss.__bool__)
        problems.append(("both loss and burst are set",
                         "loss is independent random loss, burst the Gilbert–Elliott model; "
                         "choose one"))
    return problems


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
                                  else {"interfaces": {i: str(a) for i, a in n.interfaces.items()}})}
                      for n in self.nodes.values()},
            "links": [{"endpoints": [str(link.a), str(link.b)],
                       "forward": link.forward.model_dump(exclude_none=True),
                       "reverse": link.reverse.model_dump(exclude_none=True)}
                      for link in self.links],
        }
        return document


DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
APP_FORMS = ("an app is edgebed, none, a Python file (.py, relative to the scenario's "
             "directory) or an importable module name")


def _importable(module: str) -> bool:
    """Whether ``module`` is a module name Python finds (its parent packages are imported to
    look)."""
    if not DOTTED_NAME.match(module):
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def app_file(app: str, scenario_file: str) -> Path | None:
    """The file a controller app names (a path ending in .py, relative to the scenario's
    directory); None for a module name."""
    if not app.endswith(".py") and "/" not in app:
        return None
    return (Path(scenario_file).parent / app).resolve()


def load(path: str | Path, environ: dict[str, str] | None = None, *,
         plugins: Plugins) -> Scenario:
    """Read, validate and resolve a scenario file, its workload and policy checked against
    ``plugins``; raises :class:`ScenarioInvalid`."""
    return _parse_and_resolve(load_scenario_file, path, environ, plugins)


def loads(text: str, file: str = "<scenario>", environ: dict[str, str] | None = None, *,
          plugins: Plugins) -> Scenario:
    """Like :func:`load`, from text."""
    return _parse_and_resolve(lambda text, environ: load_scenario_text(text, file, environ),
                              text, environ, plugins)


def _parse_and_resolve(parse, source, environ, plugins: Plugins) -> Scenario:
    try:
        data, source_map = parse(source, environ)
    except ScenarioSyntaxError as error:
        raise ScenarioInvalid([Problem(error.position, error.path, error.message,
                                       error.hint)]) from None
    return resolve(data, source_map, plugins)


def resolve(data: object, source_map: SourceMap, plugins: Plugins) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioInvalid([Problem(source_map.position(()), (),
                                       "a scenario is a mapping of keys such as name and topology",
                                       "start the file with 'name: my-scenario'")])
    try:
        document = ScenarioDocument.model_validate(data)
    except ValidationError as error:
        raise ScenarioInvalid(validation_problems(error, data, source_map,
                                                  fields=_fields_at)) from None
    return _Resolver(document, source_map, plugins).run()


# -- schema errors -------------------------------------------------------------------------

def _fields_at(path: tuple, root: type = ScenarioDocument) -> dict[str, Any]:
    """The fields (name -> pydantic ``FieldInfo``) of the model found at ``path`` in a ``root``
    document (a scenario, or a policy's params), for did-you-mean hints and descriptions."""
    annotation: Any = root
    for part in path:
        fields = _model_fields(_unwrap(annotation))
        if fields is not None:
            info = fields.get(part)
            if info is None:
                return {}
            annotation = info.annotation
        else:
            args = typing.get_args(_unwrap(annotation))
            annotation = args[-1] if args else Any
    return _model_fields(_unwrap(annotation)) or {}


def _model_fields(annotation: Any) -> dict[str, Any] | None:
    """The fields of a pydantic model or pydantic dataclass; None for anything else."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.model_fields
    return getattr(annotation, "__pydantic_fields__", None)


def _unwrap(annotation: Any) -> Any:
    """Strip Optional/Annotated down to the model or container inside."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin is typing.Union:
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = members[0] if len(members) == 1 else annotation
            if len(members) != 1:
                return annotation
        else:
            return annotation


# -- whole-document checks -----------------------------------------------------------------

class _Resolver:
    """Turns a schema-valid document into a :class:`Scenario`, collecting every problem."""

    def __init__(self, document: ScenarioDocument, source_map: SourceMap, plugins: Plugins):
        self.document = document
        self.agents = plugins.agents
        self.policies = plugins.policies
        self.topology = document.topology
        self.source_map = source_map
        self.problems: list[Problem] = []
        self.nodes: dict[str, Node] = {}
        self.origin: dict[str, tuple] = {}  # expanded node name -> path of its definition
        self.unusable: set[str] = set()  # node keys as written that were reported unusable
        self.unusable_roles: set[tuple] = set()  # where unknown roles were written
        self.linked: set[str] = set()  # nodes some link names, whether or not the link is valid
        self.unknown_endpoint = False  # some endpoint could not be tied to defined nodes
        self.endpoint_paths: dict[Endpoint, tuple] = {}  # linked interface -> where written

    def problem(self, path: tuple, message: str, hint: str = "", *, key: bool = False) -> None:
        self.problems.append(Problem(self.source_map.position(path, key=key), path, message, hint))

    def run(self) -> Scenario:
        self._check_table_names()
        self._resolve_nodes()
        links = self._resolve_links()
        self._assign_dpids()
        self._assign_addresses()
        self._check_connectivity(links)
        workload = self._resolve_workload()
        captures = self._resolve_captures()
        schedule = self._resolve_schedule(links)
        services = self._resolve_controller()
        if self.problems:
            raise ScenarioInvalid(self.problems)
        return Scenario(self.document.name, self.source_map.file, self.document, self.nodes,
                        links, workload, captures, schedule, services)

    def _check_table_names(self) -> None:
        for table in ("kinds", "groups"):
            for name in getattr(self.topology, table):
                if not re.match(model.SAFE_NAME, name):
                    self.problem(("topology", table, name), f"{name!r} is not a safe name",
                                 "use letters, digits, '-' and '_', start with a letter", key=True)

    # nodes

    def _expand(self, text: str, path: tuple) -> list[str] | None:
        """``viewer[1-3]`` -> viewer1, viewer2, viewer3 (None after reporting a bad range)."""
        match = RANGE.search(text)
        if not match:
            return [text]
        first, last = int(match.group(1)), int(match.group(2))
        head, tail = text[:match.start()], text[match.end():]
        if first > last:
            self.problem(path, f"bad range [{first}-{last}] in {text!r}: it counts down",
                         f"write [first-last] with first <= last: {head}[{last}-{first}]{tail}")
            return None
        if last - first + 1 > MAX_RANGE:
            self.problem(path, f"bad range [{first}-{last}] in {text!r}: {last - first + 1} "
                               f"items, at most {MAX_RANGE}",
                         f"split it into ranges of at most {MAX_RANGE} items")
            return None
        return [f"{head}{i}{tail}" for i in range(first, last + 1)]

    def _resolve_nodes(self) -> None:
        topology = self.topology
        for written, spec in topology.nodes.items():
            path = ("topology", "nodes", written)
            if not re.match(model.NODE_NAME, written):
                self.problem(path, f"{written!r} is not a safe node name",
                             "use letters, digits, '-' and '_', start with a letter, at most 32 "
                             "characters; a range is written viewer[1-40]", key=True)
                self.unusable.add(written)
                continue
            names = self._expand(written, path)
            if names is None:
                self.unusable.add(written)
                continue
            settings = self._inherit(spec, path)
            for name in names:
                if len(name) > 32:
                    self.problem(path, f"node name {name!r} is longer than 32 characters", key=True)
                    continue
                if name in self.nodes:
                    first = self.source_map.position(self.origin[name], key=True)
                    self.problem(path, f"duplicate node name {name!r}",
                                 f"already defined at line {first.line}", key=True)
                    continue
                self.origin[name] = path
                if settings is None:
                    continue
                role, kind, group, labels, env = settings
                if spec.ip is not None and len(names) > 1 and name == names[0]:
                    self.problem(path + ("ip",), "a node range cannot share one ip",
                                 "leave ip out to get addresses from topology.subnet")
                self.nodes[name] = Node(name, role, kind, group, labels, env,
                                        self.source_map.position(path, key=True), dpid=spec.dpid)
                if role == SWITCH and spec.ip is not None:
                    self.problem(path + ("ip",), "switches have no ip",
                                 "addresses belong to hosts")
                if role != SWITCH and spec.dpid is not None:
                    self.problem(path + ("dpid",), "only switches have a datapath id",
                                 f"this node's role is {role}")

    def _roles(self) -> list[str]:
        """The roles a node may have; empty when a reader without agents takes them as
        written."""
        return [] if self.agents is None else [SWITCH, *self.agents.roles()]

    def _inherit(self, spec: model.NodeSpec, path: tuple):
        """Apply defaults < kind < group < node; returns role, kind, group, labels, env."""
        topology = self.topology
        group = None
        if spec.group is not None:
            group = topology.groups.get(spec.group)
            if group is None:
                self.problem(path + ("group",), f"unknown group {spec.group!r}",
                             did_you_mean(spec.group, topology.groups))
                return None
        kind_name = spec.kind or (group.kind if group else None) or topology.defaults.kind
        kind = None
        if kind_name is not None:
            kind = topology.kinds.get(kind_name)
            if kind is None:
                where = path + ("kind",) if spec.kind else (
                    ("topology", "groups", spec.group, "kind") if group and group.kind
                    else ("topology", "defaults", "kind"))
                self.problem(where, f"unknown kind {kind_name!r}",
                             did_you_mean(kind_name, topology.kinds))
                return None
        layers = [s for s in (topology.defaults, kind, group, spec) if s is not None]
        role = next((s.role for s in reversed(layers) if s.role is not None), None)
        roles = self._roles()
        if role is None:
            self.problem(path, "node has no role",
                         "set role on the node, its kind, its group or topology.defaults"
                         + (f"; roles: {', '.join(roles)}" if roles else ""), key=True)
            return None
        if roles and role not in roles:
            where = {id(topology.defaults): ("topology", "defaults"),
                     id(kind): ("topology", "kinds", kind_name),
                     id(group): ("topology", "groups", spec.group), id(spec): path}
            declaring = next(s for s in reversed(layers) if s.role is not None)
            if where[id(declaring)] not in self.unusable_roles:  # once, however many inherit it
                self.unusable_roles.add(where[id(declaring)])
                self.problem(where[id(declaring)] + ("role",), f"unknown role {role!r}",
                             did_you_mean(role, roles))
            return None
        labels: dict = {}
        env: dict = {}
        for layer in layers:
            labels.update(layer.labels)
            env.update(layer.env)
        return role, kind_name, spec.group, labels, env

    # links

    def _parse_endpoint(self, text: str, path: tuple) -> list[Endpoint] | None:
        node_text, sep, interface_text = text.partition(":")
        if not sep or not node_text or not interface_text or ":" in interface_text:
            self.problem(path, f"bad endpoint {text!r}", 'write "node:interface", e.g. "v1:eth1"')
            self.unknown_endpoint = True
            return None
        if node_text in self.unusable:
            return None  # reported where the node is written
        nodes = self._expand(node_text, path)
        if nodes is None:
            self.unknown_endpoint = True
            return None
        self.linked.update(nodes)
        interfaces = self._expand(interface_text, path)
        if interfaces is None:
            return None
        if len(nodes) > 1 and len(interfaces) > 1 and len(nodes) != len(interfaces):
            self.problem(path, f"{text!r} pairs {len(nodes)} nodes with {len(interfaces)} "
                               "interfaces", "ranges in one endpoint must have the same length")
            return None
        count = max(len(nodes), len(interfaces))
        nodes = nodes * count if len(nodes) == 1 else nodes
        interfaces = interfaces * count if len(interfaces) == 1 else interfaces
        endpoints = []
        for node, interface in zip(nodes, interfaces):
            if node not in self.nodes:
                if node not in self.origin:  # a node that failed its own checks says so there
                    self.problem(path, f"endpoint {node}:{interface} names unknown node {node!r}",
                                 did_you_mean(node, self.nodes))
                    self.unknown_endpoint = True
                return None
            if len(interface) > LINUX_IFNAMSIZ:
                self.problem(path, f"interface name {interface!r} is {len(interface)} characters;"
                                   f" Linux allows {LINUX_IFNAMSIZ}", "use a shorter name, e.g. eth1")
                return None
            if not INTERFACE_NAME.match(interface) or interface in ("lo", ".", ".."):
                self.problem(path, f"{interface!r} is not a usable interface name",
                             "use letters, digits, '.', '-' and '_' (not 'lo')")
                return None
            endpoints.append(Endpoint(node, interface))
        return endpoints

    def _resolve_links(self) -> list[Link]:
        links: list[Link] = []
        used: dict[Endpoint, tuple] = {}
        for index, spec in enumerate(self.topology.links):
            path = ("topology", "links", index)
            sides = [self._parse_endpoint(text, path + ("endpoints", i))
                     for i, text in enumerate(spec.endpoints)]
            if None in sides:
                continue
            a_side, b_side = sides
            if len(a_side) > 1 and len(b_side) > 1 and len(a_side) != len(b_side):
                self.problem(path + ("endpoints",),
                             f"the endpoints expand to {len(a_side)} and {len(b_side)} ends",
                             "ranges on both sides must have the same length")
                continue
            count = max(len(a_side), len(b_side))
            a_side = a_side * count if len(a_side) == 1 else a_side
            b_side = b_side * count if len(b_side) == 1 else b_side
            forward, reverse = self._directions(spec, path)
            for a, b in zip(a_side, b_side):
                if a.node == b.node:
                    self.problem(path + ("endpoints",), f"link connects {a.node} to itself",
                                 "a link joins two different nodes")
                    continue
                clash = False
                for end, side in ((a, 0), (b, 1)):
                    if end in used:
                        first = self.source_map.position(used[end])
                        self.problem(path + ("endpoints", side),
                                     f"interface {end} is already used by the link at line "
                                     f"{first.line}", "each interface carries one link")
                        clash = True
                    used[end] = path
                if clash:
                    continue
                links.append(Link(len(links), a, b, forward, reverse,
                                  self.source_map.position(path)))
                for side, end in enumerate((a, b)):
                    self.nodes[end.node].interfaces[end.interface] = None
                    self.endpoint_paths[end] = path + ("endpoints", side)
        for switch in (n for n in self.nodes.values() if n.is_switch):
            self._assign_ports(switch)
        return links

    def _directions(self, spec: model.LinkSpec, path: tuple) -> tuple[Impairment, Impairment]:
        both = {k: v for k, v in spec.model_dump(include=set(Impairment.model_fields)).items()
                if v is not None}
        result = []
        checked = set()
        for direction in ("forward", "reverse"):
            override = getattr(spec, direction)
            values = dict(both)
            if override is not None:
                values.update(override.model_dump(exclude_none=True))
            impairment = Impairment.model_validate(values)
            result.append(impairment)
            where = path + (direction,) if override is not None else path
            if where in checked:
                continue  # neither direction overrides: the link's own values, checked once
            checked.add(where)
            self._check_impairment(impairment, where)
        return result[0], result[1]

    def _check_impairment(self, impairment: Impairment, where: tuple) -> None:
        for message, hint in impairment_problems(impairment):
            self.problem(where, message, hint)

    def _assign_ports(self, switch: Node) -> None:
        """OpenFlow port numbers: the interface's trailing number (eth3 -> 3), else the next free."""
        pending = []
        for interface in switch.interfaces:
            path = self.endpoint_paths[Endpoint(switch.name, interface)]
            match = re.search(r"(\d+)$", interface)
            number = int(match.group(1)) if match else 0
            if number > MAX_PORT:
                self.problem(path, f"interface {interface} of switch {switch.name} would be "
                                   f"OpenFlow port {number}; edgebed numbers ports 1-{MAX_PORT}",
                             "use a smaller interface number")
            elif number >= 1:
                if number in switch.ports.values():
                    other = next(i for i, p in switch.ports.items() if p == number)
                    self.problem(path, f"interfaces {other} and {interface} of switch "
                                       f"{switch.name} would both be OpenFlow port {number}",
                                 "number switch interfaces uniquely")
                switch.ports[interface] = number
            else:
                pending.append(interface)
        next_free = 1
        for interface in pending:
            while next_free in switch.ports.values():
                next_free += 1
            switch.ports[interface] = next_free

    def _assign_dpids(self) -> None:
        switches = [n for n in self.nodes.values() if n.is_switch]
        if len(switches) > MAX_SWITCHES:
            self.problem(("topology", "nodes"), f"{len(switches)} switches; edgebed supports "
                                                f"at most {MAX_SWITCHES} per scenario")
        taken: dict[int, str] = {}
        for node in self.nodes.values():
            if node.is_switch and node.dpid is not None:
                if node.dpid in taken:
                    self.problem(self.origin[node.name] + ("dpid",),
                                 f"datapath id {node.dpid:#x} is also used by {taken[node.dpid]}",
                                 "every switch needs its own dpid")
                taken[node.dpid] = node.name
        next_dpid = 1
        for node in self.nodes.values():
            if node.is_switch and node.dpid is None:
                while next_dpid in taken:
                    next_dpid += 1
                node.dpid = next_dpid
                taken[next_dpid] = node.name

    def _assign_addresses(self) -> None:
        subnet = self.topology.subnet
        taken: dict[ipaddress.IPv4Address, str] = {}
        for name, spec in self.topology.nodes.items():
            if spec.ip is None or name not in self.nodes:
                continue
            node = self.nodes[name]
            path = self.origin[name] + ("ip",)
            address = spec.ip
            if address.network.prefixlen < 31 and address.ip in (address.network.network_address,
                                                                  address.network.broadcast_address):
                self.problem(path, f"{address} is the network or broadcast address",
                             "choose a host address inside the prefix")
            elif address.ip in taken:
                self.problem(path, f"address {address.ip} is also used by {taken[address.ip]}",
                             "every interface needs its own address")
            taken[address.ip] = name
            if not node.interfaces:
                continue
            first = next(iter(node.interfaces))
            node.interfaces[first] = address
        free = (ip for ip in subnet.hosts() if ip not in taken)
        for node in self.hosts_in_order():
            for interface, address in node.interfaces.items():
                if address is not None:
                    continue
                ip = next(free, None)
                if ip is None:
                    self.problem(("topology", "subnet"), f"subnet {subnet} has too few addresses "
                                                         "for every host interface",
                                 "use a larger prefix, e.g. 10.0.0.0/16")
                    return
                node.interfaces[interface] = ipaddress.IPv4Interface(f"{ip}/{subnet.prefixlen}")

    def hosts_in_order(self) -> Iterator[Node]:
        return (n for n in self.nodes.values() if not n.is_switch)

    def _check_connectivity(self, links: list[Link]) -> None:
        for node in self.nodes.values():
            # A node named by an invalid link is reported there; when an endpoint names no
            # defined node, it may have meant any unlinked one: say nothing about them.
            if node.name not in self.linked and not node.is_switch and not self.unknown_endpoint:
                self.problem(self.origin[node.name], f"{node.name} is not connected to anything",
                             "add a link with an endpoint on it, or remove the node", key=True)
        if not self.document.controller.apps:
            switches = nx.MultiGraph()
            switches.add_nodes_from(n.name for n in self.nodes.values() if n.is_switch)
            switches.add_edges_from((l.a.node, l.b.node) for l in links
                                    if self.nodes[l.a.node].is_switch
                                    and self.nodes[l.b.node].is_switch)
            try:
                cycle = nx.find_cycle(switches)
            except nx.NetworkXNoCycle:
                return
            loop = " - ".join([cycle[0][0]] + [edge[1] for edge in cycle])
            self.problem(("controller",), f"switches form a loop ({loop}) and no controller runs",
                         "standalone learning switches flood forever around a loop; "
                         "remove a link to break the loop (with controller app none the "
                         "switches are standalone learning switches)")

    # workload, capture, schedule

    def _select(self, selectors: list[str], path: tuple) -> list[str]:
        """Node names from names, ranges, ``role:NAME`` and ``group:NAME`` selectors."""
        chosen: list[str] = []
        for index, selector in enumerate(selectors):
            where = path + (index,)
            prefix, sep, value = selector.partition(":")
            if sep and prefix in ("role", "group", "kind"):
                attribute = {"role": lambda n: n.role, "group": lambda n: n.group,
                             "kind": lambda n: n.kind}[prefix]
                matched = [n.name for n in self.nodes.values()
                           if attribute(n) == value and not n.is_switch]
                if not matched:
                    self.problem(where, f"no node has {prefix} {value!r}",
                                 did_you_mean(value, {attribute(n) for n in self.nodes.values()
                                                      if attribute(n)}))
                chosen += matched
                continue
            if selector in self.unusable:
                continue  # reported where the node is written
            for name in self._expand(selector, where) or []:
                if name in self.origin and name not in self.nodes:
                    continue  # the node failed its own checks and says so there
                if name not in self.nodes:
                    self.problem(where, f"unknown node {name!r}", did_you_mean(
                        name, [n.name for n in self.nodes.values() if not n.is_switch]))
                elif self.nodes[name].is_switch:
                    self.problem(where, f"{name} is a switch; agents and captures run on hosts")
                else:
                    chosen.append(name)
        return list(dict.fromkeys(chosen))

    def _resolve_workload(self) -> list[Workload]:
        workload: list[Workload] = []
        if self.agents is None:
            return workload
        for i, entry in enumerate(self.document.workload):
            path = ("workload", i)
            nodes = self._select(entry.nodes, path + ("nodes",))
            if entry.agent == commands.COMMAND:
                if entry.command is None or entry.params:
                    self.problem(path, "the command agent takes command: and no params:",
                                 'write command: "iperf3 -s"')
                    continue
                self._check_placeholders(entry.command, path + ("command",))
                workload.append(Workload(entry.agent, nodes, entry.command, entry.start,
                                         may_fail=entry.may_fail))
                continue
            if entry.agent not in self.agents.available():
                self.problem(path + ("agent",), f"unknown agent {entry.agent!r}",
                             did_you_mean(entry.agent, self.agents.available()))
                continue
            if entry.command is not None:
                self.problem(path + ("command",), f"agent {entry.agent} takes params:, not "
                                                  "command:")
                continue
            model = self.agents.params_model(entry.agent)
            try:
                params = model.model_validate(entry.params)
            except ValidationError as error:
                self.problems.extend(validation_problems(
                    error, entry.params, self.source_map, at=path + ("params",),
                    fields=lambda _: model.model_fields))
                continue
            references = self.agents.node_reference_fields(model)
            for name in references:
                value = getattr(params, name)
                for j, target in enumerate(value if isinstance(value, list) else [value]):
                    services = self.document.controller.services
                    if target is not None and target not in self.nodes \
                            and target not in services:
                        where = path + ("params", name) + ((j,) if isinstance(value, list) else ())
                        self.problem(where, f"unknown node or service {target!r}",
                                     did_you_mean(target, [n.name for n in self.nodes.values()
                                                           if not n.is_switch] + list(services)))
            workload.append(Workload(entry.agent, nodes, None, entry.start,
                                     params.model_dump(mode="json"), tuple(references),
                                     entry.may_fail))
        return workload

    def _check_placeholders(self, command: str | list[str], path: tuple) -> None:
        """Every ``{name}`` in a command must be one the runner fills in."""
        if isinstance(command, str):
            try:
                parts = shlex.split(command)
            except ValueError as error:
                self.problem(path, f"cannot split the command into words: {error}",
                             "close the quote, or give the command as a list")
                return
            where = [path] * len(parts)
        else:
            parts, where = command, [path + (j,) for j in range(len(command))]
        for part, at in zip(parts, where):
            if (problem := commands.command_placeholder_problem(part)) is not None:
                self.problem(at, problem)

    def _resolve_captures(self) -> list[Capture]:
        captures = []
        for i, spec in enumerate(self.document.capture):
            for name in self._select(spec.nodes, ("capture", i, "nodes")):
                node = self.nodes[name]
                for j, interface in enumerate(spec.interfaces):
                    if interface not in node.interfaces:
                        self.problem(("capture", i, "interfaces", j),
                                     f"{name} has no interface {interface!r}",
                                     did_you_mean(interface, node.interfaces))
                captures.append(Capture(name, spec.interfaces or list(node.interfaces),
                                        spec.filter, spec.snaplen, spec.rotate_size,
                                        spec.rotate_files))
        return captures

    def _resolve_schedule(self, links: list[Link]) -> list[Event]:
        by_endpoint = {str(end): link.index for link in links for end in link.endpoints()}
        # What each direction will be after the sets so far, so every set is checked against
        # the state it really changes (sets in time order; a later set builds on earlier ones).
        planned = {(link.index, d): getattr(link, d) for link in links
                   for d in ("forward", "reverse")}
        events = []
        in_time_order = sorted(enumerate(self.document.schedule), key=lambda item: item[1].at)
        for i, spec in in_time_order:
            path = ("schedule", i)
            if spec.at > self.document.duration:
                self.problem(path + ("at",), f"at {spec.at:g}s is after the run ends "
                                             f"(duration {self.document.duration:g}s)",
                             "raise duration or move the event earlier")
            if spec.action.startswith("controller_"):
                if not self.document.controller.apps:
                    self.problem(path + ("action",), f"{spec.action} needs a controller",
                                 "set controller: {app: edgebed}")
                events.append(Event(spec.at, spec.action))
                continue
            if spec.node is not None:
                if spec.node not in self.nodes:
                    self.problem(path + ("node",), f"unknown node {spec.node!r}",
                                 did_you_mean(spec.node, self.nodes))
                    continue
                events.append(Event(spec.at, spec.action, node=spec.node))
                continue
            if spec.link not in by_endpoint:
                self.problem(path + ("link",), f"no link has endpoint {spec.link!r}",
                             did_you_mean(spec.link, by_endpoint))
                continue
            index = by_endpoint[spec.link]
            directions = ("forward", "reverse") if spec.direction == "both" else (spec.direction,)
            if spec.set is None:
                events.append(Event(spec.at, spec.action, link=index))
                continue
            for direction in directions:
                planned[index, direction] = planned[index, direction].merged(spec.set)
                self._check_impairment(planned[index, direction], path + ("set",))
            events.append(Event(spec.at, spec.action, link=index, directions=directions,
                                changes=spec.set))
        return events

    def _check_controller_apps(self) -> None:
        """Each app is edgebed, an existing Python file or a module name, named once; none
        stands alone."""
        app = self.document.controller.app
        apps = [app] if isinstance(app, str) else app
        paths = [("controller", "app")] if isinstance(app, str) else [
            ("controller", "app", index) for index in range(len(app))]
        if not apps:
            self.problem(("controller", "app"), "no app listed",
                         "write app: none for standalone switches")
        for name, path in zip(apps, paths):
            if name == model.NO_APP and len(apps) > 1:
                self.problem(path, "none cannot run beside other apps",
                             "remove none from the list")
            elif apps.count(name) > 1 and path != paths[apps.index(name)]:
                self.problem(path, f"app {name!r} is listed twice", "list each app once")
            elif name in (model.NO_APP, model.EDGEBED_APP):
                continue
            elif (file := app_file(name, self.source_map.file)) is not None:
                if not file.is_file():
                    self.problem(path, f"controller app file {name!r} not found ({file})",
                                 APP_FORMS)
            elif not _importable(name):
                self.problem(path, f"controller app {name!r} is not an importable module",
                             APP_FORMS)

    def _resolve_controller(self) -> dict[str, Service]:
        """Services, the policy and the management network, checked against the nodes."""
        controller = self.document.controller
        path = ("controller",)
        self._check_controller_apps()
        if not controller.runs_edgebed:
            for name in ("services", "policy", "policy_params", "period", "control_network",
                         "control_host"):
                if name in controller.model_fields_set:
                    self.problem(path + (name,),
                                 f"{name} is set but edgebed's controller app does not run",
                                 "set controller: {app: edgebed} (or add edgebed to a list of "
                                 "apps)", key=True)
            return {}
        if controller.policy not in self.policies.available():
            self.problem(path + ("policy",), f"unknown policy {controller.policy!r}; valid "
                                             f"policies: {', '.join(self.policies.available())}",
                         did_you_mean(controller.policy, self.policies.available()))
        else:
            self._check_policy_params(controller.policy, controller.policy_params)
        host_addresses = {address.ip: node.name for node in self.hosts_in_order()
                          for address in node.interfaces.values() if address is not None}
        self._check_control_network(controller)
        management = controller.management_subnet
        if controller.builds_management:
            if management.overlaps(self.topology.subnet):
                self.problem(path + ("management_subnet",),
                             f"{management} overlaps the topology subnet {self.topology.subnet}",
                             "choose another management_subnet, e.g. 172.30.0.0/16")
            elif management.num_addresses - 2 < len(host_addresses) + 1:
                self.problem(path + ("management_subnet",), f"{management} has too few "
                                                            "addresses for every host",
                             "use a larger prefix")
        services = {}
        addresses: dict[ipaddress.IPv4Address, str] = {}
        for name, spec in controller.services.items():
            where = path + ("services", name)
            if spec.address in host_addresses:
                self.problem(where + ("address",), f"{spec.address} is also host "
                                                   f"{host_addresses[spec.address]}'s address",
                             "a service address belongs to no host")
            elif spec.address in addresses:
                self.problem(where + ("address",), f"{spec.address} is also service "
                                                   f"{addresses[spec.address]}'s address")
            elif controller.builds_management and spec.address in management:
                self.problem(where + ("address",), f"{spec.address} is inside the management "
                                                   f"subnet {management}")
            addresses[spec.address] = name
            servers = {}
            for server in self._select(spec.servers, where + ("servers",)):
                capacity = self.nodes[server].labels.get(spec.capacity_label)
                try:
                    servers[server] = float("inf") if capacity is None else (
                        units.parse_rate(capacity) if isinstance(capacity, str)
                        else float(capacity))
                except ValueError as error:
                    self.problem(self.origin[server], f"label {spec.capacity_label} of "
                                                      f"{server}: {error}", key=True)
            services[name] = Service(name, spec.address, spec.protocol, spec.port, spec.demand,
                                     servers)
        if controller.policy in self.policies.available():
            self._check_policy_labels(controller.policy, services)
            self._check_policy_scenario(controller.policy, controller.policy_params, services)
        return services

    def _check_policy_scenario(self, policy: str, params: dict,
                               services: dict[str, Service]) -> None:
        """The policy's own checks of the scenario (``scenario_problems``), once its
        parameters are valid, each problem at the parameter or host it is about."""
        try:
            validated = self.policies.params_model(policy).model_validate(params)
        except ValidationError:
            return  # reported by _check_policy_params
        hosts = {node.name: (node.role or "", dict(node.labels))
                 for node in self.hosts_in_order()}
        servers = {name: tuple(service.servers) for name, service in services.items()}
        for found in self.policies.scenario_problems(policy, validated, hosts, servers):
            # A parameter the file leaves at its default is reported at the nearest key the
            # file writes (the source map's nearest ancestor).
            where = self.origin[found.node] if found.node is not None else (
                "controller", "policy_params", *found.param)
            self.problem(where, found.message, found.hint, key=found.node is not None)

    def _check_policy_params(self, policy: str, params: dict) -> None:
        """``params`` against the policy's ``Params``, each problem at the key it is about: an
        unknown key with the closest valid one, a value of the wrong type with what the policy
        reads it as."""
        model = self.policies.params_model(policy)
        try:
            model.model_validate(params)
        except ValidationError as error:
            self.problems.extend(validation_problems(
                error, params, self.source_map, at=("controller", "policy_params"),
                fields=lambda path: _fields_at(path, model), subject=f"policy {policy}"))

    def _check_control_network(self, controller: model.Controller) -> None:
        """In-band control needs a host to listen at, with an address on the data network;
        out-of-band control has no use for one."""
        path = ("controller",)
        if controller.control_network == "out-of-band":
            if controller.control_host is not None:
                self.problem(path + ("control_host",), "control_host is only for in-band "
                                                       "control", "set control_network: in-band "
                                                                  "or drop control_host")
            return
        if controller.control_host is None:
            self.problem(path + ("control_network",), "in-band control needs control_host",
                         "name the host the controller listens at, e.g. control_host: dc1")
            return
        node = self.nodes.get(controller.control_host)
        hosts = [n.name for n in self.hosts_in_order()]
        if node is None or node.is_switch:
            self.problem(path + ("control_host",),
                         f"{controller.control_host!r} is not a host of the topology"
                         + (" (it is a switch)" if node is not None else ""),
                         did_you_mean(controller.control_host, hosts))
        elif node.ip is None:
            self.problem(path + ("control_host",), f"{node.name} has no data-plane address",
                         "give its first interface an address")

    def _check_policy_labels(self, policy: str, services: dict[str, Service]) -> None:
        """The labels ``policy`` reads, typed by its label models: the servers' by
        ``ServerLabels``, every other host's by ``ClientLabels``; a label one or two letters
        off a declared one is refused as a misspelling."""
        client_labels, server_labels = self.policies.label_models(policy)
        servers = {server for service in services.values() for server in service.servers}
        # A label set on a kind, group or the defaults is wrong once, not once per host.
        reported: set[tuple] = set()
        for node in self.hosts_in_order():
            model = server_labels if node.name in servers else client_labels
            try:
                model.model_validate(node.labels)
            except ValidationError as error:
                for problem in error.errors():
                    label = str(problem["loc"][0])
                    described = model.model_fields[label].description
                    origin = self._label_origin(node, label)
                    if origin in reported:
                        continue
                    reported.add(origin)
                    self.problem(origin,
                                 f"label {label} of {node.name}: {problem['msg']}",
                                 f"policy {policy} reads it as {described}" if described
                                 else "")
            for label in node.labels:
                close = difflib.get_close_matches(label, model.model_fields, n=1, cutoff=0.85)
                if label not in model.model_fields and close:
                    self.problem(self._label_origin(node, label),
                                 f"label {label} of {node.name} is not one policy {policy} "
                                 f"reads", f"did you mean {close[0]!r}?", key=True)

    def _label_origin(self, node: Node, label: str) -> tuple:
        """Where ``label`` of ``node`` was set: the innermost of node, group, kind and defaults
        that sets it."""
        topology = self.topology
        spec_path = self.origin[node.name]
        for path, layer in ((spec_path, topology.nodes.get(spec_path[-1])),
                            (("topology", "groups", node.group), topology.groups.get(node.group)),
                            (("topology", "kinds", node.kind), topology.kinds.get(node.kind)),
                            (("topology", "defaults"), topology.defaults)):
            if layer is not None and label in layer.labels:
                return path + ("labels", label)
        return spec_path
