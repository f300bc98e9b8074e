"""The data center of bloom_cdn's media cloud: one fetch queue, a single-server FIFO with
exponential service at ``fetch_rate`` (the paper's mu_o), that sends each fetched item where the
fetch says over its rate-limited link."""

from __future__ import annotations

import random
import socket
import sys
from typing import Optional

from pydantic import Field

from agents.bloom_cdn.bloom_cdn_node import (CACHE_ONLY, DC_SERVER, DIRECT, FETCH, ITEM, TABLES,
                                             Message, address_number, address_text, item_bytes,
                                             pack, response, unpack)
from agents.agent import Agent, AgentParams, NodeRef
from agents.flows import MalformedLog
from agents.sockets import DATAGRAM_BUFFER, receive
from agents.bloom_cdn.formats import CDN
from agents.queues import FifoQueue, Job, QueueLoop, serve
from agents.request_server import REQUEST_PORT
from edgebed.quantities import Duration, Size


class Params(AgentParams):
    """Where the data center listens, how fast it fetches, how large its items are."""

    port: int = Field(REQUEST_PORT, ge=0, le=65535, description="where fetches arrive (0: any "
                                                                   "free port)")
    nodes: list[NodeRef] = Field(min_length=1, description="the content nodes, the only hosts "
                                 "whose fetches it serves (a fetch names where the item goes)")
    fetch_rate: float = Field(1200.0, gt=0, description="fetches per second (mu_o)")
    item_bytes: Size = Field(10_000, gt=0, description="mean item size (as the nodes')")
    item_sigma: float = Field(0.5, ge=0, description="log-normal spread of item sizes (as the "
                                                     "nodes')")
    duration: Optional[Duration] = Field(None, description="default: until stopped")


class DataCenter:
    """The data center's socket and fetch queue."""

    def __init__(self, agent: Agent, params: Params, sock: socket.socket):
        self.agent, self.params, self.sock = agent, params, sock
        self.nodes = {address_number(node) for node in params.nodes}
        self.fetch = FifoQueue("fetch", params.fetch_rate, random.Random(agent.seed))
        self.loop = QueueLoop(agent, sock, (self.fetch,), self.read, self.depart)
        self.buffer = bytearray(DATAGRAM_BUFFER)
        self.malformed = MalformedLog()
        self.sent = {"items": 0, "direct": 0, "copies": 0, "bytes": 0, "send_errors": 0}

    def read(self) -> None:
        while (arrival := receive(self.sock, self.buffer, wait=False)) is not None:
            size, received_ns, source = arrival
            data = memoryview(self.buffer)[:size]
            try:
                if size < CDN.header_size:
                    raise ValueError("shorter than a cdn message")
                if address_number(source[0]) not in self.nodes:
                    raise ValueError(f"a fetch from {source[0]}, not a content node")
                kind, message, deliver, copy_to = unpack(data)
                if kind != FETCH or not deliver[0]:
                    raise ValueError("not a fetch with somewhere to deliver")
            except ValueError:
                self.malformed.add(self.params.port, data)
                continue
            self.fetch.arrive((message, deliver, copy_to), received_ns)

    def send(self, data: bytes, address: tuple[int, int]) -> None:
        try:
            self.sock.sendto(data, (address_text(address[0]), address[1]))
            self.sent["bytes"] += len(data)
        except OSError:
            self.sent["send_errors"] += 1  # the user counts a timeout

    def depart(self, _queue: FifoQueue, job: Job) -> None:
        message, deliver, copy_to = job.item
        self.agent.row("cdn_queues", "fetch", message.key, job.queued_ms, job.service_ns / 1e6,
                       1)
        size = item_bytes(message.content, self.params.item_bytes, self.params.item_sigma)
        if message.flags & DIRECT:
            self.sent["direct"] += 1
            self.send(response(message, DC_SERVER, job.service_ns, size), deliver)
        else:
            self.sent["items"] += 1
            self.send(pack(ITEM, message, size), deliver)
        if copy_to[0]:
            self.sent["copies"] += 1
            copy = Message(**message.fields())
            copy.flags = (copy.flags & ~DIRECT) | CACHE_ONLY  # the home only caches it
            self.send(pack(ITEM, copy, size), copy_to)

    def run(self) -> dict:
        self.loop.run(self.params.duration)
        self.malformed.write(self.agent)
        return {"fetch": self.fetch.summary(), **self.sent, "malformed": self.malformed.count,
                "lateness": self.loop.pacer.report(self.agent, "items")}


def main(argv: list[str] | None = None) -> int:
    return serve("bloom_cdn_dc", argv, TABLES, Params, DataCenter)


if __name__ == "__main__":
    sys.exit(main())
