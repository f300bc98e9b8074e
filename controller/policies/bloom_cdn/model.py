"""The queueing model of bloom_cdn (Yu, Jin, Yin: Bloom-filter content routing in a media
cloud), rebuilt: the three routing strategies of the paper and an adaptive one as open Jackson
networks of M/M/1 queues, their stability, and the filter-judged hit probability."""

from __future__ import annotations

import itertools
import math
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Literal

import numpy as np

STRATEGIES = ("linear", "parallel", "cut_through")
# The adaptive switch's DC utilisation thresholds: the upper one where the model's cut-through
# and parallel delays cross in the high-traffic setting (0.875), the lower one for hysteresis.
ADAPTIVE_HIGH, ADAPTIVE_LOW = 0.875, 0.7
# The routing sojourns the "four_sojourns" miss-path reading adds to a filter-judged miss: the
# count that puts the paper's two 0 %-hit figures within a point of the default reading's
# queues (fitted to them, not derived from the text).
MISS_ROUTING_SOJOURNS = 4


@dataclass(frozen=True)
class Setting:
    """One parameter set of the model: total request rate ``arrival_rate`` (lambda, req/s),
    per-node routing, lookup and response rates (mu_t, mu_l, mu_r), the DC's fetch rate (mu_o),
    ``nodes`` (N), the DC's output bandwidth (bytes/s) and the mean size of a missed item
    (bytes), which with the miss rate gives the DC's output."""

    arrival_rate: float
    routing_rate: float
    lookup_rate: float
    fetch_rate: float
    response_rate: float
    nodes: int = 50
    dc_bandwidth: float = math.inf
    miss_item_bytes: float = 0.0
    miss_item_bytes_square: float | None = None  # E[size^2] of DC-sent items; None: all equal
    # Each node's share of the lookups (its home items' popularity) and of the routing
    # services; None: 1/N each, the paper's homogeneous nodes.
    home_shares: tuple[float, ...] | None = None
    routing_shares: tuple[float, ...] | None = None
    hops: float | None = None  # mean routing hops when known (a simulated ring's); else the reading's


# The paper's theory parameters (section 3.2). The high-traffic request rate is not given; the
# simulation's 100 req/s is used. Item sizes are the simulation's (bloom_cdn.workload).
LOW_TRAFFIC = Setting(arrival_rate=100, routing_rate=300, lookup_rate=500, fetch_rate=1200,
                      response_rate=60, dc_bandwidth=100e6)
HIGH_TRAFFIC = Setting(arrival_rate=100, routing_rate=100, lookup_rate=500, fetch_rate=260,
                       response_rate=8, dc_bandwidth=100e6)


@dataclass(frozen=True)
class Reading:
    """How the model reads what the paper leaves open; see docs/schemes/bloom_cdn.md."""

    node_queues: Literal["per_node", "aggregate", "pooled"] = "per_node"
    routing_load: Literal["transit", "entry"] = "transit"
    hops: Literal["ceil_log2", "chord_mean"] = "ceil_log2"
    delay: Literal["critical_path", "all_visits"] = "critical_path"
    cut_through_fetch: Literal["once", "twice"] = "once"
    dc_link: Literal["queue", "ignored"] = "queue"
    # A filter-judged miss waits for MISS_ROUTING_SOJOURNS per-node routing sojourns as well
    # (delay only: the routing queues' load is the other fields' reading).
    miss_routing: Literal["none", "four_sojourns"] = "none"

    def hop_count(self, nodes: int) -> float:
        return math.ceil(math.log2(nodes)) if self.hops == "ceil_log2" else math.log2(nodes) / 2

    @property
    def label(self) -> str:
        return ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))


# The miss-path reading the paper's 0 %-hit figures suggest: the default with four routing
# sojourns on each filter-judged miss.
MISS_PATH_READING = Reading(miss_routing="four_sojourns")


def readings() -> Iterator[Reading]:
    """Every combination of the open points."""
    hints = typing.get_type_hints(Reading)
    choices = [typing.get_args(hints[f.name]) for f in fields(Reading)]
    for combination in itertools.product(*choices):
        yield Reading(*combination)


@dataclass(frozen=True)
class QueueLoad:
    """One queue of the network: its arrival rate, service rate, utilisation and mean
    sojourn (inf when unstable), and how many times per request, on average, it sits on the
    path to the user (counted in the delay)."""

    name: str
    arrival_rate: float
    service_rate: float
    critical_visits: float
    node: int | None = None  # per-node queues: whose

    @property
    def utilisation(self) -> float:
        return self.arrival_rate / self.service_rate

    @property
    def sojourn(self) -> float:
        if self.arrival_rate >= self.service_rate:
            return math.inf
        return 1.0 / (self.service_rate - self.arrival_rate)


@dataclass(frozen=True)
class Result:
    """The model's answer for one strategy at one point: the mean response time (s; inf when
    unstable), the queues, the DC link's utilisation and what makes the setting unstable (empty
    when it is stable)."""

    strategy: str
    mean: float
    queues: tuple[QueueLoad, ...]
    dc_link_utilisation: float
    unstable: tuple[str, ...] = field(default=())

    @property
    def stable(self) -> bool:
        return not self.unstable


@dataclass(frozen=True)
class Classes:
    """The request shares: hit, false positive, false miss, miss (sum 1)."""

    hit: float
    false_positive: float
    false_miss: float
    miss: float

    @staticmethod
    def of(strategy: str, alpha: float, fp: float, fn: float) -> Classes:
        if not 0 <= alpha <= 1:
            raise ValueError(f"hit probability {alpha} is outside [0, 1]")
        if strategy == "linear":
            return Classes(alpha, 0.0, 0.0, 1 - alpha)
        if fn > alpha or fp > 1 - alpha:
            raise ValueError(f"fn {fn} > alpha {alpha} or fp {fp} > 1 - alpha")
        return Classes(alpha - fn, fp, fn, 1 - alpha - fp)


def evaluate(strategy: str, setting: Setting, alpha: float, fp: float = 0.0, fn: float = 0.0,
             reading: Reading = Reading()) -> Result:
    """The mean response time of ``strategy`` (one of :data:`STRATEGIES`) at true hit
    probability ``alpha`` with filter error shares ``fp`` and ``fn``."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; one of {', '.join(STRATEGIES)}")
    shares = Classes.of(strategy, alpha, fp, fn)
    lam, n = setting.arrival_rate, setting.nodes
    hops = reading.hop_count(n) if setting.hops is None else setting.hops
    direct = shares.false_miss + shares.miss  # the strategy's miss path
    via_home = shares.hit + shares.false_positive  # routed, looked up, answered by home
    fetched = shares.false_positive + direct  # DC fetches
    if strategy == "linear":
        critical = {"routing": hops, "lookup": 1.0, "fetch": fetched, "response": 1.0}
        background = {}
        response_load = 1.0
    else:
        # The miss path routes and looks up too, to cache the item at its home node.
        miss_sojourns = MISS_ROUTING_SOJOURNS if reading.miss_routing == "four_sojourns" else 0
        critical = {"routing": hops * via_home + miss_sojourns * direct, "lookup": via_home,
                    "fetch": fetched,
                    "response": via_home + (direct if strategy == "parallel" else 0.0)}
        background = {"routing": hops * direct, "lookup": direct}
        response_load = critical["response"]
        if strategy == "cut_through" and reading.cut_through_fetch == "twice":
            background["fetch"] = direct
    routing_visits = hops if reading.routing_load == "transit" else 1.0
    uniform = np.full(n, 1.0 / n)
    home = uniform if setting.home_shares is None else np.asarray(setting.home_shares)
    routing = uniform if setting.routing_shares is None else np.asarray(setting.routing_shares)
    # Per function: (service rate, [(total load, critical visits per request, node shares)]).
    parallel_direct = direct if strategy == "parallel" else 0.0
    functions = {
        "routing": (setting.routing_rate, [(routing_visits * lam, critical["routing"]
                                            + _also(reading, background, "routing"), routing)]),
        "lookup": (setting.lookup_rate, [(lam, critical["lookup"]
                                          + _also(reading, background, "lookup"), home)]),
        "response": (setting.response_rate,
                     [((response_load - parallel_direct) * lam,
                       critical["response"] - parallel_direct, home),
                      (parallel_direct * lam, parallel_direct, uniform)]),
    }
    queues = []
    for name, (rate, parts) in functions.items():
        if reading.node_queues == "per_node":
            loads = sum(load * shares for load, _, shares in parts)
            visits = sum(visit * shares for _, visit, shares in parts)
            queues += [QueueLoad(name, float(loads[i]), rate, float(visits[i]), i)
                       for i in range(n)]
        else:
            queues.append(QueueLoad(name, sum(load for load, _, _ in parts),
                                    rate * (n if reading.node_queues == "pooled" else 1),
                                    sum(visit for _, visit, _ in parts)))
    queues.append(QueueLoad("fetch", (fetched + background.get("fetch", 0.0)) * lam,
                            setting.fetch_rate, critical["fetch"]))
    copies = fetched + (direct if strategy == "cut_through" else 0.0)
    dc_bytes = lam * copies * setting.miss_item_bytes
    link = dc_bytes / setting.dc_bandwidth
    overloaded = {}
    for q in queues:
        if q.arrival_rate >= q.service_rate:
            overloaded.setdefault(q.name, q)
    unstable = tuple(f"{q.name} queue{'' if q.node is None else f' of node {q.node}'} (load "
                     f"{q.arrival_rate:.4g} >= rate {q.service_rate:.4g})"
                     for q in overloaded.values())
    if link >= 1:
        unstable += (f"DC link ({dc_bytes / 1e6:.4g} MB/s >= {setting.dc_bandwidth / 1e6:.4g})",)
    mean = math.inf if unstable else sum(q.critical_visits * q.sojourn for q in queues
                                         if q.critical_visits)
    if not unstable and reading.dc_link == "queue" and setting.miss_item_bytes and fetched:
        # Each DC-served request's own copy; cut-through's misses send two back to back.
        batch_square = (shares.false_positive + (4 if strategy == "cut_through" else 1) * direct)
        mean += fetched * _link_sojourn(setting, lam * fetched, batch_square / fetched,
                                        lam * copies)
    return Result(strategy, mean, tuple(queues), link, unstable)


def _also(reading: Reading, background: dict[str, float], name: str) -> float:
    """The background visits that count as delay in ``reading``."""
    return background.get(name, 0.0) if reading.delay == "all_visits" else 0.0


def _link_sojourn(setting: Setting, batch_rate: float, batch_square: float,
                  copies_rate: float) -> float:
    """The DC output link as an M/G/1 FIFO (Pollaczek-Khinchine) whose jobs are each request's
    copies sent back to back (a batch of b copies of one item, size b S): the mean wait
    batch_rate E[b^2] E[S^2] / (2 (1 - rho)), then the request's own copy, E[S]."""
    mean = setting.miss_item_bytes / setting.dc_bandwidth
    square = (setting.miss_item_bytes ** 2 if setting.miss_item_bytes_square is None
              else setting.miss_item_bytes_square) / setting.dc_bandwidth ** 2
    rho = copies_rate * mean
    return batch_rate * batch_square * square / (2 * (1 - rho)) + mean


def dc_utilisation(result: Result) -> float:
    """The DC's utilisation: the larger of its fetch queue's and its output link's."""
    fetch = next(q for q in result.queues if q.name == "fetch")
    return max(fetch.utilisation, result.dc_link_utilisation)


def adaptive(setting: Setting, alpha: float, fp: float = 0.0, fn: float = 0.0,
             reading: Reading = Reading(), high: float = ADAPTIVE_HIGH) -> Result:
    """The adaptive strategy in steady state: cut-through where that keeps the DC's
    utilisation at most ``high`` (the switch's upper threshold), parallel elsewhere. The
    simulation's switch measures the utilisation and applies hysteresis; at a fixed operating
    point it settles in one mode, this one."""
    cut = evaluate("cut_through", setting, alpha, fp, fn, reading)
    if cut.stable and dc_utilisation(cut) <= high:
        return replace(cut, strategy="adaptive")
    return replace(evaluate("parallel", setting, alpha, fp, fn, reading), strategy="adaptive")


def cut_through_crossing(setting: Setting, reading: Reading = Reading(),
                         tolerance: float = 1e-6) -> float:
    """The least hit rate from which cut-through is faster than linear (an exact filter), by
    bisection: cut-through is slower, or unstable, below it. 0 when it is faster everywhere;
    1 when nowhere below 100 % hits. Assumes one crossing, as the two curves give (linear
    nearly flat, cut-through rising from its congested low end)."""
    def faster(alpha: float) -> bool:
        return (evaluate("cut_through", setting, alpha, reading=reading).mean
                < evaluate("linear", setting, alpha, reading=reading).mean)

    if faster(0.0):
        return 0.0
    low, high = 0.0, 1.0 - tolerance
    if not faster(high):
        return 1.0
    while high - low > tolerance:
        middle = (low + high) / 2
        low, high = (low, middle) if faster(middle) else (middle, high)
    return high


def false_positive_rate(bits: int, hashes: int, items: float) -> float:
    """A Bloom filter's false-positive probability, (1 - e^(-k n / m))^k."""
    return (1.0 - math.exp(-hashes * items / bits)) ** hashes


def characteristic_time(rates: Sequence[float] | np.ndarray, capacity: float) -> float:
    """Che's approximation of an LRU cache of ``capacity`` items under independent Poisson
    requests at ``rates``: the time T with sum_i (1 - e^(-rate_i T)) = capacity (inf when
    everything fits). Item i is cached with probability 1 - e^(-rate_i T)."""
    rates = np.asarray(rates, float)
    if capacity >= len(rates):
        return math.inf
    if capacity <= 0:
        return 0.0
    low, high = 0.0, 1.0
    while np.sum(-np.expm1(-rates * high)) < capacity:
        high *= 2
    for _ in range(60):  # 2^-60 of the bracket: far below any rate's resolution
        middle = (low + high) / 2
        if np.sum(-np.expm1(-rates * middle)) < capacity:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def stale_share(rates: np.ndarray, characteristic: float, interval: float) -> float:
    """The share of requests that find their item cached but not yet in the synchronised
    filter (the false misses fn), for items at Poisson ``rates`` (req/s, summing to the
    cache's request rate) in an LRU cache of characteristic time T, synchronised every
    ``interval`` seconds.

    A request arriving a seconds after the last synchronisation sees item i cached since then
    iff one of its requests in the last a seconds followed a gap longer than T; for a <= T that
    has probability rate_i a e^(-rate_i T) (first request in the window at u, none in the T - u
    before it), capped by the item's hit probability. The filter's age at a request is uniform
    on [0, interval] (Poisson arrivals see time averages). Evictions since the last
    synchronisation leave stale positives at the same rate in steady state (an item evicted
    in the window is one whose last request fell in the window of length a ending T ago)."""
    rates = np.asarray(rates, float)
    if not math.isfinite(characteristic) or characteristic == 0 or interval == 0:
        return 0.0
    ages = (np.arange(64) + 0.5) / 64 * interval
    hit = -np.expm1(-rates * characteristic)
    fresh = np.minimum(np.outer(ages, rates) * np.exp(-rates * characteristic), hit)
    return float(np.sum(fresh.mean(axis=0) * rates) / rates.sum())


def relative_to_linear(setting: Setting, alpha: float, reading: Reading = Reading(),
                       fp: float = 0.0, fn: float = 0.0) -> dict[str, float]:
    """Each filter strategy's mean response time against linear's, in percent (negative:
    faster), at ``alpha``."""
    linear = evaluate("linear", setting, alpha, reading=reading).mean
    return {strategy: 100 * (evaluate(strategy, setting, alpha, fp, fn, reading).mean / linear
                             - 1) for strategy in ("parallel", "cut_through")}


def fitted_miss_sojourns(setting: Setting = LOW_TRAFFIC,
                         target: tuple[float, float] = (-23.6, -65.2),
                         reading: Reading = Reading()) -> dict[str, float]:
    """The per-node routing sojourns a filter-judged miss would have to wait for, on top of
    ``reading``'s paths, for each filter strategy to reach the paper's figure (percent
    against linear at 0 % hits, (parallel, cut-through)): one count per figure, so their
    agreement is the test of the miss-path reading."""
    with_miss = replace(reading, miss_routing="four_sojourns")
    linear = evaluate("linear", setting, 0.0, reading=reading).mean
    counts = {}
    for strategy, figure in zip(("parallel", "cut_through"), target):
        plain = evaluate(strategy, setting, 0.0, reading=reading).mean
        sojourn = (evaluate(strategy, setting, 0.0, reading=with_miss).mean
                   - plain) / MISS_ROUTING_SOJOURNS
        counts[strategy] = ((1 + figure / 100) * linear - plain) / sojourn
    return counts


def closest_readings(setting: Setting = LOW_TRAFFIC, target: tuple[float, float] = (-23.6, -65.2),
                     alpha: float = 0.0) -> list[tuple[float, Reading, dict[str, float]]]:
    """Every reading with its figures at ``alpha``, nearest the paper's (parallel, cut-through)
    first: (distance in percentage points, reading, figures)."""
    rows = []
    for reading in readings():
        figures = relative_to_linear(replace(setting), alpha, reading)
        if not all(math.isfinite(v) for v in figures.values()):
            continue
        distance = abs(figures["parallel"] - target[0]) + abs(figures["cut_through"] - target[1])
        rows.append((distance, reading, figures))
    return sorted(rows, key=lambda row: row[0])
