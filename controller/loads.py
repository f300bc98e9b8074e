"""Load-report intake: each server's recent reports, with the late, reordered and
broken-clock ones refused and counted."""

from __future__ import annotations

import collections
import math
from types import MappingProxyType

from edgebed import clock
from .policy import LoadReport

# Load reports kept per server: enough for a mean over tens of report periods, few enough that
# every decision can be handed all of them.
LOAD_HISTORY = 32
# A report sent longer ago than this (by the sender's clock, which the hosts of a run share
# with the controller) is stale when it arrives: a decision must not act on it.
LOAD_MAX_AGE = 10.0
# How far ahead of the controller's clock a sender's may be before its reports are refused.
LOAD_MAX_SKEW = 1.0
LOAD_COUNTERS = ("accepted", "stale", "reordered", "from_the_future", "not_a_server")


class LoadReports:
    """The last ``history`` load reports kept for each of ``servers``, oldest first, and how
    many reports were kept or refused, by reason (:data:`LOAD_COUNTERS`)."""

    def __init__(self, servers, history: int = LOAD_HISTORY, max_age: float = LOAD_MAX_AGE):
        self.max_age = max_age
        self.kept: dict[str, collections.deque[LoadReport]] = {
            name: collections.deque(maxlen=history) for name in servers}
        self.counts = dict.fromkeys(LOAD_COUNTERS, 0)

    def latest_load(self, server: str) -> float:
        """``server``'s last reported load, 0 before its first report."""
        history = self.kept[server]
        return history[-1].load if history else 0.0

    def history(self) -> MappingProxyType:
        """Every server's kept load reports, oldest first, as :attr:`State.loads` holds them."""
        return MappingProxyType({name: tuple(history) for name, history in self.kept.items()})

    def report(self, server: str, load: float, *, metrics: dict | None = None,
               now: float = 0.0, sent: float | None = None, urgent: bool = False,
               wall_clock: float | None = None) -> bool:
        """Keep a load report from ``server`` that arrived at ``now`` (the clock of
        :attr:`State.now`); returns whether it was kept. ``sent`` is the sender's
        CLOCK_REALTIME, checked against ``wall_clock`` (default: this process's): a report
        sent more than ``max_age`` seconds ago is stale, one sent before the last kept
        report of the server came out of order, one from more than LOAD_MAX_SKEW seconds
        ahead has a broken clock; each is counted in :attr:`counts` and dropped, as is a
        report from a node that serves nothing. ``sent`` None skips the clock checks (a test
        or a tool feeding reports in by hand)."""
        history = self.kept.get(server)
        problem = None
        if history is None:
            problem = "not_a_server"
        elif sent is not None:
            wall = clock.time() if wall_clock is None else wall_clock
            if sent > wall + LOAD_MAX_SKEW:
                problem = "from_the_future"
            elif wall - sent > self.max_age:
                problem = "stale"
            elif history and sent <= history[-1].sent:
                problem = "reordered"
        if problem is not None:
            self.counts[problem] += 1
            return False
        history.append(LoadReport(server, now, load, MappingProxyType(dict(metrics or {})),
                                  0.0 if sent is None else sent, urgent))
        self.counts["accepted"] += 1
        return True

    def snapshot(self) -> list[dict]:
        """Each server's last report, for a successor to carry over."""
        return [{"server": name, "load": history[-1].load,
                 "metrics": dict(history[-1].metrics), "sent": history[-1].sent}
                for name, history in self.kept.items() if history]

    def restore(self, items: list[dict]) -> None:
        """Carry over the reports of :meth:`snapshot` as arrived when this controller started
        (the earlier controller's clock is gone); each history starts again from there."""
        for item in items:
            if item.get("server") in self.kept and _finite(item.get("load")):
                self.kept[item["server"]].append(LoadReport(
                    item["server"], 0.0, item["load"], MappingProxyType(
                        {k: v for k, v in item.get("metrics", {}).items() if _finite(v)}),
                    item.get("sent", 0.0) if _finite(item.get("sent")) else 0.0))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
