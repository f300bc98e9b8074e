"""A measured line path for impairment fidelity: v1 - s1 - s2 - e1 on a real Mininet network."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from edgebed import clock
from experiments import scenarios
from experiments import registry
from topologies import cleanup
from topologies.capabilities import ovs_kernel_module
from topologies.impairments.control import LinkControl, choose_backend, wired_links
from topologies.model import BurstLoss, Impairment
from topologies.naming import RunNames, processes_carry
from topologies.naming import host_mac
from topologies.network import ScenarioNetwork
from topologies.scenario import Scenario

HOST_SWITCH, SWITCH_SWITCH = 0, 1

# Both links start with 1 ms of delay, so the fallback builds them with wires and every later
# change (including back to nothing) happens at run time, as a schedule or controller would.
LINE = """
name: fidelity
topology:
  subnet: 10.9.0.0/24
  nodes:
    v1: {role: viewer, ip: 10.9.0.1/24}
    e1: {role: edge, ip: 10.9.0.2/24}
    s1: {role: switch}
    s2: {role: switch}
  links:
    - {endpoints: ["v1:eth1", "s1:eth1"], delay: 1ms}
    - {endpoints: ["s1:eth2", "s2:eth2"], delay: 1ms}
    - {endpoints: ["e1:eth1", "s2:eth1"]}
"""
# The relay alone: where a switched path's limits are the userspace switch's, this one's are
# the relay's and the measuring hosts'.
DIRECT = """
name: fidelity-direct
topology:
  subnet: 10.9.0.0/24
  nodes:
    v1: {role: viewer, ip: 10.9.0.1/24}
    e1: {role: edge, ip: 10.9.0.2/24}
  links:
    - {endpoints: ["v1:eth1", "e1:eth1"], delay: 1ms}
"""
CLEAR = Impairment(bw=0, delay=0, jitter=0, loss=0, burst=BurstLoss(p=0, r=0))
READY_TIMEOUT_S = 60.0  # waits for the path or a server to be ready: only against a hang


class EmulatedNetwork:
    """A scenario's network built outside ``edgebed run`` (for tests and benchmarks), under a
    fresh run prefix that the registry knows, so an interrupted one is cleaned up as a run's
    is; ``stop`` removes everything it made and says if anything remained."""

    def __init__(self, text: str, file_name: str, log_dir: Path,
                 wired: Callable[[Scenario], frozenset[int]] = lambda scenario: frozenset()):
        self.scenario = scenarios.loads(text, file_name, {})
        self.names = RunNames.fresh()
        self.network = ScenarioNetwork(self.scenario, self.names,
                                       "kernel" if ovs_kernel_module() else "user",
                                       wired(self.scenario))
        self.log_dir = log_dir

    def start(self) -> None:
        registry.register(self.names.prefix, self.log_dir)
        with processes_carry(self.names.prefix):
            self.network.start()

    def stop(self) -> None:
        self.network.stop()
        leftovers = cleanup.remove_run_objects(self.names.prefix)
        registry.unregister(self.names.prefix)
        assert not leftovers, f"teardown left {leftovers.describe()}"

    def host(self, name: str):
        return self.network.net[name]

    def pin_neighbours(self, names) -> None:
        """Static neighbour entries between the hosts ``names`` (on their eth1): a lost ARP
        request must not look like lost packets, nor the first packet to a new peer wait."""
        for name in names:
            for peer in names:
                if peer != name:
                    node = self.scenario.nodes[peer]
                    self.host(name).cmd(f"ip neigh replace {node.ip.ip} lladdr "
                                        f"{host_mac(node.ip)} dev eth1 nud permanent")


class FidelityPath(EmulatedNetwork):
    """The running line network and the measurements the tests make on it."""

    def __init__(self, backend_name: str, log_dir: Path, line: str = LINE):
        backend = choose_backend(backend_name, backend_name == "netem")
        super().__init__(line, "fidelity.yaml", log_dir,
                         lambda scenario: wired_links(scenario, backend))
        self.backend = backend
        self.links = None
        self.agent_start_s = 0.0

    def start(self) -> None:
        super().start()
        self.links = LinkControl(self.scenario, self.network, self.backend, self.log_dir)
        self.links.start()
        self.pin_neighbours(("v1", "e1"))
        v1 = self.host("v1")
        # How long a probe process takes to start here: well under a second on a machine, many
        # seconds in a VM under CPU emulation (TCG). The receiver waits that much longer for the
        # sender, so a slow start is not mistaken for a path that loses packets.
        begin = clock.real_elapsed()
        v1.cmd(f"{sys.executable} -c 'import agents.probe'")
        self.agent_start_s = clock.real_elapsed() - begin

    def stop(self) -> None:
        if self.links is not None:
            self.links.stop()
        super().stop()

    def only(self, link: int, impairment: Impairment) -> None:
        """Make ``impairment`` the forward direction of ``link`` and clear everything else."""
        for index in range(len(self.scenario.links)):
            self.links.set(index, CLEAR)
        self.links.set(link, impairment, ("forward",))

    def wait_passing(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Return once an echo v1 -> e1 comes back: after a link comes up, Open vSwitch (in
        user space here) takes a moment to use its port again, and a measurement started before
        would count that moment as loss. Raises after ``timeout_s`` (a link that stays dead)."""
        deadline = clock.monotonic() + timeout_s
        while self.host("v1").popen(["ping", "-n", "-q", "-c", "1", "-W", "1", "10.9.0.2"],
                                    stdout=subprocess.DEVNULL).wait() != 0:
            if clock.monotonic() > deadline:
                raise RuntimeError(f"v1 -> e1 passed no echo within {timeout_s:g}s")

    def udp(self, rate_pps: float, count: int, size: int = 64, all_sent: bool = True,
            both_ways: bool = False, quantum_us: float = 0.0) -> dict:
        """Send ``count`` probe packets v1 -> e1; the receiver's summary, with the sender's under
        ``sender``. ``all_sent``: the sender's socket took every packet (false when v1's own
        interface is down). ``both_ways``: e1 sends as many to v1 at the same time, and that
        flow's summary is under ``reverse``. ``quantum_us``: the senders' pacing quantum
        (:class:`agents.probe.Sender`; 0 spins to each deadline)."""
        ways = (("v1", "e1", "10.9.0.2"), ("e1", "v1", "10.9.0.1"))[:2 if both_ways else 1]
        slack_s = 5 + 3 * self.agent_start_s
        timeout_s = count / rate_pps + 30 + slack_s
        receivers = []
        for _, target, _ in ways:
            receivers.append(self.host(target).popen(
                [sys.executable, "-m", "agents.probe", "receive", "--port", "5005", "--expect",
                 str(count), "--duration", str(count / rate_pps + slack_s)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            assert "listening" in receivers[-1].stderr.readline()
        senders = [self.host(source).popen(
            [sys.executable, "-m", "agents.probe", "send", "--to", f"{address}:5005", "--rate",
             str(rate_pps), "--count", str(count), "--size", str(size), "--quantum",
             str(quantum_us)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for source, _, address in ways]
        summaries = []
        for sender, receiver in zip(senders, receivers):
            sent, sender_errors = sender.communicate(timeout=timeout_s)
            if all_sent:
                assert sender.returncode == 0, sender_errors
                assert json.loads(sent)["sent"] == count
            output, errors = receiver.communicate(timeout=timeout_s)
            assert receiver.returncode == 0, errors
            summaries.append(json.loads(output)
                             | {"sender": json.loads(sent) if sender.returncode == 0 else None})
        if both_ways:
            summaries[0]["reverse"] = summaries[1]
        return summaries[0]

    def tcp_goodput(self, seconds: int = 6) -> float:
        """iperf3 TCP goodput v1 -> e1 in bit/s, the first second (slow start) left out."""
        server = self.host("e1").popen(["iperf3", "-s", "-1", "-B", "10.9.0.2"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = clock.monotonic() + READY_TIMEOUT_S
            while ":5201 " not in self.host("e1").cmd("ss -ltnH"):
                if clock.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("iperf3 on e1 did not listen on 5201")
                clock.sleep(0.05)
            result = self.host("v1").cmd(f"iperf3 -c 10.9.0.2 -t {seconds} -O 1 -J")
        finally:
            server.wait(timeout=30)
        return json.loads(result)["end"]["sum_received"]["bits_per_second"]
