"""Where a run's links lost frames, by cause, per link and direction: what the scenario asked
for apart from what the emulator made.

Loss that nobody configured is a fidelity defect, so it is counted where it happens:

* ``receive_queue``: frames the kernel dropped because a relay's packet-socket receive queue
  was full (``PACKET_STATISTICS``): the relay did not keep up, or was not scheduled;
* ``relay_queue``: frames a relay dropped because it already held its ``limit``;
* ``oversize``: frames larger than the relay's buffer;
* ``interface``: frames a veth could not hand to its peer (its ``tx_dropped``: the peer's
  backlog queue was full, the machine did not process it in time);
* ``qdisc``: drops in a queueing discipline that no configured rate explains;
* ``switch``: frames the userspace switch's receive socket on the link's far end dropped
  (:mod:`topologies.switch_sockets`: ovs-vswitchd was not scheduled in time for a burst). The
  kernel datapath has no such socket, so there it is always 0.

What the scenario asked for is counted beside, not as emulator-made:

* ``rate_limit``: qdisc drops on a direction with a rate (``bw``): its queue overflowed, the
  congestion a rate limit makes;
* ``configured``: random and burst loss drawn by the relay, frames dropped while a link was down
  (and, on the netem backend, netem's own drops where loss is configured: netem counts the loss
  it draws and its queue overflow in one counter, so they cannot be told apart).

The rule for qdisc drops and interface drops is therefore: on a direction with a rate, qdisc
drops are congestion; on a link taken down during the run, interface drops are the down time;
everything else that drops is emulator-made. The fallback backend's random loss
(``TC_ACT_STOLEN`` in cls_bpf) is not in any qdisc counter, so it never shows up here.
"""

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
