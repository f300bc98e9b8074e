"""A dilated run: what the kernel and the compiled relay are told, what the runner hands its
processes, and what a dilated scenario refuses."""

from __future__ import annotations

import io
import json

import pytest

from edgebed import clock
from edgebed.clock import Clock
from experiments import run_clock, scenarios
from experiments.cli import main
from topologies.impairments import relay, tc, wire_front
from topologies.impairments.backends import NetemBackend, Placement
from topologies.model import Impairment

NETWORK = """\
name: dilated
duration: 5s
topology:
  subnet: 10.0.0.0/24
  nodes:
    v1: {role: viewer}
    v2: {role: viewer}
    s1: {role: switch}
  links:
    - endpoints: ["v1:eth1", "s1:eth1"]
    - {endpoints: ["v2:eth1", "s1:eth2"], delay: 10ms, bw: 8Mbps}
"""
SCENARIO = NETWORK + """\
workload:
  - agent: iperf
    nodes: [v1]
    params: {role: server}
"""


@pytest.fixture
def dilated():
    """This process's clock dilated 4 times for the test."""
    previous = clock.current()
    clock.use(Clock.starting_now(4.0))
    yield 4.0
    clock.use(previous)


def test_the_kernel_gets_longer_delays_and_lower_rates():
    written = Impairment(delay=0.01, jitter=0.002, bw=8e6, loss=0.01, queue=50)
    kernel = tc.in_real_time(written, 4.0)
    assert (kernel.delay, kernel.jitter, kernel.bw) == (pytest.approx(0.04),
                                                        pytest.approx(0.008), 2e6)
    assert (kernel.loss, kernel.queue) == (0.01, 50)
    # Rate times delay, the packets in flight, is what it was: netem's limit holds.
    assert tc.netem_limit(kernel) == tc.netem_limit(written)


def test_undilated_the_impairment_is_passed_as_written():
    written = Impairment(delay=0.01, bw=8e6)
    assert tc.in_real_time(written, 1.0) is written


class Namespace:
    """A node whose commands all succeed, and the commands it was given."""

    def __init__(self):
        self.commands = []

    def cmd(self, command: str) -> str:
        self.commands.append(command)
        return ""


def test_netem_is_configured_in_real_time(dilated):
    node = Namespace()
    placement = Placement(0, "forward", node, "s1-eth2", "s1:eth2")
    record = NetemBackend().apply(placement, Impairment(delay=0.01, bw=8e6))
    commands = " ; ".join(record["tc"])
    assert "htb rate 2000000bit" in commands
    assert "delay 40000us" in commands


class FakeRelayProcess:
    def __init__(self, command, stdin):
        self.stdin = io.BytesIO()
        self.stdin.close = lambda: None


def _compiled_relay_lines(monkeypatch) -> list[str]:
    monkeypatch.setattr(wire_front.subprocess, "Popen", FakeRelayProcess)
    relay = wire_front.CompiledRelay("wire_relay", "wa", "wb", None, 1)
    relay.configure({"forward": {"delay": "10ms", "jitter": "1ms"}})
    return relay.process.stdin.getvalue().decode().splitlines()


def test_the_compiled_relay_gets_real_delays(monkeypatch, dilated):
    (line,) = _compiled_relay_lines(monkeypatch)
    assert line.split()[:4] == ["D", "0", "40000000", "4000000"]


def test_undilated_the_compiled_relay_gets_the_delays_as_written(monkeypatch):
    (line,) = _compiled_relay_lines(monkeypatch)
    assert line.split()[:4] == ["D", "0", "10000000", "1000000"]


def test_the_run_clock_reaches_every_process_through_the_environment():
    scenario = scenarios.loads(NETWORK + "time_dilation: 8\n")
    environ: dict[str, str] = {}
    previous = clock.current()
    try:
        started = run_clock.start_run_clock(scenario, environ)
        assert started.dilation == 8.0 and clock.current() == started
        assert Clock.from_environment(environ) == started
        assert run_clock.manifest_entry(scenario) == {"time_dilation": 8.0}
        assert "8 times faster" in run_clock.summary_notes(scenario)[0]
        run_clock.stop_run_clock(environ)
        assert environ == {} and not clock.current().dilated
    finally:
        clock.use(previous)


def test_an_undilated_run_leaves_the_environment_alone():
    scenario = scenarios.loads(SCENARIO)
    environ: dict[str, str] = {}
    assert run_clock.start_run_clock(scenario, environ) == clock.current()
    assert environ == {} and run_clock.summary_notes(scenario) == []


def test_run_dilate_refuses_kernel_tcp_where_it_is_written(tmp_path, capsys):
    path = tmp_path / "dilated.yaml"
    path.write_text(SCENARIO)
    assert main(["run", "--dilate", "4", str(path)]) == 2
    error = capsys.readouterr().err
    assert f"{path}:13:12: workload[0].agent: agent iperf cannot run at time_dilation 4" \
        in " ".join(error.split())


@pytest.mark.parametrize("text", ["0.5", "0", "two", "1001"])
def test_run_dilate_takes_a_factor_of_at_least_one(text, capsys):
    with pytest.raises(SystemExit):
        main(["run", "--dilate", text, "any.yaml"])
    assert "--dilate" in capsys.readouterr().err


class EndedRelayProcess:
    stdin = None

    def poll(self):
        return 0


def ended_relay(tmp_path, kind: str, late: dict) -> relay.Relay:
    """A relay whose process has ended, its log's last line its statistics."""
    ended = relay.Relay.__new__(relay.Relay)
    ended.log, ended.kind, ended.process = tmp_path / "wire1.log", kind, EndedRelayProcess()
    figures = {"frames_out": 10, "late_us": late}
    ended.log.write_text(json.dumps({"forward": figures, "reverse": figures}) + "\n")
    return ended


LATE = {"mean": 400.0, "std": 80.0, "p50": 360, "p99": 800, "max": 1200, "sum": 4000,
        "sum_squares": 1_664_000}


def test_the_compiled_relay_s_real_lateness_is_reported_in_virtual_time(tmp_path, dilated):
    statistics = ended_relay(tmp_path, relay.COMPILED, LATE).stop()
    assert statistics["forward"]["late_us"] == {
        "mean": 100.0, "std": 20.0, "p50": 90.0, "p99": 200.0, "max": 300.0, "sum": 1000.0,
        "sum_squares": 104_000.0}
    assert statistics["reverse"]["frames_out"] == 10


def test_the_python_relay_s_lateness_is_already_virtual(tmp_path, dilated):
    assert ended_relay(tmp_path, relay.PYTHON, LATE).stop()["forward"]["late_us"] == LATE


def test_undilated_the_compiled_relay_s_lateness_is_as_measured(tmp_path):
    assert ended_relay(tmp_path, relay.COMPILED, LATE).stop()["forward"]["late_us"] == LATE


def test_a_direction_that_sent_nothing_late_keeps_its_empty_figures(dilated):
    empty = {"mean": None, "std": None, "p50": None, "p99": None, "max": None, "sum": 0,
             "sum_squares": 0}
    assert relay.virtual_lateness(empty, dilated) == empty | {"sum": 0.0, "sum_squares": 0.0}
