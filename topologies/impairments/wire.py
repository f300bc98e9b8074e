"""The user-space wire relay: forwards every Ethernet frame between two interfaces of a wire
namespace with per-direction delay, jitter, loss, burst loss and link-down, where the kernel has
no sch_netem. ``python -m topologies.impairments.wire --help`` describes its configuration,
changes and statistics (:data:`~topologies.impairments.wire_config.PROTOCOL`).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import json
import math
import os
import random
import select
import socket
import struct
import sys
from dataclasses import dataclass, field

from edgebed import clock
from edgebed.realtime import request_cpu_latency, run_realtime
from topologies.model import BurstLoss

from .wire_config import DEFAULT_LIMIT, PROTOCOL, parse_config, variation_table
from .wire_front import Changes, CompiledRelay, StdinLines, StopSignals, report

# Linux constants the socket module does not export.
ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
PACKET_AUXDATA = 8
PACKET_IGNORE_OUTGOING = 23
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
ETH_P_8021Q = 0x8100
# A plain int: arithmetic on the socket module's IntFlag costs microseconds per frame.
MSG_TRUNC = int(socket.MSG_TRUNC)

RECEIVE_BUFFER_BYTES = 16 << 20
# Larger than any frame a veth carries (MTU 65535 plus Ethernet header plus a VLAN tag).
FRAME_BUFFER_BYTES = 1 << 17
# struct tpacket_auxdata: status, len, snaplen, mac, net, vlan_tci, vlan_tpid.
AUXDATA = struct.Struct("=IIIHHHH")
# struct tpacket_stats: packets, drops (reading resets both).
PACKET_STATS = struct.Struct("=II")
TIMESPEC = struct.Struct("=qq")
ANCILLARY_SPACE = socket.CMSG_SPACE(TIMESPEC.size) + socket.CMSG_SPACE(AUXDATA.size)
# A kernel receive timestamp older than this is not one (TCP's frames carry a monotonic
# departure time instead), or the relay is hopelessly behind: either way the read time is used.
TIMESTAMP_TRUST_NS = 1_000_000_000
# select() wakes up late by some microseconds, so it is asked to return this long before the
# next due time and the rest is spent polling without sleeping. Under SCHED_FIFO there is no
# timer slack and CPUs are kept awake, so 50 µs is enough; every microsecond spun here is
# taken, at real-time priority, from the emulated hosts' programs.
SPIN_NS = 50_000
REALTIME_PRIORITY = 10
STATUS_PERIOD_NS = 1_000_000_000
# Frames read per readiness before going back to sending: a flood on one side must not hold
# back frames that are due on the other.
DRAIN_BATCH = 256

class LatenessHistogram:
    """How late frames left, in microseconds: exact below 1024 µs, above that to 10 significant
    bits (0.1 %), so that a long run keeps a few hundred counters rather than every value; the
    sum and sum of squares exactly, for the mean and standard deviation."""

    def __init__(self):
        self.counts: dict[int, int] = {}
        self.frames = 0
        self.maximum = 0
        self.total_us = 0
        self.squares_us2 = 0

    def add(self, late_us: int) -> None:
        self.frames += 1
        self.total_us += late_us
        self.squares_us2 += late_us * late_us
        if late_us > self.maximum:
            self.maximum = late_us
        if late_us >= 1024:
            shift = late_us.bit_length() - 10
            late_us = late_us >> shift << shift
        self.counts[late_us] = self.counts.get(late_us, 0) + 1

    def percentile(self, fraction: float) -> int | None:
        if not self.frames:
            return None
        rank = math.ceil(fraction * self.frames)
        values = sorted(self.counts)
        cumulative = itertools.accumulate(self.counts[value] for value in values)
        return next(value for value, seen in zip(values, cumulative) if seen >= rank)

    def std(self) -> float | None:
        """The population standard deviation, from the exact integer sums (no cancellation)."""
        if not self.frames:
            return None
        frames = self.frames
        return math.sqrt(frames * self.squares_us2 - self.total_us ** 2) / frames

    def summary(self) -> dict:
        frames = self.frames
        return {"mean": self.total_us / frames if frames else None, "std": self.std(),
                "p50": self.percentile(0.5), "p99": self.percentile(0.99),
                "max": self.maximum if frames else None,
                "sum": self.total_us, "sum_squares": self.squares_us2}


@dataclass
class Direction:
    """One direction of the wire: its behaviour, random state, sockets and counters."""

    name: str
    in_socket: socket.socket
    out_socket: socket.socket
    delay_ns: int = 0
    jitter_ns: int = 0
    distribution: str = "normal"
    reorder: bool = False
    loss: float = 0.0
    burst: BurstLoss | None = None
    down: bool = False
    limit: int = DEFAULT_LIMIT
    rng: random.Random = field(init=False)
    burst_bad: bool = False
    table: tuple[float, ...] = ()
    # The latest due time handed out, so that reorder=false never lets a frame overtake one
    # already queued (also across a change from reorder=true).
    last_due_ns: int = 0
    queued: int = 0
    max_queued: int = 0
    frames_in: int = 0
    frames_out: int = 0
    dropped_loss: int = 0
    dropped_down: int = 0
    dropped_oversize: int = 0
    dropped_queue_full: int = 0
    dropped_receive_queue: int = 0
    send_errors: int = 0
    lateness: LatenessHistogram = field(default_factory=LatenessHistogram)

    def __post_init__(self):
        self.seed(0)

    def seed(self, seed: int) -> None:
        # Each direction draws from its own sequence, so that one direction's traffic does not
        # change what the other one does.
        self.rng = random.Random(f"{seed}:{self.name}")

    def apply(self, changes: dict) -> None:
        for key, value in changes.items():
            setattr(self, key, value)
        if "burst" in changes and self.burst is None:
            self.burst_bad = False
        if self.distribution in ("pareto", "paretonormal"):
            self.table = variation_table(self.distribution)

    def variation(self) -> float:
        """A delay variation with mean 0 and standard deviation 1."""
        if self.distribution == "normal":
            return self.rng.gauss(0.0, 1.0)
        if self.distribution == "uniform":
            return self.rng.uniform(-math.sqrt(3), math.sqrt(3))
        return self.table[int(self.rng.random() * len(self.table))]

    def lost(self) -> bool:
        """Whether the loss models drop the next frame; the burst state moves on every frame."""
        burst = self.burst
        if burst is not None:
            rng = self.rng
            if self.burst_bad:
                dropped = rng.random() < burst.bad_loss
                self.burst_bad = rng.random() >= burst.r
            else:
                dropped = rng.random() < burst.good_loss
                self.burst_bad = rng.random() < burst.p
            if dropped:
                return True
        return self.loss > 0 and self.rng.random() < self.loss

    def due(self, arrival_ns: int) -> int | None:
        """When a frame that arrived at ``arrival_ns`` leaves, or None when it is dropped."""
        self.frames_in += 1
        if self.down:
            self.dropped_down += 1
            return None
        if (self.burst is not None or self.loss) and self.lost():
            self.dropped_loss += 1
            return None
        if self.queued >= self.limit:
            self.dropped_queue_full += 1
            return None
        delay = self.delay_ns
        if self.jitter_ns:
            delay = max(0, delay + round(self.jitter_ns * self.variation()))
        due = arrival_ns + delay
        if due < self.last_due_ns:
            if not self.reorder:
                due = self.last_due_ns
        else:
            self.last_due_ns = due
        self.queued += 1
        if self.queued > self.max_queued:
            self.max_queued = self.queued
        return due

    def send(self, frame: bytes, late_ns: int) -> None:
        self.queued -= 1
        try:
            self.out_socket.send(frame)
        except OSError:
            # ENOBUFS from a full qdisc, ENETDOWN while the interface is down: the frame is
            # lost, as it would be on a wire.
            self.send_errors += 1
            return
        self.frames_out += 1
        self.lateness.add(late_ns // 1000)

    def count_receive_drops(self) -> None:
        """Add the frames the kernel dropped since the last call because this direction's
        receive queue was full: they reached the interface but never the relay, so they are
        not in ``frames_in`` (the relay did not keep up, or was not scheduled)."""
        try:
            _, drops = PACKET_STATS.unpack(
                self.in_socket.getsockopt(SOL_PACKET, PACKET_STATISTICS, PACKET_STATS.size))
        except OSError:
            return
        self.dropped_receive_queue += drops

    def statistics(self) -> dict:
        self.count_receive_drops()
        return {"frames_in": self.frames_in, "frames_out": self.frames_out,
                "dropped_loss": self.dropped_loss, "dropped_down": self.dropped_down,
                "dropped_oversize": self.dropped_oversize,
                "dropped_queue_full": self.dropped_queue_full,
                "dropped_receive_queue": self.dropped_receive_queue,
                "send_errors": self.send_errors,
                "queued_at_exit": self.queued, "max_queued": self.max_queued,
                "late_us": self.lateness.summary()}


def open_interface(name: str) -> socket.socket:
    """A non-blocking packet socket that receives every frame arriving on ``name`` (none it
    sends) and sends frames out of it."""
    # Protocol 0 until bind: a socket created with ETH_P_ALL would already queue frames from
    # every interface of the namespace before being bound to its own.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    # The kernel moves a frame's outer VLAN tag out of the frame into metadata before packet
    # sockets see it; auxdata hands it back so the frame can leave as it came.
    sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER_BYTES)
    # When the frame reached the interface, so that a frame read late is not delayed more.
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((name, ETH_P_ALL))
    # Frames on a wire are addressed to MACs beyond it.
    membership = struct.pack("iHH8s", socket.if_nametoindex(name), PACKET_MR_PROMISC, 0, b"")
    sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, membership)
    sock.setblocking(False)
    return sock

class Relay:
    """The event loop: reads frames as they arrive, sends each when it is due, takes changes
    from stdin and stops on a signal."""

    def __init__(self, forward_in: str, forward_out: str, status_path: str | None = None):
        inner, outer = open_interface(forward_in), open_interface(forward_out)
        self.status_path = status_path
        self.next_status_ns = clock.monotonic_ns()
        self.forward = Direction("forward", inner, outer)
        self.reverse = Direction("reverse", outer, inner)
        self.directions = {"forward": self.forward, "reverse": self.reverse}
        # (due_ns, arrival order, direction, frame); the arrival order breaks ties, so frames
        # due at the same time leave in the order they came.
        self.queue: list[tuple[int, int, Direction, bytes]] = []
        self.arrivals = itertools.count()
        self.buffer = bytearray(FRAME_BUFFER_BYTES)
        self.view = memoryview(self.buffer)
        self.changes = Changes(self.configure)
        self.stopping = False
        self.signals = StopSignals()
        self.stdin = StdinLines()
        self.handlers = {inner.fileno(): lambda: self.receive(self.forward),
                         outer.fileno(): lambda: self.receive(self.reverse),
                         self.signals.fd: self.take_signals}
        if self.stdin.fd is not None:
            self.handlers[self.stdin.fd] = self.read_changes
        self.watched = list(self.handlers)

    def take_signals(self) -> None:
        if self.signals.take():
            self.stopping = True

    def configure(self, document) -> None:
        """Apply a configuration or change; nothing of it when any part is invalid."""
        changes, seed = parse_config(document)
        if seed is not None:
            for direction in self.directions.values():
                direction.seed(seed)
        for name, direction_changes in changes.items():
            self.directions[name].apply(direction_changes)

    def receive(self, direction: Direction, batch: int | None = DRAIN_BATCH) -> None:
        """Queue the frames waiting on ``direction``'s interface (at most ``batch``)."""
        receive_into = direction.in_socket.recvmsg_into
        buffers = (self.buffer,)
        monotonic_ns, virtual_realtime_ns = clock.monotonic_ns, clock.virtual_realtime_ns
        # Kernel timestamps are CLOCK_REALTIME, due times CLOCK_MONOTONIC; the two only part
        # when the clock is stepped, so the offset is taken afresh for every batch.
        realtime_offset = clock.time_ns() - monotonic_ns()
        for _ in itertools.repeat(None) if batch is None else range(batch):
            try:
                size, ancillary, flags, _ = receive_into(buffers, ANCILLARY_SPACE)
            except BlockingIOError:
                return
            except OSError as error:
                # ENETDOWN once when the interface goes down; the socket rebinds when it is up.
                print(f"wire: {direction.name}: {error}", file=sys.stderr, flush=True)
                return
            now = monotonic_ns()
            if flags & MSG_TRUNC:
                direction.frames_in += 1
                direction.dropped_oversize += 1
                continue
            arrival, tag = now, None
            for level, kind, data in ancillary:
                if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET:
                    seconds, nanoseconds = TIMESPEC.unpack_from(data)
                    stamped = (virtual_realtime_ns(seconds * 1_000_000_000 + nanoseconds)
                               - realtime_offset)
                    if now - TIMESTAMP_TRUST_NS < stamped <= now:
                        arrival = stamped
                elif kind == PACKET_AUXDATA and level == SOL_PACKET:
                    status, _, _, _, _, tci, tpid = AUXDATA.unpack_from(data)
                    if status & TP_STATUS_VLAN_VALID:
                        if not status & TP_STATUS_VLAN_TPID_VALID:
                            tpid = ETH_P_8021Q
                        tag = struct.pack("!HH", tpid, tci)
            due = direction.due(arrival)
            if due is None:
                continue
            if tag is None:
                frame = self.view[:size].tobytes()
            else:
                frame = b"".join((self.view[:12], tag, self.view[12:size]))
            heapq.heappush(self.queue, (due, next(self.arrivals), direction, frame))

    def read_changes(self) -> None:
        lines = self.stdin.read()
        if lines is None:
            # End of stdin ends the changes, not the relay.
            self.watched.remove(self.stdin.fd)
            return
        for line in lines:
            self.change(line)

    def change(self, line: bytes) -> None:
        # Frames already waiting in the sockets arrived before the change was read: they are
        # queued under the settings they arrived under.
        for direction in self.directions.values():
            self.receive(direction, batch=None)
        number = self.changes.take(line)
        if number is not None:
            report({"applied": number})

    def write_status(self, now: int) -> None:
        """The statistics so far, replaced atomically once a second, for whoever watches the
        relay's load during a run (the runner warns when a wire nears its limits). Not through
        :mod:`edgebed.files`: this is a live reading, not a result, and its fsync would
        hold every frame in flight behind the disk."""
        self.next_status_ns = now + STATUS_PERIOD_NS
        temporary = f"{self.status_path}.tmp"
        try:
            with open(temporary, "w") as stream:
                json.dump(self.statistics(), stream)
            os.replace(temporary, self.status_path)
        except OSError as error:
            print(f"wire: status: {error}", file=sys.stderr, flush=True)

    def run(self) -> None:
        queue, handlers = self.queue, self.handlers
        monotonic_ns, heappop, wait = clock.monotonic_ns, heapq.heappop, select.select
        real_timeout = clock.real_timeout
        while not self.stopping:
            now = monotonic_ns()
            while queue and queue[0][0] <= now:
                due, _, direction, frame = heappop(queue)
                direction.send(frame, now - due)
                now = monotonic_ns()
            timeout = None
            if queue:
                timeout = max(0, queue[0][0] - now - SPIN_NS) / 1e9
            if self.status_path is not None:
                if now >= self.next_status_ns:
                    self.write_status(now)
                until_status = (self.next_status_ns - now) / 1e9
                timeout = until_status if timeout is None else min(timeout, until_status)
            # select() takes microseconds; epoll and poll would round up to whole milliseconds.
            readable, _, _ = wait(self.watched, (), (), real_timeout(timeout))
            for fd in readable:
                handlers[fd]()

    def statistics(self) -> dict:
        return {name: direction.statistics() for name, direction in self.directions.items()}

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m topologies.impairments.wire",
                                     description=PROTOCOL,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--forward-in", required=True, help="interface forward frames arrive on")
    parser.add_argument("--forward-out", required=True, help="interface forward frames leave by")
    parser.add_argument("--config", default="{}", help="JSON configuration (see above)")
    parser.add_argument("--cpu-latency-us", type=int, default=0,
                        help="longest a CPU may take to wake up while the relay runs (PM QoS); "
                             "0, the default, has idle CPUs poll instead of halting, -1 leaves "
                             "it to the machine")
    parser.add_argument("--status", help="file to replace with the statistics every second")
    parser.add_argument("--realtime-priority", type=int, default=REALTIME_PRIORITY,
                        help="SCHED_FIFO priority (1-99) so that busy programs on the same "
                             "cores do not hold frames back; 0 keeps normal scheduling")
    parser.add_argument("--compiled", metavar="BINARY",
                        help="forward with the compiled relay BINARY (wire_relay.c) instead of "
                             "this process; same configuration, changes and statistics")
    arguments = parser.parse_args(argv)
    try:
        document = json.loads(arguments.config)
        parse_config(document)
    except ValueError as error:
        parser.error(f"--config: {error}")
    if arguments.cpu_latency_us >= 0:
        request_cpu_latency(arguments.cpu_latency_us)
    if arguments.compiled:
        compiled = CompiledRelay(arguments.compiled, arguments.forward_in, arguments.forward_out,
                                 arguments.status, arguments.realtime_priority)
        compiled.configure(document)
        return compiled.run()
    if arguments.realtime_priority > 0:
        run_realtime(arguments.realtime_priority)
    try:
        relay = Relay(arguments.forward_in, arguments.forward_out, arguments.status)
    except OSError as error:
        parser.exit(1, f"wire: cannot open {arguments.forward_in} and "
                       f"{arguments.forward_out}: {error}\n")
    relay.configure(document)
    # The hot path makes no reference cycles; the cycle collector would only add pauses.
    gc.disable()
    relay.run()
    report(relay.statistics())
    return 0


if __name__ == "__main__":
    sys.exit(main())
