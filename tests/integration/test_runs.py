"""Real runs of real scenarios: build, pass traffic, tear down, leave nothing behind."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import struct
import textwrap
import time
from pathlib import Path

import networkx as nx
import pytest

from tests.conftest import ROOT
from tests.integration.conftest import (assert_nothing_left, edgebed, logged_at, only_run_dir,
                                        start_edgebed, wait_for_phase)
from experiments import scenarios
from topologies import cleanup


def connected_role_pairs(loaded) -> set[frozenset]:
    """Every pair of host roles that share a connected part of the topology."""
    graph = loaded.graph()
    pairs = set()
    for part in nx.connected_components(graph):
        hosts = [loaded.nodes[n] for n in part if not loaded.nodes[n].is_switch]
        for a, b in itertools.combinations(hosts, 2):
            pairs.add(frozenset((a.role, b.role)))
    return pairs


def pcap_packet_count(path: Path) -> int:
    """Records in a classic pcap file (tcpdump's -w format)."""
    data = path.read_bytes()
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4"), "not a pcap file"
    endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    offset, count = 24, 0
    while offset + 16 <= len(data):
        captured = struct.unpack(endian + "IIII", data[offset:offset + 16])[2]
        offset += 16 + captured
        count += 1
    return count


@pytest.mark.parametrize("example", ["demo.yaml", "city-113.yaml"])
def test_example_runs_passes_traffic_between_every_connected_role_pair(example, tmp_path,
                                                                       state_before):
    path = ROOT / "topologies" / example
    loaded = scenarios.load(path, {})
    result = edgebed("run", str(path), "--duration", "1s", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    run = only_run_dir(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    manifest = json.loads((run / "manifest.json").read_text())

    assert summary["status"] == manifest["status"] == "completed"
    tested = {frozenset((p["source_role"], p["target_role"])) for p in summary["reachability"]}
    assert tested == connected_role_pairs(loaded)
    # Every echo comes back where nothing is configured to lose one; elsewhere (demo.yaml's
    # access link loses 0.5 %) at least one of the four does.
    failed = [p for p in summary["reachability"] if not p["received"]
              or (p["received"] != p["sent"] and not p["configured_loss"])]
    assert not failed, failed
    assert all(p["ok"] for p in summary["reachability"])

    assert manifest["backends"]["ovs_datapath"] in ("kernel", "user")
    assert manifest["seed"] == loaded.seed and manifest["ended"]
    logs = {p.stem for p in (run / "logs").glob("*.log")}
    wires = {f"wire{link.index}" for link in loaded.links
             if link.forward.delay or link.reverse.delay or link.forward.jitter
             or link.reverse.jitter}
    # The agent launcher forks every Python agent, when there are any; it keeps a log of its
    # own.
    launcher = {"agent-launcher"} if loaded.workload else set()
    expected = set(loaded.nodes) | wires | launcher
    assert logs == expected, logs ^ expected
    assert (run / "scenario.yaml").exists()
    for capture in loaded.captures:
        for interface in capture.interfaces:
            assert pcap_packet_count(run / "pcap" / f"{capture.node}-{interface}.pcap") > 0
    assert f"{loaded.name}: completed" in result.stdout
    assert_nothing_left(state_before, manifest["prefix"])


def scenario_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(textwrap.dedent(body))
    return path


LINE = """
name: line
duration: {duration}
topology:
  subnet: 10.9.0.0/24
  nodes:
    v1: {{role: viewer, ip: 10.9.0.1/24}}
    e1: {{role: edge, ip: 10.9.0.2/24}}
    s1: {{role: switch}}
    s2: {{role: switch}}
  links:
    - endpoints: ["v1:eth1", "s1:eth1"]
    - endpoints: ["s1:eth2", "s2:eth2"]
    - endpoints: ["e1:eth1", "s2:eth1"]
"""


def test_schedule_takes_a_switch_link_down_and_up(tmp_path, state_before):
    path = scenario_file(tmp_path, LINE.format(duration="5s") + """
workload:
  - agent: command
    nodes: [v1]
    command: ping -n -D -i 0.1 -c 40 10.9.0.2
schedule:
  - {at: 1s, action: link_down, link: "s1:eth2"}
  - {at: 3s, action: link_up, link: "s1:eth2"}
""")
    runs = tmp_path / "runs"
    result = edgebed("run", str(path), "--runs-dir", str(runs))
    assert result.returncode == 0, result.stdout + result.stderr
    run = only_run_dir(runs)
    log = (run / "logs" / "v1.log").read_text()
    sent, received = map(int, re.search(r"(\d+) packets transmitted, (\d+) received", log).groups())
    # Down for 2 s of a 4 s ping at 10/s. Whatever the machine's pace: echoes were lost, one
    # run of them (one outage), no reply came while the link was down, and replies came
    # before and after. The last echo is not judged: ping waits only two round trips for its
    # reply, which a busy machine may exceed. The runner's commands follow its log line
    # within half a second (Mininet's shell round trips).
    assert sent == 40, log
    down = logged_at(run, "link_down s1:eth2 - s2:eth2")
    up = logged_at(run, "link_up s1:eth2 - s2:eth2")
    assert down is not None and up is not None and up > down
    replies = {int(seq): float(at) for at, seq in re.findall(
        r"^\[([\d.]+)\] \d+ bytes from .*icmp_seq=(\d+)", log, re.MULTILINE)}
    assert len(replies) == received
    lost = sorted(set(range(1, sent)) - set(replies))
    assert lost and lost == list(range(lost[0], lost[-1] + 1)), lost
    assert not [at for at in replies.values() if down + 0.5 < at < up], (down, up, replies)
    assert min(replies) < lost[0] and max(replies) > lost[-1], lost
    assert_nothing_left(state_before, json.loads((run / "manifest.json").read_text())["prefix"])


def test_tcp_crosses_the_switches_and_every_interface_gets_its_address(tmp_path, state_before):
    body = LINE.format(duration="4s").replace(
        '    - endpoints: ["e1:eth1", "s2:eth1"]\n',
        '    - endpoints: ["e1:eth1", "s2:eth1"]\n    - endpoints: ["e1:eth2", "s1:eth3"]\n')
    path = scenario_file(tmp_path, body + """
workload:
  - {agent: command, nodes: [e1], command: "iperf3 -s -1 -B {ip}"}
  - {agent: command, nodes: [v1], start: 1s, command: "iperf3 -c 10.9.0.2 -t 1 -f m"}
""")
    runs = tmp_path / "runs"
    result = edgebed("run", str(path), "--runs-dir", str(runs))
    assert result.returncode == 0, result.stdout + result.stderr
    run = only_run_dir(runs)
    client = (run / "logs" / "v1.log").read_text()
    receiver = re.search(r"([\d.]+) Mbits/sec\s+receiver", client)
    assert receiver and float(receiver.group(1)) > 1.0, client
    edge = (run / "logs" / "e1.log").read_text()
    assert re.search(r"eth1@\S+\s+UP\s+10\.9\.0\.2/24", edge), edge
    assert re.search(r"eth2@\S+\s+UP\s+10\.9\.0\.3/24", edge), edge
    assert_nothing_left(state_before, json.loads((run / "manifest.json").read_text())["prefix"])


@pytest.mark.parametrize("how, exit_code, status", [
    (signal.SIGTERM, 143, "terminated"),
    (signal.SIGINT, 130, "interrupted"),
])
def test_signal_tears_down_and_records_why(how, exit_code, status, tmp_path, state_before):
    path = scenario_file(tmp_path, LINE.format(duration="120s") + """
workload:
  - {agent: command, nodes: [v1, e1], command: sleep 600}
""")
    runs = tmp_path / "runs"
    process = start_edgebed("run", str(path), "--runs-dir", str(runs))
    run = wait_for_phase(runs, "network up", process)
    prefix = json.loads((run / "manifest.json").read_text())["prefix"]
    assert cleanup.find_leftovers({prefix})[prefix].bridges  # the network is really there
    process.send_signal(how)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == exit_code, output
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == status and manifest["ended"]
    assert json.loads((run / "summary.json").read_text())["status"] == status
    assert_nothing_left(state_before, prefix)


def test_sigkilled_runner_is_cleaned_by_prefix(tmp_path, state_before):
    path = scenario_file(tmp_path, LINE.format(duration="120s") + """
workload:
  - {agent: command, nodes: [v1, e1], command: sleep 600}
""")
    runs = tmp_path / "runs"
    # Side by side on purpose: both runs say --concurrent, or the second would wait.
    bystander = start_edgebed("run", str(path), "--runs-dir", str(tmp_path / "other"),
                              "--concurrent")
    bystander_run = wait_for_phase(tmp_path / "other", "network up", bystander)
    victim = start_edgebed("run", str(path), "--runs-dir", str(runs), "--concurrent")
    run = wait_for_phase(runs, "network up", victim)
    prefix = json.loads((run / "manifest.json").read_text())["prefix"]
    deadline = time.monotonic() + 30
    while "timeline_started" not in json.loads((run / "manifest.json").read_text()):
        assert time.monotonic() < deadline, "the victim's timeline did not start"
        time.sleep(0.1)
    time.sleep(0.5)  # let the workload start
    victim.kill()
    victim.wait()
    left = cleanup.find_leftovers({prefix})[prefix]
    assert left.bridges and left.processes, "SIGKILL should leave the network behind"

    result = edgebed("clean")
    assert result.returncode == 0, result.stdout + result.stderr
    assert prefix in result.stdout
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "incomplete"
    assert not (run / "summary.json").exists()

    # The live run next to it was not touched.
    bystander_prefix = json.loads((bystander_run / "manifest.json").read_text())["prefix"]
    assert cleanup.find_leftovers({bystander_prefix})[bystander_prefix].bridges
    bystander.send_signal(signal.SIGTERM)
    bystander.communicate(timeout=60)
    assert bystander.returncode == 143
    assert_nothing_left(state_before, prefix)
    assert_nothing_left(state_before, bystander_prefix)

