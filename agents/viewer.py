"""A viewer: receives media streams on a port and measures them per stream and per frame; sends
danmaku (chat) and gifts to a chat collector (:mod:`agents.chat_collector`) as Poisson processes.

    python -m agents.viewer --node NAME --out RUN_DIR --params JSON [--seed N]

Each stream (by its stream id) is measured with :class:`~agents.common.FlowStats` from the
sequence numbers and send times its packets carry: loss from sequence gaps, duplicates,
reordering, one-way delay (kernel receive timestamp minus send time), RFC 3550 jitter,
goodput, per-second series (tables ``flows`` and ``flow_seconds``). Each frame gets a row of
``frames``: its type, rung, fragments, how many distinct fragments arrived, whether it is
complete, and for a complete frame its delay, from its first fragment's send time to its last
fragment's arrival. Frames of which nothing arrived have no row; the summary counts them as
missing. Datagrams that are not well-formed media packets are counted in ``malformed`` and
skipped.

The socket is announced on stderr as ``listening on PORT`` once bound (``port: 0`` takes any
free port). The viewer stops on SIGTERM or SIGINT, after ``duration``, or half a second after
``expect`` distinct packets arrived. Danmaku and gifts carry the viewer's user id and room;
their send times are Poisson processes of ``danmaku_rate`` and ``gift_rate`` per second, their
lateness goes to ``sender_lateness``.

**Pull mode** (``pull``, seed 000): the viewer asks for its stream instead of waiting for it.
It subscribes to the controller named by ``$EDGEBED_CONTROLLER`` and joins ``service`` with its
preferred bitrate as demand and the ``bitrates`` of the ladder up to it, hears a decision
(server and bitrate; no bitrate means the preferred one), and sends a pull
(:data:`agents.formats.PULL`) for source stream ``pull_stream`` to ``pull`` (the service
address, which the controller steers to the chosen edge) every ``pull_interval`` from its media
socket, so the edge's answer comes back to it. A decision the controller pushes later (a new
period: another server, another bitrate) changes what it pulls at once. Without ``service`` or
without a controller it pulls at its preferred bitrate. Each decision's media arrive under a
stream id of their own, the decision's number (1, 2, ...), so each is measured as a flow of its
own (``stream-<number>``: its goodput, delay and loss are that decision's). Every decision is a
row of ``live_decisions``: when it was heard (seconds since the epoch, CLOCK_REALTIME, as the
controller's ``decisions``), the server and bitrate, whether the server changed (migrated), and
its flow. A decision that changes neither server nor bitrate is not a new one.

:class:`MediaMeter`, :func:`listen` and :func:`datagrams` are shared with the edge forwarder
and the chat collector.
"""

from __future__ import annotations

import math
import random
import socket
import statistics
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, Optional

from pydantic import Field, model_validator

from agents.common import (WAKE_EARLY_NS, Agent, AgentParams, FlowStats, MalformedLog,
                           NodeRef, Pacer, percentile, receive, receiving_socket)
from agents.control import ControlClient, ControlError, controller_client
from agents.formats import DANMAKU, FRAME_TYPES, GIFT, MAGIC, MEDIA, PULL, VERSION
from agents.streamer import flow_name
from controller import protocol
from topologies.model import Duration, PositiveDuration, Rate

# Written by every agent that meters a media stream with MediaMeter (this one and
# agents.edge_forwarder): one row per frame of each stream received.
MEDIA_TABLES = {
    "frames": ("node", "agent", "flow", "frame", "frame_type", "rung", "fragments", "received",
               "complete", "delay_ms"),
}
TABLES = {
    **MEDIA_TABLES,
    # In pull mode: one row per decision it followed.
    "live_decisions": ("node", "agent", "time_s", "server", "bitrate_bps", "migrated", "flow"),
}

GRACE_S = 0.5  # listening on after the expected packets arrived, for stragglers and duplicates
DATAGRAM_BUFFER = 65536  # larger than any UDP payload
U32_MAX = 2**32 - 1
DANMAKU_TEXT = "666"  # the commonest danmaku there is ("awesome"), repeated to the length asked


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
    GRACE_S after ``enough()`` first says so."""
    end = math.inf if duration_s is None else time.monotonic() + duration_s
    while not agent.stopping and time.monotonic() < end:
        arrival = receive(sock, buffer)
        if arrival is None:
            continue
        yield arrival
        if enough is not None and enough():
            end = min(end, time.monotonic() + GRACE_S)
            enough = None


@dataclass(slots=True)
class FrameArrival:
    """What arrived of one frame."""

    frame_type: int
    rung: int
    fragments: int
    received: int  # distinct fragments
    first_send_ns: int
    last_arrival_ns: int

    @property
    def complete(self) -> bool:
        return self.received >= self.fragments


@dataclass
class StreamMeter:
    """One media stream as received: its packets and its frames."""

    flow: FlowStats
    frames: dict[int, FrameArrival] = field(default_factory=dict)

    def write(self, agent: Agent, sent: int | None) -> dict:
        """The stream's rows of ``flows``, ``flow_seconds`` and ``frames``; returns its
        summary."""
        summary = self.flow.write(agent, sent)
        delays_ms = []
        for number, frame in sorted(self.frames.items()):
            delay_ms = None
            if frame.complete:
                delay_ms = (frame.last_arrival_ns - frame.first_send_ns) / 1e6
                delays_ms.append(delay_ms)
            agent.row("frames", self.flow.flow, number, FRAME_TYPES[frame.frame_type],
                      frame.rung, frame.fragments, frame.received, frame.complete, delay_ms)
        delays_ms.sort()
        numbers = self.frames.keys()
        return summary | {
            "frames_complete": len(delays_ms),
            "frames_incomplete": len(self.frames) - len(delays_ms),
            # Frame numbers between the first and last seen of which no fragment arrived.
            "frames_missing": (max(numbers) - min(numbers) + 1 - len(self.frames)
                               if self.frames else 0),
            "frame_delay_mean_ms": statistics.fmean(delays_ms) if delays_ms else None,
            "frame_delay_p50_ms": percentile(delays_ms, 50) if delays_ms else None,
            "frame_delay_p99_ms": percentile(delays_ms, 99) if delays_ms else None,
        }


class MediaMeter:
    """The media packets arriving on one port, measured per stream and per frame. Anything else
    is logged as malformed: too short for a media header, another magic, version or message
    type, an unknown frame type, or a fragment index not below the fragment count."""

    def __init__(self, port: int):
        self.port = port
        self.streams: dict[int, StreamMeter] = {}
        self.unique = 0  # distinct packets, all streams together
        self.malformed = MalformedLog()

    def add(self, buffer: bytearray, size: int, received_ns: int, address: tuple) -> int | None:
        """Measure the datagram of ``size`` bytes in ``buffer``; returns its stream id, or None
        when it is not a media packet."""
        if size < MEDIA.header_size:
            self.malformed.add(self.port, memoryview(buffer)[:size])
            return None
        (magic, version, kind, stream, sequence, send_ns, frame, frame_type, rung, fragment,
         fragments, _) = MEDIA.struct.unpack_from(buffer)
        if (magic != MAGIC or version != VERSION or kind != MEDIA.type
                or frame_type not in FRAME_TYPES or fragment >= fragments):
            self.malformed.add(self.port, memoryview(buffer)[:size])
            return None
        meter = self.streams.get(stream)
        if meter is None:
            meter = self.streams[stream] = StreamMeter(FlowStats(flow_name(stream), address[0]))
        duplicate = sequence in meter.flow.seen
        meter.flow.add(sequence, send_ns, received_ns, size)
        if duplicate:
            return stream
        self.unique += 1
        arrival = meter.frames.get(frame)
        if arrival is None:
            meter.frames[frame] = FrameArrival(frame_type, rung, fragments, 1, send_ns,
                                               received_ns)
        else:
            arrival.received += 1
            arrival.first_send_ns = min(arrival.first_send_ns, send_ns)
            arrival.last_arrival_ns = max(arrival.last_arrival_ns, received_ns)
        return stream

    def write(self, agent: Agent, expect: int | None = None) -> dict:
        """Every stream's rows and the malformed datagrams' row; returns the summary. With one
        stream, its loss counts against ``expect`` (so a lost tail counts too)."""
        sent = expect if len(self.streams) == 1 else None
        streams = [meter.write(agent, sent) for _, meter in sorted(self.streams.items())]
        self.malformed.write(agent)
        return {"port": self.port, "packets": sum(s["packets"] for s in streams),
                "unique": self.unique, "malformed": self.malformed.count, "streams": streams}


def chat_flow(kind: str, user: int) -> str:
    """The name of one user's danmaku or gifts in the sender's and the collector's tables."""
    return f"{kind}-{user}"


def epoch_seconds(ns: int) -> str:
    """A time in seconds since the epoch as a table writes it: to the microsecond (the
    tables' default of six significant digits would leave whole minutes)."""
    return f"{ns / 1e9:.6f}"


@dataclass
class PoissonMessages:
    """Messages of one kind sent at the times of a Poisson process of ``rate`` per second;
    ``build(sequence, send_ns)`` makes the datagram."""

    kind: str
    rate: float
    build: Callable[[int, int], bytes]
    pacer: Pacer = field(default_factory=Pacer)
    sequence: int = 0
    send_errors: int = 0
    due_ns: int = 0


class Params(AgentParams):
    """Where the viewer listens, when it stops, and how it chats."""

    port: int = Field(5004, ge=0, le=65535, description="media port; 0: any free port")
    expect: Optional[int] = Field(None, ge=1, description="distinct packets expected (all "
                                                          "streams): stop shortly after they "
                                                          "arrived; one stream's loss counts "
                                                          "against it")
    duration: Optional[Duration] = Field(None, description="default: until stopped")
    danmaku_to: Optional[NodeRef] = Field(None, description="the chat collector")
    danmaku_port: int = Field(5006, ge=1, le=65535)
    danmaku_rate: float = Field(0.0, ge=0, description="danmaku per second (Poisson)")
    danmaku_bytes: int = Field(30, ge=0, le=1400, description="UTF-8 text per danmaku")
    gift_rate: float = Field(0.0, ge=0, description="gifts per second (Poisson)")
    gift: int = Field(1, ge=0, le=65535, description="which gift, in the platform's catalogue")
    gift_value: float = Field(1.0, gt=0, description="mean value of a gift")
    gift_values: Literal["fixed", "exponential"] = Field(
        "fixed", description="every gift worth gift_value, or exponentially distributed values "
                             "of that mean")
    room: int = Field(0, ge=0, le=U32_MAX)
    user: Optional[int] = Field(None, ge=0, le=U32_MAX,
                                description="user id; default: the CRC-32 of the node's name")
    pull: Optional[NodeRef] = Field(None, description="pull mode: the service (or edge) to "
                                                      "pull a live stream from")
    pull_port: int = Field(5004, ge=1, le=65535, description="the port pulls go to")
    pull_stream: int = Field(0, ge=0, le=U32_MAX, description="the source stream to pull")
    pull_interval: PositiveDuration = Field(0.2, description="how often to pull")
    service: Optional[protocol.Name] = Field(None, description="pull mode: the controller "
                                                              "service to join for a server "
                                                              "and bitrate")
    bitrates: list[Rate] = Field(default_factory=list, max_length=16,
                                 description="pull mode: the bitrate ladder, best first")
    preferred_bitrate: Optional[Rate] = Field(None, description="pull mode: the bitrate the "
                                                                "viewer wants; default: the "
                                                                "ladder's best")

    @model_validator(mode="after")
    def _chat_has_a_collector(self) -> "Params":
        if (self.danmaku_rate or self.gift_rate) and self.danmaku_to is None:
            raise ValueError("danmaku_rate and gift_rate need danmaku_to, the chat collector")
        return self

    @model_validator(mode="after")
    def _pull_mode_is_complete(self) -> "Params":
        pull_only = [name for name in ("service", "bitrates", "preferred_bitrate")
                     if getattr(self, name)]
        if self.pull is None:
            if pull_only:
                raise ValueError(f"{', '.join(pull_only)} need pull, the service to pull from")
            return self
        if any(lower >= higher for higher, lower in zip(self.bitrates, self.bitrates[1:])):
            raise ValueError("bitrates must be strictly descending (best first)")
        # A pull carries kbit/s; less than 1 would ask for nothing.
        if min(self.bitrates + [self.preferred]) < 1e3:
            raise ValueError("pull mode needs preferred_bitrate or bitrates, each at least "
                             "1kbps")
        return self

    @property
    def preferred(self) -> float:
        """The bitrate the viewer wants: ``preferred_bitrate``, else the ladder's best."""
        return self.preferred_bitrate or (self.bitrates[0] if self.bitrates else 0.0)


def user_id(agent: Agent, params: Params) -> int:
    """The viewer's user id in its danmaku, gifts and pulls."""
    return params.user if params.user is not None else zlib.crc32(agent.node.encode())


class ChatSender(threading.Thread):
    """The viewer's danmaku and gifts, sent from a thread of their own while the main thread
    receives media."""

    def __init__(self, agent: Agent, params: Params):
        super().__init__(name="chat", daemon=True)
        self.agent = agent
        self.address = (params.danmaku_to, params.danmaku_port)
        self.user = user_id(agent, params)
        self.done = threading.Event()
        self.rng = random.Random(agent.seed)
        text = (DANMAKU_TEXT * params.danmaku_bytes)[:params.danmaku_bytes].encode()

        def danmaku(sequence: int, send_ns: int) -> bytes:
            return DANMAKU.pack(user=self.user, room=params.room, sequence=sequence,
                                send_ns=send_ns, text_length=len(text)) + text

        def gift(sequence: int, send_ns: int) -> bytes:
            value = (params.gift_value if params.gift_values == "fixed"
                     else self.rng.expovariate(1 / params.gift_value))
            return GIFT.pack(user=self.user, room=params.room, sequence=sequence,
                             send_ns=send_ns, gift=params.gift,
                             value_cents=min(U32_MAX, round(value * 100)))

        self.sources = [PoissonMessages(kind, rate, build) for kind, rate, build in (
            (DANMAKU.name, params.danmaku_rate, danmaku), (GIFT.name, params.gift_rate, gift))
            if rate > 0]

    def run(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(self.address)
            start_ns = time.monotonic_ns()
            for source in self.sources:
                source.due_ns = start_ns + round(self.rng.expovariate(source.rate) * 1e9)
            while self.sources and not self.agent.stopping:
                source = min(self.sources, key=lambda s: s.due_ns)
                early_s = (source.due_ns - time.monotonic_ns() - WAKE_EARLY_NS) / 1e9
                if self.done.wait(max(0.0, early_s)):
                    break
                source.pacer.wait_until(source.due_ns)
                try:
                    sock.send(source.build(source.sequence, time.time_ns()))
                except OSError:
                    source.send_errors += 1  # the collector sees the gap in the sequence
                source.sequence += 1
                source.due_ns += round(self.rng.expovariate(source.rate) * 1e9)

    def stop(self) -> None:
        self.done.set()
        self.join()

    def write(self, agent: Agent) -> dict:
        """The senders' rows of ``sender_lateness``; returns what was sent, by kind."""
        return {source.kind: {"user": self.user, "sent": source.sequence - source.send_errors,
                              "send_errors": source.send_errors,
                              "lateness": source.pacer.report(agent,
                                                              chat_flow(source.kind, self.user))}
                for source in self.sources}


@dataclass(frozen=True)
class LiveDecision:
    """A server and bitrate the viewer pulled at: when it heard of them, and the stream id its
    media arrive under."""

    heard_ns: int
    server: str | None  # None: no controller decided
    bitrate: float
    migrated: bool
    delivered: int


class Puller(threading.Thread):
    """Pull mode, from a thread of its own while the main thread receives media: joins the
    service, follows the decisions the controller pushes and pulls at the decided bitrate."""

    def __init__(self, agent: Agent, params: Params, sock: socket.socket):
        super().__init__(name="pull", daemon=True)
        self.agent = agent
        self.params = params
        self.sock = sock
        self.target = (params.pull, params.pull_port)
        self.user = user_id(agent, params)
        self.flow = f"{agent.node}/{params.service}"
        self.done = threading.Event()
        self.decisions: list[LiveDecision] = []
        self.pulls = self.send_errors = 0
        self.refusal: str | None = None  # why the viewer got no decision

    def run(self) -> None:
        control = controller_client(self.agent.node) if self.params.service else None
        try:
            if control is None:
                self._decided(None, self.params.preferred)
            elif not self._join(control):
                return
            due = time.monotonic()
            while not (self.agent.stopping or self.done.is_set()):
                if time.monotonic() >= due:
                    self._pull()
                    due = max(due + self.params.pull_interval, time.monotonic())
                wait_s = max(0.0, due - time.monotonic())
                if control is None:
                    self.done.wait(wait_s)
                    continue
                pushed = next(control.decisions(timeout=wait_s), None)
                if isinstance(pushed, protocol.Decision) and pushed.flow == self.flow:
                    if self._decided(pushed.server, pushed.bitrate or self.params.preferred):
                        due = time.monotonic()  # the new server or bitrate at once
                elif isinstance(pushed, protocol.Rejected) and pushed.flow == self.flow:
                    print(f"viewer on {self.agent.node}: {pushed.flow} rejected: "
                          f"{pushed.reason}", file=sys.stderr, flush=True)
        finally:
            if control is not None:
                control.close()

    def _join(self, control: ControlClient) -> bool:
        """Subscribe, then join (in that order, so that no period's decision falls between
        the two); whether a decision came."""
        ladder = [rate for rate in self.params.bitrates if rate <= self.params.preferred]
        try:
            control.subscribe()
            answer = control.join(self.params.service, demand=self.params.preferred,
                                  bitrates=ladder or self.params.bitrates[-1:])
        except ControlError as error:
            self.refusal = str(error)
        else:
            if isinstance(answer, protocol.Decision):
                self._decided(answer.server, answer.bitrate or self.params.preferred)
                return True
            self.refusal = answer.reason
        print(f"viewer on {self.agent.node}: no stream: {self.refusal}", file=sys.stderr,
              flush=True)
        return False

    def _decided(self, server: str | None, bitrate: float) -> bool:
        """Follow a decision; whether it changed anything."""
        last = self.decisions[-1] if self.decisions else None
        if last is not None and (last.server, last.bitrate) == (server, bitrate):
            return False
        self.decisions.append(LiveDecision(time.time_ns(), server, bitrate,
                                           last is not None and last.server != server,
                                           len(self.decisions) + 1))
        return True

    def _pull(self) -> None:
        decision = self.decisions[-1]
        # The rung counts from the lowest, as the streamer's does.
        rung = min(255, sum(1 for rate in self.params.bitrates if rate < decision.bitrate))
        pull = PULL.pack(stream=self.params.pull_stream, delivered_stream=decision.delivered,
                         user=self.user, send_ns=time.time_ns(),
                         bitrate_kbps=max(1, round(decision.bitrate / 1e3)), rung=rung)
        try:
            self.sock.sendto(pull, self.target)
            self.pulls += 1
        except OSError:
            self.send_errors += 1  # the edge's session outlives a lost pull or two

    def stop(self) -> None:
        self.done.set()
        self.join()

    def write(self, agent: Agent) -> dict:
        """The rows of ``live_decisions``; returns what was decided and pulled."""
        for decision in self.decisions:
            agent.row("live_decisions", epoch_seconds(decision.heard_ns), decision.server,
                      decision.bitrate, decision.migrated, flow_name(decision.delivered))
        return {"flow": self.flow if self.params.service else None,
                "decisions": len(self.decisions),
                "migrations": sum(d.migrated for d in self.decisions),
                "refusal": self.refusal, "pulls": self.pulls,
                "send_errors": self.send_errors}


def main(argv: list[str] | None = None) -> int:
    agent = Agent("viewer", argv, TABLES)
    params = Params.model_validate(agent.params)
    sock = listen(params.port)
    meter = MediaMeter(sock.getsockname()[1])
    chat = ChatSender(agent, params) if params.danmaku_to is not None else None
    puller = Puller(agent, params, sock) if params.pull is not None else None
    for thread in (chat, puller):
        if thread is not None:
            thread.start()
    buffer = bytearray(DATAGRAM_BUFFER)
    enough = (lambda: meter.unique >= params.expect) if params.expect is not None else None
    try:
        for size, received_ns, address in datagrams(agent, sock, buffer, params.duration,
                                                    enough):
            meter.add(buffer, size, received_ns, address)
    finally:
        for thread in (chat, puller):
            if thread is not None:
                thread.stop()
        sock.close()  # after the puller, which sends from it
    summary = meter.write(agent, params.expect)
    if chat is not None:
        summary["chat"] = chat.write(agent)
    if puller is not None:
        summary["pull"] = puller.write(agent)
    agent.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
