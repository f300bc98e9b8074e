"""surveillance's emulated scenario (topologies/surveillance/surveillance.yaml) on a real Mininet network: the
improved balancer with a hot camera whose clients exceed one node. Everything is checked on what
the agents measured (the clients' streams, the nodes' inputs and sessions) and the controller's
records (decisions, policy trace, load reports with their metrics).

The run lowers the queue levels to light below 0.4 and heavy above 0.5 (the scenario's default
is the paper's 0.6 and 0.9): L is a weighted mean of CPU, memory and link use, so passing 0.9
needs all three near full, which a few 1 Mbit/s streams on a shared 2-core machine do not
reach in a short run. The weak node (a 0.02-core CPU budget) passes 0.5 once it serves: its
process CPU alone is past its budget.
"""

from __future__ import annotations

import json
import os

import networkx as nx
import pytest
import yaml

from controller.policies.surveillance.load import LoadWeights
from controller.policies.surveillance.policies import reported_load
from controller.policy import LoadReport, Server, State
from experiments.measurements import read_table
from tests.conftest import ROOT
from tests.integration.conftest import SystemState, assert_nothing_left, edgebed, only_run_dir
from tests.integration.test_controller_runs import addresses

SCENARIO = ROOT / "topologies" / "surveillance" / "surveillance.yaml"
LIGHT, HEAVY = 0.4, 0.5
HOT = [f"client{i}" for i in range(1, 6)]  # camera 1's clients, in the order they start
NODES = ("node1", "node2", "node3")
CAPACITY = {"node1": 4, "node2": 3, "node3": 2}  # streams: the capacity labels over 1 Mbit/s
# A client's loss beyond what the emulator counted as its own: none is configured, so this is
# only the slack for what a loaded machine's userspace switch may drop uncounted.
LOSS_SLACK = 0.01


NODE2 = "cpu_budget: 0.5,"
NODE1_CAPACITY = "capacity: 4Mbps"
DIES_AFTER = 6.0  # the dying run: node2's server process ends this long after it started
PERIOD, MISSED = 1.0, 3  # the scenario's report period and missed reports for a health check
DYING_DURATION = 18.0


def emulate(tmp_path_factory, name: str, text: str, **variables: str):
    before = SystemState.now()
    runs = tmp_path_factory.mktemp(name)
    scenario = runs / "surveillance.yaml"
    scenario.write_text(text)
    env = {**os.environ, **variables}
    result = edgebed("run", str(scenario), "--runs-dir", str(runs / "runs"), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = only_run_dir(runs / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert_nothing_left(before, summary["prefix"])
    return run_dir


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return emulate(tmp_path_factory, "surveillance", SCENARIO.read_text(),
                   EDGEBED_LIGHT_BELOW=str(LIGHT), EDGEBED_HEAVY_ABOVE=str(HEAVY))


@pytest.fixture(scope="module")
def dying(tmp_path_factory):
    """A run in which node2's server ends DIES_AFTER its start (no more streams, no more
    reports), at the paper's queue levels, with room on node1 for 6 streams: every client the
    dead node served has a live node with room to go to, so none is left on it."""
    text = SCENARIO.read_text()
    assert NODE2 in text and NODE1_CAPACITY in text
    text = text.replace(NODE2, f"{NODE2} duration: {DIES_AFTER:g}s,")
    return emulate(tmp_path_factory, "dying", text.replace(NODE1_CAPACITY, "capacity: 6Mbps"),
                   EDGEBED_DURATION=f"{DYING_DURATION:g}s")


# The ending run: sessions and a camera that end. The original balancer (every client of a
# streaming camera to its origin) on nodes with room for ENDING_ROOM streams each; clients by
# (camera, start, session) in s, None: until the run ends. Camera 1: client3 finds the origin
# full; client1's session ends before client4 asks, and client4 gets the room it held.
# Camera 2 stops streaming CAMERA2_STOPS_AT (its origin keeps client6's session and reports the
# stream silent); client7 asks for it later and is refused.
ENDING_ROOM = 2
ENDING_CLIENTS = {"client1": (1, 1.0, 3.0), "client2": (1, 1.5, None),
                  "client3": (1, 2.0, None), "client4": (1, 6.5, None),
                  "client6": (2, 1.2, None), "client7": (2, 8.0, None)}
CAMERA2_STOPS_AT = 3.2  # the camera starts at 0.2 s and streams for 3 s
ENDING_DURATION = 11.0


@pytest.fixture(scope="module")
def ending(tmp_path_factory):
    scenario = yaml.safe_load(SCENARIO.read_text())
    nodes = scenario["topology"]["nodes"]
    for node in NODES:
        nodes[node]["labels"]["capacity"] = f"{ENDING_ROOM}Mbps"
    nodes["client7"]["labels"]["camera"] = 2
    [camera2] = [e for e in scenario["workload"]
                 if e["agent"] == "camera" and e["params"]["stream"] == 2]
    camera2["params"]["duration"] = f"{CAMERA2_STOPS_AT - 0.2:g}s"
    viewer = next(e for e in scenario["workload"] if e["agent"] == "viewer")["params"]
    scenario["workload"] = [e for e in scenario["workload"] if e["agent"] != "viewer"] + [
        {"agent": "viewer", "nodes": [client], "start": f"{start:g}s",
         "params": {**viewer, "pull_stream": camera,
                    **({"duration": f"{session:g}s"} if session is not None else {})}}
        for client, (camera, start, session) in ENDING_CLIENTS.items()]
    return emulate(tmp_path_factory, "ending", yaml.safe_dump(scenario, sort_keys=False),
                   EDGEBED_POLICY="sv_feedback", EDGEBED_DURATION=f"{ENDING_DURATION:g}s")


def first_servers(run_dir) -> dict[str, str]:
    """Each client's first decided node, as the client heard it."""
    servers = {}
    for row in sorted(read_table(run_dir, "live_decisions"), key=lambda r: float(r["time_s"])):
        servers.setdefault(row["node"], row["server"])
    return servers


def test_the_hot_camera_s_clients_beyond_the_origin_s_share_get_it_from_a_cascaded_helper(run):
    address = addresses(run)
    node_of = {address[node]: node for node in NODES}
    servers = first_servers(run)
    origin = servers["client1"]
    on_origin = [c for c in HOT if servers.get(c) == origin]
    beyond = [c for c in HOT if servers.get(c) not in (None, origin)]
    print(f"origin {origin}: {on_origin}; helpers: "
          + ", ".join(f"{c}@{servers[c]}" for c in beyond))
    assert len(on_origin) <= CAPACITY[origin] and beyond, servers
    inputs = {(row["node"], row["flow"]): row for row in read_table(run, "flows")
              if row["agent"] == "edge_server"}
    sessions = read_table(run, "live_sessions")
    client_flows = {row["node"]: row for row in read_table(run, "flows")
                    if row["agent"] == "viewer" and row["flow"] == "stream-1"}
    # The origin pulled camera 1 from its host, once.
    assert node_of.get(inputs[origin, "stream-1"]["peer"].split(":")[0]) is None
    for client in beyond:
        helper = servers[client]
        # The helper received camera 1 from another node: a cascade copy, not the camera.
        fed = inputs[helper, "stream-1"]
        feeder = node_of.get(fed["peer"].split(":")[0])
        assert feeder in NODES and feeder != helper and int(fed["unique"]) > 0, fed
        copies = [s for s in sessions if s["node"] == feeder and s["viewer"] == address[helper]]
        assert copies and sum(int(s["packets"]) for s in copies) > 0, copies
        # ... and served the client from it: what the client measured against what the helper
        # sent it.
        sent = sum(int(s["packets"]) for s in sessions
                   if s["node"] == helper and s["viewer"] == address[client])
        got = client_flows[client]
        print(f"{client} on {helper} fed by {feeder}: {got['unique']} of {sent} packets, "
              f"lost {got['lost']}, goodput {float(got['goodput_bps'] or 0) / 1e6:.2f} Mbit/s")
        assert sent > 0 and int(got["unique"]) >= sent * (1 - LOSS_SLACK), (got, sent)


def load_of(row: dict, server: Server) -> float:
    """L as the policy computes it from the report ``row`` of the load_reports table."""
    report = LoadReport(server.name, float(row["time"]), float(row["load"]),
                        json.loads(row["metrics"]))
    state = State(nx.MultiDiGraph(), (server,), (), loads={server.name: (report,)})
    return reported_load(state, server, LoadWeights())


CPU_LEVEL = 0.95  # the scenario's report_thresholds cpu level (of the node's budget)


def test_a_node_turning_heavy_reports_at_once_and_gets_no_new_client(run):
    assert f"cpu: {CPU_LEVEL}" in SCENARIO.read_text()
    resolved = __import__("yaml").safe_load((run / "scenario.yaml").read_text())
    hosts = resolved["topology"]["nodes"]
    notified = []  # (node, arrival of the report announcing it, its cpu, the previous one's)
    heavy = []  # (node, from, until, index of the first heavy report, L)
    for node in NODES:
        server = Server(node, "video", "", 0.0, labels=hosts[node].get("labels", {}))
        rows = [row for row in read_table(run, "load_reports")
                if row["server"] == node and row["kept"] == "1"]
        loads = [load_of(row, server) for row in rows]
        cpu = [json.loads(row["metrics"]).get("cpu", 0.0) for row in rows]
        for i in range(1, len(rows)):
            # The node's CPU crossed its level, either way, since its last report: this report
            # announces it (surveillance's active notification; sent at once, or the periodic
            # one when the period fell due at the check that found it).
            if (cpu[i] >= CPU_LEVEL) != (cpu[i - 1] >= CPU_LEVEL):
                assert rows[i]["urgent"] == "1", (node, rows[i])
                notified.append((node, float(rows[i]["time"]), cpu[i], cpu[i - 1]))
            # Heavy from this report on (whichever kind brought it) until one says otherwise.
            if loads[i] > HEAVY >= loads[i - 1]:
                until = next((float(r["time"]) for r, L in zip(rows[i + 1:], loads[i + 1:])
                              if L <= HEAVY), float("inf"))
                heavy.append((node, float(rows[i]["time"]), until, i, loads[i]))
    # The CPU level is crossed as L nears the heavy level (L weighs CPU with the rest): which
    # report first shows L above it depends on how fast the machine fills the CPU window, so
    # the notification is checked on the level the node itself watches.
    assert notified, "no node's CPU crossed its level"
    assert heavy, "no node turned heavy"
    for node, at, until, i, load in heavy:
        print(f"{node} heavy from {at:.3f} (L {load:.2f}) until {until:.3f}")
        # Until it reports below the level again, no decision gives it a client.
        given = [moved for row in read_table(run, "policy_trace")
                 if at <= float(row["time"]) < until
                 for moved in (row["assigned"] or "").split(";") if moved]
        assert not [g for g in given if g.split("@")[1] == node], given
    # The late client (camera 2, after the hot camera's clients) was decided while some node
    # was heavy: the check above had a decision to look at.
    late = [row for row in read_table(run, "policy_trace")
            if "client6/video@" in (row["assigned"] or "")]
    assert late and any(at <= float(late[0]["time"]) < until for _, at, until, *_ in heavy), late


def test_a_request_for_a_camera_nobody_streams_is_refused(run):
    refused = [row for row in read_table(run, "policy_trace")
               if "client7/video" in (row["rejected"] or "")]
    assert refused
    log = (run / "logs" / "client7.log").read_text()
    assert "unknown camera '9': no camera host streams it" in log, log[-2000:]
    assert "client7" not in first_servers(run)


def summary_of(run_dir, node: str, agent: str) -> dict:
    """The JSON summary line ``agent`` printed on ``node`` when it ended."""
    for line in (run_dir / "logs" / f"{node}.log").read_text().splitlines():
        if line.startswith("{") and f'"agent": "{agent}"' in line:
            return json.loads(line)
    raise AssertionError(f"no summary of {agent} on {node}")


def test_a_dead_node_s_clients_move_and_what_it_fed_is_fed_again(dying):
    address = addresses(dying)
    origin = json.loads((dying / "summary.json").read_text())["timeline_origin_s"]
    reports = [row for row in read_table(dying, "load_reports")
               if row["server"] == "node2" and row["kept"] == "1"]
    last_report = max(float(row["time"]) for row in reports)
    # Precondition: its reports ended early enough for the health check and the repair to show.
    assert last_report < origin + DYING_DURATION - (MISSED + 2) * PERIOD, last_report - origin
    placed = read_table(dying, "decisions")
    on_node2 = {row["flow"] for row in placed if row["server"] == "node2"}
    assert on_node2, "precondition: node2 served somebody before it ended"
    # No client is left on the dead node: the controller's placements at the end ...
    flows = json.loads((dying / "controller" / "state.json").read_text())["flows"]
    assert not [f["flow"] for f in flows if f["server"] == "node2"], flows
    # ... each moved after the health check took node2 out (MISSED periods without a report).
    for flow in on_node2:
        moves = [row for row in placed if row["flow"] == flow and row["kind"] != "place"
                 and row["server"] != "node2"]
        assert moves and float(moves[0]["time"]) >= last_report + MISSED * PERIOD - 0.5, moves
        client = flow.split("/")[0]
        # ... and the client measured the stream from its new node.
        later = [row for row in read_table(dying, "flows")
                 if row["node"] == client and row["agent"] == "viewer"
                 and row["flow"] != "stream-1"]
        print(f"{flow} moved to {moves[0]['server']} at "
              f"{float(moves[0]['time']) - origin:.1f} s: "
              + ", ".join(f"{r['flow']} {r['unique']} packets" for r in later))
        assert sum(int(r["unique"]) for r in later) > 0, later
    # A node node2 fed (a cascade) pulls from another node since.
    for node in ("node1", "node3"):
        changes = summary_of(dying, node, "edge_server")["back_source"]["upstreams"]
        fed_by_node2 = [c for c in changes if c["to"] == address["node2"]]
        if fed_by_node2:
            after = [c for c in changes if c["time_s"] > fed_by_node2[-1]["time_s"]]
            assert after and after[-1]["to"] != address["node2"], changes


def what_became_of(run_dir, client: str) -> str:
    """What the run recorded of ``client``'s request: the controller's decisions and
    rejections, its log lines and the client's own log's end."""
    decisions = [row for row in read_table(run_dir, "decisions")
                 if row["flow"].startswith(f"{client}/") or row["kind"] == "leave"]
    traced = [row for row in read_table(run_dir, "policy_trace")
              if client in f"{row['assigned']}{row['rejected']}{row['migrated']}"]
    logged = [line for line in (run_dir / "controller" / "controller.log").read_text()
              .splitlines() if client in line]
    own = (run_dir / "logs" / f"{client}.log").read_text().splitlines()[-6:]
    return "\n".join([f"decisions: {decisions}", f"policy trace: {traced}",
                       "controller log:", *logged, f"{client}'s log:", *own])


def test_a_viewer_whose_session_ended_leaves_and_a_later_request_gets_its_room(ending):
    decisions = read_table(ending, "decisions")
    placed = {row["flow"]: row for row in decisions if row["kind"] == "place"}
    assert "client4/video" in placed, what_became_of(ending, "client4")
    origin = placed["client1/video"]["server"]
    assert placed["client2/video"]["server"] == origin
    # client3 asked while the origin held client1 and client2: refused, the origin is full.
    assert "client3/video" not in placed
    assert f"node {origin!r} has no room" in (ending / "logs" / "client3.log").read_text()
    # client1's session ended: it left, the controller acknowledged, and released the flow.
    followed = summary_of(ending, "client1", "viewer")["pull"]["followed"]
    assert followed["left_s"] is not None, followed
    [left] = [row for row in decisions if row["kind"] == "leave"]
    assert (left["flow"], left["server"]) == ("client1/video", origin)
    origin_s = json.loads((ending / "summary.json").read_text())["timeline_origin_s"]
    _, start, session = ENDING_CLIENTS["client1"]
    print(f"client1 left {origin} at {followed['left_s'] - origin_s:.2f} s (session "
          f"{start:g} + {session:g} s); client4 placed at "
          f"{float(placed['client4/video']['time']) - origin_s:.2f} s")
    assert float(left["time"]) - origin_s >= start + session
    # client4, later, got the room client1 held, and measured the stream from it.
    assert placed["client4/video"]["server"] == origin
    assert float(placed["client4/video"]["time"]) > float(left["time"])
    got = [row for row in read_table(ending, "flows")
           if row["node"] == "client4" and row["agent"] == "viewer"]
    assert sum(int(row["unique"] or 0) for row in got) > 0, got
    # The clients stopped by the run's end did not leave: the controller's final state keeps
    # them, and not client1.
    flows = {f["flow"] for f in json.loads(
        (ending / "controller" / "state.json").read_text())["flows"]}
    assert flows == {"client2/video", "client4/video", "client6/video"}, flows


def test_a_request_for_a_camera_that_stopped_is_refused(ending):
    origin_s = json.loads((ending / "summary.json").read_text())["timeline_origin_s"]
    placed = {row["flow"]: row["server"] for row in read_table(ending, "decisions")
              if row["kind"] == "place"}
    origin = placed["client6/video"]
    # Camera 2's origin said the stream went silent, from its own measurement ...
    silent = [(float(row["time"]) - origin_s, json.loads(row["metrics"]).get("stream.2.silent_s"))
              for row in read_table(ending, "load_reports") if row["server"] == origin]
    stopped = [at for at, seconds in silent if seconds is not None and seconds >= 2.0]
    assert stopped and stopped[0] >= CAMERA2_STOPS_AT + 2.0 - 0.5, silent
    # ... and the later request for it was refused, saying why, instead of being placed.
    assert "client7/video" not in placed
    refused = [float(row["time"]) - origin_s for row in read_table(ending, "policy_trace")
               if "client7/video" in (row["rejected"] or "")]
    assert refused and refused[0] >= ENDING_CLIENTS["client7"][1], refused
    assert "camera '2' stopped streaming" in (ending / "logs" / "client7.log").read_text()
    # client6 measured camera 2 while it streamed: the refusal is about the stop, not a path.
    got = [row for row in read_table(ending, "flows")
           if row["node"] == "client6" and row["agent"] == "viewer"]
    assert sum(int(row["unique"] or 0) for row in got) > 0, got
