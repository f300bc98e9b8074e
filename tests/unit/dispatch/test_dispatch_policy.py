"""dispatch's dispatch policy on hand-built controller states: ranking by the database,
candidates, tickets vs shared capacity across centers, redirect, bad input."""

from __future__ import annotations

import networkx as nx
import pytest

from controller.policies.dispatch.policies import Dispatch, DispatchParams
from controller.policy import LoadReport, Placement, Request, Server, State, Client
from edgebed.protocol import path_metric

MS = 1e-3


def graph() -> nx.MultiDiGraph:
    """Switches sz and gz (region cn, 10 ms apart) and ny (us, 100 ms away); a media node at
    each, viewers at sz and ny."""
    g = nx.MultiDiGraph()

    def link(a, b, delay):
        g.add_edge(a, b, delay=delay, up=True)
        g.add_edge(b, a, delay=delay, up=True)

    link("sz", "gz", 10 * MS)
    link("gz", "ny", 100 * MS)
    for host, switch in (("a1", "sz"), ("b1", "gz"), ("u1", "ny"), ("v1", "sz"),
                         ("v2", "sz"), ("v3", "sz"), ("w1", "ny"), ("x1", "ny")):
        link(host, switch, 0.5 * MS)
    return g


SERVERS = tuple(Server(name, "live", f"10.0.0.{i}", 2e6, labels={"region": region})
                for i, (name, region) in enumerate((("a1", "cn"), ("b1", "cn"), ("u1", "us")), 1))
CLIENTS = tuple(Client(name, f"10.0.1.{i}", {"region": region}) for i, (name, region) in
                enumerate((("v1", "cn"), ("v2", "cn"), ("v3", "cn"), ("w1", "us"),
                           ("x1", "eu")), 1)) + tuple(
    Client(center, f"10.0.2.{i}", {"role": "dispatch"})
    for i, center in enumerate(("cn", "us", "c1", "c2", "c3"), 1))


def request(client: str) -> Request:
    return Request(f"{client}/live", client, "live", 1e6)


def state(requests=(), placements=(), loads=None, now=0.0) -> State:
    return State(graph(), SERVERS, CLIENTS, tuple(placements), tuple(requests), now,
                 loads=loads or {})


CENTERS = {"cn": "cn", "us": "us"}


def test_nearest_node_first_and_candidates_span_regions():
    policy = Dispatch(DispatchParams(centers=CENTERS, error_share=0.0, candidates=3))
    decision = policy.decide(state([request("v1"), request("w1")]))
    assert {a.flow: a.server for a in decision.assignments} == {"v1/live": "a1",
                                                                "w1/live": "u1"}
    offered = policy._offer(policy._nodes(state(), "live"), "sz", *_geo_book(policy))
    assert [n.name for n in offered] == ["a1", "b1", "u1"]


def _geo_book(policy):
    from controller.policies.dispatch.access import Geography
    from controller.policies.dispatch.capacity import Tickets
    geo = Geography.from_graph(graph(), {"sz": "cn", "gz": "cn", "ny": "us"}, ["a1", "b1", "u1"])
    return geo, Tickets({"a1": 2, "b1": 2, "u1": 2}, list(CENTERS)), "cn"


def test_a_misplaced_client_gets_the_database_pick():
    wrong = Dispatch(DispatchParams(centers=CENTERS, error_share=1.0, same_region_share=0.0))
    assignment = wrong.decide(state([request("v1")])).assignments[0]
    assert assignment.server == "u1"  # the database put v1 in the us


def test_tickets_split_capacity_between_centers():
    # Capacity 2 streams per node, 2 centers: 1 ticket each.
    policy = Dispatch(DispatchParams(centers=CENTERS, error_share=0.0))
    placed = [Placement(request("v1"), "a1")]
    decision = policy.decide(state([request("v2")], placed))
    assert decision.assignments[0].server == "b1"  # center cn's ticket for a1 is used
    full = [Placement(request("v1"), "a1"), Placement(request("v2"), "b1"),
            Placement(request("v3"), "u1")]
    assert "no media node has room" in policy.decide(state([request("v3")], full)
                                                     ).rejections[0].reason


def test_shared_capacity_trusts_stale_reports_and_redirects_after():
    policy = Dispatch(DispatchParams(centers={"c1": "", "c2": ""}, capacity_control="shared",
                                     error_share=0.0))
    labels = {"v1": "c1", "v2": "c2", "v3": "c1"}
    clients = tuple(Client(c.name, c.address, {**c.labels, "center": labels.get(c.name, "c1")})
                    for c in CLIENTS)
    first = State(graph(), SERVERS, clients, (), (request("v1"), request("v2")), 0.0)
    assert [a.server for a in policy.decide(first).assignments] == ["a1", "a1"]
    placed = [Placement(request("v1"), "a1"), Placement(request("v2"), "a1")]
    # c1 has seen no report and admitted one; c2 too: each believes a1 has room for one more.
    second = State(graph(), SERVERS, clients, tuple(placed), (request("v3"),), 0.1)
    assert policy.decide(second).assignments[0].server == "a1"  # oversold: 3 on 2
    placed.append(Placement(request("v3"), "a1"))
    report = {"a1": (LoadReport("a1", 0.2, 3e6, {"sessions": 3}),)}
    redirect = policy.decide(State(graph(), SERVERS, clients, tuple(placed), (), 0.3,
                                   loads=report))
    assert [(m.flow, m.server) for m in redirect.migrations] == [("v3/live", "b1")]


def test_tickets_never_oversell_where_shared_does():
    requests = [request("v1"), request("v2"), request("v3")]
    for control, most in (("tickets", 2), ("shared", 3)):
        policy = Dispatch(DispatchParams(centers={"c1": "", "c2": "", "c3": ""},
                                         capacity_control=control, error_share=0.0))
        # v1, v2, v3 join through c1, c2, c3; capacity 2 splits into tickets 1, 1, 0.
        clients = tuple(Client(c.name, c.address, {**c.labels, "center": f"c{i}"})
                        for i, c in enumerate(CLIENTS, 1))
        placed = []
        for one in requests:
            decided = policy.decide(State(graph(), SERVERS[:1], clients, tuple(placed), (one,)))
            placed += [Placement(one, a.server) for a in decided.assignments]
        assert len(placed) == most


def test_bad_input_is_rejected_with_a_reason():
    policy = Dispatch(DispatchParams(centers=CENTERS))
    decision = policy.decide(state([request("x1")]))
    assert "region 'eu' of x1 has no media node" in decision.rejections[0].reason
    unknown = tuple(Client(c.name, c.address, {**c.labels, "center": "mars"}) for c in CLIENTS)
    decision = policy.decide(State(graph(), SERVERS, unknown, (), (request("v1"),)))
    assert "unknown dispatch center 'mars'" in decision.rejections[0].reason
    with pytest.raises(ValueError, match="at least one dispatch center"):
        DispatchParams(centers={})
    nowhere = State(graph(), (), CLIENTS, (), (request("v1"),))
    assert "no media nodes" in policy.decide(nowhere).rejections[0].reason
    typo = Dispatch(DispatchParams(centers={"cn": "cn", "uss": "us"}))
    assert "dispatch center 'uss' is not a host" in typo.decide(state([request("v1")])
                                                                ).rejections[0].reason


def test_a_lingering_report_does_not_redirect_again():
    policy = Dispatch(DispatchParams(centers={"c1": ""}, capacity_control="shared",
                                     error_share=0.0))
    # v3 was already redirected to b1; a1's report still counts its session.
    placed = (Placement(request("v1"), "a1"), Placement(request("v2"), "a1"),
              Placement(request("v3"), "b1"))
    report = {"a1": (LoadReport("a1", 0.2, 3e6, {"sessions": 3}),)}
    assert policy.decide(State(graph(), SERVERS, CLIENTS, placed, (), 0.3,
                               loads=report)).migrations == []


def test_the_decision_carries_the_ranked_candidates():
    policy = Dispatch(DispatchParams(centers=CENTERS, error_share=0.0, candidates=3))
    [assignment] = policy.decide(state([request("v1")])).assignments
    assert (assignment.server, assignment.candidates) == ("a1", ("a1", "b1", "u1"))


def test_a_confirmed_candidate_needs_room_in_the_centers_view():
    # Capacity 2 per node, centers cn and us: one ticket each. v1 (center cn) sits on a1 and
    # v2 (cn) on b1: cn's ticket for b1 is taken, so v1 may not confirm b1; u1 has room.
    policy = Dispatch(DispatchParams(centers=CENTERS, error_share=0.0))
    placed = [Placement(request("v1"), "a1"), Placement(request("v2"), "b1")]
    assert policy.refuse_steer(state(placements=placed), "v1/live", "b1") == (
        "b1 has no room for v1 at cn")
    assert policy.refuse_steer(state(placements=placed), "v1/live", "u1") is None
    assert policy.refuse_steer(state(placements=placed), "v1/live", "a1") is None  # no move
    # With a shared figure the center counts the last report (none yet: room; b1 full: none).
    def shared():
        return Dispatch(DispatchParams(centers=CENTERS, error_share=0.0,
                                       capacity_control="shared"))
    assert shared().refuse_steer(state(placements=placed), "v1/live", "b1") is None
    full = {"b1": (LoadReport("b1", 0.0, 2e6, {"sessions": 2}),)}
    assert shared().refuse_steer(state(placements=placed, loads=full), "v1/live", "b1") == (
        "b1 has no room for v1 at cn")


def test_a_relay_goes_on_a_back_source_path_that_probes_poor_and_comes_off_again():
    """Origin o1 at sz back-sources u1 (ny); relay r1 hangs off gz. u1 reports its paths to o1
    and r1, a1 (at the origin's site) its path to r1: a lossy direct path gets the relay, a
    clean one takes it off; a flow with no chain on a clean path is left alone."""
    g = graph()
    for host, switch in (("o1", "sz"), ("r1", "gz")):
        g.add_edge(host, switch, delay=0.5 * MS, up=True)
        g.add_edge(switch, host, delay=0.5 * MS, up=True)
    clients = CLIENTS + (Client("o1", "10.0.3.1"), Client("r1", "10.0.3.2"))

    def path(address, rtt, loss):
        return {path_metric(address, "rtt"): rtt, path_metric(address, "loss"): loss,
                path_metric(address, "jitter"): 0.001}

    def loads(direct_loss):
        return {"u1": (LoadReport("u1", 1.0, 1e6, path("10.0.3.1", 0.2, direct_loss)
                                  | path("10.0.3.2", 0.19, 0.0) | {"sessions": 1}),),
                "a1": (LoadReport("a1", 1.0, 0.0, path("10.0.3.2", 0.02, 0.0)),)}

    policy = Dispatch(DispatchParams(centers=CENTERS, origin="o1", relays=["r1"]))
    direct = Placement(request("w1"), "u1")
    lossy = policy.decide(State(g, SERVERS, clients, (direct,), (), 1.0, loads=loads(0.1)))
    assert [(m.flow, m.server, m.via) for m in lossy.migrations] == [
        ("w1/live", "u1", ("o1", "r1"))]
    relayed = Placement(request("w1"), "u1", via=("o1", "r1"))
    clean = policy.decide(State(g, SERVERS, clients, (relayed,), (), 2.0, loads=loads(0.0)))
    assert [(m.flow, m.via) for m in clean.migrations] == [("w1/live", ("o1",))]
    assert not policy.decide(State(g, SERVERS, clients, (direct,), (), 3.0,
                                   loads=loads(0.0))).migrations
    # No probe of the relay's leg from the origin's site: nothing to judge the relay by.
    no_leg = loads(0.1)
    del no_leg["a1"]
    assert not policy.decide(State(g, SERVERS, clients, (direct,), (), 4.0,
                                   loads=no_leg)).migrations


def test_single_point_pulls_from_the_origin_and_spills_within_its_room():
    # a1 (the origin) and b1 share machine room r; capacity 2 streams each, 2 centers: one
    # ticket each per node. cn's second viewer spills to b1 (same room), its third goes on
    # to the best ranked node, u1 (past the room, as multi-point).
    servers = tuple(Server(s.name, s.service, s.address, s.capacity,
                           labels=dict(s.labels) | ({"room": "r"} if s.name != "u1" else {}))
                    for s in SERVERS)
    policy = Dispatch(DispatchParams(centers=CENTERS, error_share=0.0, origin="a1",
                                     scheduling="single"))
    placed = []
    for viewer, expected in (("v1", "a1"), ("v2", "b1"), ("v3", "u1")):
        decision = policy.decide(State(graph(), servers, CLIENTS, tuple(placed),
                                       (request(viewer),), 0.0))
        [assignment] = decision.assignments
        assert (assignment.server, assignment.candidates) == (expected, ())
        placed.append(Placement(request(viewer), assignment.server))
    # The us viewer pulls from the origin in cn too: single-point ignores where it is.
    decision = policy.decide(State(graph(), servers, CLIENTS, tuple(placed),
                                   (request("w1"),), 0.0))
    assert decision.assignments[0].server == "a1"


def test_multi_point_places_on_the_nearest_node_and_names_the_origin_to_back_source():
    policy = Dispatch(DispatchParams(centers=CENTERS, error_share=0.0, origin="a1",
                                     back_source=True, stream=7))
    decision = policy.decide(state([request("w1")]))
    [assignment] = decision.assignments
    assert assignment.server == "u1"
    assert dict(assignment.attributes) == {"stream": 7, "upstream": "10.0.0.1"}
    # Without back_source, decisions carry no attributes (the other scenarios' media nodes
    # get the stream pushed to them).
    plain = Dispatch(DispatchParams(centers=CENTERS, error_share=0.0, origin="a1"))
    assert not plain.decide(state([request("w1")])).assignments[0].attributes


def test_single_point_needs_its_origin_among_the_media_nodes():
    policy = Dispatch(DispatchParams(centers=CENTERS, error_share=0.0, origin="v9",
                                     scheduling="single"))
    [rejection] = policy.decide(state([request("v1")])).rejections
    assert "origin 'v9'" in rejection.reason
