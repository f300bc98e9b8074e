"""The dispatch_gray kind on tiny timelines: nothing freezes without failures, dispatch-level
failover cuts the freeze the same failures cause without it, and the detection time is the
hysteresis that keeps a noisy probe from moving viewers."""

from __future__ import annotations

import pandas as pd

from experiments.kinds import registered
from experiments.kinds.dispatch.gray import Parameters, remarks, run_cell, simulate
from experiments.sweeps import experiment
from experiments.sweeps.kinds import Cell

TINY = Parameters(nodes=6, viewers=30, horizon=300, headroom=3, failure_rate=0.01,
                  failure_mean=30)


def cell(policy: str, parameters: Parameters = TINY, seed: int = 5) -> Cell:
    return Cell("dispatch-gray", "failure-rate", "failure_rate", "0.01", policy, 0, seed,
                parameters)


def test_without_failures_nobody_freezes_or_moves():
    calm = TINY.model_copy(update={"failure_rate": 0.0})
    for policy in ("off", "on"):
        [row] = run_cell(cell(policy, calm))
        assert row["freeze_share"] == 0 and row["moves_per_viewer"] == 0, row


def test_failover_cuts_the_freeze_of_the_same_failures():
    for seed in range(3):
        [off], [on] = run_cell(cell("off", seed=seed)), run_cell(cell("on", seed=seed))
        assert on["failing_share"] == off["failing_share"] > 0  # the same timeline
        # Off, a viewer waits out its node's failure (mean 30 s); on, the detection (3 s) and
        # an I frame (2 s) per failure it meets.
        assert off["freeze_share"] >= off["failing_share"] * 0.5, off
        assert on["freeze_share"] < off["freeze_share"] / 2, (on, off)
        assert on["moves_per_viewer"] > 0 and off["moves_per_viewer"] == 0
        assert 2.0 <= on["detection_s_mean"], on  # a stall is seen two reports on at least


def test_a_detection_time_of_two_reports_lets_noisy_probes_move_viewers():
    noisy = TINY.model_copy(update={"failure_rate": 0.0, "probe_noise": 0.2})
    eager = simulate(noisy.model_copy(update={"detection_time": 0.5}), True, 1)
    patient = simulate(noisy.model_copy(update={"detection_time": 6.0}), True, 1)
    assert eager["needless_moves"] > 0 and eager["freeze_share"] > 0
    assert patient["needless_moves"] == 0 and patient["freeze_share"] == 0


EXPERIMENT = """\
name: dispatch-gray-tiny
kind: dispatch_gray
seed: 3
repetitions: 2
policies: ["off", "on"]
base: {nodes: 6, viewers: 30, horizon: 120, headroom: 3}
sweeps:
  - name: failure-rate
    vary: failure_rate
    values: [0.005, 0.02]
"""


def test_an_experiment_of_the_kind_compares_failover_on_and_off(tmp_path):
    path = tmp_path / "gray.yaml"
    path.write_text(EXPERIMENT)
    loaded = experiment.load(path)
    assert loaded.kind is registered()["dispatch_gray"]
    cells = list(loaded.cells())
    assert {c.policy for c in cells} == {"off", "on"} and len(cells) == 2 * 2 * 2
    rows = pd.DataFrame([{"sweep": c.sweep, "parameter": c.parameter, "value": c.value,
                          "policy": c.policy, **run_cell(c)[0]} for c in cells])
    found = remarks(rows)
    assert len(found) == 2 and all("with dispatch-level failover against" in r for r in found)
    means = rows.groupby("policy")["freeze_share"].mean()
    assert means["on"] < means["off"], means
