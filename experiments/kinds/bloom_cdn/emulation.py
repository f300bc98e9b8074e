"""bloom_cdn emulated: the ``bloom_cdn_emulation`` kind of experiment cell (one ``edgebed run`` of
``topologies/bloom_cdn/bloom_cdn.yaml`` per cell, the cell's policy its strategy) and what the run measured
beside what the analytic model predicts for it.

:func:`measure` reads a run's tables: the users' response times (``responses``), every job each
queue served (``cdn_queues``) and every lookup at a home node (``cdn_lookups``). The model
(:func:`controller.policies.bloom_cdn.model.evaluate`) is evaluated at the run's measured point:
the queues' mean service times (so an agent whose service draws came out fast or slow is judged
on what it drew), the hit rate, the filter's false positives and false misses, the Chord hops,
each node's share of the lookups and routing services, the offered load. The response time
splits in two: the time in the queues a user waited for (each job's time queued and in
service, summed per request: what the model predicts, with the DC link left out) and the rest,
the network's (transfers over the rate-limited links, the switch, the agents' sockets).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats

from agents.bloom_cdn.bloom_cdn_node import STRATEGIES
from controller.policies.bloom_cdn import model
from experiments.measurements import host_addresses, read_table
from experiments.sweeps.kinds import (EMULATED_METRICS, Cell, EmulatedParameters, Kind, Metric,
                                      edgebed_run, emulated_run, run_record)

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = "topologies/bloom_cdn/bloom_cdn.yaml"
BATCHES = 20  # batch means for the intervals: consecutive requests, by request number
QUEUES = ("routing", "lookup", "fetch", "response")
# The model without the DC link: a run's transfers are in its network time, measured.
READING = model.Reading(dc_link="ignored")


def batch_interval(values_by_order: list[tuple[int, float]], confidence: float = 0.95,
                   batches: int = BATCHES) -> tuple[float, float]:
    """The mean of the values and the half-width of its ``confidence`` Student-t interval from
    ``batches`` batch means of consecutive values (``(order, value)`` pairs: consecutive
    response times are correlated through the queues, batch means much less)."""
    values = np.array([value for _, value in sorted(values_by_order)])
    means = np.array([batch.mean() for batch in np.array_split(values, batches) if len(batch)])
    half = stats.t.ppf(0.5 + confidence / 2, len(means) - 1) * means.std(ddof=1) / math.sqrt(
        len(means))
    return float(values.mean()), float(half)


def measure(run_dir: Path, confidence: float = 0.95) -> dict:
    """The run's figures and the model's prediction at its measured point (see the module's
    docstring), with ``confidence`` intervals."""
    configured = Configured.of(run_dir)
    responses = read_table(run_dir, "responses")
    answered = [row for row in responses if row["response_ms"]]
    queues = read_table(run_dir, "cdn_queues")
    lookups = read_table(run_dir, "cdn_lookups")
    # (user address, request) -> time in the queues the user waited for
    waited = defaultdict(float)
    service = defaultdict(list)
    for row in queues:
        service[row["queue"]].append(float(row["service_ms"]))
        if row["waited"] == "1":
            address, _port, request = row["request"].rsplit(":", 2)
            waited[address, request] += float(row["queued_ms"]) + float(row["service_ms"])
    ordered = [(int(row["request"]), float(row["response_ms"])) for row in answered]
    response_mean, response_half = batch_interval(ordered, confidence)
    addresses = _addresses(run_dir)
    queued = [waited[addresses[row["node"]], row["request"]] for row in answered]
    queued_mean, queued_half = batch_interval(
        [(order, value) for (order, _), value in zip(ordered, queued)], confidence)
    cached = [row["cached"] == "1" for row in lookups]
    filtered = [row for row in lookups if row["filtered"] == "1"]
    fp = sum(r["judged"] == "1" and r["cached"] == "0" for r in filtered) / max(len(filtered), 1)
    fn = sum(r["judged"] == "0" and r["cached"] == "1" for r in filtered) / max(len(filtered), 1)
    hit_rate = float(np.mean(cached)) if cached else 0.0
    home = Counter(row["node"] for row in lookups)
    routing = Counter(row["node"] for row in queues if row["queue"] == "routing")
    names = sorted({row["node"] for row in queues if row["queue"] != "fetch"},
                   key=lambda name: (len(name), name))
    # A queue that served nothing (cut-through's responses at 0 % hits) keeps its rate.
    mean_service = {name: float(np.mean(service[name])) / 1e3 if service[name]
                    else 1 / configured.rates[name] for name in QUEUES}
    strategy = configured.strategy
    setting = model.Setting(
        arrival_rate=configured.arrival_rate, routing_rate=1 / mean_service["routing"],
        lookup_rate=1 / mean_service["lookup"], fetch_rate=1 / mean_service["fetch"],
        response_rate=1 / mean_service["response"], nodes=configured.nodes,
        hops=float(np.mean([int(row["hops"]) for row in lookups])),
        home_shares=_shares(home, names), routing_shares=_shares(routing, names))
    alpha = min(max(hit_rate, fn), 1 - fp)
    predicted = model.evaluate(strategy, setting, alpha, fp if strategy != "linear" else 0.0,
                               fn if strategy != "linear" else 0.0, READING)
    theory = predicted.mean * 1e3 if predicted.stable else float("nan")
    return {
        "requests": len(responses), "answered": len(answered),
        "timeouts": len(responses) - len(answered),
        "response_ms": response_mean, "response_half_ms": response_half,
        "queued_ms": queued_mean, "queued_half_ms": queued_half,
        "network_ms": response_mean - queued_mean,
        "theory_ms": theory, "theory_error_pct": 100 * (theory / queued_mean - 1),
        "hit_rate": hit_rate, "fp": fp if filtered else float("nan"),
        "fn": fn if filtered else float("nan"), "mean_hops": setting.hops,
        **{f"{name}_service_ms": mean_service[name] * 1e3 if service[name] else float("nan")
           for name in QUEUES},
        "sync_bytes_per_request": sum(int(row["delta_bytes"]) * int(row["peers"]) for row in
                                      read_table(run_dir, "filter_syncs")) / max(len(answered), 1),
    }


@dataclass(frozen=True)
class Configured:
    """What a run was configured with (the resolved scenario it wrote): the strategy, the
    ring's size, the queues' rates, the users' total rate."""

    strategy: str
    nodes: int
    rates: dict[str, float]
    arrival_rate: float

    @classmethod
    def of(cls, run_dir: Path) -> Configured:
        ran = yaml.safe_load((run_dir / "scenario.yaml").read_text())
        agents = defaultdict(list)
        for entry in ran["workload"]:
            agents[entry["agent"]].append(entry)
        [node], [dc] = agents["bloom_cdn_node"], agents["bloom_cdn_dc"]
        params = node["params"]
        return cls(params["strategy"], len(params["nodes"]),
                   {"routing": float(params["routing_rate"]),
                    "lookup": float(params["lookup_rate"]),
                    "response": float(params["response_rate"]),
                    "fetch": float(dc["params"]["fetch_rate"])},
                   sum(float(entry["params"]["rate"]) * len(entry["nodes"])
                       for entry in agents["request_client"]))


def _addresses(run_dir: Path) -> dict[str, str]:
    """Each host's address in the run (the resolved scenario the run wrote: every host's
    interfaces)."""
    ran = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    return host_addresses(ran["topology"]["nodes"])


def _shares(counts: Counter, names: list[str]) -> tuple[float, ...]:
    total = sum(counts[name] for name in names)
    return tuple(counts[name] / total if total else 1 / len(names) for name in names)


class Parameters(EmulatedParameters):
    """One emulated cell: the scenario, the hit rate, how long the users send, the filter's
    synchronisation, where the run directories go."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario: str = Field(SCENARIO, description="the scenario file")
    hit_rate: float = Field(0.0, ge=0, le=1, description="each node's cache: this share of its "
                                                         "home items (the hit rate)")
    requests_for: float = Field(15.0, gt=0, description="seconds the users send requests")
    sync_every: int = Field(50, ge=1, description="lookups between a node's filter updates")


def run_scenario(scenario: str, strategy: str, hit_rate: float, requests_for: float,
                 runs: Path, seed: int = 1, sync_every: int = 50) -> tuple[Path, dict]:
    """``edgebed run`` of the scenario with its variables set (the run under ``runs``): its
    directory and summary."""
    return edgebed_run(scenario, runs, variables(strategy, hit_rate, requests_for, sync_every)
                       | {"EDGEBED_SEED": str(seed % 2**32)})


def variables(strategy: str, hit_rate: float, requests_for: float,
              sync_every: int) -> dict[str, str]:
    return {"EDGEBED_STRATEGY": strategy, "EDGEBED_HIT_RATE": f"{hit_rate:g}",
            "EDGEBED_REQUESTS_FOR": f"{requests_for:g}s", "EDGEBED_SYNC_EVERY": str(sync_every),
            "EDGEBED_DURATION": f"{requests_for + 5:g}s"}


def run_cell(cell: Cell) -> list[dict[str, object]]:
    p: Parameters = cell.parameters
    run_dir, summary = emulated_run(cell, p.scenario, p.requests_for + 5, p.runs_dir,
                                    variables(cell.policy, p.hit_rate, p.requests_for,
                                              p.sync_every))
    figures = measure(run_dir)
    configured = Configured.of(run_dir)
    nominal = model.evaluate(cell.policy, replace(model.LOW_TRAFFIC, nodes=configured.nodes,
                                                  hops=figures["mean_hops"]),
                             p.hit_rate, reading=READING)
    return [figures | {"theory_nominal_ms": nominal.mean * 1e3,
                       **run_record(summary)}]


METRICS = (
    Metric("response_ms", "mean response time, emulated", "ms"),
    Metric("response_half_ms", "its 95% batch-means half-width", "ms"),
    Metric("queued_ms", "time in the queues a user waited for, emulated", "ms"),
    Metric("queued_half_ms", "its 95% batch-means half-width", "ms"),
    Metric("network_ms", "the rest: transfers, switch, sockets", "ms"),
    Metric("theory_ms", "model at the run's measured point (no DC link)", "ms"),
    Metric("theory_nominal_ms", "model at the nominal rates and hit rate", "ms"),
    Metric("theory_error_pct", "model against the emulated queue time", "%"),
    Metric("hit_rate", "measured hit rate", "share"),
    Metric("fp", "false positives, measured", "share of lookups"),
    Metric("fn", "false misses, measured", "share of lookups"),
    Metric("mean_hops", "Chord routing hops per request"),
    Metric("routing_service_ms", "mean routing service drawn", "ms"),
    Metric("lookup_service_ms", "mean lookup service drawn", "ms"),
    Metric("fetch_service_ms", "mean DC fetch service drawn", "ms"),
    Metric("response_service_ms", "mean response service drawn", "ms"),
    Metric("sync_bytes_per_request", "filter update bytes on the wire per request", "B"),
    Metric("requests", "requests sent"),
    Metric("timeouts", "requests unanswered"),
    *EMULATED_METRICS,
)

ABOUT = """\
**A cell is one emulated run** of `topologies/bloom_cdn/bloom_cdn.yaml` (real packets on a Mininet
network, userspace Open vSwitch): 8 content nodes on a Chord ring, each with routing, lookup
and response queues that are single-server FIFOs with exponential service at the paper's
low-traffic rates (mu_t = 300, mu_l = 500, mu_r = 60 req/s), a data center fetching at
mu_o = 1,200 req/s, and 8 user groups sending 60 B Poisson requests at 100 req/s in all for a
catalogue of 1,000 items, uniformly; items are log-normal (mean 10 kB, sigma 0.5) over
100 Mbit/s links; Bloom filters are synchronised as real packets every 50 lookups. The hit rate
is each cache's share of its node's home items. Scale: N = 8, not 50 (the paper's 6 hops
become 3, and every node queue carries lambda / 8); items and links scaled so a transfer takes
0.8 ms (the paper's 1 ms). The model beside each point is evaluated at the run's measured point
(service means drawn, hit rate, fp, fn, hops, per-node shares) and compared with the time the
users waited in queues; the network's share (transfers, the switch, the agents' sockets) is
measured apart. Parallel's multicast to the home node and the DC is the entry node sending both
copies, not an OpenFlow group."""

KINDS = (Kind(name="bloom_cdn_emulation", parameters=Parameters, policies=STRATEGIES,
              run=run_cell, metrics=METRICS,
              plots=("response_ms", "queued_ms", "network_ms", "theory_error_pct", "fp", "fn"),
              lines={"queued_ms": "theory_ms", "response_ms": "theory_nominal_ms"},
              about=ABOUT, emulated=True),)
