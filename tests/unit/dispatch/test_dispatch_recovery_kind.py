"""The dispatch_recovery kind: its burst-loss channel, the decodability rule, and a tiny cell
of each policy on the same seed (the same channels): NACKs leave fewer frames lost, and every
packet asked is accounted for."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.kinds import registered
from experiments.kinds.dispatch.recovery import (POLICIES, Parameters, burst_losses, decodable,
                                                 run_cell)
from experiments.sweeps import experiment
from experiments.sweeps.kinds import Cell

ROOT = Path(__file__).resolve().parents[3]


def test_the_channel_loses_its_mean_in_bursts():
    lost = burst_losses(np.random.default_rng(1), 2_000_000, 0.03, 0.3)
    assert abs(lost.mean() - 0.03) < 0.003
    # Bursts: a loss follows a loss with probability 1 - r, not the mean loss.
    after_loss = lost[1:][lost[:-1]]
    assert abs(after_loss.mean() - 0.7) < 0.01
    assert not burst_losses(np.random.default_rng(1), 100, 0.0, 0.3).any()


def test_a_lost_frame_breaks_the_rest_of_its_gop_only():
    whole = np.array([0.0, 1, np.inf, 3, 4, 5, 6, np.inf])  # GOPs of 4
    assert decodable(whole, 4).tolist() == [True, True, False, False, True, True, True, False]


def test_nacks_leave_fewer_frames_lost_on_the_same_channels():
    parameters = Parameters(viewers=4, duration=8, loss=0.03)
    rows = {policy: run_cell(Cell("recovery-test", "sweep", "loss", "0.03", policy, 0, 5,
                                  parameters))[0]
            for policy in POLICIES}
    plain, nack = rows["plain"], rows["nack"]
    assert plain["asked"] == 0 and plain["resent_bytes_share"] == 0
    # At 3% a hop, two hops: about a tenth of the frames lost without recovery (800 frames),
    # a packet stays lost with NACKs only when its NACK or its repair is lost too.
    assert plain["frames_lost"] > 0.05
    assert nack["frames_lost"] < plain["frames_lost"] / 3
    assert nack["frames_undecodable"] < plain["frames_undecodable"]
    assert nack["asked"] == nack["repaired"] + nack["repaired_late"] + nack["unrepaired"]
    assert 0 < nack["resent_bytes_share"] < 0.1
    assert registered()["dispatch_recovery"].policies == POLICIES


def test_the_experiment_file_sweeps_hop_loss_and_retries():
    cells = list(experiment.load(ROOT / "experiments" / "dispatch" / "recovery.yaml").cells())
    assert {c.parameters.loss for c in cells if c.sweep == "hop-loss"} == {0.005, 0.01, 0.02,
                                                                           0.03}
    assert {(c.policy, c.parameters.nack_retries) for c in cells if c.sweep == "retries"} == {
        ("nack", 1), ("nack", 3)}
