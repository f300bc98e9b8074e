"""A viewer-side edge server of live_edge (live streaming at the edge): receives a live source
stream and serves the viewers that pull it, each transcoded down to the bitrate it pulls, within
a compute budget."""

from __future__ import annotations

import heapq
import itertools
import math
import select
import socket
import sys
from dataclasses import dataclass, field
from typing import Literal, Optional

from pydantic import Field, model_validator

from agents.agent import Agent, AgentParams
from agents.flows import MalformedLog
from agents.pacing import SPIN_NS, Pacer
from agents.sockets import BURST_DATAGRAMS, POLL_S, burst, record_socket_drops
from agents.formats import MEDIA, PULL
from agents.wire import MAGIC, VERSION
from agents.streamer import (MAX_PAYLOAD, MIN_FRAME_SIZE, PER_PACKET, PER_PACKET_OFFSET,
                             flow_name, fragment_sizes)
from agents.control import LoadReporter, ReportingParams, controller_client
from agents.agent import AFTER_CUT, SEND_BUFFER_FULL, NodeRef, epoch_seconds
from agents.sockets import DATAGRAM_BUFFER, listen, sending_without_waiting
from agents.echo import PATH_TABLES
from agents.back_source import BackSource
from agents.follower import FOLLOWER_TABLES
from agents.gop_cache import GivenUpFrames, GopCache, SourceFrame
from agents.media import MEDIA_TABLES, MediaMeter
from agents.nack import (NACK_TABLES, RETRANSMISSION_TABLES, Arrival, NackParams, is_nack,
                         resend)
from edgebed.quantities import Duration, PositiveDuration, Rate, Size
from edgebed import clock

TABLES = {
    **MEDIA_TABLES,
    **NACK_TABLES,
    **RETRANSMISSION_TABLES,
    **PATH_TABLES,
    **FOLLOWER_TABLES,
    # One row per session (a viewer's pulls of one stream at one bitrate).
    "live_sessions": ("node", "agent", "viewer", "port", "flow", "bitrate_bps", "started_s",
                      "ended_s", "frames", "packets", "refused", "cached_frames",
                      "cached_bytes", "caught_up_s"),
}

MBPS = 1e6


class Params(NackParams, ReportingParams, AgentParams):
    """Where the edge listens, how it transcodes, what it can compute, whom it reports to
    (:class:`agents.control.ReportingParams`), whether it recovers lost packets
    (:class:`agents.nack.NackParams`: it asks its upstream, and keeps a send buffer for its
    sessions)."""

    port: int = Field(5004, ge=0, le=65535, description="service port: pulls arrive here and "
                                                        "media leave from here; 0: any free "
                                                        "port")
    source_port: int = Field(5008, ge=0, le=65535, description="where the source stream "
                                                               "arrives; 0: any free port")
    pull_timeout: PositiveDuration = Field(1.0, description="a session ends this long after "
                                                            "its last pull")
    transcoding_delay: Duration = Field(0.05, description="G: delay per Mbit/s taken off the "
                                                          "source bitrate (live_edge: 50ms)")
    transcoding_vcpu: float = Field(0.5, ge=0, description="H: vCPU per Mbit/s taken off the "
                                                           "source bitrate (live_edge: 0.5)")
    vcpu: float = Field(15.0, ge=0, description="C_m: vCPU the admitted sessions may use "
                                                "together (live_edge: 15)")
    payload: Size = Field(1200, description=f"largest UDP payload of a packet sent, "
                                            f"{2 * MEDIA.header_size} to {MAX_PAYLOAD} bytes")
    duration: Optional[Duration] = Field(None, description="default: until stopped")
    back_source: bool = Field(False, description="pull the streams sessions ask for from the "
                                                 "upstream the controller's decisions name "
                                                 "(attributes stream, upstream)")
    upstream_port: int = Field(5004, ge=1, le=65535, description="back-source: the port "
                                                                 "upstreams take pulls on")
    back_source_interval: PositiveDuration = Field(0.2, description="back-source: how often "
                                                                    "to pull a stream")
    back_source_mode: Literal["passive", "always"] = Field(
        "passive", description="back-source: passive pulls a stream only while sessions ask for "
                               "it; always also pulls upstream_stream from upstream from the "
                               "start, viewers or not")
    upstream: Optional[NodeRef] = Field(None, description="back-source, always: where the "
                                                          "stream comes from before a decision "
                                                          "says")
    upstream_stream: int = Field(0, ge=0, lt=2**32, description="back-source, always: the "
                                                                "stream pulled from the start")
    upstream_bitrate: Rate = Field(1e6, gt=0, description="back-source, always: the bitrate "
                                                          "it is pulled at (the source's)")
    gop_cache: bool = Field(False, description="keep each stream's frames since its latest I "
                                               "frame and send them to a viewer's new session "
                                               "before the live stream")
    gop_burst: float = Field(4.0, gt=1, le=100, description="GOP cache: the cached frames (and "
                                                             "the live ones behind them) leave "
                                                             "at this many times the session's "
                                                             "bitrate")
    gop_cache_frames: int = Field(250, ge=1, description="GOP cache: the most frames kept of "
                                                         "a stream; past it (its next I frame "
                                                         "lost) nothing until the next")

    @model_validator(mode="after")
    def _always_has_upstream(self) -> "Params":
        if self.back_source_mode == "always" and not (self.back_source and self.upstream):
            raise ValueError("back_source_mode always needs back_source and an upstream")
        return self

    @model_validator(mode="after")
    def _packets_fit(self) -> "Params":
        # As the streamer's: a frame cut in two or more packets never yields one smaller than
        # its own header.
        if not 2 * MEDIA.header_size <= self.payload <= MAX_PAYLOAD:
            raise ValueError(f"payload must be {2 * MEDIA.header_size} to {MAX_PAYLOAD} bytes, "
                             f"not {self.payload:g}")
        return self


@dataclass
class Session:
    """One viewer's pull of one stream at one bitrate, and what it was sent."""

    viewer: str
    port: int
    stream: int
    delivered: int
    bitrate: float  # R_v, bit/s
    rung: int
    user: int
    started_ns: int
    last_pull_ns: int
    packet: bytearray  # the header template, then room for the payload
    sequence: int = 0  # the next packet's
    admitted: bool = False
    cost: float = 0.0  # vCPU, once admitted
    refused: int = 0
    frames: int = 0
    packets: int = 0
    ended_ns: int | None = None
    pacer: Pacer = field(default_factory=Pacer)
    fresh: bool = True  # opened by the viewer's first pull here: the GOP cache is for it
    backlog_ns: int = 0  # monotonic: when its backlog (GOP cache, then frames behind it) is out
    cached_frames: int = 0
    cached_bytes: int = 0
    admitted_ns: int | None = None  # monotonic

    @property
    def wants(self) -> tuple:
        return self.stream, self.delivered, self.bitrate, self.rung

    @property
    def flow(self) -> str:
        return flow_name(self.delivered)


@dataclass(slots=True)
class Transcoded:
    """A transcoded frame on its way out: its packets' sizes and when the next one is due."""

    session: Session
    frame: int
    frame_type: int
    send_ns: int
    sizes: list[int]  # of every packet the frame is cut in
    sending: int  # packets sent of them: fewer than all when the source frame came incomplete
    start_ns: int  # monotonic: when its first packet is due
    spacing_ns: float
    next: int = 0

    @property
    def due_ns(self) -> int:
        return self.start_ns + round(self.next * self.spacing_ns)


class EdgeServer:
    """The edge's state: source frames being gathered, sessions, frames on their way out."""

    def __init__(self, params: Params, service: socket.socket):
        self.params = params
        self.service = service
        self.service_port = service.getsockname()[1]
        self.timeout_ns = round(params.pull_timeout * 1e9)
        self.source_bitrates: dict[int, float] = {}  # stream -> R, bit/s
        self.last_source_ns: dict[int, int] = {}  # stream -> when its last packet arrived
        # stream -> its frames being gathered (with NACKs on, those awaiting repairs too)
        self.gathering: dict[int, dict[int, SourceFrame]] = {}
        self.nacks = params.receiver()
        self.sent = params.send_buffer()
        # An incomplete frame is given up this long after its last packet came: the reorder
        # wait, and with NACKs on every ask for its repairs as well.
        self.hold_ns = round((params.nack_wait + (params.nack_retries * params.nack_interval
                                                  if self.nacks is not None else 0.0)) * 1e9)
        self.sessions: dict[tuple, Session] = {}  # (viewer address, port, user) -> session
        self.ended: list[Session] = []
        self.used_vcpu = 0.0
        self.departures: list[tuple[int, int, Transcoded]] = []  # heap: (due ns, order, frame)
        self._order = itertools.count()
        self.malformed_pulls = MalformedLog()
        self.send_errors = 0
        self.given_up = GivenUpFrames()
        self.after_cut: dict[int, int] = {}  # stream -> packets of frames already given up
        self.cache = GopCache(params.gop_cache_frames) if params.gop_cache else None

    # pulls and sessions

    def pull(self, buffer: bytearray, size: int, received_ns: int, address: tuple) -> None:
        """Open or refresh the session a pull asks for, answer a NACK, or log the datagram as
        malformed."""
        if self.sent is not None and is_nack(buffer, size):
            self.send_errors += resend(self.service, self.sent, memoryview(buffer)[:size],
                                       address)
            return
        if size < PULL.header_size:
            self.malformed_pulls.add(self.service_port, memoryview(buffer)[:size])
            return
        (magic, version, kind, stream, delivered, user, _send_ns, bitrate_kbps,
         rung) = PULL.struct.unpack_from(buffer)
        if magic != MAGIC or version != VERSION or kind != PULL.type or bitrate_kbps == 0:
            self.malformed_pulls.add(self.service_port, memoryview(buffer)[:size])
            return
        wants = (stream, delivered, bitrate_kbps * 1e3, rung)
        key = (address[0], address[1], user)
        session = self.sessions.get(key)
        sequence, fresh = 0, True
        if session is not None and session.wants != wants:
            self._end(session, received_ns)
            sequence = session.sequence if session.delivered == delivered else 0
            session, fresh = None, False
        if session is None:
            session = self.sessions[key] = Session(
                address[0], address[1], *wants, user=user, started_ns=received_ns,
                last_pull_ns=received_ns, packet=self._template(delivered, bitrate_kbps, rung),
                sequence=sequence, fresh=fresh)
        session.last_pull_ns = received_ns
        if not session.admitted:
            self._admit(session)

    def _template(self, delivered: int, bitrate_kbps: int, rung: int) -> bytearray:
        packet = bytearray(int(self.params.payload))
        MEDIA.struct.pack_into(packet, 0, MAGIC, VERSION, MEDIA.type, delivered, 0, 0, 0, 0,
                               rung, 0, 0, bitrate_kbps)
        return packet

    def _admit(self, session: Session) -> None:
        source = self.source_bitrates.get(session.stream)
        if not source:
            return  # no source packet yet: the cost is not known
        cost = max(0.0, source - session.bitrate) / MBPS * self.params.transcoding_vcpu
        # A millionth of slack: a budget filled exactly by ladder steps must not be refused
        # for float rounding.
        if self.used_vcpu + cost > self.params.vcpu * (1 + 1e-6):
            session.refused += 1
            return
        session.admitted, session.cost = True, cost
        self.used_vcpu += cost
        session.admitted_ns = clock.monotonic_ns()
        if self.cache is not None and session.fresh:
            # The cached GOP at once, as a backlog: the live frames queue behind it.
            for frame in self.cache.gop(session.stream):
                sizes = self._send_frame(session, frame, session.admitted_ns, cached=True)
                session.cached_frames += 1
                session.cached_bytes += sum(sizes)

    def _end(self, session: Session, at_ns: int) -> None:
        session.ended_ns = at_ns
        del self.sessions[session.viewer, session.port, session.user]
        self.ended.append(session)
        if session.admitted:
            self.used_vcpu -= session.cost

    def expire(self, now_ns: int) -> None:
        """End the sessions whose last pull is older than the pull timeout."""
        for session in list(self.sessions.values()):
            if now_ns - session.last_pull_ns > self.timeout_ns:
                self._end(session, session.last_pull_ns + self.timeout_ns)

    def wanted(self) -> dict[int, float]:
        """The streams the sessions ask for, each with the highest bitrate asked (bit/s)."""
        wanted: dict[int, float] = {}
        for session in self.sessions.values():
            wanted[session.stream] = max(wanted.get(session.stream, 0.0), session.bitrate)
        return wanted

    def silences(self, now_ns: int) -> dict[str, float]:
        """For each stream the sessions ask for that arrived once, how long since its last
        packet (seconds), as the load metric ``stream.<id>.silent_s``: a source that stopped."""
        return {f"stream.{stream}.silent_s": max(0.0, (now_ns - self.last_source_ns[stream]) / 1e9)
                for stream in self.wanted() if stream in self.last_source_ns}

    def load(self) -> tuple[float, int]:
        """The bitrates served (bit/s) and the sessions admitted."""
        served = [min(s.bitrate, self.source_bitrates[s.stream])
                  for s in self.sessions.values() if s.admitted]
        return sum(served), len(served)

    # the source

    def source_packet(self, buffer: bytearray, size: int, received_ns: int,
                      address: tuple) -> None:
        """Gather a media packet (already checked by the meter) from ``address`` into its
        frame; transcode the frames it completes, and those it leaves behind: at once, or with
        NACKs on once their repairs' time is up."""
        (_, _, _, stream, _, send_ns, number, frame_type, _, fragment, fragments,
         bitrate_kbps) = MEDIA.struct.unpack_from(buffer)
        arrival = (self.nacks.receive(buffer, received_ns, address) if self.nacks is not None
                   else Arrival.NEW)
        self.source_bitrates[stream] = bitrate_kbps * 1e3
        self.last_source_ns[stream] = received_ns
        if self.given_up.came_late(stream, number, fragment):
            # The frame went out incomplete; this part of it came after.
            self.after_cut[stream] = self.after_cut.get(stream, 0) + 1
            return
        frames = self.gathering.setdefault(stream, {})
        frame = frames.get(number)
        if frame is None:
            if frames and number < min(frames):
                # A copy of a frame transcoded and forgotten, a straggler from before the
                # stream's first frame here, or a part of a frame given up longer ago than
                # the record of them reaches.
                return
            frame = frames[number] = SourceFrame(
                number, frame_type, fragments, bitrate_kbps * 1e3, send_ns, received_ns,
                received_ns)
        elif fragment in frame.seen or frame.transcoded:
            return  # a copy, or a part of a frame given up longer ago than the record reaches
        # A repair would stretch the frame's arrival, over which its packets are paced out.
        repaired = arrival in (Arrival.REPAIRED, Arrival.LATE)
        frame.add(fragment, size, send_ns, frame.last_received_ns if repaired else received_ns)
        self.release(received_ns)  # the frames before it first
        if len(frame.seen) >= frame.fragments and not frame.transcoded:
            self._transcode(stream, frame)

    def release(self, now_ns: int) -> None:
        """Transcode the incomplete frames whose wait is over (:meth:`SourceFrame.overdue`):
        packets of a frame still arriving while later frames' come are not lost; forget the
        transcoded frames older than the oldest still gathered (or than the newest)."""
        for stream, frames in self.gathering.items():
            newest = max(frames)
            for frame in sorted(frames.values(), key=lambda frame: frame.number):
                if not frame.transcoded and frame.overdue(now_ns, self.hold_ns):
                    self._transcode(stream, frame)
            waiting = [number for number, frame in frames.items() if not frame.transcoded]
            oldest_kept = min(waiting, default=newest)
            for number in [number for number in frames if number < oldest_kept]:
                del frames[number]

    def _transcode(self, stream: int, frame: SourceFrame) -> None:
        frame.transcoded = True
        self.given_up.add(stream, frame)
        if not frame.bitrate:
            return  # a source that does not say its bitrate cannot be scaled
        # Sessions past their pull timeout end now, not at the next housekeeping: a frame must
        # not go to a session whose row says it had ended.
        self.expire(clock.time_ns())
        now_ns = clock.monotonic_ns()
        for session in self.sessions.values():
            if session.stream == stream and session.admitted:
                self._send_frame(session, frame, now_ns)
        if self.cache is not None:
            self.cache.add(stream, frame)

    def _send_frame(self, session: Session, frame: SourceFrame, now_ns: int,
                    cached: bool = False) -> list[int]:
        """Schedule ``frame`` transcoded for ``session``: its packets spread over the time the
        source frame took to arrive, the transcoding delay after ``now_ns``, or, ``cached``
        (from the GOP cache) or while the session has a backlog (its GOP cache going out),
        behind the backlog at ``gop_burst`` times its bitrate. Returns the sizes of the packets
        sent.

        A frame that arrived incomplete goes out incomplete, as it would from a real node: cut
        for its whole size (scaled up from the share of fragments that came), of which only
        as many packets leave as that share allows, fewer than all; the sequence numbers of
        the others are skipped, so the viewer sees them lost."""
        reduction = max(0.0, frame.bitrate - session.bitrate)
        share = len(frame.seen) / frame.fragments
        size = max(MIN_FRAME_SIZE, round(frame.size / share * min(1.0, session.bitrate
                                                                   / frame.bitrate)))
        sizes = fragment_sizes(size, int(self.params.payload))
        sending = len(sizes) if share >= 1 else min(len(sizes) - 1, int(len(sizes) * share))
        start_ns = now_ns + round(self.params.transcoding_delay * reduction / MBPS * 1e9)
        spacing_ns = (frame.last_received_ns - frame.first_received_ns) / len(sizes)
        if cached or session.backlog_ns > start_ns:
            # Paced by the bytes: packet k leaves no sooner than the backlog's bits before it
            # take at the burst rate (near-equal packets: their mean size sets the spacing).
            start_ns = max(start_ns, session.backlog_ns)
            spacing_ns = (sum(sizes) * 8e9 / (self.params.gop_burst * session.bitrate)
                          / len(sizes))
            session.backlog_ns = start_ns + round(spacing_ns * len(sizes))
        self._schedule(Transcoded(session, frame.number, frame.frame_type, frame.send_ns,
                                  sizes, sending, start_ns, spacing_ns))
        return sizes[:sending]

    # sending

    def _schedule(self, transcoded: Transcoded) -> None:
        heapq.heappush(self.departures, (transcoded.due_ns, next(self._order), transcoded))

    def next_due_ns(self) -> int | None:
        return self.departures[0][0] if self.departures else None

    def send_next(self) -> None:
        """Send the packet due first, on its due time (spun to), and schedule the one after."""
        due_ns, _, transcoded = heapq.heappop(self.departures)
        session = transcoded.session
        if session.ended_ns is not None:
            return
        if not transcoded.sending:
            # Too little of it came to send a packet: its sequence numbers are skipped in its
            # turn, after the packets of frames before it.
            session.sequence += len(transcoded.sizes)
            return
        session.pacer.wait_until(due_ns)
        index, count = transcoded.next, len(transcoded.sizes)
        PER_PACKET.pack_into(session.packet, PER_PACKET_OFFSET, session.sequence,
                             transcoded.send_ns, transcoded.frame, transcoded.frame_type,
                             session.rung, index, count)
        session.sequence += 1
        packet = memoryview(session.packet)[:transcoded.sizes[index]]
        try:
            self.service.sendto(packet, (session.viewer, session.port))
            session.packets += 1
            if self.sent is not None:
                self.sent.add((session.viewer, session.port), session.delivered,
                              session.sequence - 1, bytes(packet), clock.time_ns())
        except OSError:
            self.send_errors += 1  # a full send buffer: the viewer sees the gap
        transcoded.next += 1
        if transcoded.next < transcoded.sending:
            self._schedule(transcoded)
        else:
            session.sequence += count - transcoded.sending
            session.frames += 1

    def write(self, agent: Agent, now_ns: int) -> dict:
        """Every session's rows of ``live_sessions`` and ``sender_lateness``, the malformed
        pulls' rows and the ``agent_drops`` rows of what the edge dropped; returns the
        summary."""
        unsent = sum(1 for _, _, transcoded in self.departures
                     if transcoded.session.ended_ns is None)
        for session in list(self.sessions.values()):
            self._end(session, now_ns)
        for session in self.ended:
            agent.row("live_sessions", session.viewer, session.port, session.flow,
                      session.bitrate, epoch_seconds(session.started_ns),
                      epoch_seconds(session.ended_ns), session.frames, session.packets,
                      session.refused, session.cached_frames, session.cached_bytes,
                      (session.backlog_ns - session.admitted_ns) / 1e9
                      if session.cached_frames else None)
            if session.packets:
                session.pacer.report(agent, f"{session.viewer}:{session.port}/{session.flow}")
        self.malformed_pulls.write(agent)
        for stream, packets in sorted(self.after_cut.items()):
            agent.row("agent_drops", AFTER_CUT, flow_name(stream), "", packets)
        if self.send_errors:
            agent.row("agent_drops", SEND_BUFFER_FULL, "", self.service_port, self.send_errors)
        nack = ({"asked_upstream": self.nacks.write(agent), "answered": self.sent.write(agent)}
                if self.nacks is not None else None)
        return {"nack": nack,
                "sessions": sum(1 for s in self.ended if s.admitted),
                "refused": sum(s.refused for s in self.ended),
                "frames_sent": sum(s.frames for s in self.ended),
                "packets_sent": sum(s.packets for s in self.ended),
                "frames_unsent": unsent,
                "gop_cache": {"sessions": sum(1 for s in self.ended if s.cached_frames),
                              "frames": sum(s.cached_frames for s in self.ended),
                              "bytes": sum(s.cached_bytes for s in self.ended)}
                if self.cache is not None else None,
                "send_errors": self.send_errors,
                "packets_after_cut": sum(self.after_cut.values()),
                "malformed_pulls": self.malformed_pulls.count}


def back_source_for(agent: Agent, params: Params, source: socket.socket) -> BackSource | None:
    """The edge's back-source when ``params`` ask for one (it needs the run's controller)."""
    if not params.back_source:
        return None
    control = controller_client(agent.node)
    if control is None:
        raise SystemExit("edge_server: back_source needs the run's controller "
                         "($EDGEBED_CONTROLLER)")
    control.subscribe()
    always = params.back_source_mode == "always"
    return BackSource(agent.node, control, source, params.upstream_port,
                      params.back_source_interval,
                      standing={params.upstream_stream: params.upstream_bitrate} if always
                      else None,
                      upstreams={params.upstream_stream: params.upstream} if always else None)


def serve(agent: Agent, params: Params, service: socket.socket, source: socket.socket,
          meter: MediaMeter) -> dict:
    """Serve until stopped; returns the summary."""
    edge = EdgeServer(params, service)
    reports = LoadReporter.for_agent(agent.node, params)
    back = back_source_for(agent, params, source)
    watched = [service, source] + ([back.control] if back is not None else [])
    buffer = bytearray(DATAGRAM_BUFFER)
    end = math.inf if params.duration is None else clock.monotonic() + params.duration
    housekeeping_ns = clock.monotonic_ns()

    def departure_due() -> bool:
        due_ns = edge.next_due_ns()
        return due_ns is not None and due_ns - clock.monotonic_ns() <= SPIN_NS

    try:
        while not agent.stopping and clock.monotonic() < end:
            now_ns = clock.monotonic_ns()
            if now_ns >= housekeeping_ns:
                housekeeping_ns = now_ns + round(POLL_S * 1e9)
                edge.expire(clock.time_ns())
                edge.release(clock.time_ns())
                served, sessions = edge.load()
                reports.tick(served, {"sessions": sessions, "streams": len(edge.source_bitrates)}
                             | ({"cpu": min(1.0, edge.used_vcpu / params.vcpu)}
                                if params.vcpu else {}) | edge.silences(clock.time_ns()))
                if back is not None:
                    back.pull(edge.wanted(), now_ns)
            wait_s = (housekeeping_ns - now_ns) / 1e9
            due_ns = edge.next_due_ns()
            if due_ns is not None:
                if due_ns - now_ns <= SPIN_NS:
                    # Departures first, so that a flood of arrivals cannot hold them back; the
                    # last stretch is spun, which select() would overshoot now and then.
                    edge.send_next()
                    continue
                wait_s = min(wait_s, (due_ns - now_ns - SPIN_NS) / 1e9)
            for sock in select.select(watched, [], [], clock.real_seconds(wait_s))[0]:
                if back is not None and sock is back.control:
                    back.take_pushed()
                    continue
                # Every datagram waiting, one wake-up for a burst, until a departure comes due.
                for arrival in burst(sock, buffer, BURST_DATAGRAMS, departure_due):
                    if sock is service:
                        edge.pull(buffer, *arrival)
                    elif meter.add(buffer, *arrival) is not None:
                        edge.source_packet(buffer, *arrival)
            if edge.nacks is not None:
                edge.nacks.ask(source, clock.time_ns())
    finally:
        control = reports.close()
        if back is not None:
            back.control.close()
    reports.write(agent)
    socket_drops = {"service": record_socket_drops(agent, service),
                    "source": record_socket_drops(agent, source)}
    return (edge.write(agent, clock.time_ns()) | {"load_reports": control,
                                                  "socket_drops": socket_drops}
            | ({"back_source": back.write(agent)} if back is not None else {}))


def main(argv: list[str] | None = None) -> int:
    agent = Agent("edge_server", argv, TABLES)
    params = Params.model_validate(agent.params)
    # A send fails at once rather than wait, and is counted: a blocking send would hold every
    # session's schedule back behind an uplink that binds.
    service = sending_without_waiting(listen(params.port))
    source = listen(params.source_port)
    ports = {"port": service.getsockname()[1], "source_port": source.getsockname()[1]}
    meter = MediaMeter(ports["source_port"])
    try:
        summary = serve(agent, params, service, source, meter)
    finally:
        service.close()
        source.close()
    agent.finish(ports | {"input": meter.write(agent)} | summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
