"""Round trips by ICMP echo, as a client probes its candidates (dispatch's access by probing)
and as a node watches its paths to its peers (dispatch's relay choice)."""

from __future__ import annotations

import os
import select
import socket
import statistics
import struct
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edgebed.protocol import path_metric
from edgebed import clock

ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY = 8, 0
ECHO = struct.Struct("!BBHHHQ")  # type, code, checksum, identifier, sequence, send time ns
PROBES = 5
PROBE_INTERVAL = 0.02  # seconds between a candidate's echo requests
PROBE_TIMEOUT = 0.5  # how long after the last request an answer still counts
# How often a probe told when it may stop looks again while no answer comes: what it waits on
# (a request's lower bound on its round trip) grows with time alone.
SETTLE_CHECK = 0.005


@dataclass(frozen=True)
class ProbeResult:
    """What probing one address measured: echo requests sent and answered, the round trips
    (milliseconds) of the answered ones and, for a probe stopped once its outcome was settled
    (:func:`echo_probes`' ``settled``), how long each request still unanswered then had waited
    (``waiting_ms``, milliseconds: a lower bound on its round trip, had it come). ``loss``
    counts every unanswered request, waiting ones included."""

    address: str
    sent: int
    answered: int
    rtts_ms: tuple[float, ...] = ()
    waiting_ms: tuple[float, ...] = ()

    @property
    def loss(self) -> float:
        return 1 - self.answered / self.sent if self.sent else 1.0

    @property
    def given_up(self) -> int:
        """Requests unanswered past the timeout: lost whatever comes later."""
        return self.sent - self.answered - len(self.waiting_ms)

    @property
    def rtt_p50_ms(self) -> float | None:
        return statistics.median(self.rtts_ms) if self.rtts_ms else None


def _checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


Settled = Callable[[Sequence[ProbeResult]], bool]


def echo_probe(address: str, count: int = PROBES, interval: float = PROBE_INTERVAL,
               timeout: float = PROBE_TIMEOUT) -> ProbeResult:
    """Round trips to ``address`` by ``count`` ICMP echo requests ``interval`` apart: one
    address's :func:`echo_probes`."""
    return _probe_at_once((address,), count, interval, timeout, None)[0]


def echo_probes(addresses: Sequence[str], parallel: bool = False, count: int = PROBES,
                interval: float = PROBE_INTERVAL, timeout: float = PROBE_TIMEOUT,
                settled: Settled | None = None) -> list[ProbeResult]:
    """Each of ``addresses`` probed by ``count`` ICMP echo requests ``interval`` apart (a raw
    socket: agents run as root in their hosts), one after another or, ``parallel``, all at
    once: each round sends one request to every address, so probing N candidates takes about
    as long as probing the farthest one instead of the sum of all. Either way an answer later
    than ``timeout`` after the last request counts as lost, which bounds the whole probe:
    ``(count - 1) * interval + timeout`` at most in parallel, N times that in turn. The
    kernel of any host answers, so a candidate needs no agent of its own to be probed;
    answers are matched by the socket's identifier, the address and the sequence, and timed
    by the send time they echo back.

    ``settled`` (parallel only: in turn, the candidates not yet probed have nothing to be
    judged on) is asked, once every round is sent, whether the results so far, each
    unanswered request with how long it has waited, already decide what the caller will do
    with them; when it says so the probe stops there, and the requests still waiting are in
    each result's ``waiting_ms``. A caller choosing the best candidate stops as soon as no
    answer still to come could change its choice (:func:`agents.follower.probes_settled`),
    instead of waiting for the farthest candidate's answers or a lost one's timeout."""
    if parallel:
        return _probe_at_once(tuple(addresses), count, interval, timeout, settled)
    return [_probe_at_once((address,), count, interval, timeout, None)[0]
            for address in addresses]


def _probe_at_once(addresses: tuple[str, ...], count: int, interval: float, timeout: float,
                   settled: Settled | None) -> list[ProbeResult]:
    identifier = int.from_bytes(os.urandom(2), "big")
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as sock:
        sock.setblocking(False)
        rtts: dict[str, dict[int, float]] = {address: {} for address in addresses}
        sent_ns: list[int] = []  # per round (one request to every address), when it went
        deadline = clock.monotonic()
        next_send = clock.monotonic()

        def results(waiting: bool) -> list[ProbeResult]:
            now_ns = clock.time_ns()
            return [ProbeResult(address, len(sent_ns), len(rtts[address]),
                                tuple(rtts[address][s] for s in sorted(rtts[address])),
                                tuple((now_ns - sent_ns[s]) / 1e6 for s in range(len(sent_ns))
                                      if s not in rtts[address]) if waiting else ())
                    for address in addresses]

        # Done once every request sent is answered: waiting out the timeout then would add
        # half a second per candidate to a viewer's startup.
        while len(sent_ns) < count or (any(len(got) < count for got in rtts.values())
                                       and clock.monotonic() < deadline):
            now = clock.monotonic()
            if len(sent_ns) == count and settled is not None and settled(
                    partial := results(True)):
                return partial
            if len(sent_ns) < count and now >= next_send:
                sequence = len(sent_ns)
                for address in addresses:
                    send_ns = clock.time_ns()
                    header = ECHO.pack(ICMP_ECHO_REQUEST, 0, 0, identifier, sequence, send_ns)
                    packet = ECHO.pack(ICMP_ECHO_REQUEST, 0, _checksum(header), identifier,
                                       sequence, send_ns)
                    try:
                        sock.sendto(packet, (address, 0))
                    except OSError:
                        pass  # unreachable now: counted as lost
                # After the round's last send, so that the time waited since is a lower bound
                # on every one of its round trips.
                sent_ns.append(clock.time_ns())
                next_send = now + interval
                deadline = now + timeout
                continue
            wait = (next_send if len(sent_ns) < count else deadline) - now
            if settled is not None and len(sent_ns) == count:
                wait = min(wait, SETTLE_CHECK)
            if not select.select([sock], [], [], clock.real_seconds(max(0.0, wait)))[0]:
                continue
            data, (source, _) = sock.recvfrom(2048)
            received_ns = clock.time_ns()
            offset = (data[0] & 0x0F) * 4  # a raw socket hands over the IP header too
            if source not in rtts or len(data) < offset + ECHO.size:
                continue
            kind, _, _, ident, sequence, send_ns = ECHO.unpack_from(data, offset)
            if kind == ICMP_ECHO_REPLY and ident == identifier and sequence < len(sent_ns):
                rtts[source].setdefault(sequence, (received_ns - send_ns) / 1e6)
    return results(False)


# Written by an agent whose load reports carry its paths (:class:`PathMeter`): one row per
# round of echoes to a peer, as candidate_probes has one per candidate probed.
PATH_TABLES = {
    "path_probes": ("node", "agent", "time_s", "peer", "sent", "answered", "rtt_p50_ms",
                    "rtt_max_ms"),
}


class PathMeter:
    """The paths to ``peers`` (addresses) as echo probes measure them, kept up to date by a
    daemon thread: rounds of ``count`` echo requests ``interval`` apart to each peer in turn,
    an answer later than ``timeout`` counting as lost. :meth:`figures` gives, per peer whose
    first round is done, the median round trip (s), the loss (0..1) and the jitter (mean
    absolute difference of consecutive round trips within a round, s) over its last ``rounds``
    rounds. A node probing a few peers sends ``count`` small packets per peer per round: next
    to the media it forwards, nothing. Every round is kept for :meth:`write`."""

    def __init__(self, peers: Sequence[str], *, count: int = 10, interval: float = 0.02,
                 timeout: float = PROBE_TIMEOUT, rounds: int = 10):
        self.peers = tuple(peers)
        self.count, self.interval, self.timeout = count, interval, timeout
        self._results = {peer: deque(maxlen=rounds) for peer in self.peers}
        self.history: list[tuple[int, ProbeResult]] = []  # (ended, ns since the epoch), round
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="path-meter", daemon=True)
        if self.peers:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for peer in self.peers:
                result = echo_probe(peer, self.count, self.interval, self.timeout)
                with self._lock:
                    self._results[peer].append(result)
                    self.history.append((clock.time_ns(), result))
                if self._stop.is_set():
                    return

    def figures(self) -> dict[str, float]:
        with self._lock:
            kept = {peer: tuple(results) for peer, results in self._results.items()}
        figures = {}
        for peer, results in kept.items():
            sent = sum(result.sent for result in results)
            if not sent:
                continue
            rtts = [rtt for result in results for rtt in result.rtts_ms]
            steps = [abs(b - a) for result in results
                     for a, b in zip(result.rtts_ms, result.rtts_ms[1:])]
            figures[path_metric(peer, "loss")] = 1 - len(rtts) / sent
            if rtts:
                figures[path_metric(peer, "rtt")] = statistics.median(rtts) / 1e3
                figures[path_metric(peer, "jitter")] = (statistics.fmean(steps) / 1e3
                                                        if steps else 0.0)
        return figures

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout + self.count * self.interval + 1)

    def write(self, agent) -> None:
        """The rows of ``path_probes`` (after :meth:`close`)."""
        with self._lock:
            history = list(self.history)
        for ended_ns, result in history:
            agent.row("path_probes", ended_ns / 1e9, result.address, result.sent,
                      result.answered, result.rtt_p50_ms,
                      max(result.rtts_ms) if result.rtts_ms else None)
