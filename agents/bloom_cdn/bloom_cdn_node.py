"""A content node of bloom_cdn's media cloud (Yu, Jin, Yin): three single-server FIFO queues,
routing over a Chord ring, an LRU cache with its Bloom filter, and the three strategies that
decide where a request the filter calls a miss goes."""

from __future__ import annotations

import ipaddress
import random
import socket
import sys
import zlib
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
from pydantic import Field

from controller.policies.bloom_cdn.bloom import (NODE_FILTER_BYTES, FilteredCache, GlobalFilter, apply_update,
                          bit_positions, delta_update)
from controller.policies.bloom_cdn.chord import ChordRing, identifier
from agents.agent import Agent, AgentParams, NodeRef
from agents.flows import MalformedLog
from agents.sockets import DATAGRAM_BUFFER, receive
from agents.bloom_cdn.formats import CDN, FILTER_UPDATE
from agents.formats import REQUEST, RESPONSE
from agents.wire import message_type
from agents.queues import FifoQueue, Job, QueueLoop, serve
from agents.request_client import source_address
from agents.request_server import MAX_RESPONSE_BYTES, REQUEST_PORT
from edgebed.quantities import Duration, Size

STRATEGIES = ("linear", "parallel", "cut_through")
ROUTE, FETCH, ITEM = 1, 2, 3  # agents.bloom_cdn.formats.CDN_KINDS
# cdn flags: the entry tested a filter; it said the home caches the item; nobody waits for this
# (a request routed only to cache the item, an item sent only to be cached); the fetched item
# goes to the user itself.
FILTERED, JUDGED, CACHE_ONLY, DIRECT = 1, 2, 4, 8
DC_SERVER = 1000  # the data center's id in the responses it sends (nodes send their index)

TABLES = {
    # One row per job a queue served.
    "cdn_queues": ("node", "agent", "queue", "request", "queued_ms", "service_ms", "waited"),
    # One row per lookup at a home node.
    "cdn_lookups": ("node", "agent", "request", "content", "hops", "filtered", "judged",
                    "cached", "waited"),
    # One row per filter update sent.
    "filter_syncs": ("node", "agent", "filter_version", "peers", "delta_bytes", "full_bytes"),
}


def item_url(content: int) -> str:
    return f"http://media.cloud/item/{content}"


def item_bytes(content: int, mean: float, sigma: float) -> int:
    """Item ``content``'s size: log-normal with mean ``mean`` and spread ``sigma``, the same on
    every host (drawn from the item's number), at most one datagram."""
    draw = random.Random(content).lognormvariate(np.log(mean) - sigma ** 2 / 2, sigma)
    return int(min(max(round(draw), RESPONSE.header_size), MAX_RESPONSE_BYTES))


def address_number(address: str) -> int:
    return int(ipaddress.IPv4Address(address))


def address_text(number: int) -> str:
    return str(ipaddress.IPv4Address(number))


class Params(AgentParams):
    """The ring, the data center, the strategy, the queues' rates, the cache and the filter."""

    port: int = Field(REQUEST_PORT, ge=0, le=65535, description="where users' requests, the "
                      "other nodes' and the data center's messages arrive (every node alike; "
                      "0: any free port, for a ring of one)")
    nodes: list[NodeRef] = Field(min_length=1, max_length=255, description="the Chord ring's "
                                 "nodes in ring order, this one among them")
    dc: NodeRef = Field(description="the data center")
    dc_port: int = Field(REQUEST_PORT, ge=1, le=65535, description="where it takes fetches")
    strategy: Literal[STRATEGIES] = Field("linear", description="where a request the filter "
                                          "calls a miss goes: linear, parallel, cut_through")
    routing_rate: float = Field(300.0, gt=0, description="routing services per second (mu_t)")
    lookup_rate: float = Field(500.0, gt=0, description="cache lookups per second (mu_l)")
    response_rate: float = Field(60.0, gt=0, description="responses per second (mu_r)")
    items: int = Field(1000, ge=1, description="items in the catalogue, requested uniformly")
    hit_rate: float = Field(0.0, ge=0, le=1, description="the share of its home items a node's "
                                                         "LRU cache holds")
    item_bytes: Size = Field(10_000, gt=0, description="mean item size")
    item_sigma: float = Field(0.5, ge=0, description="log-normal spread of item sizes (at 0.5 "
                              "and a 10 kB mean the one-datagram cap cuts one in 30,000)")
    request_bytes: Size = Field(60, ge=CDN.header_size, le=1400, description="size of a "
                                "request routed between nodes or sent to the data center")
    sync_every: int = Field(400, ge=1, description="lookups between filter updates")
    duration: Optional[Duration] = Field(None, description="default: until stopped")


@dataclass(slots=True)
class Message:
    """A request on its way (the fields of a ``cdn`` message, without kind and padding)."""

    flags: int
    hops: int
    entry: int
    request: int
    client: int
    client_port: int
    content: int
    send_ns: int

    @property
    def key(self) -> str:
        return f"{address_text(self.client)}:{self.client_port}:{self.request}"

    def fields(self) -> dict:
        return {"flags": self.flags, "hops": self.hops, "entry": self.entry,
                "request": self.request, "client": self.client,
                "client_port": self.client_port, "content": self.content,
                "send_ns": self.send_ns}


def pack(kind: int, message: Message, size: int, deliver: tuple[int, int] = (0, 0),
         copy_to: tuple[int, int] = (0, 0)) -> bytes:
    """A ``cdn`` message of ``size`` bytes (padding or an item's bytes after the header)."""
    header = CDN.pack(kind=kind, **message.fields(), deliver=deliver[0], deliver_port=deliver[1],
                      copy_to=copy_to[0], copy_port=copy_to[1])
    return header + bytes(max(0, round(size) - len(header)))


def unpack(data) -> tuple[int, Message, tuple[int, int], tuple[int, int]]:
    """kind, message, deliver and copy addresses of a ``cdn`` message."""
    fields = CDN.unpack(data)
    kind = fields.pop("kind")
    deliver = (fields.pop("deliver"), fields.pop("deliver_port"))
    copy_to = (fields.pop("copy_to"), fields.pop("copy_port"))
    if kind not in (ROUTE, FETCH, ITEM):
        raise ValueError(f"unknown cdn kind {kind}")
    return kind, Message(**fields), deliver, copy_to


def response(message: Message, server: int, service_ns: int, size: int) -> bytes:
    """The item as the user gets it: a response padded to the item's size."""
    header = RESPONSE.pack(request=message.request, server=server, content=message.content,
                           request_send_ns=message.send_ns, service_ns=service_ns)
    return header + bytes(max(0, size - len(header)))


class ContentNode:
    """The node's socket, queues, cache and filters."""

    def __init__(self, agent: Agent, params: Params, sock: socket.socket):
        self.agent, self.params, self.sock = agent, params, sock
        self.addresses = [(address_number(node), params.port) for node in params.nodes]
        own = address_number(source_address(params.dc))
        indexes = [i for i, (number, _) in enumerate(self.addresses) if number == own]
        if not indexes:
            raise SystemExit(f"{agent.node}: this host ({address_text(own)}) is none of the "
                             f"ring's nodes")
        self.index = indexes[0]
        self.addresses[self.index] = (own, sock.getsockname()[1])
        self.dc = (address_number(params.dc), params.dc_port)
        # Whose cdn messages count: a message names whom to answer, so no other host's may.
        self.peers = {number for number, _ in self.addresses} | {self.dc[0]}
        self.ring = ChordRing.evenly_spread(len(params.nodes))
        self.keys = [identifier(item_url(c)) for c in range(params.items)]
        self.positions = bit_positions([item_url(c) for c in range(params.items)],
                                       NODE_FILTER_BYTES * 8)
        self.homes = [self.ring.successor(key) for key in self.keys]
        rng = random.Random(agent.seed)
        self.routing = FifoQueue("routing", params.routing_rate, rng)
        self.lookup = FifoQueue("lookup", params.lookup_rate, rng)
        self.responses = FifoQueue("response", params.response_rate, rng)
        self.loop = QueueLoop(agent, sock, (self.routing, self.lookup, self.responses),
                              self.read, self.depart)
        self.buffer = bytearray(DATAGRAM_BUFFER)
        self.malformed = MalformedLog()
        self.global_filter = GlobalFilter(len(params.nodes))
        self.versions = [0] * len(params.nodes)  # the last update applied from each node
        for node in range(len(params.nodes)):
            cache = self._initial_cache(node)
            self.global_filter.slices[node] = cache.filter.bitmap()
            if node == self.index:
                self.cache = cache
        self.sent_bitmap = self.cache.filter.bitmap()
        # A filter-judged miss is fetched at once and routed to its home to be cached there; its
        # item may reach the home before the request does (see _filled).
        self.cached_before_fill: dict[str, bool] = {}
        self.looked_up_unfilled: set[str] = set()
        self.counts = dict.fromkeys(("requests", "lookups", "hits", "fetches", "items_in",
                                     "fills_sent", "answered", "updates_sent",
                                     "updates_applied", "update_gaps", "send_errors"), 0)

    def _initial_cache(self, node: int) -> FilteredCache:
        """Node ``node``'s cache at the start: ``hit_rate`` of its home items, lowest first."""
        home = [c for c in range(self.params.items) if self.homes[c] == node]
        cache = FilteredCache(round(self.params.hit_rate * len(home)), self.positions)
        for content in home[:cache.capacity]:
            cache.insert(content)
        return cache

    # --- the wire

    def send(self, data: bytes, address: tuple[int, int]) -> None:
        try:
            self.sock.sendto(data, (address_text(address[0]), address[1]))
        except OSError:
            self.counts["send_errors"] += 1  # the user counts a timeout

    def read(self) -> None:
        """Take every datagram waiting: a user's request, a routed request, an item, a filter
        update."""
        while (arrival := receive(self.sock, self.buffer, wait=False)) is not None:
            size, received_ns, address = arrival
            data = memoryview(self.buffer)[:size]
            try:
                kind = message_type(data, (REQUEST, CDN, FILTER_UPDATE))
                if kind is REQUEST:
                    self.user_request(REQUEST.unpack(data), address, received_ns)
                elif kind is CDN:
                    if address_number(address[0]) not in self.peers:
                        raise ValueError(f"a cdn message from {address[0]}, not a ring node "
                                         f"or the data center")
                    self.cdn_message(*unpack(data), received_ns)
                elif kind is FILTER_UPDATE:
                    self.filter_update(FILTER_UPDATE.unpack(data), bytes(data[
                        FILTER_UPDATE.header_size:]))
                else:
                    raise ValueError("not a request, cdn message or filter update")
            except ValueError:
                self.malformed.add(self.params.port, data)

    def user_request(self, fields: dict, address: tuple, received_ns: int) -> None:
        self.counts["requests"] += 1
        content = fields["content"]
        if content >= self.params.items:
            raise ValueError(f"content {content} is outside the catalogue")
        message = Message(0, 0, self.index, fields["request"], address_number(address[0]),
                          address[1], content, fields["send_ns"])
        if self.params.strategy != "linear":
            home = self.homes[content]
            message.flags |= FILTERED
            if self.global_filter.contains(home, self.positions[content]):
                message.flags |= JUDGED
            else:
                self.filter_miss(message)
        self.toward_home(message, received_ns)

    def filter_miss(self, message: Message) -> None:
        """The strategy's miss path: fetch from the data center now (the item to this entry,
        or to the user and a copy to the home); the request goes on to the home only to cache."""
        fetch = Message(**message.fields())
        message.flags |= CACHE_ONLY
        home = self.addresses[self.homes[message.content]]
        if self.params.strategy == "parallel":
            data = pack(FETCH, fetch, self.params.request_bytes, deliver=self.addresses[self.index])
        else:
            fetch.flags |= DIRECT
            data = pack(FETCH, fetch, self.params.request_bytes,
                        deliver=(message.client, message.client_port), copy_to=home)
        self.counts["fetches"] += 1
        self.send(data, self.dc)

    def toward_home(self, message: Message, arrival_ns: int) -> None:
        """Into the lookup queue at the home, the routing queue anywhere else."""
        if self.homes[message.content] == self.index:
            self.lookup.arrive(message, arrival_ns)
        else:
            self.routing.arrive(message, arrival_ns)

    def cdn_message(self, kind: int, message: Message, _deliver, _copy_to,
                    received_ns: int) -> None:
        if message.content >= self.params.items:
            raise ValueError(f"content {message.content} is outside the catalogue")
        if kind == ROUTE:
            self.toward_home(message, received_ns)
        elif kind == ITEM:
            self.item(message, received_ns)
        else:
            raise ValueError("a fetch sent to a content node")

    def item(self, message: Message, received_ns: int) -> None:
        """An item from the data center (or from an entry, to cache): cached at its home; one a
        user waits for goes into the response queue, and from a parallel entry on to the
        home."""
        self.counts["items_in"] += 1
        home = self.homes[message.content]
        if home == self.index:
            if message.flags & FILTERED and not message.flags & JUDGED:
                self._filled(message)  # a filter-judged miss's copy
            self.cache.insert(message.content)
        elif not message.flags & CACHE_ONLY:
            fill = Message(**message.fields())
            fill.flags |= CACHE_ONLY
            self.counts["fills_sent"] += 1
            self.send(pack(ITEM, fill, self.size_of(message.content)), self.addresses[home])
        if not message.flags & CACHE_ONLY:
            self.responses.arrive(message, received_ns)

    def _filled(self, message: Message) -> None:
        """A filter-judged miss's item reached its home: if its own routed request has not been
        looked up yet, that lookup is to count whether the item was cached before the fill
        (what the entry's filter was judged against), not after."""
        if message.key in self.looked_up_unfilled:
            self.looked_up_unfilled.discard(message.key)
        else:
            self.cached_before_fill[message.key] = message.content in self.cache

    def size_of(self, content: int) -> int:
        return item_bytes(content, self.params.item_bytes, self.params.item_sigma)

    # --- the filters

    def synchronise(self) -> None:
        """Send the filter's change since the last update to every other node."""
        current = self.cache.filter.bitmap()
        delta = delta_update(self.sent_bitmap, current)
        self.sent_bitmap = current
        self.versions[self.index] += 1
        data = FILTER_UPDATE.pack(node=self.index, filter_version=self.versions[self.index]) \
            + delta
        peers = [address for i, address in enumerate(self.addresses) if i != self.index]
        for address in peers:
            self.send(data, address)
        self.counts["updates_sent"] += 1
        self.agent.row("filter_syncs", self.versions[self.index], len(peers), len(data),
                       FILTER_UPDATE.header_size + NODE_FILTER_BYTES)

    def filter_update(self, fields: dict, delta: bytes) -> None:
        node, version = fields["node"], fields["filter_version"]
        if node >= len(self.addresses) or node == self.index:
            raise ValueError(f"a filter update from node {node}")
        if version <= self.versions[node]:
            return  # a duplicate or one overtaken
        if version != self.versions[node] + 1:
            self.counts["update_gaps"] += 1  # an update lost: this slice is wrong until resent
        try:
            self.global_filter.slices[node] = apply_update(self.global_filter.slices[node], delta)
        except (zlib.error, ValueError) as error:
            raise ValueError(f"a filter update that does not apply: {error}") from error
        self.versions[node] = version
        self.counts["updates_applied"] += 1

    # --- departures

    def depart(self, queue: FifoQueue, job: Job) -> None:
        message: Message = job.item
        self.agent.row("cdn_queues", queue.name, message.key, job.queued_ms,
                       job.service_ns / 1e6, int(not message.flags & CACHE_ONLY))
        if queue is self.routing:
            path = self.ring.route(self.index, self.keys[message.content])
            message.hops += 1
            self.send(pack(ROUTE, message, self.params.request_bytes), self.addresses[path[1]])
        elif queue is self.lookup:
            self.looked_up(message, job)
        else:
            self.counts["answered"] += 1
            self.send(response(message, self.index, job.service_ns,
                               self.size_of(message.content)),
                      (message.client, message.client_port))

    def looked_up(self, message: Message, job: Job) -> None:
        """At the home: answer a hit, fetch a miss a user waits for; count what the filter
        said against what the cache holds."""
        self.counts["lookups"] += 1
        cached = self.cache.hit(message.content)
        waited = not message.flags & CACHE_ONLY
        if not waited:
            if message.key in self.cached_before_fill:
                cached = self.cached_before_fill.pop(message.key)
            else:
                self.looked_up_unfilled.add(message.key)
        self.counts["hits"] += cached
        self.agent.row("cdn_lookups", message.key, message.content, message.hops,
                       int(bool(message.flags & FILTERED)), int(bool(message.flags & JUDGED)),
                       int(cached), int(waited))
        if waited:
            if cached:
                self.responses.arrive(message, job.departure_ns)
            else:
                self.counts["fetches"] += 1
                self.send(pack(FETCH, message, self.params.request_bytes,
                               deliver=self.addresses[self.index]), self.dc)
        if self.counts["lookups"] % self.params.sync_every == 0:
            self.synchronise()

    def run(self) -> dict:
        self.loop.run(self.params.duration)
        self.malformed.write(self.agent)
        return {"index": self.index, "strategy": self.params.strategy,
                "capacity": self.cache.capacity, "home_items": self.homes.count(self.index),
                **self.counts, "malformed": self.malformed.count,
                "queues": {queue.name: queue.summary() for queue in self.loop.queues},
                "lateness": self.loop.pacer.report(self.agent, f"departures-{self.index}")}


def main(argv: list[str] | None = None) -> int:
    return serve("bloom_cdn_node", argv, TABLES, Params, ContentNode)


if __name__ == "__main__":
    sys.exit(main())
