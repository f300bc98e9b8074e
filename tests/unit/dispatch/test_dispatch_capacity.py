"""dispatch's capacity in several dimensions and near full load: tickets per dimension against
a shared capacity figure, the dimension that binds, fragmented rejections and the load sweep."""

from __future__ import annotations

import pydantic
import pytest

from controller.policies.dispatch import model
from controller.policies.dispatch.access import Geography, LocationDatabase, MediaNode
from controller.policies.dispatch.capacity import SharedCapacity, Tickets, redirects
from experiments.kinds.dispatch.capacity import KINDS, Parameters
from experiments.sweeps.kinds import Cell

AUDIO = {"streams": 1, "audio_kbps": 64}
SD = {"streams": 1, "video_kbps": 2500, "audio_kbps": 64}
HD = {"streams": 1, "video_kbps": 3500, "audio_kbps": 128}


def test_tickets_strand_a_join_that_shared_capacity_admits():
    centers = ["cn", "us", "eu"]
    tickets, shared = Tickets({"n": 6}, centers), SharedCapacity({"n": 6}, centers)
    for book in (tickets, shared):
        assert book.admit("cn", "n") and book.admit("cn", "n")
    # cn's two tickets are gone while us and eu hold four unused: the node has room, cn not.
    assert not tickets.has_room("cn", "n") and not tickets.admit("cn", "n")
    assert sum(tickets.left["n"][center]["streams"] for center in centers) == 4
    assert shared.admit("cn", "n")


def test_tickets_split_every_dimension_among_the_centers():
    tickets = Tickets({"n": {"streams": 7, "video_kbps": 10}}, ["a", "b"])
    assert tickets.left["n"] == {"a": {"streams": 4, "video_kbps": 5},
                                 "b": {"streams": 3, "video_kbps": 5}}


def test_bitrate_binds_while_streams_have_room():
    capacity = {"n": {"streams": 10, "video_kbps": 6000, "audio_kbps": 1000}}
    for book in (Tickets(capacity, ["c"]), SharedCapacity(capacity, ["c"])):
        assert book.admit("c", "n", HD)
        assert not book.has_room("c", "n", HD) and not book.admit("c", "n", HD)
        assert book.admit("c", "n", SD)  # 6000 kbit/s taken, 8 stream slots left
        assert not book.admit("c", "n", SD) and book.admit("c", "n", AUDIO)
        book.release("c", "n", HD)
        assert book.admit("c", "n", HD)
    # The stale figure learns the node's load in every dimension from a report.
    shared = SharedCapacity(capacity, ["c"])
    shared.report("n", {"streams": 2, "video_kbps": 5000, "audio_kbps": 128})
    assert not shared.has_room("c", "n", SD) and shared.has_room("c", "n", AUDIO)


def test_a_redirect_moves_the_latest_clients_until_every_dimension_fits():
    demands = {"sd": SD, "hd1": HD, "hd2": HD, "a": AUDIO}
    capacity = {"n": {"streams": 10, "video_kbps": 6000}}
    # Latest joined first, even an audio-only join that frees no video bitrate.
    assert redirects({"n": ["sd", "hd1", "hd2", "a"]}, capacity, demands) == \
        [("a", "n"), ("hd2", "n")]
    assert redirects({"n": ["hd1", "sd", "a"]}, capacity, demands) == []


def two_nodes_one_city(clients: dict[str, dict]) -> model.World:
    """Nodes n1 and n2 in city a; ``clients`` (name -> demand) there, joining in this order."""
    delays = {("a", "n1"): 0.001, ("a", "n2"): 0.001}
    nodes = tuple(MediaNode(name, "r0", f"am{index}", "a", 10)
                  for index, name in enumerate(("n1", "n2")))
    zero = dict.fromkeys(delays, 0.0)
    return model.World(Geography({"a": "r0"}, delays), nodes,
                       tuple(model.ModelClient(name, "a", 0.01) for name in clients),
                       zero, zero, "r0")


@pytest.mark.parametrize("control", ["tickets", "shared"])
def test_a_join_scattered_over_nodes_is_rejected_as_fragmented(control):
    demands = {"sd1": SD, "sd2": SD, "hd": HD}
    world = two_nodes_one_city(demands)
    capacities = {node: {"streams": 10, "video_kbps": 5000} for node in ("n1", "n2")}
    result = model.join_burst(world, LocationDatabase(world.geography, 0.0), control,
                              centers=1, demands=demands, capacities=capacities)
    # One SD on each node (the least used first): 2500 kbit/s left on each, 5000 in all.
    assert (result.admitted, result.rejected, result.fragmented) == (2, 1, 1)
    assert result.rejected_with_room == 0
    smaller = {node: {"streams": 10, "video_kbps": 4000} for node in ("n1", "n2")}
    short = model.join_burst(world, LocationDatabase(world.geography, 0.0), control,
                             centers=1, demands=demands, capacities=smaller)
    assert (short.rejected, short.fragmented) == (1, 0)  # 3000 kbit/s left in all


def small_world(seed=1):
    return model.generate(seed, regions=3, sites_per_region=3, nodes=18, clients=900,
                          capacity=40)


def burst_at(world, profile, load, control, seed=1):
    demands = model.draw_demands(world, profile, seed)
    return model.join_burst(world, LocationDatabase(world.geography, 0.1, seed=seed), control,
                            seed=seed, demands=demands,
                            capacities=model.capacities_at_load(world, demands, profile, load))


def test_capacities_at_load_put_the_demand_at_that_share_of_the_binding_dimension():
    world = small_world()
    demands = model.draw_demands(world, model.MEDIA, 1)
    capacities = model.capacities_at_load(world, demands, model.MEDIA, 0.8)
    total = {dimension: sum(demand.get(dimension, 0) for demand in demands.values())
             for dimension in model.MEDIA.headroom}
    offered = {dimension: sum(node[dimension] for node in capacities.values())
               for dimension in model.MEDIA.headroom}
    assert total["video_kbps"] / offered["video_kbps"] == pytest.approx(0.8, rel=0.01)
    assert total["streams"] / offered["streams"] == pytest.approx(0.8 / 1.5, rel=0.02)
    with pytest.raises(ValueError, match="load must be > 0"):
        model.capacities_at_load(world, demands, model.MEDIA, 0)


def test_below_full_load_every_ticket_rejection_is_fragmented():
    world = small_world()
    tickets = burst_at(world, model.STREAMS_ONLY, 0.99, "tickets")
    shared = burst_at(world, model.STREAMS_ONLY, 0.99, "shared")
    # Total capacity exceeds the clients, so a rejected stream always had room elsewhere.
    assert tickets.rejected > 0
    assert tickets.fragmented == tickets.rejected_with_room == tickets.rejected
    assert shared.rejected < tickets.rejected
    assert tickets.oversold_streams == 0 and shared.oversold_streams > 0


@pytest.mark.parametrize("profile", [model.STREAMS_ONLY, model.MEDIA], ids=["streams", "media"])
@pytest.mark.parametrize("control", ["tickets", "shared"])
def test_rejections_rise_with_load(profile, control):
    world = small_world()
    rejected = [burst_at(world, profile, load, control).rejected for load in (0.8, 1.0, 1.3)]
    assert rejected[0] <= rejected[1] <= rejected[2] and rejected[0] < rejected[2]
    if profile is model.STREAMS_ONLY:
        # Past full load the streams beyond the capacity cannot all be admitted.
        assert rejected[2] >= len(world.clients) * (1 - 1 / 1.3) * 0.9


def test_kind_runs_a_burst_at_a_load_in_each_dimension_set():
    kind = KINDS[0]
    rows = {(dimensions, policy): kind.run(Cell(
        "e", "s", "load", "1.1", policy, 0, 4,
        Parameters(clients=300, nodes=12, regions=3, sites_per_region=2, load=1.1,
                   dimensions=dimensions)))[0]
        for dimensions in ("streams", "media") for policy in kind.policies}
    assert {metric.name for metric in kind.metrics} >= set().union(*rows.values())
    assert all(row["rejected"] > 0 and row["fragmented"] <= row["rejected"]
               for row in rows.values())
    assert rows["media", "tickets"]["rejected_share"] == pytest.approx(
        rows["media", "tickets"]["rejected"] / 300)
    with pytest.raises(pydantic.ValidationError, match="set load"):
        Parameters(dimensions="media")
    with pytest.raises(ValueError, match="no policy 'probe'"):
        kind.run(Cell("e", "s", "load", "1", "probe", 0, 4, Parameters()))
