"""Capacity control across K dispatch centers (dispatch, mechanism 3), in one dimension
(streams) or several (streams, video and audio bitrate, CPU): a join needs room in every
dimension its node's capacity names."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

# Amounts by dimension, in whole units (streams, kbit/s, CPU millicores): tickets then split
# and add up exactly, with no rounding drift between an admission and its release.
Resources = Mapping[str, int]
STREAMS = "streams"
ONE_STREAM: Resources = {STREAMS: 1}


def by_dimension(amount: float | Mapping[str, float]) -> dict[str, float]:
    """``amount`` by dimension; a bare number is streams (the one-dimensional case)."""
    return dict(amount) if isinstance(amount, Mapping) else {STREAMS: amount}


def fits(demand: Resources, free: Mapping[str, float]) -> bool:
    """Whether ``demand`` fits in ``free`` in every dimension ``free`` names (a dimension a
    node's capacity does not name does not limit it)."""
    return all(demand.get(dimension, 0) <= room for dimension, room in free.items())


def split(capacity: int, centers: Sequence[str]) -> dict[str, int]:
    """``capacity`` tickets shared as evenly as whole tickets allow among ``centers`` (the
    first ones get the remainder); the shares add up to ``capacity``."""
    if not centers:
        raise ValueError("no dispatch centers to split capacity among")
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, not {capacity}")
    whole, rest = divmod(int(capacity), len(centers))
    return {center: whole + (index < rest) for index, center in enumerate(centers)}


class Tickets:
    """Each node's capacity pre-sold to the centers: in every dimension each center holds a
    share (:func:`split`), and a join takes its demand from its own center's share in each.

    Tickets are per dimension, not per bundle (a fixed package of a stream, its bitrate and
    its CPU): joins differ widely (an audio-only listener needs a few percent of an HD
    viewer's bitrate), so a bundle sized for the largest join strands most of a node when small
    ones come, and one sized for the average oversells when large ones do. Shares per
    dimension hold any mix exactly; a bundle is their special case where every join asks the
    same, and one stream per join is the one-dimensional case."""

    name = "tickets"

    def __init__(self, capacities: Mapping[str, int | Resources], centers: Sequence[str]):
        self.centers = tuple(centers)
        self.left: dict[str, dict[str, dict[str, int]]] = {}
        for node, capacity in capacities.items():
            shares = {dimension: split(amount, self.centers)
                      for dimension, amount in by_dimension(capacity).items()}
            self.left[node] = {center: {dimension: share[center]
                                        for dimension, share in shares.items()}
                               for center in self.centers}

    def has_room(self, center: str, node: str, demand: Resources = ONE_STREAM) -> bool:
        return fits(demand, self.left[node][center])

    def admit(self, center: str, node: str, demand: Resources = ONE_STREAM) -> bool:
        """Take ``demand`` from ``center``'s tickets for ``node``; False (nothing changes) if
        they lack room in any dimension."""
        if not self.has_room(center, node, demand):
            return False
        for dimension, left in self.left[node][center].items():
            self.left[node][center][dimension] = left - demand.get(dimension, 0)
        return True

    def release(self, center: str, node: str, demand: Resources = ONE_STREAM) -> None:
        for dimension, left in self.left[node][center].items():
            self.left[node][center][dimension] = left + demand.get(dimension, 0)

    def report(self, node: str, load: float | Mapping[str, float]) -> None:
        """Tickets do not need load reports (they count what they sold)."""


class SharedCapacity:
    """Every center admits against a node's whole capacity, believing its load to be the last
    report plus its own admissions since (the baseline; stale by up to a report period)."""

    name = "shared"

    def __init__(self, capacities: Mapping[str, int | Resources], centers: Sequence[str]):
        self.centers = tuple(centers)
        self.capacity = {node: by_dimension(capacity) for node, capacity in capacities.items()}
        self.reported: dict[str, dict[str, float]] = {
            node: dict.fromkeys(capacity, 0.0) for node, capacity in self.capacity.items()}
        self.since: dict[str, dict[str, Counter]] = {node: defaultdict(Counter)
                                                     for node in capacities}

    def believed_load(self, center: str, node: str) -> dict[str, float]:
        own = self.since[node][center]
        return {dimension: load + own[dimension]
                for dimension, load in self.reported[node].items()}

    def has_room(self, center: str, node: str, demand: Resources = ONE_STREAM) -> bool:
        # A reported part of a unit does not fill it: in one dimension, a node has room while
        # its believed load is below its capacity, whatever fraction of a stream a report says.
        believed = self.believed_load(center, node)
        return fits(demand, {dimension: capacity - math.floor(believed[dimension])
                             for dimension, capacity in self.capacity[node].items()})

    def admit(self, center: str, node: str, demand: Resources = ONE_STREAM) -> bool:
        if not self.has_room(center, node, demand):
            return False
        self.since[node][center].update(demand)
        return True

    def release(self, center: str, node: str, demand: Resources = ONE_STREAM) -> None:
        # The departure shows in the node's next report; until then the center's own count
        # cannot go below what it admitted since the last one.
        own = self.since[node][center]
        for dimension, amount in demand.items():
            own[dimension] = max(0, own[dimension] - amount)

    def report(self, node: str, load: float | Mapping[str, float]) -> None:
        """A load report from ``node`` reached every center: it replaces their beliefs (a bare
        number is streams)."""
        reported = by_dimension(load)
        self.reported[node] = {dimension: float(reported.get(dimension, 0.0))
                               for dimension in self.capacity[node]}
        self.since[node].clear()


def redirects(on_node: Mapping[str, Sequence[str]],
              capacities: Mapping[str, float | Mapping[str, float]],
              demands: Mapping[str, Resources] | None = None) -> list[tuple[str, str]]:
    """The (client, node) pairs to redirect off oversold nodes: on each node, the latest
    joined clients until the rest fit its capacity in every dimension (``on_node`` lists each
    node's clients in join order; ``demands`` gives each client's demand, by default one
    stream)."""
    demands = demands or {}
    moves = []
    for node, clients in on_node.items():
        capacity = by_dimension(capacities[node])
        load: Counter = Counter()
        for client in clients:
            load.update(demands.get(client, ONE_STREAM))
        for client in reversed(clients):
            if all(load[dimension] <= amount for dimension, amount in capacity.items()):
                break
            moves.append((client, node))
            load.subtract(demands.get(client, ONE_STREAM))
    return moves
