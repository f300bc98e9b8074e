"""The QoE model of live_edge (Liu, Zhang, Du, Peng, *JCRD* 60(8), 2023): allocating the viewers
of interactive live streams to edge servers and bitrates. A **reconstruction**."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Mapping

import numpy as np
from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as validated_dataclass
from scipy.spatial.distance import cdist

from controller.policies.live_edge.danmaku import draw_rates
from controller.policies.live_edge.geometry import GEOMETRIES, melbourne, planar
from edgebed.quantities import PositiveDuration

MBPS = 1e6
MS = 1e-3
# 360p, 480p, 720p, 1080p: the paper's Table 2 is lost; these follow its Twitch data set.
DEFAULT_LADDER = (1.0 * MBPS, 2.5 * MBPS, 5.0 * MBPS, 8.0 * MBPS)
SOURCE_BITRATE = 8.0 * MBPS
# Slack on every capacity, a millionth of it: covers float rounding of sums of bitrates and the
# MILP solver's feasibility tolerance, far below any bitrate step.
SLACK = 1e-6
DANMAKU_MODELS = ("uniform", "bilibili")
QOE_BLOCK = 1024  # viewers per block when tabulating QoE (1024 x 100 servers x 5 rungs: 4 MB)

Weight = Annotated[float, Field(ge=0)]


@validated_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class Weights:
    """The model's weights and constants, in SI units; defaults are the paper's (Table 3) where
    it gives one and the project's choice where it does not (gamma, alpha, k)."""

    a: Weight = Field(5.0, description="weight of interaction experience Q")
    b: Weight = Field(1.0, description="weight of video quality U")
    c: Weight = Field(1.0, description="weight of the bitrate-drop penalty E")
    d: Weight = Field(1.0, description="weight of the server-switch penalty S")
    G: Weight = Field(5e-8, description="transcoding delay, seconds per bit/s taken off the "
                                        "source (paper: 50 ms/Mbps)")
    H: Weight = Field(5e-7, description="transcoding compute, vCPU per bit/s taken off the "
                                        "source (paper: 0.5 vCPU/Mbps)")
    beta: PositiveDuration = Field(
        300 * MS, description="latency (s) beyond which interaction turns negative "
                              "(paper: 300 ms)")
    # gamma = 1 makes I_v the danmaku rate in messages per second, so the paper's interaction
    # demand ranges (0,1), (1,2), (2,3) read directly as danmaku rates.
    gamma: Weight = Field(1.0, description="interaction demand per danmaku message/s")
    # alpha = 0.1 weighs a median gifter (20 units) 1.3 and a 1000-unit whale 1.7: gifts tilt
    # the allocation toward generous viewers without ever deciding it alone.
    alpha: Weight = Field(0.1, description="gift weight per ln(1 + gift amount)")
    # k = 0.2 per Mbps prices a fall from 8 to 1 Mbps at 1.4, between the switch penalty (d = 1)
    # and the whole quality range (ln 8 = 2.1), so neither penalty dwarfs the other.
    k: Weight = Field(2e-7, description="bitrate-drop penalty per bit/s dropped "
                                        "(0.2 per Mbps)")
    latency_shape: Annotated[float, Field(gt=0)] = Field(
        1.0, description="q in Q = (1 + I)(1 - (L/beta)^q); 1: linear (the spec's)")
    quality_shape: float = Field(
        0.0, description="u in U = ((min(R, R*)/r_min)^u - 1)/u; 0: ln (the spec's)")


@dataclass(frozen=True)
class Viewer:
    """A viewer for one period. ``delays`` maps each covering server m (M(v) is its keys) to
    T(m, v); the streamer's stream enters at ``streamer_edge`` (m_bv) after
    ``streamer_delay`` (T(b_v, m_bv)); without a streamer edge the viewer's own server is the
    origin and the streamer-side legs count 0."""

    name: str
    delays: Mapping[str, float]
    preferred: float  # R*_v
    danmaku_rate: float = 0.0  # F_v, messages per second
    gifts: float = 0.0  # p_v
    previous_server: str | None = None  # None: new this period
    previous_bitrate: float | None = None
    streamer_edge: str | None = None
    streamer_delay: float = 0.0


@dataclass(frozen=True)
class EdgeServer:
    """An edge server: bandwidth D_m, compute C_m, and ``inter_edge``, T(m', m) from each edge
    m' a stream can enter at. A viewer whose streamer edge has no entry here (and is not this
    server) cannot be served from it."""

    name: str
    bandwidth: float  # D_m
    compute: float  # C_m
    inter_edge: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SolverReport:
    """What the exact allocator's MILP solver said: its status (scipy's code: 0 optimal, 1 time
    or node limit), the relative gap and the upper bound on the objective it proved, and
    whether the number of viewers served was proven the most possible (true where the
    objective does not rank serving first)."""

    status: int
    message: str
    gap: float
    bound: float
    served_proven: bool

    @property
    def optimal(self) -> bool:
        return self.status == 0 and self.served_proven


@dataclass(frozen=True)
class Allocation:
    """One period's decision: ``assignment`` maps viewer -> (server, bitrate); ``unassigned``
    lists the viewers nothing fitted; ``solver`` is set by the exact allocator."""

    assignment: Mapping[str, tuple[str, float]]
    unassigned: tuple[str, ...] = ()
    solver: SolverReport | None = None


def check_ladder(ladder: tuple[float, ...], source: float) -> None:
    """ValueError unless ``ladder`` is strictly ascending, positive and tops out at most at the
    source bitrate (a rung above it would need negative transcoding)."""
    if not ladder or ladder[0] <= 0 or any(b <= a for a, b in zip(ladder, ladder[1:])):
        raise ValueError(f"the bitrate ladder must be positive and strictly ascending: {ladder}")
    if ladder[-1] > source:
        raise ValueError(f"the ladder's top rung {ladder[-1]:g} exceeds the source bitrate "
                         f"{source:g}")


@dataclass(frozen=True)
class Instance:
    """One period's allocation problem: the viewers, the servers (with the capacity left for
    this period), the bitrate ladder (bit/s, ascending), the source bitrate R and the weights.
    ``tables`` is the same as numpy arrays, built on first use."""

    viewers: tuple[Viewer, ...]
    servers: tuple[EdgeServer, ...]
    ladder: tuple[float, ...] = DEFAULT_LADDER
    source: float = SOURCE_BITRATE
    weights: Weights = field(default_factory=Weights)

    def __post_init__(self) -> None:
        check_ladder(self.ladder, self.source)
        for kind, names in (("viewer", [v.name for v in self.viewers]),
                            ("server", [s.name for s in self.servers])):
            if len(set(names)) != len(names):
                raise ValueError(f"duplicate {kind} names")
        known = {server.name for server in self.servers}
        for viewer in self.viewers:
            if not known.issuperset(viewer.delays):
                raise ValueError(f"viewer {viewer.name} is covered by unknown servers "
                                 f"{sorted(set(viewer.delays) - known)}")

    @property
    def r_min(self) -> float:
        return self.ladder[0]

    @cached_property
    def tables(self) -> Tables:
        return Tables(self)


# The formulas. Each takes numbers or numpy arrays (broadcasting), so the allocators' tables
# and the evaluation of one allocation run the same code.


def latency(network_delay, bitrate, source: float, w: Weights):
    """L: the network part T(b_v, m_bv) + T(m_bv, m) + T(m, v) plus transcoding delay."""
    return network_delay + w.G * (source - bitrate)


def interaction_demand(danmaku_rate, w: Weights):
    """I_v = gamma * F_v."""
    return w.gamma * danmaku_rate


def interaction_experience(demand, latency, w: Weights):
    """Q = (1 + I) * (1 - (L / beta)^q)."""
    # A latency is never negative; the clip keeps a fractional power real for any input.
    return (1 + demand) * (1 - (np.maximum(latency, 0.0) / w.beta) ** w.latency_shape)


def video_quality(bitrate, preferred, r_min: float, w: Weights):
    """U = box_cox(min(R_v, R*_v) / r_min, u): ln at u = 0, (x^u - 1) / u otherwise."""
    ratio = np.minimum(bitrate, preferred) / r_min
    if w.quality_shape == 0:
        return np.log(ratio)
    return np.expm1(w.quality_shape * np.log(ratio)) / w.quality_shape


def drop_penalty(bitrate, previous, w: Weights):
    """E = k * max(0, Rprev - R_v); ``previous`` NaN for a viewer new this period."""
    # fmax ignores the NaN of a newcomer, leaving 0.
    return w.k * np.fmax(previous - bitrate, 0.0)


def switch_penalty(server, previous):
    """S: 1 where ``server`` differs from ``previous``, as server indices; ``previous`` -1 for
    a viewer new this period (no penalty)."""
    return ((previous >= 0) & (server != previous)).astype(float)


def qoe(interaction, quality, drop, switch, w: Weights):
    """QoE = a*Q + b*U - c*E - d*S."""
    return w.a * interaction + w.b * quality - w.c * drop - w.d * switch


def gift_weight(gifts, w: Weights):
    """Y_v = 1 + alpha * ln(1 + p_v)."""
    return 1 + w.alpha * np.log1p(gifts)


@dataclass(frozen=True)
class Terms:
    """The model's terms for some (viewer, server, bitrate) triples, arrays of one shape."""

    latency: np.ndarray
    interaction: np.ndarray
    quality: np.ndarray
    drop: np.ndarray
    switch: np.ndarray
    qoe: np.ndarray


def headroom(used, capacity):
    """What still fits under ``capacity`` once ``used`` is taken, with the capacity slack."""
    return capacity - used + SLACK * np.maximum(capacity, 1.0)


class Tables:
    """An instance as numpy arrays over viewers (V, in instance order), servers (M) and rungs
    (K): what the allocators and the evaluation index into.

    ``network[v, m]`` is the network part of the latency, inf where m cannot serve v, so
    ``covered`` is where it is finite; ``previous_server`` is -1 for a newcomer and M when last
    period's server is not in the instance (any server is then a switch);
    ``previous_bitrate`` is NaN for a newcomer."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.viewer_index = {viewer.name: i for i, viewer in enumerate(instance.viewers)}
        self.server_index = {server.name: i for i, server in enumerate(instance.servers)}
        self.ladder = np.asarray(instance.ladder, dtype=float)
        w, servers, viewers = instance.weights, instance.servers, instance.viewers
        self.bandwidth = np.array([server.bandwidth for server in servers], dtype=float)
        self.compute = np.array([server.compute for server in servers], dtype=float)
        self.compute_use = (instance.source - self.ladder) * w.H  # per rung, descending

        access = np.full((len(viewers), len(servers)), np.inf)
        rows = [i for i, viewer in enumerate(viewers) for _ in viewer.delays]
        columns = [self.server_index[name] for viewer in viewers for name in viewer.delays]
        access[rows, columns] = [delay for viewer in viewers for delay in viewer.delays.values()]
        # Viewers share a handful of streamer edges: one row of inter-edge delays per edge.
        edges = sorted({viewer.streamer_edge for viewer in viewers} - {None})
        inter = np.array([[0.0 if server.name == edge else server.inter_edge.get(edge, np.inf)
                           for server in servers] for edge in edges] + [[0.0] * len(servers)])
        edge_row = {edge: row for row, edge in enumerate(edges)} | {None: len(edges)}
        streamer = np.array([viewer.streamer_delay for viewer in viewers], dtype=float)
        self.network = (access + inter[[edge_row[v.streamer_edge] for v in viewers]]
                        + streamer[:, None])
        self.covered = np.isfinite(self.network)

        self.preferred = np.array([viewer.preferred for viewer in viewers], dtype=float)
        self.previous_bitrate = np.array(
            [np.nan if v.previous_bitrate is None else v.previous_bitrate for v in viewers])
        self.previous_server = np.array(
            [-1 if v.previous_server is None else self.server_index.get(v.previous_server,
                                                                        len(servers))
             for v in viewers], dtype=int)
        self.demand = interaction_demand(
            np.array([viewer.danmaku_rate for viewer in viewers], dtype=float), w)
        self.weight = gift_weight(np.array([viewer.gifts for viewer in viewers], dtype=float), w)

    def terms(self, viewer, server, bitrate) -> Terms:
        """The terms for viewer and server indices and bitrates (broadcast together)."""
        instance, w = self.instance, self.instance.weights
        lat = latency(self.network[viewer, server], bitrate, instance.source, w)
        interaction = interaction_experience(self.demand[viewer], lat, w)
        quality = video_quality(bitrate, self.preferred[viewer], instance.r_min, w)
        drop = drop_penalty(bitrate, self.previous_bitrate[viewer], w)
        switch = switch_penalty(server, self.previous_server[viewer])
        return Terms(lat, interaction, quality, drop, switch,
                     qoe(interaction, quality, drop, switch, w))

    @cached_property
    def qoe_table(self) -> np.ndarray:
        """QoE for every viewer, server and rung (V x M x K; -inf where m does not cover v),
        computed once, a block of viewers at a time to bound the temporaries: a greedy pass
        then looks its choices up instead of evaluating the model per viewer."""
        viewers, servers, rungs = len(self.preferred), len(self.bandwidth), len(self.ladder)
        table = np.empty((viewers, servers, rungs))
        server = np.arange(servers)[None, :, None]
        for first in range(0, viewers, QOE_BLOCK):
            viewer = np.arange(first, min(first + QOE_BLOCK, viewers))[:, None, None]
            table[first:first + QOE_BLOCK] = self.terms(viewer, server,
                                                        self.ladder[None, None, :]).qoe
        table[~self.covered] = -np.inf
        return table

    def rung_at_least(self, bitrate) -> np.ndarray:
        """The index of the lowest rung at or above ``bitrate`` (the top rung above the
        ladder): a preference snapped up, so that its quality U saturates."""
        index = np.searchsorted(self.ladder, np.asarray(bitrate) * (1 - SLACK), side="left")
        return np.minimum(index, len(self.ladder) - 1)

    def allocation(self, server: np.ndarray, rung: np.ndarray,
                   solver: SolverReport | None = None) -> Allocation:
        """The allocation giving viewer i server index ``server[i]`` at rung ``rung[i]``
        (server -1: unassigned)."""
        viewers, servers = self.instance.viewers, self.instance.servers
        return Allocation(
            {viewers[i].name: (servers[server[i]].name, float(self.ladder[rung[i]]))
             for i in np.flatnonzero(server >= 0)},
            tuple(viewers[i].name for i in np.flatnonzero(server < 0)), solver)


@dataclass(frozen=True)
class Evaluation:
    """An allocation judged by the model. Means are over the served viewers (NaN if none);
    ``switches`` and ``drops`` count the served viewers paying each penalty; ``mean_drop`` is
    the mean bitrate fall (bit/s, 0 for rises and newcomers)."""

    objective: float
    served: int
    unassigned: int
    mean_qoe: float
    mean_latency: float
    mean_bitrate: float
    mean_interaction: float
    switches: int
    drops: int
    mean_drop: float


def evaluate(instance: Instance, allocation: Allocation) -> Evaluation:
    """The objective and the per-viewer averages of ``allocation`` (which must name known
    viewers and servers; bitrates need not be on the ladder)."""
    tables = instance.tables
    pairs = list(allocation.assignment.items())
    viewer = np.array([tables.viewer_index[name] for name, _ in pairs], dtype=int)
    server = np.array([tables.server_index[choice[0]] for _, choice in pairs], dtype=int)
    bitrate = np.array([choice[1] for _, choice in pairs], dtype=float)
    terms = tables.terms(viewer, server, bitrate)
    fall = np.fmax(tables.previous_bitrate[viewer] - bitrate, 0.0)

    def mean(values: np.ndarray) -> float:
        return float(values.mean()) if values.size else float("nan")

    return Evaluation(objective=float(np.sum(tables.weight[viewer] * terms.qoe)),
                      served=len(pairs), unassigned=len(allocation.unassigned),
                      mean_qoe=mean(terms.qoe), mean_latency=mean(terms.latency),
                      mean_bitrate=mean(bitrate), mean_interaction=mean(terms.interaction),
                      switches=int(terms.switch.sum()), drops=int(np.count_nonzero(fall)),
                      mean_drop=mean(fall))


def objective(instance: Instance, allocation: Allocation) -> float:
    """sum_v Y_v * QoE over the assigned viewers."""
    return evaluate(instance, allocation).objective


def violations(instance: Instance, allocation: Allocation) -> list[str]:
    """Every way ``allocation`` breaks the model's constraints (empty: feasible): unknown
    viewers or servers, a viewer both assigned and unassigned or neither, a server not covering
    its viewer, a bitrate off the ladder, a server's bandwidth or compute overrun."""
    tables, problems = instance.tables, []
    names = set(tables.viewer_index)
    assigned, unassigned = set(allocation.assignment), set(allocation.unassigned)
    for label, wrong in (("unknown viewers", (assigned | unassigned) - names),
                         ("viewers both assigned and unassigned", assigned & unassigned),
                         ("viewers neither assigned nor unassigned",
                          names - assigned - unassigned)):
        if wrong:
            problems.append(f"{label}: {sorted(wrong)}")
    used_bandwidth = np.zeros(len(tables.bandwidth))
    used_compute = np.zeros(len(tables.compute))
    for viewer, (server, bitrate) in allocation.assignment.items():
        if viewer not in names:
            continue
        if server not in tables.server_index:
            problems.append(f"{viewer}: unknown server {server}")
            continue
        m = tables.server_index[server]
        if not tables.covered[tables.viewer_index[viewer], m]:
            problems.append(f"{viewer}: server {server} does not cover it")
        if not np.isclose(tables.ladder, bitrate, rtol=SLACK, atol=0).any():
            problems.append(f"{viewer}: bitrate {bitrate:g} is not on the ladder")
        used_bandwidth[m] += bitrate
        used_compute[m] += (instance.source - bitrate) * instance.weights.H
    for resource, used, capacity in (("bandwidth", used_bandwidth, tables.bandwidth),
                                     ("compute", used_compute, tables.compute)):
        for m in np.flatnonzero(headroom(used, capacity) < 0):
            problems.append(f"{instance.servers[m].name}: {resource} {used[m]:g} over "
                            f"{capacity[m]:g}")
    return problems


def generate(seed: int, viewers: int, servers: int, *, side: float = 500.0,
             radius: float = 300.0, access_delay: tuple[float, float] = (5 * MS, 15 * MS),
             edge_delay: tuple[float, float] = (100 * MS, 300 * MS),
             bandwidth: float = 40 * MBPS, compute: float = 15.0, streamers: int = 3,
             danmaku: tuple[float, float] = (0.0, 1.0), gift_share: float = 0.3,
             gift_median: float = 20.0, returning: float = 0.5,
             preference_tilt: float = 0.0, previous_is_preferred: float = 0.0,
             previous_nearest: float = 0.0, geometry: str = "planar",
             danmaku_model: str = "uniform",
             ladder: tuple[float, ...] = DEFAULT_LADDER, source: float = SOURCE_BITRATE,
             weights: Weights | None = None) -> Instance:
    """A random instance, the same for the same arguments.

    Servers ``e0..`` and viewers ``v0..`` lie, with ``geometry`` ``planar``, uniformly in a
    ``side`` x ``side`` metre square, viewers no server covers redrawn
    (:func:`~controller.policies.live_edge.geometry.planar`); with ``eua``, at the Melbourne
    data set's sites and users as the paper draws them
    (:func:`~controller.policies.live_edge.geometry.melbourne`; ``side`` unused). A server
    covers the viewers within ``radius``. The viewer-edge delay grows linearly with distance
    across ``access_delay``, 0 to ``radius`` metres; edge-edge delays are drawn uniformly from
    ``edge_delay``, the same both ways.
    ``streamers`` streamers lie in the square too (at covered users' locations with ``eua``),
    each entering at its nearest server after an access delay by the same rule (capped at
    ``radius``); each viewer watches one, at random.
    Every server has ``bandwidth`` bit/s and ``compute`` vCPU. Per viewer: preferred bitrate
    rung i of K with probability proportional to exp(``preference_tilt`` * i / (K - 1))
    (uniform at 0, more viewers preferring the top at > 0, as in Twitch's resolution data);
    danmaku rate uniform in ``danmaku`` (messages/s; with gamma = 1 the paper's
    interaction-demand range) with ``danmaku_model`` ``uniform``, or with ``bilibili`` the
    paper's measured counts times its room's effect
    (:func:`~controller.policies.live_edge.danmaku.draw_rates`; ``danmaku`` unused); a gift
    with probability ``gift_share``, log-normal with median ``gift_median`` and log-sd 1;
    with probability ``returning`` a previous period, else new. A returning viewer's previous rung is its preferred one with probability
    ``previous_is_preferred``, else a uniform rung; its previous server is its nearest covering
    server with probability ``previous_nearest``, else a uniform covering one. At the last
    three's defaults (0) preferences and history are uniform, the spec's reconstruction."""
    if servers < 1:
        raise ValueError("an instance needs at least one server")
    if geometry not in GEOMETRIES or danmaku_model not in DANMAKU_MODELS:
        raise ValueError(f"geometry is one of {GEOMETRIES}, danmaku_model one of "
                         f"{DANMAKU_MODELS}: not {geometry!r}, {danmaku_model!r}")
    rng = np.random.default_rng(seed)
    layout = (planar(rng, viewers, servers, radius, side) if geometry == "planar"
              else melbourne(rng, viewers, servers, radius))
    server_xy, viewer_xy = layout.servers, layout.viewers
    distance = cdist(viewer_xy, server_xy)
    covering = distance <= radius

    def access(metres: np.ndarray) -> np.ndarray:
        low, high = access_delay
        return low + (high - low) * np.minimum(metres / radius, 1.0)

    upper = np.triu(rng.uniform(*edge_delay, (servers, servers)), 1)
    inter = upper + upper.T
    streamer_distance = cdist(layout.streamers(rng, streamers), server_xy)
    streamer_edge = streamer_distance.argmin(axis=1)
    streamer_delay = access(streamer_distance.min(axis=1))
    room = rng.integers(streamers, size=viewers)
    tilt = np.exp(preference_tilt * np.arange(len(ladder)) / max(len(ladder) - 1, 1))
    cumulative = np.cumsum(tilt) / tilt.sum()
    preferred = np.minimum(np.searchsorted(cumulative, rng.random(viewers), side="right"),
                           len(ladder) - 1)
    rate = (rng.uniform(*danmaku, viewers) if danmaku_model == "uniform"
            else draw_rates(rng, room, streamers))
    gifts = np.where(rng.random(viewers) < gift_share,
                     gift_median * rng.lognormal(0.0, 1.0, viewers), 0.0)
    back = rng.random(viewers) < returning
    previous_rung = np.where(rng.random(viewers) < previous_is_preferred, preferred,
                             rng.integers(len(ladder), size=viewers))
    # A uniform pick among the covering servers: the largest random key among them.
    uniform_server = np.where(covering, rng.random((viewers, servers)), -1.0).argmax(axis=1)
    previous_server = np.where(rng.random(viewers) < previous_nearest,
                               np.where(covering, distance, np.inf).argmin(axis=1),
                               uniform_server)

    names = [f"e{m}" for m in range(servers)]
    delays = access(distance)
    return Instance(
        viewers=tuple(Viewer(
            name=f"v{v}",
            delays={names[m]: float(delays[v, m]) for m in np.flatnonzero(covering[v])},
            preferred=ladder[preferred[v]], danmaku_rate=float(rate[v]), gifts=float(gifts[v]),
            previous_server=names[previous_server[v]] if back[v] else None,
            previous_bitrate=ladder[previous_rung[v]] if back[v] else None,
            streamer_edge=names[streamer_edge[room[v]]],
            streamer_delay=float(streamer_delay[room[v]])) for v in range(viewers)),
        servers=tuple(EdgeServer(names[m], bandwidth, compute,
                                 {names[j]: float(inter[j, m]) for j in range(servers) if j != m})
                      for m in range(servers)),
        ladder=tuple(ladder), source=source, weights=weights or Weights())
