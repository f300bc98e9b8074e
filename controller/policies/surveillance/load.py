"""surveillance's load figures: a node's real-time load L, its maximum load from hardware, the
node weights derived from it, and the light / moderate / heavy queues."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import astuple, dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

LIGHT_BELOW = 0.6
HEAVY_ABOVE = 0.9


class LoadWeights(BaseModel):
    """R1..R4 of eq. 2 (and of eq. 4): how much CPU, memory, bandwidth and disk count."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: float = Field(0.4, ge=0, description="R1, weight of CPU")
    memory: float = Field(0.1, ge=0, description="R2, weight of memory")
    bandwidth: float = Field(0.4, ge=0, description="R3, weight of network bandwidth")
    disk: float = Field(0.1, ge=0, description="R4, weight of disk")

    @model_validator(mode="after")
    def _sum_to_one(self) -> LoadWeights:
        if abs(sum(self.vector) - 1) > 1e-9:
            raise ValueError(f"the weights must sum to 1, not {sum(self.vector):g}")
        return self

    @property
    def vector(self) -> tuple[float, float, float, float]:
        return self.cpu, self.memory, self.bandwidth, self.disk


@dataclass(frozen=True)
class Usage:
    """A node's indicators, each a fraction of its budget (0 to 1; above 1 when over it), or
    ``None`` when the node does not measure it."""

    cpu: float | None
    memory: float | None
    bandwidth: float | None
    disk: float | None = None

    @property
    def vector(self) -> tuple[float | None, float | None, float | None, float | None]:
        """The indicators in the order of :attr:`LoadWeights.vector`."""
        return self.cpu, self.memory, self.bandwidth, self.disk


@dataclass(frozen=True)
class Hardware:
    """A node's hardware figures, the inputs of its maximum load."""

    cpu_ghz: float  # clock x CPU count
    memory_gb: float
    bandwidth_mbps: float
    disk_gb: float


def node_load(usage: Usage, weights: LoadWeights = LoadWeights()) -> float:
    """L of eq. 2 over the indicators the node measures (their weights rescaled to sum to 1)."""
    pairs = [(weight, value) for weight, value in zip(weights.vector, usage.vector)
             if value is not None]
    total = sum(weight for weight, _ in pairs)
    if total == 0:
        raise ValueError("a load needs at least one measured indicator of non-zero weight")
    return sum(weight * value for weight, value in pairs) / total


def max_loads(hardware: Sequence[Hardware], weights: LoadWeights = LoadWeights(),
              shift: float = 1.0) -> np.ndarray:
    """MAXL* of every node: z-scores of the hardware figures, weighted, shifted positive (see
    docs/schemes/surveillance.md)."""
    if shift <= 0:
        raise ValueError(f"shift must be positive, not {shift:g}")
    if not hardware:
        return np.zeros(0)
    figures = np.array([astuple(node) for node in hardware], dtype=float)
    spread = figures.std(axis=0)
    z = np.divide(figures - figures.mean(axis=0), spread, out=np.zeros_like(figures),
                  where=spread > 0)
    raw = z @ np.array(weights.vector)
    return raw - raw.min() + shift


def node_weights(hardware: Sequence[Hardware], weights: LoadWeights = LoadWeights(),
                 shift: float = 1.0) -> np.ndarray:
    """W(i) = MAXL*(i) / sum MAXL* (eq. 5)."""
    maxl = max_loads(hardware, weights, shift)
    return maxl / maxl.sum() if len(maxl) else maxl


def capacity_weights(hardware: Sequence[Hardware],
                     weights: LoadWeights = LoadWeights()) -> np.ndarray:
    """W(i) from capacity instead of z-scores: each figure as the node's share of the
    cluster's total, R-weighted; a node with twice every figure of another gets twice its
    weight (z-scores do not keep such ratios)."""
    if not hardware:
        return np.zeros(0)
    figures = np.array([astuple(node) for node in hardware], dtype=float)
    return figures / figures.sum(axis=0) @ np.array(weights.vector)


class Queue(enum.IntEnum):
    """The dynamic-feedback queues, in order of preference."""

    LIGHT = 0
    MODERATE = 1
    HEAVY = 2


def queue_of(load: float, light_below: float = LIGHT_BELOW,
             heavy_above: float = HEAVY_ABOVE) -> Queue:
    """The queue a node of load ``load`` belongs to."""
    if load < light_below:
        return Queue.LIGHT
    return Queue.HEAVY if load > heavy_above else Queue.MODERATE
