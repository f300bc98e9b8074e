"""Bloom filters as the paper built them, and their synchronisation."""

from __future__ import annotations

import hashlib
import zlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

HASHES = 4
NODE_FILTER_BYTES = 5_000


def bit_positions(urls: str | list[str], bits: int) -> np.ndarray:
    """The four bit positions of ``url`` (or an array of them, one row per URL of a list): its
    MD5 split into four big-endian 32-bit words, each mod ``bits``."""
    single = isinstance(urls, str)
    digests = b"".join(hashlib.md5(url.encode()).digest() for url in ([urls] if single else urls))
    words = np.frombuffer(digests, dtype=">u4").reshape(-1, HASHES)
    positions = (words % bits).astype(np.int64)
    return positions[0] if single else positions


class CountingFilter:
    """A node's exact filter of its own cache: a count per bit, so removals are exact; the
    bits are the counts that are not zero."""

    def __init__(self, bits: int = NODE_FILTER_BYTES * 8):
        self.bits = bits
        self.counts = np.zeros(bits, dtype=np.int32)

    def add(self, positions: np.ndarray) -> None:
        np.add.at(self.counts, positions, 1)

    def remove(self, positions: np.ndarray) -> None:
        np.subtract.at(self.counts, positions, 1)

    def bitmap(self) -> np.ndarray:
        return self.counts > 0


class FilteredCache:
    """A node's LRU cache of item numbers, at most ``capacity``, and the exact counting filter
    of what it holds; ``positions[item]`` are an item's bit positions."""

    def __init__(self, capacity: int, positions: np.ndarray, bits: int = NODE_FILTER_BYTES * 8):
        self.capacity, self.positions = capacity, positions
        self.items: OrderedDict[int, None] = OrderedDict()
        self.filter = CountingFilter(bits)

    def __contains__(self, item: int) -> bool:
        return item in self.items

    def __len__(self) -> int:
        return len(self.items)

    def hit(self, item: int) -> bool:
        """Whether ``item`` is cached; a hit makes it the most recently used."""
        if item in self.items:
            self.items.move_to_end(item)
            return True
        return False

    def insert(self, item: int) -> None:
        """Cache ``item``, evicting the least recently used when full."""
        if self.capacity == 0 or item in self.items:
            return
        self.items[item] = None
        self.filter.add(self.positions[item])
        if len(self.items) > self.capacity:
            evicted, _ = self.items.popitem(last=False)
            self.filter.remove(self.positions[evicted])


class GlobalFilter:
    """The global filter one node holds: every node's filter as of its last synchronisation."""

    def __init__(self, nodes: int, bits: int = NODE_FILTER_BYTES * 8):
        self.bits = bits
        self.slices = np.zeros((nodes, bits), dtype=bool)

    def contains(self, home: int, positions: np.ndarray) -> bool:
        """Whether the filter says ``home`` caches the key with these bit positions."""
        return bool(self.slices[home, positions].all())


@dataclass
class SyncLog:
    """Synchronisation traffic: messages, bytes sent as compressed deltas, and the bytes whole
    filters would have taken."""

    messages: int = 0
    delta_bytes: int = 0
    full_bytes: int = 0

    def add(self, delta: int, full: int) -> None:
        self.messages += 1
        self.delta_bytes += delta
        self.full_bytes += full

    @property
    def saving(self) -> float:
        """The share of bytes the deltas save against whole filters."""
        return 1 - self.delta_bytes / self.full_bytes if self.full_bytes else 0.0


def delta_update(previous: np.ndarray, current: np.ndarray) -> bytes:
    """The synchronisation message from a filter's previous bitmap to its current one: the
    changed bits (XOR), packed and deflate-compressed."""
    return zlib.compress(np.packbits(previous ^ current).tobytes(), 6)


def apply_update(previous: np.ndarray, message: bytes) -> np.ndarray:
    """The bitmap a receiver rebuilds from its copy and a :func:`delta_update` message."""
    changed = np.unpackbits(np.frombuffer(zlib.decompress(message), dtype=np.uint8),
                            count=previous.size).astype(bool)
    return previous ^ changed
