"""Danmaku demand as seed 000 measured it on Bilibili (its section 1.1): how many messages a
viewer sends per hour (Fig. 3) and how much the room it watches changes that (Fig. 4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HOUR = 3600.0


@dataclass(frozen=True)
class Band:
    """A share of the population whose value lies from ``low`` to ``high``."""

    low: float
    high: float
    share: float


# Fig. 3: "有59%的用戶平均每小時只互動了1次，并且96%的用戶平均每小時互動次數在10以內" (59% of users
# send one message an hour, 96% at most 10), and section 0: "37%的用戶互動次數在2～10之間".
# The rest, 4%, send more than 10; the figure's upper end is lost: 100 an hour (one every 36 s)
# is the project's cap.
COUNT_BANDS = (Band(1, 1, 0.59), Band(2, 10, 0.37), Band(11, 100, 0.04))
# Within a band counts fall as 1/n^2: Fig. 3's cumulative curve is "高度傾斜" (highly skewed);
# the exponent is the project's choice, the band shares are the paper's.
COUNT_DECAY = 2.0

# Fig. 4, per-capita danmaku an hour in 17 rooms: "有4個直播間單位時間人均彈幕數低于0.01，而有7個直播間
# 人均彈幕數高于0.02，其中人均彈幕數最高達到了0.13" (4 rooms below 0.01, 7 above 0.02, the highest
# 0.13; the other 6 between). The lowest room's value is lost: 0.002 is the project's floor.
# Rooms are drawn log-uniformly within a band.
ROOM_BANDS = (Band(0.002, 0.01, 4 / 17), Band(0.01, 0.02, 6 / 17), Band(0.02, 0.13, 7 / 17))


def count_distribution() -> tuple[np.ndarray, np.ndarray]:
    """Messages an hour (1, 2, ...) and the probability of each (:data:`COUNT_BANDS`)."""
    counts, probabilities = [], []
    for band in COUNT_BANDS:
        values = np.arange(band.low, band.high + 1)
        weights = values.astype(float) ** -COUNT_DECAY
        counts.append(values)
        probabilities.append(band.share * weights / weights.sum())
    return np.concatenate(counts), np.concatenate(probabilities)


def draw_counts(rng: np.random.Generator, viewers: int) -> np.ndarray:
    """Messages an hour for ``viewers`` viewers, independently."""
    counts, probabilities = count_distribution()
    return rng.choice(counts, size=viewers, p=probabilities)


def _log_uniform_mean(band: Band) -> float:
    return (band.high - band.low) / np.log(band.high / band.low)


ROOM_MEAN = sum(band.share * _log_uniform_mean(band) for band in ROOM_BANDS)


def draw_room_effects(rng: np.random.Generator, rooms: int) -> np.ndarray:
    """Each room's factor on its viewers' danmaku: its per-capita rate (:data:`ROOM_BANDS`)
    over the mean room's, so that the factor averages 1 over rooms and the viewers' own
    distribution keeps its scale."""
    shares = np.array([band.share for band in ROOM_BANDS])
    band = rng.choice(len(ROOM_BANDS), size=rooms, p=shares / shares.sum())
    low = np.log([ROOM_BANDS[b].low for b in band])
    high = np.log([ROOM_BANDS[b].high for b in band])
    return np.exp(rng.uniform(low, high)) / ROOM_MEAN


def draw_rates(rng: np.random.Generator, room: np.ndarray, rooms: int) -> np.ndarray:
    """F_v in messages per second for viewers watching ``room`` (indices below ``rooms``): a
    viewer's own count an hour times its room's effect (the paper: "影響用戶互動行為的因素不僅和
    用戶自身需求有關，還和用戶所在直播間有一定的關系", a viewer's own need and its room both count)."""
    effects = draw_room_effects(rng, rooms)
    return draw_counts(rng, len(room)) * effects[room] / HOUR
