"""A live Mininet network built from a resolved :class:`~topologies.scenario.Scenario`."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

from mininet.link import Link
from mininet.net import Mininet
from mininet.node import Host, OVSSwitch

from edgebed import clock

from . import ovs_listing, switch_sockets
from .cpu_limits import CpuLimit, CpuLimitedHost
from .impairments.relay import WIRE_TOWARD_A, WIRE_TOWARD_B
from .naming import MANAGEMENT_INTERFACE, RunNames, host_mac
from .scenario import Endpoint, Node, Scenario


def switch_port_mac(switch_index: int, port: int) -> str:
    """Switch ports get MACs from their place in the topology, stable from run to run."""
    return "06:eb:" + ":".join(f"{byte:02x}" for byte in
                               (switch_index >> 8, switch_index & 0xff, port >> 8, port & 0xff))


def wire_mac(link_index: int, side: int) -> str:
    return "0a:eb:" + ":".join(f"{byte:02x}" for byte in
                               (link_index >> 8, link_index & 0xff, 0, side))


# OVS's AF_XDP port locks a UMEM of 16,384 frames of 4 KiB and its rings per receive queue
# (measured: 82 MiB of ovs-vswitchd's locked memory per port).
AF_XDP_PORT_MEMORY = 82 * 2**20
# The longest the polling thread sleeps after polls that found little: a frame arriving while it
# sleeps waits at most this long in the switch.
PMD_MAX_SLEEP_US = 100
XSK_RECEIVE_DROPS = re.compile(r"xsk_queue_\d+_rx_dropped")


class AfXdpSwitch(OVSSwitch):
    """An Open vSwitch bridge of the userspace datapath whose ports are AF_XDP sockets, read by
    a polling thread (PMD) rather than by ovs-vswitchd's main loop. Generic XDP: a veth has no
    zero-copy mode."""

    def intfOpts(self, intf):
        return super().intfOpts(intf) + " type=afxdp options:xdp-mode=generic"


def af_xdp_receive_drops(statistics: dict[str, int]) -> int:
    """Frames an AF_XDP port's receive rings had no room for, from its interface statistics."""
    return sum(count for key, count in statistics.items() if XSK_RECEIVE_DROPS.fullmatch(key))


def available_memory() -> int:
    """Bytes the kernel could give now (``MemAvailable``)."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable")


@dataclass
class LinkEnds:
    """A link as built: the Mininet interfaces at its two endpoints and, for a wired link, the
    wire host between them (``a <-> wa [wire] wb <-> b``)."""

    a: object  # mininet.link.Intf at the first endpoint
    b: object  # mininet.link.Intf at the second endpoint
    wire: Host | None = None


@dataclass
class Timings:
    build_s: float = 0.0
    start_s: float = 0.0
    stop_s: float = 0.0


@dataclass
class ScenarioNetwork:
    """The network of one run.

    ``datapath`` is ``"kernel"`` or ``"user"`` (OVS userspace datapath, for kernels without the
    openvswitch module); with the userspace datapath host checksum offloads are turned off,
    because frames leave a veth through OVS with their checksums unfinished, and
    ``userspace_ports`` says how OVS reads its ports: ``"packet_socket"`` (a socket per port,
    given room for bursts, :mod:`.switch_sockets`) or ``"af_xdp"`` (:class:`AfXdpSwitch`).
    Links in ``wired`` get a wire namespace spliced in (see :mod:`topologies.impairments`).
    """

    scenario: Scenario
    names: RunNames
    datapath: str
    wired: frozenset[int] = frozenset()
    userspace_ports: str = "packet_socket"
    net: Mininet | None = None
    timings: Timings = field(default_factory=Timings)
    _switch_index: dict[str, int] = field(default_factory=dict)
    _links: dict[int, LinkEnds] = field(default_factory=dict)
    management: "Management | None" = None
    # Userspace datapath: switch ports whose receive socket kept the kernel's default buffer.
    small_switch_sockets: list[str] = field(default_factory=list)
    cpu_limits: dict[str, CpuLimit] = field(default_factory=dict)  # host -> its cgroup

    def start(self) -> None:
        started = clock.real_elapsed()
        machine = os.cpu_count() or 1
        too_large = [f"{node.name} ({node.cpu:g})" for node in self.scenario.hosts
                     if node.cpu is not None and node.cpu > machine]
        if too_large:
            raise RuntimeError(f"cpu limits above this machine's {machine} cores: "
                               f"{', '.join(too_large)}")
        if self.af_xdp:
            self._check_af_xdp_memory()
        self.net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False,
                           autoStaticArp=False, waitConnected=False)
        for node in self.scenario.hosts:
            if node.cpu is None:
                self.net.addHost(node.name, cls=Host, ip=str(node.ip) if node.ip else None)
                continue
            # Cores of virtual time: a virtual second lasts ``dilation`` real ones.
            limit = CpuLimit(self.names.cgroup(node.name), node.cpu / clock.current().dilation)
            self.cpu_limits[node.name] = limit
            self.net.addHost(node.name, cls=CpuLimitedHost, limit=limit,
                             ip=str(node.ip) if node.ip else None)
        standalone = not self.scenario.document.controller.controls_switches
        for index, node in enumerate(self.scenario.switches):
            self._switch_index[node.name] = index
            self.net.addSwitch(self.names.bridge(index),
                               cls=AfXdpSwitch if self.af_xdp else OVSSwitch,
                               dpid=f"{node.dpid:016x}", failMode="standalone" if standalone else "secure",
                               datapath=self.datapath, batch=True, protocols="OpenFlow13")
        for link in self.scenario.links:
            self._links[link.index] = self._add_link(link.index, link.a, link.b)
        controller = self.scenario.document.controller
        managed = controller.runs_edgebed and controller.builds_management
        if managed:
            self.net.addHost(self.names.controller_namespace(), cls=Host, ip=None)
        self.net.build()
        self._configure_hosts()
        if standalone:
            self._pin_neighbours()
        self._configure_wires()
        if managed:
            self.management = Management.build(self, controller.management_subnet)
        self.timings.build_s = clock.real_elapsed() - started
        started = clock.real_elapsed()
        if self.af_xdp:
            subprocess.run(["ovs-vsctl", "--timeout=10", "set", "Open_vSwitch", ".",
                            f"other_config:pmd-maxsleep={PMD_MAX_SLEEP_US}"],
                           check=True, capture_output=True, text=True)
        self.net.start()
        self._label_bridges()
        if self.af_xdp:
            self._check_af_xdp_ports()
        elif self.datapath == "user":
            self.small_switch_sockets = switch_sockets.enlarge(self.switch_ports())
        self.timings.start_s = clock.real_elapsed() - started

    @property
    def af_xdp(self) -> bool:
        return self.datapath == "user" and self.userspace_ports == "af_xdp"

    def _switch_port_count(self) -> int:
        return sum(self.scenario.nodes[end.node].is_switch
                   for link in self.scenario.links for end in link.endpoints())

    def _check_af_xdp_memory(self) -> None:
        """Refuse, before building anything, AF_XDP ports whose locked memory would take more
        than three quarters of what the machine has available."""
        ports, available = self._switch_port_count(), available_memory()
        needed = ports * AF_XDP_PORT_MEMORY
        if needed > 0.75 * available:
            raise RuntimeError(
                f"{self.scenario.source}: emulation.userspace_ports: af_xdp locks "
                f"{AF_XDP_PORT_MEMORY >> 20} MiB per switch port, {needed >> 20} MiB for this "
                f"scenario's {ports} ports, more than three quarters of the "
                f"{available >> 20} MiB available; use packet_socket")

    def _check_af_xdp_ports(self) -> None:
        """Every switch port of the run is an AF_XDP port that Open vSwitch opened."""
        rows = {row["name"]: row for row in _ovs_table("Interface", "name,type,error")}
        failed = []
        for name in self.switch_ports():
            row = rows.get(name, {})
            # An unset error column lists as an empty set; a set one is its message.
            error = row.get("error") if isinstance(row.get("error"), str) else None
            if row.get("type") != "afxdp" or error:
                failed.append(f"{name} ({row.get('type') or 'absent'}"
                              + (f": {error}" if error else "") + ")")
        if failed:
            raise RuntimeError(f"Open vSwitch did not open {len(failed)} AF_XDP port(s): "
                               + ", ".join(failed[:5]))

    def _end_params(self, end: Endpoint, side: str) -> dict:
        """Mininet link parameters for one endpoint: name, MAC and, on switches, the port."""
        node = self.scenario.nodes[end.node]
        if node.is_switch:
            index = self._switch_index[node.name]
            port = node.ports[end.interface]
            return {f"port{side}": port, f"intfName{side}": self.names.port(index, port),
                    f"addr{side}": switch_port_mac(index, port)}
        return {f"intfName{side}": end.interface,
                f"addr{side}": host_mac(node.interfaces[end.interface])}

    def _add_link(self, index: int, a: Endpoint, b: Endpoint) -> LinkEnds:
        node_a, node_b = self.mininet_node(a.node), self.mininet_node(b.node)
        if index not in self.wired:
            link = self.net.addLink(node_a, node_b, cls=Link, **self._end_params(a, "1"),
                                    **self._end_params(b, "2"))
            return LinkEnds(link.intf1, link.intf2)
        wire = self.net.addHost(self.names.wire(index), cls=Host, ip=None)
        toward_a = self.net.addLink(node_a, wire, cls=Link, **self._end_params(a, "1"),
                                    intfName2=WIRE_TOWARD_A, addr2=wire_mac(index, 1))
        toward_b = self.net.addLink(wire, node_b, cls=Link, intfName1=WIRE_TOWARD_B,
                                    addr1=wire_mac(index, 2), **self._end_params(b, "2"))
        return LinkEnds(toward_a.intf1, toward_b.intf2, wire)

    def _configure_wires(self) -> None:
        """Wires carry frames, never send their own: no IPv6 (no router or neighbour
        solicitations), no offloads (the relay must see frames as they are on the wire)."""
        busy = []
        for ends in self._links.values():
            if ends.wire is not None:
                ends.wire.sendCmd(
                    "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 "
                    "net.ipv6.conf.default.disable_ipv6=1 >/dev/null; "
                    + "; ".join(f"ip -6 addr flush dev {name}; "
                                f"ethtool -K {name} tx off rx off >/dev/null 2>&1"
                                for name in (WIRE_TOWARD_A, WIRE_TOWARD_B)))
                busy.append(ends.wire)
        for wire in busy:
            wire.waitOutput()

    def _configure_hosts(self) -> None:
        """Addresses on every host interface (Mininet only sets the first) and offloads.

        Commands go to all host shells first and are collected afterwards, so the hosts
        configure themselves in parallel rather than one round trip after another."""
        busy = []
        for node in self.scenario.hosts:
            host = self.net[node.name]
            commands = [f"ip addr flush dev {name} && ip addr add {address} dev {name}"
                        for name, address in node.interfaces.items()
                        if address is not None and address != node.ip]
            if self.datapath == "user":
                commands += [f"ethtool -K {name} tx off rx off >/dev/null 2>&1"
                             for name in node.interfaces]
            if commands:
                host.sendCmd(" ; ".join(commands))
                busy.append(host)
        for host in busy:
            host.waitOutput()

    def _pin_neighbours(self) -> None:
        """Every host knows the MAC of every other host address in its interfaces' subnets
        (permanent neighbour entries), as edgebed's controller answers ARP for them when it
        runs. Without either, a standalone (learning) switch floods each ARP request to every
        port: 200 hosts starting at once sent requests that a userspace switch of 201 ports
        copied to all of them, fell seconds behind, and the senders' kernels dropped their
        queued datagrams when resolution failed, with no error to the sender and nothing on a
        link. Host MACs follow from their addresses (:func:`host_mac`), so the entries are
        what ARP would have found."""
        addresses = [address for node in self.scenario.hosts
                     for address in node.interfaces.values() if address is not None]
        busy = []
        for node in self.scenario.hosts:
            lines = [f"neigh replace {peer.ip} lladdr {host_mac(peer)} dev {name} nud permanent"
                     for name, address in node.interfaces.items() if address is not None
                     for peer in addresses
                     if peer.network == address.network and peer.ip != address.ip]
            if lines:
                process = self.net[node.name].popen(
                    ["ip", "-batch", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)
                process.stdin.write("\n".join(lines) + "\n")
                process.stdin.close()
                busy.append((node.name, process))
        for name, process in busy:
            errors = process.stderr.read()
            process.stdout.read()
            if process.wait() != 0:
                raise RuntimeError(f"static neighbours on {name} failed: {errors.strip()}")

    def _label_bridges(self) -> None:
        """Record scenario names and the run prefix on the OVS bridges, for people and clean."""
        commands = []
        for node in self.scenario.switches:
            bridge = self.names.bridge(self._switch_index[node.name])
            commands.append(f"-- set Bridge {bridge} external_ids:edgebed-name={node.name} "
                            f"external_ids:edgebed-run={self.names.prefix}")
        if commands:
            self.net.switches[0].cmd("ovs-vsctl " + " ".join(commands))

    def switch_ports(self) -> list[str]:
        """Every switch port of the run: the switch side of its links."""
        return [intf.name for ends in self._links.values() for intf in (ends.a, ends.b)
                if isinstance(intf.node, OVSSwitch)]

    def host_counters(self) -> dict[str, dict]:
        """Per host, where its own kernel dropped datagrams: the UDP counters of its namespace
        (``/proc/net/snmp``: ``RcvbufErrors``, ``SndbufErrors``, ``NoPorts``, ``InErrors``)
        and its neighbour entries that never resolved (``unresolved_neighbours``: the datagrams
        queued for them were dropped, silently to the sender)."""
        started = {node.name: self.net[node.name].popen(
            ["sh", "-c", "cat /proc/net/snmp; echo; ip neigh show"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True) for node in self.scenario.hosts}
        counters = {}
        for name, process in started.items():
            output, errors = process.communicate()
            if process.returncode != 0:
                raise RuntimeError(f"counters of {name}: {errors.strip()}")
            udp = [line.split()[1:] for line in output.splitlines() if line.startswith("Udp:")]
            found = dict(zip(udp[0], map(int, udp[1]))) if len(udp) == 2 else {}
            counters[name] = {key: found.get(key, 0) for key in
                              ("RcvbufErrors", "SndbufErrors", "NoPorts", "InErrors")}
            counters[name]["unresolved_neighbours"] = sum(
                1 for line in output.splitlines() if line.endswith(("FAILED", "INCOMPLETE")))
        return counters

    def switch_receive_drops(self) -> dict[str, int]:
        """Per switch port of the run (by interface), the frames the userspace switch had no
        room to receive: its packet socket's drops, or its AF_XDP rings'. The kernel datapath
        has neither."""
        if self.af_xdp:
            statistics = {row["name"]: dict(row["statistics"][1])
                          for row in _ovs_table("Interface", "name,statistics")}
            return {name: af_xdp_receive_drops(statistics.get(name, {}))
                    for name in self.switch_ports()}
        if self.datapath == "user":
            return {name: found.drops for name, found in switch_sockets.read().items()}
        return {}

    def switch_port_drops(self) -> dict[str, dict]:
        """Per switch port of the run (by its scenario name, ``s1:eth2``), the frames Open
        vSwitch dropped there: ``rx_dropped``, ``tx_dropped`` from its interface statistics."""
        statistics = {row["name"]: dict(row["statistics"][1])
                      for row in _ovs_table("Interface", "name,statistics")}
        drops = {}
        for link in self.scenario.links:
            for end, intf in zip(link.endpoints(), (self._links[link.index].a,
                                                    self._links[link.index].b)):
                if self.scenario.nodes[end.node].is_switch:
                    found = statistics.get(intf.name, {})
                    drops[str(end)] = {key: found.get(key, 0)
                                       for key in ("rx_dropped", "tx_dropped")}
        return drops

    def mininet_node(self, name: str):
        """The Mininet node for a scenario node name (switches are named by their bridge)."""
        if name in self._switch_index:
            return self.net[self.names.bridge(self._switch_index[name])]
        return self.net[name]

    def bridge_of(self, node: Node) -> str:
        return self.names.bridge(self._switch_index[node.name])

    def ends(self, link_index: int) -> LinkEnds:
        return self._links[link_index]

    def set_link_state(self, link_index: int, up: bool) -> None:
        """Take a link down (both ends, so both sides see carrier loss) or bring it back."""
        ends = self._links[link_index]
        for intf in (ends.a, ends.b):
            intf.ifconfig("up" if up else "down")

    def use_controller(self, targets: list[str]) -> None:
        """Connect every switch to the controllers at ``targets`` (``tcp:HOST:PORT`` each); a
        switch given a new target connects at once."""
        command = ["ovs-vsctl", "--timeout=30"]
        for index in range(len(self.scenario.switches)):
            records = [f"@c{index}x{number}" for number in range(len(targets))]
            for record, target in zip(records, targets):
                command += ["--", f"--id={record}", "create", "Controller",
                            f'target="{target}"', "inactivity_probe=5000"]
            command += ["--", "set", "Bridge", self.names.bridge(index),
                        f"controller=[{','.join(records)}]"]
        subprocess.run(command, check=True, capture_output=True, text=True)

    def controller_connections(self) -> dict[str, bool | None]:
        """Whether each of the scenario's switches is connected to one of its controllers, as
        OVS's database says (:func:`topologies.ovs_listing.connections`: None until it says;
        OVS writes a change there within 5 s, at its next statistics update)."""
        return ovs_listing.connections(
            {node.name: self.names.bridge(index)
             for index, node in enumerate(self.scenario.switches)},
            _ovs_table("Bridge", "name,controller"),
            _ovs_table("Controller", "_uuid,is_connected,status"))

    def unconnected_switches(self) -> list[str]:
        """The scenario's switches not connected to any of their controllers (or not reported
        connected yet)."""
        return [switch for switch, up in self.controller_connections().items() if not up]

    def stop(self) -> None:
        if self.net is None:
            return
        started = clock.real_elapsed()
        try:
            if self.management is not None:
                self.management.remove()
            self.net.stop()
        finally:
            self.net = None
            try:
                for limit in self.cpu_limits.values():
                    limit.remove()
            finally:
                self.timings.stop_s = clock.real_elapsed() - started


@dataclass
class Management:
    """The out-of-band management network: a Linux bridge in the root namespace with one link
    to every host (``mgmt0`` inside it) and one to the controller's namespace, whose address is
    the subnet's first. A kernel bridge rather than an OVS one keeps control traffic off the
    emulated switches and their controller entirely (ai_access requires that control traffic
    not share data links). No address lives in the root namespace, so runs side by side can
    use the same management subnet."""

    bridge: str
    ports: list[str]  # root ends of the management links
    controller_address: str
    controller_pid: int
    addresses: dict[str, str]  # host -> management address

    @classmethod
    def build(cls, network: "ScenarioNetwork", subnet) -> "Management":
        names = network.names
        controller_host = network.net[names.controller_namespace()]
        members = [controller_host] + [network.net[n.name] for n in network.scenario.hosts]
        free = subnet.hosts()
        addresses = {host.name: str(next(free)) for host in members}
        bridge = names.management_bridge()
        batch = [f"link add {bridge} type bridge", f"link set {bridge} up"]
        for index, host in enumerate(members):
            port = names.management_port(index)
            batch += [f"link add {port} type veth peer name {MANAGEMENT_INTERFACE} "
                      f"netns {host.pid}", f"link set {port} master {bridge} up"]
        subprocess.run(["ip", "-batch", "-"], input="\n".join(batch) + "\n", text=True,
                       check=True, capture_output=True)
        for host in members:  # in parallel, as in _configure_hosts
            host.sendCmd(f"ip addr add {addresses[host.name]}/{subnet.prefixlen} dev "
                         f"{MANAGEMENT_INTERFACE} && ip link set {MANAGEMENT_INTERFACE} up && "
                         f"ip link set lo up")
        for host in members:
            host.waitOutput()
        controller_address = addresses.pop(controller_host.name)
        return cls(bridge, [names.management_port(i) for i in range(len(members))],
                   controller_address, controller_host.pid, addresses)

    def remove(self) -> None:
        """Delete the links and the bridge now: the kernel removes a namespace's links only
        some time after its last process ends."""
        subprocess.run(["ip", "-force", "-batch", "-"], capture_output=True, check=False,
                       text=True, input="".join(f"link del dev {name}\n"
                                                for name in self.ports + [self.bridge]))


def _ovs_table(table: str, columns: str) -> list[dict]:
    """The rows of an OVS database table as dicts of the ``columns`` asked for
    (:func:`topologies.ovs_listing.rows`)."""
    result = subprocess.run(["ovs-vsctl", "--timeout=10", "--format=json", "--data=json",
                             f"--columns={columns}", "list", table],
                            check=True, capture_output=True, text=True)
    return ovs_listing.rows(result.stdout)
