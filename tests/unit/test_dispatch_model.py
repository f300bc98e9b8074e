"""Seed 001's model-level simulation on small worlds: the world generator, access by database
and by probing, and the join burst with tickets and with shared capacity."""

from __future__ import annotations

import pytest

from controller.policies.dispatch import model
from controller.policies.dispatch.access import LocationDatabase
from experiments.kinds.dispatch import KINDS, Parameters
from experiments.sweeps.kinds import Cell


def small_world(seed=1, **options):
    return model.generate(seed, regions=3, sites_per_region=3, nodes=18, clients=900,
                          capacity=40, **options)


def test_world_is_seeded_and_cross_border_paths_are_worse():
    world = small_world()
    assert small_world().clients == world.clients and small_world(2).clients != world.clients
    inside = [world.loss[s, n.name] for s in world.geography.regions for n in world.nodes
              if world.geography.regions[s] == n.region]
    across = [world.loss[s, n.name] for s in world.geography.regions for n in world.nodes
              if world.geography.regions[s] != n.region]
    assert max(inside) < min(across)
    with pytest.raises(ValueError, match="at least one"):
        model.generate(0, nodes=0)


def test_probing_fixes_what_the_database_gets_wrong():
    world = small_world()
    database = LocationDatabase(world.geography, 0.3, home_region=world.home_region,
                                same_region_share=0.0, seed=1)
    first = model.access(world, database, probe=False, seed=1).summary()
    probed = model.access(world, database, probe=True, seed=1).summary()
    assert first["database_misplaced"] == pytest.approx(0.3, abs=0.05)
    assert probed["badly_placed"] < 0.5 * first["badly_placed"]
    assert probed["poor_sessions"] < first["poor_sessions"]
    exact = LocationDatabase(world.geography, 0.0, seed=1)
    assert model.access(world, exact, probe=False).summary()["badly_placed"] == 0


def test_a_burst_oversells_with_shared_capacity_and_never_with_tickets():
    world = small_world()
    database = LocationDatabase(world.geography, 0.1, seed=1)
    shared = model.join_burst(world, database, "shared", report_period=2.0, seed=1)
    tickets = model.join_burst(world, database, "tickets", report_period=2.0, seed=1)
    assert shared.oversold_streams > 0 and shared.redirects > 0
    assert shared.peak_utilization > 1
    assert tickets.oversold_streams == 0 and tickets.redirects == 0
    assert tickets.peak_utilization <= 1
    # Every client ends somewhere or is counted as rejected.
    for result in (shared, tickets):
        assert result.admitted + result.rejected == len(world.clients)


def test_one_center_cannot_oversell_even_with_shared_capacity():
    world = small_world()
    database = LocationDatabase(world.geography, 0.1, seed=1)
    # (Reports in flight are its only blind spot: with none, it sees every admission.)
    alone = model.join_burst(world, database, "shared", centers=1, report_period=2.0,
                             report_delay=0.0, seed=1)
    assert alone.oversold_streams == 0


def test_kind_runs_each_study_by_policy():
    kind = KINDS[0]
    parameters = Parameters(clients=300, nodes=12, regions=3, sites_per_region=2, capacity=30)
    rows = {policy: kind.run(Cell("e", "s", "error_share", "0.1", policy, 0, 4, parameters))[0]
            for policy in kind.policies}
    assert set(rows["probe"]) >= {"poor_sessions", "badly_placed"}
    assert set(rows["tickets"]) >= {"oversold_streams", "redirects"}
    assert {metric.name for metric in kind.metrics} >= set(rows["database"]) | set(
        rows["shared"])
    with pytest.raises(ValueError, match="no policy 'lua'"):
        kind.run(Cell("e", "s", "error_share", "0.1", "lua", 0, 4, parameters))
