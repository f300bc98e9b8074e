"""`edgebed export --to containerlab`: every shipped scenario exports to a topology that
containerlab's published JSON Schema (vendored, v0.79.0) accepts, the default scenario's nodes,
links and impairments come out as configured, broken exports and bad input are refused.

Docker and containerlab are not on this machine: the topology is checked against the schema
and on its structure, not deployed; the exec command wrapper is run for real with bash.
"""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from experiments import scenarios
from controller.launcher import standalone_config
from experiments import cli
from experiments.cli_output import EXIT_INVALID
from experiments.export import ExportError, targets
from experiments.export import containerlab
from tests.conftest import EXAMPLES, example_id, wait_until
from tests.unit.test_media_agents import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "topologies" / "demo.yaml"


def exported(path: Path = DEMO) -> containerlab.ContainerlabExport:
    return containerlab.export(scenarios.load(path), path, path.parent)


def host_commands(topology: dict) -> list[str]:
    """The host-namespace commands of the configure stage (wherever the export hung them)."""
    return [item["command"] for spec in topology["topology"]["nodes"].values()
            for item in (spec.get("stages") or {}).get("configure", {}).get("exec", [])
            if item["target"] == "host"]


@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_every_shipped_scenario_exports_to_a_valid_containerlab_topology(path):
    topology = exported(path).topology
    assert containerlab.problems(topology) == []
    loaded = scenarios.load(path)
    nodes = topology["topology"]["nodes"]
    controlled = loaded.document.controller.app == "edgebed"
    assert len(nodes) == len(loaded.nodes) + controlled
    assert len(topology["topology"]["links"]) == len(loaded.links)


def test_the_schema_is_containerlabs_and_validates_offline():
    schema = containerlab.schema()
    assert schema["$id"] == "https://containerlab.dev/clab.schema.json"
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    text = containerlab.SCHEMA_PATH.read_text()
    assert '"$ref": "http' not in text  # every $ref is inside the file: nothing is fetched


def test_demo_nodes_are_linux_containers_and_ovs_bridges():
    topology = exported().topology
    nodes = topology["topology"]["nodes"]
    assert topology["name"] == "demo"
    kinds = sorted(spec["kind"] for spec in nodes.values())
    assert kinds == ["linux"] * 6 + ["ovs-bridge"] * 3  # demo has no controller (app none)
    hosts = {spec["labels"]["edgebed-name"]: spec for spec in nodes.values()
             if spec["kind"] == "linux"}
    assert sorted(hosts) == ["edge1", "streamer1", "streamer2", "viewer1", "viewer2", "viewer3"]
    assert topology["topology"]["kinds"]["linux"]["image"] == containerlab.IMAGE
    assert topology["mgmt"]["ipv4-subnet"] == "172.30.0.0/16"
    # the gateway keeps 172.30.0.1; hosts follow in file order
    assert hosts["streamer1"]["mgmt-ipv4"] == "172.30.0.2"
    bridges = {spec["labels"]["edgebed-name"]: name for name, spec in nodes.items()
               if spec["kind"] == "ovs-bridge"}
    assert sorted(bridges) == ["s1", "s2", "s3"]
    assert all(len(name) <= 15 for name in bridges.values())


def test_demo_links_keep_their_endpoints_addresses_and_port_numbers():
    export = exported()
    links = export.topology["topology"]["links"]
    bridge = {spec["labels"]["edgebed-name"]: name
              for name, spec in export.topology["topology"]["nodes"].items()
              if spec["kind"] == "ovs-bridge"}
    assert all(link["type"] == "veth" for link in links)
    first = links[0]["endpoints"]
    assert first[0] == {"node": "streamer1", "interface": "eth1", "mac": "02:eb:0a:00:00:01",
                        "ipv4": "10.0.0.1/24"}
    assert first[1] == {"node": bridge["s1"], "interface": f"{bridge['s1']}p1"}
    edge = links[3]["endpoints"]
    assert edge[0]["node"] == "edge1" and edge[0]["ipv4"] == "10.0.0.100/24"
    core = links[4]["endpoints"]  # s2:eth10 - s3:eth10, OpenFlow ports 10 and 10
    assert [end["node"] for end in core] == [bridge["s2"], bridge["s3"]]
    assert f"ovs-vsctl set Interface {core[0]['interface']} ofport_request=10" in \
        host_commands(export.topology)
    # standalone learning switches (controller: none), datapath ids as the scenario's
    assert export.host_setup[0].startswith(f"ovs-vsctl --may-exist add-br {bridge['s1']} ")
    assert "fail-mode=standalone" in export.host_setup[0]
    assert "other-config:datapath-id=0000000000000001" in export.host_setup[0]


def test_demo_impairments_are_netem_on_the_sending_end_with_units():
    export = exported()
    nodes = export.topology["topology"]["nodes"]
    # forward of streamer[1-2] -> s1: 50 Mbit/s on the streamers' own egress (exec)
    for streamer in ("streamer1", "streamer2"):
        assert ("tc class add dev eth1 parent 1: classid 1:1 htb rate 50000000bit ceil "
                "50000000bit burst 75000b cburst 75000b quantum 200000") in nodes[streamer]["exec"]
    # forward of s2:eth10 -> s3:eth10: delay 10 ms, jitter 2 ms, 0.5 % loss on s2's port, in
    # the host namespace, nothing on the reverse direction
    bridge = next(name for name, spec in nodes.items()
                  if spec["labels"].get("edgebed-name") == "s2")
    netem = [command for command in host_commands(export.topology) if "netem" in command]
    assert netem == [f"tc qdisc add dev {bridge}p10 root handle 10: netem delay 10000us 2000us "
                     "distribution normal loss random 0.5% limit 15862"]
    # an unimpaired host gets no tc at all
    assert not any(command.startswith("tc ") for command in nodes["viewer1"]["exec"])


def test_demo_workload_becomes_the_agents_command_lines_with_edgebeds_seeds():
    nodes = exported().topology["topology"]["nodes"]
    streamer = [shlex.split(command)[2] for command in nodes["streamer1"]["exec"]
                if "agents.streamer" in command]
    assert len(streamer) == 1
    assert "sleep 2;" in streamer[0] and "timeout --signal=TERM 6 python -m agents.streamer" \
        in streamer[0]
    assert '"to": "10.0.0.100"' in streamer[0]  # node names become addresses
    # edgebed run numbers agents by start time then file order: the streamer (2 s) is the 6th
    assert "--seed 1006" in streamer[0]
    capture = [command for command in nodes["edge1"]["exec"] if "tcpdump" in command]
    assert len(capture) == 1 and "-s 128" in capture[0] and "edge1-eth1.pcap" in capture[0]


def test_a_controlled_scenario_gets_a_controller_on_the_management_network():
    path = ROOT / "topologies" / "edge-services.yaml"
    export = exported(path)
    nodes = export.topology["topology"]["nodes"]
    controller = nodes["controller"]
    assert controller["kind"] == "linux" and controller["mgmt-ipv4"] == "172.30.0.2"
    assert "--scenario /edgebed/scenario.yaml" in controller["cmd"]
    assert "edge-services.yaml:/edgebed/scenario.yaml:ro" in controller["binds"]
    env = export.topology["topology"]["kinds"]["linux"]["env"]
    assert env["EDGEBED_CONTROLLER"] == "172.30.0.2:6650"
    bridges = [name for name, spec in nodes.items() if spec["kind"] == "ovs-bridge"]
    assert all("fail-mode=secure" in command for command in export.host_setup)
    assert {f"ovs-vsctl set-controller {name} tcp:172.30.0.2:6653" for name in bridges} <= \
        set(host_commands(export.topology))


def test_unmapped_features_are_stated_in_the_output():
    path = ROOT / "topologies" / "dispatch" / "dispatch.yaml"  # has a schedule of impairment changes
    export = exported(path)
    assert any(item.startswith("schedule:") for item in export.unmapped)
    text = export.text()
    assert "# Not exported" in text and "#   - schedule:" in text
    assert yaml.safe_load(text) == export.topology  # the header is comments only


def test_a_link_to_a_missing_node_fails_validation():
    topology = copy.deepcopy(exported().topology)
    topology["topology"]["links"][0]["endpoints"][0]["node"] = "ghost"
    found = containerlab.problems(topology)
    assert found == ["topology/links/0: endpoint names node 'ghost', which is not in "
                     "topology.nodes"]


def test_a_schema_violation_fails_validation():
    topology = copy.deepcopy(exported().topology)
    topology["topology"]["nodes"]["edge1"]["kind"] = "mininet"
    del topology["topology"]["links"][1]["endpoints"][1]["interface"]
    found = containerlab.problems(topology)
    assert any(problem.startswith("topology/nodes/edge1") and "mininet" in problem
               for problem in found)
    assert any(problem.startswith("topology/links/1") for problem in found)


def test_cli_writes_the_topology(tmp_path):
    out = tmp_path / "lab" / "demo.clab.yml"
    assert cli.main(["export", str(DEMO), "--to", "containerlab", "-o", str(out)]) == 0
    written = yaml.safe_load(out.read_text())
    assert written == exported().topology
    assert out.read_text().startswith("# containerlab topology of edgebed scenario 'demo'")
    assert len(written["topology"]["nodes"]) == 9


def test_cli_refuses_an_unknown_target(tmp_path, capsys):
    out = tmp_path / "x.yml"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["export", str(DEMO), "--to", "kathara", "-o", str(out)])
    assert exit_.value.code == EXIT_INVALID
    assert "invalid choice: 'kathara'" in capsys.readouterr().err
    assert not out.exists()
    assert targets() == ["containerlab"]


def test_cli_refuses_an_invalid_scenario_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEMO.read_text().replace("edge1:eth1", "edge9:eth1"))
    out = tmp_path / "bad.clab.yml"
    assert cli.main(["export", str(bad), "--to", "containerlab", "-o", str(out)]) \
        == EXIT_INVALID
    assert "edge9" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [bad]


def test_cli_refuses_what_does_not_map_and_writes_nothing(tmp_path, capsys):
    clash = tmp_path / "clash.yaml"
    clash.write_text(DEMO.read_text().replace('"viewer[1-3]:eth1"', '"viewer[1-3]:eth0"'))
    out = tmp_path / "clash.clab.yml"
    with pytest.raises(ExportError):
        exported(clash)
    assert cli.main(["export", str(clash), "--to", "containerlab", "-o", str(out)]) \
        == EXIT_INVALID
    assert "eth0 is containerlab's management interface" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [clash]


def test_exec_wrapper_starts_late_returns_at_once_and_stops_at_the_duration(tmp_path):
    """The wrapper as containerlab runs it (split like a shell, executed, waited for). The
    program marks when it started and when it was stopped (its SIGTERM trap, set before
    anything else), so every check is against its own marks, not against how long things take
    here."""
    started_mark, stopped_mark = tmp_path / "started", tmp_path / "stopped"
    program = ["sh", "-c", f"trap 'kill $sleeping; date +%s.%N > {stopped_mark}; exit 0' TERM; "
                           f"date +%s.%N > {started_mark}; sleep 30 & sleeping=$!; wait; "
                           f"echo not stopped > {stopped_mark}"]
    command = containerlab.background(program, log=str(tmp_path / "logs" / "n.log"),
                                      start=0.5, stop=1.5)
    began = time.time()
    subprocess.run(shlex.split(command), check=True, timeout=HANG_GUARD_S)
    returned = time.time()
    # The timeout stops the program; a program not stopped would end by itself after 30 s.
    wait_until(lambda: subprocess.run(["pgrep", "-f", str(started_mark)],
                                      capture_output=True).returncode == 1, "the program's end",
               HANG_GUARD_S)
    started = float(started_mark.read_text())
    stopped = float(stopped_mark.read_text())  # "not stopped" is no time: ValueError
    assert started - began >= 0.5  # it started late
    assert stopped - began >= 1.5  # and was stopped at its stop time, not before
    # It returned at once: before the program was stopped (a wrapper that waited for it would
    # return only after that).
    assert returned < stopped


def test_the_exported_controller_writes_its_config_from_the_scenario(tmp_path):
    config = standalone_config(ROOT / "topologies" / "edge-services.yaml", tmp_path,
                               "172.30.0.2", "0.0.0.0", 6653)
    written = json.loads(config.read_text())
    assert written["openflow_host"] == "0.0.0.0" and written["openflow_port"] == 6653
    assert written["control_endpoint"] == {"address": "172.30.0.2", "netns_pid": None}
    assert len(written["view"]["switches"]) == 4


def test_the_exported_controller_command_serves_openflow(tmp_path):
    """The controller node's command line, run here: it listens for switches where told."""
    from controller.launcher import _listening, free_port

    argv = shlex.split(exported(ROOT / "topologies" / "edge-services.yaml")
                       .topology["topology"]["nodes"]["controller"]["cmd"])
    port = free_port()
    argv = [sys.executable if part == "python" else part for part in argv]
    argv[argv.index("/edgebed/scenario.yaml")] = str(ROOT / "topologies" / "edge-services.yaml")
    argv[argv.index("--out") + 1] = str(tmp_path / "controller")
    argv[argv.index("--openflow-port") + 1] = str(port)
    argv += ["--openflow-host", "127.0.0.1"]
    at = argv.index("--management-address")
    del argv[at:at + 2]  # 172.30.0.2 is not an address of this machine
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while not _listening(port) and process.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert _listening(port), process.stdout.read1().decode() if process.poll() else "timeout"
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert json.loads((tmp_path / "controller" / "config.json").read_text())["openflow_port"] \
        == port


def test_in_band_control_is_stated_as_not_exported(tmp_path):
    source = (ROOT / "topologies" / "edge-services.yaml").read_text()
    path = tmp_path / "in-band.yaml"
    path.write_text(source.replace("controller:\n", "controller:\n  control_network: in-band\n"
                                                    "  control_host: viewer1\n", 1))
    export = exported(path)
    assert any(item.startswith("controller.control_network: in-band") for item in export.unmapped)
    # The lab's controller is still reachable on containerlab's management network.
    env = export.topology["topology"]["kinds"]["linux"]["env"]
    assert env["EDGEBED_CONTROLLER"] == "172.30.0.2:6650"
