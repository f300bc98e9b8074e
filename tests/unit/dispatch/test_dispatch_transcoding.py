"""dispatch's passive transcoding in the dispatch policy, on hand-built controller states: a
viewer of another protocol than the stream's goes to a transcoder node and its join starts the
room's transcoder (passive) or finds it running (always); the last such viewer's leave stops
it; viewers of the stream's protocol never go to a transcoder; without ``transcoding`` the
protocols are not looked at."""

from __future__ import annotations

import networkx as nx
import pytest
from pydantic import ValidationError

from controller.policies.dispatch.policies import Dispatch, DispatchParams
from controller.policy import Client, Placement, Request, Server, State

MS = 1e-3


def graph() -> nx.MultiDiGraph:
    """One site cn with the origin o1 and the media node m1; the transcoder t1 at its own site
    tc, 2 ms away (so it is never the nearest node); viewers at cn."""
    g = nx.MultiDiGraph()

    def link(a, b, delay):
        g.add_edge(a, b, delay=delay, up=True)
        g.add_edge(b, a, delay=delay, up=True)

    link("cn", "tc", 2 * MS)
    for host in ("o1", "m1", "r1", "r2", "w1", "w2", "dcn"):
        link(host, "cn", 0.5 * MS)
    link("t1", "tc", 0.5 * MS)
    return g


SERVERS = (Server("o1", "live", "10.0.0.1", 8e6, labels={"region": "cn"}),
           Server("m1", "live", "10.0.0.2", 8e6, labels={"region": "cn"}),
           Server("t1", "live", "10.0.0.3", 8e6, labels={"region": "cn", "transcoder": True}))
CLIENTS = (Client("r1", "10.0.1.1", {"region": "cn", "protocol": "rtmp"}),
           Client("r2", "10.0.1.2", {"region": "cn"}),  # no label: the stream's protocol
           Client("w1", "10.0.1.3", {"region": "cn", "protocol": "webrtc"}),
           Client("w2", "10.0.1.4", {"region": "cn", "protocol": "webrtc"}),
           Client("dcn", "10.0.2.1", {"role": "dispatch"}))


def request(client: str) -> Request:
    return Request(f"{client}/live", client, "live", 1e6)


def policy(transcoding: str | None = "passive", **params) -> Dispatch:
    return Dispatch(DispatchParams(centers={"dcn": "cn"}, error_share=0.0, origin="o1",
                                   back_source=True, transcoding=transcoding, **params))


def decide(dispatch: Dispatch, requests=(), placements=(), now=0.0):
    return dispatch.decide(State(graph(), SERVERS, CLIENTS, tuple(placements),
                                 tuple(requests), now))


def test_the_first_viewer_of_another_protocol_starts_the_transcoder_the_last_stops_it():
    dispatch = policy()
    [r1] = decide(dispatch, [request("r1")]).assignments
    assert r1.server != "t1" and "transcode" not in r1.attributes
    placed = [Placement(request("r1"), r1.server)]
    [w1] = decide(dispatch, [request("w1")], placed, now=5.0).assignments
    assert w1.server == "t1"  # though farther than o1 and m1
    assert dict(w1.attributes) == {"stream": 0, "upstream": "10.0.0.1",
                                   "transcode": "rtmp->webrtc", "transcoder_started": True}
    placed.append(Placement(request("w1"), "t1"))
    [w2] = decide(dispatch, [request("w2")], placed, now=6.0).assignments
    assert (w2.server, w2.attributes["transcoder_started"]) == ("t1", False)  # running already
    placed.append(Placement(request("w2"), "t1"))
    # w1 leaves (its flow is gone from the placements at the next call): w2 still watches.
    placed = [p for p in placed if p.request.flow != "w1/live"]
    decide(dispatch, (), placed, now=8.0)
    assert dispatch.transcoding.running() == {("stream-0", "webrtc")}
    # w2 leaves: the room's transcoder stops.
    placed = [p for p in placed if p.request.flow != "w2/live"]
    decide(dispatch, (), placed, now=9.0)
    assert dispatch.transcoding.running() == set()
    assert dispatch.transcoder_events == [(5.0, "started", "stream-0", "webrtc"),
                                          (9.0, "stopped", "stream-0", "webrtc")]
    # A viewer of the other protocol joining again starts it again.
    [again] = decide(dispatch, [request("w1")], placed, now=12.0).assignments
    assert again.attributes["transcoder_started"] is True


def test_a_flow_decided_again_does_not_start_the_transcoder_twice():
    dispatch = policy()
    assert decide(dispatch, [request("w1")]).assignments[0].attributes["transcoder_started"]
    # The same flow asking again while placed (say, a new period): nothing starts.
    again = decide(dispatch, [request("w1")], [Placement(request("w1"), "t1")], now=1.0)
    assert again.assignments[0].attributes["transcoder_started"] is False
    assert [event for _, event, *_ in dispatch.transcoder_events] == ["started"]


def test_always_finds_the_transcoder_running_and_logs_no_start():
    dispatch = policy("always")
    [w1] = decide(dispatch, [request("w1")]).assignments
    assert (w1.server, w1.attributes["transcoder_started"]) == ("t1", False)
    decide(dispatch, (), (), now=3.0)  # w1 left: an always-on transcoder keeps running
    assert dispatch.transcoder_events == []


def test_viewers_of_the_streams_protocol_never_go_to_a_transcoder():
    dispatch = policy()
    placed = []
    for viewer in ("r1", "r2"):
        [assignment] = decide(dispatch, [request(viewer)], placed).assignments
        assert assignment.server in {"o1", "m1"}
    # With the transcoder the only node, rtmp viewers are refused rather than put on it.
    only = State(graph(), SERVERS[2:], CLIENTS, (), (request("r1"), request("w1")), 0.0)
    decision = dispatch.decide(only)
    assert [a.server for a in decision.assignments] == ["t1"]
    assert "no media node serves rtmp viewers" in decision.rejections[0].reason
    # And a webrtc viewer without a transcoder is refused.
    none = State(graph(), SERVERS[:2], CLIENTS, (), (request("w1"),), 0.0)
    assert "no transcoder node serves webrtc viewers" in (
        dispatch.decide(none).rejections[0].reason)


def test_a_viewer_may_not_confirm_a_node_of_the_wrong_kind():
    dispatch = policy()
    placed = (Placement(request("r1"), "o1"), Placement(request("w1"), "t1"))
    state = State(graph(), SERVERS, CLIENTS, placed, (), 0.0)
    assert "t1 does not serve rtmp viewers" in dispatch.refuse_steer(state, "r1/live", "t1")
    assert "o1 does not serve webrtc viewers" in dispatch.refuse_steer(state, "w1/live", "o1")
    assert dispatch.refuse_steer(state, "r1/live", "m1") is None


def test_single_point_still_sends_the_other_protocol_to_the_transcoder():
    dispatch = policy(scheduling="single")
    decision = decide(dispatch, [request("r1"), request("w1")])
    assert {a.flow: a.server for a in decision.assignments} == {"r1/live": "o1",
                                                                "w1/live": "t1"}


def test_without_transcoding_protocols_are_not_looked_at():
    dispatch = policy(None)
    decision = decide(dispatch, [request("r1"), request("w1")])
    # Both on the nearest nodes; the transcoder, farther, is just another node.
    assert "t1" not in {a.server for a in decision.assignments}
    assert all("transcode" not in a.attributes for a in decision.assignments)
    assert dispatch.transcoder_events == []
    with pytest.raises(ValidationError):
        DispatchParams(transcoding="sometimes")
