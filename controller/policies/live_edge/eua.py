"""The EUA data set's Melbourne CBD (seed 000's "Australian base-station data set [16]", in
``eua/`` with its licence): the base-station sites where edge servers go and the user
locations, in metres on a plane about the sites' centre, and who reaches which site."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources

import numpy as np

DATA = resources.files(__package__) / "eua"
SITES_FILE, USERS_FILE = "site-optus-melbCBD.csv", "users-melbcbd-generated.csv"
EARTH_RADIUS_M = 6_371_008.8  # the mean radius (IUGG)
# The paper: "根據現實場景中的中心城區基站的覆蓋范圍，將數據集中基站的覆蓋半徑設定為300 m"
# (a CBD base station's coverage, as the paper sets it).
PAPER_RADIUS_M = 300.0


@dataclass(frozen=True)
class Melbourne:
    """Sites (their ids and positions) and users (positions), positions as (east, north)
    metres from the sites' mean latitude and longitude."""

    site_ids: tuple[str, ...]
    sites: np.ndarray
    users: np.ndarray

    def distances(self) -> np.ndarray:
        """Metres from every user (rows) to every site (columns)."""
        return np.linalg.norm(self.users[:, None, :] - self.sites[None, :, :], axis=2)

    def reachable(self, radius: float = PAPER_RADIUS_M) -> np.ndarray:
        """How many sites each user is within ``radius`` of."""
        return (self.distances() <= radius).sum(axis=1)


def _read(name: str, columns: tuple[str, ...]) -> list[list[str]]:
    with (DATA / name).open(newline="") as stream:
        rows = list(csv.DictReader(stream))
    missing = [column for column in columns if rows and column not in rows[0]]
    if not rows or missing:
        raise ValueError(f"{DATA / name}: no rows, or no column {', '.join(missing)}")
    return [[row[column] for column in columns] for row in rows]


def load() -> Melbourne:
    """The data set on the plane: an equirectangular projection about the sites' centre. Over
    the CBD's 2 km it is within 0.1 m of the great-circle distance, so coverage at the paper's
    radius is the same either way, and the model's planar geometry takes it as it is."""
    sites = _read(SITES_FILE, ("SITE_ID", "LATITUDE", "LONGITUDE"))
    users = _read(USERS_FILE, ("Latitude", "Longitude"))
    site_degrees = np.array([[float(lat), float(lon)] for _, lat, lon in sites])
    user_degrees = np.array([[float(lat), float(lon)] for lat, lon in users])
    origin = np.radians(site_degrees.mean(axis=0))

    def plane(degrees: np.ndarray) -> np.ndarray:
        latitude, longitude = np.radians(degrees).T
        return np.column_stack([EARTH_RADIUS_M * np.cos(origin[0]) * (longitude - origin[1]),
                                EARTH_RADIUS_M * (latitude - origin[0])])

    return Melbourne(tuple(site for site, _, _ in sites), plane(site_degrees),
                     plane(user_degrees))
