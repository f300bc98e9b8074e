"""Where a viewer pulls from and how the stream gets there (dispatch, mechanisms 4 and 6)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

import networkx as nx

from .access import MediaNode
from .quality import VIA, PathQuality, Thresholds


class Mode(str, Enum):
    SINGLE = "single"
    MULTI = "multi"


@dataclass(frozen=True)
class Pull:
    """How a viewer gets a stream: it pulls from ``node``; ``upstream`` lists the nodes the
    stream comes through from the origin to ``node`` (origin first; empty when ``node`` is the
    origin or took it over by spill-over, in which case ``spilled`` is set)."""

    node: str
    upstream: tuple[str, ...] = ()
    spilled: bool = False

    @property
    def hops(self) -> int:
        """Media nodes the stream crosses after the streamer's."""
        return len(self.upstream)


def schedule(mode: Mode, origin: MediaNode, ranked: Sequence[MediaNode],
             room_nodes: Sequence[MediaNode], has_room: Callable[[MediaNode], bool]) -> Pull | None:
    """Where a viewer pulls a stream pushed to ``origin`` from. ``ranked`` are the viewer's
    candidates best first, ``room_nodes`` the nodes of the origin's machine room. None when no
    node has room."""
    if mode is Mode.SINGLE:
        if has_room(origin):
            return Pull(origin.name)
        spare = next((node for node in room_nodes
                      if node.name != origin.name and has_room(node)), None)
        if spare is not None:
            # Same machine room: the origin feeds it over the room's own switch, at no cost.
            return Pull(spare.name, (origin.name,), spilled=True)
    edge = next((node for node in ranked if has_room(node)), None)
    if edge is None:
        return None
    return Pull(edge.name, () if edge.name == origin.name else (origin.name,))


def choose_relay(direct: PathQuality, relayed: Mapping[str, tuple[PathQuality, PathQuality]],
                 thresholds: Thresholds = VIA) -> str | None:
    """The relay to put on a path whose direct quality is ``direct``; ``relayed`` maps each
    relay to the probed quality of its two legs. None (go direct) unless the direct path is
    poor and the best relayed path is better than it."""
    if not thresholds.poor(direct):
        return None
    best = None
    for relay in sorted(relayed):
        first, second = relayed[relay]
        quality = first.then(second)
        if thresholds.better(quality, direct) and (
                best is None or thresholds.better(quality, best[1])):
            best = (relay, quality)
    return best[0] if best else None


class StandbyRoutes:
    """Routes through ``graph`` (an undirected or directed networkx graph whose edges carry
    ``weight``, e.g. delay), each with a hot standby sharing no link with it when the graph has
    one. :meth:`after_failure` says what a source-target pair uses once links fail: the
    primary if it survived, else the standby if it did (switching at once), else None (a
    recomputation is needed: :meth:`recompute`)."""

    def __init__(self, graph: nx.Graph, weight: str = "weight"):
        self.graph = graph
        self.weight = weight
        self.routes: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...] | None]] = {}

    def plan(self, source: str, target: str) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        """The primary (shortest) route and its link-disjoint standby (shortest among those),
        computed once per pair."""
        if (source, target) not in self.routes:
            primary = tuple(nx.shortest_path(self.graph, source, target, weight=self.weight))
            links = set(_links(primary))
            spare = nx.restricted_view(self.graph, [], [
                edge for edge in self.graph.edges if _link(*edge[:2]) in links])
            try:
                standby = tuple(nx.shortest_path(spare, source, target, weight=self.weight))
            except nx.NetworkXNoPath:
                standby = None
            self.routes[source, target] = (primary, standby)
        return self.routes[source, target]

    def after_failure(self, source: str, target: str,
                      failed: set[frozenset[str]]) -> tuple[str, ...] | None:
        primary, standby = self.plan(source, target)
        for route in (primary, standby):
            if route is not None and not failed & set(_links(route)):
                return route
        return None

    def recompute(self, source: str, target: str,
                  failed: set[frozenset[str]]) -> tuple[str, ...] | None:
        """The shortest route once ``failed`` links are gone (what a design without standby
        routes does, after the failure)."""
        view = nx.restricted_view(self.graph, [], [
            edge for edge in self.graph.edges if _link(*edge[:2]) in failed])
        try:
            return tuple(nx.shortest_path(view, source, target, weight=self.weight))
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            return None


def _link(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


def _links(route: Sequence[str]) -> list[frozenset[str]]:
    return [_link(a, b) for a, b in zip(route, route[1:])]
