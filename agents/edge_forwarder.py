"""An edge (or relay) forwarder: receives media on a port and sends every packet on to one or
more next hops, after an emulated processing delay and within a processing budget. The next
hops are fixed (``to``) or follow the controller's decisions (``follow``: relays, cascades)."""

from __future__ import annotations

import math
import select
import socket
import struct
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from pydantic import Field

from pydantic import model_validator

from agents.agent import SEND_BUFFER_FULL, Agent, AgentParams, NodeRef, epoch_seconds
from agents.pacing import SPIN_NS, Pacer, ProcessingParams
from agents.sockets import (BURST_DATAGRAMS, DATAGRAM_BUFFER, burst, listen,
                            record_socket_drops, sending_without_waiting)
from agents.control import ControlClient, controller_client
from agents.follower import FOLLOWER_TABLES, Followed, follow_pushed
from agents.formats import MEDIA
from agents.media import MEDIA_TABLES, MediaMeter
from agents.nack import RETRANSMISSION_TABLES, NackParams, answer_waiting
from agents.flows import flow_name
from edgebed import clock, protocol
from edgebed.quantities import Duration, Rate

TABLES = {
    **MEDIA_TABLES,
    **RETRANSMISSION_TABLES,
    **FOLLOWER_TABLES,
    # Per stream, what became of the packets it received.
    "forwarding": ("node", "agent", "flow", "received", "forwarded", "dropped", "unsent",
                   "drop_fraction", "backlog_max", "unrouted"),
}

RUNG = struct.Struct("!B")
RUNG_OFFSET = MEDIA.field_offset("rung")
BITRATE = struct.Struct("!I")
BITRATE_OFFSET = MEDIA.field_offset("bitrate_kbps")
STREAM_SEQUENCE = struct.Struct("!II")  # contiguous in a media header
STREAM_SEQUENCE_OFFSET = MEDIA.field_offset("stream")
IDLE_WAIT_S = 0.1  # how often an edge with nothing to send looks at its stop flag


class Params(NackParams, AgentParams, ProcessingParams):
    """Where the edge listens and forwards to, what it can process, and whether it keeps a
    send buffer to answer its next hops' NACKs (:class:`agents.nack.NackParams`)."""

    port: int = Field(5004, ge=0, le=65535, description="media port; 0: any free port")
    to: list[NodeRef] = Field([], description="next hops (with follow: of the streams no "
                                              "decision followed routes yet)")
    follow: dict[protocol.Flow, list[int]] = Field(
        {}, description="flows whose pushed decisions route streams: flow -> the stream ids "
                        "it carries ([]: every stream no other flow names)")
    fan_out: bool = Field(False, description="with follow: a decision reroutes only the copy "
                                             "for its server; the other next hops of to stay")
    to_port: int = Field(5004, ge=1, le=65535)
    processing_delay: Duration = Field(0.0, description="latency added to every packet")
    rung: Optional[int] = Field(None, ge=0, le=255, description="rewrite the rung field")
    bitrate: Optional[Rate] = Field(None, gt=0, description="rewrite the bitrate field")
    duration: Optional[Duration] = Field(None, description="default: until stopped")

    @model_validator(mode="after")
    def _somewhere_to_send(self) -> "Params":
        if not self.to and not self.follow:
            raise ValueError("give next hops (to) or flows whose decisions route (follow)")
        claimed = [stream for streams in self.follow.values() for stream in streams]
        if len(claimed) != len(set(claimed)):
            raise ValueError("a stream id is named by more than one followed flow")
        if sum(not streams for streams in self.follow.values()) > 1:
            raise ValueError("at most one followed flow takes every other stream ([])")
        return self


def next_hop(node: str, decision: protocol.Decision) -> str:
    """The address ``node`` sends a flow to under ``decision``: the hop after it on the via
    chain, the server after the last relay, or the server when the chain leaves it off."""
    names = [hop.name for hop in decision.via]
    if node in names[:-1]:
        return decision.via[names.index(node) + 1].address
    return decision.address


class Routes:
    """Where each stream goes next: by the decision followed for its flow (``follow``), else
    to the static next hops."""

    def __init__(self, node: str, static: list[str], port: int,
                 follow: dict[str, list[int]], control: ControlClient | None,
                 fan_out: bool = False):
        self.node = node
        self.fan_out = fan_out
        self.static = tuple((address, port) for address in static)
        self.port = port
        self.control = control
        self.flow_of_stream = {stream: flow for flow, streams in follow.items()
                               for stream in streams}
        self.catch_all = next((flow for flow, streams in follow.items() if not streams), None)
        self.followers = {flow: None for flow in follow}  # created by the first decision
        self.hops: dict[str, tuple[tuple[str, int], ...]] = {}  # flow -> hops now
        self.switches: list[dict] = []

    def flow(self, stream_id: int) -> str | None:
        return self.flow_of_stream.get(stream_id, self.catch_all)

    def of(self, stream_id: int) -> tuple[tuple[str, int], ...]:
        return self.hops.get(self.flow(stream_id), self.static)

    def take_pushed(self) -> list[str]:
        """Follow the decisions the controller pushed since the last call; the flows whose
        next hop changed."""
        changed = []
        for pushed in self.control.pending():
            if pushed.flow not in self.followers:
                continue  # a flow this node serves or relays without following it here
            followed = follow_pushed(self.followers, self.control, pushed)
            if followed is not None and self._route(followed):
                changed.append(pushed.flow)
        return changed

    def _route(self, followed: Followed) -> bool:
        decision = followed.decision
        hop = (next_hop(self.node, decision), self.port)
        hops = (hop,)
        if self.fan_out:
            hops = tuple(other for other in self.static
                         if other != (decision.address, self.port)) + hops
        before = self.hops.get(decision.flow, self.static)
        if before == hops:
            return False
        self.hops[decision.flow] = hops
        self.switches.append({"time_s": epoch_seconds(followed.heard_ns),
                              "flow": decision.flow, "version": decision.version,
                              "from": [address for address, _ in before], "to": hop[0]})
        return True

    def write(self, agent: Agent) -> dict:
        """The followers' ``decisions_followed`` rows; the summary of what was followed."""
        return {flow: follower.write(agent) for flow, follower in self.followers.items()
                if follower is not None}


@dataclass
class ForwardedStream:
    """One stream through the edge: what became of its packets, how punctually they left, and
    where it goes now."""

    hops: tuple[tuple[str, int], ...]
    received: int = 0
    forwarded: int = 0
    dropped: int = 0
    unsent: int = 0
    unrouted: int = 0  # processed while no next hop was known (follow, no decision yet)
    backlog_max: int = 0
    pacer: Pacer = field(default_factory=Pacer)


def forward(agent: Agent, params: Params, sock: socket.socket, meter: MediaMeter,
            routes: Routes) -> dict:
    """Receive, measure and forward until stopped; returns the summary."""
    budget = params.worker()
    processing_delay_ns = round(params.processing_delay * 1e9)
    watched = [sock] if routes.control is None else [sock, routes.control]
    streams: dict[int, ForwardedStream] = {}
    departures: deque[tuple[int, ForwardedStream, bytearray]] = deque()  # due ns, stream, data
    buffer = bytearray(DATAGRAM_BUFFER)
    send_errors = 0
    sent = params.send_buffer()
    end = math.inf if params.duration is None else clock.monotonic() + params.duration

    def departure_due() -> bool:
        return bool(departures) and departures[0][0] - clock.monotonic_ns() <= SPIN_NS

    # A send fails at once rather than wait, and is counted: a blocking send would hold every
    # stream's departures back.
    with sending_without_waiting(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as out:
        if sent is not None:
            out.bind(("0.0.0.0", 0))  # the next hops' NACKs come back to it
            watched.append(out)
        while not agent.stopping and clock.monotonic() < end:
            # Departures first, so that a flood of arrivals cannot hold them back. The due times
            # only grow (one worker, one delay), so the deque is in departure order.
            wait_s = IDLE_WAIT_S
            if departures:
                due_ns, stream, data = departures[0]
                wait_ns = due_ns - clock.monotonic_ns()
                if wait_ns <= SPIN_NS:
                    # The last stretch is spun, not slept: select() wakes a millisecond late
                    # now and then, a spin does not.
                    departures.popleft()
                    stream.pacer.wait_until(due_ns)
                    if not stream.hops:
                        stream.unrouted += 1  # its flow's first decision has not come yet
                        continue
                    for hop in stream.hops:
                        try:
                            out.sendto(data, hop)
                            if sent is not None:
                                sent.add(hop, *STREAM_SEQUENCE.unpack_from(
                                    data, STREAM_SEQUENCE_OFFSET), bytes(data), clock.time_ns())
                        except OSError:
                            send_errors += 1  # a full send buffer: the next hop sees the gap
                    stream.forwarded += 1
                    continue
                wait_s = (wait_ns - SPIN_NS) / 1e9
            readable = select.select(watched, [], [], clock.real_seconds(wait_s))[0]
            if routes.control is not None and routes.control in readable:
                for flow in routes.take_pushed():
                    for stream_id, stream in streams.items():
                        if routes.flow(stream_id) == flow:
                            stream.hops = routes.of(stream_id)
            if sent is not None and out in readable:
                send_errors += answer_waiting(out, sent, buffer)
            if sock not in readable:
                continue
            # Every datagram waiting, one wake-up for a burst, until a departure comes due.
            for arrival in burst(sock, buffer, BURST_DATAGRAMS, departure_due):
                size = arrival[0]
                stream_id = meter.add(buffer, *arrival)
                if stream_id is None:
                    continue
                stream = streams.get(stream_id)
                if stream is None:
                    stream = streams[stream_id] = ForwardedStream(routes.of(stream_id))
                stream.received += 1
                processed_ns = budget.admit(clock.monotonic_ns(), size)
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
        if send_errors:
            agent.row("agent_drops", SEND_BUFFER_FULL, "", out.getsockname()[1], send_errors)
    for _, stream, _ in departures:
        stream.unsent += 1
    summaries = {}
    for stream_id, stream in sorted(streams.items()):
        agent.row("forwarding", flow_name(stream_id), stream.received, stream.forwarded,
                  stream.dropped, stream.unsent, stream.dropped / stream.received,
                  stream.backlog_max, stream.unrouted)
        summaries[flow_name(stream_id)] = {
            "received": stream.received, "forwarded": stream.forwarded,
            "dropped": stream.dropped, "unsent": stream.unsent,
            "unrouted": stream.unrouted, "backlog_max": stream.backlog_max,
            "lateness": stream.pacer.report(agent, flow_name(stream_id))}
    return {"next_hops": params.to, "send_errors": send_errors,
            "socket_drops": record_socket_drops(agent, sock), "forwarding": summaries,
            "switches": routes.switches,
            "nack": sent.write(agent) if sent is not None else None}


def main(argv: list[str] | None = None) -> int:
    agent = Agent("edge_forwarder", argv, TABLES)
    params = Params.model_validate(agent.params)
    control = None
    if params.follow:
        control = controller_client(agent.node)
        if control is None:
            raise SystemExit("edge_forwarder: follow needs the run's controller "
                             "($EDGEBED_CONTROLLER is not set)")
        # Before the media socket, so no decision pushed for a stream it forwards is missed.
        control.subscribe()
    routes = Routes(agent.node, params.to, params.to_port, params.follow, control,
                    params.fan_out)
    sock = listen(params.port)
    meter = MediaMeter(sock.getsockname()[1])
    try:
        summary = forward(agent, params, sock, meter, routes)
    finally:
        sock.close()
        if control is not None:
            control.close()
    followed = routes.write(agent)
    agent.finish({"input": meter.write(agent)} | summary
                 | ({"followed": followed} if params.follow else {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
