"""A discrete-event simulation (SimPy) of the media-cloud CDN of bloom_cdn at the paper's scale."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import simpy

from controller.policies.bloom_cdn.bloom import (HASHES, NODE_FILTER_BYTES, FilteredCache, GlobalFilter, SyncLog,
                          bit_positions, delta_update)
from controller.policies.bloom_cdn.chord import ChordRing, identifier

from .model import ADAPTIVE_HIGH, ADAPTIVE_LOW, Setting, characteristic_time, false_positive_rate, stale_share

STRATEGIES = ("linear", "parallel", "cut_through", "adaptive", "speculative")
SERVICE_LAWS = ("exponential", "lognormal")


@dataclass(frozen=True)
class Workload:
    """The catalogue and the users: ``items`` items of Zipf(``zipf``) popularity, sizes drawn
    log-normal (``size_sigma``) around ``mean_item_bytes`` and ordered against popularity
    (``small_popular``: low traffic, the smallest items most requested) or with it (high
    traffic), ``groups`` user groups."""

    items: int = 50_000
    zipf: float = 0.79
    mean_item_bytes: float = 100e3  # 50,000 items, about 5 GB
    size_sigma: float = 1.0
    small_popular: bool = True
    groups: int = 100

    def popularity(self) -> np.ndarray:
        weights = np.arange(1, self.items + 1, dtype=float) ** -self.zipf
        return weights / weights.sum()

    def sizes(self, seed: int = 0) -> np.ndarray:
        """Item sizes in bytes, item 0 the most popular."""
        rng = np.random.default_rng(seed)
        draws = rng.lognormal(0.0, self.size_sigma, self.items)
        draws = np.sort(draws * self.mean_item_bytes / draws.mean())
        return draws if self.small_popular else draws[::-1]


@dataclass(frozen=True)
class SimConfig:
    """One simulated run."""

    setting: Setting
    strategy: str
    hit_rate: float
    workload: Workload = Workload()
    duration: float = 1000.0
    warmup: float = 50.0
    sync_every: int | None = 400  # requests a node serves between synchronisations
    sync_period: float | None = None  # or seconds between them
    seed: int = 0
    batches: int = 20
    adaptive_high: float = ADAPTIVE_HIGH  # DC utilisation above which adaptive goes parallel
    adaptive_low: float = ADAPTIVE_LOW  # and below which it goes back to cut-through
    adaptive_window: float = 2.0  # seconds over which the DC's utilisation is measured
    # How the hit rate is set: "lru", through the LRU capacity (Che's approximation), caches
    # starting with their most popular items; "initial_state", as the paper sets it, a fixed
    # cached set drawn regardless of popularity and size (misses are not cached, so the
    # filters never go stale).
    hits: Literal["lru", "initial_state"] = "lru"
    # Every queue's service law, at the setting's means: the paper's exponential, or
    # log-normal with squared coefficient of variation service_scv (the Jackson model's test).
    service: Literal["exponential", "lognormal"] = "exponential"
    service_scv: float = 1.0
    # The item sizes' draw and the initial state's order; None: the run's seed. A fixed one
    # keeps one catalogue across runs (in high traffic the few most popular items' sizes, and
    # whether they are cached, move cut-through's congestion point).
    catalogue_seed: int | None = None


@dataclass
class SimResult:
    """What one run measured (after the warm-up)."""

    config: SimConfig
    requests: int
    mean: float
    batch_means: list[float]
    hit_rate: float  # share of requests whose item the home node cached at the filter check
    false_positive: float  # share of requests (filter strategies)
    false_positive_bloom: float
    false_positive_stale: float
    false_miss: float
    mean_hops: float
    capacity: int
    dc_utilisation: float  # fetch queue busy share
    dc_link_utilisation: float
    dc_item_bytes: tuple[float, float]  # mean and mean square of the sizes the DC sent
    home_shares: tuple[float, ...]  # each node's share of the lookups
    routing_shares: tuple[float, ...]  # and of the routing services
    sync: SyncLog
    cut_through_share: float = 0.0  # adaptive: share of filter-judged misses sent cut-through
    unstable: bool = False  # the DC fetch queue or link still grew at the end
    queue_busy: dict = field(default_factory=dict)

    def measured_setting(self) -> Setting:
        """The run's setting with what the run measured of its structure (mean routing hops,
        each node's shares, the sizes the DC sent), for the model to be evaluated on."""
        mean, square = self.dc_item_bytes
        return replace(self.config.setting, hops=self.mean_hops, miss_item_bytes=mean,
                       miss_item_bytes_square=square, home_shares=self.home_shares,
                       routing_shares=self.routing_shares)

    @property
    def interval(self) -> tuple[float, float]:
        """A 95 % interval of the mean response time from batch means (Student t)."""
        from scipy import stats
        values = np.asarray(self.batch_means)
        half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
        return float(values.mean() - half), float(values.mean() + half)


class _Server:
    """A single-server FIFO queue with exponential service, counting its busy time.

    A FIFO single server's departures follow Lindley's recursion (a job leaves at
    max(arrival, previous departure) + its service), so a job's departure is known when it
    arrives: one SimPy timeout per service instead of a Resource's request and release events,
    the same sample paths at a third of the events."""

    def __init__(self, env: simpy.Environment, rate: float, draws: _ServiceDraws):
        self.env = env
        self.mean = 1.0 / rate
        self.draws = draws
        self.free_at = 0.0
        self.busy = 0.0
        self.arrivals = 0

    def backlog(self) -> float:
        """Seconds of work queued ahead of a job arriving now."""
        return max(0.0, self.free_at - self.env.now)

    def serve(self):
        self.arrivals += 1
        service = self.draws.next() * self.mean
        self.busy += service
        self.free_at = max(self.env.now, self.free_at) + service
        yield self.env.timeout(self.free_at - self.env.now)


class _ServiceDraws:
    """Service times of mean 1 from ``rng``, taken in blocks (a numpy call per draw would
    cost more than the event it times): exponential (squared coefficient of variation
    ``scv`` 1, the paper's assumption) or log-normal with the given ``scv`` (heavier tailed
    than exponential above 1)."""

    def __init__(self, rng: np.random.Generator, law: str = "exponential", scv: float = 1.0,
                 block: int = 1 << 16):
        if law not in SERVICE_LAWS:
            raise ValueError(f"unknown service law {law!r}; one of {', '.join(SERVICE_LAWS)}")
        self.block = block
        sigma = math.sqrt(math.log1p(scv))
        self._block = (rng.standard_exponential if law == "exponential"
                       else lambda size: rng.lognormal(-sigma ** 2 / 2, sigma, size))
        self._values = iter(())

    def next(self) -> float:
        try:
            return next(self._values)
        except StopIteration:
            self._values = iter(self._block(self.block).tolist())
            return next(self._values)


class _Node:
    """A content node: its queues, its LRU cache of the items it is home to, its exact
    counting filter and the bitmap it last sent."""

    def __init__(self, env, setting: Setting, draws: _ServiceDraws, capacity: int,
                 positions: np.ndarray):
        self.routing = _Server(env, setting.routing_rate, draws)
        self.lookup = _Server(env, setting.lookup_rate, draws)
        self.response = _Server(env, setting.response_rate, draws)
        self.cache = FilteredCache(capacity, positions)
        self.sent = self.cache.filter.bitmap()
        self.served = 0


def initial_state(popularity: np.ndarray, hit_rate: float,
                  rng: np.random.Generator) -> np.ndarray:
    """The items cached from the start: a prefix of the catalogue in random order (so
    independent of popularity and size) whose popularity sums nearest ``hit_rate``."""
    order = rng.permutation(len(popularity))
    mass = np.concatenate([[0.0], np.cumsum(popularity[order])])
    return order[:int(np.abs(mass - hit_rate).argmin())]


def capacity_for_hit_rate(popularity: np.ndarray, homes: np.ndarray, nodes: int,
                          arrival_rate: float, hit_rate: float) -> int:
    """The per-node LRU capacity (items) whose Che-approximated steady-state hit rate is
    closest to ``hit_rate``."""
    by_node = [popularity[homes == n] * arrival_rate for n in range(nodes)]

    def predicted(capacity: int) -> float:
        hits = 0.0
        for rates in by_node:
            t = characteristic_time(rates, capacity)
            hits += rates.sum() if math.isinf(t) else np.sum(rates * -np.expm1(-rates * t))
        return hits / arrival_rate

    low, high = 0, max(len(r) for r in by_node)
    while low < high:
        middle = (low + high) // 2
        if predicted(middle) < hit_rate:
            low = middle + 1
        else:
            high = middle
    if low > 0 and abs(predicted(low - 1) - hit_rate) < abs(predicted(low) - hit_rate):
        return low - 1
    return low


class AdaptiveSwitch:
    """The adaptive strategy's decision: cut-through while the DC is not congested, parallel
    when it is. The signal is the DC's measured utilisation under cut-through (the larger of
    its fetch queue's busy share and its output link's, see :meth:`Simulation._dc_monitor`)
    over the last ``window`` seconds; it switches to parallel above ``high`` and back to
    cut-through below ``low`` (hysteresis, so noise around one threshold does not flap it)."""

    def __init__(self, high: float, low: float, window: float):
        if not 0 < low < high:
            raise ValueError("adaptive thresholds need 0 < low < high")
        self.high, self.low, self.window = high, low, window
        self.cut_through = True
        self.switches = 0

    def observe(self, utilisation: float) -> None:
        if self.cut_through and utilisation > self.high:
            self.cut_through, self.switches = False, self.switches + 1
        elif not self.cut_through and utilisation < self.low:
            self.cut_through, self.switches = True, self.switches + 1


class Simulation:
    """One run of :class:`SimConfig`; :meth:`run` returns a :class:`SimResult`."""

    def __init__(self, config: SimConfig):
        if config.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {config.strategy!r}")
        if (config.sync_every is None) == (config.sync_period is None):
            raise ValueError("give exactly one of sync_every and sync_period")
        self.config = config
        setting, workload = config.setting, config.workload
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(config.seed)
        n = setting.nodes
        self.ring = ChordRing.evenly_spread(n)
        self.popularity = workload.popularity()
        self.sizes = workload.sizes(config.seed if config.catalogue_seed is None
                                    else config.catalogue_seed)
        urls = [f"http://media.cloud/item/{i}" for i in range(workload.items)]
        self.positions = bit_positions(urls, NODE_FILTER_BYTES * 8)
        self.keys = np.array([identifier(url) for url in urls], dtype=np.int64)
        self.homes = np.array([self.ring.successor(int(k)) for k in self.keys])
        self.static = config.hits == "initial_state"
        self.capacity = (int(np.bincount(self.homes, minlength=n).max()) if self.static
                         else capacity_for_hit_rate(self.popularity, self.homes, n,
                                                    setting.arrival_rate, config.hit_rate))
        draws = _ServiceDraws(self.rng, config.service, config.service_scv)
        self.nodes = [_Node(self.env, setting, draws, self.capacity, self.positions)
                      for _ in range(n)]
        self.fetch = _Server(self.env, setting.fetch_rate, draws)
        self.global_filter = GlobalFilter(n)
        self.sync = SyncLog()
        self._prefill()
        self.entries = np.arange(workload.groups) % n  # each group's nearest node
        self.routes: dict[tuple[int, int], list[int]] = {}
        self.records: list[tuple[float, float]] = []
        self.counts = dict.fromkeys(("checks", "hit", "fp_bloom", "fp_stale", "fn", "hops",
                                     "cut_through", "filter_miss"), 0)
        self.dc_link_busy = 0.0
        self.dc_direct_busy = 0.0  # link seconds of the filter-judged misses' first copies
        self.dc_link_free_at = 0.0
        self.dc_sent: list[float] = []  # sizes of the items the DC sent (after the warm-up)
        self.switch = AdaptiveSwitch(config.adaptive_high, config.adaptive_low,
                                     config.adaptive_window)

    def _prefill(self) -> None:
        """Every cache starts with its most popular items (or the initial state's), the
        filters synchronised."""
        if self.static:
            # With a fixed catalogue the order is fixed too: the cached sets of higher hit
            # rates hold those of lower ones, so the DC's misses change with the hit rate only.
            seed = (self.config.seed if self.config.catalogue_seed is None
                    else self.config.catalogue_seed)
            cached = initial_state(self.popularity, self.config.hit_rate,
                                   np.random.default_rng([seed, 1]))
        else:
            cached = np.argsort(-self.popularity)
        for item in cached:
            node = self.nodes[self.homes[item]]
            if len(node.cache) < node.cache.capacity:
                node.cache.insert(int(item))
        for index in range(len(self.nodes)):
            self._synchronise(index, count=False)

    # --- the cache and the filters

    def _served(self, home: int) -> None:
        node = self.nodes[home]
        node.served += 1
        if self.config.sync_every and node.served % self.config.sync_every == 0:
            self._synchronise(home)

    def _synchronise(self, index: int, count: bool = True) -> None:
        node = self.nodes[index]
        current = node.cache.filter.bitmap()
        if count:
            message = delta_update(node.sent, current)
            # One update to each of the other nodes.
            for _ in range(len(self.nodes) - 1):
                self.sync.add(len(message), NODE_FILTER_BYTES)
        node.sent = current
        self.global_filter.slices[index] = current

    def _periodic_sync(self):
        while True:
            yield self.env.timeout(self.config.sync_period)
            for index in range(len(self.nodes)):
                self._synchronise(index)

    # --- the DC

    def _dc_send(self, item: int) -> float:
        """Queue ``item``'s bytes on the DC's output link, a FIFO at the DC's bandwidth;
        returns when the transfer ends."""
        seconds = self.sizes[item] / self.config.setting.dc_bandwidth
        start = max(self.env.now, self.dc_link_free_at)
        self.dc_link_free_at = start + seconds
        self.dc_link_busy += seconds
        if self.env.now >= self.config.warmup:
            self.dc_sent.append(self.sizes[item])
        return self.dc_link_free_at

    def _dc_monitor(self):
        """Feeds the adaptive switch, every window, the DC's utilisation *as cut-through would
        load it*: the fetch queue's busy share, and the link's busy share plus the home-node
        copies of the window's filter-judged misses when it is running parallel (the DC
        knows which fetches those were), plus the link's backlog over the window. The same
        figure in both modes, so the switch does not flap between a parallel that looks idle
        and a cut-through that overloads."""
        window = self.config.adaptive_window
        busy_fetch, busy_link, direct = self.fetch.busy, self.dc_link_busy, self.dc_direct_busy
        while True:
            yield self.env.timeout(window)
            fetch = (self.fetch.busy - busy_fetch) / window
            link = (self.dc_link_busy - busy_link) / window
            if not self.switch.cut_through:
                link += (self.dc_direct_busy - direct) / window
            link += max(0.0, self.dc_link_free_at - self.env.now) / window
            busy_fetch, busy_link, direct = self.fetch.busy, self.dc_link_busy, self.dc_direct_busy
            self.switch.observe(max(fetch, link))

    # --- requests

    def _route(self, entry: int, item: int):
        path = self.routes.get((entry, item))
        if path is None:
            path = self.routes[(entry, item)] = self.ring.route(entry, int(self.keys[item]))
        for node in path[:-1]:
            yield from self.nodes[node].routing.serve()
        return len(path) - 1

    def _fetch(self, item: int, copies: int, direct: bool = False):
        """The DC fetches ``item`` and sends ``copies`` of it; the first is the one the
        request waits for. ``direct``: a filter-judged miss (cut-through would send two)."""
        yield from self.fetch.serve()
        if direct:
            self.dc_direct_busy += self.sizes[item] / self.config.setting.dc_bandwidth
        done = [self._dc_send(item) for _ in range(copies)][0]
        if self.config.setting.dc_bandwidth < math.inf:
            yield self.env.timeout(done - self.env.now)

    def _home_path(self, entry: int, item: int, home: int):
        """Routed to the home node, looked up, fetched from the DC on a miss, answered."""
        hops = yield from self._route(entry, item)
        yield from self.nodes[home].lookup.serve()
        self._served(home)
        if not self.nodes[home].cache.hit(item):
            yield from self._fetch(item, 1)
            self._cache(home, item)
        yield from self.nodes[home].response.serve()
        return hops

    def _cache_in_background(self, entry: int, item: int, home: int, fetched: simpy.Event):
        hops = yield from self._route(entry, item)
        yield from self.nodes[home].lookup.serve()
        self._served(home)
        if not self.nodes[home].cache.hit(item):
            yield fetched
            self._cache(home, item)
        self._count_hops(hops)

    def _cache(self, home: int, item: int) -> None:
        """A missed item is cached at its home node (an initial state stays as it is)."""
        if not self.static:
            self.nodes[home].cache.insert(item)

    def _count_hops(self, hops: int) -> None:
        if self.env.now >= self.config.warmup:
            self.counts["hops"] += hops

    def _speculative_home(self, entry: int, item: int, home: int, fetched: simpy.Event,
                          answered: simpy.Event):
        """The home node's half of a speculative request: a hit is answered from its cache;
        a miss caches the DC's copy."""
        hops = yield from self._route(entry, item)
        yield from self.nodes[home].lookup.serve()
        self._served(home)
        self._count_hops(hops)
        if self.nodes[home].cache.hit(item):
            yield from self.nodes[home].response.serve()
            _answer(answered)
        else:
            yield fetched
            self._cache(home, item)

    def _speculative_dc(self, entry: int, item: int, fetched: simpy.Event,
                        answered: simpy.Event):
        """The DC's half: every request's item fetched and answered through the entry node,
        whichever half answers first serving the user."""
        yield from self._fetch(item, 1)
        fetched.succeed()
        yield from self.nodes[entry].response.serve()
        _answer(answered)

    def _request(self, entry: int, item: int):
        start = self.env.now
        home = int(self.homes[item])
        strategy = self.config.strategy
        measured = start >= self.config.warmup
        cached = item in self.nodes[home].cache
        if strategy in ("linear", "speculative") and measured:
            self.counts["hit"] += cached
        if strategy == "linear":
            hops = yield from self._home_path(entry, item, home)
            self._count_hops(hops)
        elif strategy == "speculative":
            fetched, answered = self.env.event(), self.env.event()
            self.env.process(self._speculative_home(entry, item, home, fetched, answered))
            self.env.process(self._speculative_dc(entry, item, fetched, answered))
            yield answered
        else:
            judged = self.global_filter.contains(home, self.positions[item])
            if measured:
                self.counts["checks"] += 1
                self.counts["hit"] += cached
                if judged and not cached:
                    exact = self.nodes[home].cache.filter.bitmap()[self.positions[item]].all()
                    self.counts["fp_stale" if not exact else "fp_bloom"] += 1
                elif cached and not judged:
                    self.counts["fn"] += 1
            if judged:
                hops = yield from self._home_path(entry, item, home)
                self._count_hops(hops)
            else:
                cut = strategy == "cut_through" or (strategy == "adaptive"
                                                    and self.switch.cut_through)
                if measured:
                    self.counts["filter_miss"] += 1
                    self.counts["cut_through"] += cut
                fetched = self.env.event()
                self.env.process(self._cache_in_background(entry, item, home, fetched))
                yield from self._fetch(item, 2 if cut else 1, direct=True)
                fetched.succeed()
                if not cut:
                    yield from self.nodes[entry].response.serve()
        if measured:
            self.records.append((start, self.env.now - start))

    def _users(self):
        setting, workload = self.config.setting, self.config.workload
        chunk = 4096
        while True:
            gaps = self.rng.exponential(1 / setting.arrival_rate, chunk)
            items = self.rng.choice(workload.items, chunk, p=self.popularity)
            groups = self.rng.integers(workload.groups, size=chunk)
            for gap, item, group in zip(gaps, items, groups):
                yield self.env.timeout(gap)
                if self.env.now >= self.config.duration:
                    return
                self.env.process(self._request(int(self.entries[group]), int(item)))

    def predicted_filter_errors(self) -> tuple[float, float]:
        """The model's fp (Bloom collisions, :func:`.model.false_positive_rate` at each
        node's load) and fn (:func:`.model.stale_share` at the synchronisation interval) for
        this run's caches, as shares of all requests."""
        setting, config = self.config.setting, self.config
        fp = fn = 0.0
        for index, node in enumerate(self.nodes):
            if self.static:  # a never stale filter: collisions on the uncached items only
                missed = (self.popularity[self.homes == index].sum()
                          - self.popularity[list(node.cache.items)].sum())
                fp += missed * false_positive_rate(NODE_FILTER_BYTES * 8, HASHES, len(node.cache))
                continue
            rates = self.popularity[self.homes == index] * setting.arrival_rate
            share = rates.sum() / setting.arrival_rate
            t = characteristic_time(rates, node.cache.capacity)
            hit = 1.0 if math.isinf(t) else np.sum(rates * -np.expm1(-rates * t)) / rates.sum()
            collision = false_positive_rate(NODE_FILTER_BYTES * 8, HASHES, node.cache.capacity)
            interval = (config.sync_period if config.sync_period
                        else config.sync_every / rates.sum())
            fp += share * (1 - hit) * collision
            fn += share * stale_share(rates, t, interval)
        return fp, fn

    def run(self) -> SimResult:
        config = self.config
        self.env.process(self._users())
        if config.sync_period:
            self.env.process(self._periodic_sync())
        self.env.process(self._dc_monitor())
        # Requests still in the network at the end finish (an unstable run drains slowly, so
        # the drain is bounded: the backlog left is the instability's signature).
        self.env.run(until=config.duration)
        backlog = self.fetch.backlog()
        self.env.run(until=config.duration * 1.5)
        done = sorted(self.records)
        times = np.array([r for _, r in done])
        starts = np.array([s for s, _ in done])
        measured_span = config.duration - config.warmup
        edges = config.warmup + measured_span * np.arange(config.batches + 1) / config.batches
        batch = [float(times[(starts >= a) & (starts < b)].mean()) if np.any(
            (starts >= a) & (starts < b)) else math.inf for a, b in zip(edges, edges[1:])]
        issued = len(times)
        counts = self.counts
        checks = max(counts["checks"], 1)
        fp_bloom, fp_stale = counts["fp_bloom"] / checks, counts["fp_stale"] / checks
        # A stable M/M/1 queue at this load holds seconds of work at most: far more left at
        # the end means it was still growing.
        unstable = backlog > 0.05 * config.duration or (self.dc_link_free_at - config.duration
                                                        > 0.05 * config.duration)
        return SimResult(
            config=config, requests=issued, mean=float(times.mean()) if issued else math.inf,
            batch_means=batch, hit_rate=counts["hit"] / max(issued, 1),
            false_positive=fp_bloom + fp_stale, false_positive_bloom=fp_bloom,
            false_positive_stale=fp_stale, false_miss=counts["fn"] / checks,
            mean_hops=counts["hops"] / max(issued, 1), capacity=self.capacity,
            dc_utilisation=self.fetch.busy / self.env.now,
            dc_link_utilisation=self.dc_link_busy / config.duration,
            dc_item_bytes=(float(np.mean(self.dc_sent)), float(np.mean(np.square(self.dc_sent))))
            if self.dc_sent else (0.0, 0.0),
            home_shares=_shares([node.lookup.arrivals for node in self.nodes]),
            routing_shares=_shares([node.routing.arrivals for node in self.nodes]),
            sync=self.sync,
            cut_through_share=counts["cut_through"] / max(counts["filter_miss"], 1),
            unstable=unstable,
            queue_busy={"routing": np.mean([n.routing.busy for n in self.nodes]) / self.env.now,
                        "response": np.mean([n.response.busy for n in self.nodes]) / self.env.now})


def _answer(answered: simpy.Event) -> None:
    """The user is served by the first answer; a later one is discarded."""
    if not answered.triggered:
        answered.succeed()


def _shares(counts: list[int]) -> tuple[float, ...]:
    total = sum(counts)
    return tuple(count / total if total else 1 / len(counts) for count in counts)


def simulate(config: SimConfig) -> SimResult:
    return Simulation(config).run()
