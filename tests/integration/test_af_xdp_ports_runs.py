"""A run whose userspace switches read their ports through AF_XDP: the traffic crosses them
whole, the run says which ports it had and what they lock, their rings' drops are counted
with the switch's, and the ports go with the run.

The checks compare counts (sent, received, dropped), never timings."""

from __future__ import annotations

import csv
import json
import textwrap

import pytest

from tests.integration.conftest import assert_nothing_left, edgebed, only_run_dir
from topologies import capabilities
from topologies.network import AF_XDP_PORT_MEMORY

VIEWERS = 6
SCENARIO = f"""
name: af-xdp-ports
duration: 8s
topology:
  nodes:
    src[1-{VIEWERS}]: {{role: viewer}}
    dst1: {{role: edge}}
    s1: {{role: switch}}
    s2: {{role: switch}}
  links:
    - {{endpoints: ["s1:eth1", "s2:eth1"], delay: 10ms}}
    - {{endpoints: ["src[1-{VIEWERS}]:eth1", "s1:eth[2-{VIEWERS + 1}]"]}}
    - {{endpoints: ["dst1:eth1", "s2:eth2"]}}
emulation: {{ovs_datapath: user, userspace_ports: af_xdp}}
workload:
  - {{agent: chat_collector, nodes: [dst1], params: {{port: 5006}}}}
  - {{agent: viewer, nodes: ["src[1-{VIEWERS}]"], start: 1s,
     params: {{danmaku_to: dst1, danmaku_rate: 20, gift_rate: 2}}}}
"""
SWITCH_PORTS = 2 + VIEWERS + 1


@pytest.fixture(scope="module", autouse=True)
def af_xdp_here():
    if not capabilities.ovs_af_xdp():
        pytest.skip("this Open vSwitch has no AF_XDP ports")


def test_frames_cross_af_xdp_ports_whole_and_the_ports_go_with_the_run(tmp_path, state_before):
    path = tmp_path / "scenario.yaml"
    path.write_text(textwrap.dedent(SCENARIO))
    runs = tmp_path / "runs"
    result = edgebed("run", str(path), "--runs-dir", str(runs), timeout=600)
    run = only_run_dir(runs)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed", result.stdout + result.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["backends"]["userspace_ports"] == "af_xdp"
    assert summary["af_xdp_ports"]["ports"] == SWITCH_PORTS
    assert summary["af_xdp_ports"]["locked_memory_mib"] == SWITCH_PORTS * AF_XDP_PORT_MEMORY >> 20
    assert "switch_sockets" not in summary  # no packet socket was read
    sent = list(csv.DictReader(open(run / "tables" / "sent.csv")))
    datagrams = sum(int(row["datagrams"]) for row in sent)
    arrived = {row["flow"] for row in csv.DictReader(open(run / "tables" / "flows.csv"))}
    assert datagrams > VIEWERS * 20 and {row["flow"] for row in sent} <= arrived
    [trunk] = [entry for entry in summary["emulator_loss"]
               if entry["link"] == 0 and entry["direction"] == "forward"]
    assert trunk["offered"] >= datagrams
    delivery = summary["delivery"]
    if delivery["short"]:
        # The machine fell behind: the run says so, and the loss was counted where it was.
        assert not summary["fidelity"]["ok"]
        assert any(entry["emulator_made"] for entry in summary["emulator_loss"]), delivery
    assert_nothing_left(state_before, summary["prefix"])
