"""Where live_edge's edge servers, viewers and streamers are: uniformly in a square (planar), or
at the EUA data set's Melbourne base-station sites and user locations as seed 000 draws them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.spatial.distance import cdist

from controller.policies.live_edge import eua

GEOMETRIES = ("planar", "eua")


@dataclass(frozen=True)
class Layout:
    """Positions in metres: servers, viewers, and the spots streamers are drawn from (None:
    anywhere in the square of ``side``)."""

    servers: np.ndarray
    viewers: np.ndarray
    side: float
    streamer_spots: np.ndarray | None = None

    def streamers(self, rng: np.random.Generator, count: int) -> np.ndarray:
        if self.streamer_spots is None:
            return rng.uniform(0, self.side, (count, 2))
        return self.streamer_spots[rng.integers(len(self.streamer_spots), size=count)]


def planar(rng: np.random.Generator, viewers: int, servers: int, radius: float,
           side: float) -> Layout:
    """Servers and viewers uniformly in a ``side`` x ``side`` square, a viewer no server covers
    within ``radius`` redrawn."""
    server_xy = rng.uniform(0, side, (servers, 2))
    viewer_xy = rng.uniform(0, side, (viewers, 2))
    distance = cdist(viewer_xy, server_xy)
    while (lost := ~(distance <= radius).any(axis=1)).any():
        viewer_xy[lost] = rng.uniform(0, side, (int(lost.sum()), 2))
        distance[lost] = cdist(viewer_xy[lost], server_xy)
    return Layout(server_xy, viewer_xy, side)


@cache
def _melbourne() -> eua.Melbourne:
    return eua.load()


def melbourne(rng: np.random.Generator, viewers: int, servers: int, radius: float) -> Layout:
    """The paper's section 4.1: "從數據集中隨機選取一定數量地理位置接近的基站部署邊緣服務器…隨機選取其中部分
    覆蓋重疊區域內的用戶作為直播用戶" (edge servers at a random group of neighbouring sites, viewers
    drawn from the users in their overlapping coverage). The group is a random site and its
    ``servers - 1`` nearest; the viewers are users within ``radius`` of two or more of them
    (of the one, for a single server), without replacement while there are enough, with
    replacement beyond (several viewers at one location); streamers are drawn from the users
    any of them covers ("考慮主播和用戶地理位置接近的情況": streamers near their viewers)."""
    data = _melbourne()
    if servers > len(data.sites):
        raise ValueError(f"the data set has {len(data.sites)} sites, not {servers}")
    anchor = rng.integers(len(data.sites))
    chosen = np.argsort(cdist(data.sites[anchor:anchor + 1], data.sites)[0],
                        kind="stable")[:servers]
    reached = (cdist(data.users, data.sites[chosen]) <= radius).sum(axis=1)
    overlap = np.flatnonzero(reached >= min(2, servers))
    if not len(overlap):
        raise ValueError(f"no user lies where {servers} neighbouring sites overlap")
    picked = rng.choice(overlap, size=viewers, replace=viewers > len(overlap))
    return Layout(data.sites[chosen], data.users[picked], side=0.0,
                  streamer_spots=data.users[reached >= 1])
