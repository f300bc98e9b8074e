"""The paper's order of mean QoE checked pair by pair over repetitions."""

from __future__ import annotations

import pandas as pd
import pytest
from scipy import stats

from experiments.kinds.live_edge.orderings import ordering_table, verdict


def results(qoe: dict[str, list[float]], sweep: str = "viewers") -> pd.DataFrame:
    """One row per repetition and policy, at one value and period."""
    return pd.DataFrame([{"sweep": sweep, "value": "100", "policy": policy, "repetition": r,
                          "period": 0, "mean_viewer_qoe": value}
                         for policy, values in qoe.items() for r, value in enumerate(values)])


def test_the_difference_and_its_interval_are_over_repetitions():
    table = ordering_table(results({"lua": [3.0, 4.0, 5.0], "df": [1.0, 1.0, 1.0],
                                    "mhcp": [3.0, 4.0, 5.0]}))
    by_pair = {row[1]: row for row in table.rows}
    # LUA - DF: 2, 3, 4: mean 3, sd 1, t(0.975, 2) / sqrt(3) half-width.
    half = stats.t.ppf(0.975, 2) / 3 ** 0.5
    assert by_pair["LUA > DF"][2:] == ("+3", f"{3 - half:+.3g} to {3 + half:+.3g}", "3",
                                       "holds")
    assert by_pair["DF > MHCP"][5] == "reversed"
    # LUA and MHCP equal in every repetition: no spread, no resolution.
    assert by_pair["LUA > MHCP"][2] == "+0" and by_pair["LUA > MHCP"][5] == "not resolved"


@pytest.mark.parametrize("low, high, said", [(0.1, 0.5, "holds"), (-0.5, -0.1, "reversed"),
                                             (-0.1, 0.1, "not resolved")])
def test_verdict_reads_the_interval(low, high, said):
    assert verdict(low, high) == said


def test_a_run_without_the_papers_sweeps_has_no_table():
    assert ordering_table(results({"lua": [1.0], "df": [0.0]}, sweep="weight-a")) is None
