"""Nodes, links, datapath ids, OpenFlow ports and addresses resolved from a scenario's
topology, with its naming and connectivity checks."""

from __future__ import annotations

import ipaddress
import re

import networkx as nx

from . import model
from .document_checks import DocumentChecks
from .model import SWITCH, Impairment
from .naming import MAX_PORT, MAX_SWITCHES
from .problems import did_you_mean
from .resolved import Endpoint, Link, Node

LINUX_IFNAMSIZ = 15  # IFNAMSIZ (16) less the terminating NUL
INTERFACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class NetworkResolution(DocumentChecks):
    """Resolves the topology: nodes, links, datapath ids, ports and addresses."""

    def _check_table_names(self) -> None:
        for table in ("kinds", "groups"):
            for name in getattr(self.topology, table):
                if not re.match(model.SAFE_NAME, name):
                    self.problem(("topology", table, name), f"{name!r} is not a safe name",
                                 "use letters, digits, '-' and '_', start with a letter", key=True)

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
                role, kind, group, labels, env, cpu = settings
                if spec.ip is not None and len(names) > 1 and name == names[0]:
                    self.problem(path + ("ip",), "a node range cannot share one ip",
                                 "leave ip out to get addresses from topology.subnet")
                self.nodes[name] = Node(name, role, kind, group, labels, env,
                                        self.source_map.position(path, key=True), dpid=spec.dpid,
                                        cpu=cpu)
                if role == SWITCH and cpu is not None:
                    self.problem(path + ("cpu",), "switches have no cpu limit",
                                 "a CPU limit belongs to a host; the switches share "
                                 "ovs-vswitchd")
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
        """Apply defaults < kind < group < node; returns role, kind, group, labels, env,
        cpu."""
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
        cpu = next((s.cpu for s in reversed(layers) if s.cpu is not None), None)
        return role, kind_name, spec.group, labels, env, cpu

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
    def _check_connectivity(self, links: list[Link]) -> None:
        for node in self.nodes.values():
            # A node named by an invalid link is reported there; when an endpoint names no
            # defined node, it may have meant any unlinked one: say nothing about them.
            if node.name not in self.linked and not node.is_switch and not self.unknown_endpoint:
                self.problem(self.origin[node.name], f"{node.name} is not connected to anything",
                             "add a link with an endpoint on it, or remove the node", key=True)
        if not self.document.controller.controls_switches:
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
