"""Single-server FIFO queues with exponential service, as the agents that serve requests run
them (:mod:`agents.request_server`'s one queue, a content node's routing, lookup and response
queues in :mod:`agents.bloom_cdn.bloom_cdn_node`, a data center's fetch queue in
:mod:`agents.bloom_cdn.bloom_cdn_dc`)."""

from __future__ import annotations

import math
import random
import select
import socket
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agents.agent import Agent
from agents.pacing import WAKE_EARLY_NS, Pacer
from agents.sockets import POLL_S, listen
from edgebed import clock


def readable_before(sock: socket.socket, deadline_ns: float) -> bool:
    """Wait until ``sock`` has something to read, but no later than WAKE_EARLY_NS before
    ``deadline_ns`` (monotonic clock) nor longer than POLL_S; whether it has."""
    timeout_s = min(POLL_S, (deadline_ns - WAKE_EARLY_NS - clock.monotonic_ns()) / 1e9)
    return bool(select.select([sock], [], [], clock.real_seconds(max(0.0, timeout_s)))[0])


@dataclass(slots=True)
class Job:
    """What a queue holds: the thing to serve and, once it is in service, its schedule
    (realtime ns)."""

    item: Any
    arrival_ns: int
    start_ns: int = 0
    service_ns: int = 0

    @property
    def departure_ns(self) -> int:
        return self.start_ns + self.service_ns

    @property
    def queued_ms(self) -> float:
        return (self.start_ns - self.arrival_ns) / 1e6


class FifoQueue:
    """One single-server FIFO with exponential service at ``rate`` per second, drawn from
    ``rng``; counts what it served."""

    def __init__(self, name: str, rate: float, rng: random.Random):
        self.name, self.rate, self.rng = name, rate, rng
        self.waiting: deque[Job] = deque()
        self.serving: Job | None = None
        self.free_from_ns = 0  # the last departure
        self.first_arrival_ns: int | None = None
        self.last_arrival_ns = 0
        self.arrivals = self.served = self.busy_ns = 0
        self.queued_ms: list[float] = []
        self.service_ms: list[float] = []

    def arrive(self, item: Any, arrival_ns: int) -> None:
        self.arrivals += 1
        if self.first_arrival_ns is None:
            self.first_arrival_ns = arrival_ns
        self.last_arrival_ns = max(self.last_arrival_ns, arrival_ns)
        self.waiting.append(Job(item, arrival_ns))
        self._start_next()

    def _start_next(self) -> None:
        if self.serving is not None or not self.waiting:
            return
        job = self.serving = self.waiting.popleft()
        job.start_ns = max(job.arrival_ns, self.free_from_ns)
        job.service_ns = round(self.rng.expovariate(self.rate) * 1e9)

    @property
    def next_departure_ns(self) -> float:
        """The realtime departure of the job in service (inf when idle)."""
        return math.inf if self.serving is None else self.serving.departure_ns

    def depart(self) -> Job:
        """The job in service leaves; the next one starts."""
        job, self.serving = self.serving, None
        self.queued_ms.append(job.queued_ms)
        self.service_ms.append(job.service_ns / 1e6)
        self.served += 1
        self.busy_ns += job.service_ns
        self.free_from_ns = job.departure_ns
        self._start_next()
        return job

    @property
    def backlog(self) -> int:
        return len(self.waiting) + (self.serving is not None)

    def summary(self) -> dict:
        """Arrivals, served, the arrival rate and utilisation measured (time in service over the
        time from the first arrival to the last departure), mean times queued and in service."""
        span_ns = self.free_from_ns - (self.first_arrival_ns or 0)
        arrival_span_ns = self.last_arrival_ns - (self.first_arrival_ns or 0)
        return {
            "service_rate": self.rate, "arrivals": self.arrivals, "served": self.served,
            "unserved_at_stop": self.backlog,
            "arrival_rate": (self.arrivals - 1) / arrival_span_ns * 1e9
            if arrival_span_ns > 0 else None,
            "utilisation": self.busy_ns / span_ns if self.served and span_ns > 0 else None,
            "queued_mean_ms": statistics.fmean(self.queued_ms) if self.queued_ms else None,
            "service_mean_ms": statistics.fmean(self.service_ms) if self.service_ms else None}


class QueueLoop:
    """Serves ``queues`` beside ``sock``: ``on_readable()`` when datagrams wait, and
    ``on_departure(queue, job)`` at each job's departure time, on an absolute deadline."""

    def __init__(self, agent: Agent, sock: socket.socket, queues: Sequence[FifoQueue],
                 on_readable: Callable[[], None],
                 on_departure: Callable[[FifoQueue, Job], None]):
        self.agent, self.sock, self.queues = agent, sock, queues
        self.on_readable, self.on_departure = on_readable, on_departure
        self.pacer = Pacer()
        # Arrivals are kernel timestamps on the realtime clock, the pacer runs on the monotonic.
        self.realtime_ahead_ns = clock.time_ns() - clock.monotonic_ns()

    def run(self, duration_s: float | None) -> None:
        """Serve until stopped or ``duration_s`` has passed."""
        ends_ns = math.inf if duration_s is None else clock.monotonic_ns() + duration_s * 1e9
        while not self.agent.stopping and clock.monotonic_ns() < ends_ns:
            queue = min(self.queues, key=lambda q: q.next_departure_ns)
            departure_ns = queue.next_departure_ns - self.realtime_ahead_ns
            if clock.monotonic_ns() >= departure_ns - WAKE_EARLY_NS:
                self.pacer.wait_until(round(departure_ns))
                self.on_departure(queue, queue.depart())
            elif readable_before(self.sock, departure_ns):
                self.on_readable()


def serve(name: str, argv: list[str] | None, tables: dict, params_model: type[BaseModel],
          server: Callable[[Agent, Any, socket.socket], Any]) -> int:
    """The ``main`` of agent ``name`` that serves queues beside one socket: its parameters,
    its socket listening on ``params.port`` (non-blocking: select() does the waiting, with the
    next departure in view), ``server(agent, params, sock).run()`` and the summary it returns."""
    agent = Agent(name, argv, tables)
    params = params_model.model_validate(agent.params)
    sock = listen(params.port)
    sock.setblocking(False)
    try:
        summary = server(agent, params, sock).run()
    finally:
        sock.close()
    agent.finish(summary)
    return 0
