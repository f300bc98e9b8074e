"""dispatch's pure dispatch logic: ranking, probing, tickets, redirect, scheduling modes,
relay choice, hot standby, back-to-source lookup, passive transcoding."""

from __future__ import annotations

import math

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.policies.dispatch.access import (Geography, LocationDatabase, MediaNode,
                                                 candidates,
                                                 choose_by_probe, rank)
from controller.policies.dispatch.capacity import (SharedCapacity, Tickets, redirects,
                                                   split)
from controller.policies.dispatch.quality import VIA, PathQuality
from controller.policies.dispatch.rooms import Directory, LookupMode, Transcoding
from controller.policies.dispatch.routing import Mode, StandbyRoutes, choose_relay, schedule

MS = 1e-3

# Two sites in region cn, one in us; node a1/a2 at sz, b1 at gz, u1 at ny.
GEO = Geography({"sz": "cn", "gz": "cn", "ny": "us"},
                {("sz", "a1"): 2 * MS, ("sz", "a2"): 3 * MS, ("sz", "b1"): 25 * MS,
                 ("sz", "u1"): 120 * MS, ("gz", "a1"): 25 * MS, ("gz", "a2"): 25 * MS,
                 ("gz", "b1"): 2 * MS, ("gz", "u1"): 120 * MS, ("ny", "u1"): 3 * MS,
                 ("ny", "a1"): 120 * MS, ("ny", "a2"): 120 * MS, ("ny", "b1"): 120 * MS})


def node(name, site, load=0.0, capacity=10, cost=0.0, preference=0.0, room="r"):
    return MediaNode(name, GEO.regions[site], room, site, capacity, load, cost, preference)


NODES = [node("a1", "sz"), node("a2", "sz"), node("b1", "gz"), node("u1", "ny")]


# ranking

def test_rank_puts_nearest_first_and_leaves_out_unreachable():
    assert [n.name for n in rank(NODES, "ny", GEO)][:1] == ["u1"]
    lonely = NODES + [node("x", "sz")]  # no delay entry for x: unreachable
    assert "x" not in [n.name for n in rank(lonely, "sz", GEO)]


def test_rank_breaks_near_ties_by_load_then_cost_then_preference():
    loaded = [node("a1", "sz", load=8), node("a2", "sz", load=1), node("b1", "gz")]
    assert [n.name for n in rank(loaded, "sz", GEO)][:2] == ["a2", "a1"]
    costly = [node("a1", "sz", cost=2), node("a2", "sz", cost=1)]
    assert rank(costly, "sz", GEO)[0].name == "a2"
    preferred = [node("a1", "sz"), node("a2", "sz", preference=1)]
    assert rank(preferred, "sz", GEO)[0].name == "a2"
    # Equal in every respect: the exactly nearer one.
    assert rank([node("a2", "sz"), node("a1", "sz")], "sz", GEO)[0].name == "a1"


def test_rank_puts_full_nodes_last_even_when_nearest():
    full = [node("a1", "sz", load=10), node("a2", "sz", load=10), node("b1", "gz"),
            node("u1", "ny")]
    assert [n.name for n in rank(full, "sz", GEO)] == ["b1", "u1", "a1", "a2"]
    no_ticket = rank(NODES, "sz", GEO, has_room=lambda n: n.name != "a1")
    assert no_ticket[0].name == "a2" and no_ticket[-1].name == "a1"


# the location database

def test_database_is_right_without_error_and_deterministic_with():
    exact = LocationDatabase(GEO, 0.0, seed=1)
    assert all(exact.locate(f"c{i}", "sz") == "sz" for i in range(100))
    wrong = LocationDatabase(GEO, 1.0, seed=1)
    assert all(wrong.locate(f"c{i}", "sz") != "sz" for i in range(100))
    db = LocationDatabase(GEO, 0.3, seed=7)
    assert [db.locate(f"c{i}", "gz") for i in range(50)] == \
           [LocationDatabase(GEO, 0.3, seed=7).locate(f"c{i}", "gz") for i in reversed(
               range(50))][::-1]


def test_database_error_share_is_as_configured_in_country_and_abroad():
    db = LocationDatabase(GEO, 0.1, abroad_error_share=0.4, home_region="cn", seed=3)
    home = sum(db.locate(f"c{i}", "sz") != "sz" for i in range(4000)) / 4000
    abroad = sum(db.locate(f"c{i}", "ny") != "ny" for i in range(4000)) / 4000
    assert home == pytest.approx(0.1, abs=0.02)
    assert abroad == pytest.approx(0.4, abs=0.03)


def test_database_refuses_unknown_sites_and_shares():
    with pytest.raises(KeyError, match="unknown site 'mars'"):
        LocationDatabase(GEO, 0.1).locate("c", "mars")
    with pytest.raises(ValueError, match="error_share"):
        LocationDatabase(GEO, 1.5)


def test_geography_from_graph_follows_links_that_are_up():
    graph = nx.MultiDiGraph()
    for u, v, delay in (("sz", "s1", 0.001), ("s1", "a1", 0.001), ("sz", "s2", 0.010),
                        ("s2", "a1", 0.010)):
        graph.add_edge(u, v, delay=delay, up=True)
    assert Geography.from_graph(graph, {"sz": "cn"}, ["a1"]).delay("sz", "a1") == \
        pytest.approx(0.002)
    graph.edges["s1", "a1", 0]["up"] = False
    assert Geography.from_graph(graph, {"sz": "cn"}, ["a1"]).delay("sz", "a1") == \
        pytest.approx(0.020)


# probing

def test_probe_takes_the_measured_best_and_skips_silent_candidates():
    probes = {"a1": PathQuality(0.200, 0.05), "b1": PathQuality(0.030), "u1": None}
    assert choose_by_probe(["a1", "b1", "u1"], probes) == "b1"
    assert choose_by_probe(["u1"], probes) is None
    # Equal measurements: the ranking decides.
    assert choose_by_probe(["b1", "a1"], {"a1": PathQuality(0.03), "b1": PathQuality(0.03)}) \
        == "b1"


def test_probing_corrects_a_misplaced_client():
    db = LocationDatabase(GEO, 1.0, seed=0)
    believed = db.locate("viewer", "sz")
    offered = [n.name for n in rank(NODES, believed, GEO)]
    assert offered[0] not in ("a1", "a2")  # the database's pick is far from the viewer
    measured = {name: PathQuality(2 * GEO.delay("sz", name)) for name in offered}
    assert choose_by_probe(offered, measured) in ("a1", "a2")


# quality

def test_via_thresholds_and_composition():
    assert not VIA.poor(PathQuality(0.320, 0.012, 0.012))
    assert VIA.poor(PathQuality(0.321)) and VIA.poor(PathQuality(0.1, 0.013))
    assert VIA.poor(PathQuality(0.1, 0.0, 0.0121))
    both = PathQuality(0.1, 0.01, 0.003).then(PathQuality(0.05, 0.02, 0.004))
    assert both.rtt == pytest.approx(0.15)
    assert both.loss == pytest.approx(1 - 0.99 * 0.98)
    assert both.jitter == pytest.approx(0.005)
    with pytest.raises(ValueError, match="loss"):
        PathQuality(0.1, 1.5)
    with pytest.raises(ValueError, match="rtt"):
        PathQuality(math.nan)


# relays

def test_relay_inserted_only_when_direct_is_poor_and_relay_is_better():
    lossy = PathQuality(0.200, 0.04, 0.005)
    legs = {"hk": (PathQuality(0.030, 0.001), PathQuality(0.160, 0.002)),
            "sg": (PathQuality(0.090, 0.0), PathQuality(0.200, 0.0))}
    assert choose_relay(lossy, legs) == "hk"
    assert choose_relay(PathQuality(0.200, 0.001), legs) is None  # direct is fine
    worse = {"hk": (PathQuality(0.300, 0.05), PathQuality(0.2, 0.05))}
    assert choose_relay(lossy, worse) is None
    # A relay that is poor too but less so still helps.
    long = {"hk": (PathQuality(0.200, 0.0), PathQuality(0.150, 0.0))}
    assert choose_relay(lossy, long) == "hk"


# tickets and shared capacity

def test_split_shares_capacity_among_centers():
    assert split(300, ["cn", "us", "eu"]) == {"cn": 100, "us": 100, "eu": 100}
    assert split(10, ["a", "b", "c"]) == {"a": 4, "b": 3, "c": 3}
    with pytest.raises(ValueError, match="no dispatch centers"):
        split(10, [])


@settings(max_examples=200, deadline=None)
@given(capacities=st.dictionaries(st.sampled_from(["n1", "n2", "n3", "n4"]),
                                  st.integers(0, 40), min_size=1),
       centers=st.integers(1, 5),
       events=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.booleans()),
                       max_size=300))
def test_tickets_never_oversell_across_centers(capacities, centers, events):
    names = [f"c{i}" for i in range(centers)]
    tickets = Tickets(capacities, names)
    nodes = sorted(capacities)
    held: dict[tuple[str, str], int] = {}
    for center_index, node_index, joining in events:
        center, node_name = names[center_index % centers], nodes[node_index % len(nodes)]
        key = (center, node_name)
        if joining:
            if tickets.admit(center, node_name):
                held[key] = held.get(key, 0) + 1
        elif held.get(key):
            tickets.release(center, node_name)
            held[key] -= 1
        for name in nodes:
            assert sum(held.get((c, name), 0) for c in names) <= capacities[name]


def test_shared_capacity_with_stale_reports_oversells_a_burst():
    shared = SharedCapacity({"n": 6}, ["cn", "us", "eu"])
    admitted = sum(shared.admit(center, "n") for _ in range(6) for center in ("cn", "us", "eu"))
    assert admitted == 18  # each center believes it alone filled the node
    shared.report("n", 18)
    assert not any(shared.has_room(center, "n") for center in ("cn", "us", "eu"))
    tickets = Tickets({"n": 6}, ["cn", "us", "eu"])
    assert sum(tickets.admit(center, "n") for _ in range(6)
               for center in ("cn", "us", "eu")) == 6


def test_redirect_moves_the_latest_clients_beyond_capacity():
    assert redirects({"n": ["v1", "v2", "v3", "v4"], "m": ["w1"]}, {"n": 2, "m": 5}) == \
        [("v4", "n"), ("v3", "n")]


# scheduling modes

def test_single_point_uses_origin_then_spills_within_the_room_then_goes_multi():
    origin, twin, far = node("a1", "sz", room="r1"), node("a2", "sz", room="r1"), \
        node("b1", "gz", room="r2")
    room = [origin, twin]
    assert schedule(Mode.SINGLE, origin, [far, origin], room, lambda n: True).node == "a1"
    spill = schedule(Mode.SINGLE, origin, [far], room, lambda n: n.name != "a1")
    assert (spill.node, spill.upstream, spill.spilled) == ("a2", ("a1",), True)
    fallback = schedule(Mode.SINGLE, origin, [far], room, lambda n: n.name == "b1")
    assert (fallback.node, fallback.upstream) == ("b1", ("a1",))
    assert schedule(Mode.SINGLE, origin, [far], room, lambda n: False) is None


def test_multi_point_pulls_from_the_nearest_node_which_back_sources():
    origin, near = node("a1", "sz"), node("u1", "ny")
    pull = schedule(Mode.MULTI, origin, [near, origin], [origin], lambda n: True)
    assert (pull.node, pull.upstream, pull.hops) == ("u1", ("a1",), 1)
    local = schedule(Mode.MULTI, origin, [origin], [origin], lambda n: True)
    assert local.upstream == ()


# hot standby

def _ring() -> nx.Graph:
    graph = nx.Graph()
    graph.add_weighted_edges_from([("o", "x", 1), ("x", "e", 1), ("o", "y", 2), ("y", "e", 2)])
    return graph


def test_standby_route_is_link_disjoint_and_used_after_a_failure():
    routes = StandbyRoutes(_ring())
    primary, standby = routes.plan("o", "e")
    assert primary == ("o", "x", "e") and standby == ("o", "y", "e")
    assert routes.after_failure("o", "e", {frozenset(("x", "e"))}) == standby
    assert routes.after_failure("o", "e", {frozenset(("x", "e")), frozenset(("o", "y"))}) \
        is None
    assert routes.recompute("o", "e", {frozenset(("x", "e"))}) == ("o", "y", "e")


def test_no_standby_when_the_graph_has_a_single_path():
    line = nx.path_graph(["o", "x", "e"])
    assert StandbyRoutes(line).plan("o", "e")[1] is None


# back-to-source

def _directory() -> Directory:
    directory = Directory(["cn", "us", "eu"], {("cn", "us"): 0.2, ("cn", "eu"): 0.25,
                                               ("us", "eu"): 0.09})
    directory.register("cn", "room1", "a1")
    return directory


def test_lookup_local_costs_nothing():
    assert _directory().lookup("cn", "room1", LookupMode.BROADCAST) == \
        _directory().lookup("cn", "room1", LookupMode.HINT)


def test_lookup_by_broadcast_asks_every_other_center():
    found = _directory().lookup("us", "room1", LookupMode.BROADCAST)
    assert (found.node, found.center, found.messages, found.seconds) == ("a1", "cn", 4, 0.2)
    missing = _directory().lookup("us", "nothing", LookupMode.BROADCAST)
    assert (missing.node, missing.messages, missing.seconds) == (None, 4, 0.2)


def test_lookup_by_hint_asks_one_center_and_falls_back_when_stale():
    found = _directory().lookup("us", "room1", LookupMode.HINT, hint="cn")
    assert (found.node, found.messages, found.seconds, found.fell_back) == ("a1", 2, 0.2, False)
    stale = _directory().lookup("us", "room1", LookupMode.HINT, hint="eu")
    assert (stale.node, stale.center, stale.messages, stale.fell_back) == ("a1", "cn", 4, True)
    assert stale.seconds == pytest.approx(0.09 + 0.2)
    # A hint naming the asking center is stale without asking: the broadcast alone.
    itself = _directory().lookup("us", "room1", LookupMode.HINT, hint="us")
    assert (itself.center, itself.messages, itself.seconds, itself.fell_back) == \
        ("cn", 4, 0.2, True)
    assert not _directory().lookup("us", "room1", LookupMode.BROADCAST).fell_back
    with pytest.raises(KeyError, match="unknown center 'mars'"):
        _directory().lookup("us", "room1", LookupMode.HINT, hint="mars")


def test_broadcast_costs_grow_with_centers_hint_does_not():
    centers = [f"c{i}" for i in range(8)]
    directory = Directory(centers, {(a, b): 0.1 for a in centers for b in centers if a < b})
    directory.register("c7", "s", "n")
    assert directory.lookup("c0", "s", LookupMode.BROADCAST).messages == 14
    assert directory.lookup("c0", "s", LookupMode.HINT, hint="c7").messages == 2


# passive transcoding

def test_transcoder_runs_only_while_a_client_of_another_protocol_is_in_the_room():
    rooms = Transcoding()
    rooms.open("r", "rtmp")
    assert rooms.join("r", "v1", "rtmp") is None
    assert rooms.join("r", "v2", "webrtc") == ("r", "webrtc")
    assert rooms.join("r", "v3", "webrtc") is None
    assert rooms.leave("r", "v2", "webrtc") is None
    assert rooms.running() == {("r", "webrtc")}
    assert rooms.leave("r", "v3", "webrtc") == ("r", "webrtc")
    assert rooms.running() == set()
    with pytest.raises(KeyError, match="no stream"):
        rooms.join("nope", "v", "rtmp")


def test_wrong_answers_stay_in_the_region_as_often_as_configured():
    db = LocationDatabase(GEO, 1.0, same_region_share=0.8, seed=5)
    answers = [db.locate(f"c{i}", "sz") for i in range(2000)]
    assert "sz" not in answers
    assert answers.count("gz") / 2000 == pytest.approx(0.8, abs=0.03)
    assert all(LocationDatabase(GEO, 1.0, same_region_share=0.0).locate(f"c{i}", "sz") == "ny"
               for i in range(50))


def test_candidates_spread_over_sites():
    ranked = rank(NODES, "sz", GEO)
    assert [n.name for n in candidates(ranked, 3)] == ["a1", "b1", "u1"]
    assert [n.name for n in candidates(ranked, 4)] == ["a1", "a2", "b1", "u1"]  # rank order
    assert [n.name for n in candidates(ranked, 2, per_site=2)] == ["a1", "a2"]


def test_candidates_keep_places_for_other_regions():
    many = NODES + [node("a3", "sz"), node("b2", "gz")]
    ranked = rank(many, "sz", GEO)
    assert [n.name for n in candidates(ranked, 2)] == ["a1", "b1"]
    assert [n.name for n in candidates(ranked, 2, other_regions=1)] == ["a1", "u1"]
    # a list of one is the best node, never the one abroad (a viewer with nothing to probe)
    assert [n.name for n in candidates(ranked, 1, other_regions=1)] == ["a1"]
    assert candidates([], 3) == []
