"""A Chord ring (Stoica et al.): node and key identifiers on a 2^32 ring (the first 32-bit
word of the MD5 of the name), a key's home the successor of its identifier, and greedy routing
over finger tables, so a lookup takes at most about log2 N hops (ceil(log2 N) for evenly spread
identifiers) and log2(N) / 2 on average."""

from __future__ import annotations

import bisect
import hashlib

RING_BITS = 32
RING = 1 << RING_BITS


def identifier(name: str) -> int:
    return int.from_bytes(hashlib.md5(name.encode()).digest()[:4], "big")


class ChordRing:
    """The ring of ``ids`` (distinct identifiers; node i has ids[i]), with each node's finger
    table: finger k of node n is the successor of id(n) + 2^k."""

    def __init__(self, ids: list[int]):
        if len(set(ids)) != len(ids):
            raise ValueError("node identifiers must be distinct")
        self.ids = list(ids)
        self._order = sorted(range(len(ids)), key=lambda i: ids[i])
        self._sorted = [ids[i] for i in self._order]
        self.fingers = [[self.successor((ids[n] + (1 << k)) % RING) for k in range(RING_BITS)]
                        for n in range(len(ids))]

    @classmethod
    def of_names(cls, names: list[str]) -> ChordRing:
        return cls([identifier(name) for name in names])

    @classmethod
    def evenly_spread(cls, nodes: int) -> ChordRing:
        return cls([i * (RING // nodes) for i in range(nodes)])

    def successor(self, key: int) -> int:
        """The node whose identifier is the first at or after ``key`` on the ring."""
        at = bisect.bisect_left(self._sorted, key % RING)
        return self._order[at % len(self._order)]

    def _between(self, x: int, low: int, high: int) -> bool:
        """x in the ring interval (low, high]."""
        return 0 < (x - low) % RING <= (high - low) % RING if low != high else True

    def route(self, entry: int, key: int) -> list[int]:
        """The nodes a lookup of ``key`` entering at ``entry`` visits, entry first and the
        key's home last; its hops are ``len(path) - 1``."""
        path = [entry]
        node = entry
        while not self._between(key, self._predecessor_id(node), self.ids[node]):
            successor = self.fingers[node][0]
            if self._between(key, self.ids[node], self.ids[successor]):
                node = successor
            else:
                node = next((f for f in reversed(self.fingers[node])
                             if self._between(self.ids[f], self.ids[node], key - 1)), successor)
            path.append(node)
        return path

    def _predecessor_id(self, node: int) -> int:
        at = self._sorted.index(self.ids[node])
        return self._sorted[at - 1]
