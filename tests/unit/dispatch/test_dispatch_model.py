"""dispatch's model-level simulation on small worlds: the world generator, access by database
and by probing, and the join burst with tickets and with shared capacity."""

from __future__ import annotations

import pytest

from controller.policies.dispatch import model
from controller.policies.dispatch.access import Geography, LocationDatabase, MediaNode
from controller.policies.dispatch.rooms import LookupMode
from experiments.kinds.dispatch.model import KINDS, Parameters
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
    assert rows["broadcast"]["lookup_messages"] == 4 and rows["hint"]["lookup_messages"] == 2
    assert {metric.name for metric in kind.metrics} >= set(rows["database"]) | set(
        rows["shared"]) | set(rows["hint"])
    with pytest.raises(ValueError, match="no policy 'lua'"):
        kind.run(Cell("e", "s", "error_share", "0.1", "lua", 0, 4, parameters))


def three_cities() -> model.World:
    """Cities a, b, c in three regions, a node in each; clients in a and b only. The centers
    sit with the nodes: round trips c0-c1 0.1 s, c0-c2 0.2 s, c1-c2 0.14 s."""
    one_way = {("a", "b"): 0.05, ("a", "c"): 0.1, ("b", "c"): 0.07}
    sites = {"a": "r0", "b": "r1", "c": "r2"}
    delays = {(site, f"n{other}"): 0.001 if site == other else
              one_way.get((site, other), one_way.get((other, site)))
              for site in sites for other in sites}
    nodes = tuple(MediaNode(f"n{site}", region, f"{site}m0", site, 10)
                  for site, region in sites.items())
    zero = {key: 0.0 for key in delays}
    return model.World(Geography(sites, delays), nodes,
                       (model.ModelClient("ca", "a", 0.01), model.ModelClient("cb", "b", 0.01)),
                       zero, zero, "r0")


def test_lookup_by_hint_and_by_broadcast_hand_computed():
    world = three_cities()
    assert [node.name for node in model.place_centers(world, 3)] == ["na", "nb", "nc"]
    # Each client views the other's stream: c0 asks for c1's and c1 for c0's, 0.1 s apart.
    fresh = model.lookups(world, LookupMode.HINT, centers=3)
    assert fresh.messages == [2, 2] and fresh.fell_back == [False, False]
    assert fresh.seconds == pytest.approx([0.1, 0.1])
    # Broadcast asks both others; the owner's yes (0.1 s) comes before c2's no.
    broadcast = model.lookups(world, LookupMode.BROADCAST, centers=3, stale_hint_share=1.0)
    assert broadcast.messages == [4, 4] and broadcast.fell_back == [False, False]
    assert broadcast.seconds == pytest.approx([0.1, 0.1])
    # Every hint stale, naming c2: its no, then the broadcast to the one center left.
    stale = model.lookups(world, LookupMode.HINT, centers=3, stale_hint_share=1.0)
    assert stale.messages == [4, 4] and stale.fell_back == [True, True]
    assert stale.seconds == pytest.approx([0.2 + 0.1, 0.14 + 0.1])
    assert stale.summary()["lookup_ms_mean"] == pytest.approx(270)
    with pytest.raises(ValueError, match="one center"):
        model.lookups(world, LookupMode.HINT, centers=1)


def test_lookup_costs_on_a_generated_world():
    world = small_world()
    broadcast = model.lookups(world, LookupMode.BROADCAST, centers=6, seed=3)
    fresh = model.lookups(world, LookupMode.HINT, centers=6, seed=3)
    assert set(broadcast.messages) == {10} and set(fresh.messages) == {2}
    # Same streams looked up, and the broadcast's first yes is the owner's: the same times.
    assert fresh.seconds == broadcast.seconds and min(fresh.seconds) > 0
    few = model.lookups(world, LookupMode.HINT, centers=6, stale_hint_share=0.1, seed=3)
    many = model.lookups(world, LookupMode.HINT, centers=6, stale_hint_share=0.5, seed=3)
    assert few.summary()["lookup_fallback"] == pytest.approx(0.1, abs=0.03)
    assert many.summary()["lookup_fallback"] == pytest.approx(0.5, abs=0.05)
    # The stale hints at 0.1 are among those at 0.5; each costs 2 + 2 x 4 messages and time.
    assert all(m for f, m in zip(few.fell_back, many.fell_back) if f)
    assert {m for m, f in zip(many.messages, many.fell_back) if f} == {10}
    assert all(s > t for s, t, f in zip(many.seconds, fresh.seconds, many.fell_back) if f)


def test_passive_transcoding_runs_a_transcoder_only_while_the_other_protocol_is_in():
    joins = [model.Join("r", "a", "rtmp", 1.0, 14.0),
             model.Join("r", "w1", "webrtc", 7.0, 11.0),
             model.Join("r", "w2", "webrtc", 9.0, 12.0),  # overlaps w1: no second start
             model.Join("r", "w3", "webrtc", 13.0, 20.0)]  # past the horizon at 14 s
    passive = model.transcoding(joins, {"r": "rtmp"}, 14.0, "passive")
    assert passive == model.TranscodingResult(transcoder_s=5.0 + 1.0, starts=2, cold_joins=2,
                                              other_joins=3)
    always = model.transcoding(joins, {"r": "rtmp"}, 14.0, "always")
    assert always == model.TranscodingResult(14.0, 1, 0, 3)
    with pytest.raises(ValueError, match="passive or always"):
        model.transcoding(joins, {"r": "rtmp"}, 14.0, "never")


def test_passive_saves_most_transcoder_time_when_few_viewers_play_another_protocol():
    joins, sources = model.room_joins(3, rooms=50, rate_per_room=0.01, stay_s=300.0,
                                      other_share=0.05, horizon_s=3600.0)
    assert model.room_joins(3, rooms=50, rate_per_room=0.01, stay_s=300.0, other_share=0.05,
                            horizon_s=3600.0) == (joins, sources)
    passive = model.transcoding(joins, sources, 3600.0, "passive")
    always = model.transcoding(joins, sources, 3600.0, "always")
    # About 1.8 other-protocol joins per room-hour at 5 min each: the transcoder is needed a
    # small share of the hour, and passive runs it exactly then.
    assert 0 < passive.transcoder_s < 0.4 * always.transcoder_s
    assert passive.cold_joins == passive.starts and always.cold_joins == 0
    # Everyone on the other protocol: passive's transcoders run nearly all the time.
    busy, busy_sources = model.room_joins(3, rooms=20, rate_per_room=0.05, stay_s=600.0,
                                          other_share=1.0, horizon_s=3600.0)
    assert (model.transcoding(busy, busy_sources, 3600.0, "passive").transcoder_s
            > 0.9 * model.transcoding(busy, busy_sources, 3600.0, "always").transcoder_s)
