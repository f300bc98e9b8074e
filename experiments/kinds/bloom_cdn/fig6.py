"""The paper's sentences about its Fig. 6, each checked against an experiment's rows of the
``bloom_cdn_model`` kind: reproduced or not, with the figures the verdict rests on, for the
simulation and for the model's two readings; and the high-traffic crossing of cut-through and
linear located on the hit-rate grid."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from controller.policies.bloom_cdn.model import LOW_TRAFFIC
from experiments.sweeps.kinds import Table

# The paper's low-traffic figures at 0 % hits, percent against linear.
PAPER_ZERO_HITS = {"parallel": -23.6, "cut_through": -65.2}
# Agreement with a paper's percentage: within this many points. A null result (no change,
# 0 %) is 23.6 points from the nearer figure, so it cannot meet it.
AGREEMENT_POINTS = 5.0
# High traffic: cut-through congests below this hit rate and is best above the next.
PAPER_CONGESTED_BELOW, PAPER_BEST_ABOVE = 0.30, 0.40
# Linear's only difference between a miss and a hit at the paper's low-traffic rates: the DC's
# fetch sojourn, 1/(mu_o - lambda).
FETCH_SOJOURN_MS = 1e3 / (LOW_TRAFFIC.fetch_rate - LOW_TRAFFIC.arrival_rate)
SOURCES = {"response_ms": "simulation", "theory_nominal_ms": "model (default reading)",
           "theory_miss_path_ms": "model (miss-path reading)"}


@dataclass(frozen=True)
class Curves:
    """One metric's values per (hit rate, policy), a list over repetitions; an unstable
    point (no mean) is inf: slower than any finite one."""

    values: dict[tuple[float, str], np.ndarray]

    @staticmethod
    def of(rows: pd.DataFrame, metric: str) -> Curves:
        rows = rows.assign(hit=rows["value"].astype(float)).sort_values("repetition")
        return Curves({(hit, policy): group[metric].fillna(math.inf).to_numpy(float)
                       for (hit, policy), group in rows.groupby(["hit", "policy"])})

    @property
    def hits(self) -> list[float]:
        return sorted({hit for hit, _ in self.values})

    def mean(self, hit: float, policy: str) -> float:
        return float(np.mean(self.values[(hit, policy)]))

    def relative(self, hit: float, policy: str, versus: str = "linear") -> float:
        return 100 * (self.mean(hit, policy) / self.mean(hit, versus) - 1)

    def slope(self, policy: str) -> tuple[float, float, float] | None:
        """The least-squares slope of the metric against the hit rate (ms per unit hit
        rate) and its 95 % interval; None when a point is unstable."""
        hits, ys = [], []
        for hit in self.hits:
            hits += [hit] * len(self.values[(hit, policy)])
            ys += list(self.values[(hit, policy)])
        if not np.all(np.isfinite(ys)):
            return None
        fit = stats.linregress(hits, ys)
        half = stats.t.ppf(0.975, len(ys) - 2) * fit.stderr
        return fit.slope, fit.slope - half, fit.slope + half

    def difference(self, hit: float, policy: str, versus: str) -> tuple[float, float]:
        """The 95 % t-interval of ``policy`` less ``versus`` at ``hit``, paired by
        repetition (a repetition's policies see one instance); (inf, inf) when only
        ``policy`` is unstable in a repetition, (-inf, -inf) when only ``versus`` is, and
        (-inf, inf), undecided, when both are."""
        ours, theirs = self.values[(hit, policy)], self.values[(hit, versus)]
        if np.any(np.isinf(ours) & np.isinf(theirs)):
            return -math.inf, math.inf
        gaps = ours - theirs
        if np.any(np.isinf(gaps)):
            return (math.inf, math.inf) if np.any(gaps == math.inf) else (-math.inf, -math.inf)
        if len(gaps) < 2:
            return float(gaps[0]), float(gaps[0])
        half = stats.t.ppf(0.975, len(gaps) - 1) * gaps.std(ddof=1) / math.sqrt(len(gaps))
        return float(gaps.mean() - half), float(gaps.mean() + half)


def traffic_of(rows: pd.DataFrame) -> str | None:
    """The traffic setting of ``rows`` (one sweep's); None when there are none or they were
    written without it."""
    if rows.empty or "traffic" not in rows:
        return None
    return str(rows["traffic"].iloc[0])


def _yes(ok: bool) -> str:
    return "reproduced" if ok else "not reproduced"


def _order(curves: Curves, policies: list[str], extreme: str, hits: list[float]) -> str:
    """Whether ``extreme`` of ``policies`` has the smallest mean ('min') or largest at every
    hit rate in ``hits``; the hit rates where it does not."""
    policy, pick = extreme.split(":")
    choose = min if pick == "min" else max
    wrong = [hit for hit in hits
             if choose(policies, key=lambda p: curves.mean(hit, p)) != policy]
    return _yes(not wrong) + (f" (not at {_percents(wrong)})" if wrong
                              else f" (at {_percents(hits)})")


def _percents(hits: list[float]) -> str:
    return ", ".join(f"{hit:.0%}" for hit in hits) or "no hit rate"


def _trend(curves: Curves, policy: str, falling: bool) -> str:
    fit = curves.slope(policy)
    if fit is None:
        return "not reproduced (unstable points)"
    slope, low, high = fit
    ok = high < 0 if falling else low > 0
    return (f"{_yes(ok)} (slope {slope / 10:+.2f} ms per 10 points of hit rate, 95 % "
            f"{low / 10:+.2f} to {high / 10:+.2f})")


def _zero_hits(curves: Curves, policy: str) -> str:
    ours = curves.relative(curves.hits[0], policy)
    ok = abs(ours - PAPER_ZERO_HITS[policy]) <= AGREEMENT_POINTS
    return f"{_yes(ok)} ({ours:+.1f} %)"


def _largest_at_zero(curves: Curves, policies: list[str]) -> str:
    below = [h for h in curves.hits if h < 1]
    wrong = [p for p in policies
             if min(below, key=lambda h: curves.relative(h, p)) != below[0]]
    return _yes(not wrong) + (f" ({', '.join(wrong)} saves more elsewhere)" if wrong else "")


def _converge(curves: Curves, policies: list[str]) -> str:
    spreads = [max(curves.mean(h, p) for p in policies) - min(curves.mean(h, p)
                                                              for p in policies)
               for h in curves.hits]
    ok = all(b <= a for a, b in zip(spreads, spreads[1:]))
    return f"{_yes(ok)} (spread {', '.join(f'{s:.1f}' for s in spreads)} ms)"


def _meet(curves: Curves, policies: list[str]) -> str:
    if curves.hits[-1] != 1.0:
        return "not run"
    gaps = [curves.difference(1.0, p, "linear") for p in policies if p != "linear"]
    ok = all(low <= 0 <= high for low, high in gaps)
    return f"{_yes(ok)} (every gap's 95 % interval {'holds' if ok else 'does not hold'} 0)"


def _below_linear(curves: Curves, policy: str) -> str:
    wrong = [h for h in curves.hits if h < 1 and curves.mean(h, policy) >= curves.mean(h, "linear")]
    return _yes(not wrong) + (f" (not at {_percents(wrong)})" if wrong else "")


def _congested(curves: Curves) -> str:
    low = [h for h in curves.hits if h < PAPER_CONGESTED_BELOW]
    worse = [h for h in low if curves.mean(h, "cut_through") > curves.mean(h, "linear")]
    return (f"{_yes(worse == low)} (cut-through slower than linear at {_percents(worse)} "
            f"of {_percents(low)})")


LOW_SENTENCES: tuple[tuple[str, Callable[[Curves, list[str]], str]], ...] = (
    ("(a) cut-through has the least mean delay at every hit rate",
     lambda c, ps: _order(c, ps, "cut_through:min", [h for h in c.hits if h < 1])),
    ("(a) linear has the greatest at every hit rate",
     lambda c, ps: _order(c, ps, "linear:max", [h for h in c.hits if h < 1])),
    ("(a) the savings are largest at 0 % hits", _largest_at_zero),
    ("(a) parallel saves 23.6 % at 0 % hits", lambda c, ps: _zero_hits(c, "parallel")),
    ("(a) cut-through saves 65.2 % at 0 % hits", lambda c, ps: _zero_hits(c, "cut_through")),
    ("(a) the three converge as the hit rate rises", _converge),
    ("(a) at 100 % hits the three are identical", _meet),
    ("(a) linear's delay falls as the hit rate rises",
     lambda c, ps: _trend(c, "linear", falling=True)),
    ("(a) parallel's delay falls as the hit rate rises",
     lambda c, ps: _trend(c, "parallel", falling=True)),
    ("(a) cut-through's delay rises with the hit rate",
     lambda c, ps: _trend(c, "cut_through", falling=False)),
)
HIGH_SENTENCES: tuple[tuple[str, Callable[[Curves, list[str]], str]], ...] = (
    ("(b) parallel is below linear at every hit rate",
     lambda c, ps: _below_linear(c, "parallel")),
    ("(b) below 30 % hits cut-through congests and is slower than linear",
     lambda c, ps: _congested(c)),
    ("(b) above 40 % hits cut-through is again the least of the three",
     lambda c, ps: _order(c, ps, "cut_through:min",
                          [h for h in c.hits if PAPER_BEST_ABOVE < h < 1])),
)


def sentences(results: pd.DataFrame, sweep: str) -> Table | None:
    """The paper's sentences about the panel of ``results``' traffic, against the rows of
    the hit-rate ``sweep``, for each source (simulation, model readings)."""
    rows = results[(results["sweep"] == sweep) & results["policy"].isin(
        ["linear", "parallel", "cut_through"])]
    traffic = traffic_of(rows)
    if traffic is None:
        return None
    checks = LOW_SENTENCES if traffic == "low" else HIGH_SENTENCES
    policies = ["linear", "parallel", "cut_through"]
    curves = {source: Curves.of(rows, metric) for metric, source in SOURCES.items()}
    table = [(text, *(check(curves[source], policies) for source in SOURCES.values()))
             for text, check in checks]
    return Table(f"The paper's sentences about Fig. 6({'a' if traffic == 'low' else 'b'}), "
                 f"sweep `{sweep}`, against our means (agreement with a percentage: within "
                 f"{AGREEMENT_POINTS:g} points):", ("the paper says", *SOURCES.values()),
                 tuple(table))


def falling_parallel_needs(results: pd.DataFrame, sweep: str) -> str | None:
    """Why parallel's curve rises: with a hit path the same in every strategy (the paper's
    words), parallel at 0 % hits 23.6 % under linear and equal to it at 100 %, it can fall
    only if linear falls by more than 23.6 % between 0 and 100 % hits; linear's hit and miss
    differ only by the DC's fetch and copy."""
    rows = results[results["sweep"] == sweep]
    if traffic_of(rows) != "low":
        return None
    drops = {}
    for metric, source in SOURCES.items():
        curves = Curves.of(rows, metric)
        if curves.hits[0] != 0.0 or curves.hits[-1] != 1.0:
            return None
        drops[source] = 100 * (1 - curves.mean(1.0, "linear") / curves.mean(0.0, "linear"))
    needed = -PAPER_ZERO_HITS["parallel"]
    short = [source for source, drop in drops.items() if drop < needed]
    return ("What parallel's curve needs to fall with the hit rate: the paper's hit path is "
            f"the same in the three strategies, so parallel, {needed:.1f} % under linear at 0 % "
            f"hits and equal to it at 100 %, can fall only if linear falls by more than "
            f"{needed:.1f} % from 0 to 100 % hits. Linear's miss differs from its hit only by "
            f"the DC's fetch (1/(mu_o - lambda) = {FETCH_SOJOURN_MS:.2f} ms at the paper's "
            "rates) and copy; linear falls by "
            + ", ".join(f"{source} {drop:.1f} %" for source, drop in drops.items()) + ". "
            + (f"In {', '.join(short)} that is short of {needed:.1f} %: with the paper's rates "
               "its 0 %-hit figure and a falling parallel curve cannot both hold, so the rise "
               "follows from the model the paper states." if short else
               "Linear falls far enough everywhere for a falling parallel curve."))


def crossing(results: pd.DataFrame, sweep: str) -> str | None:
    """Where cut-through stops being slower than linear: the highest hit rate at which the
    paired 95 % interval of cut-through less linear lies above 0 (or cut-through is
    unstable) and the lowest above it at which it lies below 0."""
    rows = results[results["sweep"] == sweep]
    if traffic_of(rows) != "high":
        return None
    parts = []
    for metric, source in SOURCES.items():
        curves = Curves.of(rows, metric)
        gaps = {h: curves.difference(h, "cut_through", "linear") for h in curves.hits}
        worse = [h for h, (low, _) in gaps.items() if low > 0]
        better = [h for h, (_, high) in gaps.items() if high < 0 and (not worse or h > max(worse))]
        if not worse or not better:
            parts.append(f"{source}: no crossing on the grid (slower at "
                         f"{len(worse)}, faster at {len(better)} points)")
            continue
        parts.append(f"{source}: between {max(worse):.0%} (slower) and {min(better):.0%} "
                     "(faster)")
    exact = rows.get("theory_crossing", pd.Series(dtype=float)).dropna()
    if len(exact):
        parts.append(f"the nominal model's exact crossing, each cell's item sizes: mean "
                     f"{exact.mean():.1%}, {exact.min():.1%} to {exact.max():.1%} over "
                     f"{len(exact)} cells")
    return (f"Cut-through against linear, sweep `{sweep}`, where the 95 % interval of the "
            "paired difference first leaves the slower side: " + "; ".join(parts)
            + f". The paper: slower below {PAPER_CONGESTED_BELOW:.0%}, best above "
            f"{PAPER_BEST_ABOVE:.0%}.")
