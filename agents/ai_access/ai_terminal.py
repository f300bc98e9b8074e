"""An AI terminal (ai_access): one AI data unit per period, sent as AI data packets and repaired by
selective retransmission of the fragments the receiver reports lost."""

from __future__ import annotations

import heapq
import itertools
import math
import select
import socket
import struct
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from pydantic import Field, model_validator

from agents.agent import Agent, AgentParams, NodeRef, epoch_seconds
from agents.flows import MalformedLog
from agents.pacing import WAKE_EARLY_NS, Pacer
from agents.sockets import DATAGRAM_BUFFER, POLL_S, listen, receive
from agents.control import ControlClient, ControlError, controller_client
from agents.follower import FOLLOWER_TABLES, DecisionFollower, Followed
from agents.ai_access.formats import AI_DATA, AI_NACK
from agents.wire import MAGIC, VERSION, pack_u16_list, unpack_u16_list
from edgebed import clock, protocol
from edgebed.quantities import Fraction, PositiveDuration, Size

TABLES = {
    **FOLLOWER_TABLES,
    # One row per AI data unit sent.
    "ai_units_sent": ("node", "agent", "stream", "unit", "fragments", "sent", "retransmitted",
                      "nacks_received"),
    # One row per flow that asked the controller for access: its join and the answer.
    "ai_joins": ("node", "agent", "stream", "flow", "requested_s", "response_ms", "sends",
                 "server", "port", "refusal"),
}

DATA_PORT = 6100
NACK_PORT = 6101
MAX_DATAGRAM = 1500 - 20 - 8  # the UDP payload of one Ethernet frame, IPv4 without options
WIRE_OVERHEAD = 8 + 20 + 14  # UDP, IPv4, Ethernet around each datagram
PORT_ATTRIBUTE = "port"  # the decision attribute naming the receive port (ai_access's policies)
MAX_FRAGMENT_PAYLOAD = MAX_DATAGRAM - AI_DATA.header_size
# Fragment indexes one NACK carries without leaving its Ethernet frame.
NACK_CAPACITY = (MAX_DATAGRAM - AI_NACK.header_size) // 2
SPEC_FRAGMENTS, SPEC_FRAGMENT_PAYLOAD = 945, 711  # ai_access: "one 672 KB unit = 945 packets"
# What changes from packet to packet: unit, fragment, fragments, length, send time.
PER_PACKET = struct.Struct("!IHHHQ")
PER_PACKET_OFFSET = AI_DATA.field_offset("unit")


def flow_name(stream: int) -> str:
    """The name of an AI data stream in the terminal's and the receiver's tables."""
    return f"ai-{stream}"


def nack_messages(stream: int, unit: int, fragments: list[int],
                  capacity: int = NACK_CAPACITY) -> list[bytes]:
    """The AI NACK datagrams listing ``fragments`` of a unit: as many as it takes to keep each
    within ``capacity`` indexes (by default, within an Ethernet frame); none for no fragments."""
    return [AI_NACK.pack(stream=stream, unit=unit, count=len(chunk)) + pack_u16_list(chunk)
            for chunk in (fragments[first:first + capacity]
                          for first in range(0, len(fragments), capacity))]


def read_nack(message) -> tuple[int, int, list[int]]:
    """(stream, unit, fragment indexes) of an AI NACK datagram; ValueError for anything else,
    including a list whose length disagrees with the datagram's."""
    if len(message) < AI_NACK.header_size:
        raise ValueError("shorter than an AI NACK header")
    header = AI_NACK.unpack(message)
    if len(message) != AI_NACK.header_size + 2 * header["count"]:
        raise ValueError(f"{len(message)} bytes do not hold {header['count']} fragment indexes")
    return (header["stream"], header["unit"],
            unpack_u16_list(message, AI_NACK.header_size, header["count"]))


class UnitTiming(AgentParams):
    """When a unit's packets are due, which the terminal and the receiver must agree on."""

    period: PositiveDuration = Field(1.0, description="one unit per period")
    send_window: Fraction = Field(0.5, gt=0, description="share of the period over which a "
                                                         "unit's packets are paced")

    @property
    def period_ns(self) -> int:
        return round(self.period * 1e9)

    @property
    def window_ns(self) -> int:
        return round(self.send_window * self.period * 1e9)

    def gap_ns(self, fragments: int) -> float:
        """Time between two consecutive first transmissions of a unit of ``fragments``."""
        return self.window_ns / fragments


class Params(UnitTiming):
    """Where the units go, how large they are, and whether lost fragments are sent again."""

    to: NodeRef
    port: int = Field(DATA_PORT, ge=1, le=65535, description="the receiver's data port")
    nack_port: int = Field(NACK_PORT, ge=1, le=65535, description="where this terminal "
                                                                  "listens for NACKs")
    stream: int = Field(0, ge=0, lt=2**32, description="stream id, carried in every packet")
    streams: list[int] = Field([], description="stream ids of the flows this host sends, each "
                                               "its own flow (default: stream alone)")
    flows: Optional[int] = Field(None, ge=1, description="instead of streams: this many flows, "
                                                         "stream ids stream, stream + 1, ...")
    service: Optional[protocol.Name] = Field(None, description="join this controller service "
                                                              "for each flow and follow its "
                                                              "decisions")
    join_together: bool = Field(False, description="send every flow's join at once (one "
                                                   "batch the controller decides together), "
                                                   "the flows' starts spread over one packet "
                                                   "gap; default: one flow after the other, "
                                                   "their starts spread over a period")
    unit_bytes: Size = Field(SPEC_FRAGMENTS * SPEC_FRAGMENT_PAYLOAD,
                            description="bytes of one AI data unit (the spec's 672 KB)")
    fragment_payload: int = Field(SPEC_FRAGMENT_PAYLOAD, ge=1, le=MAX_FRAGMENT_PAYLOAD,
                                  description="unit bytes per packet, after the header")
    retransmit: bool = Field(True, description="retransmit the fragments NACKs list")
    units: Optional[int] = Field(None, ge=1, description="units to send; default: until "
                                                         "stopped")

    @model_validator(mode="after")
    def _fragments_fit(self) -> "Params":
        if self.fragments > 2**16 - 1:
            raise ValueError(f"a unit of {self.unit_bytes:g} bytes takes {self.fragments} "
                             f"fragments, more than a u16 index counts: raise fragment_payload")
        if self.flows is not None and self.streams:
            raise ValueError("give streams or flows, not both")
        if len(set(self.stream_ids)) != len(self.stream_ids) or not all(
                0 <= stream < 2**32 for stream in self.stream_ids):
            raise ValueError("streams must be distinct stream ids (0 to 2**32 - 1)")
        return self

    @property
    def stream_ids(self) -> list[int]:
        if self.flows is not None:
            return list(range(self.stream, self.stream + self.flows))
        return list(self.streams) or [self.stream]

    @property
    def demand(self) -> float:
        """Bit/s a flow needs while its units are sent: its packets on the wire over the send
        window."""
        wire = round(self.unit_bytes) + self.fragments * (AI_DATA.header_size + WIRE_OVERHEAD)
        return wire * 8 / (self.send_window * self.period)

    @property
    def fragments(self) -> int:
        return math.ceil(round(self.unit_bytes) / self.fragment_payload)

    def fragment_length(self, fragment: int) -> int:
        """Unit bytes in packet ``fragment``: ``fragment_payload``, the last one the rest."""
        if fragment < self.fragments - 1:
            return self.fragment_payload
        return round(self.unit_bytes) - (self.fragments - 1) * self.fragment_payload


@dataclass
class UnitSending:
    """One unit while its period is open: what was sent, what waits for retransmission."""

    unit: int
    opens_ns: int
    closes_ns: int
    next_fragment: int = 0  # the next first copy to send
    sent: int = 0
    retransmitted: int = 0
    nacks_received: int = 0
    retransmission_due_ns: int = 0
    waiting: deque = field(default_factory=deque)  # fragment indexes to retransmit, in order
    waiting_set: set = field(default_factory=set)


@dataclass
class Totals:
    units: int = 0
    sent: int = 0
    retransmitted: int = 0
    nacks_received: int = 0


class StreamSender:
    """One flow: its data socket and packet, where it sends, the unit open now."""

    def __init__(self, agent: Agent, params: Params, stream: int):
        self.agent, self.params, self.stream = agent, params, stream
        self.first_opens_ns = 0  # set when the flows start
        self.data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.data.bind(("", 0))
        self.source_port = self.data.getsockname()[1]
        self.destination: tuple[str, int] | None = None
        self.follower: DecisionFollower | None = None
        self.packet = bytearray(AI_DATA.header_size + params.fragment_payload)
        AI_DATA.struct.pack_into(self.packet, 0, MAGIC, VERSION, AI_DATA.type, stream,
                                 0, 0, 0, 0, 0)
        self.packet_view = memoryview(self.packet)
        self.pacer = Pacer()
        self.send_errors = self.stale_nacks = 0
        self.current: UnitSending | None = None
        self.totals = Totals()
        self.gap_ns = params.gap_ns(params.fragments)

    def aim(self, decision: Followed | None) -> None:
        """Send to ``to`` at the port ``decision`` names (None: ``port``)."""
        port = self.params.port
        if decision is not None and decision.attributes.get(PORT_ATTRIBUTE) is not None:
            port = int(decision.attributes[PORT_ATTRIBUTE])
        self.destination = (self.params.to, port)
        self.data.connect(self.destination)

    def open(self, unit: int) -> None:
        opens_ns = self.first_opens_ns + unit * self.params.period_ns
        self.current = UnitSending(unit, opens_ns, opens_ns + self.params.period_ns)

    def send(self, fragment: int) -> bool:
        """Send one packet of the current unit now; False when the socket refused it."""
        length = self.params.fragment_length(fragment)
        PER_PACKET.pack_into(self.packet, PER_PACKET_OFFSET, self.current.unit, fragment,
                             self.params.fragments, length, clock.time_ns())
        try:
            self.data.send(self.packet_view[:AI_DATA.header_size + length])
        except OSError:
            # An ICMP error from an earlier packet (nobody listening yet) or a full queue: this
            # packet is lost, and the receiver asks for it again.
            self.send_errors += 1
            return False
        return True

    def take_nack(self, unit: int, fragments: list[int]) -> None:
        """Queue the fragments of the current unit a NACK lists that are not queued already."""
        sending = self.current
        if sending is None or unit != sending.unit:
            self.stale_nacks += 1  # for a unit already abandoned (or never sent)
            return
        sending.nacks_received += 1
        if not self.params.retransmit:
            return
        for index in fragments:
            if index not in sending.waiting_set:
                sending.waiting_set.add(index)
                sending.waiting.append(index)

    def next_due(self, now_ns: int) -> tuple[int, str]:
        """When this flow acts next and how: ``first`` (a first copy), ``again`` (a
        retransmission, paced at the unit's packet gap from the first NACK's arrival on, so a
        long NACK does not become a burst) or ``close`` (its period ends)."""
        sending = self.current
        if sending.next_fragment < self.params.fragments:
            return sending.opens_ns + round(sending.next_fragment * self.gap_ns), "first"
        if sending.waiting:
            due_ns = max(sending.retransmission_due_ns + round(self.gap_ns), now_ns)
            if due_ns < sending.closes_ns:
                return due_ns, "again"
            return now_ns, "close"
        return sending.closes_ns - WAKE_EARLY_NS, "close"

    def act(self, due_ns: int, kind: str) -> None:
        sending = self.current
        if kind == "first":
            self.pacer.wait_until(due_ns)
            sending.sent += self.send(sending.next_fragment)
            sending.next_fragment += 1
        elif kind == "again":
            self.pacer.wait_until(due_ns)
            sending.retransmission_due_ns = due_ns
            index = sending.waiting.popleft()
            sending.waiting_set.discard(index)
            sending.retransmitted += self.send(index)
        else:
            self.close()
            if self.params.units is None or self.totals.units < self.params.units:
                self.open(sending.unit + 1)

    def close(self) -> None:
        """The unit's row; what still waits for retransmission is dropped."""
        sending, self.current = self.current, None
        self.agent.row("ai_units_sent", self.stream, sending.unit, self.params.fragments,
                       sending.sent, sending.retransmitted, sending.nacks_received)
        totals = self.totals
        totals.units += 1
        totals.sent += sending.sent
        totals.retransmitted += sending.retransmitted
        totals.nacks_received += sending.nacks_received

    def summary(self) -> dict:
        totals = self.totals
        return {"stream": self.stream, "units": totals.units,
                "fragments": self.params.fragments, "unit_bytes": round(self.params.unit_bytes),
                "sent": totals.sent, "retransmitted": totals.retransmitted,
                "nacks_received": totals.nacks_received, "stale_nacks": self.stale_nacks,
                "send_errors": self.send_errors,
                "lateness": self.pacer.report(self.agent, flow_name(self.stream))}


class Timetable:
    """The flows' next actions, soonest first: a heap, so that choosing the next one costs
    log n with hundreds of flows, not a look at every flow. A flow planned again supersedes
    its earlier plan (a NACK changes what it does next); one with no unit open has none."""

    def __init__(self):
        self._heap: list[tuple[int, int, str, StreamSender]] = []
        self._plans: dict[StreamSender, int] = {}  # the order number of each flow's plan
        self._order = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._plans)

    def plan(self, sender: StreamSender, now_ns: int) -> None:
        if sender.current is None:
            self._plans.pop(sender, None)
            return
        order = self._plans[sender] = next(self._order)
        due_ns, kind = sender.next_due(now_ns)
        heapq.heappush(self._heap, (due_ns, order, kind, sender))

    def first(self) -> tuple[int, str, StreamSender]:
        """The soonest plan: (when, what, which flow)."""
        while self._plans.get(self._heap[0][3]) != self._heap[0][1]:
            heapq.heappop(self._heap)  # superseded
        due_ns, _, kind, sender = self._heap[0]
        return due_ns, kind, sender


class Terminal:
    """The terminal host's flows, its NACK socket and its control client."""

    def __init__(self, agent: Agent, params: Params, nacks: socket.socket,
                 control: ControlClient | None = None):
        self.agent, self.params, self.nacks, self.control = agent, params, nacks, control
        self.nack_port = nacks.getsockname()[1]
        self.buffer = bytearray(DATAGRAM_BUFFER)
        self.malformed = MalformedLog()
        self.senders = {stream: StreamSender(agent, params, stream)
                        for stream in params.stream_ids}
        self.refused: dict[int, str | None] = {}

    def join(self) -> None:
        """Each flow's destination: joined through the controller (``service``), or ``to``."""
        if self.params.service is None or self.control is None:
            for sender in self.senders.values():
                sender.aim(None)
        else:
            for sender in self.senders.values():
                sender.follower = DecisionFollower(
                    self.control, self.params.service, demand=self.params.demand,
                    port=sender.source_port, probe=None)
            if self.params.join_together:
                self._join_together()
            else:
                for sender in self.senders.values():
                    self._joined(sender, sender.follower.join())
        # The flows start their schedules now that every one knows where to send, spread over
        # a period; a batch's over one packet gap, so that no flow starts a period late and
        # no two flows' packets fall due at the same instant.
        start_ns = clock.monotonic_ns()
        spread = round(self.params.gap_ns(self.params.fragments) if self.params.join_together
                       else self.params.period_ns) // len(self.senders)
        for index, sender in enumerate(self.senders.values()):
            sender.first_opens_ns = start_ns + index * spread
            if sender.destination is not None:
                sender.open(0)

    def _join_together(self) -> None:
        """Every flow's join in one exchange: subscribed first, then all sent at once."""
        senders = list(self.senders.values())
        try:
            self.control.subscribe()
        except ControlError as error:
            for sender in senders:
                sender.follower.refusal = str(error)
                self._joined(sender, None)
            return
        answers = self.control.join_all([sender.follower.asking for sender in senders])
        for sender, answer in zip(senders, answers):
            self._joined(sender, sender.follower.answered(answer), answer.sends)

    def _joined(self, sender: StreamSender, decision: Followed | None,
                sends: int | None = None) -> None:
        """Aim ``sender`` where its join's ``decision`` says (None: it was refused, and does
        not send) and write the join's row."""
        follower = sender.follower
        if decision is None:
            self.refused[sender.stream] = follower.refusal
        else:
            sender.aim(decision)
        timing = follower.timing
        self.agent.row("ai_joins", sender.stream, follower.flow,
                       epoch_seconds(timing.requested_ns) if timing is not None else None,
                       f"{timing.response_ms:.3f}" if timing is not None else None, sends,
                       decision.server if decision is not None else None,
                       sender.destination[1] if sender.destination is not None else None,
                       follower.refusal)

    def follow_decisions(self) -> None:
        """Point each flow where the decisions pushed since the last look send it."""
        by_flow = {sender.follower.flow: sender for sender in self.senders.values()
                   if sender.follower is not None}
        for pushed in self.control.pending():
            sender = by_flow.get(pushed.flow)
            if sender is not None and (changed := sender.follower.take(pushed)) is not None:
                sender.aim(changed)

    def read_nacks(self) -> set[StreamSender]:
        """Take every NACK waiting on the socket, each to its flow; returns the flows that
        took one."""
        took = set()
        while (arrival := receive(self.nacks, self.buffer)) is not None:
            message = memoryview(self.buffer)[:arrival[0]]
            try:
                stream, unit, fragments = read_nack(message)
                if stream not in self.senders or not all(
                        index < self.params.fragments for index in fragments):
                    raise ValueError("not a NACK for this terminal's streams")
            except ValueError:
                self.malformed.add(self.nack_port, message)
                continue
            self.senders[stream].take_nack(unit, fragments)
            took.add(self.senders[stream])
        return took

    def run(self) -> dict:
        """Send every flow's units until ``units`` are done or the agent stops; returns the
        summary."""
        watched = [self.nacks] + ([self.control] if self.control is not None else [])
        timetable = Timetable()
        for sender in self.senders.values():
            if sender.current is not None:
                timetable.plan(sender, clock.monotonic_ns())
        try:
            while not self.agent.stopping and timetable:
                now_ns = clock.monotonic_ns()
                due_ns, kind, sender = timetable.first()
                if due_ns - now_ns > WAKE_EARLY_NS:
                    # Nothing due yet: wait for NACKs and decisions meanwhile.
                    select.select(watched, [], [], clock.real_seconds(
                        min(POLL_S, (due_ns - now_ns - WAKE_EARLY_NS) / 1e9)))
                else:
                    sender.act(due_ns, kind)
                    timetable.plan(sender, clock.monotonic_ns())
                for took in self.read_nacks():
                    timetable.plan(took, clock.monotonic_ns())
                if self.control is not None:
                    self.follow_decisions()
            for sender in self.senders.values():
                if sender.current is not None:
                    sender.close()  # stopped: the open unit's row
        finally:
            for sender in self.senders.values():
                sender.data.close()
        self.malformed.write(self.agent)
        flows = [sender.summary() for sender in self.senders.values()]
        followed = {stream: sender.follower.write(self.agent)
                    for stream, sender in self.senders.items() if sender.follower is not None}
        totals = {"malformed": self.malformed.count,
                  "refused": {str(stream): why for stream, why in self.refused.items()}}
        if followed:
            totals["followed"] = {str(stream): summary for stream, summary in followed.items()}
        if len(flows) == 1:
            return flows[0] | totals
        return {"streams": flows, "units": sum(flow["units"] for flow in flows),
                "sent": sum(flow["sent"] for flow in flows),
                "retransmitted": sum(flow["retransmitted"] for flow in flows),
                "nacks_received": sum(flow["nacks_received"] for flow in flows),
                "send_errors": sum(flow["send_errors"] for flow in flows)} | totals


def main(argv: list[str] | None = None) -> int:
    agent = Agent("ai_terminal", argv, TABLES)
    params = Params.model_validate(agent.params)
    nacks = listen(params.nack_port)
    nacks.setblocking(False)  # read between packets without waiting; select() does the waiting
    control = controller_client(agent.node) if params.service is not None else None
    if params.service is not None and control is None:
        raise SystemExit("ai_terminal: service needs the run's controller "
                         "($EDGEBED_CONTROLLER is not set)")
    try:
        terminal = Terminal(agent, params, nacks, control)
        terminal.join()
        summary = terminal.run()
    finally:
        nacks.close()
        if control is not None:
            control.close()
    agent.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
