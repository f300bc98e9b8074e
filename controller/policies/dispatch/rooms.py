"""What the dispatch centers know about rooms and streams (seed 001, mechanisms 5 and 7).

* :class:`Directory` — dynamic back-to-source: each regional center knows the streams pushed in
  its region; a center asked for a stream it does not know either broadcasts the query to the
  other centers or follows a hint carried in the room's signalling (the center the streamer
  registered with), falling back to broadcast when the hint is stale. Every lookup says how many
  messages it took and how long, from the centers' round-trip times.
* :class:`Transcoding` — passive transcoding: a room gets a transcoder for a protocol only
  while a client of that protocol, other than the stream's own, is in it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum


class LookupMode(str, Enum):
    BROADCAST = "broadcast"
    HINT = "hint"


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
        """Where ``stream`` lives, asked at ``center``."""
        if stream in self.streams[center]:
            return Lookup(self.streams[center][stream], center, 0, 0.0)
        if mode is LookupMode.HINT and hint is not None:
            if hint not in self.streams:
                raise KeyError(f"hint names unknown center {hint!r}")
            if hint == center:
                # Stale, and known to be without asking anyone: straight to broadcast.
                return dataclasses.replace(self._broadcast(center, stream), fell_back=True)
            if stream in self.streams[hint]:
                return Lookup(self.streams[hint][stream], hint, 2, self.rtt(center, hint))
            stale = self._broadcast(center, stream, exclude={hint})
            # The hinted center's "not here" comes first: only then does the broadcast go out.
            return Lookup(stale.node, stale.center, stale.messages + 2,
                          self.rtt(center, hint) + stale.seconds, fell_back=True)
        return self._broadcast(center, stream)

    def _broadcast(self, center: str, stream: str, exclude: frozenset | set = frozenset()
                   ) -> Lookup:
        """Ask every other center at once; each answers (known or not). The answer is in at the
        first positive reply, or when the last negative one arrives."""
        asked = [other for other in self.centers if other != center and other not in exclude]
        knowing = [other for other in asked if stream in self.streams[other]]
        if knowing:
            nearest = min(knowing, key=lambda other: self.rtt(center, other))
            return Lookup(self.streams[nearest][stream], nearest, 2 * len(asked),
                          self.rtt(center, nearest))
        return Lookup(None, None, 2 * len(asked),
                      max((self.rtt(center, other) for other in asked), default=0.0))


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
        members.add(client)
        return (room, protocol) if len(members) == 1 else None

    def leave(self, room: str, client: str, protocol: str) -> tuple[str, str] | None:
        members = self.clients.get((room, protocol))
        if not members or client not in members:
            return None
        members.discard(client)
        return None if members else (room, protocol)
