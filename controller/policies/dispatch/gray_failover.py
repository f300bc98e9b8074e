"""Gray failures as the dispatch center sees them: a media node whose path from the origin
probes poor, or whose load reports stop or show its stream stalled, for a detection time; and
where its viewers go then (step 8 in docs/schemes/dispatch.md).

A cut cable is caught by the switches' fast-failover groups; a path that only turns lossy or
slow, or a node whose CPU is starved, loses no carrier, and only what the nodes report shows
it. One poor probe is noise (a short probe's loss figure mostly is): a path counts as degraded
once every report over the detection time has found it poor, and a single good report ends
the streak."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import networkx as nx

from controller.policy import LoadReport, State

from .quality import VIA, PathQuality, Thresholds, probed_path
from .routing import StandbyRoutes

SILENCE_METRIC = ".silent_s"  # stream.<id>.silent_s: how long a node's source stream is silent


@dataclass
class PathStreak:
    """What the detector has taken in of one node's reports: the last one's arrival and since
    when its path from the origin has probed poor without a good report between (None: its
    last report found the path good, or gave none)."""

    seen: float = float("-inf")
    poor_since: float | None = None
    last: PathQuality | None = None


@dataclass
class GrayFailureDetector:
    """Degraded paths and stalled nodes, from the load reports of :attr:`State.loads`, with
    ``detection`` seconds of hysteresis (:meth:`observe` each call, then :meth:`verdict`)."""

    detection: float
    thresholds: Thresholds = VIA
    streaks: dict[str, PathStreak] = field(default_factory=dict)

    def observe(self, state: State, origin_address: str | None) -> None:
        """Take in the reports that arrived since the last call, oldest first (the controller
        keeps a bounded history: a streak outlives the reports it began with)."""
        for node, reports in state.loads.items():
            streak = self.streaks.setdefault(node, PathStreak())
            for report in reports:
                if report.received <= streak.seen:
                    continue
                streak.seen = report.received
                quality = (None if origin_address is None
                           else probed_path(report, origin_address))
                streak.last = quality
                if quality is None or not self.thresholds.poor(quality):
                    streak.poor_since = None
                elif streak.poor_since is None:
                    streak.poor_since = report.received

    def verdict(self, state: State, node: str) -> str | None:
        """Why ``node`` is failing its viewers at ``state.now``, or None while it is healthy
        (or never reported: it has not started)."""
        latest = state.latest_load(node)
        if latest is None:
            return None
        age = state.now - latest.received
        if age >= self.detection:
            return f"no load report for {age:.1f} s"
        silent = stream_silence(latest)
        if silent >= self.detection:
            return f"its source stream silent for {silent:.1f} s"
        streak = self.streaks.get(node)
        if streak is not None and streak.poor_since is not None \
                and state.now - streak.poor_since >= self.detection:
            quality = streak.last
            return (f"path from the origin poor for {state.now - streak.poor_since:.1f} s "
                    f"(rtt {quality.rtt * 1e3:.0f} ms, loss {quality.loss:.1%})")
        return None

    def failing(self, state: State, nodes: Iterable[str]) -> dict[str, str]:
        """Each of ``nodes`` that is failing, with why."""
        return {node: reason for node in nodes
                if (reason := self.verdict(state, node)) is not None}

    def path_only(self, state: State, node: str) -> bool:
        """``node`` itself is well (reporting, its stream flowing): only its path is poor."""
        latest = state.latest_load(node)
        return (latest is not None and state.now - latest.received < self.detection
                and stream_silence(latest) < self.detection)


def stream_silence(report: LoadReport) -> float:
    """The longest any stream a node serves has been silent, by ``report`` (0: none)."""
    return max((value for metric, value in report.metrics.items()
                if metric.startswith("stream.") and metric.endswith(SILENCE_METRIC)),
               default=0.0)


def core_routes(state: State, hosts: Iterable[str]) -> StandbyRoutes:
    """Primary and standby routes between the sites of ``state.graph`` (its links up, weighed
    by delay), with ``hosts`` (the media nodes, origin and relays) on their one link each; the
    viewers' hosts, through which no route passes, left out."""
    keep = set(hosts)
    clients = {client.name for client in state.clients} - keep
    graph = nx.Graph()
    for a, b, data in state.graph.edges(data=True):
        if a not in clients and b not in clients and data.get("up", True):
            graph.add_edge(a, b, weight=data.get("delay", 0.0))
    return StandbyRoutes(graph)


def standby_relay(routes: StandbyRoutes, origin: str, node: str,
                  relay_sites: Mapping[str, str]) -> str | None:
    """The relay whose site the standby route from ``origin`` to ``node`` passes (the first
    such by name), None when the standby goes through none or there is no standby."""
    if origin not in routes.graph or node not in routes.graph:
        return None
    _, standby = routes.plan(origin, node)
    if standby is None:
        return None
    inner = set(standby[1:-1])
    return next((relay for relay, site in sorted(relay_sites.items()) if site in inner), None)
