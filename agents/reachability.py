"""A reachability check between every pair of roles the scenario connects."""

from __future__ import annotations

import itertools
import math
import re
import subprocess
from dataclasses import asdict, dataclass

import networkx as nx

from edgebed import clock
from topologies.impairments.drops import mean_loss
from topologies.scenario import Node, Scenario

_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_REPLY = re.compile(r"icmp_seq=(\d+) .*time=([\d.]+) ms")
REPLY_WAIT_S = 3.0  # how long after its last echo a ping waits for the replies still due


@dataclass
class PingResult:
    source: str
    target: str
    source_role: str
    target_role: str
    sent: int
    received: int
    rtt_avg_ms: float | None  # of the echoes after the first
    rtt_max_ms: float | None
    first_rtt_ms: float | None = None  # the first echo, ARP included
    configured_loss: float = 0.0  # the chance an echo or its reply is lost by configuration

    @property
    def ok(self) -> bool:
        """Every echo came back or, on a path with configured loss, at least one did."""
        if self.configured_loss > 0:
            return self.received > 0
        return self.sent > 0 and self.received == self.sent

    def as_dict(self) -> dict:
        return asdict(self) | {"ok": self.ok}


def role_pairs(scenario: Scenario) -> list[tuple[Node, Node]]:
    """One host pair per pair of roles that share a connected part of the topology."""
    graph = scenario.graph()
    component_of = {name: i for i, part in enumerate(nx.connected_components(graph))
                     for name in part}
    by_role: dict[str, list[Node]] = {}
    for host in scenario.hosts:
        by_role.setdefault(host.role, []).append(host)
    pairs = []
    for first, second in itertools.combinations_with_replacement(sorted(by_role), 2):
        candidates = ((a, b) for a in by_role[first] for b in by_role[second]
                      if a.name != b.name and component_of[a.name] == component_of[b.name])
        pair = next(candidates, None)
        if pair is not None:
            pairs.append(pair)
    return pairs


def configured_echo_loss(scenario: Scenario, source: str, target: str) -> float:
    """The chance that configured loss takes an echo from ``source`` to ``target`` or its
    reply, on their shortest path in the scenario: the request crosses each link one way, the
    reply the other, so every link counts with both directions. Of parallel links the lossiest
    counts, the one a controller might pick. In a mesh a controller may route another path;
    this is the figure of the shortest one."""
    graph = scenario.graph()
    links = {link.index: link for link in scenario.links}
    delivered = 1.0
    for here, there in itertools.pairwise(nx.shortest_path(graph, source, target)):
        delivered *= min((1 - mean_loss(links[index].forward)) * (1 - mean_loss(links[index].reverse))
                         for index in graph.get_edge_data(here, there))
    return 1 - delivered


def _virtual_ms(real_ms: float) -> float:
    """A round trip ping measured (ping keeps real time) in the run's time."""
    return round(clock.current().virtual_seconds(real_ms / 1e3) * 1e3, 3) if \
        clock.current().dilated else real_ms


def ping_pairs(hosts, scenario: Scenario, pairs: list[tuple[Node, Node]], count: int = 3,
               interval_s: float = 0.2) -> list[PingResult]:
    """Ping each pair's target from its source; ``hosts`` maps scenario names to Mininet hosts."""
    running = []
    deadline_s = math.ceil((count + 1) * interval_s + REPLY_WAIT_S)  # ping takes whole seconds
    for source, target in pairs:
        argv = ["ping", "-n", "-c", str(count + 1), "-i", str(interval_s),
                "-w", str(deadline_s), str(target.ip.ip)]
        running.append((source, target, hosts[source.name].popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    results = []
    for source, target, process in running:
        output, _ = process.communicate(timeout=deadline_s + 10)
        text = output.decode(errors="replace")
        summary = _SUMMARY.search(text)
        replies = {int(seq): _virtual_ms(float(ms)) for seq, ms in _REPLY.findall(text)
                   if int(seq) <= count + 1}
        later = [ms for seq, ms in replies.items() if seq > 1]
        results.append(PingResult(
            source.name, target.name, source.role, target.role,
            min(int(summary.group(1)), count + 1) if summary else 0, len(replies),
            round(sum(later) / len(later), 3) if later else None,
            max(later) if later else None, replies.get(1),
            configured_echo_loss(scenario, source.name, target.name)))
    return results
