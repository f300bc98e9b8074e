"""A regional dispatch center of dispatch, as a host: its side of the dynamic back-to-source
lookup between centers, on real datagrams."""

from __future__ import annotations

import errno
import random
import select
import socket
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Optional

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from agents.agent import Agent, AgentParams, NodeRef, epoch_seconds
from agents.flows import MalformedLog
from agents.sockets import DATAGRAM_BUFFER, POLL_S, receive, receiving_socket
from agents.dispatch.formats import LOOKUP_QUERY, LOOKUP_REPLY
from agents.wire import message_type
from controller.policies.dispatch.lookup import LookupMode, LookupState
from edgebed.quantities import Duration, Fraction, PositiveDuration
from edgebed import clock

LOOKUP_PORT = 6110

_MODE_NAMES = "|".join(mode.value for mode in LookupMode)
# In the published schema too, a list of modes or their names separated by commas: a scenario
# variable expands to one scalar.
MODES_SCHEMA = {"anyOf": [
    {"type": "array", "items": {"enum": [mode.value for mode in LookupMode]}, "minItems": 1},
    {"type": "string", "pattern": rf"^\s*({_MODE_NAMES})(\s*,\s*({_MODE_NAMES}))*\s*$"}]}

TABLES = {
    # owner: the center the stream is registered at; hint: the center the hint named (empty for
    # broadcast); stale: the hint drawn stale (drawn for every lookup, used by hint lookups);
    # seconds: start to answer (empty while unfinished); messages: queries sent, retransmissions
    # included, and replies received, late ones too (LookupState's count); outcome: found,
    # nowhere (every center asked said "not here"), failed (retransmissions ran out) or
    # unfinished (the agent stopped first).
    "lookups": ("node", "agent", "lookup", "stream", "mode", "owner", "hint", "stale",
                "started_s", "seconds", "messages", "retransmissions", "fell_back", "outcome",
                "center", "found_node"),
    # attempt: 0 for a lookup's first query to that center, 1, 2, ... for its retransmissions;
    # late: the lookup was done before this reply came.
    "lookup_replies": ("node", "agent", "lookup", "center", "attempt", "found", "rtt_ms",
                       "late"),
}


class Params(AgentParams):
    """The centers and their streams, and the lookups this center starts."""

    port: int = Field(LOOKUP_PORT, ge=1, le=65535, description="where every center listens")
    centers: list[NodeRef] = Field(min_length=2, description="every dispatch center, this "
                                                             "one included")
    ingest: list[NodeRef] = Field(description="each center's ingest node, in the order of "
                                              "centers: where its streams are pushed")
    streams: int = Field(30, ge=1, description="stream ids 0..streams-1, stream s registered "
                                               "at center s mod K")
    rate: float = Field(0.0, ge=0, description="lookups this center starts per second "
                                               "(Poisson); 0: it only answers")
    modes: Annotated[list[LookupMode], WithJsonSchema(MODES_SCHEMA)] = Field(
        [LookupMode.BROADCAST, LookupMode.HINT], min_length=1,
        description="the lookups' modes, in turn (a list, or names separated by commas)")
    stale_share: Fraction = Field(0.0, description="lookups whose hint is stale")
    timeout: PositiveDuration = Field(0.5, description="wait for replies before sending the "
                                                       "unanswered queries again")
    retries: int = Field(3, ge=0, description="retransmissions before a lookup fails")
    warmup: Duration = Field(1.0, description="the first lookup no earlier than this after "
                                              "the start: every center listening by then")
    duration: Optional[Duration] = Field(None, description="default: until stopped")

    @field_validator("modes", mode="before")
    @classmethod
    def _names_separated_by_commas(cls, value):
        # A scenario variable expands to one scalar, so a list of modes comes as "a,b".
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @model_validator(mode="after")
    def _centers_and_streams_agree(self) -> "Params":
        if len(self.ingest) != len(self.centers):
            raise ValueError(f"ingest names {len(self.ingest)} nodes for {len(self.centers)} "
                             f"centers: one per center, in the same order")
        if len(set(self.centers)) != len(self.centers):
            raise ValueError("a center is named twice")
        if self.streams < len(self.centers):
            raise ValueError(f"{self.streams} streams for {len(self.centers)} centers: some "
                             f"center would have none to be asked for")
        return self


def own_socket(centers: Sequence[str], port: int) -> tuple[socket.socket, str]:
    """The socket of this center and its address: bound to the first of ``centers`` this host
    can bind ``port`` on. In a scenario a host has only its own address; centers sharing one
    host (loopback addresses in tests) take the addresses in the order they start."""
    for address in centers:
        try:
            return receiving_socket(port, bind_address=address, reuse=False), address
        except OSError as error:
            if error.errno not in (errno.EADDRNOTAVAIL, errno.EADDRINUSE):
                raise
    raise SystemExit(f"dispatch_center: no address of centers {', '.join(centers)} is this "
                     f"host's with port {port} free")


@dataclass
class Lookup:
    """One lookup this center started: what it asked and drew, its state, its timer."""

    number: int
    stream: int
    mode: LookupMode
    owner: str
    hint: str | None
    stale: bool
    started_ns: int
    state: LookupState
    deadline: float  # monotonic seconds: the timer
    answered_ns: int | None = None


class DispatchCenter:
    """The center's socket, its registered streams and its open lookups."""

    def __init__(self, agent: Agent, params: Params, sock: socket.socket, address: str):
        self.agent, self.params, self.sock, self.address = agent, params, sock, address
        self.centers = tuple(params.centers)
        index = self.centers.index(address)
        self.registered = {stream: params.ingest[index] for stream in range(params.streams)
                           if stream % len(self.centers) == index}
        self.elsewhere = [stream for stream in range(params.streams)
                          if stream not in self.registered]
        self.random = random.Random(f"{agent.seed}/{address}")
        self.lookups: list[Lookup] = []
        self.open: dict[int, Lookup] = {}
        self.buffer = bytearray(DATAGRAM_BUFFER)
        self.malformed = MalformedLog()
        self.counts = {"queries_answered": 0, "replies_unmatched": 0, "send_errors": 0}

    def send(self, data: bytes, address: str) -> None:
        try:
            self.sock.sendto(data, (address, self.params.port))
        except OSError:
            self.counts["send_errors"] += 1  # as lost: the timer sends it again

    def query(self, lookup: Lookup, centers: list[str]) -> None:
        """Send ``lookup``'s queries to ``centers`` and start its timer again."""
        for center in centers:
            self.send(LOOKUP_QUERY.pack(lookup=lookup.number, stream=lookup.stream,
                                        attempt=lookup.state.round, send_ns=clock.time_ns()),
                      center)
        if centers:
            lookup.deadline = clock.monotonic() + self.params.timeout

    def start_lookup(self) -> None:
        number = len(self.lookups)
        stream = self.random.choice(self.elsewhere)
        owner = self.centers[stream % len(self.centers)]
        mode = self.params.modes[number % len(self.params.modes)]
        stale = self.random.random() < self.params.stale_share
        hint = owner
        if stale:
            before = [c for c in self.centers if c not in (owner, self.address)] or [self.address]
            hint = self.random.choice(before)
        followed = hint if mode is LookupMode.HINT else None
        state = LookupState(self.address, self.centers, mode, followed, self.params.timeout,
                            self.params.retries)
        lookup = Lookup(number, stream, mode, owner, followed, stale, clock.time_ns(), state,
                        clock.monotonic())
        self.lookups.append(lookup)
        self.open[number] = lookup
        self.query(lookup, state.start())
        self.settle(lookup, lookup.started_ns)

    def settle(self, lookup: Lookup, now_ns: int) -> None:
        if lookup.state.done and lookup.number in self.open:
            del self.open[lookup.number]
            lookup.answered_ns = now_ns

    def expire(self, now: float) -> None:
        """Fire the timers that are due."""
        for lookup in [open_ for open_ in self.open.values() if open_.deadline <= now]:
            self.query(lookup, lookup.state.on_timeout())
            self.settle(lookup, clock.time_ns())

    def answer(self, data, source: str) -> None:
        query = LOOKUP_QUERY.unpack(data)
        node = self.registered.get(query["stream"])
        self.send(LOOKUP_REPLY.pack(lookup=query["lookup"], stream=query["stream"],
                                    attempt=query["attempt"], found=int(node is not None),
                                    node=int.from_bytes(socket.inet_aton(node), "big")
                                    if node else 0, query_send_ns=query["send_ns"]),
                  source)
        self.counts["queries_answered"] += 1

    def take_reply(self, data, source: str, received_ns: int) -> None:
        reply = LOOKUP_REPLY.unpack(data)
        number = reply["lookup"]
        if number >= len(self.lookups) or self.lookups[number].stream != reply["stream"]:
            self.counts["replies_unmatched"] += 1
            return
        lookup = self.lookups[number]
        late = lookup.state.done
        found = bool(reply["found"])
        node = socket.inet_ntoa(reply["node"].to_bytes(4, "big")) if found else None
        self.agent.row("lookup_replies", number, source, reply["attempt"], found,
                       (received_ns - reply["query_send_ns"]) / 1e6, late)
        self.query(lookup, lookup.state.on_reply(source, found, node))
        self.settle(lookup, received_ns)

    def read(self) -> None:
        while (arrival := receive(self.sock, self.buffer, wait=False)) is not None:
            size, received_ns, (source, _) = arrival
            data = memoryview(self.buffer)[:size]
            kind = message_type(data, (LOOKUP_QUERY, LOOKUP_REPLY))
            try:
                if source not in self.centers or source == self.address:
                    raise ValueError(f"from {source}, not another center")
                if kind is LOOKUP_QUERY:
                    self.answer(data, source)
                elif kind is LOOKUP_REPLY:
                    self.take_reply(data, source, received_ns)
                else:
                    raise ValueError("neither a lookup query nor a reply")
            except (ValueError, struct.error):  # counted, never fatal
                self.malformed.add(self.params.port, bytes(data))

    def run(self) -> dict:
        params = self.params
        begun = clock.monotonic()
        end = begun + params.duration if params.duration is not None else float("inf")
        next_start = (begun + params.warmup + self.random.expovariate(params.rate)
                      if params.rate > 0 else float("inf"))
        while not self.agent.stopping and (now := clock.monotonic()) < end:
            due = min([next_start, end] + [lookup.deadline for lookup in self.open.values()])
            if select.select([self.sock], [], [],
                             clock.real_seconds(min(max(0.0, due - now), POLL_S)))[0]:
                self.read()
            now = clock.monotonic()
            while now >= next_start:
                self.start_lookup()
                next_start += self.random.expovariate(params.rate)
            self.expire(now)
        self.read()
        return self.finish()

    def finish(self) -> dict:
        outcomes: dict[str, int] = {}
        for lookup in self.lookups:
            state = lookup.state
            outcome = ("unfinished" if not state.done else "failed" if state.failed
                       else "found" if state.node is not None else "nowhere")
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            self.agent.row("lookups", lookup.number, lookup.stream, lookup.mode.value,
                           lookup.owner, lookup.hint, lookup.stale,
                           epoch_seconds(lookup.started_ns),
                           (lookup.answered_ns - lookup.started_ns) / 1e9
                           if lookup.answered_ns is not None else None,
                           state.messages, state.retransmissions, state.fell_back, outcome,
                           state.center if state.node is not None else None, state.node)
        self.malformed.write(self.agent)
        return {"address": self.address, "streams_registered": len(self.registered),
                "lookups": len(self.lookups), **outcomes, **self.counts,
                "malformed": self.malformed.count}


def main(argv: list[str] | None = None) -> int:
    agent = Agent("dispatch_center", argv, TABLES)
    params = Params.model_validate(agent.params)
    sock, address = own_socket(params.centers, params.port)
    print(f"listening on {params.port} at {address}", file=sys.stderr, flush=True)
    sock.setblocking(False)
    try:
        summary = DispatchCenter(agent, params, sock, address).run()
    finally:
        sock.close()
    agent.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
