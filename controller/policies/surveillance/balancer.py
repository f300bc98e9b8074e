"""surveillance's balancers: which node server a client's request for a camera goes to."""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from controller.policies.surveillance.load import HEAVY_ABOVE, LIGHT_BELOW, Queue, queue_of


@dataclass
class Node:
    """A node server as the balancer sees it."""

    name: str
    weight: float
    load: float = 0.0  # L last reported
    tasks: int = 0  # T: client sessions assigned
    alive: bool = True


@dataclass(frozen=True)
class Choice:
    """Serve the request on ``node``; ``feeder`` is the chain node that will cascade the stream
    to it when ``node`` is a new helper (None: ``node`` is already in the chain, or becomes the
    origin of a camera not yet streaming)."""

    node: str
    feeder: str | None = None


@dataclass(frozen=True)
class Refusal:
    reason: str


@dataclass
class Cluster:
    """The balancer's bookkeeping (docs/schemes/surveillance.md). ``light_below`` and
    ``heavy_above`` are the queue thresholds."""

    nodes: dict[str, Node]
    light_below: float = LIGHT_BELOW
    heavy_above: float = HEAVY_ABOVE
    chains: dict[str, list[str]] = field(default_factory=dict)
    clients: Counter = field(default_factory=Counter)  # (camera, node) -> sessions

    @classmethod
    def of(cls, weights: dict[str, float], **thresholds: float) -> Cluster:
        return cls({name: Node(name, weight) for name, weight in sorted(weights.items())},
                   **thresholds)

    def queue(self, name: str) -> Queue:
        return queue_of(self.nodes[name].load, self.light_below, self.heavy_above)

    def alive(self) -> list[Node]:
        return [node for node in self.nodes.values() if node.alive]

    def chain(self, camera: str) -> list[str]:
        return self.chains.get(camera, [])

    def feeder_of(self, camera: str, node: str) -> str | None:
        """Who sends ``camera``'s stream to ``node``: the node before it, None for the origin."""
        chain = self.chain(camera)
        position = chain.index(node)
        return chain[position - 1] if position else None

    def report(self, name: str, load: float) -> Queue:
        """Node ``name`` reported ``load``; returns its queue now."""
        self.nodes[name].load = load
        return self.queue(name)

    def assign(self, camera: str, choice: Choice) -> list[str]:
        """Carry out ``choice`` for one client of ``camera``; returns the chain from the origin
        to the serving node (the cascade the stream takes)."""
        chain = self.chains.setdefault(camera, [])
        if choice.node not in chain:
            if chain and choice.feeder != chain[-1]:
                raise ValueError(f"a helper of {camera!r} is fed by the chain's tail "
                                 f"{chain[-1]!r}, not {choice.feeder!r}")
            chain.append(choice.node)
        self.nodes[choice.node].tasks += 1
        self.clients[camera, choice.node] += 1
        return chain[:chain.index(choice.node) + 1]

    def release(self, camera: str, node: str) -> None:
        """One client of ``camera`` on ``node`` left; collapse the chain's empty tail."""
        if self.clients[camera, node] <= 0:
            raise ValueError(f"{node!r} serves no client of {camera!r}")
        self.clients[camera, node] -= 1
        self.nodes[node].tasks -= 1
        chain = self.chains[camera]
        while chain and self.clients[camera, chain[-1]] == 0:
            del self.clients[camera, chain.pop()]
        if not chain:
            del self.chains[camera]

    def remove(self, name: str) -> list[tuple[str, str]]:
        """Node ``name`` died (a failed health check): it takes no more work, and every client
        it served or fed through a cascade loses its stream. Returns those clients as
        (camera, node) pairs, one per session, already released, for re-deciding."""
        self.nodes[name].alive = False
        orphans = []
        for camera, chain in list(self.chains.items()):
            if name not in chain:
                continue
            for node in chain[chain.index(name):]:
                orphans += [(camera, node)] * self.clients[camera, node]
                self.nodes[node].tasks -= self.clients[camera, node]
                del self.clients[camera, node]
            del chain[chain.index(name):]
            while chain and self.clients[camera, chain[-1]] == 0:
                del self.clients[camera, chain.pop()]
            if not chain:
                del self.chains[camera]
        return orphans

    def stop(self, camera: str) -> dict[str, int]:
        """``camera`` stopped streaming: every client of it loses the stream and its chain is
        gone. Returns the sessions that ended, per node of the chain (relays with 0)."""
        ended = {}
        for node in self.chains.pop(camera, []):
            ended[node] = self.clients.pop((camera, node), 0)
            self.nodes[node].tasks -= ended[node]
        return ended

    def depth(self, camera: str, node: str) -> int:
        """Cascade hops from the origin to ``node`` (0 at the origin)."""
        return self.chain(camera).index(node)


def _ratio(node: Node) -> float:
    return node.tasks / node.weight if node.weight > 0 else float("inf")


def weighted_least_tasks(nodes: list[Node]) -> Node:
    """Node k with minimal T(k)/W(k) (eq. 1); ties to the first name."""
    return min(nodes, key=lambda node: (_ratio(node), node.name))


class Balancer:
    """Base of the balancers: stream sharing for cameras already streaming, :meth:`pick` for
    the others. ``active_notification``: whether the balancer re-queues a node on a report
    sent within a period (only ``sv_improved``; the others read periodic reports)."""

    name: str
    active_notification = False

    def choose(self, camera: str, cluster: Cluster) -> Choice | Refusal:
        chain = cluster.chain(camera)
        if chain:
            return Choice(chain[0])
        candidates = cluster.alive()
        if not candidates:
            return Refusal("no node server is alive")
        return self.pick(camera, candidates, cluster)

    def pick(self, camera: str, candidates: list[Node], cluster: Cluster) -> Choice | Refusal:
        """The node for ``camera``, not yet streaming, among the live ``candidates`` (name
        order)."""
        raise NotImplementedError


class _Cursor:
    """Takes turns over nodes by name, remembering the last one given a task, so nodes
    joining or leaving do not reset the turn."""

    def __init__(self) -> None:
        self.last = ""

    def next(self, nodes: list[Node]) -> Node:
        node = next((node for node in nodes if node.name > self.last), nodes[0])
        self.last = node.name
        return node


class _SmoothWeighted:
    """Smooth weighted round robin (nginx's): each turn every node gains its weight, the
    richest is chosen and pays the total back; over any window each node gets its share, spread
    out instead of in bursts."""

    def __init__(self) -> None:
        self.credit: dict[str, float] = {}

    def next(self, nodes: list[Node]) -> Node:
        for node in nodes:
            self.credit[node.name] = self.credit.get(node.name, 0.0) + node.weight
        chosen = min(nodes, key=lambda node: (-self.credit[node.name], node.name))
        self.credit[chosen.name] -= sum(node.weight for node in nodes)
        return chosen


class RoundRobin(Balancer):
    name = "sv_rr"

    def __init__(self) -> None:
        self._cursor = _Cursor()

    def pick(self, camera, candidates, cluster):
        return Choice(self._cursor.next(candidates).name)


class WeightedRoundRobin(Balancer):
    """Round robin in proportion to the static weights W."""

    name = "sv_wrr"

    def __init__(self) -> None:
        self._turns = _SmoothWeighted()

    def pick(self, camera, candidates, cluster):
        return Choice(self._turns.next(candidates).name)


class LeastConnections(Balancer):
    """Fewest client sessions; ties to the first name."""

    name = "sv_lc"

    def pick(self, camera, candidates, cluster):
        return Choice(min(candidates, key=lambda node: (node.tasks, node.name)).name)


class WeightedLeastConnections(Balancer):
    """IPVS ``wlc``: fewest sessions per weight (IPVS counts active connections x 256 plus
    inactive ones; a video session is one long active connection, so this is T/W). It is the
    improved algorithm's weighted least tasks without queues or cooperation."""

    name = "sv_wlc"

    def pick(self, camera, candidates, cluster):
        return Choice(weighted_least_tasks(candidates).name)


class Hashing(Balancer):
    """The camera's name hashed (CRC-32) onto the live nodes in name order: a camera always
    lands on the same node while the set of nodes stays."""

    name = "sv_hashing"

    def pick(self, camera, candidates, cluster):
        return Choice(candidates[zlib.crc32(camera.encode()) % len(candidates)].name)


class PowerOfTwoChoices(Balancer):
    """Two distinct live nodes drawn at random, the one with fewer sessions per weight taken
    (as Envoy's weighted least-request does); ``seed`` seeds the draws."""

    name = "sv_p2c"

    def __init__(self, seed: int = 0) -> None:
        self._random = np.random.default_rng(seed)

    def pick(self, camera, candidates, cluster):
        if len(candidates) == 1:
            return Choice(candidates[0].name)
        drawn = [candidates[i] for i in self._random.choice(len(candidates), 2, replace=False)]
        return Choice(weighted_least_tasks(drawn).name)


class _QueuedFeedback(Balancer):
    """The original periodic dynamic-feedback algorithm: nodes in queues by the load they
    reported last period; a new camera goes to a node of the light queue, of the moderate one
    when none is light, nowhere when all are heavy (:meth:`pick_in_queue` says which). A camera
    already streaming goes to its origin whatever its queue. The paper words the choice in the
    light queue two ways, hence two readings."""

    def pick(self, camera, candidates, cluster):
        for queue in (Queue.LIGHT, Queue.MODERATE):
            members = [node for node in candidates if cluster.queue(node.name) == queue]
            if members:
                return Choice(self.pick_in_queue(members).name)
        return Refusal("every live node server is heavy")

    def pick_in_queue(self, members: list[Node]) -> Node:
        """The node for a new camera among one queue's ``members`` (name order)."""
        raise NotImplementedError


class DynamicFeedback(_QueuedFeedback):
    """The original dynamic feedback, weighted-round-robin reading: weighted round robin
    within the queue (the paper's shortcoming 2: "在輕載隊(duì)列中使用加權(quán)輪詢算法")."""

    name = "sv_feedback"

    def __init__(self) -> None:
        self._turns = _SmoothWeighted()

    def pick_in_queue(self, members):
        return self._turns.next(members)


class GreedyFeedback(_QueuedFeedback):
    """The original dynamic feedback, greedy reading: the node of the largest weight in the
    queue (the paper's section 1.2: "優(yōu)先分配到輕載隊(duì)列中權(quán)值較大的節(jié)點(diǎn)"); ties to
    the first name. It fills the strongest node until that one leaves the light queue."""

    name = "sv_feedback_greedy"

    def pick_in_queue(self, members):
        return min(members, key=lambda node: (-node.weight, node.name))


class ImprovedFeedback(Balancer):
    """The improved dynamic-feedback algorithm of the paper:

    * task classification: a camera not yet streaming goes by weighted least tasks (min T/W)
      among the light nodes, the moderate ones when none is light;
    * node cooperation: for a camera already streaming, the first light node of its chain
      (the origin while it is light); when none is, a new helper chosen by weighted least tasks
      among the light nodes outside the chain, fed by a cascade from the chain's tail (a
      multi-level cascade when the tail is itself a helper), at most ``max_depth`` hops from
      the origin; when no light node is left, the moderate node of the chain with the least
      weighted tasks, then a moderate helper;
    * active notification: a node that turns heavy (or, in the paper's other wording, leaves
      the light queue) within a period reports at once and is re-queued
      (``active_notification``; the simulation's ``notify_when`` says which).

    It never gives a task to a node in the heavy queue: with every candidate heavy it refuses.
    """

    name = "sv_improved"
    active_notification = True

    def __init__(self, max_depth: int = 4) -> None:
        self.max_depth = max_depth

    def choose(self, camera: str, cluster: Cluster) -> Choice | Refusal:
        chain = cluster.chain(camera)
        live = cluster.alive()
        for queue in (Queue.LIGHT, Queue.MODERATE):
            members = [node for node in live if cluster.queue(node.name) == queue]
            if not chain:
                if members:
                    return Choice(weighted_least_tasks(members).name)
                continue
            serving = [cluster.nodes[name] for name in chain if cluster.queue(name) == queue]
            if serving:
                # A light origin first, so that helpers empty and the cascade collapses.
                return Choice(serving[0].name if queue == Queue.LIGHT
                              else weighted_least_tasks(serving).name)
            helpers = [node for node in members if node.name not in chain]
            if helpers and len(chain) <= self.max_depth:
                return Choice(weighted_least_tasks(helpers).name, feeder=chain[-1])
        if not live:
            return Refusal("no node server is alive")
        return Refusal(f"every node server that could serve {camera!r} is heavy"
                       + (f" or the cascade is {self.max_depth} deep" if chain else ""))


class ImprovedPeriodicFeedback(ImprovedFeedback):
    """The improved algorithm without active notification: the balancer re-queues a node only
    on its periodic report (the ablation of the paper's fourth improvement)."""

    name = "sv_improved_periodic"
    active_notification = False


BALANCERS = {balancer.name: balancer for balancer in (
    RoundRobin, WeightedRoundRobin, LeastConnections, WeightedLeastConnections, Hashing,
    PowerOfTwoChoices, DynamicFeedback, GreedyFeedback, ImprovedFeedback,
    ImprovedPeriodicFeedback)}


def make(name: str, max_depth: int = 4, seed: int = 0) -> Balancer:
    """A fresh balancer ``name``: ``max_depth`` bounds the improved ones' cascades, ``seed``
    seeds p2c's draws."""
    kind = BALANCERS[name]
    if issubclass(kind, PowerOfTwoChoices):
        return kind(seed)
    if issubclass(kind, ImprovedFeedback):
        return kind(max_depth)
    return kind()
