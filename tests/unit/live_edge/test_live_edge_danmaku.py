"""The sourced danmaku demand: the paper's Fig. 3 shares of viewers by messages an hour and
Fig. 4's room effect, in the distribution and in what the generator draws."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from controller.policies.live_edge import danmaku
from experiments.kinds.live_edge.model_parameters import Parameters

# The paper (section 0 and Fig. 3): 59% once per unit time, 37% 2-10 times, the rest above.
PAPER_SHARES = {(1, 1): 0.59, (2, 10): 0.37, (11, np.inf): 0.04}


def shares(counts: np.ndarray) -> dict[tuple[float, float], int]:
    return {(low, high): int(((counts >= low) & (counts <= high)).sum())
            for low, high in PAPER_SHARES}


def test_the_distribution_gives_the_papers_shares_exactly():
    counts, probabilities = danmaku.count_distribution()
    assert probabilities.sum() == pytest.approx(1.0)
    for (low, high), share in PAPER_SHARES.items():
        assert probabilities[(counts >= low) & (counts <= high)].sum() == pytest.approx(share)
    assert (np.diff(probabilities[1:10]) < 0).all()  # skewed within the 2-10 band


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_drawn_counts_match_the_papers_shares(seed):
    drawn = danmaku.draw_counts(np.random.default_rng(seed), 20_000)
    for band, hits in shares(drawn).items():
        # At a 0.1% level: a share off by one point on 20 000 draws is rejected.
        assert binomtest(hits, len(drawn), PAPER_SHARES[band]).pvalue > 1e-3, band


def test_rooms_fall_in_fig_4s_bands_and_average_one():
    rng = np.random.default_rng(4)
    effects = danmaku.draw_room_effects(rng, 17_000)
    per_capita = effects * danmaku.ROOM_MEAN
    assert per_capita.max() <= 0.13 and per_capita.min() >= danmaku.ROOM_BANDS[0].low
    for band, expected in ((per_capita < 0.01, 4 / 17), (per_capita > 0.02, 7 / 17)):
        assert binomtest(int(band.sum()), len(band), expected).pvalue > 1e-3
    assert effects.mean() == pytest.approx(1.0, rel=0.05)


def test_a_viewers_rate_is_its_count_times_its_rooms_effect_per_hour():
    room = np.repeat([0, 1, 2], 400)
    rates = danmaku.draw_rates(np.random.default_rng(5), room, 3)
    replay = np.random.default_rng(5)
    effects = danmaku.draw_room_effects(replay, 3)
    counts = danmaku.draw_counts(replay, len(room))
    assert np.allclose(rates, counts * effects[room] / danmaku.HOUR)
    assert len(set(np.round(effects, 12))) == 3  # the rooms differ


def test_the_sourced_reconstruction_draws_the_papers_demand():
    pool = Parameters(reconstruction="sourced", viewers=2000, servers=6).pool(7)
    rates = np.array([viewer.danmaku_rate for viewer in pool.viewers])
    assert (rates > 0).all()
    # Within one room every viewer's rate is its count times the same factor, so the ratio
    # to the room's smallest rate recovers the count.
    rooms = {}
    for viewer, rate in zip(pool.viewers, rates):
        rooms.setdefault((viewer.streamer_edge, viewer.streamer_delay), []).append(rate)
    counts = np.concatenate([np.round(np.array(r) / min(r)) for r in rooms.values()])
    ones = int((counts == 1).sum())
    assert binomtest(ones, len(counts), 0.59).pvalue > 1e-3
