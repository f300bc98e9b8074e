"""The reasons live_edge's reports give are worded from the rows: each states the rows'
numbers, and says nothing when the rows do not bear it out."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.kinds.live_edge import model as live_edge
from experiments.kinds.live_edge import reasons
from experiments.sweeps import experiment as sweeps

SOURCED = Path(__file__).resolve().parents[3] / "experiments" / "live_edge" / "sourced.yaml"


@pytest.fixture(scope="module")
def experiment():
    return sweeps.load(SOURCED)


def cells(experiment, rows: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    """Cells of the viewers sweep for each policy's metric lists: one value at the sweep's
    first, two at its first and last."""
    every = experiment.sweep("viewers").labels
    labels = (every[0], every[-1])
    table = []
    for policy, metrics in rows.items():
        count = len(next(iter(metrics.values())))
        for i in range(count):
            table.append({"sweep": "viewers", "value": labels[i], "policy": policy,
                          "repetition": 0} | {name: values[i] for name, values in
                                              metrics.items()})
    return pd.DataFrame(table)


def test_mhcp_drops_nothing_is_said_only_when_every_cell_drops_nothing(experiment):
    claim = live_edge.CLAIMS["drops_lua_vs_mhcp"]
    sides = {"drops": [0.0, 1.0], "served": [10.0, 10.0]}
    none = cells(experiment, {"mhcp": {"mean_drop_mbps": [0.0, 0.0]} | sides,
                              "lua": {"mean_drop_mbps": [0.0, 0.1]} | sides})
    some = cells(experiment, {"mhcp": {"mean_drop_mbps": [0.0, 0.3]} | sides,
                              "lua": {"mean_drop_mbps": [0.0, 0.1]} | sides})
    assert "MHCP drops no viewer's bitrate" in claim.reason(experiment, none)
    said = claim.reason(experiment, some)
    assert "drops no" not in said
    assert "LUA 0.05 Mbps, MHCP 0.15 Mbps" in said


def test_latency_is_split_exactly_into_network_and_transcoding(experiment):
    # The sourced base: G = 50 ms/Mbps, source 6 Mbps. LUA at 4 Mbps: 100 ms transcoding;
    # DF at 2 Mbps: 200 ms.
    rows = cells(experiment, {"lua": {"mean_latency_ms": [250.0], "mean_bitrate_mbps": [4.0]},
                              "df": {"mean_latency_ms": [260.0], "mean_bitrate_mbps": [2.0]}})
    said = reasons.latency_parts("lua", "df")(experiment, rows)
    assert "LUA 250 ms = 150 network + 100 transcoding" in said
    assert "DF 260 ms = 60 network + 200 transcoding" in said
    assert "mostly transcoding (-100 ms against +90 ms)" in said


def test_served_shares_are_the_rows_and_last_takes_the_last_value(experiment):
    rows = cells(experiment, {"lua": {"served_share": [1.0, 0.5]},
                              "df": {"served_share": [1.0, 0.7]}})
    assert "LUA 75%, DF 85%" in reasons.served("lua", "df")(experiment, rows)
    assert "LUA 50%, DF 70%" in reasons.served("lua", "df", at="last")(experiment, rows)
    full = reasons.served("lua", "df", at="first")(experiment, rows)
    assert "every policy served every viewer" in full


def test_qoe_terms_say_which_terms_the_policy_is_ahead_on(experiment):
    rows = cells(experiment, {
        "lua": {"mean_interaction": [0.5], "mean_bitrate_mbps": [3.0], "switch_share": [0.2],
                "mean_drop_mbps": [0.4]},
        "df": {"mean_interaction": [0.1], "mean_bitrate_mbps": [3.5], "switch_share": [0.6],
               "mean_drop_mbps": [0.1]}})
    said = reasons.qoe_terms("lua", "df")(experiment, rows)
    assert "LUA is ahead on Q, switches per viewer and behind on bitrate, bitrate drop" in said


def test_a_reason_without_both_sides_says_nothing(experiment):
    rows = cells(experiment, {"lua": {"mean_latency_ms": [250.0], "mean_bitrate_mbps": [4.0],
                                      "switch_share": [0.1], "switches": [1.0],
                                      "served": [10.0]}})
    for reason in (reasons.latency_parts("lua", "df"), reasons.switches_per_served("lua", "df")):
        assert reason(experiment, rows) == ""
