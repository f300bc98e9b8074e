"""The cost benchmark's naming of a run's processes and its rows per packet."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from experiments.cpu_accounting import Process

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cost():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import cost
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return cost


def process(pid: int, *argv: str) -> Process:
    return Process(pid, 1, argv, 0.0)


def test_each_process_of_a_run_is_named_by_its_command_line(cost):
    name = cost.RunProcesses(runner=10)
    agent = ("python", "-m", "agents.viewer", "--node")
    assert name(process(10, "python", "-m", "experiments")) == cost.RUNNER
    assert name(process(11, *agent, "src3")) == cost.SENDING
    assert name(process(12, "mnexec", "-a", "9", *agent, "dst1")) == cost.RECEIVING
    assert name(process(13, "python", "-m", "controller", "--config", "c.json")) == cost.CONTROLLER
    assert name(process(14, "/opt/edgebed/wire_relay", "--forward-in", "x")) == cost.RELAY
    assert name(process(15, "bash", "--norc", "-is", "mininet:src1")) == cost.OTHER
    assert name(process(16, "python", "-m")) == cost.OTHER


def test_a_forked_agent_is_named_by_the_host_whose_namespace_it_is_in(cost, monkeypatch):
    namespaces = {10: 1, 20: 2, 21: 3, 30: 1, 31: 2, 32: 3}  # runner and launcher in the root's
    monkeypatch.setattr(cost, "network_namespace", namespaces.get)
    monkeypatch.setattr(cost, "host_shells", lambda: [(20, "src1"), (21, "dst1")])
    name = cost.RunProcesses(runner=10)
    launcher = ("python", "-m", "agents.launcher", "agents.viewer", "agents.streamer")
    assert name(process(30, *launcher)) == cost.OTHER
    assert name(process(31, *launcher)) == cost.SENDING
    assert name(process(32, *launcher)) == cost.RECEIVING
    # A child not yet in its host's namespace (or one gone) is the rest until it is.
    assert name(process(33, *launcher)) == cost.OTHER
    # A streamer's compiled engine sends, whichever host it is on.
    assert name(process(32, "/venv/bin/edgebed-send-engine", "--socket", "3")) == cost.SENDING


def test_the_switch_is_divided_by_the_bridges_crossed_and_idle_is_taken_out(cost):
    kind = cost.KINDS["video"]

    def measured(switch_s: float, machine_s: float) -> object:
        return cost.Measured({cost.SWITCH: switch_s, cost.SENDING: machine_s / 2},
                             {"handler": switch_s}, machine_s, {}, 0, 0, 1000, "netem", "user",
                             "af_xdp")

    rows = {row[1]: row[4].replace(",", "") for row in cost.cost_rows(kind, measured(0.5, 3.0),
                                                     measured(0.1, 1.0))}
    [(label, switch)] = [(label, value) for label, value in rows.items()
                         if label.startswith("switch")]
    assert label.endswith("user datapath, af_xdp ports)")
    assert float(switch) == pytest.approx((0.5 - 0.1) / 2 / 1000 * 1e6)
    assert float(rows["sending agent"]) == pytest.approx(1000.0)
    assert float(rows["machine (all CPUs busy)"]) == pytest.approx(2000.0)
    assert any(label.startswith("relay (none: netem") for label in rows)
    assert cost.per_packet_us(1.0, 0.0, 0) == "-"
