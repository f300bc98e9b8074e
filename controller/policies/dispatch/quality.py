"""Path quality as dispatch judges it: RTT, loss and jitter, VIA's thresholds for a poor
session, and what a path through a relay is worth given its two legs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.policy import LoadReport
from edgebed.protocol import path_metric


@dataclass(frozen=True)
class PathQuality:
    """What a probe measured on a path: round-trip time and jitter in seconds, loss as a
    fraction 0..1."""

    rtt: float
    loss: float = 0.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rtt) and self.rtt >= 0):
            raise ValueError(f"rtt must be a finite number >= 0, not {self.rtt!r}")
        if not 0 <= self.loss <= 1:
            raise ValueError(f"loss must be within 0..1, not {self.loss!r}")
        if not (math.isfinite(self.jitter) and self.jitter >= 0):
            raise ValueError(f"jitter must be a finite number >= 0, not {self.jitter!r}")

    def then(self, other: PathQuality) -> PathQuality:
        """This path followed by ``other`` (a relay's two legs): delays add, a packet survives
        only if it survives both legs, and the legs' jitters, independent, add in quadrature."""
        return PathQuality(self.rtt + other.rtt, 1 - (1 - self.loss) * (1 - other.loss),
                           math.hypot(self.jitter, other.jitter))


@dataclass(frozen=True)
class Thresholds:
    """Where a session turns poor (VIA's defaults)."""

    rtt: float = 0.320
    loss: float = 0.012
    jitter: float = 0.012

    def poor(self, quality: PathQuality) -> bool:
        return (quality.rtt > self.rtt or quality.loss > self.loss
                or quality.jitter > self.jitter)

    def badness(self, quality: PathQuality) -> float:
        """How far ``quality`` is from the thresholds, as one number to rank paths by: the sum
        of each measure over its threshold (so 1 on every axis is 3; a poor path has some term
        above 1). Ranking by it puts lossy paths behind long ones in the proportion VIA's
        thresholds set."""
        return (quality.rtt / self.rtt + quality.loss / self.loss
                + quality.jitter / self.jitter)

    def better(self, quality: PathQuality, than: PathQuality) -> bool:
        """``quality`` is the better path: not poor where ``than`` is poor; of two good
        enough paths the one of lower RTT (below the thresholds loss and jitter do not make a
        session poor, and a short probe's loss figure is mostly noise); of two poor paths the
        one of lower badness."""
        if self.poor(quality) != self.poor(than):
            return not self.poor(quality)
        if not self.poor(quality):
            return quality.rtt < than.rtt
        return self.badness(quality) < self.badness(than)


VIA = Thresholds()


def probed_path(report: LoadReport | None, address: str) -> PathQuality | None:
    """The path to ``address`` as ``report`` gives it (:class:`agents.echo.PathMeter`'s
    metrics), None when it gives none. A path nothing answered on has no round trip: it is
    taken as lost entirely at no delay, poor by its loss alone."""
    if report is None:
        return None
    loss = report.value(path_metric(address, "loss"))
    if loss is None:
        return None
    return PathQuality(report.value(path_metric(address, "rtt")) or 0.0, loss,
                       report.value(path_metric(address, "jitter")) or 0.0)
