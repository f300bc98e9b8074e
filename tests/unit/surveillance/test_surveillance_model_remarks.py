"""surveillance's model-level remarks: the Fig. 3(a) verdict and load and admission, on rows
made by hand."""

from __future__ import annotations

import pandas as pd

from experiments.kinds.surveillance.model_remarks import (admission_table, fig3a_summary,
                                                       fig3a_table, weights_table)


def rows(policy: str, value: str, **metrics: list[float]) -> pd.DataFrame:
    table = pd.DataFrame(metrics)
    return table.assign(sweep="s", parameter="session_mean_s", value=value, policy=policy)


def test_the_fig3a_verdict_needs_both_intervals_above_zero():
    results = pd.concat([
        rows("sv_feedback_greedy", "60", strong_lead_cpu=[30.0, 32.0, 31.0],
             strong_lead_bandwidth=[20.0, 21.0, 22.0]),
        rows("sv_feedback", "60", strong_lead_cpu=[-10.0, -12.0, -11.0],
             strong_lead_bandwidth=[-5.0, 4.0, 1.0])])
    verdicts = {row[2].split()[0]: row[-1] for row in fig3a_table(results).rows}
    assert verdicts == {"sv_feedback_greedy": "strongest loaded most (Fig. 3(a))",
                        "sv_feedback": "undecided"}
    assert fig3a_summary(fig3a_table(results)) == (
        "Fig. 3(a), the strongest node loaded most, is reproduced by sv_feedback (weighted "
        "round robin in the light queue) in 0 of 1 settings; by sv_feedback_greedy (greedy "
        "largest weight in the light queue) in 1 of 1 settings.")


def test_admission_marks_overload_and_unequal_rejections():
    def setting(value: str, offered: float, rejected: dict[str, float]) -> pd.DataFrame:
        return pd.concat(rows(policy, value, rejected_share=[share], cv_load=[0.2],
                              offered_load=[offered]) for policy, share in rejected.items())

    results = pd.concat([
        setting("30", 0.4, {"sv_feedback": 0.0, "sv_feedback_greedy": 0.0,
                            "sv_improved": 0.005}),
        setting("300", 2.5, {"sv_feedback": 0.5, "sv_feedback_greedy": 0.55,
                             "sv_improved": 0.52})])
    feasible, overloaded = admission_table(results).rows
    assert feasible[3] == "feasible" and feasible[-1] == "equal (0.5 pp)"
    assert overloaded[2:4] == ("250%", "overloaded") and overloaded[-1] == "unequal (5.0 pp)"


def test_one_run_gives_a_lead_without_interval_and_no_verdict():
    results = rows("sv_feedback_greedy", "60", strong_lead_cpu=[30.0],
                   strong_lead_bandwidth=[20.0])
    (row,) = fig3a_table(results).rows
    assert row[3:] == ("+30.0 (one run, no interval)", "+20.0 (one run, no interval)",
                       "undecided")


def test_the_weights_table_sets_capacity_against_z_scores_per_balancer():
    def weighting(value: str, cv: float) -> pd.DataFrame:
        return rows("sv_improved", value, cv_load=[cv, cv], cv_cpu=[cv, cv],
                    cv_bandwidth=[cv, cv], rejected_share=[0.0, 0.0]).assign(
            parameter="weighting")

    results = pd.concat([weighting("zscore", 0.2), weighting("capacity", 0.1)])
    (row,) = weights_table(results).rows
    assert row[:3] == ("s", "sv_improved", "0.200 → 0.100 (-50%)")
    assert weights_table(results.assign(parameter="session_mean_s")) is None
