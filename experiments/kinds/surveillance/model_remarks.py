"""The model-level report's remarks: which reading of the original reproduces the paper's
Fig. 3(a), load and admission side by side (overloaded settings marked), and active
notification against periodic feedback alone in a burst."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from experiments.report import CONFIDENCE, swept_values
from experiments.sweeps.kinds import Table

ORIGINALS = {"sv_feedback": "weighted round robin in the light queue",
             "sv_feedback_greedy": "greedy largest weight in the light queue"}
IMPROVED = "sv_improved"
PERIODIC = "sv_improved_periodic"
FIG3A = "strongest loaded most (Fig. 3(a))"  # the verdict of a lead whose interval is above 0
EQUAL_ADMISSION_PP = 1.0  # rejections differing by at most this share of requests: equal


def interval(values: pd.Series) -> tuple[float, float, float]:
    """The mean of ``values`` and the Student-t 95% interval of it (NaN ends for one value)."""
    values = values.dropna()
    mean = values.mean()
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf((1 + CONFIDENCE) / 2, len(values) - 1) * stats.sem(values)
    if not np.isfinite(half):  # every value equal
        half = 0.0
    return mean, mean - half, mean + half


def _with_interval(mean: float, low: float, high: float) -> str:
    if math.isnan(low):
        return f"{mean:+.1f} (one run, no interval)"
    return f"{mean:+.1f} [{low:+.1f}, {high:+.1f}]"


def lead_verdict(low: float, high: float) -> str:
    """What an interval of the strongest node's lead says of Fig. 3(a) (none: undecided)."""
    if low > 0:
        return FIG3A
    if high < 0:
        return "strongest loaded least"
    return "undecided"


def fig3a_table(results: pd.DataFrame) -> Table | None:
    """Each reading of the original: the strongest node's lead in CPU and bandwidth
    utilisation over the next most loaded node, per sweep and value."""
    rows = []
    for sweep, value, cells in swept_values(results):
        for policy, reading in ORIGINALS.items():
            mine = cells[cells["policy"] == policy]
            if mine.empty:
                continue
            cpu, bandwidth = (interval(mine[f"strong_lead_{what}"])
                              for what in ("cpu", "bandwidth"))
            verdict = {lead_verdict(cpu[1], cpu[2]), lead_verdict(bandwidth[1], bandwidth[2])}
            rows.append((sweep, value, f"{policy} ({reading})",
                         *(_with_interval(*figure) for figure in (cpu, bandwidth)),
                         verdict.pop() if len(verdict) == 1 else "undecided"))
    if not rows:
        return None
    return Table("The paper's Fig. 3(a) shows the strongest node loaded most under the original "
                 "algorithm. The strongest node's time-mean utilisation less the highest of the "
                 "other nodes, in percentage points, mean and 95% interval over the "
                 "repetitions; a reading reproduces Fig. 3(a) where both intervals lie above 0.",
                 ("sweep", "value", "original", "CPU lead (pp)", "bandwidth lead (pp)",
                  "verdict"), tuple(rows))


def admission_table(results: pd.DataFrame) -> Table | None:
    """Offered load against capacity and, per balancer, rejections beside the CV of L."""
    compared = [*ORIGINALS, IMPROVED]
    rows = []
    for sweep, value, cells in swept_values(results):
        means = cells.groupby("policy")[["rejected_share", "cv_load", "offered_load"]].mean()
        if not set(compared) <= set(means.index):
            continue
        offered = means["offered_load"].iloc[0]
        rejected = 100 * means.loc[compared, "rejected_share"]
        spread = rejected.max() - rejected.min()
        rows.append((sweep, value, f"{100 * offered:.0f}%",
                     "overloaded" if offered >= 1 else "feasible",
                     *(f"{rejected[p]:.1f}% / {means.at[p, 'cv_load']:.3f}" for p in compared),
                     f"{'equal' if spread <= EQUAL_ADMISSION_PP else 'unequal'} "
                     f"({spread:.1f} pp)"))
    if not rows:
        return None
    return Table("Load and admission. Offered: the client bandwidth the requests ask for on "
                 "average as a share of the cluster's links or CPU (a lower bound: streams "
                 "into the nodes left out); at 100% or more the setting is overloaded and no "
                 "balancer can admit every request. Per balancer: requests rejected / mean CV "
                 f"of L. Admission is equal where the rejections differ by at most "
                 f"{EQUAL_ADMISSION_PP:g} pp; a CV comparison stands only there.",
                 ("sweep", "value", "offered", "setting",
                  *(f"{p}: rejected / CV" for p in compared), "admission"), tuple(rows))


def burst_table(results: pd.DataFrame) -> Table | None:
    """The improved algorithm with and without active notification, per sweep and value."""
    rows = []
    for sweep, value, cells in swept_values(results):
        means = cells.groupby("policy")[["burst_rejected", "rejected", "heavy_unnoticed_max_s",
                                         "notifications"]].mean()
        if not {IMPROVED, PERIODIC} <= set(means.index):
            continue
        rows.extend((sweep, value, policy, *(f"{means.at[policy, c]:.2f}" for c in means))
                    for policy in (IMPROVED, PERIODIC))
    if not rows:
        return None
    return Table("Active notification against periodic feedback alone (the improved "
                 "algorithm with and without it), means over the repetitions.",
                 ("sweep", "value", "balancer", "burst requests rejected", "requests rejected",
                  "longest heavy spell unnoticed (s)", "active notifications"), tuple(rows))


WEIGHTINGS = ("zscore", "capacity")
BALANCE = {"cv_load": "L", "cv_cpu": "CPU", "cv_bandwidth": "bandwidth"}


def weights_table(results: pd.DataFrame) -> Table | None:
    """Per balancer of a sweep over ``weighting``: the CVs with capacity weights against
    z-score weights, and the rejections of each."""
    swept = results[results["parameter"] == "weighting"]
    rows = []
    for (sweep, policy), cells in swept.groupby(["sweep", "policy"], sort=False):
        means = cells.groupby("value")[[*BALANCE, "rejected_share"]].mean()
        if not set(WEIGHTINGS) <= set(means.index):
            continue
        zscore, capacity = means.loc["zscore"], means.loc["capacity"]
        rows.append((sweep, policy, *(
            f"{zscore[c]:.3f} → {capacity[c]:.3f} ({(capacity[c] - zscore[c]) / zscore[c]:+.0%})"
            for c in BALANCE),
            f"{zscore['rejected_share']:.1%} → {capacity['rejected_share']:.1%}"))
    if not rows:
        return None
    return Table("Node weights from capacity shares against the paper's z-scores (beyond the "
                 "paper): mean CV, z-score → capacity (change), and the requests rejected.",
                 ("sweep", "balancer", *(f"CV of {what}" for what in BALANCE.values()),
                  "rejected"), tuple(rows))


def fig3a_summary(table: Table) -> str:
    """Which reading reproduces Fig. 3(a), counted over the settings of ``table``."""
    counts = {policy: [0, 0] for policy in ORIGINALS}
    for row in table.rows:
        policy = row[2].split()[0]
        counts[policy][0] += row[-1] == FIG3A
        counts[policy][1] += 1
    return "Fig. 3(a), the strongest node loaded most, is reproduced by " + "; by ".join(
        f"{policy} ({ORIGINALS[policy]}) in {hits} of {total} settings"
        for policy, (hits, total) in counts.items() if total) + "."


def remarks(results: pd.DataFrame) -> list[str | Table]:
    fig3a = fig3a_table(results)
    return [remark for remark in (fig3a and fig3a_summary(fig3a), fig3a,
                                  admission_table(results), burst_table(results),
                                  weights_table(results))
            if remark is not None]
