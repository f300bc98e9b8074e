"""What every traffic agent shares: its command line, its tables, pacing, receiving with kernel
timestamps, and per-flow measurement."""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import signal
import socket
import statistics
import struct
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Callable, Iterator, Optional

from pydantic import BaseModel, ConfigDict, Field

from edgebed.quantities import Rate
from edgebed.realtime import request_cpu_latency
from edgebed.tables import TableWriter

# A parameter naming another node of the scenario (``to: edge1``) or a controller service
# (``to: video``). The scenario's checks make sure it exists; the runner hands the agent its IP
# address (a service's virtual address) instead of its name.
NodeRef = Annotated[str, Field(json_schema_extra={"node_ref": True},
                               description="a node or service of the scenario (the agent gets "
                                           "its IP)")]


class AgentParams(BaseModel):
    """Base of every agent's parameters: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
RECEIVE_BUFFER = 16 * 1024 * 1024  # the default lost 38% of a 945-packet AI burst
TIMESPEC = struct.Struct("@ll")
SPIN_NS = 200_000
# Longest wait on a socket before an agent looks at its stop flag again.
POLL_S = 0.1
# Waits on a socket or event end this long before something is due; the pacer's sleep and spin
# do the rest, which a wake-up from select() would not do on time.
WAKE_EARLY_NS = 1_000_000
TABLES = {
    # gap_max_ms: the longest time between two consecutive arrivals (new packets only).
    "flows": ("node", "agent", "flow", "peer", "packets", "unique", "lost", "loss_fraction",
              "duplicates", "reordered", "bytes", "duration_s", "goodput_bps", "delay_mean_ms",
              "delay_p50_ms", "delay_p99_ms", "delay_max_ms", "delay_std_ms", "jitter_ms",
              "gap_max_ms"),
    "flow_seconds": ("node", "agent", "flow", "second", "packets", "bytes", "lost",
                     "delay_mean_ms", "jitter_ms", "time_s"),
    "sender_lateness": ("node", "agent", "flow", "packets", "late_p50_us", "late_p99_us",
                        "late_max_us", "late_over_1ms_fraction"),
    # Per flow a receiver measures (its flows row has the same flow name): where it went and
    # how many datagrams the socket took, so the runner can balance sent against received.
    "sent": ("node", "agent", "flow", "to", "datagrams", "send_errors"),
    "malformed": ("node", "agent", "port", "count", "first_seen_ns", "example_hex"),
}
"""The tables every agent may write (through :class:`FlowStats`, :class:`Pacer` and
:class:`MalformedLog`). An agent module declares the tables only it writes in its own ``TABLES``
(table name -> columns, ``node`` and ``agent`` first) and hands them to :class:`Agent`."""


def percentile(sorted_values, q: float) -> float:
    """Linear-interpolated percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def with_shared_tables(tables: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """An agent module's ``tables`` with the shared :data:`TABLES`; ValueError if it redeclares
    a shared one."""
    clash = sorted(set(tables) & set(TABLES))
    if clash:
        raise ValueError(f"tables {', '.join(clash)} are shared (agents.common.TABLES); "
                         f"an agent module may not declare them again")
    return TABLES | tables


class Agent:
    """An agent's context: who and where it is, its parameters, its tables, its stop flag."""

    def __init__(self, name: str, argv: list[str] | None = None,
                 tables: dict[str, tuple[str, ...]] | None = None):
        parser = argparse.ArgumentParser(prog=f"python -m agents.{name}")
        parser.add_argument("--node", required=True)
        parser.add_argument("--out", required=True, type=Path, help="the run directory")
        parser.add_argument("--params", default="{}", help="JSON parameters")
        parser.add_argument("--seed", type=int, default=1)
        arguments = parser.parse_args(argv)
        self.name = name
        self.node = arguments.node
        self.out = arguments.out
        self.seed = arguments.seed
        try:
            self.params = json.loads(arguments.params)
        except ValueError as error:
            parser.error(f"--params: {error}")
        self.stopping = False
        self.columns = with_shared_tables(tables or {})
        self._tables: dict[str, TableWriter] = {}
        # Measurement state grows with every packet (flows, frames, per-second buckets), and
        # the cycle collector's passes over it stall the hot path for milliseconds; agents
        # make no reference cycles that matter for their lifetime.
        gc.disable()
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._stop)

    def _stop(self, _number, _frame) -> None:
        self.stopping = True

    def table(self, name: str) -> TableWriter:
        if name not in self._tables:
            path = self.out / "records" / name / f"{self.node}-{self.name}.csv"
            if name not in self.columns:
                raise KeyError(f"agent {self.name} writes table {name!r}, which neither its "
                               f"module's TABLES nor agents.common.TABLES declares")
            self._tables[name] = TableWriter(path, self.columns[name])
        return self._tables[name]

    def row(self, table: str, *values) -> None:
        """A row of ``table``; the node and agent columns are filled in."""
        self.table(table).row(self.node, self.name, *values)

    def finish(self, summary: dict) -> None:
        for writer in self._tables.values():
            writer.close()
        print(json.dumps({"node": self.node, "agent": self.name} | summary), flush=True)


@dataclass
class Pacer:
    """Absolute deadlines on the monotonic clock: sleep until just before, spin the rest. A late
    packet does not move the schedule, so the mean rate does not drift. While a pacer exists,
    CPUs are kept able to wake at once (:func:`request_cpu_latency`): on a virtual machine a
    halted CPU can take milliseconds to wake, longer than any spin covers.

    With a ``quantum_ns`` the pacer never spins: it sleeps at least a quantum whenever a
    deadline is ahead, so the packets due meanwhile go out together, up to a quantum late. Why:
    packets closer together than :data:`SPIN_NS` keep a spinning sender busy all the time (at
    50k packets/s one core per sender), and on a 2-core machine that core is taken from the
    relays and receivers the sender measures."""

    lateness_ns: list[int] = field(default_factory=list)
    quantum_ns: int = 0

    def __post_init__(self):
        request_cpu_latency(0)

    def wait_until(self, deadline_ns: int) -> int:
        remaining = deadline_ns - time.monotonic_ns()
        if self.quantum_ns and remaining > 0:
            time.sleep(max(remaining, self.quantum_ns) / 1e9)
        elif remaining > SPIN_NS:
            time.sleep((remaining - SPIN_NS) / 1e9)
        now = time.monotonic_ns()
        while now < deadline_ns:
            now = time.monotonic_ns()
        late = now - deadline_ns
        self.lateness_ns.append(late)
        return late

    def report(self, agent: Agent, flow: str) -> dict:
        """Write this flow's row of ``sender_lateness``; returns the figures."""
        values = sorted(self.lateness_ns)
        figures = {"packets": len(values),
                   "late_p50_us": percentile(values, 50) / 1e3 if values else None,
                   "late_p99_us": percentile(values, 99) / 1e3 if values else None,
                   "late_max_us": values[-1] / 1e3 if values else None,
                   "late_over_1ms_fraction": (sum(1 for v in values if v > 1_000_000)
                                              / len(values)) if values else None}
        agent.row("sender_lateness", flow, *figures.values())
        return figures


class ProcessingParams(BaseModel):
    """What a receiver with a processing budget takes (its ``Params`` derive from this too):
    the budget of its single worker and the packets it holds (:class:`ProcessingBudget`)."""

    budget: Optional[Rate] = Field(None, gt=0, description="UDP payload bits per second the "
                                                           "node can process")
    budget_packets: Optional[float] = Field(None, gt=0, description="packets per second the "
                                                                    "node can process")
    queue: int = Field(100, ge=1, description="packets held for processing at most, the one "
                                              "being processed included; more are dropped")

    def worker(self) -> "ProcessingBudget":
        return ProcessingBudget(self.budget, self.budget_packets, self.queue)


class ProcessingBudget:
    """A receiver's single worker (an edge's, an access server's): each packet takes
    ``1 / packets_per_s`` seconds or its UDP payload bits over ``bits_per_s`` seconds, whichever
    is longer (neither: no time), in arrival order; at most ``queue`` packets are held, the one
    being processed included, and one arriving to a full queue is dropped (the caller counts
    it). An overloaded worker thus first delays, then drops what exceeds its capacity, as a
    real one does; nothing is left to chance. ``busy_ns`` is the processing time taken so far,
    so the worker's utilisation over a stretch is its growth over the stretch's length."""

    def __init__(self, bits_per_s: float | None, packets_per_s: float | None, queue: int):
        self.ns_per_bit = 1e9 / bits_per_s if bits_per_s else 0.0
        self.ns_per_packet = 1e9 / packets_per_s if packets_per_s else 0.0
        self.queue = queue
        self.held: deque[int] = deque()  # processing end times of the packets held
        self.free_ns = 0
        self.busy_ns = 0

    def admit(self, now_ns: int, size: int) -> int | None:
        """When processing of a packet of ``size`` bytes arriving at ``now_ns`` ends, or None
        when the queue is full and the packet is dropped."""
        if not (self.ns_per_packet or self.ns_per_bit):
            return now_ns  # no budget: processing takes no time, nothing waits
        while self.held and self.held[0] <= now_ns:
            self.held.popleft()
        if len(self.held) >= self.queue:
            return None
        cost_ns = round(max(self.ns_per_packet, size * 8 * self.ns_per_bit))
        self.free_ns = max(now_ns, self.free_ns) + cost_ns
        self.busy_ns += cost_ns
        self.held.append(self.free_ns)
        return self.free_ns


def receiving_socket(port: int, kind: int = socket.SOCK_DGRAM,
                     bind_address: str = "0.0.0.0", reuse: bool = True) -> socket.socket:
    """A UDP socket with a 16 MiB receive buffer and kernel receive timestamps, whose reads
    time out every 0.1 s so a stop request is seen. ``reuse=False``: binding fails with
    EADDRINUSE when another socket holds the address and port (with SO_REUSEADDR two UDP
    sockets may share them)."""
    sock = socket.socket(socket.AF_INET, kind)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("@ll", 0, round(POLL_S * 1e6)))
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind_address, port))
    except OSError:
        sock.close()
        raise
    return sock


CONTROL_SPACE = socket.CMSG_SPACE(TIMESPEC.size)


def receive(sock: socket.socket, buffer: bytearray,
            wait: bool = True) -> tuple[int, int, tuple] | None:
    """One datagram into ``buffer``: (size, kernel receive time ns, sender address), or None
    when the read timed out (at once when nothing is waiting, with ``wait=False``)."""
    try:
        size, control, _, address = sock.recvmsg_into([buffer], CONTROL_SPACE, 0 if wait
                                                      else socket.MSG_DONTWAIT)
    except (BlockingIOError, socket.timeout):
        return None
    received_ns = time.time_ns()
    for level, kind, data in control:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = TIMESPEC.unpack_from(data)
            received_ns = seconds * 1_000_000_000 + nanoseconds
    return size, received_ns, address


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
        entry = self.by_port.setdefault(port, [0, time.time_ns(), data[:32].hex()])
        entry[0] += 1

    @property
    def count(self) -> int:
        return sum(entry[0] for entry in self.by_port.values())

    def write(self, agent: Agent) -> None:
        for port, (count, first, example) in sorted(self.by_port.items()):
            agent.row("malformed", port, count, first, example)
            print(f"{agent.name} on {agent.node}: {count} malformed datagrams on port {port}",
                  file=sys.stderr, flush=True)


GRACE_S = 0.5  # listening on after the expected packets arrived, for stragglers and duplicates
DATAGRAM_BUFFER = 65536  # larger than any UDP payload


def listen(port: int) -> socket.socket:
    """A receiving socket on ``port`` (0: any free port), announced on stderr as ``listening on
    PORT`` once bound, so that whoever starts a sender can wait for it."""
    sock = receiving_socket(port)
    print(f"listening on {sock.getsockname()[1]}", file=sys.stderr, flush=True)
    return sock


def datagrams(agent: Agent, sock: socket.socket, buffer: bytearray,
              duration_s: float | None = None,
              enough: Callable[[], bool] | None = None) -> Iterator[tuple[int, int, tuple]]:
    """The datagrams arriving on ``sock``, each read into ``buffer`` and given as (size, kernel
    receive time ns, sender address), until the agent is stopped, ``duration_s`` has passed or
    GRACE_S after ``enough()`` first says so; then those still waiting on the socket
    (:func:`waiting_datagrams`): what reached the host before its agent stopped is measured,
    not lost."""
    end = math.inf if duration_s is None else time.monotonic() + duration_s
    while not agent.stopping and time.monotonic() < end:
        arrival = receive(sock, buffer)
        if arrival is None:
            continue
        yield arrival
        if enough is not None and enough():
            end = min(end, time.monotonic() + GRACE_S)
            enough = None
    yield from waiting_datagrams(sock, buffer)


MARKER_SIZE = 16  # random bytes: no datagram a sender sends carries them by chance
SMALLEST_QUEUED_BYTES = 256  # a datagram takes at least this much of a receive buffer (its truesize)


def waiting_datagrams(sock: socket.socket, buffer: bytearray) -> Iterator[tuple[int, int, tuple]]:
    """The datagrams waiting on ``sock`` now, read without waiting, as :func:`datagrams` gives
    them; a sender that keeps sending cannot hold them up.

    "Now" is a marker datagram the socket sends itself over loopback: it joins the receive
    queue behind every datagram that had arrived, so the reading ends where it is read. No
    clock decides it (the kernel's receive stamps and user-space time need not order the same
    way). A full queue drops the marker; then the reading ends when the queue is empty or
    after as many datagrams as the queue could hold."""
    marker = os.urandom(MARKER_SIZE)
    sock.sendto(marker, _own_address(sock))
    capacity = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // SMALLEST_QUEUED_BYTES
    for _ in range(capacity):
        arrival = receive(sock, buffer, wait=False)
        if arrival is None or buffer[:arrival[0]] == marker:
            return
        yield arrival


def _own_address(sock: socket.socket) -> tuple[str, int]:
    """Where a datagram reaches ``sock`` from its own host: its bound address, or loopback
    for a socket bound to every address."""
    address, port = sock.getsockname()[:2]
    return ("127.0.0.1" if address == "0.0.0.0" else address), port


def epoch_seconds(ns: int) -> str:
    """A time in seconds since the epoch as a table writes it: to the microsecond (the
    tables' default of six significant digits would leave whole minutes)."""
    return f"{ns / 1e9:.6f}"
