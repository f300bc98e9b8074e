"""ai_access at model level: an access-server cluster receiving AI data flows period after period,
with loss from overload computed as a fluid, and the resource model, the access algorithms and
migration of this package run on what the cluster "measures"."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from controller.policies.ai_access.access import MODEL_ALLOCATORS
from controller.policies.ai_access.migration import (ALPHA, REMAINING_SMOOTHING, THETA,
                                                     Migrator, PlacedFlow)
from controller.policies.ai_access.resources import (SPEC_FRAGMENT_PAYLOAD, SPEC_UNIT_BYTES,
                                                     FlowDemand, LoadWeights, Measurement,
                                                     ServerLoad, ServerSpec, ServerTracker)
from edgebed import clock

PACKET_OVERHEAD = 68  # AI data header 26, UDP 8, IPv4 20, Ethernet 14 (a rate limiter counts it)


@dataclass(frozen=True)
class Traffic:
    """How the flows' units look and are sent."""

    unit_bytes: float = SPEC_UNIT_BYTES
    fragment_payload: int = SPEC_FRAGMENT_PAYLOAD
    period: float = 1.0
    send_window: float = 0.5
    hold_units: float = 2.0
    size_spread: float = 0.3
    drift: float = 0.1
    persistence: float = 0.9

    def packets(self, unit: np.ndarray) -> np.ndarray:
        return np.ceil(unit / self.fragment_payload)

    def wire_bytes(self, unit: np.ndarray) -> np.ndarray:
        return unit + self.packets(unit) * PACKET_OVERHEAD

    def demand_of(self, flow: str, unit: float) -> FlowDemand:
        """What a flow whose units are ``unit`` bytes needs."""
        return self.demands([flow], np.array([unit]))[0]

    def demands(self, flows: list[str], units: np.ndarray) -> list[FlowDemand]:
        """What each of ``flows`` needs when its units are the matching bytes of ``units``."""
        bandwidth = self.wire_bytes(units) * 8 / (self.send_window * self.period)
        memory = units * self.hold_units
        return [FlowDemand(flow, rate, held)
                for flow, rate, held in zip(flows, bandwidth.tolist(), memory.tolist())]


class UnitSizes:
    """The units every flow sends, period by period (docs/schemes/ai_access.md)."""

    def __init__(self, flows: int, traffic: Traffic, rng: np.random.Generator):
        self.traffic, self.rng = traffic, rng
        sigma = traffic.size_spread
        self.scene = rng.lognormal(-sigma ** 2 / 2, sigma, flows) if sigma > 0 else np.ones(flows)
        stationary = traffic.drift / math.sqrt(1 - traffic.persistence ** 2) \
            if traffic.persistence < 1 else traffic.drift
        self.now = rng.normal(0, stationary, flows)

    def next(self) -> np.ndarray:
        traffic = self.traffic
        self.now = traffic.persistence * self.now + self.rng.normal(0, traffic.drift,
                                                                    len(self.now))
        return traffic.unit_bytes * self.scene * np.exp(self.now)


@dataclass(frozen=True)
class Receiver:
    """An access server in the model: its spec and its receiver's limits."""

    spec: ServerSpec
    cpu_budget: float  # packets a second its receiver processes
    queue_packets: int = 1000  # per port, and the socket's


@dataclass
class PeriodOutcome:
    """One period of one server: packets sent and lost, and what the server measured."""

    packets: float
    lost: float
    residual: float
    measurement: Measurement


def period_outcome(receiver: Receiver, traffic: Traffic, units: dict[str, np.ndarray]
                   ) -> PeriodOutcome:
    """The fluid outcome of one period on ``receiver`` whose ports get the units ``units``
    (port -> array of unit bytes)."""
    window = traffic.send_window * traffic.period
    rest = traffic.period - window
    bandwidth, memory = {}, {}
    offered_packets = delivered_packets = repair_room_packets = lost_packets = 0.0
    port_lost: dict[str, float] = {}
    for port in receiver.spec.ports:
        sizes = units.get(port.name, np.zeros(0))
        wire = float(traffic.wire_bytes(sizes).sum())
        packets = float(traffic.packets(sizes).sum())
        if not packets:
            bandwidth[port.name] = memory[port.name] = 0.0
            port_lost[port.name] = 0.0
            continue
        packet_bytes = wire / packets
        room = port.rate / 8 * window + receiver.queue_packets * packet_bytes
        delivered = min(1.0, room / wire)
        offered_packets += packets
        delivered_packets += packets * delivered
        port_lost[port.name] = packets * (1 - delivered)
        repair_room_packets += port.rate / 8 * rest / packet_bytes
        bandwidth[port.name] = wire * delivered * 8 / window
        memory[port.name] = float(sizes.sum()) * delivered * traffic.hold_units
    processed_in_window = receiver.cpu_budget * window + receiver.queue_packets
    processed = min(delivered_packets, processed_in_window)
    lost_packets = offered_packets - processed
    # Retransmissions: limited by what the ports carry after the window and what the receiver
    # processes in the rest of the period.
    repaired = min(lost_packets, repair_room_packets, receiver.cpu_budget * rest)
    cpu = min(1.0, (processed + repaired) / (receiver.cpu_budget * traffic.period))
    if delivered_packets > processed:  # the receiver's overflow, spread over the ports
        kept = processed / delivered_packets
        bandwidth = {name: value * kept for name, value in bandwidth.items()}
        memory = {name: value * kept for name, value in memory.items()}
    return PeriodOutcome(offered_packets, lost_packets, lost_packets - repaired,
                         Measurement(bandwidth, memory, cpu))


@dataclass(frozen=True)
class Period:
    """What one period of :func:`simulate` measured."""

    period: int
    packets: dict[str, float]  # server -> packets sent to it
    lost: dict[str, float]  # server -> first transmissions lost
    residual: dict[str, float]  # server -> lost after retransmission
    load: dict[str, float]  # server -> load degree from its smoothed measurements
    forecast: dict[str, float]  # server -> forecast load degree for the next period
    spread: float  # LSD of the forecasts
    migrations: int


@dataclass(frozen=True)
class Run:
    """A simulated run: the access decision and every period after it."""

    placed: int
    rejected: int
    response_s: float  # mean time from the batch of requests to each grant
    decision_s: float  # the whole decision's computation
    periods: list[Period]


def simulate(allocator: str, receivers: list[Receiver], traffic: Traffic, flows: int,
             periods: int, *, migrate: bool, weights: LoadWeights | None = None,
             theta: float = THETA, alpha: float = ALPHA,
             remaining_factor: float = REMAINING_SMOOTHING, forecast: str = "double",
             seed: int = 0) -> Run:
    """``flows`` flows ask for access at once and are placed by ``allocator`` (a name of
    :data:`~.access.MODEL_ALLOCATORS`) on the idle cluster, then send ``periods`` periods of units;
    each period every server's measurements are smoothed into its load and, with ``migrate``,
    the migrator moves flows for the next period, on forecasts of kind ``forecast`` (a key of
    :data:`~.migration.FORECASTERS`)."""
    weights = weights or LoadWeights()
    rng = np.random.default_rng([seed, 3])
    sizes = UnitSizes(flows, traffic, rng)
    specs = {receiver.spec.name: receiver for receiver in receivers}
    trackers = {name: ServerTracker(receiver.spec) for name, receiver in specs.items()}
    names = [f"f{k}" for k in range(flows)]
    requested = traffic.demands(names, np.full(flows, traffic.unit_bytes))
    began = clock.real_elapsed()
    allocation = MODEL_ALLOCATORS[allocator](requested, [ServerLoad.idle(r.spec) for r in receivers],
                                       weights, random.Random(seed))
    decision_s = clock.real_elapsed() - began
    where = dict(allocation.placed)
    # The placed flows in a fixed order, each with its unit's index and its port's index: a
    # port's units are picked out with one mask instead of flow by flow.
    placed_flows = list(where)
    position = {flow: k for k, flow in enumerate(placed_flows)}
    index = {name: k for k, name in enumerate(names)}
    unit_of_placed = np.array([index[flow] for flow in placed_flows], dtype=int)
    ports = [(name, port.name) for name, receiver in specs.items()
             for port in receiver.spec.ports]
    port_index = {port: k for k, port in enumerate(ports)}
    port_of_placed = np.array([port_index[where[flow]] for flow in placed_flows], dtype=int)
    migrator = Migrator(weights, theta, alpha, remaining_factor, forecast)
    records = []
    for period in range(periods):
        units = sizes.next()
        placed_units = units[unit_of_placed]
        per_port = {port: placed_units[port_of_placed == k] for k, port in enumerate(ports)}
        loads, packets, lost, residual = {}, {}, {}, {}
        for name, receiver in specs.items():
            on_server = {p.name: per_port[name, p.name] for p in receiver.spec.ports}
            outcome = period_outcome(receiver, traffic, on_server)
            flows_on = {port: len(sizes_on) for port, sizes_on in on_server.items()}
            loads[name] = trackers[name].update(outcome.measurement, flows_on)
            packets[name], lost[name] = outcome.packets, outcome.lost
            residual[name] = outcome.residual
        forecast = migrator.observe(loads)
        moves = []
        # Untriggered, the migrator plans no move: the flows' demands are not needed.
        if migrate and migrator.triggered:
            demands = traffic.demands(placed_flows, placed_units)
            placed = [PlacedFlow(demand, *where[demand.flow]) for demand in demands]
            moves = migrator.plan(loads, placed)
            for move in moves:
                where[move.flow] = (move.target, move.port)
                port_of_placed[position[move.flow]] = port_index[move.target, move.port]
        records.append(Period(period + 1, packets, lost, residual,
                              {name: load.degree(weights) for name, load in loads.items()},
                              forecast, migrator.spread, len(moves)))
    granted = list(allocation.granted.values())
    return Run(len(allocation.placed), len(allocation.rejected),
               sum(granted) / len(granted) if granted else 0.0, decision_s, records)
