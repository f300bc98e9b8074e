"""A request client: sends requests to a server (:mod:`agents.request_server`) as a Poisson
process and measures how long each takes to be answered."""

from __future__ import annotations

import ipaddress
import math
import random
import socket
import statistics
import sys
from collections import deque
from typing import Optional

from pydantic import Field

from agents.agent import Agent, AgentParams, NodeRef
from agents.flows import MalformedLog, percentile
from agents.pacing import WAKE_EARLY_NS, Pacer
from agents.sockets import receive, receiving_socket
from agents.formats import REQUEST, RESPONSE
from agents.queues import readable_before
from agents.request_server import MAX_RESPONSE_BYTES, REQUEST_PORT
from agents.sockets import DATAGRAM_BUFFER
from edgebed.quantities import Duration, PositiveDuration, Size
from edgebed import clock

TABLES = {
    # One row per request.
    "responses": ("node", "agent", "request", "content", "response_ms", "bytes"),
}


class Params(AgentParams):
    """Where the requests go, how often, how many, and what they ask for."""

    to: NodeRef
    port: int = Field(REQUEST_PORT, ge=1, le=65535)
    rate: float = Field(gt=0, description="requests per second (Poisson arrivals)")
    count: Optional[int] = Field(None, ge=1, description="requests to send")
    duration: Optional[Duration] = Field(None, description="how long to send requests; "
                                                           "default: until count, or stopped")
    content: int = Field(0, ge=0, lt=2**32, description="content id every request asks for "
                                                        "(the first, with items)")
    items: Optional[int] = Field(None, ge=1, description="each request asks for one of this "
                                 "many contents from content on, uniformly at random")
    request_bytes: Size = Field(REQUEST.header_size, ge=REQUEST.header_size,
                                le=MAX_RESPONSE_BYTES, description="each request's size, "
                                                                   "padded")
    any_responder: bool = Field(False, description="take responses from any host (a request "
                                                   "answered by another than it went to, as a "
                                                   "CDN's data center answering directly)")
    response_bytes: Size = Field(RESPONSE.header_size, le=MAX_RESPONSE_BYTES,
                                 description="size of the response each request asks for")
    timeout: PositiveDuration = Field(1.0, description="a request unanswered this long after "
                                                       "it was sent has timed out")
    client: Optional[int] = Field(None, ge=0, lt=2**32, description="client id; default: the "
                                                                     "client's IPv4 address")


class RequestClient:
    """The client's socket, its schedule and the requests waiting for their answers."""

    def __init__(self, agent: Agent, params: Params):
        self.agent, self.params = agent, params
        self.sock = receiving_socket(0)
        # Connected, the kernel takes only the server's datagrams and reports its ICMP errors.
        self.server = (params.to, params.port)
        if not params.any_responder:
            self.sock.connect(self.server)
        self.sock.setblocking(False)  # select() does the waiting, with the next request in view
        self.port = self.sock.getsockname()[1]
        self.client = (params.client if params.client is not None
                       else int(ipaddress.IPv4Address(source_address(params.to))))
        self.padding = bytes(round(params.request_bytes) - REQUEST.header_size)
        self.buffer = bytearray(DATAGRAM_BUFFER)
        self.rng = random.Random(agent.seed)
        self.pacer = Pacer()
        self.malformed = MalformedLog()
        self.outstanding: dict[int, int] = {}  # request id -> send time (realtime ns)
        self.contents: dict[int, int] = {}  # request id -> content asked for
        self.expiring: deque[tuple[int, int]] = deque()  # (send time, request id), in order
        self.response_ms: list[float] = []
        self.sent = self.timeouts = self.late = self.send_errors = 0

    def send(self, request: int) -> None:
        params = self.params
        content = params.content + (self.rng.randrange(params.items) if params.items else 0)
        self.contents[request] = content
        send_ns = clock.time_ns()
        message = REQUEST.pack(request=request, client=self.client, content=content,
                               send_ns=send_ns, response_bytes=round(params.response_bytes))
        try:
            self.sock.sendto(message + self.padding, self.server)
        except OSError:
            # An ICMP error from an earlier request (no server yet): this one times out.
            self.send_errors += 1
        self.sent += 1
        self.outstanding[request] = send_ns
        self.expiring.append((send_ns, request))

    def collect(self) -> None:
        """Take every response waiting on the socket, then give up on the requests whose
        timeout passed before this call (so a response that came in time is never missed)."""
        now_ns = clock.time_ns()
        while (arrival := receive(self.sock, self.buffer)) is not None:
            size, received_ns, _ = arrival
            message = memoryview(self.buffer)[:size]
            try:
                if size < RESPONSE.header_size:
                    raise ValueError("shorter than a response header")
                request = RESPONSE.unpack(message)["request"]
            except ValueError:
                self.malformed.add(self.port, message)
                continue
            send_ns = self.outstanding.pop(request, None)
            if send_ns is None or received_ns - send_ns > self.params.timeout * 1e9:
                self.late += 1
                self.contents.pop(request, None)
                continue
            response_ms = (received_ns - send_ns) / 1e6
            self.response_ms.append(response_ms)
            self.agent.row("responses", request, self.contents.pop(request), response_ms, size)
        timeout_ns = round(self.params.timeout * 1e9)
        while self.expiring and self.expiring[0][0] + timeout_ns <= now_ns:
            _, request = self.expiring.popleft()
            if self.outstanding.pop(request, None) is not None:
                self.timeouts += 1
                self.agent.row("responses", request, self.contents.pop(request), None, None)

    def run(self) -> dict:
        """Send the requests and collect their answers; returns the summary."""
        params = self.params
        count = math.inf if params.count is None else params.count
        start_ns = clock.monotonic_ns()
        ends_ns = math.inf if params.duration is None else start_ns + params.duration * 1e9
        due_ns = start_ns + self.rng.expovariate(params.rate) * 1e9
        while not self.agent.stopping and self.sent < count and due_ns < ends_ns:
            if clock.monotonic_ns() >= due_ns - WAKE_EARLY_NS:
                self.pacer.wait_until(round(due_ns))
                self.send(self.sent)
                due_ns += self.rng.expovariate(params.rate) * 1e9
            elif readable_before(self.sock, due_ns):
                self.collect()
        while not self.agent.stopping and self.outstanding:
            readable_before(self.sock, math.inf)
            self.collect()
        self.sock.close()
        self.malformed.write(self.agent)
        times = sorted(self.response_ms)
        return {
            "client": self.client, "sent": self.sent, "answered": len(times),
            "timeouts": self.timeouts, "late": self.late, "send_errors": self.send_errors,
            "outstanding_at_stop": len(self.outstanding),
            "response_mean_ms": statistics.fmean(times) if times else None,
            "response_p50_ms": percentile(times, 50) if times else None,
            "response_p99_ms": percentile(times, 99) if times else None,
            "response_max_ms": times[-1] if times else None,
            "malformed": self.malformed.count,
            "lateness": self.pacer.report(self.agent, f"requests-{self.client}")}


def source_address(destination: str) -> str:
    """The address this host sends from toward ``destination`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((destination, 9))
        return probe.getsockname()[0]


def main(argv: list[str] | None = None) -> int:
    agent = Agent("request_client", argv, TABLES)
    params = Params.model_validate(agent.params)
    agent.finish(RequestClient(agent, params).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
