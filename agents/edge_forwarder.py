"""An edge (or relay) forwarder: receives media on a port and sends every packet on to one or
more next hops, after an emulated processing delay and within a processing budget.

    python -m agents.edge_forwarder --node NAME --out RUN_DIR --params JSON [--seed N]

Packets are forwarded as they came, so the source's stream id, sequence number and send time
reach the viewers and end-to-end loss and delay stay measurable; with ``rung`` or ``bitrate``
set (the edge transcodes) those two header fields are rewritten.

The edge processes packets one at a time, in arrival order, like a single worker: each takes
``1 / budget_packets`` seconds or its UDP payload bits over ``budget`` seconds, whichever is
longer (no budget: no time). At most ``queue`` packets are held for processing, the one being
processed included; a packet arriving to a full queue is dropped and counted. An overloaded
edge thus first delays packets, then drops what exceeds its capacity, as a real one does; no
drop is left to chance. A packet leaves ``processing_delay`` after its processing ends (the
latency of, say, a transcoder's pipeline, which does not limit its throughput).

The input is measured like a viewer's (:class:`agents.media.MediaMeter`: ``flows``,
``flow_seconds``, ``frames``, ``malformed``). Per stream, ``forwarding`` counts packets
received, forwarded, dropped over budget and unsent (still held when the edge stopped), and the
largest backlog; ``sender_lateness`` says how late packets left against their due times (the
edge sleeps in select until shortly before a departure and spins the rest). It listens like
the viewer (``listening on PORT`` on stderr) and stops on SIGTERM or SIGINT or after
``duration``.
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

from pydantic import Field

from agents.common import SPIN_NS, Agent, AgentParams, NodeRef, Pacer, receive
from agents.formats import MEDIA
from agents.streamer import flow_name
from agents.common import DATAGRAM_BUFFER, listen
from agents.media import MEDIA_TABLES, MediaMeter
from topologies.model import Duration, Rate

TABLES = {
    **MEDIA_TABLES,
    # Per stream, what became of the packets it received.
    "forwarding": ("node", "agent", "flow", "received", "forwarded", "dropped", "unsent",
                   "drop_fraction", "backlog_max"),
}

RUNG = struct.Struct("!B")
RUNG_OFFSET = MEDIA.field_offset("rung")
BITRATE = struct.Struct("!I")
BITRATE_OFFSET = MEDIA.field_offset("bitrate_kbps")
IDLE_WAIT_S = 0.1  # how often an edge with nothing to send looks at its stop flag


class Params(AgentParams):
    """Where the edge listens and forwards to, and what it can process."""

    port: int = Field(5004, ge=0, le=65535, description="media port; 0: any free port")
    to: list[NodeRef] = Field(min_length=1, description="next hops")
    to_port: int = Field(5004, ge=1, le=65535)
    processing_delay: Duration = Field(0.0, description="latency added to every packet")
    budget: Optional[Rate] = Field(None, gt=0, description="UDP payload bits per second the "
                                                           "edge can process")
    budget_packets: Optional[float] = Field(None, gt=0, description="packets per second the "
                                                                    "edge can process")
    queue: int = Field(100, ge=1, description="packets held for processing at most, the one "
                                              "being processed included; more are dropped")
    rung: Optional[int] = Field(None, ge=0, le=255, description="rewrite the rung field")
    bitrate: Optional[Rate] = Field(None, gt=0, description="rewrite the bitrate field")
    duration: Optional[Duration] = Field(None, description="default: until stopped")


class ProcessingBudget:
    """The edge's worker: when each packet's processing ends, or that it is dropped."""

    def __init__(self, bits_per_s: float | None, packets_per_s: float | None, queue: int):
        self.ns_per_bit = 1e9 / bits_per_s if bits_per_s else 0.0
        self.ns_per_packet = 1e9 / packets_per_s if packets_per_s else 0.0
        self.queue = queue
        self.held: deque[int] = deque()  # processing end times of the packets held
        self.free_ns = 0

    def admit(self, now_ns: int, size: int) -> int | None:
        """When processing of a packet of ``size`` bytes arriving at ``now_ns`` ends, or None
        when the queue is full and the packet is dropped."""
        while self.held and self.held[0] <= now_ns:
            self.held.popleft()
        if len(self.held) >= self.queue:
            return None
        self.free_ns = max(now_ns, self.free_ns) + round(max(self.ns_per_packet,
                                                             size * 8 * self.ns_per_bit))
        self.held.append(self.free_ns)
        return self.free_ns


@dataclass
class ForwardedStream:
    """One stream through the edge: what became of its packets, how punctually they left."""

    received: int = 0
    forwarded: int = 0
    dropped: int = 0
    unsent: int = 0
    backlog_max: int = 0
    pacer: Pacer = field(default_factory=Pacer)


def forward(agent: Agent, params: Params, sock: socket.socket, meter: MediaMeter) -> dict:
    """Receive, measure and forward until stopped; returns the summary."""
    budget = ProcessingBudget(params.budget, params.budget_packets, params.queue)
    processing_delay_ns = round(params.processing_delay * 1e9)
    hops = [(address, params.to_port) for address in params.to]
    streams: dict[int, ForwardedStream] = {}
    departures: deque[tuple[int, ForwardedStream, bytearray]] = deque()  # due ns, stream, data
    buffer = bytearray(DATAGRAM_BUFFER)
    send_errors = 0
    end = math.inf if params.duration is None else time.monotonic() + params.duration
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
        while not agent.stopping and time.monotonic() < end:
            # Departures first, so that a flood of arrivals cannot hold them back. The due times
            # only grow (one worker, one delay), so the deque is in departure order.
            wait_s = IDLE_WAIT_S
            if departures:
                due_ns, stream, data = departures[0]
                wait_ns = due_ns - time.monotonic_ns()
                if wait_ns <= SPIN_NS:
                    # The last stretch is spun, not slept: select() wakes a millisecond late
                    # now and then, a spin does not.
                    departures.popleft()
                    stream.pacer.wait_until(due_ns)
                    for hop in hops:
                        try:
                            out.sendto(data, hop)
                        except OSError:
                            send_errors += 1  # a full queue: the next hop sees the gap
                    stream.forwarded += 1
                    continue
                wait_s = (wait_ns - SPIN_NS) / 1e9
            if not select.select([sock], [], [], wait_s)[0]:
                continue
            arrival = receive(sock, buffer)
            if arrival is None:
                continue
            size = arrival[0]
            stream_id = meter.add(buffer, *arrival)
            if stream_id is None:
                continue
            stream = streams.get(stream_id)
            if stream is None:
                stream = streams[stream_id] = ForwardedStream()
            stream.received += 1
            processed_ns = budget.admit(time.monotonic_ns(), size)
            if processed_ns is None:
                stream.dropped += 1
                continue
            stream.backlog_max = max(stream.backlog_max, len(budget.held))
            data = bytearray(memoryview(buffer)[:size])
            if params.rung is not None:
                RUNG.pack_into(data, RUNG_OFFSET, params.rung)
            if params.bitrate is not None:
                BITRATE.pack_into(data, BITRATE_OFFSET, round(params.bitrate / 1e3))
            departures.append((processed_ns + processing_delay_ns, stream, data))
    for _, stream, _ in departures:
        stream.unsent += 1
    summaries = {}
    for stream_id, stream in sorted(streams.items()):
        agent.row("forwarding", flow_name(stream_id), stream.received, stream.forwarded,
                  stream.dropped, stream.unsent, stream.dropped / stream.received,
                  stream.backlog_max)
        summaries[flow_name(stream_id)] = {
            "received": stream.received, "forwarded": stream.forwarded,
            "dropped": stream.dropped, "unsent": stream.unsent,
            "backlog_max": stream.backlog_max,
            "lateness": stream.pacer.report(agent, flow_name(stream_id))}
    return {"next_hops": params.to, "send_errors": send_errors, "forwarding": summaries}


def main(argv: list[str] | None = None) -> int:
    agent = Agent("edge_forwarder", argv, TABLES)
    params = Params.model_validate(agent.params)
    sock = listen(params.port)
    meter = MediaMeter(sock.getsockname()[1])
    try:
        summary = forward(agent, params, sock, meter)
    finally:
        sock.close()
    agent.finish({"input": meter.write(agent)} | summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
