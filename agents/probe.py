"""A UDP probe measuring one-way delay, loss, reordering, duplicates and delay variation."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import socket
import statistics
import struct
import sys
from dataclasses import dataclass, field

from edgebed.files import atomic_output, atomic_write

from agents.flows import percentile
from agents.pacing import Pacer
from agents.sockets import (RECEIVE_BUFFER, SO_RCVBUFFORCE, SO_TIMESTAMPNS, TIMESPEC,
                            udp_socket_drops)
from edgebed import clock

MAGIC = b"EBPR"
# The fields after the magic (name, struct code), as the wire messages declare theirs;
# the Wireshark dissector is generated from both (agents/dissector.py).
FIELDS = (("flow", "I"), ("sequence", "Q"), ("send_ns", "Q"))
TIMESTAMPS = frozenset({"send_ns"})  # CLOCK_REALTIME nanoseconds, as in the wire messages
HEADER = struct.Struct("!4s" + "".join(code for _, code in FIELDS))
HEADER_SIZE = HEADER.size
# The part of the header that changes from packet to packet, patched in place when sending.
SEQUENCE_AND_TIME = struct.Struct("!QQ")
SEQUENCE_OFFSET = 8
MAX_SIZE = 65507  # the largest UDP payload over IPv4

SCM_TIMESTAMPNS = SO_TIMESTAMPNS


@dataclass(frozen=True)
class ProbeHeader:
    flow: int
    sequence: int
    send_ns: int


def encode(flow: int, sequence: int, send_ns: int, size: int = HEADER_SIZE) -> bytes:
    """The payload of one probe packet, padded with zero bytes to ``size``."""
    if not HEADER_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"payload size must be {HEADER_SIZE} to {MAX_SIZE} bytes, not {size}")
    payload = bytearray(size)
    HEADER.pack_into(payload, 0, MAGIC, flow, sequence, send_ns)
    return bytes(payload)


def decode(payload) -> ProbeHeader | None:
    """The header of a probe payload, or None when ``payload`` is not one (too short or the
    wrong magic)."""
    if len(payload) < HEADER_SIZE:
        return None
    magic, flow, sequence, send_ns = HEADER.unpack_from(payload, 0)
    if magic != MAGIC:
        return None
    return ProbeHeader(flow, sequence, send_ns)


def interarrival_jitter_ns(transits_ns) -> float:
    """RFC 3550 interarrival jitter of transit times given in arrival order:
    J += (|D| - J) / 16, D being the difference between consecutive transit times."""
    jitter = 0.0
    previous = None
    for transit in transits_ns:
        if previous is not None:
            jitter += (abs(transit - previous) - jitter) / 16
        previous = transit
    return jitter


def loss_interval(lost: int, total: int, confidence: float = 0.99) -> tuple[float, float]:
    """Wilson score interval for a loss fraction of ``lost`` out of ``total`` packets.

    The interval holds exactly the loss probabilities p for which the observed fraction is
    within z standard errors sqrt(p(1-p)/n) of p, so "p is inside the interval" is the same
    test as "the measurement is inside p's two-sided binomial (normal approximation) range".
    """
    if total <= 0 or not 0 <= lost <= total:
        raise ValueError(f"no loss interval for {lost} lost out of {total} packets")
    z = statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    fraction = lost / total
    z2_n = z * z / total
    centre = (fraction + z2_n / 2) / (1 + z2_n)
    half_width = (z / (1 + z2_n)) * math.sqrt(fraction * (1 - fraction) / total
                                              + z2_n / (4 * total))
    return max(0.0, centre - half_width), min(1.0, centre + half_width)


def summarize(records, sent: int | None = None) -> dict:
    """Loss, duplicates, reordering, one-way delay and jitter of one flow.

    ``records`` are ``(sequence, send_ns, recv_ns)`` in arrival order. Lost packets are
    ``sent`` minus the distinct sequences received; without ``sent``, the gaps below the
    highest sequence received (so a lost tail goes unnoticed). A packet is reordered when its
    first copy arrives after a higher sequence; later copies count as duplicates only. Delay
    statistics and jitter take every arrival, duplicates included; ``std`` is the population
    standard deviation. ``lost`` comes out negative (and there is no interval) when more
    distinct sequences arrived than ``sent`` says were sent.
    """
    records = list(records)
    seen: set[int] = set()
    duplicates = reordered = 0
    highest = -1
    for sequence, _, _ in records:
        if sequence in seen:
            duplicates += 1
            continue
        seen.add(sequence)
        if sequence < highest:
            reordered += 1
        highest = max(highest, sequence)
    expected = sent if sent is not None else highest + 1
    lost = expected - len(seen)
    summary = {
        "received": len(records),
        "unique": len(seen),
        "sent": sent,
        "lost": lost,
        "loss_fraction": lost / expected if expected > 0 else None,
        "loss_interval_99": (list(loss_interval(lost, expected))
                             if expected > 0 and 0 <= lost else None),
        "duplicates": duplicates,
        "reordered": reordered,
        "delay_ms": None,
        "jitter_ms": None,
    }
    if records:
        transits = [recv_ns - send_ns for _, send_ns, recv_ns in records]
        delays_ms = sorted(transit / 1e6 for transit in transits)
        summary["delay_ms"] = {
            "mean": statistics.fmean(delays_ms),
            "p50": percentile(delays_ms, 50),
            "p99": percentile(delays_ms, 99),
            "min": delays_ms[0],
            "max": delays_ms[-1],
            "std": statistics.pstdev(delays_ms),
        }
        summary["jitter_ms"] = interarrival_jitter_ns(transits) / 1e6
    return summary


@dataclass
class Sender:
    """Sends ``count`` probe packets to ``address``:``port`` at ``rate_pps`` (0: as fast as
    the socket takes them).

    Packet i is due at start + i / rate on the monotonic clock; the sender sleeps until
    shortly before each deadline and spins for the rest, or with a ``quantum_us`` wakes at most
    once per quantum and sends what is due (:class:`~agents.pacing.Pacer`). A packet sent late
    does not move the schedule, the following ones catch up, so the achieved rate does not
    drift.
    """

    address: str
    port: int
    rate_pps: float
    count: int
    size: int = 64
    flow: int = 0
    quantum_us: float = 0.0

    def run(self) -> dict:
        """Send every packet; returns a summary of what was sent and how punctually."""
        payload = bytearray(encode(self.flow, 0, 0, self.size))
        pacer = Pacer(quantum_ns=round(self.quantum_us * 1e3)) if self.rate_pps > 0 else None
        sent = errors = 0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((self.address, self.port))
            start = clock.monotonic_ns()
            first = last = start
            for sequence in range(self.count):
                if pacer is not None:
                    deadline = start + round(sequence * 1e9 / self.rate_pps)
                    now = deadline + pacer.wait_until(deadline)
                else:
                    now = clock.monotonic_ns()
                SEQUENCE_AND_TIME.pack_into(payload, SEQUENCE_OFFSET, sequence, clock.time_ns())
                try:
                    sock.send(payload)
                except OSError:
                    # An ICMP error from an earlier packet (nobody listening yet) or a full
                    # device queue: this packet is not sent, the receiver sees a gap.
                    errors += 1
                    continue
                if sent == 0:
                    first = now
                last = now
                sent += 1
        duration_s = (last - first) / 1e9
        lateness_ns = sorted(pacer.lateness_ns) if pacer is not None else []
        return {
            "flow": self.flow,
            "size": self.size,
            "requested_rate_pps": self.rate_pps,
            "count": self.count,
            "sent": sent,
            "send_errors": errors,
            # From the first send to the last: n packets span n - 1 intervals.
            "duration_s": duration_s,
            "rate_pps": (sent - 1) / duration_s if duration_s > 0 else None,
            "lateness_us": {
                "p50": percentile(lateness_ns, 50) / 1e3,
                "p99": percentile(lateness_ns, 99) / 1e3,
                "max": lateness_ns[-1] / 1e3,
            } if lateness_ns else None,
        }


@dataclass
class Receiver:
    """Receives the probe packets of one flow on UDP ``port`` (0: any free port, see
    :attr:`port` after construction) and measures them.

    The socket is bound on construction, so a sender can be started as soon as the receiver
    exists. :meth:`run` returns after ``duration_s``, or ``grace_s`` after ``expect`` packets of
    the flow have arrived (stragglers and duplicates still count), or soon after :meth:`stop`.
    Datagrams that are not probe packets, or belong to another flow, are counted and skipped.
    """

    port: int
    duration_s: float
    expect: int | None = None
    flow: int = 0
    bind_address: str = "0.0.0.0"
    grace_s: float = 0.5
    records: list[tuple[int, int, int]] = field(default_factory=list, init=False)
    datagrams: int = field(default=0, init=False)
    not_probe: int = field(default=0, init=False)
    other_flow: int = field(default=0, init=False)
    receive_buffer: int = field(default=0, init=False)
    _stop_requested: bool = field(default=False, init=False)

    def __post_init__(self):
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
        except PermissionError:
            # Without CAP_NET_ADMIN the kernel caps the buffer at net.core.rmem_max.
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        # The kernel reports double the size it accepted, the extra being for its bookkeeping.
        self.receive_buffer = self._socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        self._socket.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        # A kernel receive timeout rather than Python's socket timeout, which would poll()
        # before every read: one more system call per packet. A read that times out raises
        # BlockingIOError, and the loop looks at the clock and the stop flag again.
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                struct.pack("@ll", 0, 100_000))  # struct timeval: 0.1 s
        self._socket.bind((self.bind_address, self.port))
        self.port = self._socket.getsockname()[1]

    def stop(self) -> None:
        """Make :meth:`run` return within a tenth of a second (safe from signal handlers and
        other threads)."""
        self._stop_requested = True

    def run(self) -> dict:
        """Receive until done; returns the flow's :func:`summarize` figures plus counters."""
        buffer = bytearray(65536)
        control_size = socket.CMSG_SPACE(TIMESPEC.size)
        started = clock.monotonic()
        deadline = started + self.duration_s
        stopped = "duration"
        try:
            while True:
                if self._stop_requested:
                    stopped = "stop requested"
                    break
                if clock.monotonic() >= deadline:
                    break
                try:
                    size, control, _, _ = self._socket.recvmsg_into([buffer], control_size)
                except BlockingIOError:
                    continue
                self.datagrams += 1
                if size < HEADER_SIZE:
                    self.not_probe += 1
                    continue
                magic, flow, sequence, send_ns = HEADER.unpack_from(buffer, 0)
                if magic != MAGIC:
                    self.not_probe += 1
                    continue
                if flow != self.flow:
                    self.other_flow += 1
                    continue
                self.records.append((sequence, send_ns, receive_time_ns(control)))
                if len(self.records) == self.expect:
                    stopped = "expected packets arrived"
                    deadline = min(deadline, clock.monotonic() + self.grace_s)
        finally:
            socket_drops = udp_socket_drops(self._socket)
            self._socket.close()
        return summarize(self.records, self.expect) | {
            "flow": self.flow,
            "port": self.port,
            "expect": self.expect,
            "datagrams": self.datagrams,
            "not_probe": self.not_probe,
            "other_flow": self.other_flow,
            "receive_buffer_bytes": self.receive_buffer,
            # Of the lost: those this socket dropped itself, its receive buffer full (the
            # receiver did not keep up), not the path; None where the kernel does not say.
            "socket_drops": socket_drops,
            "listened_s": clock.monotonic() - started,
            "stopped": stopped,
        }


def receive_time_ns(control) -> int:
    """The kernel's receive timestamp from recvmsg's control messages (SCM_TIMESTAMPNS), or
    the current time if the kernel attached none."""
    for level, kind, data in control:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
            seconds, nanoseconds = TIMESPEC.unpack(data[:TIMESPEC.size])
            return clock.virtual_realtime_ns(seconds * 1_000_000_000 + nanoseconds)
    return clock.time_ns()


def write_json(summary: dict, path: str | None) -> None:
    text = json.dumps(summary, indent=2) + "\n"
    if path is None:
        sys.stdout.write(text)
    else:
        atomic_write(path, text)


def write_records(path: str, flow: int, records) -> None:
    with atomic_output(path, newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["flow", "seq", "send_ns", "recv_ns"])
        writer.writerows((flow, *record) for record in records)


def endpoint(text: str) -> tuple[str, int]:
    """``IP:PORT`` as given to ``--to``."""
    address, separator, port = text.rpartition(":")
    if not separator or not address or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected IP:PORT, not {text!r}")
    return address, int(port)


def payload_size(text: str) -> int:
    size = int(text)
    if not HEADER_SIZE <= size <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"must be {HEADER_SIZE} to {MAX_SIZE} bytes")
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.probe",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    send = commands.add_parser("send", help="send probe packets at a fixed rate")
    send.add_argument("--to", type=endpoint, required=True, metavar="IP:PORT")
    send.add_argument("--rate", type=float, required=True, metavar="PPS",
                      help="packets per second; 0 sends as fast as possible")
    send.add_argument("--count", type=int, required=True, metavar="N")
    send.add_argument("--size", type=payload_size, default=64, metavar="BYTES",
                      help="UDP payload size (default 64)")
    send.add_argument("--flow", type=int, default=0, metavar="ID")
    send.add_argument("--quantum", type=float, default=0.0, metavar="US",
                      help="wake at most once per US microseconds and send what is due, "
                           "instead of spinning to each deadline (default 0: spin)")
    send.add_argument("--output", metavar="FILE", help="JSON summary (default: stdout)")
    receive = commands.add_parser("receive", help="receive and measure probe packets")
    receive.add_argument("--port", type=int, required=True)
    receive.add_argument("--duration", type=float, required=True, metavar="SECONDS")
    receive.add_argument("--expect", type=int, metavar="N",
                         help="packets the sender sends: losses are counted against it and "
                              "the receiver stops shortly after that many arrived")
    receive.add_argument("--flow", type=int, default=0, metavar="ID")
    receive.add_argument("--output", metavar="FILE", help="JSON summary (default: stdout)")
    receive.add_argument("--records", metavar="FILE.csv",
                         help="per-packet records: flow, seq, send_ns, recv_ns")
    arguments = parser.parse_args(argv)

    if arguments.command == "send":
        if arguments.rate < 0 or arguments.count < 1 or arguments.quantum < 0:
            parser.error("--rate and --quantum must be at least 0 and --count at least 1")
        address, port = arguments.to
        summary = Sender(address, port, arguments.rate, arguments.count, arguments.size,
                         arguments.flow, arguments.quantum).run()
        write_json(summary, arguments.output)
        return 0

    receiver = Receiver(arguments.port, arguments.duration, arguments.expect, arguments.flow)
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signal_number, lambda *_: receiver.stop())
    print(f"listening on {receiver.port}", file=sys.stderr, flush=True)
    summary = receiver.run()
    if arguments.records:
        write_records(arguments.records, receiver.flow, receiver.records)
    write_json(summary, arguments.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
