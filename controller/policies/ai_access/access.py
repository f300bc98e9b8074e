"""ai_access's access algorithms: which access server and receive port takes each new AI data
flow."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from controller.policies.ai_access.resources import FlowDemand, LoadWeights, ServerLoad
from edgebed import clock


@dataclass
class Room:
    """What one server has left while an allocation runs: per port bandwidth and flows, memory,
    and the resources in use (for the load degree)."""

    load: ServerLoad
    port_left: dict[str, float]
    port_flows: dict[str, int]
    memory_left: float
    bandwidth_used: float
    memory_used: float

    @classmethod
    def of(cls, load: ServerLoad) -> "Room":
        return cls(load, {port.name: load.port_left(port) for port in load.spec.ports},
                   {port.name: load.flows.get(port.name, 0) for port in load.spec.ports},
                   load.memory_left, sum(load.bandwidth.values()), sum(load.memory.values()))

    @property
    def name(self) -> str:
        return self.load.spec.name

    @property
    def connections(self) -> int:
        return sum(self.port_flows.values())

    @property
    def best_port_left(self) -> float:
        return max(self.port_left.values())

    @property
    def bandwidth_left(self) -> float:
        return sum(self.port_left.values())

    def degree(self, weights: LoadWeights) -> float:
        spec = self.load.spec
        return weights.degree(self.load.cpu, min(1.0, self.memory_used / spec.memory),
                              min(1.0, self.bandwidth_used / spec.rate))

    def port_for(self, flow: FlowDemand, by_connections: bool = False) -> str | None:
        """The port that takes ``flow``: the one with most bandwidth left, or with fewest flows
        (ties: most bandwidth left, then name); None when the memory or no port has room."""
        if flow.memory > self.memory_left:
            return None
        fitting = [name for name, left in self.port_left.items() if left >= flow.bandwidth]
        if not fitting:
            return None
        if by_connections:
            return min(fitting, key=lambda name: (self.port_flows[name], -self.port_left[name],
                                                  name))
        return max(fitting, key=lambda name: (self.port_left[name], name))

    def take(self, flow: FlowDemand, port: str) -> None:
        self.port_left[port] -= flow.bandwidth
        self.port_flows[port] += 1
        self.memory_left -= flow.memory
        self.bandwidth_used += flow.bandwidth
        self.memory_used += flow.memory


@dataclass
class Allocation:
    """Where flows went: flow -> (server, port); rejected flows with the reason; ``rounds``:
    matchings computed (ADGA) or choices made one after the other (the others).

    ``granted`` says when each placed flow's answer was known, in seconds of computation from
    the allocation's start (the end of its matching round, or of its own choice): the
    model-level access response time of a batch of requests."""

    placed: dict[str, tuple[str, str]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    rounds: int = 0
    granted: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=clock.real_elapsed, repr=False)

    def place(self, flow: FlowDemand, room: "Room", port: str) -> None:
        room.take(flow, port)
        self.placed[flow.flow] = (room.name, port)

    def stamp(self, flows: Iterable[str]) -> None:
        """The answers for ``flows`` are known now."""
        now = clock.real_elapsed() - self.started
        for flow in flows:
            self.granted[flow] = now


def rooms_of(loads: Iterable[ServerLoad]) -> list[Room]:
    return [Room.of(load) for load in sorted(loads, key=lambda load: load.spec.name)]


def rejection_reason(flow: FlowDemand) -> str:
    return (f"no access server has a port with {flow.bandwidth:g} bit/s and {flow.memory:g} "
            f"bytes of memory left")


def _reject_rest(allocation: Allocation, flows: Iterable[FlowDemand]) -> Allocation:
    for flow in flows:
        allocation.rejected[flow.flow] = rejection_reason(flow)
    return allocation


def maximum_matching(edges: np.ndarray) -> np.ndarray:
    """For a boolean matrix ``edges`` (rows x columns, an edge where True), a maximum matching:
    for each row the column it is matched to, -1 when unmatched (Hopcroft-Karp).

    Only the first ``columns`` neighbours of each column (in row order, so earlier requests
    first) go to the solver. That loses nothing: in a maximum matching, a matched row that was
    left out can give its column to one of the column's kept neighbours that is unmatched (of
    ``columns`` kept ones at most ``columns - 1`` are matched elsewhere), so some maximum
    matching uses kept rows only. With many more flows than servers it makes each round's graph
    ``columns`` rows high instead of all of them."""
    result = np.full(edges.shape[0], -1)
    if not edges.size or not edges.any():
        return result
    columns = edges.shape[1]
    kept = np.unique(np.concatenate([np.flatnonzero(column)[:columns]
                                     for column in np.ascontiguousarray(edges.T)]))
    result[kept] = maximum_bipartite_matching(csr_matrix(edges[kept]), perm_type="column")
    return result


def _edges(rooms: Sequence[Room], bandwidth: np.ndarray, best_port: np.ndarray | None,
           memory: np.ndarray, total_bandwidth: np.ndarray | None = None) -> np.ndarray:
    """Rows (flows or groups) x rooms: True where the room passes the capacity test."""
    port_left = np.array([room.best_port_left for room in rooms])
    memory_left = np.array([room.memory_left for room in rooms])
    edges = ((best_port if best_port is not None else bandwidth)[:, None] <= port_left[None, :]) \
        & (memory[:, None] <= memory_left[None, :])
    if total_bandwidth is not None:
        total_left = np.array([room.bandwidth_left for room in rooms])
        edges &= total_bandwidth[:, None] <= total_left[None, :]
    return edges


def round_matching(rooms: Sequence[Room], bandwidth: np.ndarray, memory: np.ndarray
                   ) -> np.ndarray:
    """One ADGA round: a maximum matching of the waiting flows (``bandwidth``, ``memory``, in
    request order) to ``rooms``, as :func:`maximum_matching` returns it.

    Edges are tested for a prefix of the flows only, grown until each room has ``len(rooms)``
    neighbours in it or it holds every flow: :func:`maximum_matching` looks no further."""
    size = 4 * len(rooms)
    while True:
        edges = _edges(rooms, bandwidth[:size], None, memory[:size])
        if size >= len(bandwidth) or (edges.sum(axis=0) >= len(rooms)).all():
            break
        size *= 4
    matched = np.full(len(bandwidth), -1)
    matched[:len(edges)] = maximum_matching(edges)
    return matched


def adga(flows: Sequence[FlowDemand], loads: Iterable[ServerLoad]) -> Allocation:
    """ADGA: rounds of maximum matching of the waiting flows to the servers
    (docs/schemes/ai_access.md)."""
    rooms = rooms_of(loads)
    allocation = Allocation()
    bandwidth = np.array([flow.bandwidth for flow in flows], dtype=float)
    memory = np.array([flow.memory for flow in flows], dtype=float)
    waiting = np.arange(len(flows))  # indexes into flows, in request order
    while waiting.size and rooms:
        matched = round_matching(rooms, bandwidth[waiting], memory[waiting])
        rows = np.flatnonzero(matched >= 0)
        if not rows.size:
            break
        allocation.rounds += 1
        for row in rows:
            flow, room = flows[waiting[row]], rooms[matched[row]]
            allocation.place(flow, room, room.port_for(flow))  # the edge says a port takes it
        allocation.stamp(flows[waiting[row]].flow for row in rows)
        waiting = np.delete(waiting, rows)
    return _reject_rest(allocation, (flows[index] for index in waiting))


def group_size(waiting: int, servers: int) -> int:
    """The average-allocation rule: K = ceil(m / n), one equal share of the m waiting flows per
    server that can take one (at least 1)."""
    return max(1, math.ceil(waiting / servers)) if servers else 1


def deal_groups(flows: Sequence[FlowDemand], size: int) -> list[list[FlowDemand]]:
    """``flows`` cut into ceil(m / size) groups: sorted by bandwidth (largest first, then by
    name) and dealt in a snake order, so the groups' demands come out close."""
    count = math.ceil(len(flows) / size)
    groups: list[list[FlowDemand]] = [[] for _ in range(count)]
    ordered = sorted(flows, key=lambda flow: (-flow.bandwidth, -flow.memory, flow.flow))
    for index, flow in enumerate(ordered):
        turn, position = divmod(index, count)
        groups[position if turn % 2 == 0 else count - 1 - position].append(flow)
    return groups


def grouped_adga(flows: Sequence[FlowDemand], loads: Iterable[ServerLoad]) -> Allocation:
    """Improved ADGA: groups of K matched to servers (docs/schemes/ai_access.md)."""
    rooms = rooms_of(loads)
    allocation = Allocation()
    waiting = list(flows)
    halved: int | None = None  # K after a round that placed nothing
    while waiting and rooms:
        smallest = min(flow.bandwidth for flow in waiting)
        smallest_memory = min(flow.memory for flow in waiting)
        able = sum(room.best_port_left >= smallest and room.memory_left >= smallest_memory
                   for room in rooms)
        if not able:
            break
        size = halved if halved is not None else group_size(len(waiting), able)
        groups = deal_groups(waiting, size)
        edges = _edges(rooms, np.array([sum(f.bandwidth for f in group) for group in groups]),
                       np.array([group[0].bandwidth for group in groups]),
                       np.array([sum(f.memory for f in group) for group in groups]),
                       total_bandwidth=np.array([sum(f.bandwidth for f in group)
                                                 for group in groups]))
        matched = maximum_matching(edges)
        allocation.rounds += 1
        still, placed = [], []
        for group, column in zip(groups, matched):
            if column < 0:
                still.extend(group)
                continue
            room = rooms[column]
            for flow in group:  # largest first: dealt groups keep the sorted order
                port = room.port_for(flow)
                if port is None:
                    still.append(flow)
                    continue
                allocation.place(flow, room, port)
                placed.append(flow.flow)
        allocation.stamp(placed)
        if not placed:
            if size == 1:
                break
            halved = max(1, size // 2)
        else:
            halved = None
        waiting = still
    return _reject_rest(allocation, waiting)


def _by_key(flows: Sequence[FlowDemand], loads: Iterable[ServerLoad],
            key: Callable[[Room], tuple]) -> Allocation:
    """Flows in order, each to the room with the least ``key`` among those that take it (a heap
    of rooms; a room's key only grows as it takes flows), on its port with the fewest flows."""
    rooms = rooms_of(loads)
    allocation = Allocation()
    heap = [(key(room), index) for index, room in enumerate(rooms)]
    heapq.heapify(heap)
    for flow in flows:
        allocation.rounds += 1
        passed = []
        while heap:
            entry = heapq.heappop(heap)
            room = rooms[entry[1]]
            port = room.port_for(flow, by_connections=True)
            if port is None:
                passed.append(entry)
                continue
            allocation.place(flow, room, port)
            allocation.stamp((flow.flow,))
            heapq.heappush(heap, (key(room), entry[1]))
            break
        else:
            allocation.rejected[flow.flow] = rejection_reason(flow)
        for entry in passed:
            heapq.heappush(heap, entry)
    return allocation


def least_connections(flows: Sequence[FlowDemand], loads: Iterable[ServerLoad]) -> Allocation:
    """The paper's least connections: each flow to the server with the fewest flows (ties:
    name), on its port with the fewest flows, whatever the server has left. Resources are not
    looked at, so it rejects only when there is no server."""
    rooms = rooms_of(loads)
    allocation = Allocation()
    heap = [(room.connections, room.name, index) for index, room in enumerate(rooms)]
    heapq.heapify(heap)
    for flow in flows:
        if not heap:
            allocation.rejected[flow.flow] = rejection_reason(flow)
            continue
        allocation.rounds += 1
        _, _, index = heapq.heappop(heap)
        room = rooms[index]
        allocation.place(flow, room, min(room.port_flows, key=lambda name: (
            room.port_flows[name], -room.port_left[name], name)))
        allocation.stamp((flow.flow,))
        heapq.heappush(heap, (room.connections, room.name, index))
    return allocation


def capacity_least_connections(flows: Sequence[FlowDemand], loads: Iterable[ServerLoad]
                               ) -> Allocation:
    """Least connections with ADGA's capacity test: the server with the fewest flows (ties:
    name) among those that take the flow."""
    return _by_key(flows, loads, lambda room: (room.connections, room.name))


def weighted_least_connections(flows: Sequence[FlowDemand], loads: Iterable[ServerLoad]
                               ) -> Allocation:
    """IPVS wlc: the least flows per bit/s of total port rate (ties: name)."""
    return _by_key(flows, loads,
                   lambda room: (room.connections / room.load.spec.rate, room.name))


def power_of_two_choices(flows: Sequence[FlowDemand], loads: Iterable[ServerLoad],
                         weights: LoadWeights, rng: random.Random) -> Allocation:
    """Two servers drawn at random among those that take the flow; the lower load degree (ties:
    name) takes it. A single fitting server takes it alone."""
    rooms = rooms_of(loads)
    allocation = Allocation()
    for flow in flows:
        allocation.rounds += 1
        # Draw first, check after: a scan of every room per flow is what p2c exists to avoid.
        chosen: list[Room] = []
        for _ in range(4 if rooms else 0):
            room = rooms[rng.randrange(len(rooms))]
            if all(room is not other for other in chosen) and room.port_for(flow) is not None:
                chosen.append(room)
                if len(chosen) == 2:
                    break
        if len(chosen) < 2:
            fitting = [room for room in rooms if room.port_for(flow) is not None]
            chosen = rng.sample(fitting, min(2, len(fitting)))
        if not chosen:
            allocation.rejected[flow.flow] = rejection_reason(flow)
            continue
        room = min(chosen, key=lambda room: (room.degree(weights), room.name))
        allocation.place(flow, room, room.port_for(flow))
        allocation.stamp((flow.flow,))
    return allocation


Allocator = Callable[[Sequence[FlowDemand], Iterable[ServerLoad], LoadWeights, random.Random],
                     Allocation]

# Every access algorithm that keeps within the servers' capacity, by its policy name, called
# the same way: the controller's policies.
ALLOCATORS: dict[str, Allocator] = {
    "ai_adga": lambda flows, loads, weights, rng: adga(flows, loads),
    "ai_adga_grouped": lambda flows, loads, weights, rng: grouped_adga(flows, loads),
    "ai_lc_capacity": lambda flows, loads, weights, rng: capacity_least_connections(flows,
                                                                                    loads),
    "ai_wlc": lambda flows, loads, weights, rng: weighted_least_connections(flows, loads),
    "ai_p2c": power_of_two_choices,
}

# With the paper's least connections, which places beyond capacity: every access algorithm,
# the model's and the controller's policies (``ai_lc`` says it does not keep within capacity).
MODEL_ALLOCATORS: dict[str, Allocator] = {
    "ai_lc": lambda flows, loads, weights, rng: least_connections(flows, loads),
    **ALLOCATORS,
}
