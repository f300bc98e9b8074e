"""topologies/live_edge/capacity.yaml's claim, checked without Mininet: on its inputs the
edges' uplinks bind (no deterministic policy serves every viewer its preferred rung) and LUA, DF
and MHCP place the same viewers differently, the first period's 15 viewers then the second's 15
(the emulated experiment, experiments/live_edge/capacity.yaml, measures what that costs)."""

from __future__ import annotations

import itertools

import pytest

from experiments import scenarios
from controller import policies
from controller.core import ControllerCore
from controller.view import NetworkView
from tests.conftest import ROOT

SCENARIO = ROOT / "topologies" / "live_edge" / "capacity.yaml"
LADDER = (1e6, 0.625e6, 0.3125e6, 0.125e6)
FIRST = [f"viewer{i}" for start in (1, 11, 21) for i in range(start, start + 5)]
SECOND = [f"viewer{i}" for start in (6, 16, 26) for i in range(start, start + 5)]


def allocation(policy: str) -> dict[str, tuple[str, float]]:
    """Each served viewer's (edge, bitrate) after both periods' joins under ``policy``."""
    loaded = scenarios.load(SCENARIO, {"EDGEBED_POLICY": policy})
    settings = loaded.document.controller
    core = ControllerCore(NetworkView.from_scenario(loaded),
                          policies.create(settings.policy, settings.policy_params))
    core.place([core.request_for(v, "live", 1e6, LADDER) for v in FIRST], 0.0)
    core.place([core.request_for(v, "live", 1e6, LADDER) for v in SECOND], 5.0)
    return {record.placement.request.client: (record.placement.server, record.placement.bitrate)
            for record in core.flows.values()}


@pytest.fixture(scope="module")
def allocations():
    return {policy: allocation(policy) for policy in ("lua", "df", "mhcp")}


def test_capacity_binds_for_every_deterministic_policy(allocations):
    for policy, placed in allocations.items():
        short = [v for v in FIRST + SECOND if v not in placed or placed[v][1] < 0.3125e6]
        assert short, f"{policy} served everyone at 0.3125 Mbit/s or more: nothing binds"


def test_every_pair_of_policies_places_viewers_differently(allocations):
    for a, b in itertools.combinations(allocations, 2):
        differ = [v for v in FIRST + SECOND if allocations[a].get(v) != allocations[b].get(v)]
        assert len(differ) >= 10, (a, b, differ)
