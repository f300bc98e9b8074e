"""A viewer: receives media streams on a port and measures them per stream and per frame; sends
danmaku (chat) and gifts to a chat collector (:mod:`agents.chat_collector`) as Poisson processes."""

from __future__ import annotations

import random
import socket
import sys
import threading
import zlib
from functools import partial
from dataclasses import dataclass, field
from typing import Callable, Literal, Optional

from pydantic import Field, model_validator

from agents.agent import Agent, AgentParams, NodeRef, epoch_seconds
from agents.pacing import WAKE_EARLY_NS, Pacer
from agents.sockets import (DATAGRAM_BUFFER, ReceiveParams, datagrams, listen,
                            udp_socket_drops)
from agents.control import ControlClient, controller_client
from agents.echo import PROBE_TIMEOUT, echo_probes
from agents.follower import FOLLOWER_TABLES, DecisionFollower, probes_settled
from agents.formats import DANMAKU, GIFT, PULL
from agents.media import MEDIA_TABLES, MediaMeter
from agents.nack import NACK_TABLES, NackParams
from agents.flows import flow_name
from edgebed import protocol
from edgebed.quantities import Duration, PositiveDuration, Rate
from edgebed import clock

TABLES = {
    **MEDIA_TABLES,
    **NACK_TABLES,
    **FOLLOWER_TABLES,
    # In pull mode: one row per decision it followed.
    "live_decisions": ("node", "agent", "time_s", "server", "bitrate_bps", "migrated", "flow"),
}

U32_MAX = 2**32 - 1
DANMAKU_TEXT = "666"  # the commonest danmaku there is ("awesome"), repeated to the length asked


def chat_flow(kind: str, user: int) -> str:
    """The name of one user's danmaku or gifts in the sender's and the collector's tables."""
    return f"{kind}-{user}"


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


class Params(ReceiveParams, NackParams, AgentParams):
    """Where the viewer listens, how often it reads (:class:`agents.sockets.ReceiveParams`),
    when it stops, how it chats, and whether it asks the hop its media come from for the
    packets lost (:class:`agents.nack.NackParams`)."""

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
    parallel_probes: bool = Field(False, description="pull mode: probe a decision's ranked "
                                                     "candidates all at once rather than one "
                                                     "after another")
    probe_timeout: PositiveDuration = Field(PROBE_TIMEOUT, description="pull mode: an echo "
                                                                       "answer later than this "
                                                                       "after a candidate's "
                                                                       "last request is lost")

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
            start_ns = clock.monotonic_ns()
            for source in self.sources:
                source.due_ns = start_ns + round(self.rng.expovariate(source.rate) * 1e9)
            while self.sources and not self.agent.stopping:
                source = min(self.sources, key=lambda s: s.due_ns)
                early_s = (source.due_ns - clock.monotonic_ns() - WAKE_EARLY_NS) / 1e9
                if self.done.wait(clock.real_seconds(max(0.0, early_s))):
                    break
                source.pacer.wait_until(source.due_ns)
                try:
                    sock.send(source.build(source.sequence, clock.time_ns()))
                except OSError:
                    source.send_errors += 1  # the collector sees the gap in the sequence
                source.sequence += 1
                source.due_ns += round(self.rng.expovariate(source.rate) * 1e9)

    def stop(self) -> None:
        self.done.set()
        self.join()

    def write(self, agent: Agent) -> dict:
        """The senders' rows of ``sender_lateness``; returns what was sent, by kind."""
        for source in self.sources:
            agent.row("sent", chat_flow(source.kind, self.user), self.address[0],
                      source.sequence - source.send_errors, source.send_errors)
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
        self.follower: DecisionFollower | None = None
        self.pulls = self.send_errors = 0
        self.refusal: str | None = None  # why the viewer got no decision
        self.leave_at_end = False  # set by stop(): the session ended, leave the service

    def run(self) -> None:
        control = controller_client(self.agent.node) if self.params.service else None
        try:
            if control is None:
                self._decided(None, self.params.preferred)
            elif not self._join(control):
                return
            due = clock.monotonic()
            while not (self.agent.stopping or self.done.is_set()):
                if clock.monotonic() >= due:
                    self._pull()
                    due = max(due + self.params.pull_interval, clock.monotonic())
                wait_s = max(0.0, due - clock.monotonic())
                if control is None:
                    self.done.wait(clock.real_seconds(wait_s))
                    continue
                changed = self.follower.poll(wait_s)
                if changed is not None and self._decided(
                        changed.server, changed.bitrate or self.params.preferred):
                    due = clock.monotonic()  # the new server or bitrate at once
        finally:
            if control is not None:
                if self.leave_at_end and self.follower is not None:
                    self.follower.leave()
                control.close()

    def _join(self, control: ControlClient) -> bool:
        """Join through the decision follower; whether a decision came."""
        ladder = [rate for rate in self.params.bitrates if rate <= self.params.preferred]
        self.follower = DecisionFollower(control, self.params.service,
                                         demand=self.params.preferred,
                                         bitrates=ladder or self.params.bitrates[-1:],
                                         probe=partial(echo_probes,
                                                       parallel=self.params.parallel_probes,
                                                       timeout=self.params.probe_timeout,
                                                       settled=probes_settled))
        followed = self.follower.join()
        if followed is not None:
            self.flow = self.follower.flow
            self._decided(followed.server, followed.bitrate or self.params.preferred)
            return True
        self.refusal = self.follower.refusal
        print(f"viewer on {self.agent.node}: no stream: {self.refusal}", file=sys.stderr,
              flush=True)
        return False

    def _decided(self, server: str | None, bitrate: float) -> bool:
        """Follow a decision; whether it changed anything."""
        last = self.decisions[-1] if self.decisions else None
        if last is not None and (last.server, last.bitrate) == (server, bitrate):
            return False
        self.decisions.append(LiveDecision(clock.time_ns(), server, bitrate,
                                           last is not None and last.server != server,
                                           len(self.decisions) + 1))
        return True

    def _pull(self) -> None:
        decision = self.decisions[-1]
        # The rung counts from the lowest, as the streamer's does.
        rung = min(255, sum(1 for rate in self.params.bitrates if rate < decision.bitrate))
        pull = PULL.pack(stream=self.params.pull_stream, delivered_stream=decision.delivered,
                         user=self.user, send_ns=clock.time_ns(),
                         bitrate_kbps=max(1, round(decision.bitrate / 1e3)), rung=rung)
        try:
            self.sock.sendto(pull, self.target)
            self.pulls += 1
        except OSError:
            self.send_errors += 1  # the edge's session outlives a lost pull or two

    def stop(self, leave: bool = False) -> None:
        """Stop pulling; ``leave``: the session is over, so leave the service too."""
        self.leave_at_end = leave
        self.done.set()
        self.join()

    def write(self, agent: Agent) -> dict:
        """The rows of ``live_decisions`` (and the follower's tables); returns what was
        decided and pulled."""
        for decision in self.decisions:
            agent.row("live_decisions", epoch_seconds(decision.heard_ns), decision.server,
                      decision.bitrate, decision.migrated, flow_name(decision.delivered))
        followed = self.follower.write(agent) if self.follower is not None else None
        return {"flow": self.flow if self.params.service else None,
                "decisions": len(self.decisions),
                "migrations": sum(d.migrated for d in self.decisions),
                "refusal": self.refusal, "pulls": self.pulls,
                "send_errors": self.send_errors, "followed": followed}


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
    nacks = params.receiver()

    def ask() -> float | None:
        """Send the NACKs due; the virtual seconds until more are."""
        now_ns = clock.time_ns()
        nacks.ask(sock, now_ns)
        due_ns = nacks.next_due_ns()
        return None if due_ns is None else max(0, due_ns - now_ns) / 1e9

    socket_drops = None
    try:
        for size, received_ns, address in datagrams(agent, sock, buffer,
                                                    params.receive_quantum, params.duration,
                                                    enough, ask if nacks is not None else None):
            if meter.add(buffer, size, received_ns, address) is not None and nacks is not None:
                nacks.receive(buffer, received_ns, address)
        socket_drops = udp_socket_drops(sock)
    finally:
        if chat is not None:
            chat.stop()
        if puller is not None:
            # Ended on its own (duration, expect): the session is over and the viewer leaves.
            # Stopped by a signal, it is the run ending, not the viewer's session.
            puller.stop(leave=not agent.stopping)
        sock.close()  # after the puller, which sends from it
    summary = meter.write(agent, params.expect)
    # Datagrams that reached the host and found the socket's buffer full: lost to the viewer
    # falling behind, not to the path.
    summary["socket_drops"] = socket_drops
    if nacks is not None:
        summary["nack"] = nacks.write(agent)
    if chat is not None:
        summary["chat"] = chat.write(agent)
    if puller is not None:
        summary["pull"] = puller.write(agent)
    agent.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
