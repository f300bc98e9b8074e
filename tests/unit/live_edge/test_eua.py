"""The EUA Melbourne data set as the paper reads it: 125 sites, 816 users, and who reaches how
many sites at the paper's 300 m radius against the paper's Fig. 1 shares."""

from __future__ import annotations

import numpy as np
import pytest

from controller.policies.live_edge import eua

# The paper's Fig. 1 text: users reaching under 10 sites 8.8%, 10-20 sites 74.4%, over 20
# 16.8% ("91% reach more than 10": 100% - 8.8%, so 10 itself counts).
PAPER_SHARES = {"under 10": 0.088, "10 to 20": 0.744, "over 20": 0.168}
# The shares are of 816 users: one user is 0.12 points, and the paper rounds to a tenth.
ONE_USER = 1 / 816


@pytest.fixture(scope="module")
def melbourne():
    return eua.load()


def test_the_data_set_has_the_sites_and_users_it_ships(melbourne):
    assert len(melbourne.site_ids) == len(set(melbourne.site_ids)) == 125
    assert melbourne.sites.shape == (125, 2) and melbourne.users.shape == (816, 2)
    # The CBD: about 2 km by 1.4 km about the sites' centre.
    assert np.all(np.abs(melbourne.sites.mean(axis=0)) < 1.0)
    assert 1500 < np.ptp(melbourne.users[:, 0]) < 2500 and 1000 < np.ptp(melbourne.users[:, 1]) < 2000


def test_the_plane_keeps_great_circle_distances(melbourne):
    """The haversine distance from every user to every site, from the files' degrees."""
    sites = np.radians([[float(lat), float(lon)] for _, lat, lon in
                        eua._read(eua.SITES_FILE, ("SITE_ID", "LATITUDE", "LONGITUDE"))])
    users = np.radians([[float(lat), float(lon)] for lat, lon in
                        eua._read(eua.USERS_FILE, ("Latitude", "Longitude"))])
    (lat1, lon1), (lat2, lon2) = users.T[:, :, None], sites.T[:, None, :]
    half = (np.sin((lat2 - lat1) / 2) ** 2
            + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2)
    great_circle = 2 * eua.EARTH_RADIUS_M * np.arcsin(np.sqrt(half))
    assert np.abs(great_circle - melbourne.distances()).max() < 0.5


def test_coverage_at_the_paper_s_radius_matches_the_paper_s_figure_one(melbourne):
    reached = melbourne.reachable(eua.PAPER_RADIUS_M)
    shares = {"under 10": np.mean(reached < 10),
              "10 to 20": np.mean((reached >= 10) & (reached <= 20)),
              "over 20": np.mean(reached > 20)}
    for name, paper in PAPER_SHARES.items():
        assert abs(shares[name] - paper) <= 0.0005 + ONE_USER, (name, shares[name], paper)
    assert round(float(np.mean(reached >= 10)), 2) == 0.91
    # A smaller radius reaches fewer: the figure depends on the radius, not on the data alone.
    assert np.mean(melbourne.reachable(150.0) >= 10) < 0.5


def test_a_file_without_its_columns_is_refused(tmp_path, monkeypatch):
    (tmp_path / eua.SITES_FILE).write_text("SITE,LAT\n1,2\n")
    monkeypatch.setattr(eua, "DATA", tmp_path)
    with pytest.raises(ValueError, match=r"site-optus-melbCBD.csv: no rows, or no column "
                                         r"SITE_ID, LATITUDE, LONGITUDE"):
        eua.load()
