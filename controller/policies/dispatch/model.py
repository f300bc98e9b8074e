"""dispatch at model level: a synthetic world of regions, sites, media nodes and clients, and
the three experiments emulation cannot reach at scale — access by database vs by probing,
tickets vs shared capacity under a burst of joins to K dispatch centers (in streams alone or in
streams, bitrate and CPU, at a chosen load), and back-to-source lookup by broadcast vs by hint
among K centers."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import simpy

from .access import (Geography, LocationDatabase, MediaNode, candidates, choose_by_probe,
                     rank)
from .capacity import ONE_STREAM, Resources, SharedCapacity, Tickets, fits, redirects
from .quality import VIA, PathQuality, Thresholds
from .rooms import Directory, LookupMode, Transcoding

LIGHT_KM_PER_S = 200_000.0


@dataclass(frozen=True)
class ModelClient:
    name: str
    site: str
    access_rtt: float  # seconds


@dataclass(frozen=True)
class World:
    geography: Geography
    nodes: tuple[MediaNode, ...]
    clients: tuple[ModelClient, ...]
    loss: dict[tuple[str, str], float]
    jitter: dict[tuple[str, str], float]
    home_region: str

    def quality(self, client: ModelClient, node: str) -> PathQuality:
        """The true quality of ``client``'s path to ``node``."""
        return PathQuality(2 * self.geography.delay(client.site, node) + client.access_rtt,
                           self.loss[client.site, node], self.jitter[client.site, node])


def generate(seed: int, *, regions: int = 5, sites_per_region: int = 4, nodes: int = 100,
             clients: int = 10_000, capacity: int = 150, home_share: float = 0.5,
             region_radius: float = 5000.0, site_spread: float = 800.0,
             route_inflation: float = 1.6, border_delay: tuple[float, float] = (0.020, 0.080),
             in_region_loss: tuple[float, float] = (0.0, 0.004),
             cross_border_loss: tuple[float, float] = (0.01, 0.05),
             in_region_jitter: tuple[float, float] = (0.001, 0.004),
             cross_border_jitter: tuple[float, float] = (0.005, 0.020),
             access_rtt: tuple[float, float] = (0.005, 0.030)) -> World:
    """A random world as docs/schemes/dispatch.md describes (distances in km, times in s)."""
    if regions < 1 or sites_per_region < 1 or nodes < 1 or clients < 1:
        raise ValueError("a world needs at least one region, site, node and client")
    rng = np.random.default_rng([seed, 1001])
    names = [f"r{r}" for r in range(regions)]
    site_region, position = {}, {}
    for r, region in enumerate(names):
        angle = 2 * math.pi * r / regions
        centre = region_radius * np.array([math.cos(angle), math.sin(angle)])
        for s in range(sites_per_region):
            site = f"{region}s{s}"
            site_region[site] = region
            offset = rng.uniform(-site_spread, site_spread, 2) if sites_per_region > 1 else 0
            position[site] = centre + offset
    sites = list(site_region)
    media = tuple(MediaNode(f"n{i}", site_region[sites[i % len(sites)]],
                            f"{sites[i % len(sites)]}m{(i // len(sites)) % 2}",
                            sites[i % len(sites)], capacity) for i in range(nodes))
    delays, loss, jitter = {}, {}, {}
    for site in sites:
        for node in media:
            km = float(np.linalg.norm(position[site] - position[node.site]))
            one_way = 0.001 + km * route_inflation / LIGHT_KM_PER_S
            border = site_region[site] != node.region
            if border:
                one_way += rng.uniform(*border_delay)
            delays[site, node.name] = one_way
            loss[site, node.name] = rng.uniform(*(cross_border_loss if border
                                                  else in_region_loss))
            jitter[site, node.name] = rng.uniform(*(cross_border_jitter if border
                                                    else in_region_jitter))
    weights = np.array([home_share / sites_per_region if site_region[s] == names[0]
                        else (1 - home_share) / max(1, (regions - 1) * sites_per_region)
                        for s in sites]) if regions > 1 else np.ones(len(sites))
    client_sites = rng.choice(len(sites), size=clients, p=weights / weights.sum())
    rtts = rng.uniform(*access_rtt, size=clients)
    people = tuple(ModelClient(f"c{i}", sites[int(client_sites[i])], float(rtts[i]))
                   for i in range(clients))
    return World(Geography(site_region, delays), media, people, loss, jitter, names[0])


@dataclass
class AccessResult:
    """Per client: where the database put it, the node taken, and its path's quality."""

    misplaced: list[bool] = field(default_factory=list)
    chosen: list[str] = field(default_factory=list)
    quality: list[PathQuality] = field(default_factory=list)
    best_rtt: list[float] = field(default_factory=list)

    def summary(self, thresholds: Thresholds = VIA, near_band: float = 0.020) -> dict:
        rtts = np.array([q.rtt for q in self.quality])
        off = rtts - np.array(self.best_rtt)
        return {"database_misplaced": float(np.mean(self.misplaced)),
                "badly_placed": float(np.mean(off > near_band)),
                "poor_sessions": float(np.mean([thresholds.poor(q) for q in self.quality])),
                "rtt_p50_ms": float(np.percentile(rtts, 50) * 1e3),
                "rtt_p95_ms": float(np.percentile(rtts, 95) * 1e3),
                "mean_loss_pct": float(np.mean([q.loss for q in self.quality]) * 100)}


def access(world: World, database: LocationDatabase, *, offered: int = 4,
           other_regions: int = 2, probe: bool = True,
           probe_packets: int = 20, rtt_noise: float = 0.002, seed: int = 0,
           thresholds: Thresholds = VIA) -> AccessResult:
    """Every client's first-mile access (capacity not binding: see :func:`join_burst`)."""
    rng = np.random.default_rng([seed, 1002])
    result = AccessResult()
    nearest = {site: min(world.geography.delay(site, node.name) for node in world.nodes)
               for site in world.geography.regions}
    by_site: dict[str, list[MediaNode]] = {}
    for client in world.clients:
        believed = database.locate(client.name, client.site)
        if believed not in by_site:
            by_site[believed] = candidates(rank(world.nodes, believed, world.geography),
                                           offered, other_regions=other_regions)
        offer = by_site[believed]
        if probe:
            measured = {}
            for node in offer:
                true = world.quality(client, node.name)
                lost = rng.binomial(probe_packets, true.loss) / probe_packets
                measured[node.name] = PathQuality(max(0.0, true.rtt + rng.normal(0, rtt_noise)),
                                                  lost, true.jitter)
            taken = choose_by_probe([node.name for node in offer], measured, thresholds)
        else:
            taken = offer[0].name
        result.misplaced.append(believed != client.site)
        result.chosen.append(taken)
        result.quality.append(world.quality(client, taken))
        result.best_rtt.append(2 * nearest[client.site] + client.access_rtt)
    return result


@dataclass(frozen=True)
class Profile:
    """What joins ask of a node, and how a node is built for them: ``mix`` holds each kind of
    join's share and demand by dimension; ``headroom`` names the dimensions a node's capacity
    limits, each with how much more than its load share it is built with (1 for the dimension
    that binds)."""

    mix: tuple[tuple[float, Resources], ...]
    headroom: Mapping[str, float]


# Every join one stream, nodes limited in streams only: the one-dimensional case.
STREAMS_ONLY = Profile(mix=((1.0, ONE_STREAM),), headroom={"streams": 1.0})
# Audio and video apart, in made-up but typical amounts: audio-only listeners (a voice room's),
# SD and HD viewers; a node built for the mix runs out of video bitrate first, with room to
# spare in stream slots, audio bitrate and CPU.
MEDIA = Profile(
    mix=((0.2, {"streams": 1, "audio_kbps": 64, "cpu_millicores": 5}),
         (0.5, {"streams": 1, "video_kbps": 1200, "audio_kbps": 64, "cpu_millicores": 10}),
         (0.3, {"streams": 1, "video_kbps": 3500, "audio_kbps": 128, "cpu_millicores": 20})),
    headroom={"video_kbps": 1.0, "streams": 1.5, "audio_kbps": 2.0, "cpu_millicores": 1.25})
PROFILES = {"streams": STREAMS_ONLY, "media": MEDIA}


def draw_demands(world: World, profile: Profile, seed: int = 0) -> dict[str, Resources]:
    """Each client's demand, drawn from ``profile``'s mix."""
    rng = np.random.default_rng([seed, 1008])
    shares = np.array([share for share, _ in profile.mix])
    kinds = rng.choice(len(profile.mix), size=len(world.clients), p=shares / shares.sum())
    return {client.name: profile.mix[int(kind)][1] for client, kind in zip(world.clients, kinds)}


def capacities_at_load(world: World, demands: Mapping[str, Resources], profile: Profile,
                       load: float) -> dict[str, dict[str, int]]:
    """Every node's capacity (nodes alike, whole units) such that the clients' total demand is
    ``load`` times the nodes' total capacity in a dimension of headroom 1, and ``load`` over
    its headroom in the others."""
    if load <= 0:
        raise ValueError(f"load must be > 0, not {load}")
    total: Counter = Counter()
    for demand in demands.values():
        total.update(demand)
    per_node = {dimension: max(1, round(total[dimension] * headroom
                                        / (len(world.nodes) * load)))
                for dimension, headroom in profile.headroom.items()}
    return {node.name: dict(per_node) for node in world.nodes}


@dataclass
class BurstResult:
    """What a join burst came to: peak and final oversell, redirects, rejections (and of them
    the fragmented ones) and where the admitted clients ended up."""

    oversold_streams: int = 0  # sum over nodes of the most clients beyond capacity at once
    oversold_nodes: int = 0
    redirects: int = 0
    rejected: int = 0
    # Rejected although the room left across all nodes, every center's share together, would
    # have held the join in every dimension: stranded by the tickets' split among centers or
    # by the nodes' split of the room.
    fragmented: int = 0
    # Rejected although one node alone had room for the join (in other centers' shares, or
    # beyond a center's stale view of it).
    rejected_with_room: int = 0
    admitted: int = 0
    rtts: list[float] = field(default_factory=list)
    decisions: int = 0
    peak_utilization: float = 0.0

    def summary(self) -> dict:
        return {"oversold_streams": self.oversold_streams, "oversold_nodes": self.oversold_nodes,
                "redirects": self.redirects, "rejected": self.rejected,
                "admitted": self.admitted, "peak_utilization": self.peak_utilization,
                "burst_rtt_p50_ms": float(np.percentile(self.rtts, 50) * 1e3) if self.rtts
                else math.nan,
                "burst_rtt_p95_ms": float(np.percentile(self.rtts, 95) * 1e3) if self.rtts
                else math.nan}


def join_burst(world: World, database: LocationDatabase, control: str, *, centers: int = 3,
               burst: float = 10.0, report_period: float = 1.0, report_delay: float = 0.05,
               seed: int = 0, demands: Mapping[str, Resources] | None = None,
               capacities: Mapping[str, Resources] | None = None) -> BurstResult:
    """A burst of joins as docs/schemes/dispatch.md describes, simulated with SimPy; ``control``
    is ``tickets`` or ``shared``. ``demands`` gives each client's demand by dimension (by
    default one stream) and ``capacities`` each node's (by default its ``capacity`` in
    streams)."""
    rng = np.random.default_rng([seed, 1003])
    center_names = [f"center{k}" for k in range(centers)]
    capacity = {node.name: dict(capacities[node.name]) if capacities is not None
                else {"streams": int(node.capacity)} for node in world.nodes}
    demand = {client.name: (demands or {}).get(client.name, ONE_STREAM)
              for client in world.clients}
    book = {"tickets": Tickets, "shared": SharedCapacity}[control](capacity, center_names)
    load: dict[str, Counter] = defaultdict(Counter)
    peak: dict[str, Counter] = defaultdict(Counter)
    beyond: dict[str, int] = defaultdict(int)  # the most clients beyond capacity at once
    on_node: dict[str, list[str]] = defaultdict(list)
    placed: dict[str, tuple[str, str]] = {}  # client -> (center, node)
    refused: dict[str, set[str]] = defaultdict(set)  # nodes a client was redirected off
    believed = {client.name: database.locate(client.name, client.site)
                for client in world.clients}
    through = {client.name: center_names[int(k)]
               for client, k in zip(world.clients, rng.integers(0, centers, len(world.clients)))}
    result = BurstResult()

    def utilization(node: str) -> float:
        return max((load[node][dimension] / amount
                    for dimension, amount in capacity[node].items() if amount > 0), default=0.0)

    def over(node: str) -> bool:
        return any(load[node][dimension] > amount
                   for dimension, amount in capacity[node].items())

    def free(node: str) -> dict[str, int]:
        return {dimension: max(0, amount - load[node][dimension])
                for dimension, amount in capacity[node].items()}

    def room_left() -> Counter:
        left: Counter = Counter()
        for node in capacity:
            left.update(free(node))
        return left

    def join(name: str) -> None:
        center, wants = through[name], demand[name]
        result.decisions += 1
        ranked = rank(world.nodes, believed[name], world.geography,
                      has_room=lambda node: node.name not in refused[name]
                      and book.has_room(center, node.name, wants),
                      utilization=lambda node: utilization(node.name))
        for node in ranked:
            if node.name not in refused[name] and book.admit(center, node.name, wants):
                placed[name] = (center, node.name)
                load[node.name].update(wants)
                peak[node.name] |= load[node.name]
                on_node[node.name].append(name)
                if over(node.name):
                    beyond[node.name] = max(beyond[node.name], len(redirects(
                        {node.name: on_node[node.name]}, capacity, demand)))
                return
        result.rejected += 1
        result.fragmented += fits(wants, room_left())
        result.rejected_with_room += any(fits(wants, free(node)) for node in capacity)

    def arrivals(env: simpy.Environment):
        for gap, client in zip(np.diff(np.sort(rng.uniform(0, burst, len(world.clients))),
                                       prepend=0.0), world.clients):
            yield env.timeout(gap)
            join(client.name)

    def deliver(env: simpy.Environment, node: str, reported: dict[str, int]):
        yield env.timeout(report_delay)
        book.report(node, reported)
        for client, _ in redirects({node: on_node[node]}, capacity, demand):
            center, _ = placed.pop(client)
            book.release(center, node, demand[client])
            load[node].subtract(demand[client])
            on_node[node].remove(client)
            refused[client].add(node)
            result.redirects += 1
            join(client)

    def reporter(env: simpy.Environment, node: str, phase: float):
        yield env.timeout(phase)
        while True:
            env.process(deliver(env, node, {dimension: load[node][dimension]
                                            for dimension in capacity[node]}))
            yield env.timeout(report_period)

    env = simpy.Environment()
    env.process(arrivals(env))
    for node, phase in zip(world.nodes, rng.uniform(0, report_period, len(world.nodes))):
        env.process(reporter(env, node.name, float(phase)))
    env.run(until=burst + 3 * report_period + report_delay)
    for node in world.nodes:
        if beyond[node.name] > 0:
            result.oversold_streams += beyond[node.name]
            result.oversold_nodes += 1
        result.peak_utilization = max(result.peak_utilization, max(
            (peak[node.name][dimension] / amount
             for dimension, amount in capacity[node.name].items() if amount > 0), default=0.0))
    result.admitted = len(placed)
    clients = {client.name: client for client in world.clients}
    result.rtts = [world.quality(clients[name], node).rtt for name, (_, node) in placed.items()]
    return result


def place_centers(world: World, centers: int) -> list[MediaNode]:
    """The media node each of ``centers`` dispatch centers sits with: round robin over the
    regions that have nodes, the k-th center of a region with the region's k-th node."""
    if centers < 1:
        raise ValueError("a lookup needs at least one dispatch center")
    by_region: dict[str, list[MediaNode]] = defaultdict(list)
    for node in world.nodes:
        by_region[node.region].append(node)
    regions = list(by_region)
    return [by_region[regions[k % len(regions)]][(k // len(regions))
                                                 % len(by_region[regions[k % len(regions)]])]
            for k in range(centers)]


@dataclass
class LookupResult:
    """Per lookup: messages, seconds to the answer, and whether a stale hint forced the
    broadcast."""

    messages: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    fell_back: list[bool] = field(default_factory=list)

    def summary(self) -> dict:
        seconds = np.array(self.seconds)
        return {"lookup_messages": float(np.mean(self.messages)),
                "lookup_messages_total": int(np.sum(self.messages)),
                "lookup_ms_mean": float(np.mean(seconds) * 1e3),
                "lookup_ms_p95": float(np.percentile(seconds, 95) * 1e3),
                "lookup_fallback": float(np.mean(self.fell_back))}


def lookups(world: World, mode: LookupMode, *, centers: int = 3, stale_hint_share: float = 0.0,
            seed: int = 0) -> LookupResult:
    """Every client's back-to-source lookup as docs/schemes/dispatch.md describes. The random
    draws (streamer, staleness, stale hint) do not depend on ``mode`` or
    ``stale_hint_share``: both modes look up the same streams, and the stale hints at a
    share are a subset of those at a larger one."""
    placed = place_centers(world, centers)
    names = [f"center{k}" for k in range(centers)]
    site_of = {node.name: node.site for node in world.nodes}
    directory = Directory(names, {(names[a], names[b]):
                                  2 * world.geography.delay(site_of[placed[a].name],
                                                            placed[b].name)
                                  for a in range(centers) for b in range(a + 1, centers)})
    nearest_center, nearest_node = {}, {}
    for site in world.geography.regions:
        nearest_center[site] = names[min(range(centers), key=lambda k: world.geography.delay(
            site, placed[k].name))]
        nearest_node[site] = min(world.nodes,
                                 key=lambda node: world.geography.delay(site, node.name)).name
    by_center: dict[str, list[ModelClient]] = defaultdict(list)
    for client in world.clients:
        by_center[nearest_center[client.site]].append(client)
        directory.register(nearest_center[client.site], client.name, nearest_node[client.site])
    if len(by_center) < 2:
        raise ValueError("every client is at one center: no stream needs a lookup")
    elsewhere = {asker: [c for name in names if name != asker for c in by_center.get(name, ())]
                 for asker in by_center}
    rng = np.random.default_rng([seed, 1004])
    draws = rng.uniform(size=(len(world.clients), 3))
    result = LookupResult()
    for client, (pick, staleness, wrong) in zip(world.clients, draws):
        asker = nearest_center[client.site]
        others = elsewhere[asker]
        streamer = others[int(pick * len(others))]
        owner = nearest_center[streamer.site]
        hint = owner
        if staleness < stale_hint_share:
            # Where the streamer was registered before, say: any center but the owner.
            stale = [name for name in names if name not in (owner, asker)] or [asker]
            hint = stale[int(wrong * len(stale))]
        found = directory.lookup(asker, streamer.name, mode, hint=hint)
        if found.center != owner:
            raise AssertionError(f"lookup of {streamer.name} found {found.center}, not {owner}")
        result.messages.append(found.messages)
        result.seconds.append(found.seconds)
        result.fell_back.append(found.fell_back)
    return result


@dataclass(frozen=True)
class Join:
    """One viewer's stay in a room: its protocol, when it joins and leaves (s)."""

    room: str
    client: str
    protocol: str
    join_s: float
    leave_s: float


@dataclass(frozen=True)
class TranscodingResult:
    """Transcoder-seconds (summed over rooms and protocols), transcoder starts, and the joins
    of another protocol that found its transcoder not running."""

    transcoder_s: float
    starts: int
    cold_joins: int
    other_joins: int


def transcoding(joins: list[Join], sources: dict[str, str], horizon_s: float,
                mode: str) -> TranscodingResult:
    """The transcoders ``joins`` need in rooms of source protocols ``sources`` (room ->
    protocol) over ``horizon_s``: under ``passive`` a (room, protocol) transcoder runs from the
    join :class:`~.rooms.Transcoding` says started it to the leave it says stopped it (or the
    horizon); under ``always`` every (room, protocol) that any join asks for runs the whole
    horizon and no join finds it cold."""
    if mode not in ("passive", "always"):
        raise ValueError(f"mode is passive or always, not {mode!r}")
    other = [j for j in joins if j.protocol != sources[j.room] and j.join_s <= horizon_s]
    if mode == "always":
        wanted = {(j.room, j.protocol) for j in other}
        return TranscodingResult(len(wanted) * horizon_s, len(wanted), 0, len(other))
    rooms = Transcoding()
    for room, protocol in sources.items():
        rooms.open(room, protocol)
    # Leaves before joins at the same instant: a viewer replacing another keeps nothing running.
    events = sorted([(j.leave_s, 0, j) for j in joins] + [(j.join_s, 1, j) for j in joins],
                    key=lambda event: (event[0], event[1]))
    since: dict[tuple[str, str], float] = {}
    running_s, starts, cold = 0.0, 0, 0
    for at, is_join, join in events:
        if at > horizon_s:
            break
        if is_join:
            started = rooms.join(join.room, join.client, join.protocol)
            if started is not None:
                since[started], starts, cold = at, starts + 1, cold + 1
        else:
            stopped = rooms.leave(join.room, join.client, join.protocol)
            if stopped is not None:
                running_s += at - since.pop(stopped)
    running_s += sum(horizon_s - at for at in since.values())
    return TranscodingResult(running_s, starts, cold, len(other))


def room_joins(seed: int, *, rooms: int = 100, rate_per_room: float = 0.02,
               stay_s: float = 600.0, other_share: float = 0.1, horizon_s: float = 3600.0,
               source: str = "rtmp", other: str = "webrtc") -> tuple[list[Join], dict[str, str]]:
    """A seeded workload for :func:`transcoding`: viewers join each of ``rooms`` as a Poisson
    process of ``rate_per_room`` per second over ``horizon_s``, stay an exponential
    ``stay_s`` on average, and play ``other`` with probability ``other_share`` (else the
    rooms' ``source``). Returns the joins and each room's source protocol."""
    rng = np.random.default_rng([seed, 1007])
    joins, sources = [], {}
    for r in range(rooms):
        room = f"room{r}"
        sources[room] = source
        at = rng.exponential(1 / rate_per_room)
        while at < horizon_s:
            protocol = other if rng.uniform() < other_share else source
            joins.append(Join(room, f"{room}/v{len(joins)}", protocol, float(at),
                              float(at + rng.exponential(stay_s))))
            at += rng.exponential(1 / rate_per_room)
    return joins, sources
