"""dispatch at model level, gray failures: the ``dispatch_gray`` kind of experiment cell.

A cell draws media nodes and viewers (each viewer ranks the nodes in an order of its own,
seeded) and a timeline of gray failures: each node, while well, starts one at ``failure_rate``
a second, lasting an exponential time of mean ``failure_mean``; ``path_share`` of them are its
path from the origin turning lossy (its reports go on, their probes poor), the others the node
stalling (its reports stop). Healthy probes come out poor now and then (``probe_noise``). The
load reports of every step go through the dispatch center's own detector
(:class:`controller.policies.dispatch.gray_failover.GrayFailureDetector`); under ``on`` the
center moves each viewer of a node it finds failing to the viewer's next ranked node that is
not failing and has room, under ``off`` nobody moves. No packet is sent.
"""

from __future__ import annotations

import collections
import math
from typing import Annotated

import networkx as nx
import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from controller.policies.dispatch.gray_failover import GrayFailureDetector
from controller.policy import LoadReport, State
from edgebed.protocol import path_metric
from experiments.kinds.dispatch.model import Seconds, Share
from experiments.report import swept_values
from experiments.sweeps.kinds import Cell, Kind, Metric

POLICIES = ("off", "on")
ORIGIN = "10.0.0.1"  # the origin's address the reports probe
HISTORY = 8  # reports kept per node, as a bounded controller history would
POOR_LOSS = 0.05  # a poor probe's loss: well over VIA's 1.2%
Positive = Annotated[Seconds, Field(gt=0)]


class Parameters(BaseModel):
    """One cell: the nodes and viewers, the failures, the probes and the detection (times in
    seconds or with a unit: ``500ms``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: int = Field(20, ge=2, description="media nodes")
    viewers: int = Field(400, ge=1, description="viewers")
    headroom: float = Field(1.5, ge=1, description="capacity over the viewers' even share")
    horizon: Positive = Field(600.0, description="time looked at")
    report_period: Positive = Field(1.0, description="load report period")
    failure_rate: float = Field(0.02, ge=0, description="gray failures a second, per node "
                                                        "that is well")
    failure_mean: Positive = Field(60.0, description="mean length of a failure")
    path_share: Share = Field(0.5, description="failures that are a lossy path (the rest: "
                                               "the node stalls)")
    probe_noise: Share = Field(0.05, description="healthy probes that come out poor")
    detection_time: Positive = Field(3.0, description="the center's detection time")
    gop: Annotated[Seconds, Field(ge=0)] = Field(2.0, description="a player waits this long "
                                                                  "for an I frame once its "
                                                                  "stream is back")


def failures(p: Parameters, rng: np.random.Generator, steps: int) -> np.ndarray:
    """Each node's state at each step: 0 well, 1 path poor, 2 stalled."""
    state = np.zeros((p.nodes, steps), dtype=np.int8)
    start = p.failure_rate * p.report_period  # chance a well node starts one in a step
    for node in range(p.nodes):
        step = 0
        while step < steps:
            if rng.random() < start:
                length = max(1, math.ceil(rng.exponential(p.failure_mean) / p.report_period))
                state[node, step:step + length] = 1 if rng.random() < p.path_share else 2
                step += length
            else:
                step += 1
    return state


def run_cell(cell: Cell) -> list[dict[str, object]]:
    """One row: the cell's timeline under its policy."""
    p: Parameters = cell.parameters
    return [simulate(p, cell.policy == "on", cell.seed)]


def simulate(p: Parameters, failover: bool, seed: int) -> dict[str, float]:
    """Freeze share, moves and detection delay over the cell's timeline (:data:`METRICS`)."""
    rng = np.random.default_rng(seed)
    steps = max(1, round(p.horizon / p.report_period))
    truth = failures(p, rng, steps)
    names = [f"n{node}" for node in range(p.nodes)]
    capacity = math.ceil(p.viewers / p.nodes * p.headroom)
    ranking = [rng.permutation(p.nodes) for _ in range(p.viewers)]
    load = np.zeros(p.nodes, dtype=int)
    on = np.empty(p.viewers, dtype=int)
    for viewer, ranked in enumerate(ranking):
        on[viewer] = next(node for node in ranked if load[node] < capacity)
        load[on[viewer]] += 1
    detector = GrayFailureDetector(p.detection_time)
    reports = [collections.deque(maxlen=HISTORY) for _ in names]
    interrupted = np.zeros(p.viewers, dtype=bool)
    waiting_until = np.full(p.viewers, -math.inf)  # for an I frame
    frozen = moves = needless = stranded = 0
    delays: list[float] = []
    began = np.full(p.nodes, -1)  # the step the node's current failure began
    for step in range(steps):
        now = step * p.report_period
        for node, name in enumerate(names):
            if truth[node, step] and (step == 0 or not truth[node, step - 1]):
                began[node] = step
            if truth[node, step] == 2:
                continue  # stalled: no report
            poor = truth[node, step] == 1 or rng.random() < p.probe_noise
            reports[node].append(LoadReport(name, now, float(load[node]), {
                path_metric(ORIGIN, "loss"): POOR_LOSS if poor else 0.0,
                path_metric(ORIGIN, "rtt"): 0.05, path_metric(ORIGIN, "jitter"): 0.001}))
        if failover:
            state = State(nx.MultiDiGraph(), (), (), now=now,
                          loads={name: tuple(reports[node]) for node, name in enumerate(names)})
            detector.observe(state, ORIGIN)
            failing = {names.index(name) for name in detector.failing(state, names)}
            for viewer in np.flatnonzero(np.isin(on, list(failing))):
                target = next((node for node in ranking[viewer]
                               if node not in failing and load[node] < capacity), None)
                if target is None:
                    stranded += 1
                    continue
                old = on[viewer]
                moves += 1
                if truth[old, step]:
                    delays.append((step - began[old]) * p.report_period)
                else:
                    needless += 1
                load[old] -= 1
                load[target] += 1
                on[viewer] = target
                interrupted[viewer] = False
                waiting_until[viewer] = now + p.gop
        down = truth[on, step] > 0
        back = interrupted & ~down  # its node recovered under it
        waiting_until[back] = now + p.gop
        interrupted = down
        frozen += int(np.count_nonzero(down | (waiting_until > now)))
    return {"freeze_share": frozen / (p.viewers * steps),
            "failing_share": float(np.count_nonzero(truth)) / truth.size,
            "moves_per_viewer": moves / p.viewers,
            "needless_moves": needless,
            "stranded": stranded,
            "detection_s_mean": float(np.mean(delays)) if delays else float("nan")}


METRICS = (
    Metric("freeze_share", "viewer time frozen (on a failing node, or waiting for an I frame "
           "after it)", "share"),
    Metric("failing_share", "node time in a gray failure", "share"),
    Metric("moves_per_viewer", "moves per viewer"),
    Metric("needless_moves", "moves away from a node that was well (a probe's noise)"),
    Metric("stranded", "viewer-steps on a failing node with nowhere to go"),
    Metric("detection_s_mean", "failure start to move, mean", "s"),
)

ABOUT = """\
**Everything is a model**: media nodes, viewers each ranking the nodes in a seeded order of
their own (their nearest first, as a center would rank them), and gray failures drawn per
node: while well, a node starts one at `failure_rate` a second, of exponential length (mean
`failure_mean`), a lossy path from the origin (`path_share` of them: its load reports go on,
their probes poor) or the node stalled (its reports stop). A viewer on a failing node is
frozen (a lossy path without retransmission loses part of nearly every frame; a stalled node
sends nothing), and once its stream is back, from its node or from a new one, it waits `gop`
for an I frame. Healthy probes come out poor at `probe_noise`. The reports go through the
dispatch center's own detector (`controller/policies/dispatch/gray_failover.py`: a path poor
in every report for `detection_time`, or a node silent as long); under `on` the center moves
the viewers of each node it finds failing to their next ranked node that is not failing and
has room, under `off` (the switches' fast failover alone, which sees no carrier loss here)
they wait for their node. Intervals are 95% Student-t intervals over repetitions."""


def remarks(results: pd.DataFrame) -> list[str]:
    """The freeze share with and without failover at each swept value."""
    found = []
    for sweep, at, group in swept_values(results, by_number=True):
        means = group.groupby("policy")[["freeze_share", "needless_moves"]].mean()
        if set(POLICIES) <= set(means.index):
            found.append(f"{sweep}, {at}: viewers frozen {means.loc['on', 'freeze_share']:.1%} "
                         f"of the time with dispatch-level failover against "
                         f"{means.loc['off', 'freeze_share']:.1%} without; "
                         f"{means.loc['on', 'needless_moves']:.1f} needless moves a cell.")
    return found


KINDS = (Kind(name="dispatch_gray", parameters=Parameters, policies=POLICIES, run=run_cell,
              metrics=METRICS, plots=("freeze_share", "moves_per_viewer", "needless_moves",
                                      "detection_s_mean"),
              about=ABOUT, remarks=remarks),)
