"""The default demo's mechanics without Mininet: the controller's view following an announced
link delay, LUA moving the demo's viewer because of it, and the run summary's phases and plot
drawn from measured-looking tables (built here by hand: no network runs in a unit test)."""

from __future__ import annotations

import json

import networkx as nx
import pandas as pd
import pytest

from experiments import scenarios
from controller import policies
from edgebed import protocol
from controller.core import ControllerCore
from controller.view import NetworkView
from experiments.kinds.live_edge.run_summary import phases, timeline_plot
from tests.conftest import ROOT

DEMO = ROOT / "topologies" / "live_edge" / "demo.yaml"
VIEWERS = ("viewer1", "viewer2", "viewer3")


@pytest.fixture
def demo():
    loaded = scenarios.load(DEMO, {})
    settings = loaded.document.controller
    policy = policies.create(settings.policy, settings.policy_params)
    core = ControllerCore(NetworkView.from_scenario(loaded), policy)
    [impaired] = [event for event in loaded.schedule if event.action == "set"]
    return loaded, core, impaired


def placed(core):
    return {record.placement.request.client: record.placement.server
            for record in core.flows.values()}


def test_lua_moves_viewer1_only_once_the_controller_knows_the_scheduled_delay(demo):
    loaded, core, impaired = demo
    core.place([core.request_for(viewer, "live", 4e6, (4e6, 2e6, 1e6)) for viewer in VIEWERS])
    assert placed(core) == {"viewer1": "edge1", "viewer2": "edge1", "viewer3": "edge2"}
    assert core.reallocate(4.0).placed == {}  # a period with nothing new changes nothing
    switches = core.link_delay_changed(impaired.link, impaired.changes.delay, None)
    assert switches == set(core.view.switches) == {"s0", "s1", "s2", "a1"}
    outcome = core.reallocate(8.0)
    assert outcome.placed == {"viewer1/live": "edge2"}
    assert placed(core) == {"viewer1": "edge2", "viewer2": "edge1", "viewer3": "edge2"}


def test_an_announced_delay_reaches_the_policy_graph_forwarding_and_a_restarted_controller(
        demo):
    loaded, core, impaired = demo
    link = loaded.links[impaired.link]
    before = core.state().graph
    core.link_delay_changed(impaired.link, 0.045, None)
    after = core.state().graph
    assert before[link.a.node][link.b.node][impaired.link]["delay"] == pytest.approx(0.005)
    assert after[link.a.node][link.b.node][impaired.link]["delay"] == pytest.approx(0.045)
    # The reverse direction was not announced: it keeps the scenario's delay.
    assert after[link.b.node][link.a.node][impaired.link]["delay"] == pytest.approx(0.005)
    assert nx.dijkstra_path_length(after, "edge1", "viewer1", weight="delay") == \
        pytest.approx(0.045)
    assert core.link_delay_changed(impaired.link, 0.045, None) == set()  # nothing new
    # A controller taking over from the saved state starts from the announced network.
    successor = ControllerCore(NetworkView.from_scenario(loaded), core.policy)
    successor.restore(json.loads(json.dumps(core.snapshot())))
    assert successor.state().graph[link.a.node][link.b.node][impaired.link]["delay"] == \
        pytest.approx(0.045)


def test_a_delay_on_a_host_link_is_refused_by_name(demo):
    loaded, core, _ = demo
    [host_link] = [link for link in loaded.links if link.a.node == "streamer1"]
    with pytest.raises(KeyError, match=f"link {host_link.index} is not a link between two "
                                       "switches"):
        core.link_delay_changed(host_link.index, 0.02)


def test_the_link_message_carries_delays_per_direction():
    message = protocol.decode(protocol.encode(protocol.Link(id=5, link=3, delay_reverse=0.01)),
                              protocol.TO_CONTROLLER)
    assert (message.link, message.delay_forward, message.delay_reverse) == (3, None, 0.01)


def seconds_table(rows):
    return pd.DataFrame(rows, columns=["node", "flow", "t", "packets", "lost", "delay_mean_ms",
                                       "loss_fraction"])


def test_phases_split_each_viewers_stream_at_changes_and_leave_out_seconds_across_them():
    # viewer1: stream-1 on edge1 from 0 s, worse after the change at 13 s, moved at 16 s to
    # stream-2 on edge2; viewer2 keeps stream-1 throughout.
    rows = [("viewer1", "stream-1", t + 0.3, 100, 0, 170.0, 0.0) for t in range(13)]
    rows[12] = ("viewer1", "stream-1", 12.3, 100, 0, 190.0, 0.0)  # across 13 s: left out
    rows += [("viewer1", "stream-1", t + 0.3, 95, 5, 210.0, 0.05) for t in (13, 14, 15)]
    rows += [("viewer1", "stream-2", t + 0.1, 100, 0, 180.0, 0.0) for t in range(16, 23)]
    rows += [("viewer2", "stream-1", t + 0.5, 50, 0, 170.0, 0.0) for t in range(22)]
    decisions = [
        {"viewer": "viewer1", "flow": "stream-1", "server": "edge1", "previous_server": None,
         "t": 0.2},
        {"viewer": "viewer1", "flow": "stream-2", "server": "edge2", "previous_server": "edge1",
         "t": 16.05},
        {"viewer": "viewer2", "flow": "stream-1", "server": "edge1", "previous_server": None,
         "t": 0.2}]
    found = phases(seconds_table(rows), decisions,
                   [(13.0, "the change at 13.0 s"), (16.05, "viewer1 moved at 16.1 s")])
    figures = {(p["viewer"], p["server"], p["phase"]): (p["seconds"], p["delay_ms"], p["loss"])
               for p in found}
    assert figures[("viewer1", "edge1", "until the change at 13.0 s")] == (12, 170.0, 0.0)
    # The stream's last second runs past its own move: it is still the impaired stream's.
    assert figures[("viewer1", "edge1", "after the change at 13.0 s")] == (3, 210.0, 0.05)
    assert figures[("viewer1", "edge2", "after viewer1 moved at 16.1 s")] == (7, 180.0, 0.0)
    # viewer2's seconds across 13 s and 16.05 s belong to no phase.
    assert figures[("viewer2", "edge1", "until the change at 13.0 s")][0] == 12
    assert figures[("viewer2", "edge1", "after the change at 13.0 s")][0] == 2
    assert figures[("viewer2", "edge1", "after viewer1 moved at 16.1 s")][0] == 6


def test_the_timeline_plot_is_a_png_in_the_run_directory(tmp_path):
    rows = [("viewer1", "stream-1", t, 100, t % 3, 170.0 + t, (t % 3) / 100) for t in range(10)]
    path = timeline_plot(tmp_path, seconds_table(rows), [(4.0, "s1 -> a1 delay 45ms")],
                         [{"viewer": "viewer1", "previous_server": "edge1", "server": "edge2",
                           "t": 6.0}])
    assert path == tmp_path / "timeline.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
