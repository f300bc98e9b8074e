"""A relay forwarder whose next hop follows pushed decisions, on a real Mininet network.

A streamer in ``st`` sends to the relay forwarder in ``r1``, which forwards to the viewer in
``vw`` by the decision the controller pushed about the streamer's flow (via chain ``r1``).
The test plays the controller through the real control protocol: a ControlServer whose socket
lives in host ``ctl``'s namespace answers the relays' subscriptions and pushes decision
messages, first one that inserts a second relay ``r2`` after ``r1`` (via ``r1, r2``), then one
that removes it again. ``r2`` holds every packet 60 ms (its processing delay), so the frames
that took the long way show it at the viewer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from agents import streamer
from controller import netns
from edgebed import protocol
from controller.control_server import ControlServer
from experiments.fidelity import EmulatedNetwork
from tests.conftest import ROOT
from tests.integration.conftest import assert_nothing_left
from tests.unit.test_media_agents import (HANG_GUARD_S, agent_argv, expected_packets,
                                          listening_port, summary_of, table)

NETWORK = """
name: relays
topology:
  subnet: 10.7.0.0/24
  nodes:
    st: {role: streamer, ip: 10.7.0.1/24}
    r1: {role: relay, ip: 10.7.0.2/24}
    r2: {role: relay, ip: 10.7.0.3/24}
    vw: {role: viewer, ip: 10.7.0.4/24}
    ctl: {role: edge, ip: 10.7.0.5/24}
    s1: {role: switch}
  links:
    - {endpoints: ["st:eth1", "s1:eth1"]}
    - {endpoints: ["r1:eth1", "s1:eth2"]}
    - {endpoints: ["r2:eth1", "s1:eth3"]}
    - {endpoints: ["vw:eth1", "s1:eth4"]}
    - {endpoints: ["ctl:eth1", "s1:eth5"]}
"""
ADDRESSES = {"st": "10.7.0.1", "r1": "10.7.0.2", "r2": "10.7.0.3", "vw": "10.7.0.4",
             "ctl": "10.7.0.5"}
FLOW = "st/live"
PORT = 5004
R2_DELAY_MS = 60.0
STREAM = {"bitrate": "1Mbps", "fps": 25, "gop": 25, "duration": 9}
PHASE_S = 3.0  # the second relay is inserted after 3 s of streaming and removed after 6 s


class Relays(EmulatedNetwork):
    """The network and the test's controller: subscriptions answered, decisions pushed."""

    def __init__(self, log_dir):
        super().__init__(NETWORK, "relays.yaml", log_dir)
        self.subscribers: dict[str, tuple] = {}
        self.subscribed = threading.Condition()
        self.server: ControlServer | None = None

    def start(self) -> None:
        super().start()
        self.pin_neighbours(tuple(ADDRESSES))
        sock = netns.udp_socket(ADDRESSES["ctl"], protocol.PORT, netns_pid=self.host("ctl").pid)
        self.server = ControlServer([sock], self.handle).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        super().stop()

    def handle(self, message, reply, source) -> None:
        if message.type == "subscribe":
            with self.subscribed:
                self.subscribers[message.node] = source
                self.subscribed.notify_all()
            reply(protocol.Ack(id=message.id))
        else:
            reply(protocol.Error(id=getattr(message, "id", None),
                                 reason="this controller only takes subscriptions"))

    def wait_subscribed(self, *nodes: str) -> None:
        with self.subscribed:
            assert self.subscribed.wait_for(lambda: set(nodes) <= set(self.subscribers), 30), (
                f"subscribed: {sorted(self.subscribers)}")

    def push(self, version: int, via: tuple[str, ...], to: str) -> None:
        """The decision about the streamer's flow with relay chain ``via``, pushed to relay
        ``to`` (as the controller app pushes to a flow's client, server and relays)."""
        decision = protocol.Decision(
            id=0, flow=FLOW, client="st", service="live", server="vw",
            address=ADDRESSES["vw"], version=version, migrated=version > 1,
            via=tuple(protocol.Hop(name=name, address=ADDRESSES[name]) for name in via))
        self.server.push(self.subscribers[to], decision)

    def agent(self, agent: str, node: str, out, params: dict) -> subprocess.Popen:
        environment = dict(os.environ,
                           EDGEBED_CONTROLLER=f"{ADDRESSES['ctl']}:{protocol.PORT}")
        return self.host(node).popen(agent_argv(agent, node, out, params), cwd=ROOT,
                                     env=environment, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)


def said(process: subprocess.Popen, text: str) -> None:
    """Wait until ``process`` wrote a line containing ``text`` on stderr (the lines before it
    are read and dropped)."""
    found = threading.Event()

    def read() -> None:
        for line in process.stderr:
            if text in line:
                found.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(HANG_GUARD_S)
    assert found.is_set(), f"{process.args[:3]} did not say {text!r}"


def push_along(relays: Relays, agents: dict[str, subprocess.Popen], version: int,
               *via: str) -> None:
    """Push decision ``version`` (relay chain ``via``) to each relay on the chain from its end
    back, each once the one after it said it followed the decision (pushes are not
    acknowledged; a relay says on stderr what it followed): so a relay knows where to send
    before anything reaches it, and the test knows the decision is in force."""
    for name in reversed(via):
        relays.push(version, via, name)
        said(agents[name], f"followed {FLOW} version {version}:")


@pytest.fixture
def relays(tmp_path, state_before):
    made = Relays(tmp_path / "wires")
    try:
        made.start()
        yield made
    finally:
        made.stop()
    assert_nothing_left(state_before, made.names.prefix)


def test_a_relay_inserted_and_removed_by_pushed_decisions_carries_the_stream_between(
        relays, tmp_path):
    out = tmp_path / "run"
    expect = expected_packets(streamer.Params.model_validate(
        {"to": ADDRESSES["r1"]} | STREAM), seed=1)
    viewer = relays.agent("viewer", "vw", out, {"port": PORT, "expect": expect})
    listening_port(viewer)
    follow = {"port": PORT, "to_port": PORT, "follow": {FLOW: []}}
    second = relays.agent("edge_forwarder", "r2", out,
                          follow | {"processing_delay": f"{R2_DELAY_MS:g}ms"})
    first = relays.agent("edge_forwarder", "r1", out, follow)
    for process in (first, second):
        listening_port(process)  # subscribed already: a forwarder subscribes, then listens
    relays.wait_subscribed("r1", "r2")
    forwarders = {"r1": first, "r2": second}
    push_along(relays, forwarders, 1, "r1")  # in force before the first packet
    source = relays.agent("streamer", "st", out,
                          {"to": ADDRESSES["r1"], "port": PORT} | STREAM)
    time.sleep(PHASE_S)
    push_along(relays, forwarders, 2, "r1", "r2")
    time.sleep(PHASE_S)
    push_along(relays, forwarders, 3, "r1")
    sent = summary_of(source)
    # The viewer ends by itself once every packet expected arrived; if some never do, it is
    # stopped after the hang guard and its summary says which are missing.
    try:
        viewer.wait(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        pass
    received = summary_of(viewer, stop=viewer.poll() is None)
    through_first = summary_of(first, stop=True)
    through_second = summary_of(second, stop=True)

    # Frames kept arriving: every packet sent reached the viewer, every frame whole, on
    # whichever path it took; neither relay dropped, held back or lost track of a packet.
    assert sent["packets"] == expect and sent["send_errors"] == 0
    [flow] = received["streams"]
    assert (flow["unique"], flow["lost"], flow["duplicates"]) == (expect, 0, 0)
    assert flow["frames_incomplete"] == flow["frames_missing"] == 0
    assert flow["frames_complete"] == sent["frames"]
    [r1] = through_first["forwarding"].values()
    [r2] = through_second["forwarding"].values()
    assert (r1["received"], r1["forwarded"], r1["dropped"], r1["unrouted"]) == (
        expect, expect, 0, 0)
    assert 0 < r2["received"] == r2["forwarded"] < expect and r2["unrouted"] == 0
    assert through_first["send_errors"] == through_second["send_errors"] == 0

    # The path changed: the frames r2 carried whole took its 60 ms at the viewer; frames it
    # never saw went r1 -> vw straight, before and after it was on the chain.
    via_r2 = {row["frame"] for row in table(out, "frames", "r2", "edge_forwarder")
              if row["complete"] == "True"}
    at_viewer = {row["frame"]: float(row["delay_ms"])
                 for row in table(out, "frames", "vw", "viewer")}
    seen_by_r2 = {row["frame"] for row in table(out, "frames", "r2", "edge_forwarder")}
    assert via_r2 and all(at_viewer[frame] >= R2_DELAY_MS for frame in via_r2), sorted(
        (int(frame), at_viewer[frame]) for frame in via_r2)[:10]
    direct = sorted((int(frame), delay) for frame, delay in at_viewer.items()
                    if frame not in seen_by_r2)
    low, high = min(int(f) for f in seen_by_r2), max(int(f) for f in seen_by_r2)
    before = [delay for frame, delay in direct if frame < low]
    after = [delay for frame, delay in direct if frame > high]
    assert before and after
    # A frame's packets are spread over its 40 ms interval, so a frame that went straight
    # takes up to 40 ms plus the path, below r2's 60 ms alone: the median says so however
    # loaded the machine (a median, so a stalled frame or two cannot decide).
    for delays in (before, after):
        assert sorted(delays)[len(delays) // 2] < R2_DELAY_MS, delays

    # r1's switches, in its summary and in the shared follower's decisions_followed table.
    assert [(s["version"], s["to"]) for s in through_first["switches"]] == [
        (1, ADDRESSES["vw"]), (2, ADDRESSES["r2"]), (3, ADDRESSES["vw"])]
    rows = table(out, "decisions_followed", "r1", "edge_forwarder")
    assert [(row["flow"], row["version"], row["via"], row["migrated"]) for row in rows] == [
        (FLOW, "1", "r1", "False"), (FLOW, "2", "r1;r2", "False"),
        (FLOW, "3", "r1", "False")]
    # r2 heard only the decision that put it on the chain (it is off the next one).
    [row] = table(out, "decisions_followed", "r2", "edge_forwarder")
    assert (row["version"], row["via"]) == ("2", "r1;r2")
    assert through_second["switches"] == [
        {"time_s": row["time_s"], "flow": FLOW, "version": 2, "from": [],
         "to": ADDRESSES["vw"]}]
