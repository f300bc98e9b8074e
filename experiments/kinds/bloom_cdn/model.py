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

from edgebed import clock
from controller.policies.bloom_cdn import model
from controller.policies.bloom_cdn.simulation import (STRATEGIES, SimConfig, Simulation,
                                                      Workload)
from experiments.kinds.bloom_cdn import fig6
from experiments.sweeps.kinds import Cell, Claim, Kind, Metric, Table

SETTINGS = {"low": model.LOW_TRAFFIC, "high": model.HIGH_TRAFFIC}
MS = 1e3


class Parameters(BaseModel):
    """One cell: the traffic setting, the hit rate, the run and the synchronisation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    traffic: Literal["low", "high"] = Field("low", description="the paper's setting: low "
                                            "(small items popular) or high (large popular)")
    hit_rate: float = Field(0.5, ge=0, le=1, description="target cache hit rate")
    hits: Literal["lru", "initial_state"] = Field(
        "lru", description="how the hit rate is set: LRU capacity (Che), or a fixed cached "
                           "set drawn regardless of popularity and size (the paper's filter "
                           "initial state)")
    duration: float = Field(1000.0, gt=0, description="simulated seconds")
    warmup: float = Field(50.0, ge=0, description="seconds left out of the measurement")
    sync: Literal["event", "periodic"] = Field("event", description="filter synchronisation")
    sync_every: int = Field(400, ge=1, description="requests a node serves between event "
                                                   "syncs")
    sync_period: float = Field(200.0, gt=0, description="seconds between periodic syncs")
    service: Literal["exponential", "lognormal"] = Field(
        "exponential", description="every queue's service law at the setting's means")
    service_scv: float = Field(1.0, gt=0, description="log-normal service: squared "
                                                      "coefficient of variation")
    catalogue_seed: int | None = Field(None, ge=0, description="seed of the item sizes' draw "
                                                               "(default: the cell's)")
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


def _finite(result: model.Result | None) -> float:
    """The model's mean; an unstable point, or one the model does not cover, has none: left
    empty, never a number."""
    return result.mean if result is not None and math.isfinite(result.mean) else float("nan")


def _theory(strategy: str, setting: model.Setting, alpha: float, fp: float, fn: float,
            p: Parameters, reading: model.Reading = model.Reading()) -> model.Result | None:
    """The model's answer for ``strategy``; None for the speculative baseline, whose user
    takes the first of two answers (no sum of sojourns gives that mean)."""
    if strategy == "speculative":
        return None
    if strategy == "adaptive":
        return model.adaptive(setting, alpha, fp, fn, reading, high=p.adaptive_high)
    return model.evaluate(strategy, setting, alpha, fp, fn, reading)


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
                       adaptive_high=p.adaptive_high, adaptive_low=p.adaptive_low,
                       hits=p.hits, service=p.service, service_scv=p.service_scv,
                       catalogue_seed=p.catalogue_seed)
    started = clock.real_elapsed()
    simulation = Simulation(config)
    predicted_fp, predicted_fn = simulation.predicted_filter_errors()
    result = simulation.run()
    run_seconds = clock.real_elapsed() - started
    # The paper's curve: homogeneous nodes, the target hit rate, an exact filter; the DC sends
    # items of the popularity-weighted mean size (hits independent of size).
    sizes, popularity = simulation.sizes, simulation.popularity
    nominal_setting = replace(setting, miss_item_bytes=float(popularity @ sizes),
                              miss_item_bytes_square=float(popularity @ sizes ** 2))
    nominal = _theory(cell.policy, nominal_setting, p.hit_rate, 0.0, 0.0, p)
    miss_path = _theory(cell.policy, nominal_setting, p.hit_rate, 0.0, 0.0, p,
                        model.MISS_PATH_READING)
    filtered = cell.policy not in ("linear", "speculative")
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
        "theory_ms": _finite(measured) * MS, "theory_nominal_ms": _finite(nominal) * MS,
        "theory_miss_path_ms": _finite(miss_path) * MS,
        "theory_error_pct": 100 * (_finite(measured) / result.mean - 1),
        "theory_unstable": float("nan") if measured is None else float(not measured.stable),
        "sim_unstable": float(result.unstable),
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
        "theory_crossing": model.cut_through_crossing(nominal_setting),
        "run_seconds": run_seconds, "traffic": p.traffic,
    }]


METRICS = (
    Metric("response_ms", "mean response time, simulated (empty when unstable)", "ms"),
    Metric("response_run_ms", "mean over the run's finished requests, stable or not", "ms"),
    Metric("response_ci_low_ms", "its 95% batch-means interval, low", "ms"),
    Metric("response_ci_high_ms", "its 95% batch-means interval, high", "ms"),
    Metric("theory_ms", "mean response time, model at the run's measured point", "ms"),
    Metric("theory_nominal_ms", "mean response time, model at the nominal point", "ms"),
    Metric("theory_miss_path_ms", "the same under the miss-path reading (four routing "
                                  "sojourns on each filter-judged miss)", "ms"),
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
    Metric("theory_crossing", "least hit rate from which cut-through beats linear, nominal "
                              "model (the cell's item sizes)", "share"),
    Metric("run_seconds", "wall time of the simulation (set-up included)", "s"),
)

CLAIMS = {
    "parallel_vs_linear_theory": Claim(
        "parallel against linear (nominal model)", "theory_nominal_ms", "parallel", "linear",
        relative=True,
        why="with the paper's rates the per-node response queue (mu_r) is most of linear's "
            "delay and parallel skips routing and lookup on a miss; no reading derived from "
            "the text gives the paper's figure, only the fitted miss-path reading below "
            "(controller/policies/bloom_cdn/model.py)"),
    "cut_through_vs_linear_theory": Claim(
        "cut-through against linear (nominal model)", "theory_nominal_ms", "cut_through",
        "linear", relative=True,
        why="a cut-through miss waits only for the DC's fetch queue (mu_o) and its link"),
    "parallel_vs_linear_miss_path": Claim(
        "parallel against linear (model, miss-path reading)", "theory_miss_path_ms",
        "parallel", "linear", relative=True,
        why="the default reading with four per-node routing sojourns on each filter-judged "
            "miss; the count is fitted to the paper's two figures, not derived from its text"),
    "cut_through_vs_linear_miss_path": Claim(
        "cut-through against linear (model, miss-path reading)", "theory_miss_path_ms",
        "cut_through", "linear", relative=True),
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
hit rate is set by the per-node LRU capacity (Che's approximation) with caches starting full
(`hits` = lru; the paper's 2 % caches are the 100 % end), or as the paper sets it, by the
filter's initial state: a fixed cached set drawn regardless of popularity and size, never
replaced (`hits` = initial_state). The model is also evaluated under the miss-path reading
(four routing sojourns on each filter-judged miss, `theory_miss_path_ms`). `speculative`,
beyond the paper, has no filter: every request goes at once to its home node and to the DC and
the first answer serves the user; the model has no mean for it. Intervals:
95 % Student-t over repetitions (independent seeds); the per-run batch-means interval is in the
results. An unstable model point is left empty (`theory_unstable` = 1), never given a finite
mean. The theory parameters are the paper's (mu_t, mu_l, mu_o, mu_r per setting); the
high-traffic request rate, not given, is 100 req/s; item sizes are log-normal (sigma = 1),
ordered against popularity in low traffic and with it in high traffic; the DC's output link
(100 MB/s) is a FIFO in both the simulation and the model."""


def remarks(results: pd.DataFrame) -> list[str | Table]:
    """The paper's sentences about Fig. 6 against each hit-rate sweep, model against
    simulation, each filtering strategy's filter cost per request (Summary Cache's measure),
    and the simulation's wall time per run."""
    found: list[str | Table] = []
    curves = results[results["parameter"] == "hit_rate"].groupby("sweep", sort=False)["value"]
    for sweep in (name for name, values in curves if values.nunique() >= 3):
        found += [part for part in (fig6.sentences(results, sweep),
                                    fig6.falling_parallel_needs(results, sweep),
                                    fig6.crossing(results, sweep)) if part is not None]
    unstable = int((results["theory_unstable"] == 1).sum())
    stable = results[(results["theory_unstable"] == 0) & (results["sim_unstable"] == 0)]
    for sweep, rows in stable.groupby("sweep", sort=False):
        worst = rows["theory_error_pct"].abs()
        found.append(f"Model at the measured point against simulation, sweep `{sweep}`, "
                     f"stable cells: median |error| {worst.median():.1f} %, worst "
                     f"{worst.max():.1f} %, {(worst <= 5).mean():.0%} of {len(rows)} cells "
                     "within 5 %.")
    if unstable:
        found.append(f"{unstable} cells the model calls unstable.")
    found += _what_the_filter_buys(results)
    if fig6.traffic_of(results) == "low":
        found.append(Table(
            "The miss-path reading's test (nominal model, no item sizes): the routing sojourns "
            "a filter-judged miss would need to reach the paper's 0 %-hit figures, one count per "
            f"figure; the reading uses {model.MISS_ROUTING_SOJOURNS}.",
            ("strategy", "sojourns needed"),
            tuple((strategy, f"{count:.2f}")
                  for strategy, count in model.fitted_miss_sojourns().items())))
    filtered = results[~results["policy"].isin(["linear", "speculative"])]
    if len(filtered):
        found.append(Table(
            "Filter synchronisation per sweep and filtering strategy, means over the sweep's runs: "
            "messages and bytes per request, what sending whole filters would cost, and the "
            "filters' measured errors (the share of false positives that are Bloom collisions).",
            ("sweep", "strategy", "messages / request", "B / request", "whole filters, B / request",
             "fp", "Bloom collisions", "fn"),
            tuple((f"`{sweep}`", policy, f"{rows['sync_messages_per_request'].mean():.3f}",
                   f"{rows['sync_bytes_per_request'].mean():.0f}",
                   f"{rows['sync_full_bytes_per_request'].mean():.0f}", f"{rows['fp'].mean():.2%}",
                   f"{rows['fp_bloom'].mean():.4%}", f"{rows['fn'].mean():.2%}")
                  for (sweep, policy), rows in filtered.groupby(["sweep", "policy"], sort=False))))
    seconds = results["run_seconds"].dropna()
    if len(seconds):
        found.append(f"Wall time of a simulation run (set-up included, the runs of this "
                     f"experiment, the `duration` above): median {seconds.median():.1f} s, "
                     f"longest {seconds.max():.1f} s over {len(seconds)} runs.")
    return found


def _what_the_filter_buys(results: pd.DataFrame) -> list[str]:
    """The speculative baseline (every request fetched from the DC at once, no filter)
    against the filter strategies, per sweep and value: mean response time and the DC's
    load."""
    found = []
    for (sweep, value), rows in results.groupby(["sweep", "value"], sort=False):
        means = rows.groupby("policy")[["response_ms", "dc_utilisation",
                                        "dc_link_utilisation"]].mean()
        if "speculative" not in means.index or len(means) < 2:
            continue
        others = means.drop(index="speculative")
        best = others["response_ms"].idxmin() if others["response_ms"].notna().any() else None
        spec = means.loc["speculative"]
        found.append(
            f"Speculative fetch, no filter, sweep `{sweep}` at {value}: {spec.response_ms:.1f} "
            f"ms, DC fetch queue {spec.dc_utilisation:.0%} busy and link "
            f"{spec.dc_link_utilisation:.0%}"
            + (f"; the fastest filter strategy, {best}, {others.loc[best, 'response_ms']:.1f}"
               f" ms at {others.loc[best, 'dc_utilisation']:.0%} and "
               f"{others.loc[best, 'dc_link_utilisation']:.0%}." if best else
               "; no filter strategy stable."))
    return found


KINDS = (Kind(name="bloom_cdn_model", parameters=Parameters, policies=STRATEGIES,
              run=run_cell, metrics=METRICS,
              plots=("response_ms", "theory_error_pct", "fp", "fn", "dc_link_utilisation",
                     "sync_bytes_per_request"),
              lines={"response_ms": "theory_ms", "fn": "fn_theory"},
              claims=CLAIMS, about=ABOUT, remarks=remarks, texts=("traffic",)),)
