"""A request server with one FIFO queue and exponential service times: an M/M/1 server when its
clients send Poisson arrivals (:mod:`agents.request_client`)."""

from __future__ import annotations

import random
import socket
import sys
from dataclasses import dataclass
from typing import Optional

from pydantic import Field

from agents.agent import Agent, AgentParams
from agents.flows import MalformedLog
from agents.sockets import DATAGRAM_BUFFER, receive
from agents.formats import REQUEST, RESPONSE
from agents.queues import FifoQueue, Job, QueueLoop, serve
from edgebed.quantities import Duration

TABLES = {
    # One row per request.
    "requests_served": ("node", "agent", "request", "client", "queued_ms", "service_ms"),
}

REQUEST_PORT = 7100
MAX_RESPONSE_BYTES = 65000


class Params(AgentParams):
    """Where the server listens and how fast it serves."""

    port: int = Field(REQUEST_PORT, ge=0, le=65535, description="0: any free port")
    service_rate: float = Field(100.0, gt=0, description="mean requests served per second "
                                                         "of service (exponential service "
                                                         "times)")
    server: int = Field(0, ge=0, lt=2**32, description="server id, carried in responses")
    duration: Optional[Duration] = Field(None, description="default: until stopped")


@dataclass(slots=True)
class Request:
    """A request received."""

    request: int
    content: int
    send_ns: int
    response_bytes: int
    client: tuple


class QueueServer:
    """The server's socket and its one queue (:class:`agents.queues.FifoQueue`)."""

    def __init__(self, agent: Agent, params: Params, sock: socket.socket):
        self.agent, self.params, self.sock = agent, params, sock
        self.port = sock.getsockname()[1]
        self.buffer = bytearray(DATAGRAM_BUFFER)
        self.padding = bytes(MAX_RESPONSE_BYTES)
        self.queue = FifoQueue("requests", params.service_rate, random.Random(agent.seed))
        self.loop = QueueLoop(agent, sock, (self.queue,), self.read_requests, self.depart)
        self.malformed = MalformedLog()
        self.send_errors = 0

    def read_requests(self) -> None:
        """Queue every request waiting on the socket."""
        while (arrival := receive(self.sock, self.buffer, wait=False)) is not None:
            size, received_ns, address = arrival
            message = memoryview(self.buffer)[:size]
            try:
                if size < REQUEST.header_size:
                    raise ValueError(f"{size} bytes, shorter than a request's "
                                     f"{REQUEST.header_size}")
                fields = REQUEST.unpack(message)
            except ValueError:
                self.malformed.add(self.port, message)
                continue
            self.queue.arrive(Request(fields["request"], fields["content"], fields["send_ns"],
                                      fields["response_bytes"], address), received_ns)

    def depart(self, _queue: FifoQueue, job: Job) -> None:
        """Send the response of the request whose service ended."""
        request: Request = job.item
        size = min(max(request.response_bytes, RESPONSE.header_size), MAX_RESPONSE_BYTES)
        header = RESPONSE.pack(request=request.request, server=self.params.server,
                               content=request.content, request_send_ns=request.send_ns,
                               service_ns=job.service_ns)
        try:
            self.sock.sendto(header + self.padding[:size - len(header)], request.client)
        except OSError:
            self.send_errors += 1  # the client counts a timeout
        self.agent.row("requests_served", request.request, f"{request.client[0]}:"
                       f"{request.client[1]}", job.queued_ms, job.service_ns / 1e6)

    def run(self) -> dict:
        """Serve until stopped or for the duration; returns the summary."""
        self.loop.run(self.params.duration)
        self.malformed.write(self.agent)
        return {"port": self.port} | self.queue.summary() | {
            "send_errors": self.send_errors, "malformed": self.malformed.count,
            "lateness": self.loop.pacer.report(self.agent, f"responses-{self.params.server}")}


def main(argv: list[str] | None = None) -> int:
    return serve("request_server", argv, TABLES, Params, QueueServer)


if __name__ == "__main__":
    sys.exit(main())
