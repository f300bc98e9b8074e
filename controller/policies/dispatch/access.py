"""First- and last-mile access in dispatch: where a client is believed to be, which media nodes
the dispatch center offers it, and which one the client takes after probing them."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from .quality import VIA, PathQuality, Thresholds


@dataclass(frozen=True)
class MediaNode:
    """A media node (SFU-like) as the dispatch center knows it: where it is, its capacity in
    downstream streams, its last reported load, a cost per stream (bandwidth price) and an
    operator's preference (higher is preferred)."""

    name: str
    region: str
    room: str
    site: str
    capacity: float
    load: float = 0.0
    cost: float = 0.0
    preference: float = 0.0

    @property
    def utilization(self) -> float:
        return self.load / self.capacity if self.capacity > 0 else math.inf


@dataclass(frozen=True)
class Geography:
    """Sites (name -> region) and the one-way delay in seconds from each site to each media
    node it reaches (a missing pair: unreachable)."""

    regions: Mapping[str, str]
    delays: Mapping[tuple[str, str], float]

    def delay(self, site: str, node: str) -> float:
        return self.delays.get((site, node), math.inf)

    @classmethod
    def from_graph(cls, graph: nx.MultiDiGraph, regions: Mapping[str, str],
                   nodes: Sequence[str]) -> Geography:
        """Delays along shortest paths (edge attribute ``delay``) over the links that are up,
        from each site (a node of ``graph``) to each of ``nodes``."""
        up = nx.DiGraph()
        for u, v, data in graph.edges(data=True):
            if data.get("up", True):
                delay = data.get("delay", 0.0)
                if not up.has_edge(u, v) or delay < up[u][v]["delay"]:
                    up.add_edge(u, v, delay=delay)
        delays = {}
        for site in regions:
            if site not in up:
                continue
            reach = nx.single_source_dijkstra_path_length(up, site, weight="delay")
            delays.update({(site, node): reach[node] for node in nodes if node in reach})
        return cls(dict(regions), delays)


class LocationDatabase:
    """A synthetic IP-location database: it puts a client at its true site, except for a
    share of clients it puts at another site. The share is ``error_share`` for clients of
    ``home_region`` (in-country; with no home region, for everyone) and
    ``abroad_error_share`` for the others (default: the same). A wrong answer stays in the
    client's region (another city of the same country) with probability
    ``same_region_share`` when the region has another site, else it is drawn uniformly from
    the sites of the other regions.

    Whether a client is misplaced, and where to, depends only on the seed and the client's
    name, so every dispatch center and every call gives the same answer, in any order."""

    def __init__(self, geography: Geography, error_share: float, *,
                 abroad_error_share: float | None = None, home_region: str | None = None,
                 same_region_share: float = 0.5, seed: int = 0):
        for label, share in (("error_share", error_share),
                             ("abroad_error_share", abroad_error_share),
                             ("same_region_share", same_region_share)):
            if share is not None and not 0 <= share <= 1:
                raise ValueError(f"{label} must be within 0..1, not {share!r}")
        self.sites = sorted(geography.regions)
        self.regions = geography.regions
        self.error_share = error_share
        self.abroad_error_share = error_share if abroad_error_share is None \
            else abroad_error_share
        self.home_region = home_region
        self.same_region_share = same_region_share
        self.seed = seed

    def share_wrong(self, site: str) -> float:
        home = self.home_region is None or self.regions.get(site) == self.home_region
        return self.error_share if home else self.abroad_error_share

    def locate(self, client: str, site: str) -> str:
        """Where the database puts ``client``, whose true site is ``site``."""
        if site not in self.regions:
            raise KeyError(f"client {client!r} is at unknown site {site!r}")
        rng = np.random.default_rng([self.seed, zlib.crc32(client.encode())])
        wrong, nearby, pick = rng.random(3)
        if wrong >= self.share_wrong(site):
            return site
        region = self.regions[site]
        near = [other for other in self.sites if other != site and self.regions[other] == region]
        far = [other for other in self.sites if self.regions[other] != region]
        others = near if near and (nearby < self.same_region_share or not far) else far
        return others[int(pick * len(others))] if others else site


def rank(nodes: Sequence[MediaNode], site: str, geography: Geography, *,
         has_room: Callable[[MediaNode], bool] = lambda node: node.load < node.capacity,
         utilization: Callable[[MediaNode], float] = lambda node: node.utilization,
         near_band: float = 0.020, load_step: float = 0.1) -> list[MediaNode]:
    """``nodes`` ranked for a client believed at ``site``: nodes with room before full ones
    (``has_room`` says; tickets or shared capacity decide it), then nearest by estimated delay
    (in bands of ``near_band`` seconds, so nodes about as near compare by what follows), then
    least utilized (in steps of ``load_step``; ``utilization`` says, by default from the
    node's last report), cheapest, most preferred, nearest exactly, by name. Unreachable
    nodes are left out."""

    def key(node: MediaNode) -> tuple:
        delay = geography.delay(site, node.name)
        return (not has_room(node), math.floor(delay / near_band),
                math.floor(utilization(node) / load_step) if load_step else utilization(node),
                node.cost, -node.preference, delay, node.name)

    return sorted((node for node in nodes if math.isfinite(geography.delay(site, node.name))),
                  key=key)


def candidates(ranked: Sequence[MediaNode], count: int, per_site: int = 1,
               other_regions: int = 0) -> list[MediaNode]:
    """The first ``count`` of ``ranked`` taking at most ``per_site`` nodes from any one site,
    and keeping ``other_regions`` of the places for the best node of each of that many other
    regions (in ranked order), so that a list answered for a misplaced client still reaches
    past the place, and the country, the database believes it is in. The rest of ``ranked``
    fills in when there are too few sites or regions. The first place is always the best
    ranked node's: a list of one is that node, never one abroad."""
    if not ranked:
        return []
    home = ranked[0].region
    abroad: list[MediaNode] = []
    for node in ranked:
        if len(abroad) < min(other_regions, count - 1) and node.region != home \
                and all(node.region != other.region for other in abroad):
            abroad.append(node)
    chosen: list[MediaNode] = []
    taken: dict[str, int] = {}
    for node in ranked:
        if len(chosen) == count - len(abroad):
            break
        if node not in abroad and taken.get(node.site, 0) < per_site:
            chosen.append(node)
            taken[node.site] = taken.get(node.site, 0) + 1
    chosen += abroad
    chosen += [node for node in ranked if node not in chosen][:count - len(chosen)]
    return sorted(chosen, key=ranked.index)


def choose_by_probe(candidates: Sequence[str], probes: Mapping[str, PathQuality | None],
                    thresholds: Thresholds = VIA) -> str | None:
    """The candidate the client takes after probing: the best measured path (not poor before
    poor, then least bad by ``thresholds``), the ranking's order breaking ties. A candidate
    that did not answer (missing or None) is never taken; None if none answered."""
    best: str | None = None
    for name in candidates:
        quality = probes.get(name)
        if quality is None:
            continue
        if best is None or thresholds.better(quality, probes[best]):
            best = name
    return best
