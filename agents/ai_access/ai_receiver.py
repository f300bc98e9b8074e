"""An AI access server's receiving port (ai_access): reassembles AI data units from AI data
packets and asks the terminals for the missing fragments with NACKs."""

from __future__ import annotations

import math
import select
import socket
import statistics
import sys
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from pydantic import Field

from agents.ai_access.ai_terminal import (DATA_PORT, NACK_PORT, WIRE_OVERHEAD, UnitTiming,
                                          flow_name, nack_messages)
from agents.agent import Agent, NodeRef, epoch_seconds
from agents.flows import FlowStats, MalformedLog, percentile
from agents.pacing import ProcessingBudget, ProcessingParams
from agents.sockets import (DATAGRAM_BUFFER, POLL_S, listen, record_socket_drops,
                            waiting_datagrams)
from agents.ai_access import ai_gpu
from agents.control import LoadReporter, ReportingParams, side_band_address
from agents.ai_access.formats import AI_DATA
from agents.wire import MAGIC, VERSION
from edgebed.quantities import Duration
from edgebed import clock

TABLES = {
    "gpu_handoffs": ai_gpu.TABLES["gpu_handoffs"],
    # One row per AI data unit whose outcome is known.
    "ai_units": ("node", "agent", "stream", "unit", "fragments", "received", "missing_at_end",
                 "nacks_sent", "retransmissions_received", "complete", "completion_ms",
                 "completed_s"),
    # One row per receive port and load report: what the report said and what the period saw.
    "ai_load": ("node", "agent", "time_s", "port", "bw_in_bps", "memory_bytes", "cpu",
                "received", "over_budget"),
}

MIN_GRACE_NS = 10_000_000  # scheduling noise of sender and receiver, on a path of no delay


class Params(UnitTiming, ReportingParams, ProcessingParams):
    """Where the receiver listens, what it can process, when it asks for retransmissions,
    when it stops, and what it reports."""

    port: int = Field(DATA_PORT, ge=0, le=65535, description="data port; 0: any free port")
    ports: list[int] = Field([], description="receive ports, each a socket of its own "
                                             "(default: port alone)")
    report_host: bool = Field(False, description="add the host meter's figures to the reports "
                                                 "(its port.<interface> metrics are no "
                                                 "receive ports)")
    nack_port: int = Field(NACK_PORT, ge=1, le=65535, description="the terminals' NACK port")
    nack_after: Optional[Duration] = Field(
        None, description="wait after a unit's send window before the first NACK, and between "
                          "NACKs on top of the retransmissions' pacing; default: twice the "
                          "largest one-way delay of the unit's packets, at least 10 ms")
    manager: Optional[str] = Field(None, description="the cluster manager's node (an access "
                                                     "server): hand completed units to the GPU "
                                                     "server it grants")
    manager_port: int = Field(ai_gpu.MANAGER_PORT, ge=1, le=65535,
                              description="the cluster manager's side-band port")
    gpus: list[NodeRef] = Field([], description="be the cluster manager: grant units to these "
                                                "GPU servers in rotation")
    gpu_port: int = Field(ai_gpu.GPU_PORT, ge=1, le=65535, description="the GPU servers' port")
    units: Optional[int] = Field(None, ge=1, description="stop once this many units have rows")
    duration: Optional[Duration] = Field(None, description="default: until stopped")


@dataclass(slots=True)
class UnitReceiving:
    """What arrived of one unit, and the NACKs sent for it (times on the realtime clock)."""

    unit: int
    have: bytearray  # one byte per fragment, 1 once it arrived
    opens_ns: int
    received: int = 0
    delay_max_ns: int = 0
    nacks_sent: int = 0
    first_nack_ns: int | None = None
    next_nack_ns: int | None = None
    retransmissions: int = 0
    completed_ns: int | None = None
    payloads: list = field(default_factory=list)  # what arrived of each fragment, held
    held_bytes: int = 0

    @property
    def fragments(self) -> int:
        return len(self.have)

    def missing(self) -> list[int]:
        return [index for index, arrived in enumerate(self.have) if not arrived]


class UnitOutcome(NamedTuple):
    """What a unit's row says, kept for the summary."""

    fragments: int
    missing: int
    complete: bool
    completion_ms: float | None


@dataclass
class StreamReceiving:
    """One terminal's stream: its open units and the measurement of its first copies."""

    stream: int
    fragments: int
    peer: str
    first_unit: int
    flow: FlowStats
    units: dict[int, UnitReceiving] = field(default_factory=dict)
    rows: int = 0
    last_written: int = -1  # no later row comes for a unit up to this one

    @property
    def units_missing(self) -> int:
        """Units up to the last written of which nothing arrived."""
        return self.last_written - self.first_unit + 1 - self.rows if self.rows else 0


class AiReceiver:
    """The units arriving on one socket, their NACKs and their rows."""

    def __init__(self, agent: Agent, params: Params, sock: socket.socket,
                 budget: ProcessingBudget | None = None, handoff: ai_gpu.Handoff | None = None):
        self.agent, self.params, self.sock, self.handoff = agent, params, sock, handoff
        self.budget = budget if budget is not None else params.worker()
        self.port = sock.getsockname()[1]
        self.buffer = bytearray(DATAGRAM_BUFFER)
        self.streams: dict[int, StreamReceiving] = {}
        self.malformed = MalformedLog()
        self.duplicates = self.late = self.nack_send_errors = self.over_budget = 0
        self.written: list[UnitOutcome] = []
        self.taken = 0  # datagrams the worker took
        self.first_copy_bits = 0  # on the wire, of first copies taken (the load reports')
        self.held_bytes = 0  # payloads of open units

    @property
    def received(self) -> int:
        """Datagrams that reached the socket: taken or dropped over budget."""
        return self.taken + self.over_budget

    def grace_ns(self, arrival: UnitReceiving) -> int:
        if self.params.nack_after is not None:
            return round(self.params.nack_after * 1e9)
        return max(MIN_GRACE_NS, 2 * arrival.delay_max_ns)

    def drain(self) -> None:
        """Read every datagram waiting on the socket now (:func:`waiting_datagrams`).

        A NACK decided next then never asks for a fragment that was already waiting on the
        socket, however late this receiver was woken; reading no further than that keeps a
        flood from holding the NACKs back."""
        for arrival in waiting_datagrams(self.sock, self.buffer):
            self.add(*arrival)

    def add(self, size: int, received_ns: int, address: tuple) -> None:
        """Account for the datagram of ``size`` bytes in the buffer, if the worker takes it."""
        processed_ns = self.budget.admit(received_ns, size)
        if processed_ns is None:
            self.over_budget += 1
            return
        self.taken += 1
        received_ns = processed_ns
        if size < AI_DATA.header_size:
            self.malformed.add(self.port, memoryview(self.buffer)[:size])
            return
        (magic, version, kind, stream, unit, fragment, fragments, length,
         send_ns) = AI_DATA.struct.unpack_from(self.buffer)
        receiving = self.streams.get(stream)
        if (magic != MAGIC or version != VERSION or kind != AI_DATA.type
                or fragment >= fragments or length != size - AI_DATA.header_size
                or send_ns > received_ns  # hosts share the clock: a packet from the future
                or (receiving is not None and fragments != receiving.fragments)):
            self.malformed.add(self.port, memoryview(self.buffer)[:size])
            return
        if receiving is None:
            receiving = self.streams[stream] = StreamReceiving(
                stream, fragments, address[0], unit, FlowStats(flow_name(stream), address[0]))
        receiving.peer = address[0]
        arrival = receiving.units.get(unit)
        if arrival is None:
            if unit <= receiving.last_written or unit < receiving.first_unit:
                self.late += 1
                return
            arrival = receiving.units[unit] = UnitReceiving(unit, bytearray(fragments), send_ns,
                                                            payloads=[None] * fragments)
        arrival.delay_max_ns = max(arrival.delay_max_ns, received_ns - send_ns)
        if arrival.first_nack_ns is not None and send_ns >= arrival.first_nack_ns:
            arrival.retransmissions += 1
        else:
            arrival.opens_ns = min(arrival.opens_ns, send_ns - round(
                fragment * self.params.gap_ns(fragments)))
            receiving.flow.add((unit - receiving.first_unit) * fragments + fragment, send_ns,
                               received_ns, size)
            self.first_copy_bits += (size + WIRE_OVERHEAD) * 8
        if arrival.have[fragment]:
            self.duplicates += 1
            return
        arrival.have[fragment] = 1
        arrival.received += 1
        arrival.payloads[fragment] = bytes(memoryview(self.buffer)[AI_DATA.header_size:size])
        arrival.held_bytes += length
        self.held_bytes += length
        if arrival.received == fragments:
            arrival.completed_ns = received_ns

    def tick(self, now_ns: int) -> int:
        """Send the NACKs that are due and write the units whose time is up; returns when
        something is due next (realtime ns)."""
        due_ns = now_ns + round(POLL_S * 1e9)
        for receiving in self.streams.values():
            for arrival in list(receiving.units.values()):
                closes_ns = arrival.opens_ns + self.params.period_ns
                if arrival.completed_ns is None and now_ns < closes_ns:
                    nack_ns = self.nack_due_ns(arrival)
                    if now_ns >= nack_ns:
                        self.send_nacks(receiving, arrival, now_ns)
                        nack_ns = arrival.next_nack_ns
                    due_ns = min(due_ns, nack_ns)
                written_ns = closes_ns + self.grace_ns(arrival)
                if now_ns >= written_ns:
                    self.write(receiving, arrival)
                due_ns = min(due_ns, written_ns)
        return due_ns

    def nack_due_ns(self, arrival: UnitReceiving) -> int:
        if arrival.next_nack_ns is not None:
            return arrival.next_nack_ns
        return arrival.opens_ns + self.params.window_ns + self.grace_ns(arrival)

    def send_nacks(self, receiving: StreamReceiving, arrival: UnitReceiving,
                   now_ns: int) -> None:
        missing = arrival.missing()
        for message in nack_messages(receiving.stream, arrival.unit, missing):
            try:
                self.sock.sendto(message, (receiving.peer, self.params.nack_port))
            except OSError:
                self.nack_send_errors += 1  # the next round asks again
                continue
            arrival.nacks_sent += 1
        if arrival.first_nack_ns is None:
            arrival.first_nack_ns = now_ns
        # The terminal paces the retransmissions at the unit's packet gap; ask again once they
        # all had the time to arrive.
        arrival.next_nack_ns = now_ns + self.grace_ns(arrival) + round(
            len(missing) * self.params.gap_ns(arrival.fragments))

    def write(self, receiving: StreamReceiving, arrival: UnitReceiving) -> None:
        """The unit's row of ``ai_units``; it is forgotten afterwards."""
        completion_ms = None
        complete = False
        if arrival.completed_ns is not None:
            completion_ms = (arrival.completed_ns - arrival.opens_ns) / 1e6
            complete = arrival.completed_ns - arrival.opens_ns <= self.params.period_ns
        missing = arrival.fragments - arrival.received
        self.agent.row("ai_units", receiving.stream, arrival.unit, arrival.fragments,
                       arrival.received, missing, arrival.nacks_sent, arrival.retransmissions,
                       int(complete), completion_ms,
                       epoch_seconds(arrival.completed_ns) if arrival.completed_ns is not None
                       else None)
        self.written.append(UnitOutcome(arrival.fragments, missing, complete, completion_ms))
        receiving.rows += 1
        receiving.last_written = max(receiving.last_written, arrival.unit)
        if complete and self.handoff is not None:
            self.handoff.put(receiving.stream, arrival.unit, b"".join(arrival.payloads))
        self.held_bytes -= arrival.held_bytes  # handed on (to the hand-over's queue)
        del receiving.units[arrival.unit]

    def finish(self, now_ns: int) -> dict:
        """Rows for the units whose outcome is known, the flows; returns the summary."""
        open_at_stop = 0
        for receiving in self.streams.values():
            for arrival in sorted(receiving.units.values(), key=lambda a: a.unit):
                if (arrival.completed_ns is not None
                        or now_ns >= arrival.opens_ns + self.params.period_ns):
                    self.write(receiving, arrival)
                else:
                    open_at_stop += 1
        flows = [receiving.flow.write(self.agent) for _, receiving in sorted(self.streams.items())]
        self.malformed.write(self.agent)
        fragments = sum(outcome.fragments for outcome in self.written)
        missing = sum(outcome.missing for outcome in self.written)
        times = sorted(outcome.completion_ms for outcome in self.written
                       if outcome.completion_ms is not None)
        return {
            "port": self.port, "units": len(self.written),
            "complete": sum(outcome.complete for outcome in self.written),
            "residual_loss_fraction": missing / fragments if fragments else None,
            "completion_mean_ms": statistics.fmean(times) if times else None,
            "completion_p50_ms": percentile(times, 50) if times else None,
            "completion_p99_ms": percentile(times, 99) if times else None,
            "open_at_stop": open_at_stop,
            "units_missing": sum(receiving.units_missing for receiving in self.streams.values()),
            "duplicates": self.duplicates, "late": self.late,
            "nack_send_errors": self.nack_send_errors, "malformed": self.malformed.count,
            "received": self.received, "over_budget": self.over_budget,
            "flows": flows}


class AccessServer:
    """The receivers of a server's receive ports, one processing budget, one load reporter."""

    def __init__(self, agent: Agent, params: Params, socks: list[socket.socket],
                 reporter: LoadReporter | None = None, handoff: ai_gpu.Handoff | None = None):
        self.agent, self.params, self.handoff = agent, params, handoff
        self.budget = params.worker()
        self.receivers = [AiReceiver(agent, params, sock, self.budget, handoff)
                          for sock in socks]
        self.reporter = reporter or LoadReporter.for_agent(agent.node, params)
        self._last = None  # (time ns, busy ns, per receiver (first-copy bits, taken, dropped))

    @property
    def written(self) -> int:
        return sum(len(receiver.written) for receiver in self.receivers)

    def drain(self) -> None:
        """Every port's datagrams waiting now, to the worker in the order the
        kernel stamped them (one worker serves all ports, so their queues interleave)."""
        if len(self.receivers) == 1:
            self.receivers[0].drain()
            return
        arrivals = []
        for receiver in self.receivers:
            for size, received_ns, address in waiting_datagrams(receiver.sock, receiver.buffer):
                arrivals.append((received_ns, len(arrivals), receiver,
                                 bytes(memoryview(receiver.buffer)[:size]), address))
        for received_ns, _, receiver, data, address in sorted(arrivals, key=lambda a: a[:2]):
            receiver.buffer[:len(data)] = data
            receiver.add(len(data), received_ns, address)

    def step(self, now_ns: int) -> int:
        """Read what arrived, send what is due; returns when something is due next."""
        self.drain()  # what arrived counts before any NACK is decided
        due_ns = min(receiver.tick(now_ns) for receiver in self.receivers)
        self.report(now_ns)
        return due_ns

    def counters(self, now_ns: int) -> tuple:
        return now_ns, self.budget.busy_ns, [
            (receiver.first_copy_bits, receiver.taken, receiver.over_budget)
            for receiver in self.receivers]

    def report(self, now_ns: int) -> None:
        """The load report, when one is due: each port's figures over the time since the last."""
        if self._last is None:
            self._last = self.counters(now_ns)
        then_ns, busy_then, ports_then = self._last
        elapsed_ns = max(1, now_ns - then_ns)
        metrics, rows = {}, []
        for receiver, (bits_then, taken_then, dropped_then) in zip(self.receivers, ports_then):
            bw_in = (receiver.first_copy_bits - bits_then) * 1e9 / elapsed_ns \
                / self.params.send_window
            metrics[f"port.{receiver.port}.bw_in"] = bw_in
            metrics[f"port.{receiver.port}.memory"] = float(receiver.held_bytes)
            rows.append((receiver.port, bw_in, receiver.held_bytes,
                         receiver.taken - taken_then, receiver.over_budget - dropped_then))
        # The worker's busy time is booked when a packet is taken, up to a queue ahead.
        metrics["cpu"] = min(1.0, (self.budget.busy_ns - busy_then) / elapsed_ns)
        load = sum(row[1] for row in rows)
        if not self.reporter.tick(load, metrics):
            return
        self._last = self.counters(now_ns)
        for port, bw_in, memory, taken, dropped in rows:
            self.agent.row("ai_load", epoch_seconds(now_ns), port, bw_in, memory,
                           metrics["cpu"], taken, dropped)

    def finish(self, now_ns: int) -> dict:
        self.drain()  # what arrived before the stop is measured too
        summaries = [receiver.finish(now_ns) for receiver in self.receivers]
        summary = summaries[0] if len(summaries) == 1 else {
            "ports": summaries,
            "units": sum(part["units"] for part in summaries),
            "complete": sum(part["complete"] for part in summaries),
            "received": sum(part["received"] for part in summaries),
            "over_budget": sum(part["over_budget"] for part in summaries),
            "malformed": sum(part["malformed"] for part in summaries)}
        if self.handoff is not None:
            summary["handoff"] = self.handoff.close()
        return summary | {"load_reports": self.reporter.close()}


def main(argv: list[str] | None = None) -> int:
    agent = Agent("ai_receiver", argv, TABLES)
    params = Params.model_validate(agent.params)
    socks = []
    manager = handoff = None
    try:
        # The receive ports first: a terminal's first packets may come at once.
        for port in params.ports or [params.port]:
            sock = listen(port)
            sock.setblocking(False)  # select() does the waiting, with the NACK timers in view
            socks.append(sock)
        if params.gpus:
            side_band = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            side_band.bind(("", params.manager_port))
            manager = ai_gpu.ClusterManager(side_band, [(gpu, params.gpu_port)
                                                        for gpu in params.gpus]).start()
        if params.manager is not None:
            if (address := side_band_address(params.manager)) is None:
                raise SystemExit(f"ai_receiver: the cluster manager {params.manager!r} has no "
                                 f"side-band address (${{EDGEBED_SIDE_BAND}})")
            handoff = ai_gpu.Handoff((address, params.manager_port), agent.row).start()
        server = AccessServer(agent, params, socks, handoff=handoff)
        ends = math.inf if params.duration is None else clock.monotonic() + params.duration
        while (not agent.stopping and clock.monotonic() < ends
               and (params.units is None or server.written < params.units)):
            now_ns = clock.time_ns()
            wait_s = (server.step(now_ns) - now_ns) / 1e9
            select.select(socks, [], [], clock.real_seconds(min(POLL_S, max(0.0, wait_s))))
        summary = server.finish(clock.time_ns())
        summary["socket_drops"] = {str(sock.getsockname()[1]): record_socket_drops(agent, sock)
                                   for sock in socks}
        if manager is not None:
            summary["cluster_manager"] = manager.close()
    finally:
        for sock in socks:
            sock.close()
        if manager is not None:
            manager.sock.close()
    agent.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
