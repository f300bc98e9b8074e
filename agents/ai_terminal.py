"""An AI terminal (seed 003): one AI data unit per period, sent as AI data packets and repaired by
selective retransmission of the fragments the receiver reports lost.

    python -m agents.ai_terminal --node NAME --out RUN_DIR --params JSON [--seed N]

Unit u (0, 1, ...) opens at ``start + u * period``. Its ``unit_bytes`` bytes travel in
``ceil(unit_bytes / fragment_payload)`` AI data packets (``agents.formats.AI_DATA``) of
``fragment_payload`` bytes, the last one shorter; fragment i of n is due ``i * send_window *
period / n`` after the unit opens, on absolute deadlines (:class:`~agents.common.Pacer`), so the
unit leaves in the first ``send_window`` of its period. The defaults are the spec's: one 672 KB
unit a second in 945 packets of 711 bytes (671,895 bytes; ``unit_bytes: 672KB`` takes 946).

The terminal listens on ``nack_port`` for AI NACKs (stream, unit, then one u16 fragment index per
lost packet; :func:`nack_messages` builds them, :func:`read_nack` reads them) and retransmits
exactly the fragments listed (one already waiting for its retransmission is not queued again),
paced at the unit's own packet gap, for as long as the unit's period is open. When the period
ends the unit is abandoned: what still waits for retransmission is dropped, and later NACKs for
it are only counted. With ``retransmit: false`` NACKs are counted and ignored.

Each unit gets a row of ``ai_units_sent`` when its period ends (or the terminal stops): fragments,
packets sent the first time, retransmissions, NACKs received. Every send's lateness goes to
``sender_lateness``. Datagrams on the NACK port that are not well-formed NACKs for this stream
are counted in ``malformed``. The terminal stops after ``units`` units or on SIGTERM or SIGINT.

This module also holds what the terminal and :mod:`agents.ai_receiver` must agree on: the
ports, the unit's timing, the flow name and the NACK messages.
"""

from __future__ import annotations

import math
import select
import socket
import struct
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from pydantic import Field, model_validator

from agents.common import (POLL_S, WAKE_EARLY_NS, Agent, AgentParams, MalformedLog, NodeRef,
                           Pacer, receive)
from agents.formats import AI_DATA, AI_NACK, MAGIC, VERSION, pack_u16_list, unpack_u16_list
from agents.common import DATAGRAM_BUFFER, listen
from topologies.model import Fraction, PositiveDuration, Size

TABLES = {
    # One row per AI data unit sent.
    "ai_units_sent": ("node", "agent", "stream", "unit", "fragments", "sent", "retransmitted",
                      "nacks_received"),
}

DATA_PORT = 6100
NACK_PORT = 6101
MAX_DATAGRAM = 1500 - 20 - 8  # the UDP payload of one Ethernet frame, IPv4 without options
MAX_FRAGMENT_PAYLOAD = MAX_DATAGRAM - AI_DATA.header_size
# Fragment indexes one NACK carries without leaving its Ethernet frame.
NACK_CAPACITY = (MAX_DATAGRAM - AI_NACK.header_size) // 2
SPEC_FRAGMENTS, SPEC_FRAGMENT_PAYLOAD = 945, 711  # seed 003: "one 672 KB unit = 945 packets"
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
        return self

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
    closes_ns: int
    sent: int = 0
    retransmitted: int = 0
    nacks_received: int = 0
    waiting: deque = field(default_factory=deque)  # fragment indexes to retransmit, in order
    waiting_set: set = field(default_factory=set)


class Terminal:
    """The sending side: the data socket, the NACK socket and the packet being built."""

    def __init__(self, agent: Agent, params: Params, nacks: socket.socket):
        self.agent, self.params, self.nacks = agent, params, nacks
        self.nack_port = nacks.getsockname()[1]
        self.data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.data.connect((params.to, params.port))
        self.packet = bytearray(AI_DATA.header_size + params.fragment_payload)
        AI_DATA.struct.pack_into(self.packet, 0, MAGIC, VERSION, AI_DATA.type, params.stream,
                                 0, 0, 0, 0, 0)
        self.packet_view = memoryview(self.packet)
        self.buffer = bytearray(DATAGRAM_BUFFER)
        self.pacer = Pacer()
        self.malformed = MalformedLog()
        self.send_errors = self.stale_nacks = 0
        self.current: UnitSending | None = None

    def send(self, fragment: int) -> bool:
        """Send one packet of the current unit now; False when the socket refused it."""
        length = self.params.fragment_length(fragment)
        PER_PACKET.pack_into(self.packet, PER_PACKET_OFFSET, self.current.unit, fragment,
                             self.params.fragments, length, time.time_ns())
        try:
            self.data.send(self.packet_view[:AI_DATA.header_size + length])
        except OSError:
            # An ICMP error from an earlier packet (nobody listening yet) or a full queue: this
            # packet is lost, and the receiver asks for it again.
            self.send_errors += 1
            return False
        return True

    def read_nacks(self) -> None:
        """Take every NACK waiting on the socket: queue the fragments of the current unit it
        lists that are not queued already."""
        while (arrival := receive(self.nacks, self.buffer)) is not None:
            message = memoryview(self.buffer)[:arrival[0]]
            try:
                stream, unit, fragments = read_nack(message)
                if stream != self.params.stream or not all(
                        index < self.params.fragments for index in fragments):
                    raise ValueError("not a NACK for this stream's units")
            except ValueError:
                self.malformed.add(self.nack_port, message)
                continue
            sending = self.current
            if sending is None or unit != sending.unit:
                self.stale_nacks += 1  # for a unit already abandoned (or never sent)
                continue
            sending.nacks_received += 1
            if not self.params.retransmit:
                continue
            for index in fragments:
                if index not in sending.waiting_set:
                    sending.waiting_set.add(index)
                    sending.waiting.append(index)

    def send_unit(self, unit: int, opens_ns: int) -> None:
        """Send unit ``unit`` and repair it until its period closes (or the agent stops)."""
        params = self.params
        sending = self.current = UnitSending(unit, opens_ns + params.period_ns)
        gap_ns = params.gap_ns(params.fragments)
        for fragment in range(params.fragments):
            if self.agent.stopping:
                return
            self.pacer.wait_until(opens_ns + round(fragment * gap_ns))
            sending.sent += self.send(fragment)
            self.read_nacks()
        retransmission_due_ns = 0
        while not self.agent.stopping:
            now_ns = time.monotonic_ns()
            if sending.waiting:
                # Retransmissions leave at the unit's own packet rate, from the first NACK's
                # arrival on, so a long NACK does not become a burst.
                retransmission_due_ns = max(retransmission_due_ns + round(gap_ns), now_ns)
                if retransmission_due_ns >= sending.closes_ns:
                    return
                self.pacer.wait_until(retransmission_due_ns)
                index = sending.waiting.popleft()
                sending.waiting_set.discard(index)
                sending.retransmitted += self.send(index)
            elif now_ns >= sending.closes_ns - WAKE_EARLY_NS:
                return
            else:
                select.select([self.nacks], [], [],
                              min(POLL_S, (sending.closes_ns - WAKE_EARLY_NS - now_ns) / 1e9))
            self.read_nacks()

    def run(self) -> dict:
        """Send unit after unit until ``units`` are done or the agent stops; returns the
        summary."""
        params = self.params
        start_ns = time.monotonic_ns()
        units = sent = retransmitted = nacks = 0
        try:
            while not self.agent.stopping and (params.units is None or units < params.units):
                self.send_unit(units, start_ns + units * params.period_ns)
                sending = self.current
                self.agent.row("ai_units_sent", params.stream, sending.unit, params.fragments,
                               sending.sent, sending.retransmitted, sending.nacks_received)
                units += 1
                sent += sending.sent
                retransmitted += sending.retransmitted
                nacks += sending.nacks_received
        finally:
            self.data.close()
        self.malformed.write(self.agent)
        return {"stream": params.stream, "units": units, "fragments": params.fragments,
                "unit_bytes": round(params.unit_bytes), "sent": sent,
                "retransmitted": retransmitted, "nacks_received": nacks,
                "stale_nacks": self.stale_nacks, "send_errors": self.send_errors,
                "malformed": self.malformed.count,
                "lateness": self.pacer.report(self.agent, flow_name(params.stream))}


def main(argv: list[str] | None = None) -> int:
    agent = Agent("ai_terminal", argv, TABLES)
    params = Params.model_validate(agent.params)
    nacks = listen(params.nack_port)
    nacks.setblocking(False)  # read between packets without waiting; select() does the waiting
    try:
        summary = Terminal(agent, params, nacks).run()
    finally:
        nacks.close()
    agent.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
