"""Capacity control across K dispatch centers (dispatch, mechanism 3)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence


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
    """Each node's capacity pre-sold to the centers in shares (:func:`split`)."""

    name = "tickets"

    def __init__(self, capacities: Mapping[str, int], centers: Sequence[str]):
        self.centers = tuple(centers)
        self.left = {node: split(capacity, self.centers)
                     for node, capacity in capacities.items()}

    def has_room(self, center: str, node: str) -> bool:
        return self.left[node][center] > 0

    def admit(self, center: str, node: str) -> bool:
        """Use one of ``center``'s tickets for ``node``; False (nothing changes) if none left."""
        if not self.has_room(center, node):
            return False
        self.left[node][center] -= 1
        return True

    def release(self, center: str, node: str) -> None:
        self.left[node][center] += 1

    def report(self, node: str, load: float) -> None:
        """Tickets do not need load reports (they count what they sold)."""


class SharedCapacity:
    """Every center admits against a node's whole capacity, believing its load to be the last
    report plus its own admissions since (the baseline; stale by up to a report period)."""

    name = "shared"

    def __init__(self, capacities: Mapping[str, int], centers: Sequence[str]):
        self.centers = tuple(centers)
        self.capacity = dict(capacities)
        self.reported: dict[str, float] = {node: 0.0 for node in capacities}
        self.since: dict[str, dict[str, int]] = {node: defaultdict(int) for node in capacities}

    def believed_load(self, center: str, node: str) -> float:
        return self.reported[node] + self.since[node][center]

    def has_room(self, center: str, node: str) -> bool:
        return self.believed_load(center, node) < self.capacity[node]

    def admit(self, center: str, node: str) -> bool:
        if not self.has_room(center, node):
            return False
        self.since[node][center] += 1
        return True

    def release(self, center: str, node: str) -> None:
        # The departure shows in the node's next report; until then the center's own count
        # cannot go below what it admitted since the last one.
        self.since[node][center] = max(0, self.since[node][center] - 1)

    def report(self, node: str, load: float) -> None:
        """A load report from ``node`` reached every center: it replaces their beliefs."""
        self.reported[node] = load
        self.since[node].clear()


def redirects(on_node: Mapping[str, Sequence[str]],
              capacities: Mapping[str, float]) -> list[tuple[str, str]]:
    """The (client, node) pairs to redirect off oversold nodes: on each node, the clients
    beyond its capacity, latest joined first (``on_node`` lists each node's clients in join
    order)."""
    moves = []
    for node, clients in on_node.items():
        excess = len(clients) - int(capacities[node])
        if excess > 0:
            moves += [(client, node) for client in reversed(clients[-excess:])]
    return moves
