"""Whether the paper's ordering of the policies by mean QoE per viewer (LUA first, DF second,
MHCP after, its Figs. 12 and 18) holds on a live_edge model-level run, and by how much: each
pair's difference over the repetitions, every policy of a repetition on the same instances."""

from __future__ import annotations

import pandas as pd
from scipy import stats

from experiments.sweeps.kinds import Table

CONFIDENCE = 0.95
# The paper's order of mean QoE, best first, on its viewers and servers sweeps.
PAPERS_ORDER = ("lua", "df", "mhcp")
SWEEPS = ("viewers", "servers")
METRIC = "mean_viewer_qoe"
NAMES = {"lua": "LUA", "df": "DF", "mhcp": "MHCP"}


def _interval(differences: pd.Series) -> tuple[float, float, float]:
    """The mean of ``differences`` and its Student-t interval (NaN half-width for one)."""
    mean = float(differences.mean())
    if len(differences) < 2:
        return mean, float("nan"), float("nan")
    half = float(stats.t.ppf((1 + CONFIDENCE) / 2, len(differences) - 1)
                 * differences.std(ddof=1) / len(differences) ** 0.5)
    return mean, mean - half, mean + half


def verdict(low: float, high: float) -> str:
    """"holds" when the interval lies above 0, "reversed" below, "not resolved" across it."""
    if low > 0:
        return "holds"
    if high < 0:
        return "reversed"
    return "not resolved"


def ordering_table(results: pd.DataFrame) -> Table | None:
    """Each pair of the paper's order (the better first) on each of its sweeps the run has:
    the difference of mean QoE per viewer, pooled over the sweep's values and periods per
    repetition, with its interval over repetitions and whether the paper's order holds."""
    rows = []
    for sweep in SWEEPS:
        data = results[(results["sweep"] == sweep) & results["policy"].isin(PAPERS_ORDER)]
        if data.empty:
            continue
        per_repetition = data.groupby(["repetition", "policy"])[METRIC].mean().unstack()
        for i, better in enumerate(PAPERS_ORDER):
            for worse in PAPERS_ORDER[i + 1:]:
                if not {better, worse} <= set(per_repetition.columns):
                    continue
                difference = (per_repetition[better] - per_repetition[worse]).dropna()
                mean, low, high = _interval(difference)
                rows.append((sweep, f"{NAMES[better]} > {NAMES[worse]}", f"{mean:+.3g}",
                             f"{low:+.3g} to {high:+.3g}", str(len(difference)),
                             verdict(low, high)))
    if not rows:
        return None
    return Table(
        f"The paper's order of mean QoE per viewer (LUA, DF, MHCP), pair by pair: the first "
        f"less the second, pooled over the sweep's values per repetition, with its "
        f"{CONFIDENCE:.0%} Student-t interval over repetitions; it holds where the interval "
        "lies above 0.",
        ("sweep", "paper's order", "difference", "interval", "repetitions", "on this run"),
        tuple(rows))
