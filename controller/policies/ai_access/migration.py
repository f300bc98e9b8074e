"""ai_access's migration by load prediction: forecast each access server's load degree, and when
the forecasts spread too far, move the flows that use least from overloaded servers to
underloaded ones, as many as the targets' remaining resources admit."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.policies.ai_access.resources import (FlowDemand, LoadWeights, ServerLoad,
                                                     smooth)

THETA = 0.1
REMAINING_SMOOTHING = 0.8  # the spec's u
ALPHA = 0.5


class DoubleSmoothing:
    """Brown's double exponential smoothing of one series; :meth:`update` returns the forecast
    for the next period."""

    def __init__(self, alpha: float = ALPHA):
        if not 0 < alpha < 1:
            raise ValueError(f"smoothing constant {alpha} is not in (0, 1)")
        self.alpha = alpha
        self.first: float | None = None
        self.second: float | None = None

    def update(self, value: float) -> float:
        a = self.alpha
        if self.first is None:
            self.first = self.second = value
        else:
            self.first = a * value + (1 - a) * self.first
            self.second = a * self.first + (1 - a) * self.second
        return self.forecast()

    def forecast(self, ahead: int = 1) -> float:
        if self.first is None:
            raise ValueError("nothing measured yet")
        level = 2 * self.first - self.second
        trend = self.alpha / (1 - self.alpha) * (self.first - self.second)
        return level + trend * ahead


class LastValue:
    """The reactive forecast: the next period's load is the last one measured."""

    def __init__(self):
        self.last: float | None = None

    def update(self, value: float) -> float:
        self.last = value
        return value


FORECASTERS = {"double": DoubleSmoothing, "last": lambda alpha: LastValue()}
"""How the migrator forecasts a server's load degree: ``double`` (the spec's second-order
smoothing) or ``last`` (reactive migration on the last value)."""


def load_spread(forecasts: Sequence[float]) -> float:
    """LSD: the population standard deviation of the forecast load degrees."""
    return statistics.pstdev(forecasts) if len(forecasts) > 1 else 0.0


def acceptable_flows(port_left: Sequence[float], memory_left: float, bandwidth: float,
                     memory: float) -> int:
    """Eq. (24): flows of ``bandwidth`` bit/s and ``memory`` bytes a server with ``port_left``
    (per port, bit/s) and ``memory_left`` admits: what the ports take, capped by the memory."""
    by_ports = sum(int(left // bandwidth) for left in port_left) if bandwidth > 0 else None
    by_memory = int(memory_left // memory) if memory > 0 else None
    counts = [count for count in (by_ports, by_memory) if count is not None]
    return max(0, min(counts)) if counts else 0


@dataclass(frozen=True)
class PlacedFlow:
    """A flow where it is now."""

    demand: FlowDemand
    server: str
    port: str


@dataclass(frozen=True)
class Move:
    flow: str
    source: str
    target: str
    port: str


class Migrator:
    """The prediction, trigger and move planning across periods for one cluster."""

    def __init__(self, weights: LoadWeights | None = None, theta: float = THETA,
                 alpha: float = ALPHA, remaining_factor: float = REMAINING_SMOOTHING,
                 forecast: str = "double"):
        self.weights = weights or LoadWeights()
        self.theta, self.alpha, self.remaining_factor = theta, alpha, remaining_factor
        self.forecaster = FORECASTERS[forecast]
        self.forecasters: dict[str, DoubleSmoothing | LastValue] = {}
        self.remaining: dict[str, dict[str, float]] = {}  # server -> port -> smoothed bit/s
        self.forecasts: dict[str, float] = {}
        self.spread = 0.0

    def observe(self, loads: Mapping[str, ServerLoad]) -> dict[str, float]:
        """Take one period's loads; returns each server's forecast load degree."""
        for name, load in loads.items():
            forecaster = self.forecasters.setdefault(name, self.forecaster(self.alpha))
            self.forecasts[name] = forecaster.update(load.degree(self.weights))
            previous = self.remaining.get(name, {})
            self.remaining[name] = {
                port.name: smooth(previous.get(port.name), load.port_left(port),
                                  self.remaining_factor)
                for port in load.spec.ports}
        for gone in set(self.forecasts) - set(loads):
            del self.forecasts[gone], self.forecasters[gone], self.remaining[gone]
        self.spread = load_spread(list(self.forecasts.values()))
        return dict(self.forecasts)

    @property
    def triggered(self) -> bool:
        return self.spread > self.theta

    def share(self, flow: FlowDemand, load: ServerLoad, cpu_per_flow: float) -> float:
        """What ``flow`` adds to the load degree of the server with ``load``."""
        return self.weights.degree(cpu_per_flow, flow.memory / load.spec.memory,
                                   flow.bandwidth / load.spec.rate)

    def plan(self, loads: Mapping[str, ServerLoad], flows: Sequence[PlacedFlow],
             max_moves: int | None = None) -> list[Move]:
        """The moves for this period (none unless :attr:`triggered`), from the forecasts of the
        last :meth:`observe`."""
        if not self.triggered:
            return []
        forecast = {name: self.forecasts[name] for name in loads if name in self.forecasts}
        mean = statistics.fmean(forecast.values())
        port_left = {name: dict(self.remaining[name]) for name in forecast}
        memory_left = {name: loads[name].memory_left for name in forecast}
        by_server: dict[str, list[PlacedFlow]] = {}
        for placed in flows:
            by_server.setdefault(placed.server, []).append(placed)
        moves: list[Move] = []
        for source in sorted((n for n in forecast if forecast[n] > mean),
                             key=lambda n: (-forecast[n], n)):
            load = loads[source]
            on_source = by_server.get(source, [])
            cpu_per_flow = load.cpu / len(on_source) if on_source else 0.0
            for placed in sorted(on_source, key=lambda p: (
                    p.demand.bandwidth / load.spec.rate + p.demand.memory / load.spec.memory,
                    p.demand.flow)):
                if forecast[source] <= mean or (max_moves is not None
                                                and len(moves) >= max_moves):
                    break
                flow = placed.demand
                drop = self.share(flow, load, cpu_per_flow)
                for target in sorted((n for n in forecast if forecast[n] < mean),
                                     key=lambda n: (forecast[n], n)):
                    rise = self.share(flow, loads[target], cpu_per_flow)
                    port = max((p for p, left in port_left[target].items()
                                if left >= flow.bandwidth),
                               key=lambda p: (port_left[target][p], p), default=None)
                    if (port is None or memory_left[target] < flow.memory
                            or forecast[target] + rise > forecast[source] - drop):
                        continue
                    port_left[target][port] -= flow.bandwidth
                    memory_left[target] -= flow.memory
                    forecast[source] -= drop
                    forecast[target] += rise
                    moves.append(Move(flow.flow, source, target, port))
                    break
        return moves
