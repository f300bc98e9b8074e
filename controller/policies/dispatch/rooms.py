"""What the dispatch centers know about rooms and streams (dispatch, mechanisms 5 and 7)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.policies.dispatch.lookup import LookupMode, LookupState

__all__ = ["Directory", "Lookup", "LookupMode", "Transcoding"]


@dataclass(frozen=True)
class Lookup:
    """Where a stream lives (None: nowhere), the center that said so, and what finding out
    cost: query and reply messages, seconds until the answer; ``fell_back`` when a hint was
    followed and was stale, so the query went out by broadcast after all."""

    node: str | None
    center: str | None
    messages: int
    seconds: float
    fell_back: bool = False


class Directory:
    """The streams each center knows, and the round-trip times between centers (``rtt``,
    seconds, one entry per unordered pair)."""

    def __init__(self, centers: Sequence[str], rtt: Mapping[tuple[str, str], float]):
        if not centers:
            raise ValueError("a directory needs at least one dispatch center")
        self.centers = tuple(centers)
        self._rtt = dict(rtt)
        self.streams: dict[str, dict[str, str]] = {center: {} for center in self.centers}

    def rtt(self, a: str, b: str) -> float:
        if a == b:
            return 0.0
        try:
            return self._rtt[a, b] if (a, b) in self._rtt else self._rtt[b, a]
        except KeyError:
            raise KeyError(f"no round-trip time between centers {a!r} and {b!r}") from None

    def register(self, center: str, stream: str, node: str) -> None:
        self.streams[center][stream] = node

    def unregister(self, center: str, stream: str) -> None:
        self.streams[center].pop(stream, None)

    def lookup(self, center: str, stream: str, mode: LookupMode,
               hint: str | None = None) -> Lookup:
        """Where ``stream`` lives, asked at ``center``: the lookup's state machine run with
        each reply arriving one round-trip time after its query, none lost. A broadcast's
        answer is in at the first positive reply, or when the last negative one arrives; a
        stale hint's "not here" comes first, and only then does the broadcast go out."""
        if stream in self.streams[center]:
            return Lookup(self.streams[center][stream], center, 0, 0.0)
        state = LookupState(center, self.centers, mode, hint if mode is LookupMode.HINT
                            else None)
        replies: list[tuple[float, int, str]] = []
        answered_at = 0.0

        def send(now: float, asked: list[str]) -> None:
            for other in asked:
                heapq.heappush(replies, (now + self.rtt(center, other),
                                         self.centers.index(other), other))

        send(0.0, state.start())
        while replies:
            now, _, other = heapq.heappop(replies)
            was_done = state.done
            known = self.streams[other].get(stream)
            send(now, state.on_reply(other, known is not None, known))
            if state.done and not was_done:
                answered_at = now
        return Lookup(state.node, state.center, state.messages, answered_at,
                      fell_back=state.fell_back)


class Transcoding:
    """Transcoders per room, started when the first client of a protocol other than the room's
    source protocol joins and stopped when the last one leaves. :meth:`join` and
    :meth:`leave` return the (room, protocol) transcoder started or stopped, if any."""

    def __init__(self) -> None:
        self.source: dict[str, str] = {}
        self.clients: dict[tuple[str, str], set[str]] = defaultdict(set)

    def open(self, room: str, protocol: str) -> None:
        self.source[room] = protocol

    def running(self) -> set[tuple[str, str]]:
        return {key for key, clients in self.clients.items() if clients}

    def join(self, room: str, client: str, protocol: str) -> tuple[str, str] | None:
        if room not in self.source:
            raise KeyError(f"room {room!r} has no stream")
        if protocol == self.source[room]:
            return None
        members = self.clients[room, protocol]
        if client in members:
            return None  # decided again (a new period, a redirect): nothing starts
        members.add(client)
        return (room, protocol) if len(members) == 1 else None

    def leave(self, room: str, client: str, protocol: str) -> tuple[str, str] | None:
        members = self.clients.get((room, protocol))
        if not members or client not in members:
            return None
        members.discard(client)
        return None if members else (room, protocol)
