"""Sending on time and processing within a budget: absolute deadlines for senders, a single
worker's schedule for receivers."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from pydantic import BaseModel, Field

from agents.agent import Agent
from edgebed import clock, timeline
from edgebed.quantities import Rate
from edgebed.realtime import request_cpu_latency

SPIN_NS = 200_000
# Waits on a socket or event end this long before something is due; the pacer's sleep and spin
# do the rest, which a wake-up from select() would not do on time.
WAKE_EARLY_NS = 1_000_000


@dataclass
class Pacer:
    """Absolute deadlines on the monotonic clock: sleep until just before, spin the rest. A late
    packet does not move the schedule, so the mean rate does not drift. While a pacer exists,
    CPUs are kept able to wake at once (:func:`request_cpu_latency`): on a virtual machine a
    halted CPU can take milliseconds to wake, longer than any spin covers.

    With a ``quantum_ns`` the pacer never spins: it sleeps at least a quantum whenever a
    deadline is ahead, so the packets due meanwhile go out together, up to a quantum late. Why:
    packets closer together than :data:`SPIN_NS` keep a spinning sender busy all the time (at
    50k packets/s one core per sender), and on a 2-core machine that core is taken from the
    relays and receivers the sender measures.

    Only deadlines before the run's timeline ends (:mod:`edgebed.timeline`) are kept in
    ``lateness_ns``: a packet due later is sent while the runner stops the run's agents, all
    at once, and how late it leaves says how the machine tears down, not how the run ran."""

    lateness_ns: list[int] = field(default_factory=list)
    quantum_ns: int = 0
    timeline_end_ns: int | None = field(default_factory=timeline.end_ns)

    def __post_init__(self):
        request_cpu_latency(0)
        # The spin covers a wake-up's real latency, whatever the run's time dilation (which
        # is fixed for a process's life).
        self._spin_ns = SPIN_NS / clock.current().dilation

    def wait_until(self, deadline_ns: int) -> int:
        """Return at ``deadline_ns`` (the clock's monotonic time) or just after; how late."""
        spin_ns = self._spin_ns
        remaining = deadline_ns - clock.monotonic_ns()
        if self.quantum_ns and remaining > 0:
            clock.sleep(max(remaining, self.quantum_ns) / 1e9)
        elif remaining > spin_ns:
            clock.sleep((remaining - spin_ns) / 1e9)
        now = clock.monotonic_ns()
        while now < deadline_ns:
            now = clock.monotonic_ns()
        late = now - deadline_ns
        if self.timeline_end_ns is None or deadline_ns < self.timeline_end_ns:
            self.lateness_ns.append(late)
        return late

    def report(self, agent: Agent, flow: str) -> dict:
        """Write this flow's row of ``sender_lateness``; returns the figures."""
        return report_lateness(agent, flow, self.lateness_ns)


def report_lateness(agent: Agent, flow: str, lateness_ns: Sequence[int]) -> dict:
    """Write a flow's row of ``sender_lateness`` from its packets' lateness; returns the
    figures."""
    # numpy: a fast sender's millions of packets are summed up within the run's stop grace.
    values = np.asarray(lateness_ns, dtype=np.int64)
    figures = {"packets": len(values), "late_p50_us": None, "late_p99_us": None,
               "late_max_us": None, "late_over_1ms_fraction": None}
    if len(values):
        p50, p99 = np.percentile(values, [50, 99])
        figures.update(late_p50_us=float(p50) / 1e3, late_p99_us=float(p99) / 1e3,
                       late_max_us=int(values.max()) / 1e3,
                       late_over_1ms_fraction=float(np.count_nonzero(values > 1_000_000))
                       / len(values))
    agent.row("sender_lateness", flow, *figures.values())
    return figures


class ProcessingParams(BaseModel):
    """What a receiver with a processing budget takes (its ``Params`` derive from this too):
    the budget of its single worker and the packets it holds (:class:`ProcessingBudget`)."""

    budget: Optional[Rate] = Field(None, gt=0, description="UDP payload bits per second the "
                                                           "node can process")
    budget_packets: Optional[float] = Field(None, gt=0, description="packets per second the "
                                                                    "node can process")
    queue: int = Field(100, ge=1, description="packets held for processing at most, the one "
                                              "being processed included; more are dropped")

    def worker(self) -> "ProcessingBudget":
        return ProcessingBudget(self.budget, self.budget_packets, self.queue)


class ProcessingBudget:
    """A receiver's single worker (an edge's, an access server's): each packet takes
    ``1 / packets_per_s`` seconds or its UDP payload bits over ``bits_per_s`` seconds, whichever
    is longer (neither: no time), in arrival order; at most ``queue`` packets are held, the one
    being processed included, and one arriving to a full queue is dropped (the caller counts
    it). An overloaded worker thus first delays, then drops what exceeds its capacity, as a
    real one does; nothing is left to chance. ``busy_ns`` is the processing time taken so far,
    so the worker's utilisation over a stretch is its growth over the stretch's length."""

    def __init__(self, bits_per_s: float | None, packets_per_s: float | None, queue: int):
        self.ns_per_bit = 1e9 / bits_per_s if bits_per_s else 0.0
        self.ns_per_packet = 1e9 / packets_per_s if packets_per_s else 0.0
        self.queue = queue
        self.held: deque[int] = deque()  # processing end times of the packets held
        self.free_ns = 0
        self.busy_ns = 0

    def admit(self, now_ns: int, size: int) -> int | None:
        """When processing of a packet of ``size`` bytes arriving at ``now_ns`` ends, or None
        when the queue is full and the packet is dropped."""
        if not (self.ns_per_packet or self.ns_per_bit):
            return now_ns  # no budget: processing takes no time, nothing waits
        while self.held and self.held[0] <= now_ns:
            self.held.popleft()
        if len(self.held) >= self.queue:
            return None
        cost_ns = round(max(self.ns_per_packet, size * 8 * self.ns_per_bit))
        self.free_ns = max(now_ns, self.free_ns) + cost_ns
        self.busy_ns += cost_ns
        self.held.append(self.free_ns)
        return self.free_ns
