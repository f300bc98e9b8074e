"""A scenario as a containerlab topology file, for labs that outgrow one machine."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agents import catalog
from topologies import commands as command_workload
from agents.processes import tcpdump_command

from topologies.impairments import tc
from topologies.model import Impairment
from topologies.naming import host_mac
from topologies.scenario import Endpoint, Node, Scenario
from . import ExportError

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "clab.schema.json"
IMAGE = "edgebed-agents:latest"  # docker build -t edgebed-agents -f docker/agents.Dockerfile .
RUN_DIR = "/edgebed/run"  # inside every container; bound to <lab>-run/ beside the topology
SCENARIO_IN_CONTAINER = "/edgebed/scenario.yaml"
OPENFLOW_PORT = 6653
MANAGEMENT_INTERFACE = "eth0"  # containerlab's: a host interface of that name would clash
LINUX_IFNAMSIZ = 15
DIRECTIONS = ("forward", "reverse")


@dataclass
class ContainerlabExport:
    """A containerlab topology (``topology``, the document), the host commands to run before
    ``containerlab deploy`` and what of the scenario the file does not carry."""

    name: str
    source: str
    topology: dict
    host_setup: list[str] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The topology file: a comment header (how to deploy, what does not map), then YAML."""
        lines = [f"containerlab topology of edgebed scenario {self.name!r} ({self.source}),",
                 "written by `edgebed export --to containerlab`.",
                 "Build the image first: docker build -t edgebed-agents -f docker/agents.Dockerfile .",
                 "Impairments are tc netem commands in the nodes' exec (container ends) and in",
                 "the configure stage of the first node (switch ends, run on the host).", ""]
        if self.host_setup:
            lines += ["Before `containerlab deploy`, on the host (containerlab does not create "
                      "OVS bridges):"]
            lines += [f"  {command}" for command in self.host_setup] + [""]
        if self.unmapped:
            lines += ["Not exported (edgebed run has it, this lab does not):"]
            lines += [f"  - {item}" for item in self.unmapped]
        header = "".join(f"# {line}".rstrip() + "\n" for line in lines)
        return header + yaml.safe_dump(self.topology, sort_keys=False, width=100)


def export(scenario: Scenario, scenario_file: str | Path, out_dir: str | Path,
           image: str = IMAGE) -> ContainerlabExport:
    """``scenario`` (resolved from ``scenario_file``) as a containerlab topology to be written
    in ``out_dir``; raises :class:`~experiments.export.ExportError` when it cannot be."""
    return _Exporter(scenario, Path(scenario_file), Path(out_dir), image).run()


class _Exporter:
    def __init__(self, scenario: Scenario, scenario_file: Path, out_dir: Path, image: str):
        self.scenario = scenario
        self.settings = scenario.document.controller
        if self.settings.user_apps:
            raise ExportError(f"{scenario.source}: controller.app: a lab runs edgebed's app "
                              f"only, not {', '.join(self.settings.user_apps)}")
        if self.settings.remotes:
            raise ExportError(f"{scenario.source}: controller.remote: a lab runs edgebed's app "
                              f"only, not a remote controller "
                              f"({', '.join(self.settings.remotes)})")
        self.controlled = self.settings.runs_edgebed
        self.image = image
        self.scenario_bind = os.path.relpath(scenario_file.resolve(), out_dir.resolve())
        self.run_bind = f"{scenario.name}-run"
        # Bridge and port names live in the host's namespace, shared with every other lab and
        # run: a prefix from the scenario's name keeps them apart and within IFNAMSIZ; it is not
        # edgebed's run prefix, so `edgebed clean` never removes a deployed lab's bridges.
        self.prefix = "c" + hashlib.sha256(scenario.name.encode()).hexdigest()[:4]
        self.switch_index = {node.name: index for index, node in enumerate(scenario.switches)}
        self.controller_node = next(name for name in ("controller", "edgebed-controller",
                                                      "edgebed-ctl") if name not in scenario.nodes)
        self.unmapped: list[str] = []
        # tc commands per host for the impairments leaving its interfaces (filled by links())
        self.egress: dict[str, list[str]] = {node.name: [] for node in scenario.hosts}

    # -- names and addresses -------------------------------------------------------------

    def node_name(self, node: Node) -> str:
        """The containerlab name: a bridge node is named after its OVS bridge."""
        return f"{self.prefix}s{self.switch_index[node.name]}" if node.is_switch else node.name

    def interface(self, end: Endpoint) -> str:
        node = self.scenario.nodes[end.node]
        if node.is_switch:
            return f"{self.node_name(node)}p{node.ports[end.interface]}"
        if end.interface == MANAGEMENT_INTERFACE:
            raise ExportError(f"{self.scenario.source}: node {end.node}: interface "
                              f"{MANAGEMENT_INTERFACE} is containerlab's management interface; "
                              "rename it (eth1, eth2, ...)")
        return end.interface

    @functools.cached_property
    def management_addresses(self) -> dict[str, str]:
        """The controller first, then the hosts, after the gateway containerlab keeps (the
        subnet's first address, on the host's management bridge)."""
        free = self.settings.management_subnet.hosts()
        next(free)
        members = ([self.controller_node] if self.controlled else []) + \
            [node.name for node in self.scenario.hosts]
        try:
            return {name: str(next(free)) for name in members}
        except StopIteration:
            raise ExportError(f"{self.scenario.source}: controller.management_subnet "
                              f"{self.settings.management_subnet} has too few addresses for "
                              f"{len(members)} containers and the gateway") from None

    # -- the document ----------------------------------------------------------------------

    def run(self) -> ContainerlabExport:
        links, host_side = self.links()
        nodes = {self.node_name(node): (self.switch(node) if node.is_switch else self.host(node))
                 for node in self.scenario.nodes.values()}
        if self.controlled:
            nodes = {self.controller_node: self.controller()} | nodes
        host_side += self.openflow_setup()
        if host_side:
            anchor = next(name for name, spec in nodes.items() if spec["kind"] == "linux")
            others = [name for name in nodes if name != anchor]
            nodes[anchor]["stages"] = {"configure": {
                "wait-for": [{"node": name, "stage": "create-links"} for name in others],
                "exec": [{"command": command, "target": "host", "phase": "on-enter"}
                         for command in host_side]}}
        self.note_unmapped()
        topology = {"name": self.scenario.name,
                    "mgmt": {"network": f"{self.scenario.name}-mgmt",
                             "ipv4-subnet": str(self.settings.management_subnet)},
                    "topology": {"kinds": {"linux": self.linux_defaults()}, "nodes": nodes,
                                 "links": links}}
        if not links:
            del topology["topology"]["links"]  # the schema wants at least one when present
        return ContainerlabExport(self.scenario.name, self.scenario.source, topology,
                                  self.bridge_setup(), self.unmapped)

    def linux_defaults(self) -> dict:
        env = {command_workload.RUN_DIR_VARIABLE: RUN_DIR}
        if self.controlled and self.settings.management:
            env["EDGEBED_CONTROLLER"] = (f"{self.management_addresses[self.controller_node]}:"
                                         f"{self.settings.control_port}")
        # NET_ADMIN for tc and addresses, NET_RAW for the agents' raw sockets and tcpdump.
        return {"image": self.image, "cap-add": ["NET_ADMIN", "NET_RAW"], "env": env}

    def labels(self, node: Node) -> dict[str, str]:
        labels = {"edgebed-role": node.role, "edgebed-name": node.name}
        labels |= {f"edgebed-label-{key}": str(value) for key, value in node.labels.items()
                   if str(value)}
        return labels

    def host(self, node: Node) -> dict:
        spec = {"kind": "linux", "mgmt-ipv4": self.management_addresses[node.name],
                "labels": self.labels(node), "binds": [f"{self.run_bind}:{RUN_DIR}"]}
        if node.env:
            spec["env"] = dict(node.env)
        commands = self.egress[node.name] + self.captures(node) + self.workload(node)
        if commands:
            spec["exec"] = commands
        return spec

    def switch(self, node: Node) -> dict:
        return {"kind": "ovs-bridge", "labels": self.labels(node)}

    def controller(self) -> dict:
        address = self.management_addresses[self.controller_node]
        command = ["python", "-m", "controller", "--scenario", SCENARIO_IN_CONTAINER,
                   "--out", f"{RUN_DIR}/controller", "--openflow-port", str(OPENFLOW_PORT)]
        if self.settings.management:
            command += ["--management-address", address]
        return {"kind": "linux", "mgmt-ipv4": address, "cmd": shlex.join(command),
                "labels": {"edgebed-role": "controller"},
                "binds": [f"{self.run_bind}:{RUN_DIR}",
                          f"{self.scenario_bind}:{SCENARIO_IN_CONTAINER}:ro"]}

    # -- links and impairments ---------------------------------------------------------------

    def links(self) -> tuple[list[dict], list[str]]:
        """The extended ``veth`` links, and the tc commands of impaired switch ends (host
        namespace)."""
        links, host_side = [], []
        for link in self.scenario.links:
            links.append({"type": "veth", "endpoints": [self.endpoint(end)
                                                        for end in link.endpoints()]})
            for direction, sender in zip(DIRECTIONS, link.endpoints()):
                impairment: Impairment = getattr(link, direction)
                if impairment.is_empty():
                    continue
                commands = netem_commands(self.interface(sender), impairment)
                if self.scenario.nodes[sender.node].is_switch:
                    host_side += commands
                else:
                    self.egress[sender.node].extend(commands)
        return links, host_side

    def endpoint(self, end: Endpoint) -> dict:
        node = self.scenario.nodes[end.node]
        endpoint = {"node": self.node_name(node), "interface": self.interface(end)}
        address = None if node.is_switch else node.interfaces.get(end.interface)
        if address is not None:
            endpoint |= {"mac": host_mac(address), "ipv4": str(address)}
        return endpoint

    # -- switches --------------------------------------------------------------------------

    def bridge_setup(self) -> list[str]:
        """``ovs-vsctl`` commands creating the bridges before deploy: datapath ids as in the
        scenario (the controller's view names switches by them), secure fail mode under the
        controller (no forwarding before its rules), standalone learning without one."""
        fail_mode = "secure" if self.controlled else "standalone"
        return [shlex.join(["ovs-vsctl", "--may-exist", "add-br", self.node_name(node), "--",
                            "set", "Bridge", self.node_name(node), f"fail-mode={fail_mode}",
                            "protocols=OpenFlow13",
                            f"other-config:datapath-id={node.dpid:016x}",
                            f"external-ids:edgebed-name={node.name}"])
                for node in self.scenario.switches]

    def openflow_setup(self) -> list[str]:
        """Once containerlab has added the ports: the OpenFlow port numbers the scenario
        assigned (the controller's rules use them), then the controller."""
        commands = []
        for node in self.scenario.switches:
            for interface, number in node.ports.items():
                port = self.interface(Endpoint(node.name, interface))
                commands.append(f"ovs-vsctl set Interface {port} ofport_request={number}")
        if self.controlled:
            target = f"tcp:{self.management_addresses[self.controller_node]}:{OPENFLOW_PORT}"
            commands += [f"ovs-vsctl set-controller {self.node_name(node)} {target}"
                         for node in self.scenario.switches]
        return commands

    # -- processes -------------------------------------------------------------------------

    def captures(self, node: Node) -> list[str]:
        return [background(tcpdump_command(interface, Path(RUN_DIR) / "pcap"
                                           / f"{node.name}-{interface}.pcap", capture.snaplen,
                                           capture.filter, capture.rotate_size,
                                           capture.rotate_files),
                           log=f"{RUN_DIR}/logs/{node.name}.log", start=0.0,
                           stop=self.scenario.duration)
                for capture in self.scenario.captures if capture.node == node.name
                for interface in capture.interfaces]

    @functools.cached_property
    def agent_commands(self) -> dict[str, list[str]]:
        """Per host, its agents' exec commands, numbered for seeds in the order edgebed run
        starts them (by start time, then file order), so a lab draws the same random numbers."""
        commands = {node.name: [] for node in self.scenario.hosts}
        count = 0
        for entry in sorted(self.scenario.workload, key=lambda entry: entry.start):
            if entry.start > self.scenario.duration:
                self.unmapped.append(f"workload {entry.agent} starts at {entry.start:g}s, "
                                     f"after the run's end ({self.scenario.duration:g}s): "
                                     "left out, as edgebed run skips it")
                continue
            for name in entry.nodes:
                count += entry.agent != command_workload.COMMAND  # as edgebed run counts
                commands[name].append(background(
                    self.argv(entry, name, self.scenario.seed * 1000 + count),
                    log=f"{RUN_DIR}/logs/{name}.log", start=entry.start,
                    stop=self.scenario.duration))
        return commands

    def workload(self, node: Node) -> list[str]:
        return self.agent_commands[node.name]

    def argv(self, entry, name: str, seed: int) -> list[str]:
        node = self.scenario.nodes[name]
        if entry.agent == command_workload.COMMAND:
            return command_workload.command_argv(entry.command, name, str(node.ip.ip) if node.ip else "",
                                        RUN_DIR)
        return catalog.agent_argv("python", entry.agent, name, RUN_DIR,
                                  self.scenario.agent_params(entry), seed)

    # -- what does not map -----------------------------------------------------------------

    def note_unmapped(self) -> None:
        document = self.scenario.document
        if self.scenario.schedule:
            actions = sorted({event.action for event in self.scenario.schedule})
            self.unmapped.append(
                f"schedule: {len(self.scenario.schedule)} timed events ({', '.join(actions)}); "
                "containerlab has no timed events: change links with `containerlab tools netem "
                "set` or `ip link set` while the lab runs")
        if document.controller.control_network == "in-band":
            self.unmapped.append("controller.control_network: in-band is edgebed run's: the "
                                 "lab's controller is a container of its own, so the control "
                                 "protocol travels containerlab's management network "
                                 "(out-of-band), untouched by the links' impairments")
        if document.emulation.impairments == "fallback":
            self.unmapped.append("emulation.impairments: fallback (tc rate and BPF loss, a "
                                 "user-space relay for delay and jitter) is edgebed's own; the "
                                 "lab uses netem on every impaired link, so the host's kernel "
                                 "needs sch_netem")
        if document.emulation.ovs_datapath == "user":
            self.unmapped.append("emulation.ovs_datapath: user (userspace OVS with offloads "
                                 "off) is not set: the bridges use whatever datapath the host's "
                                 "Open vSwitch runs")
        if self.scenario.workload:
            self.unmapped.append("workload outcomes: nothing watches the agents' exits (a "
                                 "crashed agent does not fail the lab); agents start from each "
                                 "container's post-deploy exec, so start times count from that "
                                 "container's deploy, not from one common start")
        self.unmapped.append("run record: reachability pings, fidelity checks, manifest and "
                             "summary are `edgebed run`'s; the agents' tables, logs and pcaps "
                             f"land in {self.run_bind}/ beside this file")


def netem_commands(interface: str, impairment: Impairment) -> list[str]:
    """The tc commands edgebed's netem backend runs for ``impairment`` on ``interface``."""
    return tc.shaping(interface, impairment.bw, impairment.queue,
                      leaf=tc.netem_spec(impairment))


def background(argv: list[str], log: str, start: float, stop: float) -> str:
    """An exec command that starts ``argv`` in the background ``start`` seconds from now and
    stops it (SIGTERM, as edgebed run does) at ``stop`` seconds, output appended to ``log``:
    containerlab waits for each exec command to return."""
    script = (f"mkdir -p {shlex.quote(str(Path(log).parent))} && (sleep {start:g}; exec timeout "
              f"--signal=TERM {max(stop - start, 0.001):g} {shlex.join(argv)}) "
              f">>{shlex.quote(log)} 2>&1 </dev/null &")
    return f"bash -c {shlex.quote(script)}"


# ECMA-262 Unicode property escapes: containerlab's schema writes interface zones in
# addresses as [\p{N}\p{L}]+, which Python's re lacks; [^\W_] is its letters and digits.
_ECMA_CLASSES = {r"[\p{N}\p{L}]": r"[^\W_]"}


def _pattern(validator, pattern: str, instance, schema):
    for ecma, python in _ECMA_CLASSES.items():
        pattern = pattern.replace(ecma, python)
    if validator.is_type(instance, "string") and not re.search(pattern, instance):
        import jsonschema

        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.lru_cache(maxsize=1)
def schema() -> dict:
    """containerlab's published schema (draft-07, every $ref within the file: no fetches)."""
    return json.loads(SCHEMA_PATH.read_text())


def validator():
    import jsonschema

    return jsonschema.validators.extend(jsonschema.Draft7Validator,
                                        {"pattern": _pattern})(schema())


def problems(topology: dict) -> list[str]:
    """Why ``topology`` is not a topology containerlab deploys (empty: none found): every
    violation of containerlab's JSON Schema (needs the ``jsonschema`` package), then what the
    schema cannot see: links to nodes that do not exist, an interface used twice, interface
    names past Linux's limit, stages waiting for missing nodes."""
    import jsonschema

    found = []
    for error in validator().iter_errors(topology):
        # under anyOf/oneOf, the alternative that got furthest says what is wrong
        error = jsonschema.exceptions.best_match(error.context) if error.context else error
        message = error.message if len(error.message) < 300 else error.message[:300] + " ..."
        found.append(f"{'/'.join(str(p) for p in error.absolute_path) or '(document)'}: "
                     f"{message}")
    nodes = (topology.get("topology") or {}).get("nodes") or {}
    used: set[tuple[str, str]] = set()
    for index, link in enumerate((topology.get("topology") or {}).get("links") or []):
        for end in link.get("endpoints", []):
            node, interface = ((end.get("node"), end.get("interface")) if isinstance(end, dict)
                               else tuple(str(end).partition(":")[::2]))
            where = f"topology/links/{index}"
            if node not in nodes:
                found.append(f"{where}: endpoint names node {node!r}, which is not in "
                             "topology.nodes")
            if (node, interface) in used:
                found.append(f"{where}: {node}:{interface} is already an end of another link")
            used.add((node, interface))
            if not interface or len(interface) > LINUX_IFNAMSIZ:
                found.append(f"{where}: interface {interface!r} is not a Linux interface name "
                             f"(1 to {LINUX_IFNAMSIZ} characters)")
    for name, spec in nodes.items():
        for stage in ((spec or {}).get("stages") or {}).values():
            for wait in stage.get("wait-for", []):
                if wait.get("node") not in nodes:
                    found.append(f"topology/nodes/{name}/stages: waits for node "
                                 f"{wait.get('node')!r}, which is not in topology.nodes")
    return found
