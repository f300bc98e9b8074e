"""ai_access's resource model: what an AI access server and an AI data flow need and have."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

SMOOTHING = 0.8  # the spec's delta (bandwidth) and its memory factor
# The spec's unit: "one 672 KB unit = 945 packets" (the AI terminal's defaults).
SPEC_FRAGMENTS, SPEC_FRAGMENT_PAYLOAD = 945, 711
SPEC_UNIT_BYTES = SPEC_FRAGMENTS * SPEC_FRAGMENT_PAYLOAD


class LoadWeights(BaseModel):
    """Weights of CPU, memory and network utilisation in the load degree L_i."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: float = Field(1.0, ge=0)
    memory: float = Field(1.0, ge=0)
    network: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _not_all_zero(self) -> "LoadWeights":
        if self.cpu + self.memory + self.network <= 0:
            raise ValueError("at least one load weight must be positive")
        return self

    def degree(self, cpu: float, memory: float, network: float) -> float:
        """The weighted mean of the three utilisations."""
        total = self.cpu + self.memory + self.network
        return (self.cpu * cpu + self.memory * memory + self.network * network) / total


@dataclass(frozen=True)
class Port:
    """One receive port of an access server."""

    name: str  # the UDP port number as text, or any label the scenario gives
    rate: float  # Vmax, bit/s


@dataclass(frozen=True)
class ServerSpec:
    """What an access server has: its receive ports and memory."""

    name: str
    ports: tuple[Port, ...]
    memory: float  # Mmax, bytes

    def __post_init__(self):
        if not self.ports:
            raise ValueError(f"access server {self.name!r} has no receive ports")
        if self.memory <= 0 or any(port.rate <= 0 for port in self.ports):
            raise ValueError(f"access server {self.name!r}: port rates and memory must be > 0")

    @property
    def rate(self) -> float:
        """Total receive rate of all ports."""
        return sum(port.rate for port in self.ports)

    def port(self, name: str) -> Port:
        for port in self.ports:
            if port.name == name:
                return port
        raise KeyError(f"access server {self.name!r} has no port {name!r}")


@dataclass(frozen=True)
class FlowDemand:
    """What one AI data flow needs: bandwidth on one port, memory on its server."""

    flow: str
    bandwidth: float  # bit/s
    memory: float  # bytes


@dataclass(frozen=True)
class Measurement:
    """One load report of a server: per port the bandwidth received and the memory its flows
    hold, and the CPU utilisation (0 to 1)."""

    bandwidth: dict[str, float]  # port -> bit/s received
    memory: dict[str, float]  # port -> bytes held
    cpu: float

    def check(self, spec: ServerSpec) -> None:
        """ValueError naming what is wrong when this cannot be a report of ``spec``."""
        names = {port.name for port in spec.ports}
        for what, figures in (("bandwidth", self.bandwidth), ("memory", self.memory)):
            unknown = set(figures) - names
            if unknown:
                raise ValueError(f"{spec.name}: {what} for unknown ports {sorted(unknown)}")
            for port, value in figures.items():
                if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                    raise ValueError(f"{spec.name}: {what} of port {port} is {value!r}, "
                                     f"not a finite number >= 0")
        if not (isinstance(self.cpu, (int, float)) and math.isfinite(self.cpu)
                and 0 <= self.cpu <= 1):
            raise ValueError(f"{spec.name}: cpu {self.cpu!r} is not a utilisation in [0, 1]")


@dataclass(frozen=True)
class ServerLoad:
    """A server's smoothed resource use and its utilisations at one time."""

    spec: ServerSpec
    bandwidth: dict[str, float]  # port -> smoothed bit/s used
    memory: dict[str, float]  # port -> smoothed bytes held
    cpu: float
    flows: dict[str, int] = field(default_factory=dict)  # port -> flows it receives

    @classmethod
    def idle(cls, spec: ServerSpec) -> "ServerLoad":
        zeros = {port.name: 0.0 for port in spec.ports}
        return cls(spec, dict(zeros), dict(zeros), 0.0, {port.name: 0 for port in spec.ports})

    @property
    def network_utilisation(self) -> float:
        return min(1.0, sum(self.bandwidth.values()) / self.spec.rate)

    @property
    def memory_utilisation(self) -> float:
        return min(1.0, sum(self.memory.values()) / self.spec.memory)

    def degree(self, weights: LoadWeights) -> float:
        """The load degree L_i."""
        return weights.degree(self.cpu, self.memory_utilisation, self.network_utilisation)

    def port_left(self, port: Port) -> float:
        """Bandwidth port ``port`` has left, bit/s (0 when it is over its rate)."""
        return max(0.0, port.rate - self.bandwidth.get(port.name, 0.0))

    @property
    def memory_left(self) -> float:
        return max(0.0, self.spec.memory - sum(self.memory.values()))

    @property
    def connections(self) -> int:
        return sum(self.flows.values())


def smooth(previous: float | None, measured: float, factor: float = SMOOTHING) -> float:
    """``factor * measured + (1 - factor) * previous``; the measurement itself when there is no
    previous value."""
    return measured if previous is None else factor * measured + (1 - factor) * previous


class ServerTracker:
    """A server's load from its stream of measurements, smoothed as the spec says."""

    def __init__(self, spec: ServerSpec, factor: float = SMOOTHING):
        self.spec, self.factor = spec, factor
        self.load: ServerLoad | None = None

    def update(self, measurement: Measurement, flows: dict[str, int] | None = None
               ) -> ServerLoad:
        """Take one measurement (ValueError if it does not fit the server; the load is then
        unchanged) and return the load after it. Ports the report leaves out measured 0."""
        measurement.check(self.spec)
        previous = self.load
        bandwidth, memory = {}, {}
        for port in self.spec.ports:
            name = port.name
            bandwidth[name] = smooth(None if previous is None else previous.bandwidth[name],
                                     measurement.bandwidth.get(name, 0.0), self.factor)
            memory[name] = smooth(None if previous is None else previous.memory[name],
                                  measurement.memory.get(name, 0.0), self.factor)
        self.load = ServerLoad(self.spec, bandwidth, memory, measurement.cpu,
                               dict(flows or {port.name: 0 for port in self.spec.ports}))
        return self.load
