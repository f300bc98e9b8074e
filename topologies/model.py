"""The scenario file's schema: what may be written, in which unit, with which bounds."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer,
                      WithJsonSchema, field_validator, model_validator)

from edgebed import units
from edgebed.quantities import Duration, Fraction, PositiveDuration, Rate, Size

SAFE_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"
# Node names may carry a range, ``viewer[1-40]``, expanded into viewer1 ... viewer40.
NODE_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,31}(\[\d+-\d+\])?$"


SWITCH = "switch"  # the one role this layer knows: a host's roles are the agents' (Plugins)

# A node's role: ``switch``, or one the agents declare (``AgentCatalog.roles``); the published
# schema lists them under ``$defs/Role``, put where this marker is.
ROLE_MARK = {"type": "string", "x-role": True}
RoleName = Annotated[str, WithJsonSchema(ROLE_MARK)]


def _parse_dpid(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("a datapath id is an integer or a hex string such as '0x1a'")
    if isinstance(value, str):
        text = value.strip().lower().replace(":", "")
        try:
            value = int(text, 16) if text.startswith("0x") or re.fullmatch(r"[0-9a-f]{16}", text) \
                else int(text)
        except ValueError:
            raise ValueError(f"bad datapath id {value!r}: write 12, '0x0c' or "
                             "'00:00:00:00:00:00:00:0c'") from None
    if not isinstance(value, int) or not 0 < value < 2**64:
        raise ValueError(f"a datapath id must be between 1 and 2^64-1, got {value!r}")
    return value


Dpid = Annotated[int, BeforeValidator(_parse_dpid), PlainSerializer(lambda v: f"0x{v:016x}"),
                 WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1},
                                           {"type": "string"}],
                                 "description": "OpenFlow datapath id: 12, '0x0c' or "
                                                "'00:00:00:00:00:00:00:0c'"})]


class StrictModel(BaseModel):
    """Base for every scenario section: unknown keys are errors, never ignored."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class NodeSettings(StrictModel):
    """Settings a node inherits: from ``defaults``, then its kind, then its group."""

    role: Optional[RoleName] = Field(None, description="what the node is; hosts need one, "
                                                       "switches are role 'switch'")
    labels: dict[str, Union[str, int, float, bool]] = Field(
        default_factory=dict, description="free key/values for policies and agents (merged)")
    env: dict[str, str] = Field(default_factory=dict,
                                description="environment for processes started on the node (merged)")
    # 0.001 core is 1 ms a second: the kernel's smallest quota in its longest period.
    cpu: Optional[float] = Field(None, ge=0.001, le=1024,
                                 description="hosts only: CPU time the host's processes may use "
                                             "together, in cores of this machine (0.5: half of "
                                             "one core), enforced with a cgroup; default: no "
                                             "limit")


class InheritableNodeSettings(NodeSettings):
    """Defaults and groups may also choose the node's kind."""

    kind: Optional[str] = Field(None, pattern=SAFE_NAME, description="a key of topology.kinds")


class NodeSpec(InheritableNodeSettings):
    """One node, or a range of them when the name ends in ``[first-last]``."""

    group: Optional[str] = Field(None, pattern=SAFE_NAME, description="a key of topology.groups")
    ip: Optional[ipaddress.IPv4Interface] = Field(
        None, description="address with prefix for the node's first interface, e.g. 10.0.1.5/16; "
                          "default: the next free address of topology.subnet")
    dpid: Optional[Dpid] = Field(None, description="switches only; default: 1, 2, ... in file order")


class BurstLoss(StrictModel):
    """Gilbert–Elliott loss: a two-state Markov chain (good, bad) evaluated per packet, as
    netem's ``loss gemodel p r 1-h 1-k``. Mean loss is p/(p+r)·bad_loss + r/(p+r)·good_loss;
    a burst lasts 1/r packets on average."""

    p: Fraction = Field(description="probability of going from good to bad, per packet")
    r: Fraction = Field(description="probability of going from bad to good, per packet")
    bad_loss: Fraction = Field(1.0, description="loss while bad (netem 1-h)")
    good_loss: Fraction = Field(0.0, description="loss while good (netem 1-k)")

    def __bool__(self) -> bool:
        """A chain that never leaves the good state loses nothing: ``p: 0`` clears it."""
        return self.p > 0


Distribution = Literal["normal", "uniform", "pareto", "paretonormal"]


class WireImpairment(StrictModel):
    """What one direction of a link does to packets besides its rate: the part a link's wire
    (the user-space delay relay, :mod:`topologies.impairments.wire`) can do itself, so that the
    relay validates its configuration with these very fields, units and bounds."""

    delay: Optional[Duration] = Field(None, description="one-way delay, e.g. 20ms")
    jitter: Optional[Duration] = Field(None, description="standard deviation of the delay, e.g. 5ms")
    distribution: Optional[Distribution] = Field(
        None, description="shape of the delay variation (default normal)")
    reorder: Optional[bool] = Field(
        None, description="let jitter reorder packets, as netem does (default true); "
                          "false: a packet never overtakes the one before it")
    loss: Optional[Fraction] = Field(None, description="independent random loss, e.g. 1.5%")
    burst: Optional[BurstLoss] = Field(None, description="Gilbert–Elliott burst loss "
                                                         "(instead of loss)")


class Impairment(WireImpairment):
    """What one direction of a link does to packets. An unset field means "nothing"; 0 (or
    ``0ms``, ``0%``) clears a value at run time."""

    bw: Optional[Rate] = Field(None, description="rate limit at layer 2 (Ethernet frames), "
                                                 "e.g. 50Mbps; 0: unlimited")
    queue: Optional[int] = Field(None, ge=1, le=1_000_000,
                                 description="queue limit in packets (with bw)")

    def is_empty(self) -> bool:
        return all(not getattr(self, name) for name in Impairment.model_fields)

    def describe(self) -> str:
        """The fields set, as ``impair`` takes them: ``delay=20ms loss=1%``; "none"."""
        formats = {"bw": units.format_rate, "delay": units.format_duration,
                   "jitter": units.format_duration, "loss": units.format_fraction}
        words = []
        for name, value in self.model_dump(exclude_none=True).items():
            if name == "burst":
                value = "{" + ", ".join(f"{key}: {units.format_fraction(number)}"
                                        for key, number in value.items()) + "}"
            elif name in formats:
                value = formats[name](value)
            words.append(f"{name}={str(value).lower() if isinstance(value, bool) else value}")
        return " ".join(words) or "none"

    def merged(self, changes: "Impairment") -> "Impairment":
        """This impairment with the fields ``changes`` sets replaced."""
        return Impairment.model_validate(
            self.model_dump(exclude_none=True)
            | changes.model_dump(exclude_unset=True, exclude_none=True))


class LinkSpec(Impairment):
    """A point-to-point link; impairments written on the link apply in both directions,
    ``forward`` (first endpoint to second) and ``reverse`` override per direction."""

    endpoints: list[str] = Field(min_length=2, max_length=2,
                                 description='["node:interface", "node:interface"]')
    forward: Optional[Impairment] = Field(None, description="first endpoint -> second")
    reverse: Optional[Impairment] = Field(None, description="second endpoint -> first")


class Topology(StrictModel):
    """Nodes and links, with settings shared through defaults, kinds and groups."""

    subnet: ipaddress.IPv4Network = Field(ipaddress.IPv4Network("10.0.0.0/16"),
                                          description="addresses for hosts that set no ip")
    defaults: InheritableNodeSettings = Field(default_factory=InheritableNodeSettings)
    kinds: dict[str, NodeSettings] = Field(default_factory=dict)
    groups: dict[str, InheritableNodeSettings] = Field(default_factory=dict)
    nodes: dict[str, NodeSpec] = Field(min_length=1)
    links: list[LinkSpec] = Field(default_factory=list)

    @field_validator("subnet", mode="before")
    @classmethod
    def _strict_subnet(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                ipaddress.IPv4Network(value)
            except ValueError as error:
                raise ValueError(f"bad subnet {value!r}: {error}") from None
        return value


class Service(StrictModel):
    """A service address (virtual IP) backed by several servers. The controller steers each
    client flow to the server its policy chose, rewriting addresses both ways, so clients only
    ever see the service address."""

    address: ipaddress.IPv4Address = Field(description="the virtual IP clients send to; "
                                                       "no host may have it")
    servers: list[str] = Field(min_length=1, description="the hosts behind the address: names, "
                                                         "ranges, or role:/kind:/group: selectors")
    protocol: Literal["udp", "tcp"] = Field("udp", description="transport the service uses")
    port: Optional[int] = Field(None, ge=1, le=65535,
                                description="the service's port; default: every port")
    demand: float = Field(0.0, ge=0, description="what one flow asks of a server, in the "
                                                 "unit of the servers' capacity (flows that "
                                                 "join over the control protocol may say)")
    capacity_label: str = Field("capacity", pattern=SAFE_NAME,
                                description="the server label holding its capacity (a number "
                                            "or a rate such as 40Mbps); no label: unlimited")


NO_APP, EDGEBED_APP = "none", "edgebed"
EDGEBED_APP_MODULE = "controller.app"  # the module os-ken loads for edgebed


class Controller(StrictModel):
    """Which controller apps run the switches; ``none`` leaves them standalone learning
    switches, ``edgebed`` runs edgebed's SDN controller (:mod:`controller.app`), anything else
    is a user's Ryu-API app, run on os-ken in the same controller process. ``remote`` points
    the switches at a controller edgebed does not start."""

    app: Union[str, list[str]] = Field(
        NO_APP, description="'none': standalone switches; 'edgebed': the SDN controller "
                            "(shortest-path forwarding, ARP, services, policies, failover); a "
                            "Ryu-API app as a Python file (relative to the scenario) or a "
                            "module name; or a list of apps run together, e.g. "
                            "[edgebed, monitor.py]")
    remote: Union[str, list[str]] = Field(
        default_factory=list, description="a controller edgebed does not start, as "
                                          "tcp:HOST:PORT (or a list of them, every switch "
                                          "connecting to each): the run waits until every "
                                          "switch is connected; app stays none")
    policy: str = Field("least_loaded", description="the scheduling policy placing service "
                                                    "flows (see `edgebed policies`)")
    policy_params: dict[str, Any] = Field(default_factory=dict,
                                          description="the policy's parameters")
    services: dict[str, Service] = Field(default_factory=dict,
                                         description="virtual IPs the controller steers")
    period: Optional[PositiveDuration] = Field(
        None, description="re-decide every placed flow this often (policies that work in "
                          "periods, such as live_edge's); default: flows stay where placed")
    fast_failover: bool = Field(True, description="pre-install OpenFlow fast-failover backups "
                                                  "where a loop-free alternate exists; false: "
                                                  "reroute only when the controller hears of "
                                                  "the failure")
    control_network: Literal["out-of-band", "in-band"] = Field(
        "out-of-band", description="where the control protocol (joins, decisions, load "
                                   "reports) travels: 'out-of-band' on the management network, "
                                   "untouched by impairments; 'in-band' on the data network, "
                                   "through the switches and impaired links to control_host's "
                                   "address (OpenFlow stays out-of-band either way)")
    control_host: Optional[str] = Field(
        None, pattern=SAFE_NAME, description="in-band only: the host whose data-plane "
                                             "address the controller's control protocol "
                                             "listens on (where the controller sits in the "
                                             "data network)")
    management: bool = Field(True, description="an out-of-band management network from "
                                               "every host to the controller, for the control "
                                               "protocol (control traffic never shares data "
                                               "links); not built for in-band control")
    management_subnet: ipaddress.IPv4Network = Field(
        ipaddress.IPv4Network("172.30.0.0/16"),
        description="addresses of the management network; the controller is the first")
    control_port: int = Field(6650, ge=1, le=65535,
                              description="UDP port of the control protocol")

    @property
    def apps(self) -> list[str]:
        """The apps the controller process runs, in order; empty for ``none``."""
        apps = [self.app] if isinstance(self.app, str) else list(self.app)
        return [] if apps == [NO_APP] else apps

    @property
    def remotes(self) -> list[str]:
        """The remote controllers' targets (``tcp:HOST:PORT``); empty when edgebed starts the
        controller or there is none."""
        return [self.remote] if isinstance(self.remote, str) else list(self.remote)

    @property
    def controls_switches(self) -> bool:
        """Whether a controller (started by edgebed or remote) runs the switches."""
        return bool(self.apps or self.remotes)

    @property
    def runs_edgebed(self) -> bool:
        """Whether edgebed's own app (policies, services, the control protocol) runs."""
        return EDGEBED_APP in self.apps

    @property
    def user_apps(self) -> list[str]:
        return [app for app in self.apps if app != EDGEBED_APP]

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"app": value} if isinstance(value, str) else value

    @property
    def builds_management(self) -> bool:
        """Whether runs build the management network: asked for, and the control protocol
        travels out-of-band (in-band it crosses the data network instead)."""
        return self.management and self.control_network == "out-of-band"


class EmulatorLossLimit(StrictModel):
    """How much loss the emulator itself may make on a link direction (frames its relays,
    queues and interfaces dropped that no setting asked for) before the run's fidelity verdict
    marks it invalid: the larger of ``relative`` times the loss configured there and
    ``absolute`` of the frames offered."""

    relative: float = Field(0.1, ge=0, le=1000,
                            description="allowed as a multiple of the configured loss")
    absolute: Fraction = Field(0.001, description="allowed as a fraction of the frames, "
                                                  "whatever the configured loss, e.g. 0.1%")


class Emulation(StrictModel):
    """How the emulation runs on this kernel."""

    ovs_datapath: Literal["auto", "kernel", "user"] = Field(
        "auto", description="auto: kernel datapath when the openvswitch module loads, else userspace")
    userspace_ports: Literal["packet_socket", "af_xdp"] = Field(
        "packet_socket",
        description="how the userspace datapath reads its ports: packet_socket (ovs-vswitchd's "
                    "main loop wakes for every burst and reads every port) or af_xdp (AF_XDP "
                    "sockets read by a polling thread that sleeps up to 100 us when idle: less "
                    "CPU per frame at video rates, a tenth of a core when idle, 82 MiB of locked "
                    "memory per port); ignored on the kernel datapath")
    impairments: Literal["auto", "netem", "fallback"] = Field(
        "auto", description="auto: netem where the kernel has sch_netem, else the fallback "
                            "(tc rate and loss, a user-space relay for delay and jitter)")
    emulator_loss: EmulatorLossLimit = Field(
        default_factory=EmulatorLossLimit,
        description="emulator-made loss beyond which the fidelity verdict marks a run invalid")


class WorkloadEntry(StrictModel):
    """An agent started on some nodes when the run starts."""

    agent: str = Field(description="'command' (run a program) or a traffic agent: streamer, "
                                   "camera, viewer, chat_collector, edge_forwarder, ai_terminal, "
                                   "ai_receiver, request_client, request_server, iperf")
    nodes: list[str] = Field(min_length=1, description="host names, ranges, or role:NAME, "
                                                       "kind:NAME, group:NAME selectors")
    command: Optional[Union[str, list[str]]] = Field(
        None, description="agent command only: program and arguments; {node}, {ip} and "
                          "{run_dir} are replaced per node ({{ and }} for literal braces); "
                          "the program also finds its run directory in $EDGEBED_RUN_DIR")
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="the agent's parameters (see `edgebed agents NAME`)")
    start: Duration = Field(0.0, description="delay after the network is up")
    may_fail: bool = Field(False, description="a non-zero exit of this workload does not fail "
                                              "the run (it is still reported)")


class CaptureSpec(StrictModel):
    """Packet capture with tcpdump inside the nodes' namespaces, from the start of the run."""

    nodes: list[str] = Field(min_length=1, description="host names, ranges, or role:NAME, "
                                                       "kind:NAME, group:NAME selectors")
    interfaces: list[str] = Field(default_factory=list, description="default: all of the node's")
    filter: str = Field("", description="pcap filter expression, e.g. 'udp port 5004'")
    snaplen: int = Field(262144, ge=64, le=262144, description="bytes kept per packet")
    rotate_size: Optional[Size] = Field(None, description="start a new file after this size "
                                                          "(whole MB, at least 1MB)")
    rotate_files: Optional[int] = Field(None, ge=1, le=1000,
                                        description="with rotate_size: keep at most this many files")

    @model_validator(mode="after")
    def _rotation(self) -> "CaptureSpec":
        if self.rotate_files is not None and self.rotate_size is None:
            raise ValueError("rotate_files needs rotate_size (files rotate when they reach it)")
        if self.rotate_size is not None and self.rotate_size < 1e6:
            raise ValueError("rotate_size is at least 1MB (tcpdump rotates in whole megabytes)")
        return self


class ScheduledEvent(StrictModel):
    """Something that happens to a link or node at a time after the network is up."""

    at: Duration = Field(description="time after start, e.g. 5s")
    action: Literal["link_down", "link_up", "node_down", "node_up", "node_stall", "node_resume",
                    "set", "controller_down", "controller_up"] = Field(
        description="link_down/link_up: both ends lose/regain carrier; node_down/node_up: every "
                    "link of the node; node_stall/node_resume: a host's programs stop (SIGSTOP: "
                    "its CPU starved, its links and kernel still up) and continue; set: change "
                    "the link's impairments; controller_down: the controller dies (SIGKILL; "
                    "switches keep their flows); controller_up: a new controller starts and "
                    "takes over")
    link: Optional[str] = Field(None, description="the link, named by one of its endpoints: "
                                                  "'node:interface' (link_* and set)")
    node: Optional[str] = Field(None, description="the node (node_down, node_up, node_stall, "
                                                  "node_resume)")
    direction: Literal["both", "forward", "reverse"] = Field(
        "both", description="set: which direction; forward is the link's first endpoint to its "
                            "second")
    set: Optional[Impairment] = Field(None, description="set: the fields to change; 0 clears")

    @model_validator(mode="after")
    def _target_matches_action(self) -> "ScheduledEvent":
        wants_node = self.action.startswith("node_")
        if self.action.startswith("controller_"):
            if self.node is not None or self.link is not None:
                raise ValueError(f"{self.action} names no link or node")
        elif wants_node and (self.node is None or self.link is not None):
            raise ValueError(f"{self.action} names a node: write node: NAME (and no link)")
        elif not wants_node and (self.link is None or self.node is not None):
            raise ValueError(f"{self.action} names a link by an endpoint: write link: "
                             "\"node:interface\" (and no node)")
        if (self.action == "set") != (self.set is not None):
            raise ValueError("action set needs set: {...} with the fields to change" if
                             self.action == "set" else f"{self.action} takes no set: block")
        return self


class ScenarioDocument(StrictModel):
    """A whole scenario file as written."""

    name: str = Field(pattern=SAFE_NAME, description="scenario name; used in run directory names")
    description: str = ""
    seed: int = Field(1, ge=0, lt=2**32, description="seed for every random choice of the run")
    duration: PositiveDuration = Field(10.0, description="how long the run lasts, e.g. 30s")
    time_dilation: float = Field(
        1.0, ge=1, le=1000,
        description="time dilation factor N: the run's clock passes N times slower than real "
                    "time, so the emulated machine is N times faster; durations, rates and "
                    "delays stay as written, in virtual time")
    topology: Topology
    controller: Controller = Field(default_factory=Controller)
    emulation: Emulation = Field(default_factory=Emulation)
    workload: list[WorkloadEntry] = Field(default_factory=list)
    capture: list[CaptureSpec] = Field(default_factory=list)
    schedule: list[ScheduledEvent] = Field(default_factory=list)
