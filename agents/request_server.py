"""A request server with one FIFO queue and exponential service times: an M/M/1 server when its
clients send Poisson arrivals (:mod:`agents.request_client`).

    python -m agents.request_server --node NAME --out RUN_DIR --params JSON [--seed N]

Requests (``agents.formats.REQUEST``) are served one at a time in the order they arrived, each
for a service time drawn from the exponential distribution of rate ``service_rate`` (seeded by
``--seed``). Service is a schedule, not work: request k arriving at a_k (its kernel receive
timestamp) starts at ``s_k = max(a_k, d_(k-1))`` and departs at ``d_k = s_k + service_k``, and
its response leaves at d_k on an absolute deadline (:class:`~agents.common.Pacer`). A response
sent late does not delay the next one, so the queue follows the model whatever the server's own
scheduling noise, which shows up only in ``sender_lateness``.

The response (``agents.formats.RESPONSE``: request, server, content, the request's send time,
the service time) goes back to the address the request came from, padded to the
``response_bytes`` the request asked for, at most 65000. Each served request gets a row of
``requests_served``: request id, client address, time queued, time in service. The summary adds
the arrival rate and the utilisation measured (time in service over the time from the first
arrival to the last departure). Datagrams that are not well-formed requests are counted in
``malformed``.

It listens like the viewer (``listening on PORT`` on stderr, ``port: 0`` for any free port) and
stops on SIGTERM or SIGINT or after ``duration``; requests still queued then are not answered.
"""

from __future__ import annotations

import math
import random
import select
import socket
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

from pydantic import Field

from agents.common import (POLL_S, WAKE_EARLY_NS, Agent, AgentParams, MalformedLog, Pacer,
                           receive)
from agents.formats import REQUEST, RESPONSE
from agents.common import DATAGRAM_BUFFER, listen
from topologies.model import Duration

TABLES = {
    # One row per request.
    "requests_served": ("node", "agent", "request", "client", "queued_ms", "service_ms"),
}

REQUEST_PORT = 7100
MAX_RESPONSE_BYTES = 65000


def readable_before(sock: socket.socket, deadline_ns: float) -> bool:
    """Wait until ``sock`` has something to read, but no later than WAKE_EARLY_NS before
    ``deadline_ns`` (monotonic clock) nor longer than POLL_S; whether it has."""
    timeout_s = min(POLL_S, (deadline_ns - WAKE_EARLY_NS - time.monotonic_ns()) / 1e9)
    return bool(select.select([sock], [], [], max(0.0, timeout_s))[0])


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
    """A request received, and once it is in service, its schedule (realtime ns)."""

    request: int
    content: int
    send_ns: int
    response_bytes: int
    client: tuple
    arrival_ns: int
    start_ns: int = 0
    service_ns: int = 0

    @property
    def departure_ns(self) -> int:
        return self.start_ns + self.service_ns


class QueueServer:
    """The server's socket, queue and schedule."""

    def __init__(self, agent: Agent, params: Params, sock: socket.socket):
        self.agent, self.params, self.sock = agent, params, sock
        self.port = sock.getsockname()[1]
        self.buffer = bytearray(DATAGRAM_BUFFER)
        self.padding = bytes(MAX_RESPONSE_BYTES)
        self.rng = random.Random(agent.seed)
        self.pacer = Pacer()
        self.malformed = MalformedLog()
        self.queue: deque[Request] = deque()
        self.serving: Request | None = None
        self.free_from_ns = 0  # the last departure
        self.first_arrival_ns: int | None = None
        self.last_arrival_ns = 0
        self.arrivals = self.served = self.busy_ns = self.send_errors = 0
        self.queued_ms: list[float] = []
        self.service_ms: list[float] = []
        # Arrivals are kernel timestamps on the realtime clock, the pacer runs on the monotonic.
        self.realtime_ahead_ns = time.time_ns() - time.monotonic_ns()

    def read_requests(self) -> None:
        """Queue every request waiting on the socket, and start serving if idle."""
        while (arrival := receive(self.sock, self.buffer)) is not None:
            size, received_ns, address = arrival
            message = memoryview(self.buffer)[:size]
            try:
                if size != REQUEST.header_size:
                    raise ValueError(f"{size} bytes, not a request's {REQUEST.header_size}")
                fields = REQUEST.unpack(message)
            except ValueError:
                self.malformed.add(self.port, message)
                continue
            self.arrivals += 1
            if self.first_arrival_ns is None:
                self.first_arrival_ns = received_ns
            self.last_arrival_ns = received_ns
            self.queue.append(Request(fields["request"], fields["content"], fields["send_ns"],
                                      fields["response_bytes"], address, received_ns))
        self.start_next()

    def start_next(self) -> None:
        if self.serving is not None or not self.queue:
            return
        request = self.serving = self.queue.popleft()
        request.start_ns = max(request.arrival_ns, self.free_from_ns)
        request.service_ns = round(self.rng.expovariate(self.params.service_rate) * 1e9)

    def depart(self) -> None:
        """Send the response of the request in service at its departure time, and go on with
        the next."""
        request = self.serving
        self.pacer.wait_until(request.departure_ns - self.realtime_ahead_ns)
        size = min(max(request.response_bytes, RESPONSE.header_size), MAX_RESPONSE_BYTES)
        header = RESPONSE.pack(request=request.request, server=self.params.server,
                               content=request.content, request_send_ns=request.send_ns,
                               service_ns=request.service_ns)
        try:
            self.sock.sendto(header + self.padding[:size - len(header)], request.client)
        except OSError:
            self.send_errors += 1  # the client counts a timeout
        queued_ms = (request.start_ns - request.arrival_ns) / 1e6
        service_ms = request.service_ns / 1e6
        self.agent.row("requests_served", request.request, f"{request.client[0]}:"
                       f"{request.client[1]}", queued_ms, service_ms)
        self.queued_ms.append(queued_ms)
        self.service_ms.append(service_ms)
        self.served += 1
        self.busy_ns += request.service_ns
        self.free_from_ns = request.departure_ns
        self.serving = None
        self.start_next()

    def run(self, duration_s: float | None) -> dict:
        """Serve until stopped or ``duration_s`` has passed; returns the summary."""
        ends_ns = math.inf if duration_s is None else time.monotonic_ns() + duration_s * 1e9
        while not self.agent.stopping and time.monotonic_ns() < ends_ns:
            departure_ns = (math.inf if self.serving is None
                            else self.serving.departure_ns - self.realtime_ahead_ns)
            if time.monotonic_ns() >= departure_ns - WAKE_EARLY_NS:
                self.depart()
            elif readable_before(self.sock, departure_ns):
                self.read_requests()
        self.malformed.write(self.agent)
        span_ns = self.free_from_ns - (self.first_arrival_ns or 0)
        arrival_span_ns = self.last_arrival_ns - (self.first_arrival_ns or 0)
        return {
            "port": self.port, "service_rate": self.params.service_rate,
            "arrivals": self.arrivals, "served": self.served,
            "unserved_at_stop": len(self.queue) + (self.serving is not None),
            "arrival_rate": (self.arrivals - 1) / arrival_span_ns * 1e9
            if arrival_span_ns > 0 else None,
            "utilisation": self.busy_ns / span_ns if self.served and span_ns > 0 else None,
            "queued_mean_ms": statistics.fmean(self.queued_ms) if self.queued_ms else None,
            "service_mean_ms": statistics.fmean(self.service_ms) if self.service_ms else None,
            "send_errors": self.send_errors, "malformed": self.malformed.count,
            "lateness": self.pacer.report(self.agent, f"responses-{self.params.server}")}


def main(argv: list[str] | None = None) -> int:
    agent = Agent("request_server", argv, TABLES)
    params = Params.model_validate(agent.params)
    sock = listen(params.port)
    sock.setblocking(False)  # select() does the waiting, with the next departure in view
    try:
        summary = QueueServer(agent, params, sock).run(params.duration)
    finally:
        sock.close()
    agent.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
