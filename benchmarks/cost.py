"""CPU microseconds per emulated packet, per component, for each kind of traffic.

Each kind of traffic (the scenarios of ``benchmarks/scale.py``: ``n`` flows across one
impaired link between two switches) runs twice: with its senders, and without them (the same
hosts, switches, links and receiving agents: the idle cost). While a run runs, a sampler
thread (:class:`experiments.cpu_accounting.CpuAccounting`) reads from /proc the CPU time of
every process the run started, by its command line: the sending agents, the receiving agents,
the wire relay (when the kernel has no sch_netem; netem's own work is the kernel's and shows
only in the machine's busy time), the controller, the runner (``edgebed run``'s own process,
less the sampler) and the rest (host shells, tools); and of ovs-vswitchd, from its pid file.
One ovs-vswitchd carries every bridge, so its cost per bridge crossed is its cost divided by
the two bridges each packet crosses. A component's cost per packet is (its CPU with traffic -
its CPU idle) / the frames the impaired link carried in the senders' direction (its own
counters; the senders' ``sent`` table, where they keep one, is shown beside them); the
machine's is the same from /proc/stat's busy time. The start-up table gives each agent
process's CPU from its start until its host's first datagram in or out (a receiver's includes
its wait for the senders, who start 1 s into the timeline); samples come every 0.1 s, so a
figure is the CPU at the first sample after that datagram. On the userspace datapath each kind
runs once per way the switch reads its ports (``--userspace-ports``; both by default): packet
sockets read by ovs-vswitchd's main loop, or AF_XDP sockets read by its polling thread, whose
idle sleeping is in the idle run.

Other work on the machine shows in the machine's row and in ovs-vswitchd's (shared with any
other run), so record it alone.

    sudo .venv/bin/python benchmarks/cost.py [--kinds video,chat,ai] [--flows 4]
                                             [--userspace-ports packet_socket,af_xdp]
                                             [--duration 10] [--keep DIR]
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Iterator

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.send_engine import BUILT_ENGINE, ENGINE_KEY, PYTHON as PYTHON_SENDER  # noqa: E402
from experiments import scenarios  # noqa: E402
from agents.launched import LAUNCHER_MODULE  # noqa: E402
from experiments.cpu_accounting import CpuAccounting, Process, read_process  # noqa: E402
from experiments.measurements import read_table  # noqa: E402
from experiments.runner import RunOptions, run_scenario  # noqa: E402
from recorder import Recording  # noqa: E402
from scale import (KINDS, USERSPACE_PORTS, TrafficKind, is_sender_node,  # noqa: E402
                   kinds_parser, ports_readers, scenario_text, trunk_offered)

SENDING, RECEIVING = "sending agent", "receiving agent"
SWITCH, RELAY, RUNNER, CONTROLLER, OTHER = ("switch", "relay", "runner", "controller",
                                            "other (host shells, tools)")
COMPONENTS = (SENDING, RECEIVING, SWITCH, RELAY, RUNNER, CONTROLLER, OTHER)
SWITCH_CROSSINGS = 2  # s1 and s2
# The kinds whose senders use the compiled send engine: measured again sending from Python,
# side by side, for the engine's cut in the same session.
COMPILED_SENDER_KINDS = frozenset({"video"})
SEND_ENGINE = BUILT_ENGINE.name
OVS_PID_FILES = (Path("/run/openvswitch/ovs-vswitchd.pid"),
                 Path("/var/run/openvswitch/ovs-vswitchd.pid"))


class RunProcesses:
    """Names the component of a process the run started, from its command line, and for an
    agent the launcher forked (which keeps the launcher's command line) from the host whose
    network namespace it is in."""

    def __init__(self, runner: int):
        self.runner = runner
        self.hosts: dict[int, str | None] = {}  # network namespace inode -> node (host shells)

    def __call__(self, process: Process) -> str:
        argv = process.cmdline
        if process.pid == self.runner:
            return RUNNER
        module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
        if module.startswith("agents.") and "--node" in argv[:-1]:
            return self._agent_on(argv[argv.index("--node") + 1])
        if module == LAUNCHER_MODULE:
            # The launcher itself stays in the root namespace: it is the rest.
            node = self._node_of(process.pid)
            return OTHER if node is None else self._agent_on(node)
        if argv and Path(argv[0]).name == SEND_ENGINE:
            # A streamer's compiled engine: its sending, on the streamer's host.
            node = self._node_of(process.pid)
            return OTHER if node is None else SENDING
        if module == "controller":
            return CONTROLLER
        if argv and "relay" in Path(argv[0]).name:
            return RELAY
        return OTHER

    @staticmethod
    def _agent_on(node: str) -> str:
        return SENDING if is_sender_node(node) else RECEIVING

    def _node_of(self, pid: int) -> str | None:
        inode = network_namespace(pid)
        if inode is not None and inode not in self.hosts:
            for shell, node in host_shells():
                if (found := network_namespace(shell)) is not None:
                    self.hosts[found] = node
            # The hosts exist before any agent starts: a namespace none of them is in (the
            # root's) is not looked up again.
            self.hosts.setdefault(inode, None)
        return self.hosts.get(inode)


def host_shells() -> list[tuple[int, str]]:
    """Mininet's host shells, (pid, node): each runs ``bash ... mininet:NODE`` in its node's
    namespaces."""
    shells = []
    for entry in Path("/proc").iterdir():
        shell = read_process(int(entry.name)) if entry.name.isdigit() else None
        for part in shell.cmdline if shell else ():
            if part.startswith("mininet:"):
                shells.append((shell.pid, part.removeprefix("mininet:")))
    return shells


def network_namespace(pid: int) -> int | None:
    """The inode of ``pid``'s network namespace (None once it is gone)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


@contextlib.contextmanager
def sending_from(engine: str | None) -> Iterator[None]:
    """Runs started inside send from ``engine`` (``EDGEBED_SEND_ENGINE``; None: the built
    compiled engine, as a run does by default)."""
    saved = os.environ.pop(ENGINE_KEY, None)
    if engine is not None:
        os.environ[ENGINE_KEY] = engine
    try:
        yield
    finally:
        os.environ.pop(ENGINE_KEY, None)
        if saved is not None:
            os.environ[ENGINE_KEY] = saved


def switch_pid() -> int:
    for path in OVS_PID_FILES:
        if path.exists():
            return int(path.read_text().split()[0])
    raise SystemExit("no ovs-vswitchd pid file: is Open vSwitch running?")


@dataclass
class Measured:
    """One run's CPU by component and what it carried."""

    cpu_s: dict[str, float]
    switch_threads: dict[str, float]
    machine_busy_s: float
    startups: dict[str, list[float]]
    sent: int
    received: int
    offered: int
    impairments: str
    datapath: str
    ports: str | None  # how the userspace datapath read its ports


def measure(kind: TrafficKind, n: int, duration_s: float, senders: bool,
            runs_root: Path, ports: str) -> Measured:
    text = scenario_text(kind, n, duration_s, senders, ports=ports)
    loaded = scenarios.loads(text, file=f"<cost {kind.name} {n}>")
    switch = switch_pid()
    accounting = CpuAccounting(os.getpid(), RunProcesses(os.getpid()), pinned={switch: SWITCH},
                               startup=frozenset({SENDING, RECEIVING}))

    def on_phase(phase: str) -> None:
        # The run itself starts building once it holds the machine: waiting is not its cost.
        if phase == "building":
            accounting.start()

    try:
        result = run_scenario(loaded, RunOptions(runs_root=runs_root, on_phase=on_phase))
    finally:
        accounting.stop()
    if result.status != "completed":
        raise SystemExit(f"the {kind.name} run {result.status}: {result.summary.get('error')}")
    backends = json.loads((result.run_dir / "manifest.json").read_text())["backends"]
    return Measured(accounting.totals(), accounting.thread_totals(switch),
                    accounting.machine_busy_s(), accounting.startups(),
                    sum(int(row["datagrams"]) for row in read_table(result.run_dir, "sent")),
                    sum(int(row["packets"]) for row in read_table(result.run_dir, "flows")),
                    trunk_offered(result.summary), backends["impairments"],
                    backends["ovs_datapath"], backends["userspace_ports"])


def per_packet_us(busy_s: float, idle_s: float, packets: int) -> str:
    """(busy - idle) / packets in microseconds."""
    return f"{(busy_s - idle_s) / packets * 1e6:,.1f}" if packets else "-"


def cost_rows(name: str, busy: Measured, idle: Measured) -> list[tuple[str, ...]]:
    """The rows of one kind: each component, ovs-vswitchd's thread groups, the machine."""
    rows = []
    for component in COMPONENTS:
        used, unused = busy.cpu_s.get(component, 0.0), idle.cpu_s.get(component, 0.0)
        label, crossings = component, 1
        if component == SWITCH:
            ports = f", {busy.ports} ports" if busy.ports else ""
            label, crossings = f"switch, per bridge crossed (ovs-vswitchd / "\
                              f"{SWITCH_CROSSINGS}, {busy.datapath} datapath{ports})", \
                SWITCH_CROSSINGS
        if component == RELAY and busy.impairments == "netem":
            label = "relay (none: netem, the kernel's, in the machine's row)"
        rows.append((name, label, f"{used:.2f}", f"{unused:.2f}",
                     per_packet_us(used / crossings, unused / crossings, busy.offered)))
    for group, used in sorted(busy.switch_threads.items(), key=lambda item: -item[1]):
        unused = idle.switch_threads.get(group, 0.0)
        if used - unused > 0.005:
            rows.append((name, f"  ovs-vswitchd's {group} threads, per bridge crossed",
                         f"{used:.2f}", f"{unused:.2f}",
                         per_packet_us(used / SWITCH_CROSSINGS, unused / SWITCH_CROSSINGS,
                                       busy.offered)))
    # A thread that ended before the run did (AF_XDP ports' polling thread goes with the last
    # of them) is in the process's CPU but in none of its thread groups.
    ended = [busy.cpu_s.get(SWITCH, 0.0) - sum(busy.switch_threads.values()),
             idle.cpu_s.get(SWITCH, 0.0) - sum(idle.switch_threads.values())]
    if ended[0] > 0.005:
        rows.append((name, "  ovs-vswitchd's threads that ended with the run, per bridge crossed",
                     f"{ended[0]:.2f}", f"{ended[1]:.2f}",
                     per_packet_us(ended[0] / SWITCH_CROSSINGS, ended[1] / SWITCH_CROSSINGS,
                                   busy.offered)))
    rows.append((name, "machine (all CPUs busy)", f"{busy.machine_busy_s:.2f}",
                 f"{idle.machine_busy_s:.2f}",
                 per_packet_us(busy.machine_busy_s, idle.machine_busy_s, busy.offered)))
    return rows


def startup_rows(name: str, busy: Measured) -> list[tuple[str, ...]]:
    return [(name, component, str(len(busy.startups.get(component, []))),
             f"{mean(busy.startups[component]):.3f}" if busy.startups.get(component) else "-",
             f"{max(busy.startups[component]):.3f}" if busy.startups.get(component) else "-")
            for component in (SENDING, RECEIVING)]


def main() -> int:
    recording = Recording(__file__, __doc__)
    parser = kinds_parser(__doc__)
    parser.add_argument("--flows", type=int, default=4, help="flows a run")
    parser.set_defaults(userspace_ports=",".join(USERSPACE_PORTS))
    arguments = parser.parse_args()
    kinds = [KINDS[name] for name in arguments.kinds.split(",")]
    readers = ports_readers(arguments)
    console = Console(width=200)
    costs = Table(title=f"CPU per emulated packet ({arguments.flows} flows, "
                        f"{arguments.duration:g} s runs; idle: the same run without senders)",
                  title_justify="left")
    for column in ("traffic", "component", "CPU-s with traffic", "CPU-s idle",
                   "us per packet on the impaired link"):
        costs.add_column(column)
    packets = Table(title="packets of the runs with traffic", title_justify="left")
    for column in ("traffic", "frames on the impaired link", "sent (sent table)",
                   "received (flows table)"):
        packets.add_column(column)
    startups = Table(title="start-up: CPU-s of each agent process until its host's first "
                           "datagram", title_justify="left")
    for column in ("traffic", "agent", "processes", "CPU-s each, mean", "CPU-s each, max"):
        startups.add_column(column)
    with tempfile.TemporaryDirectory(prefix="edgebed-cost-") as scratch:
        runs_root = arguments.keep or Path(scratch)
        for kind, ports in ((kind, ports) for kind in kinds for ports in readers):
            console.print(f"  {kind.name}, {ports}: idle run, then with traffic", markup=False)
            idle = measure(kind, arguments.flows, arguments.duration, False, runs_root, ports)
            within = "" if ports == readers[0] else f", {ports} switch ports"
            senders = [(f"{kind.name}{within}", None)]
            if kind.name in COMPILED_SENDER_KINDS and ports == readers[0]:
                senders.append((f"{kind.name} (Python sender)", PYTHON_SENDER))
            for name, engine in senders:
                with sending_from(engine):
                    busy = measure(kind, arguments.flows, arguments.duration, True, runs_root,
                                   ports)
                for row in cost_rows(name, busy, idle):
                    costs.add_row(*row)
                packets.add_row(name, f"{busy.offered:,}", f"{busy.sent:,}",
                                f"{busy.received:,}")
                for row in startup_rows(name, busy):
                    startups.add_row(*row)
    for table in (costs, packets, startups):
        console.print(recording.table(table))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
