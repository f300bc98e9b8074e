"""Per-flow measurement at a receiver, and the datagrams it did not expect."""

from __future__ import annotations

import math
import statistics
import sys

from agents.agent import Agent
from edgebed import clock


def flow_name(stream: int) -> str:
    """The name of a media stream in the tables of every agent that sends or measures it."""
    return f"stream-{stream}"


def percentile(sorted_values, q: float) -> float:
    """Linear-interpolated percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


class FlowStats:
    """Measurement of one numbered, timestamped flow, kept incrementally: loss from sequence
    gaps, duplicates, reordering, one-way delay, RFC 3550 jitter, goodput, per-second series."""

    def __init__(self, flow: str, peer: str = ""):
        self.flow, self.peer = flow, peer
        self.seen: set[int] = set()
        self.highest = -1
        self.duplicates = self.reordered = self.bytes = self.packets = 0
        self.delays_ns: list[int] = []
        self.jitter_ns = 0.0
        self._last_transit: int | None = None
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.gap_max_ns = 0  # the longest silence between two arrivals (a failover's outage)
        self.seconds: dict[int, list] = {}  # second -> [packets, bytes, delay sum, jitter]

    def add(self, sequence: int, send_ns: int, received_ns: int, size: int) -> None:
        self.packets += 1
        if sequence in self.seen:
            self.duplicates += 1
            return
        self.seen.add(sequence)
        if sequence < self.highest:
            self.reordered += 1
        self.highest = max(self.highest, sequence)
        self.bytes += size
        transit = received_ns - send_ns
        self.delays_ns.append(transit)
        if self._last_transit is not None:
            self.jitter_ns += (abs(transit - self._last_transit) - self.jitter_ns) / 16
        self._last_transit = transit
        if self.last_ns is not None:
            self.gap_max_ns = max(self.gap_max_ns, received_ns - self.last_ns)
        self.first_ns = received_ns if self.first_ns is None else self.first_ns
        self.last_ns = received_ns
        second = (received_ns - self.first_ns) // 1_000_000_000
        bucket = self.seconds.setdefault(second, [0, 0, 0, 0.0, self.highest])
        bucket[0] += 1
        bucket[1] += size
        bucket[2] += transit
        bucket[3] = self.jitter_ns
        bucket[4] = self.highest

    def lost(self, sent: int | None = None) -> int:
        expected = sent if sent is not None else self.highest + 1
        return expected - len(self.seen)

    def summary(self, sent: int | None = None) -> dict:
        delays = sorted(d / 1e6 for d in self.delays_ns)
        expected = sent if sent is not None else self.highest + 1
        duration = ((self.last_ns - self.first_ns) / 1e9) if self.first_ns is not None else 0.0
        return {
            "flow": self.flow, "peer": self.peer, "packets": self.packets,
            "unique": len(self.seen), "lost": self.lost(sent),
            "loss_fraction": self.lost(sent) / expected if expected > 0 else None,
            "duplicates": self.duplicates, "reordered": self.reordered, "bytes": self.bytes,
            "duration_s": duration,
            "goodput_bps": self.bytes * 8 / duration if duration > 0 else None,
            "delay_mean_ms": statistics.fmean(delays) if delays else None,
            "delay_p50_ms": percentile(delays, 50) if delays else None,
            "delay_p99_ms": percentile(delays, 99) if delays else None,
            "delay_max_ms": delays[-1] if delays else None,
            "delay_std_ms": statistics.pstdev(delays) if delays else None,
            "jitter_ms": self.jitter_ns / 1e6,
            "gap_max_ms": self.gap_max_ns / 1e6,
        }

    def write(self, agent: Agent, sent: int | None = None) -> dict:
        """This flow's row of ``flows`` and its rows of ``flow_seconds``; returns the summary."""
        summary = self.summary(sent)
        agent.row("flows", *list(summary.values()))
        previous_highest = -1
        for second, (packets, size, delay_sum, jitter, highest) in sorted(self.seconds.items()):
            expected = highest - previous_highest
            agent.row("flow_seconds", self.flow, second, packets, size,
                      max(0, expected - packets), delay_sum / packets / 1e6, jitter / 1e6,
                      f"{(self.first_ns + second * 1_000_000_000) / 1e9:.6f}")
            previous_highest = highest
        return summary


class MalformedLog:
    """Datagrams an agent did not expect: counted per port, the first one kept as an example."""

    def __init__(self):
        self.by_port: dict[int, list] = {}

    def add(self, port: int, data: bytes) -> None:
        entry = self.by_port.setdefault(port, [0, clock.time_ns(), data[:32].hex()])
        entry[0] += 1

    @property
    def count(self) -> int:
        return sum(entry[0] for entry in self.by_port.values())

    def write(self, agent: Agent) -> None:
        for port, (count, first, example) in sorted(self.by_port.items()):
            agent.row("malformed", port, count, first, example)
            print(f"{agent.name} on {agent.node}: {count} malformed datagrams on port {port}",
                  file=sys.stderr, flush=True)
