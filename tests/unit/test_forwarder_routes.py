"""The edge forwarder's next hops following pushed decisions (agents.edge_forwarder.Routes),
against a controller played by a real ControlServer on loopback that pushes decision messages;
the data path on a real network is tests/integration/test_relay_follows_ns.py."""

from __future__ import annotations

import select
import time

import pytest

from agents.control import ControlClient
from agents.edge_forwarder import Params, Routes, next_hop
from controller import netns
from edgebed import protocol
from controller.control_server import ControlServer
from tests.unit.test_media_agents import start

FLOW = "st/live"
ADDRESSES = {"r1": "10.0.0.2", "r2": "10.0.0.3", "vw": "10.0.0.4"}


def decision(version: int, *via: str, flow: str = FLOW) -> protocol.Decision:
    return protocol.Decision(
        id=0, flow=flow, client="st", service="live", server="vw",
        address=ADDRESSES["vw"], version=version,
        via=tuple(protocol.Hop(name=name, address=ADDRESSES[name]) for name in via))


def test_the_next_hop_is_the_one_after_this_node_on_the_chain():
    assert next_hop("r1", decision(1, "r1")) == ADDRESSES["vw"]
    assert next_hop("r1", decision(2, "r1", "r2")) == ADDRESSES["r2"]
    assert next_hop("r2", decision(2, "r1", "r2")) == ADDRESSES["vw"]
    # Left off the chain: what still reaches it goes straight to the server.
    assert next_hop("r2", decision(3, "r1")) == ADDRESSES["vw"]


class Pusher:
    """Answers subscribe with ack (remembering where the node listens) and pushes what the test
    says, as the controller app does."""

    def __init__(self):
        self.subscribers: dict[str, tuple] = {}
        sock = netns.udp_socket("127.0.0.1", 0)
        self.address = sock.getsockname()
        self.server = ControlServer([sock], self.handle).start()

    def handle(self, message, reply, source):
        if message.type == "subscribe":
            self.subscribers[message.node] = source
            reply(protocol.Ack(id=message.id))

    def push(self, node: str, message: protocol.Message) -> None:
        self.server.push(self.subscribers[node], message)


@pytest.fixture
def pusher():
    made = Pusher()
    yield made
    made.server.stop()


class Rows:
    """An agent stand-in collecting table rows."""

    def __init__(self):
        self.rows: list[tuple] = []

    def row(self, table_name, *values):
        self.rows.append((table_name, *values))


def wait_for_push(routes: Routes, timeout: float = 5.0) -> list[str]:
    """What the routes changed once the control socket has something (as the forwarder's
    select loop sees it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([routes.control], [], [], 0.1)[0]:
            return routes.take_pushed()
    raise AssertionError("no push arrived")


def test_pushed_decisions_move_the_next_hop_and_are_followed_once(pusher):
    with ControlClient(pusher.address, node="r1") as control:
        control.subscribe()
        routes = Routes("r1", ["10.0.0.9"], 5004, {FLOW: []}, control)
        # Before any decision, the static next hops; nothing pending is no wait.
        assert routes.of(7) == (("10.0.0.9", 5004),) and routes.take_pushed() == []
        pusher.push("r1", decision(1, "r1"))
        assert wait_for_push(routes) == [FLOW]
        assert routes.of(7) == ((ADDRESSES["vw"], 5004),)
        # A second relay inserted after r1, then a late push of the first decision (ignored,
        # counted stale), then the second relay removed again.
        pusher.push("r1", decision(2, "r1", "r2"))
        assert wait_for_push(routes) == [FLOW]
        assert routes.of(7) == ((ADDRESSES["r2"], 5004),)
        pusher.push("r1", decision(1, "r1"))
        assert wait_for_push(routes) == []
        pusher.push("r1", decision(3, "r1"))
        assert wait_for_push(routes) == [FLOW]
        assert routes.of(7) == ((ADDRESSES["vw"], 5004),)
        # Decisions about flows it does not follow and rejections change nothing.
        pusher.push("r1", decision(1, "r1", "r2", flow="other/live"))
        pusher.push("r1", protocol.Rejected(id=0, flow=FLOW, reason="full"))
        assert wait_for_push(routes) == []
    assert [(s["version"], s["to"]) for s in routes.switches] == [
        (1, ADDRESSES["vw"]), (2, ADDRESSES["r2"]), (3, ADDRESSES["vw"])]
    agent = Rows()
    [summary] = routes.write(agent).values()
    assert (summary["decisions"], summary["stale"], summary["rejections"]) == (3, 1, 1)
    # The shared follower's table, one row per decision followed, with the via chain.
    followed = [row for row in agent.rows if row[0] == "decisions_followed"]
    assert [(row[2], row[3], row[8]) for row in followed] == [
        (FLOW, 1, "r1"), (FLOW, 2, "r1;r2"), (FLOW, 3, "r1")]


def test_streams_go_by_the_flow_that_names_them(pusher):
    with ControlClient(pusher.address, node="r2") as control:
        control.subscribe()
        routes = Routes("r2", [], 6000, {FLOW: [1, 2], "other/live": []}, control)
        assert routes.of(1) == () and routes.flow(3) == "other/live"
        pusher.push("r2", decision(1, "r1", "r2"))
        assert wait_for_push(routes) == [FLOW]
        assert routes.of(2) == ((ADDRESSES["vw"], 6000),) and routes.of(3) == ()


def test_a_fanning_origin_reroutes_only_the_copy_for_the_decisions_server(pusher):
    """dispatch's origin sends the stream to every media node; a decision that back-sources the
    server vw through relay r2 (chain: origin r1, then r2) moves vw's copy to r2 and keeps the
    others; the relay taken off again sends vw's copy straight to vw."""
    others = ["10.0.0.8", "10.0.0.9"]
    with ControlClient(pusher.address, node="r1") as control:
        control.subscribe()
        routes = Routes("r1", others + [ADDRESSES["vw"]], 5008, {FLOW: []}, control,
                        fan_out=True)
        pusher.push("r1", decision(1, "r1", "r2"))
        assert wait_for_push(routes) == [FLOW]
        assert routes.of(7) == tuple((a, 5008) for a in others + [ADDRESSES["r2"]])
        pusher.push("r1", decision(2, "r1"))
        assert wait_for_push(routes) == [FLOW]
        assert routes.of(7) == tuple((a, 5008) for a in others + [ADDRESSES["vw"]])


def test_params_need_somewhere_to_send_and_one_flow_per_stream():
    with pytest.raises(ValueError, match="to\\) or flows"):
        Params.model_validate({})
    with pytest.raises(ValueError, match="more than one followed flow"):
        Params.model_validate({"follow": {"a/b": [1], "c/d": [1]}})
    with pytest.raises(ValueError, match="at most one followed flow"):
        Params.model_validate({"follow": {"a/b": [], "c/d": []}})
    assert Params.model_validate({"follow": {FLOW: []}}).to == []


def test_a_forwarder_told_to_follow_without_a_controller_fails(tmp_path):
    process = start("edge_forwarder", "r1", tmp_path, {"port": 0, "follow": {FLOW: []}})
    _, errors = process.communicate(timeout=30)
    assert process.returncode != 0 and "follow needs the run's controller" in errors
