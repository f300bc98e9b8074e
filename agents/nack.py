"""NACK-based loss recovery between two media hops (LiveNet's hop-by-hop retransmission): the
receiving side finds the packets missing from each stream's sequence and asks the hop the stream
came from for them, each a bounded number of times; the sending side keeps what it sent lately
and sends a packet again, unchanged, when asked. Pure bookkeeping: the agents own the sockets.

All times are CLOCK_REALTIME nanoseconds, the clock of the media packets' ``send_ns``."""

from __future__ import annotations

import socket
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from enum import Enum

from pydantic import BaseModel, Field

from agents.agent import Agent
from edgebed import clock
from agents.flows import flow_name
from agents.formats import MEDIA, MEDIA_NACK
from agents.wire import MAGIC, VERSION
from edgebed.quantities import Duration, PositiveDuration

NACK_TABLES = {
    # Per stream received with NACKs on: what was asked of the hop it came from and what became
    # of it. asked = repaired + repaired_late + unrepaired + pending (asked, still in time).
    "nack_requests": ("node", "agent", "flow", "upstream", "nacks_sent", "asked", "repaired",
                      "repaired_late", "unrepaired", "pending", "send_errors"),
}
RETRANSMISSION_TABLES = {
    # Per stream and peer sent with a send buffer: the NACKs it answered. resent_bytes is the
    # recovery's bandwidth cost.
    "retransmissions": ("node", "agent", "flow", "peer", "nacks_received", "asked", "resent",
                        "resent_bytes", "missed"),
}

FOLLOWING = 16  # sequences after the first one NACK can ask for (its bitmask)
# A jump in a stream's sequence longer than this is a restart (a new session, a long outage),
# not losses worth asking for: the send buffer holds far fewer.
MAX_GAP = 1024


class NackParams(BaseModel):
    """What an agent with NACK-based loss recovery takes (its ``Params`` derive from this)."""

    nack: bool = Field(False, description="ask the hop a stream comes from for its missing "
                                          "packets, and keep a send buffer to answer the hops "
                                          "served")
    nack_wait: Duration = Field(0.02, description="NACK: a gap this old is a loss, not "
                                                  "reordering; a stream silent this long after "
                                                  "a frame's packet lost the frame's rest")
    nack_retries: int = Field(1, ge=1, le=10, description="NACK: times a missing packet is "
                                                          "asked for at most")
    nack_interval: PositiveDuration = Field(0.25, description="NACK: between two asks for a "
                                                              "packet, and from the last one to "
                                                              "giving it up; longer than the "
                                                              "hop's round trip")
    nack_deadline: PositiveDuration = Field(0.5, description="NACK: a repair arriving later "
                                                             "than this after its packet was "
                                                             "sent is late (the playout delay)")
    nack_buffer_packets: int = Field(1024, ge=1, description="NACK: packets the send buffer "
                                                             "holds at most")
    nack_buffer_age: PositiveDuration = Field(1.0, description="NACK: the send buffer holds a "
                                                               "packet this long at most")

    def receiver(self) -> "NackReceiver | None":
        if not self.nack:
            return None
        return NackReceiver(round(self.nack_wait * 1e9), self.nack_retries,
                            round(self.nack_interval * 1e9), round(self.nack_deadline * 1e9))

    def send_buffer(self) -> "SendBuffer | None":
        if not self.nack:
            return None
        return SendBuffer(self.nack_buffer_packets, round(self.nack_buffer_age * 1e9))


def nack_messages(stream: int, sequences, send_ns: int) -> list[bytes]:
    """The NACKs asking for ``sequences`` of ``stream``: each the first sequence not yet asked
    and a bit for each missing one of the 16 after it."""
    messages = []
    pending = sorted(sequences)
    index = 0
    while index < len(pending):
        first, following = pending[index], 0
        index += 1
        while index < len(pending) and pending[index] - first <= FOLLOWING:
            following |= 1 << (pending[index] - first - 1)
            index += 1
        messages.append(MEDIA_NACK.pack(stream=stream, sequence=first, following=following,
                                        send_ns=send_ns))
    return messages


def asked_sequences(data) -> tuple[int, list[int]]:
    """The stream a NACK is about and the sequences it asks for; ValueError when ``data`` is
    not a NACK."""
    if len(data) < MEDIA_NACK.header_size:
        raise ValueError("too short for a media_nack")
    values = MEDIA_NACK.unpack(data)
    first, following = values["sequence"], values["following"]
    return values["stream"], [first] + [first + 1 + bit for bit in range(FOLLOWING)
                                        if following >> bit & 1]


def is_nack(data, size: int) -> bool:
    return (size >= MEDIA_NACK.header_size and data[:2] == MAGIC and data[2] == VERSION
            and data[3] == MEDIA_NACK.type)


class Arrival(Enum):
    """What a media packet was to its stream's sequence."""

    NEW = "new"  # the next one, past a gap, or a reordered one back within the wait
    REPAIRED = "repaired"  # asked for, back before its deadline
    LATE = "late"  # asked for, back after its deadline or after it was given up
    OLD = "old"  # a duplicate, or older than anything tracked


@dataclass(slots=True)
class Missing:
    """A packet missing from a stream: when it is next asked for (or given up), how often it
    was."""

    due_ns: int
    asks: int = 0


class StreamGaps:
    """One stream's sequence as received: the gaps in it, which are asked for once they are
    older than the reorder wait, again every ``interval_ns`` up to ``retries`` times, then given
    up. A stream silent for the wait after a packet of a frame whose later fragments did not
    come has a trailing gap of as many packets (a frame's packets are consecutive)."""

    def __init__(self, wait_ns: int, retries: int, interval_ns: int, deadline_ns: int):
        self.wait_ns = wait_ns
        self.retries = retries
        self.interval_ns = interval_ns
        self.deadline_ns = deadline_ns
        self.highest: int | None = None
        self.trailing = 0  # packets of the highest packet's frame still to come after it
        self.last_ns = 0
        self.missing: dict[int, Missing] = {}
        self.given_up: set[int] = set()
        self.nacks = self.asked = self.repaired = self.repaired_late = 0

    def receive(self, sequence: int, fragment: int, fragments: int, send_ns: int,
                now_ns: int) -> Arrival:
        self.last_ns = now_ns
        if self.highest is None or sequence > self.highest:
            if self.highest is not None and sequence - self.highest <= MAX_GAP:
                for lost in range(self.highest + 1, sequence):
                    self.missing[lost] = Missing(now_ns + self.wait_ns)
            self.highest, self.trailing = sequence, fragments - 1 - fragment
            return Arrival.NEW
        entry = self.missing.pop(sequence, None)
        if entry is not None and entry.asks == 0:
            return Arrival.NEW
        if entry is not None and now_ns - send_ns <= self.deadline_ns:
            self.repaired += 1
            return Arrival.REPAIRED
        if entry is not None or sequence in self.given_up:
            self.given_up.discard(sequence)
            self.repaired_late += 1
            return Arrival.LATE
        return Arrival.OLD

    def due(self, now_ns: int) -> list[int]:
        """The sequences to ask for now; gives up those asked ``retries`` times already."""
        if self.trailing and now_ns - self.last_ns >= self.wait_ns:
            for lost in range(self.highest + 1, self.highest + 1 + self.trailing):
                self.missing[lost] = Missing(now_ns)
            self.highest += self.trailing
            self.trailing = 0
        asking = []
        for sequence, entry in list(self.missing.items()):
            if now_ns < entry.due_ns:
                continue
            if entry.asks >= self.retries:
                del self.missing[sequence]
                self.given_up.add(sequence)
                continue
            self.asked += entry.asks == 0
            entry.asks += 1
            entry.due_ns = now_ns + self.interval_ns
            asking.append(sequence)
        return asking

    def next_due_ns(self) -> int | None:
        """When :meth:`due` next has something to do: the earliest ask or give-up, or the end of
        the wait for a trailing gap; None when nothing is pending."""
        times = [entry.due_ns for entry in self.missing.values()]
        if self.trailing:
            times.append(self.last_ns + self.wait_ns)
        return min(times, default=None)

    @property
    def unrepaired(self) -> int:
        return len(self.given_up)

    @property
    def pending(self) -> int:
        return sum(1 for entry in self.missing.values() if entry.asks)

    def figures(self) -> dict:
        return {"nacks_sent": self.nacks, "asked": self.asked, "repaired": self.repaired,
                "repaired_late": self.repaired_late, "unrepaired": self.unrepaired,
                "pending": self.pending}


@dataclass
class TrackedStream:
    """A stream received with NACKs on, and the hop it comes from."""

    gaps: StreamGaps
    upstream: tuple = ()
    send_errors: int = 0


class NackReceiver:
    """The receiving side of one socket: each stream's gaps, asked of the address its packets
    come from."""

    def __init__(self, wait_ns: int, retries: int, interval_ns: int, deadline_ns: int):
        self.settings = (wait_ns, retries, interval_ns, deadline_ns)
        self.streams: dict[int, TrackedStream] = {}

    def receive(self, buffer, received_ns: int, address: tuple) -> Arrival:
        """Track the media packet in ``buffer`` (checked by :class:`agents.media.MediaMeter`)
        from ``address``."""
        values = MEDIA.unpack(buffer)
        tracked = self.streams.get(values["stream"])
        if tracked is None:
            tracked = self.streams[values["stream"]] = TrackedStream(StreamGaps(*self.settings))
        tracked.upstream = address
        return tracked.gaps.receive(values["sequence"], values["fragment"],
                                    values["fragments"], values["send_ns"], received_ns)

    def ask(self, sock: socket.socket, now_ns: int) -> None:
        """Send the NACKs due now from ``sock`` to each stream's upstream."""
        for stream, tracked in self.streams.items():
            sequences = tracked.gaps.due(now_ns)
            if not sequences:
                continue
            for message in nack_messages(stream, sequences, now_ns):
                try:
                    sock.sendto(message, tracked.upstream)
                    tracked.gaps.nacks += 1
                except OSError:
                    tracked.send_errors += 1  # a full queue: the packet stays missing

    def next_due_ns(self) -> int | None:
        """When :meth:`ask` next has something to send or give up (CLOCK_REALTIME ns); None
        when nothing is pending."""
        return min((due for tracked in self.streams.values()
                    if (due := tracked.gaps.next_due_ns()) is not None), default=None)

    def write(self, agent: Agent) -> dict:
        """The ``nack_requests`` rows; returns the figures of all streams together."""
        totals: dict[str, int] = {}
        for stream, tracked in sorted(self.streams.items()):
            figures = tracked.gaps.figures() | {"send_errors": tracked.send_errors}
            agent.row("nack_requests", flow_name(stream), tracked.upstream[0],
                      *figures.values())
            for name, value in figures.items():
                totals[name] = totals.get(name, 0) + value
        return totals


# What became of the NACKs one peer sent about one stream (missed: asked for, no longer or never
# held), the retransmissions table's figures.
ANSWERED = RETRANSMISSION_TABLES["retransmissions"][4:]


@dataclass
class SendBuffer:
    """What a sender sent lately, by destination, stream and sequence: at most ``packets``
    packets, none older than ``age_ns``; a NACK is answered with those it asks for still
    held."""

    packets: int
    age_ns: int
    held: OrderedDict = field(default_factory=OrderedDict)  # (peer, stream, seq) -> (ns, data)
    answered: dict[tuple, Counter] = field(default_factory=dict)  # (stream, peer) -> ANSWERED

    def add(self, peer: tuple, stream: int, sequence: int, data: bytes, now_ns: int) -> None:
        self.held[peer, stream, sequence] = (now_ns, data)
        self._expire(now_ns)

    def _expire(self, now_ns: int) -> None:
        while self.held and (len(self.held) > self.packets
                             or next(iter(self.held.values()))[0] < now_ns - self.age_ns):
            self.held.popitem(last=False)

    def answer(self, data, peer: tuple, now_ns: int) -> list[bytes]:
        """The packets the NACK in ``data`` from ``peer`` asks for that are still held, to send
        back to it; ValueError when ``data`` is not a NACK."""
        stream, sequences = asked_sequences(data)
        self._expire(now_ns)
        packets = [held[1] for sequence in sequences
                   if (held := self.held.get((peer, stream, sequence))) is not None]
        self.answered.setdefault((stream, peer), Counter()).update(
            nacks_received=1, asked=len(sequences), resent=len(packets),
            resent_bytes=sum(map(len, packets)), missed=len(sequences) - len(packets))
        return packets

    def write(self, agent: Agent) -> dict:
        """The ``retransmissions`` rows; returns the figures of all streams and peers
        together."""
        for (stream, peer), counts in sorted(self.answered.items()):
            agent.row("retransmissions", flow_name(stream), peer[0],
                      *(counts[name] for name in ANSWERED))
        totals = sum(self.answered.values(), Counter())
        return {name: totals[name] for name in ANSWERED}


def resend(sock: socket.socket, sent: SendBuffer, data, peer: tuple) -> int:
    """Send ``peer`` from ``sock`` what its NACK ``data`` asks for and ``sent`` holds; returns
    the sends that failed (a full queue: the asker gives the packet up after its last ask)."""
    failed = 0
    for packet in sent.answer(data, peer, clock.time_ns()):
        try:
            sock.sendto(packet, peer)
        except OSError:
            failed += 1
    return failed


def answer_waiting(sock: socket.socket, sent: SendBuffer, buffer: bytearray) -> int:
    """Answer the NACKs waiting on ``sock`` (a sender's own socket), reading without waiting;
    anything else waiting there is dropped. Returns the sends that failed. A connected socket's
    pending refusal (ConnectionRefusedError) is the caller's to handle."""
    failed = 0
    while True:
        try:
            size, peer = sock.recvfrom_into(buffer, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return failed
        if is_nack(buffer, size):
            failed += resend(sock, sent, memoryview(buffer)[:size], peer)
