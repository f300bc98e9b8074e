"""surveillance at model level: the paper's test as a discrete-event simulation (SimPy)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import simpy
from pydantic import BaseModel, ConfigDict, Field, model_validator

from controller.policies.surveillance.balancer import Balancer, Choice, Cluster, Refusal, make
from controller.policies.surveillance.load import (HEAVY_ABOVE, LIGHT_BELOW, Hardware,
                                                   LoadWeights, Queue, Usage,
                                                   capacity_weights, node_load, node_weights,
                                                   queue_of)
from edgebed import clock

# About 1x, 2x and 4x: CPU clock x count (GHz), memory (GB), link (Mbit/s), disk (GB).
PAPER_NODES = (Hardware(2 * 2.4, 4, 100, 500), Hardware(4 * 2.8, 8, 200, 1000),
               Hardware(8 * 3.2, 16, 400, 2000))


class Workload(BaseModel):
    """The test's parameters (docs/schemes/surveillance.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: int = Field(3, ge=1, description="node servers, cycling through PAPER_NODES' kinds")
    cameras: int = Field(100, ge=1, description="cameras")
    hot: int = Field(10, ge=0, description="hot cameras")
    hot_factor: float = Field(10.0, ge=1, description="how much likelier a hot camera is "
                                                      "requested")
    requests: int = Field(1000, ge=1, description="client requests")
    horizon_s: float = Field(600.0, gt=0, description="requests arrive within this time (s)")
    session_mean_s: float = Field(60.0, gt=0, description="mean session (exponential, s)")
    bitrate_mbps: float = Field(4.0, gt=0, description="a camera stream's bitrate (Mbit/s)")
    cpu_ghz_per_mbps: float = Field(0.04, ge=0, description="CPU per Mbit/s received or sent")
    memory_gb_base: float = Field(0.5, ge=0, description="a node's memory when idle (GB)")
    memory_gb_per_stream: float = Field(0.01, ge=0, description="memory per session and "
                                                                "stream received (GB)")
    period_s: float = Field(5.0, gt=0, description="load report period (s)")
    sample_s: float = Field(1.0, gt=0, description="utilisation sampling interval (s)")
    weights: LoadWeights = Field(default_factory=LoadWeights, description="R1..R4")
    shift: float = Field(1.0, gt=0, description="MAXL* = MAXL - min MAXL + shift")
    light_below: float = Field(LIGHT_BELOW, gt=0, le=1, description="light queue: L below")
    heavy_above: float = Field(HEAVY_ABOVE, gt=0, description="heavy queue: L above")
    max_depth: int = Field(4, ge=0, description="the improved algorithm's deepest cascade")
    weighting: Literal["zscore", "capacity"] = Field(
        "zscore", description="node weights W: the paper's z-scores (eq. 3-5) or capacity "
                              "shares (load.capacity_weights)")
    notify_when: Literal["heavy", "queue"] = Field(
        "heavy", description="active notification: when a node turns heavy (the paper's "
                             "step 3) or whenever it leaves its queue for a busier one (its "
                             "section 3.1(4): light turning moderate or heavy)")
    burst_requests: int = Field(0, ge=0, description="extra requests, all for one camera, "
                                                     "arriving in a burst")
    burst_camera: int = Field(0, ge=0, description="the burst's camera (index; 0 is hot)")
    burst_at_s: float = Field(302.5, ge=0, description="when the burst starts (s)")
    burst_span_s: float = Field(1.0, gt=0, description="how long the burst lasts (s)")

    @model_validator(mode="after")
    def _burst_camera_exists(self) -> Workload:
        if self.burst_camera >= self.cameras:
            raise ValueError(f"burst_camera {self.burst_camera} is not one of the "
                             f"{self.cameras} cameras (0 to {self.cameras - 1})")
        return self

    def hardware(self) -> list[Hardware]:
        return [PAPER_NODES[i % len(PAPER_NODES)] for i in range(self.nodes)]

    def node_weights(self) -> np.ndarray:
        """W of each node by :attr:`weighting`."""
        if self.weighting == "capacity":
            return capacity_weights(self.hardware(), self.weights)
        return node_weights(self.hardware(), self.weights, self.shift)

    def offered_load(self) -> float:
        """The client bandwidth the requests ask for on average (arrival rate x mean session
        x bitrate, the burst left out) as a share of the cluster's links, or of its CPU when
        that share is larger. Streams into the nodes are left out, so it is a lower bound of
        the load: at 1 or more the cluster cannot admit every request."""
        sending = self.requests / self.horizon_s * self.session_mean_s * self.bitrate_mbps
        nodes = self.hardware()
        return max(sending / sum(node.bandwidth_mbps for node in nodes),
                   self.cpu_ghz_per_mbps * sending / sum(node.cpu_ghz for node in nodes))


@dataclass(frozen=True)
class Trace:
    """The requests: arrival time (s), camera index, session length (s), whether it is one of
    the burst's, in arrival order."""

    arrival_s: np.ndarray
    camera: np.ndarray
    session_s: np.ndarray
    burst: np.ndarray


def draw_trace(workload: Workload, seed: int) -> Trace:
    """The same requests for every balancer given the same seed (the burst drawn after the
    rest, so a burst leaves the other requests as they were)."""
    rng = np.random.default_rng(seed)
    popularity = np.ones(workload.cameras)
    popularity[:workload.hot] = workload.hot_factor
    n, extra = workload.requests, workload.burst_requests
    arrival = np.sort(rng.uniform(0, workload.horizon_s, n))
    camera = rng.choice(workload.cameras, n, p=popularity / popularity.sum())
    session = rng.exponential(workload.session_mean_s, n)
    arrival = np.concatenate([arrival, rng.uniform(
        workload.burst_at_s, workload.burst_at_s + workload.burst_span_s, extra)])
    camera = np.concatenate([camera, np.full(extra, workload.burst_camera)])
    session = np.concatenate([session, rng.exponential(workload.session_mean_s, extra)])
    burst = np.arange(n + extra) >= n
    order = np.argsort(arrival, kind="stable")
    return Trace(arrival[order], camera[order], session[order], burst[order])


def make_balancer(name: str, workload: Workload, seed: int) -> Balancer:
    """A fresh balancer ``name`` for one run."""
    return make(name, workload.max_depth, seed)


@dataclass(frozen=True)
class Outcome:
    """A run: ``samples`` one row per sample and node (time_s, node, cpu, memory, bandwidth,
    load: the true indicators and L), ``metrics`` the run's figures (see :func:`simulate`)."""

    samples: pd.DataFrame
    metrics: dict[str, float]


class _Nodes:
    """The nodes' true resource use, kept from the streams the cluster carries."""

    def __init__(self, workload: Workload, names: list[str]) -> None:
        self.workload = workload
        self.hardware = dict(zip(names, workload.hardware()))
        self.received = dict.fromkeys(names, 0)  # streams in: camera or cascade
        self.feeds = dict.fromkeys(names, 0)  # cascade copies out
        self.sessions = dict.fromkeys(names, 0)

    def usage(self, name: str, sessions: int = 0, received: int = 0, feeds: int = 0) -> Usage:
        """The node's indicators, with the given streams added."""
        w, hw = self.workload, self.hardware[name]
        inbound = w.bitrate_mbps * (self.received[name] + received)
        outbound = w.bitrate_mbps * (self.sessions[name] + sessions + self.feeds[name] + feeds)
        held = self.sessions[name] + sessions + self.received[name] + received
        return Usage(cpu=w.cpu_ghz_per_mbps * (inbound + outbound) / hw.cpu_ghz,
                     memory=(w.memory_gb_base + w.memory_gb_per_stream * held) / hw.memory_gb,
                     bandwidth=max(inbound, outbound) / hw.bandwidth_mbps)

    def load(self, name: str) -> float:
        return node_load(self.usage(name), self.workload.weights)

    def fits(self, name: str, **added: int) -> bool:
        usage = self.usage(name, **added)
        return usage.cpu <= 1 and usage.bandwidth <= 1


def simulate(workload: Workload, balancer_name: str, seed: int,
             clock: Callable[[], float] = clock.real_elapsed,
             camera_stops: Mapping[int, float] | None = None) -> Outcome:
    """One run of the test with balancer ``balancer_name``. Metrics:

    ``cv_load``, ``cv_cpu``, ``cv_bandwidth``: the coefficient of variation across nodes of L,
    I_cpu, I_bw at each sample, averaged over the samples with any load; ``peak_load``,
    ``peak_cpu``, ``peak_bandwidth``: the highest of any node at any sample; ``overloads``:
    times a node's L passed the heavy threshold; ``heavy_max_s``: the longest time a node stayed
    heavy; ``heavy_unnoticed_max_s``: the longest time a node was heavy while the balancer still
    had it in another queue (what active notification shortens); ``notifications``: reports sent
    at once; ``rejected``, ``rejected_by_balancer``, ``rejected_by_node``; ``clients_per_stream``:
    sessions per camera streaming, averaged over the samples; ``cascades``: helpers added;
    ``rejected_share``: rejections as a share of the requests; ``burst_rejected``: the burst's
    requests rejected; ``strong_lead_cpu``, ``strong_lead_bandwidth``: the time-mean
    utilisation of the strongest node (of the largest weight) less the highest time-mean of the
    other nodes, in percentage points (above 0: the strongest node is loaded most, as in the
    paper's Fig. 3(a)); ``offered_load``: :meth:`Workload.offered_load`;
    ``max_depth``, ``mean_depth``: cascade hops from the origin to the serving node, deepest and
    averaged over the sessions; ``cascade_mbps``: cascade copies' bandwidth averaged over time,
    ``cascade_share``: as a share of what the nodes sent to clients; ``decision_us``: the
    balancer's mean time per decision on this machine.

    ``camera_stops`` (camera index -> time) makes cameras stop streaming: at that time every
    session watching one ends, counted in ``dropped``, its nodes stop receiving it, and later
    requests for it are rejected (the node cannot pull the stream), counted in
    ``rejected_offline`` (part of ``rejected_by_node``)."""
    trace = draw_trace(workload, seed)
    names = [f"node{i + 1}" for i in range(workload.nodes)]
    weights = workload.node_weights()
    cluster = Cluster.of(dict(zip(names, weights)), light_below=workload.light_below,
                         heavy_above=workload.heavy_above)
    balancer = make_balancer(balancer_name, workload, seed)
    nodes = _Nodes(workload, names)
    env = simpy.Environment()
    counts = dict.fromkeys(("rejected_by_balancer", "rejected_by_node", "rejected_offline",
                            "burst_rejected", "dropped", "overloads", "notifications",
                            "cascades"), 0)
    stopped: set[str] = set()
    depths: list[int] = []
    decision_s = 0.0
    heavy_since: dict[str, float | None] = dict.fromkeys(names)
    unnoticed_since: dict[str, float | None] = dict.fromkeys(names)
    spells = {"heavy_max_s": 0.0, "heavy_unnoticed_max_s": 0.0}

    def notifies(load: float, known: Queue) -> bool:
        """Whether a node of true ``load`` the balancer has in queue ``known`` reports at
        once (:attr:`Workload.notify_when`)."""
        queue = queue_of(load, workload.light_below, workload.heavy_above)
        return queue > known and (queue == Queue.HEAVY or workload.notify_when == "queue")

    def watch(name: str) -> None:
        """After ``name``'s streams changed: overload spells, active notification."""
        load = nodes.load(name)
        heavy = load > workload.heavy_above
        if balancer.active_notification and notifies(load, cluster.queue(name)):
            cluster.report(name, load)
            counts["notifications"] += 1
        if heavy and heavy_since[name] is None:
            heavy_since[name] = env.now
            counts["overloads"] += 1
        elif not heavy and heavy_since[name] is not None:
            spells["heavy_max_s"] = max(spells["heavy_max_s"], env.now - heavy_since[name])
            heavy_since[name] = None
        unnoticed = heavy and cluster.nodes[name].load <= workload.heavy_above
        if unnoticed and unnoticed_since[name] is None:
            unnoticed_since[name] = env.now
        elif not unnoticed and unnoticed_since[name] is not None:
            spells["heavy_unnoticed_max_s"] = max(spells["heavy_unnoticed_max_s"],
                                                  env.now - unnoticed_since[name])
            unnoticed_since[name] = None

    def session(camera: str, node: str, length: float):
        yield env.timeout(length)
        if camera in stopped:
            return  # ended when the camera stopped
        chain = cluster.chain(camera)
        before = list(chain)
        cluster.release(camera, node)
        nodes.sessions[node] -= 1
        after = cluster.chain(camera)
        for gone in before[len(after):]:
            nodes.received[gone] -= 1
            feeder = before[before.index(gone) - 1] if before.index(gone) else None
            if feeder is not None:
                nodes.feeds[feeder] -= 1
        for name in set(before):
            watch(name)

    def refusal(camera: str, choice: Choice | Refusal) -> tuple[str, ...]:
        """The counters a request for ``camera`` refused counts in (none: it is admitted)."""
        if isinstance(choice, Refusal):
            return ("rejected_by_balancer",)
        if camera in stopped:
            return ("rejected_by_node", "rejected_offline")
        joining = choice.node in cluster.chain(camera)
        if not nodes.fits(choice.node, sessions=1, received=0 if joining else 1) or (
                choice.feeder is not None and not nodes.fits(choice.feeder, feeds=1)):
            return ("rejected_by_node",)
        return ()

    def arrivals():
        nonlocal decision_s
        for at, index, length, in_burst in zip(trace.arrival_s, trace.camera, trace.session_s,
                                               trace.burst):
            yield env.timeout(at - env.now)
            camera = f"camera{index + 1}"
            started = clock()
            choice = balancer.choose(camera, cluster)
            decision_s += clock() - started
            refused = refusal(camera, choice)
            for key in refused + (("burst_rejected",) if refused and in_burst else ()):
                counts[key] += 1
            if refused:
                continue
            joining = choice.node in cluster.chain(camera)
            if not joining:
                nodes.received[choice.node] += 1
                if choice.feeder is not None:
                    nodes.feeds[choice.feeder] += 1
                    counts["cascades"] += 1
            path = cluster.assign(camera, choice)
            nodes.sessions[choice.node] += 1
            depths.append(len(path) - 1)
            for name in {choice.node, choice.feeder} - {None}:
                watch(name)
            env.process(session(camera, choice.node, length))

    def stop(camera: str, at: float):
        yield env.timeout(at)
        stopped.add(camera)
        chain = cluster.chain(camera)
        for position, name in enumerate(chain):
            nodes.received[name] -= 1
            if position + 1 < len(chain):
                nodes.feeds[name] -= 1
        for name, ended in cluster.stop(camera).items():
            nodes.sessions[name] -= ended
            counts["dropped"] += ended
            watch(name)

    def reports():
        while True:
            yield env.timeout(workload.period_s)
            for name in names:
                cluster.report(name, nodes.load(name))
                watch(name)

    samples: list[tuple] = []
    streaming: list[tuple[int, int, int]] = []  # per sample: sessions, cameras, cascade copies

    def sampler():
        while True:
            yield env.timeout(workload.sample_s)
            for name in names:
                usage = nodes.usage(name)
                samples.append((env.now, name, usage.cpu, usage.memory, usage.bandwidth,
                                node_load(usage, workload.weights)))
            streaming.append((sum(nodes.sessions.values()), len(cluster.chains),
                              sum(nodes.feeds.values())))

    for index, at in (camera_stops or {}).items():
        env.process(stop(f"camera{index + 1}", at))
    env.process(arrivals())
    env.process(reports())
    env.process(sampler())
    env.run(until=workload.horizon_s)
    for name in names:  # spells still open at the end count up to the end
        for since, key in ((heavy_since[name], "heavy_max_s"),
                           (unnoticed_since[name], "heavy_unnoticed_max_s")):
            if since is not None:
                spells[key] = max(spells[key], env.now - since)
    table = pd.DataFrame(samples, columns=["time_s", "node", "cpu", "memory", "bandwidth",
                                           "load"])
    sessions, cameras, feeds = (np.array(column, dtype=float) for column in zip(*streaming))
    with np.errstate(invalid="ignore", divide="ignore"):
        per_stream = np.where(cameras > 0, sessions / cameras, np.nan)
    delivered = sessions.sum()
    rejected = counts["rejected_by_balancer"] + counts["rejected_by_node"]
    strongest = weights == weights.max()
    metrics = {
        "cv_load": _mean_cv(table, "load"), "cv_cpu": _mean_cv(table, "cpu"),
        "cv_bandwidth": _mean_cv(table, "bandwidth"),
        "peak_load": table["load"].max(), "peak_cpu": table["cpu"].max(),
        "peak_bandwidth": table["bandwidth"].max(),
        **spells, **counts, "rejected": rejected,
        "rejected_share": rejected / len(trace.arrival_s),
        "strong_lead_cpu": _strong_lead(table, names, strongest, "cpu"),
        "strong_lead_bandwidth": _strong_lead(table, names, strongest, "bandwidth"),
        "offered_load": workload.offered_load(),
        "clients_per_stream": float(np.nanmean(per_stream)) if np.isfinite(per_stream).any()
        else math.nan,
        "max_depth": max(depths, default=0), "mean_depth": float(np.mean(depths)) if depths
        else 0.0,
        "cascade_mbps": workload.bitrate_mbps * feeds.mean(),
        "cascade_share": feeds.sum() / delivered if delivered else 0.0,
        "decision_us": decision_s / len(trace.arrival_s) * 1e6,
    }
    return Outcome(table, metrics)


def _strong_lead(samples: pd.DataFrame, names: list[str], strongest: np.ndarray,
                 column: str) -> float:
    """The strongest nodes' time-mean utilisation (``column``) less the highest time-mean of
    the others, in percentage points (NaN when every node is of the strongest kind)."""
    means = samples.groupby("node")[column].mean().reindex(names).to_numpy()
    if strongest.all():
        return math.nan
    return 100 * (means[strongest].mean() - means[~strongest].max())


def _mean_cv(samples: pd.DataFrame, column: str) -> float:
    """The coefficient of variation across nodes at each sample time, averaged over the
    samples whose mean is above 0."""
    by_time = samples.groupby("time_s")[column]
    mean, spread = by_time.mean(), by_time.std(ddof=0)
    busy = mean > 0
    return float((spread[busy] / mean[busy]).mean()) if busy.any() else math.nan
