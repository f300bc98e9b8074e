"""bloom_cdn at model level: the ``bloom_cdn_model`` kind of experiment cell.

A cell is one discrete-event simulation (:mod:`controller.policies.bloom_cdn.simulation`) of
the CDN with one routing strategy (the cell's policy) at one target hit rate, and the analytic
model (:mod:`controller.policies.bloom_cdn.model`) evaluated twice beside it: at the nominal
point (the paper's homogeneous nodes, the target hit rate, no filter errors: the paper's
curves) and at what the run measured (its hit rate, fp, fn, hops, per-node shares and the sizes
its DC sent: the check of the queueing model against the simulation). One row per cell.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from controller.policies.bloom_cdn import model
from controller.policies.bloom_cdn.simulation import (STRATEGIES, SimConfig, Simulation,
                                                      Workload)
from experiments.sweeps.kinds import Cell, Claim, Kind, Metric

SETTINGS = {"low": model.LOW_TRAFFIC, "high": model.HIGH_TRAFFIC}
MS = 1e3


class Parameters(BaseModel):
    """One cell: the traffic setting, the hit rate, the run and the synchronisation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    traffic: Literal["low", "high"] = Field("low", description="the paper's setting: low "
                                            "(small items popular) or high (large popular)")
    hit_rate: float = Field(0.5, ge=0, le=1, description="target cache hit rate")
    duration: float = Field(1000.0, gt=0, description="simulated seconds")
    warmup: float = Field(50.0, ge=0, description="seconds left out of the measurement")
    sync: Literal["event", "periodic"] = Field("event", description="filter synchronisation")
    sync_every: int = Field(400, ge=1, description="requests a node serves between event "
                                                   "syncs")
    sync_period: float = Field(200.0, gt=0, description="seconds between periodic syncs")
    arrival_rate: float | None = Field(None, gt=0, description="total req/s (default: the "
                                                                 "setting's 100)")
    size_sigma: float = Field(1.0, ge=0, description="log-normal spread of item sizes")
    adaptive_high: float = Field(model.ADAPTIVE_HIGH, gt=0, description="adaptive: switch to "
                                 "parallel above this DC utilisation")
    adaptive_low: float = Field(model.ADAPTIVE_LOW, gt=0, description="and back below this")

    @model_validator(mode="after")
    def _ordered(self) -> Parameters:
        if self.warmup >= self.duration:
            raise ValueError("warmup must be shorter than duration")
        if self.adaptive_low >= self.adaptive_high:
            raise ValueError("adaptive_low must be below adaptive_high")
        return self


def _finite(value: float) -> float:
    """An unstable model point has no mean: left empty, never a number."""
    return value if math.isfinite(value) else float("nan")


def _theory(strategy: str, setting: model.Setting, alpha: float, fp: float, fn: float,
            p: Parameters) -> model.Result:
    if strategy == "adaptive":
        return model.adaptive(setting, alpha, fp, fn, high=p.adaptive_high)
    return model.evaluate(strategy, setting, alpha, fp, fn)


def run_cell(cell: Cell) -> list[dict[str, object]]:
    p: Parameters = cell.parameters
    setting = SETTINGS[p.traffic]
    if p.arrival_rate is not None:
        setting = replace(setting, arrival_rate=p.arrival_rate)
    workload = Workload(small_popular=p.traffic == "low", size_sigma=p.size_sigma)
    config = SimConfig(setting, cell.policy, p.hit_rate, workload=workload, duration=p.duration,
                       warmup=p.warmup, seed=cell.seed,
                       sync_every=p.sync_every if p.sync == "event" else None,
                       sync_period=p.sync_period if p.sync == "periodic" else None,
                       adaptive_high=p.adaptive_high, adaptive_low=p.adaptive_low)
    simulation = Simulation(config)
    predicted_fp, predicted_fn = simulation.predicted_filter_errors()
    result = simulation.run()
    # The paper's curve: homogeneous nodes, the target hit rate, an exact filter; the DC sends
    # items of the popularity-weighted mean size (hits independent of size).
    sizes, popularity = simulation.sizes, simulation.popularity
    nominal_setting = replace(setting, miss_item_bytes=float(popularity @ sizes),
                              miss_item_bytes_square=float(popularity @ sizes ** 2))
    nominal = _theory(cell.policy, nominal_setting, p.hit_rate, 0.0, 0.0, p)
    filtered = cell.policy != "linear"
    measured = _theory(cell.policy, result.measured_setting(), result.hit_rate,
                       result.false_positive if filtered else 0.0,
                       result.false_miss if filtered else 0.0, p)
    low, high = result.interval
    requests = max(result.requests, 1)
    # A run whose DC was still falling behind at the end has no steady-state mean either.
    steady = float("nan") if result.unstable else 1.0
    return [{
        "response_ms": result.mean * MS * steady, "response_run_ms": result.mean * MS,
        "response_ci_low_ms": low * MS * steady, "response_ci_high_ms": high * MS * steady,
        "theory_ms": _finite(measured.mean) * MS, "theory_nominal_ms": _finite(nominal.mean) * MS,
        "theory_error_pct": 100 * (measured.mean / result.mean - 1)
        if math.isfinite(measured.mean) else float("nan"),
        "theory_unstable": float(not measured.stable), "sim_unstable": float(result.unstable),
        "hit_rate": result.hit_rate, "capacity": result.capacity,
        "fp": result.false_positive if filtered else float("nan"),
        "fp_bloom": result.false_positive_bloom if filtered else float("nan"),
        "fp_stale": result.false_positive_stale if filtered else float("nan"),
        "fn": result.false_miss if filtered else float("nan"),
        "fp_bloom_theory": predicted_fp, "fn_theory": predicted_fn,
        "mean_hops": result.mean_hops, "dc_utilisation": result.dc_utilisation,
        "dc_link_utilisation": result.dc_link_utilisation,
        "cut_through_share": result.cut_through_share if filtered else float("nan"),
        "sync_messages_per_request": result.sync.messages / requests,
        "sync_bytes_per_request": result.sync.delta_bytes / requests,
        "sync_full_bytes_per_request": result.sync.full_bytes / requests,
        "sync_saving_pct": 100 * result.sync.saving,
    }]


METRICS = (
    Metric("response_ms", "mean response time, simulated (empty when unstable)", "ms"),
    Metric("response_run_ms", "mean over the run's finished requests, stable or not", "ms"),
    Metric("response_ci_low_ms", "its 95% batch-means interval, low", "ms"),
    Metric("response_ci_high_ms", "its 95% batch-means interval, high", "ms"),
    Metric("theory_ms", "mean response time, model at the run's measured point", "ms"),
    Metric("theory_nominal_ms", "mean response time, model at the nominal point", "ms"),
    Metric("theory_error_pct", "model (measured point) against simulation", "%"),
    Metric("theory_unstable", "model says unstable", "share"),
    Metric("sim_unstable", "simulation still growing at the end", "share"),
    Metric("hit_rate", "measured hit rate", "share"),
    Metric("capacity", "LRU capacity per node", "items"),
    Metric("fp", "false positives, measured", "share of requests"),
    Metric("fp_bloom", "false positives from Bloom collisions", "share of requests"),
    Metric("fp_stale", "false positives from stale filters", "share of requests"),
    Metric("fn", "false misses, measured", "share of requests"),
    Metric("fp_bloom_theory", "Bloom false positives, formula", "share of requests"),
    Metric("fn_theory", "false misses, first-order staleness formula", "share of requests"),
    Metric("mean_hops", "Chord routing hops per request"),
    Metric("dc_utilisation", "DC fetch queue utilisation", "share"),
    Metric("dc_link_utilisation", "DC output link utilisation", "share"),
    Metric("cut_through_share", "filter-judged misses sent cut-through", "share"),
    Metric("sync_messages_per_request", "filter sync messages per request"),
    Metric("sync_bytes_per_request", "filter sync bytes per request (deltas)", "B"),
    Metric("sync_full_bytes_per_request", "filter sync bytes per request (whole filters)", "B"),
    Metric("sync_saving_pct", "bytes the deltas save", "%"),
)

CLAIMS = {
    "parallel_vs_linear_theory": Claim(
        "parallel against linear (nominal model)", "theory_nominal_ms", "parallel", "linear",
        relative=True,
        why="with the paper's rates the per-node response queue (mu_r) is most of linear's "
            "delay and parallel skips routing and lookup on a miss; no reading of the text "
            "gives the paper's figure (controller/policies/bloom_cdn/model.py)"),
    "cut_through_vs_linear_theory": Claim(
        "cut-through against linear (nominal model)", "theory_nominal_ms", "cut_through",
        "linear", relative=True,
        why="a cut-through miss waits only for the DC's fetch queue (mu_o) and its link"),
    "parallel_vs_linear_sim": Claim(
        "parallel against linear (simulated)", "response_ms", "parallel", "linear",
        relative=True),
    "cut_through_vs_linear_sim": Claim(
        "cut-through against linear (simulated)", "response_ms", "cut_through", "linear",
        relative=True),
}

ABOUT = """\
**A cell is one simulation at the paper's scale** (N = 50 nodes on a Chord ring, the paper's
catalogue of Zipf-popular items, 100 user groups, Poisson requests) with one strategy at one
target hit rate, and the analytic model beside it twice: *nominal* (the paper's curve:
homogeneous nodes, the target hit rate, an exact filter) and *measured* (the run's own hit
rate, filter errors, hops, per-node loads and DC item sizes: the queueing model's check). The
hit rate is set by the per-node LRU capacity (Che's approximation) with caches starting full,
as the paper set it by the initial state; the paper's 2 % caches are the 100 % end. Intervals:
95 % Student-t over repetitions (independent seeds); the per-run batch-means interval is in the
results. An unstable model point is left empty (`theory_unstable` = 1), never given a finite
mean. The theory parameters are the paper's (mu_t, mu_l, mu_o, mu_r per setting); the
high-traffic request rate, not given, is 100 req/s; item sizes are log-normal (sigma = 1),
ordered against popularity in low traffic and with it in high traffic; the DC's output link
(100 MB/s) is a FIFO in both the simulation and the model."""


def remarks(results: pd.DataFrame) -> list[str]:
    """Model against simulation, and each filtering strategy's filter cost per request
    (Summary Cache's measure)."""
    found = []
    errors = results["theory_error_pct"].dropna()
    stable = results[(results["theory_unstable"] == 0) & (results["sim_unstable"] == 0)]
    if len(stable):
        worst = stable["theory_error_pct"].abs()
        found.append(f"Model at the measured point against simulation, stable cells: median "
                     f"|error| {worst.median():.1f} %, worst {worst.max():.1f} %, "
                     f"{(worst <= 5).mean():.0%} of {len(stable)} cells within 5 %.")
    if len(errors) < len(results):
        found.append(f"{len(results) - len(errors)} cells the model calls unstable.")
    filtered = results[results["policy"] != "linear"]
    for policy, rows in filtered.groupby("policy", sort=False):
        found.append(f"Filter synchronisation, {policy}: "
                     f"{rows['sync_messages_per_request'].mean():.3f} messages and "
                     f"{rows['sync_bytes_per_request'].mean():.0f} B per request (whole "
                     f"filters would be {rows['sync_full_bytes_per_request'].mean():.0f} B); "
                     f"measured fp {rows['fp'].mean():.2%} (Bloom collisions "
                     f"{rows['fp_bloom'].mean():.4%}), fn {rows['fn'].mean():.2%}.")
    return found


KINDS = (Kind(name="bloom_cdn_model", parameters=Parameters, policies=STRATEGIES,
              run=run_cell, metrics=METRICS,
              plots=("response_ms", "theory_error_pct", "fp", "fn", "dc_link_utilisation",
                     "sync_bytes_per_request"),
              lines={"response_ms": "theory_ms", "fn": "fn_theory"},
              claims=CLAIMS, about=ABOUT, remarks=remarks),)
