"""Where a run's links lost frames, by cause, per link and direction: what the scenario asked
for apart from what the emulator made."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..model import Impairment

EMULATOR_CAUSES = ("receive_queue", "relay_queue", "oversize", "interface", "qdisc", "switch")
CONFIGURED_CAUSES = ("rate_limit", "configured")


@dataclass
class DirectionDrops:
    """One direction of one link: frames offered to it and frames lost, by cause."""

    offered: int = 0
    receive_queue: int = 0
    relay_queue: int = 0
    oversize: int = 0
    interface: int = 0
    qdisc: int = 0
    switch: int = 0
    rate_limit: int = 0
    configured: int = 0
    # The largest mean loss the direction was configured with during the run.
    configured_loss: float = 0.0

    @property
    def emulator_made(self) -> int:
        return sum(getattr(self, cause) for cause in EMULATOR_CAUSES)

    def record(self) -> dict:
        figures = asdict(self)
        figures["emulator_made"] = self.emulator_made
        figures["emulator_made_fraction"] = (self.emulator_made / self.offered
                                             if self.offered else 0.0)
        return figures


def mean_loss(impairment: Impairment) -> float:
    """The loss a direction is configured to make on average: random loss, or the burst
    model's stationary loss (p/(p+r) of the time bad)."""
    burst = impairment.burst
    if burst:
        bad = burst.p / (burst.p + burst.r) if burst.p + burst.r else 0.0
        return max(impairment.loss or 0.0, bad * burst.bad_loss + (1 - bad) * burst.good_loss)
    return impairment.loss or 0.0


def root_qdisc(output: str) -> tuple[int, int]:
    """(packets sent, drops) of the root qdisc in ``tc -s -j qdisc show dev X`` output; a root
    qdisc's counters include what the qdiscs under it dropped. (0, 0) when there is none."""
    try:
        qdiscs = json.loads(output or "[]")
    except ValueError:
        return 0, 0
    for qdisc in qdiscs:
        if qdisc.get("root") and qdisc.get("kind") not in ("clsact", "ingress"):
            return int(qdisc.get("packets", 0)), int(qdisc.get("drops", 0))
    return 0, 0


def interface_counters(output: str) -> dict[str, tuple[int, int]]:
    """Per interface in ``ip -s -j link show`` output: (frames sent, frames dropped on send)."""
    try:
        links = json.loads(output or "[]")
    except ValueError:
        return {}
    counters = {}
    for link in links:
        sent = (link.get("stats64") or link.get("stats") or {}).get("tx") or {}
        counters[link.get("ifname")] = (int(sent.get("packets", 0)), int(sent.get("dropped", 0)))
    return counters


def add_qdisc_drops(drops: DirectionDrops, drops_seen: int, impairment: Impairment,
                    backend: str) -> None:
    """Attribute ``drops_seen`` drops of a qdisc that carried ``impairment`` (see the rule)."""
    if impairment.bw:
        drops.rate_limit += drops_seen
    elif backend == "netem" and mean_loss(impairment):
        drops.configured += drops_seen
    else:
        drops.qdisc += drops_seen


def add_relay_statistics(drops: DirectionDrops, figures: dict) -> None:
    """A relay direction's final statistics (:mod:`topologies.impairments.wire`)."""
    drops.receive_queue += figures.get("dropped_receive_queue", 0)
    drops.relay_queue += figures.get("dropped_queue_full", 0)
    drops.oversize += figures.get("dropped_oversize", 0)
    drops.configured += figures.get("dropped_loss", 0) + figures.get("dropped_down", 0)
