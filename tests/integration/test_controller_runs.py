"""edgebed's SDN controller on real Mininet networks (userspace OVS here): service steering
checked at the servers, a live flow migrated, failover when a link is cut, the controller
killed and restarted mid-stream, and fuzzed control messages.

The network is a ring of four switches: viewers on s1, edge servers on s3, the short way round
through s2 (2 + 2 ms) and the long way through s4 (5 + 5 ms), so every path has a loop-free
alternate. Streams here send one packet every 2 ms (500 frames/s of one packet), so a gap in
arrivals is visible to the millisecond.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import textwrap
import time

import pytest
import yaml

from agents.control import ControlClient
from controller import protocol
from experiments.measurements import read_table
from tests.integration.conftest import (assert_nothing_left, edgebed, only_run_dir,
                                        start_edgebed, wait_for_phase)

RING = """
name: ring
duration: {duration}
topology:
  subnet: 10.9.0.0/24
  kinds:
    viewer: {{role: viewer}}
    edge: {{role: edge, labels: {{capacity: 20Mbps}}}}
    switch: {{role: switch}}
  nodes:
    viewer[1-3]: {{kind: viewer}}
    edge[1-3]: {{kind: edge}}
    s[1-4]: {{kind: switch}}
  links:
    - endpoints: ["viewer[1-3]:eth1", "s1:eth[1-3]"]
    - endpoints: ["edge[1-3]:eth1", "s3:eth[1-3]"]
    - {{endpoints: ["s1:eth10", "s2:eth10"], delay: 2ms}}
    - {{endpoints: ["s2:eth11", "s3:eth11"], delay: 2ms}}
    - {{endpoints: ["s3:eth12", "s4:eth12"], delay: 5ms}}
    - {{endpoints: ["s4:eth13", "s1:eth13"], delay: 5ms}}
controller:
  app: edgebed
  policy: {policy}
  fast_failover: {fast_failover}
  services:
    video: {{address: 10.9.0.200, port: 5004, servers: ["role:edge"], demand: 4000000}}
    api: {{address: 10.9.0.201, port: 7100, servers: [edge1, edge2]}}
workload:
  - agent: viewer
    nodes: ["role:edge"]
    params: {{port: 5004}}
{workload}
schedule:
{schedule}
"""



def steady(node: str, start: str, duration: str) -> str:
    """A workload entry: one 1000-byte packet every 2 ms (4 Mbit/s) from ``node`` to the video
    service, so arrivals show an outage to the millisecond."""
    return f"""
        - agent: streamer
          nodes: [{node}]
          start: {start}
          params: {{to: video, duration: {duration}, payload: 1000, bitrate: 4Mbps, fps: 500,
                   gop: 1, i_to_p: 1, noise: 0}}"""


def scenario(tmp_path, duration="8s", policy="least_loaded", fast_failover="true",
             workload="", schedule="  []"):
    path = tmp_path / "scenario.yaml"
    path.write_text(RING.format(duration=duration, policy=policy, fast_failover=fast_failover,
                                workload=textwrap.indent(textwrap.dedent(workload).strip(),
                                                         "  "),
                                schedule=textwrap.indent(textwrap.dedent(schedule).strip()
                                                         or "[]", "  ")))
    return path


def start(tmp_path, path):
    """``edgebed run`` of ``path`` in the background; returns the process and, once the
    network and its controller are up, the run directory."""
    runs = tmp_path / "runs"
    process = start_edgebed("run", str(path), "--runs-dir", str(runs))
    return process, wait_for_phase(runs, "network up", process)


def run(tmp_path, path):
    runs = tmp_path / "runs"
    result = edgebed("run", str(path), "--runs-dir", str(runs))
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(runs)
    return run_dir, json.loads((run_dir / "summary.json").read_text())


def addresses(run_dir) -> dict[str, str]:
    """Host name -> data address, from the resolved scenario of the run."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    return {name: next(iter(node["interfaces"].values())).split("/")[0]
            for name, node in resolved["topology"]["nodes"].items() if "interfaces" in node}


def flows_by_edge(run_dir) -> dict[tuple[str, str], dict]:
    """(edge, client address) -> the edge's measurement of that client's stream."""
    return {(row["node"], row["peer"]): row for row in read_table(run_dir, "flows")
            if row["node"].startswith("edge") and row["agent"] == "viewer"}


def decisions(run_dir, kind=None) -> list[dict]:
    return [row for row in read_table(run_dir, "decisions") if kind in (None, row["kind"])]


def control_client(run_dir, node: str | None = None) -> ControlClient:
    """A client of the run's control protocol on loopback (the test runs in the root
    namespace; hosts use the management network)."""
    host, port = json.loads((run_dir / "manifest.json").read_text())["controller"][
        "control_loopback"].rsplit(":", 1)
    return ControlClient((host, int(port)), node, timeout=1.0)


def test_clients_reach_service_addresses_and_land_on_the_chosen_servers(tmp_path, state_before):
    path = scenario(tmp_path, workload="""
        - agent: streamer
          nodes: ["role:viewer"]
          start: 1s
          params: {to: video, bitrate: 2Mbps, fps: 30, gop: 30, duration: 4s}
        - agent: request_server
          nodes: [edge1, edge2]
          params: {port: 7100, service_rate: 1000}
        - agent: request_client
          nodes: [viewer1, viewer2]
          start: 1s
          params: {to: api, port: 7100, rate: 50, count: 100}
        - agent: command      # over the management network, never the data links
          nodes: [viewer3]
          start: 1s
          command: ["python3", "-c", "import json, os; from agents.control import ControlClient; host, port = os.environ['EDGEBED_CONTROLLER'].split(':'); c = ControlClient((host, int(port)), node='{node}'); print('JOINED', json.dumps(c.join('api').model_dump()))"]
    """)
    run_dir, summary = run(tmp_path, path)
    address = addresses(run_dir)
    placed = {row["flow"]: row["server"] for row in decisions(run_dir, "place")}
    assert {f"viewer{i}/video" for i in (1, 2, 3)} <= set(placed)
    # least loaded with 20 Mbit/s per edge and 4 Mbit/s per flow: one viewer per edge
    assert sorted(placed[f"viewer{i}/video"] for i in (1, 2, 3)) == ["edge1", "edge2", "edge3"]
    received = flows_by_edge(run_dir)
    for viewer in ("viewer1", "viewer2", "viewer3"):
        server = placed[f"{viewer}/video"]
        stream = received[server, address[viewer]]
        assert int(stream["unique"]) > 300 and int(stream["lost"]) <= 2, stream
        for other in {"edge1", "edge2", "edge3"} - {server}:
            assert (other, address[viewer]) not in received  # nothing went elsewhere
    # Answers come back from the service address (the client's socket is connected to it and
    # would drop anything else): every request of both clients answered.
    responses = read_table(run_dir, "responses")
    for viewer in ("viewer1", "viewer2"):
        answered = [r for r in responses if r["node"] == viewer and r["response_ms"]]
        assert len(answered) == 100, viewer
    served = read_table(run_dir, "requests_served")
    for viewer in ("viewer1", "viewer2"):
        servers = {r["node"] for r in served if r["client"].startswith(address[viewer] + ":")}
        assert servers == {placed[f"{viewer}/api"]}
    joined = [line for line in (run_dir / "logs" / "viewer3.log").read_text().splitlines()
              if line.startswith("JOINED ")]
    assert joined and json.loads(joined[0].split(" ", 1)[1])["server"] in ("edge1", "edge2")
    assert summary["controller"]["status"]["control"]["handler_errors"] == 0
    assert_nothing_left(state_before, summary["prefix"])


def test_a_live_flow_migrates_to_another_server(tmp_path, state_before):
    path = scenario(tmp_path, duration="9s", workload=steady("viewer1", "1s", "6s"))
    process, run_dir = start(tmp_path, path)
    time.sleep(3.5)  # the stream has run for about two seconds
    with control_client(run_dir) as client:
        [placement] = client.query().placements
        target = sorted({"edge1", "edge2", "edge3"} - {placement["server"]})[0]
        decision = client.steer("viewer1/video", target)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    assert decision.type == "decision" and decision.server == target and decision.migrated
    address = addresses(run_dir)["viewer1"]
    received = flows_by_edge(run_dir)
    before, after = received[placement["server"], address], received[target, address]
    # Both servers got part of one stream, and together all of it (to within the packets in
    # flight on the 4 ms path while the rules changed).
    assert int(before["unique"]) > 500 and int(after["unique"]) > 500
    total = int(before["unique"]) + int(after["unique"])
    sent = int(after["unique"]) + int(after["lost"])  # the new server saw the last packet
    assert sent - total <= 5, (before, after)
    [migration] = decisions(run_dir, "migrate")
    assert migration["server"] == target and float(migration["install_ms"]) > 0
    assert_nothing_left(state_before, json.loads((run_dir / "summary.json").read_text())["prefix"])


@pytest.mark.parametrize("fast_failover", ["true", "false"])
def test_cutting_the_primary_link_keeps_a_stream_flowing(tmp_path, state_before, fast_failover):
    path = scenario(tmp_path, duration="8s", fast_failover=fast_failover,
                    workload=steady("viewer1", "1s", "5s"), schedule="""
        - {at: 3.5s, action: link_down, link: "s1:eth10"}
    """)
    run_dir, summary = run(tmp_path, path)
    [stream] = flows_by_edge(run_dir).values()
    seconds = [row for row in read_table(run_dir, "flow_seconds") if row["node"].startswith("edge")]
    # the stream keeps arriving after the cut at 3.5 s (2.5 s into it), over the long way
    assert all(int(row["packets"]) > 400 for row in seconds if 3 <= int(row["second"]) <= 4), seconds
    assert float(stream["delay_p99_ms"]) > 10  # after the cut: 5 + 5 ms instead of 2 + 2
    if fast_failover == "true":
        # the switch moves to the backup port itself: at most a few packets lost
        assert int(stream["lost"]) <= 10, stream
        assert float(stream["gap_max_ms"]) < 100, stream
    else:
        assert int(stream["lost"]) < 250, stream  # rerouted by the controller
    reroutes = decisions(run_dir, "reroute")
    assert reroutes, "the controller rerouted after the port went down"
    assert_nothing_left(state_before, summary["prefix"])


def test_the_data_plane_outlives_the_controller_and_a_new_one_takes_over(tmp_path, state_before):
    path = scenario(tmp_path, duration="10s", workload=steady("viewer1", "1s", "7s")
                    + steady("viewer2", "6s", "2s"), schedule="""
        - {at: 2.5s, action: controller_down}
        - {at: 4.5s, action: controller_up}
    """)
    run_dir, summary = run(tmp_path, path)
    address = addresses(run_dir)
    received = flows_by_edge(run_dir)
    [first] = [row for (edge, peer), row in received.items() if peer == address["viewer1"]]
    # the switches kept forwarding while no controller ran (fail mode secure), and the new
    # controller re-installed them in place: the stream never stopped
    assert int(first["unique"]) > 3000 and int(first["lost"]) <= 5, first
    assert float(first["gap_max_ms"]) < 200, first
    # the new controller placed a flow that started after it took over
    [second] = [row for (edge, peer), row in received.items() if peer == address["viewer2"]]
    assert int(second["unique"]) > 800, second
    placed = [row["flow"] for row in decisions(run_dir, "place")]
    assert placed.count("viewer1/video") == 1  # taken over, not placed again
    assert "viewer2/video" in placed
    controller = summary["controller"]
    assert controller["starts"] == 2 and controller["exits"][0] == -9
    assert len(controller["status"]["synced"]) == 4
    assert_nothing_left(state_before, summary["prefix"])


def fuzzed(rng: random.Random) -> bytes:
    """A hostile datagram: noise, broken JSON, valid JSON of the wrong shape or type."""
    valid = protocol.encode(protocol.Join(id=rng.randrange(1, 2**32), node="viewer1",
                                          service="video"))
    choice = rng.randrange(6)
    if choice == 0:
        return rng.randbytes(rng.randrange(0, 2000))
    if choice == 1:
        return valid[:rng.randrange(len(valid))]
    if choice == 2:
        data = bytearray(valid)
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if choice == 3:
        return json.dumps({"v": 1, "type": rng.choice(list(protocol.TYPES)),
                           "id": rng.choice([-1, 0, 2**64, "x", None, 1.5]),
                           "node": rng.choice(["", "x" * 500, 7, None])}).encode()
    if choice == 4:
        return b"[" * rng.randrange(1, 5000)
    return json.dumps({"v": 1, "type": "steer", "id": rng.randrange(1, 2**32),
                       "flow": "viewer1/video", "server": rng.choice(["nobody", "s1", "edge1"])
                       }).encode()


def test_fuzzed_control_messages_leave_the_controller_working(tmp_path, state_before):
    path = scenario(tmp_path, duration="30s")
    process, run_dir = start(tmp_path, path)
    try:
        with control_client(run_dir, node="viewer3") as client:
            rng = random.Random(5)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
                for number in range(10_000):
                    sender.sendto(fuzzed(rng), client.controller)
                    if number % 100 == 0:
                        client.query()  # keeps each burst within the socket's buffer
            decision = client.join("api")
        assert decision.type == "decision" and decision.server in ("edge1", "edge2")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=120)
    assert process.returncode == 143, output
    summary = json.loads((run_dir / "summary.json").read_text())
    counters = summary["controller"]["status"]["control"]
    assert counters["received"] >= 10_000 and counters["handler_errors"] == 0, counters
    assert summary["controller"]["exits"] == [0]
    assert_nothing_left(state_before, summary["prefix"])


def test_a_switch_that_lost_its_rules_gets_them_back_when_it_reconnects(tmp_path, state_before):
    path = scenario(tmp_path, duration="10s", workload=steady("viewer1", "1s", "8s"))
    process, run_dir = start(tmp_path, path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    bridge = f"{manifest['prefix']}s0"  # s1, where viewer1 is
    time.sleep(3)
    # As if the switch restarted: no controller, no rules (fail secure: it drops everything).
    for command in (["ovs-vsctl", "del-controller", bridge],
                    ["ovs-ofctl", "-O", "OpenFlow13", "del-flows", bridge],
                    ["ovs-ofctl", "-O", "OpenFlow13", "del-groups", bridge]):
        subprocess.run(command, check=True)
    time.sleep(1)
    subprocess.run(["ovs-vsctl", "set-controller", bridge, manifest["controller"]["openflow"]],
                   check=True)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    [stream] = flows_by_edge(run_dir).values()
    seconds = {int(row["second"]): int(row["packets"]) for row in read_table(
        run_dir, "flow_seconds") if row["node"].startswith("edge")}
    # about a second without rules, then the stream runs again to its end
    assert 400 < float(stream["gap_max_ms"]) < 5000, stream
    assert seconds[max(seconds)] > 300 and seconds[max(seconds) - 1] > 400, seconds
    log = (run_dir / "controller" / "controller.log").read_text()
    assert log.count("switch s1 (0000000000000001) connected") == 2
    assert_nothing_left(state_before, json.loads((run_dir / "summary.json").read_text())["prefix"])
