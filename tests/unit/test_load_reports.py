"""Load reports with history: the controller core keeps a bounded ring of each server's reports
and hands it to the policy in ``State.loads``, drops stale ones, and reacts as the policy's
``on_load`` says; agents report through :class:`agents.control.LoadReporter` (periodic and,
on a threshold crossing, at once) with figures measured from the host
(:class:`agents.control.HostMeter`)."""

from __future__ import annotations

import socket
import time

import pytest

from agents.control import ControlClient, HostMeter, LoadReporter
from agents.echo import PathMeter
from edgebed.protocol import path_metric
from edgebed import protocol
from controller.core import ControllerCore
from controller.loads import LOAD_HISTORY
from controller.policies import create
from controller.policy import Decision, LoadReport, State
from controller.view import NetworkView
from experiments.scenarios import load

WALL = 1.7e9  # a sender's and the controller's CLOCK_REALTIME in these tests


def view() -> NetworkView:
    return NetworkView.from_scenario(load("topologies/edge-services.yaml"))


class Recording:
    """A policy that assigns nothing and remembers every state it was given."""

    name = "recording"

    def __init__(self, on_load: str = "nothing"):
        self.on_load = on_load
        self.states: list[State] = []

    def decide(self, state: State) -> Decision:
        self.states.append(state)
        return Decision()


def core_with(policy=None, **options) -> ControllerCore:
    return ControllerCore(view(), policy or Recording(), **options)


def test_each_server_keeps_a_bounded_history_that_the_policy_sees():
    policy = Recording()
    core = core_with(policy)
    for index in range(LOAD_HISTORY + 5):
        assert core.report_load("edge1", float(index), metrics={"cpu": index / 100},
                                now=10.0 + index, sent=WALL + index, wall_clock=WALL + index)
    core.report_load("edge2", 7.0, now=40.0, sent=WALL, wall_clock=WALL)
    core.place([core.request_for("viewer1", "video")], now=50.0)
    [state] = policy.states
    history = state.loads["edge1"]
    assert len(history) == LOAD_HISTORY  # the oldest five fell out
    assert [report.load for report in history] == [float(i) for i in range(5, LOAD_HISTORY + 5)]
    assert history[-1] == LoadReport("edge1", 10.0 + LOAD_HISTORY + 4, LOAD_HISTORY + 4.0,
                                     {"cpu": (LOAD_HISTORY + 4) / 100}, WALL + LOAD_HISTORY + 4)
    assert state.loads["edge3"] == ()  # never reported
    assert {s.name: s.load for s in state.servers} == {"edge1": LOAD_HISTORY + 4.0,
                                                       "edge2": 7.0, "edge3": 0.0}
    with pytest.raises(TypeError):
        state.loads["edge1"] = ()  # the policy must not change what it is given


def test_state_helpers_give_the_latest_report_its_age_and_windowed_means():
    reports = tuple(LoadReport("edge1", received, load, {"cpu": cpu} if cpu is not None else {})
                    for received, load, cpu in ((1.0, 10.0, 0.1), (5.0, 20.0, None),
                                                (8.0, 30.0, 0.5), (9.0, 60.0, 0.9)))
    state = State(None, (), (), now=10.0, loads={"edge1": reports, "edge2": ()})
    assert state.latest_load("edge1").load == 60.0 and state.latest_load("edge2") is None
    assert state.load_age("edge1") == 1.0 and state.load_age("edge2") == float("inf")
    assert not state.is_stale("edge1", 2.0) and state.is_stale("edge1", 0.5)
    assert state.is_stale("edge2", 1e9) and state.is_stale("nobody", 1e9)
    assert [r.load for r in state.load_window("edge1", 5.0)] == [20.0, 30.0, 60.0]
    assert state.mean_load("edge1", 5.0) == pytest.approx(110 / 3)
    assert state.mean_load("edge1", 5.0, "cpu") == pytest.approx(0.7)  # one lacks cpu
    assert state.mean_load("edge1", 0.5) is None and state.mean_load("edge2", 10) is None
    assert reports[0].value("cpu") == 0.1 and reports[1].value("cpu") is None


@pytest.mark.parametrize("server, sent, counter", [
    ("edge1", WALL - 11, "stale"),  # sent longer ago than LOAD_MAX_AGE
    ("edge1", WALL + 5, "from_the_future"),
    ("edge1", WALL - 2, "reordered"),  # sent before the report already kept
    ("viewer1", WALL, "not_a_server"),
    ("nobody", WALL, "not_a_server"),
])
def test_bad_reports_are_counted_and_dropped(server, sent, counter):
    core = core_with()
    assert core.report_load("edge1", 5.0, now=1.0, sent=WALL - 1, wall_clock=WALL)
    assert not core.report_load(server, 99.0, now=2.0, sent=sent, wall_clock=WALL)
    assert core.load_counts == {"accepted": 1, "stale": 0, "reordered": 0,
                                "from_the_future": 0, "not_a_server": 0} | {counter: 1}
    assert [r.load for r in core.load_history()["edge1"]] == [5.0]


def test_the_age_limit_is_the_cores_to_choose():
    core = core_with(load_max_age=60.0)
    assert core.report_load("edge1", 1.0, sent=WALL - 30, wall_clock=WALL)


def test_a_policy_that_does_nothing_on_load_is_not_asked():
    policy = Recording("nothing")
    core = core_with(policy)
    core.report_load("edge1", 5.0)
    assert not core.react_to_load().placed and policy.states == []


def test_a_policy_that_rebalances_is_asked_without_requests():
    policy = Recording("rebalance")
    core = core_with(policy)
    core.report_load("edge1", 5.0, now=3.0)
    core.react_to_load(now=3.5)
    [state] = policy.states
    assert state.requests == () and state.now == 3.5 and state.latest_load("edge1").load == 5.0


def test_a_policy_that_redecides_gets_every_placed_flow_again():
    core = ControllerCore(view(), create("least_loaded"))
    for viewer in ("viewer1", "viewer2", "viewer3"):
        core.place([core.request_for(viewer, "video")])
    on = core.flows["viewer1/video"].placement.server
    seen = []
    decide = core.policy.decide
    core.policy.decide = lambda state: seen.append(state) or decide(state)
    core.on_load = "redecide"
    core.report_load(on, 19e6)  # busy with something else now
    outcome = core.react_to_load()
    [state] = seen
    assert len(state.requests) == 3 and len(state.previous) == 3
    assert on not in {r.placement.server for r in core.flows.values()}
    assert outcome.placed  # what moved off it


def test_the_baseline_policies_say_how_they_react():
    assert ControllerCore(view(), create("least_loaded")).on_load == "rebalance"
    assert ControllerCore(view(), create("round_robin")).on_load == "nothing"
    assert ControllerCore(view(), create("lua")).on_load == "nothing"
    assert core_with(object()).on_load == "nothing"  # a policy that does not say
    with pytest.raises(ValueError, match="on_load must be one of"):
        core_with(Recording("panic"))


def test_a_restarted_controller_takes_over_each_servers_last_report():
    core = core_with()
    core.report_load("edge1", 1.0, metrics={"cpu": 0.2}, now=4.0, sent=WALL - 1,
                     wall_clock=WALL)
    core.report_load("edge1", 2.0, metrics={"cpu": 0.4}, now=5.0, sent=WALL, wall_clock=WALL)
    later = core_with()
    later.restore(core.snapshot())
    [report] = later.load_history()["edge1"]
    assert (report.load, dict(report.metrics), report.sent, report.received) == (
        2.0, {"cpu": 0.4}, WALL, 0.0)
    assert later.load_history()["edge2"] == ()
    # Older reports than the one taken over are out of order.
    assert not later.report_load("edge1", 3.0, sent=WALL - 0.5, wall_clock=WALL)


# the reporter


@pytest.fixture
def controller():
    """A UDP socket standing for the controller, on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(5.0)
        yield sock


def received(sock: socket.socket) -> list[protocol.Load]:
    """The load reports that arrived so far."""
    reports = []
    sock.settimeout(0.2)
    try:
        while True:
            reports.append(protocol.decode(sock.recv(protocol.MAX_DATAGRAM)))
    except TimeoutError:
        return reports


def reporter_to(sock: socket.socket, **options) -> LoadReporter:
    return LoadReporter(ControlClient(sock.getsockname(), node="edge1"), service="video",
                        **options)


def test_the_reporter_reports_every_period_on_absolute_deadlines(controller):
    reporter = reporter_to(controller, period=1.0)
    sent = [now for now in (0.0, 0.3, 0.99, 1.0, 1.5, 2.2, 2.9, 3.0, 7.5, 7.6, 8.4, 8.5)
            if reporter.tick(2.0, {"sessions": 3}, now=now)]
    # 7.5 comes after a stall: the next is a period later, not a burst that catches up.
    assert sent == [0.0, 1.0, 2.2, 3.0, 7.5, 8.5]
    reports = received(controller)
    assert [r.seq for r in reports] == [1, 2, 3, 4, 5, 6] and not any(r.urgent for r in reports)
    assert {(r.node, r.service, r.load) for r in reports} == {("edge1", "video", 2.0)}
    assert reports[0].metrics == {"sessions": 3} and abs(reports[0].ts - time.time()) < 60
    assert reporter.close() == {"sent": 6, "urgent": 0, "errors": 0}


def test_a_threshold_crossing_is_reported_at_once_either_way(controller):
    reporter = reporter_to(controller, period=1.0, thresholds={"cpu": 0.8, "load": 10.0},
                           min_gap=0.05)
    ticks = [(0.0, 1.0, 0.5), (0.1, 1.0, 0.7), (0.2, 1.0, 0.85),  # cpu turns heavy: at once
             (0.21, 1.0, 0.6),  # back below within the gap: waits for it
             (0.3, 1.0, 0.6),  # the gap is over: the crossing back goes now
             (0.4, 12.0, 0.6),  # the load crosses its level
             (0.5, 12.0, 0.6), (1.0, 12.0, 0.6),  # no crossing; the period's report
             (2.0, 12.0, 0.9)]  # cpu crosses as the period falls due: that report tells it
    sent = [now for now, load, cpu in ticks if reporter.tick(load, {"cpu": cpu}, now=now)]
    assert sent == [0.0, 0.2, 0.3, 0.4, 1.0, 2.0]
    reports = received(controller)
    assert [(r.urgent, r.load, r.metrics["cpu"]) for r in reports] == [
        (False, 1.0, 0.5), (True, 1.0, 0.85), (True, 1.0, 0.6), (True, 12.0, 0.6),
        (False, 12.0, 0.6), (True, 12.0, 0.9)]
    assert reporter.close() == {"sent": 6, "urgent": 4, "errors": 0}


def test_a_reporter_without_a_controller_sends_nothing():
    reporter = LoadReporter(None, period=1.0)
    assert not reporter.tick(1.0, now=0.0)
    assert reporter.close() == {"sent": 0, "urgent": 0, "errors": 0}


def test_a_failed_send_is_counted_and_the_next_report_goes(controller):
    client = ControlClient(controller.getsockname(), node="edge1")
    reporter = LoadReporter(client, period=1.0)
    calls = []

    def failing_once(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise OSError("network is unreachable")
        return ControlClient.report_load(client, *args, **kwargs)

    client.report_load = failing_once
    assert not reporter.tick(1.0, now=0.0) and reporter.tick(1.0, now=1.0)
    assert [r.seq for r in received(controller)] == [2]
    assert reporter.close() == {"sent": 1, "urgent": 0, "errors": 1}


# the host meter


def fake_proc(directory, counters: dict[str, tuple[int, int, int, int]], pages: int) -> str:
    """A /proc/self lookalike: net/dev with ``counters`` (bytes in, packets in, bytes out,
    packets out per interface) and statm with ``pages`` resident."""
    (directory / "net").mkdir(exist_ok=True)
    lines = ["Inter-|   Receive |  Transmit", " face |bytes packets ... |bytes packets ..."]
    for name, (bytes_in, packets_in, bytes_out, packets_out) in counters.items():
        lines.append(f"{name:>6}: {bytes_in} {packets_in} 0 0 0 0 0 0 {bytes_out} "
                     f"{packets_out} 0 0 0 0 0 0")
    (directory / "net" / "dev").write_text("\n".join(lines) + "\n")
    (directory / "statm").write_text(f"1000 {pages} 10 1 0 50 0\n")
    return str(directory)


def test_the_host_meter_measures_interface_rates_without_loopback_or_management(tmp_path):
    proc = fake_proc(tmp_path, {"lo": (10**9, 10**6, 10**9, 10**6), "mgmt0": (500, 5, 500, 5),
                                "h1-eth0": (1000, 10, 2000, 20), "h1-eth1": (0, 0, 0, 0)},
                     pages=256)
    meter = HostMeter(proc=proc)
    first = meter.read(now=100.0)
    assert first == {"memory": 256 * meter._page}  # no rates before a second reading
    fake_proc(tmp_path, {"lo": (2 * 10**9, 2 * 10**6, 0, 0), "mgmt0": (9999, 99, 9999, 99),
                         "h1-eth0": (126_000, 1010, 2000, 20), "h1-eth1": (0, 0, 50_000, 100),
                         "h1-eth2": (10**6, 1, 10**6, 1)}, pages=512)
    second = meter.read(now=102.0)
    second.pop("process_cpu")
    # eth0 received 125,000 bytes in 2 s (500 kbit/s); eth1's counter restarted (recreated):
    # no negative rate; eth2 came up since the first reading: no rate yet.
    assert second == {"memory": 512 * meter._page,
                      "port.h1-eth0.bw_in": 500e3, "port.h1-eth0.bw_out": 0.0,
                      "port.h1-eth1.bw_in": 0.0, "port.h1-eth1.bw_out": 200e3,
                      "bw_in": 500e3, "bw_out": 200e3, "packets_in": 500.0,
                      "packets_out": 50.0}
    # What it measures is a valid report.
    protocol.Load(node="h1", load=0, ts=0, metrics=second)


def test_the_host_meter_reads_this_process_and_namespace():
    meter = HostMeter()
    # The meter's CPU readings fall between the test's own before and after each read, so the
    # CPU time it measured is bracketed by what this process itself counted, however long a
    # busy machine made the 0.05 CPU seconds take.
    first_read = time.monotonic()
    before_first = time.process_time()
    meter.read(now=first_read)
    after_first = time.process_time()
    busy_until = after_first + 0.05
    while time.process_time() < busy_until:
        pass
    before_second = time.process_time()
    second_read = time.monotonic()
    figures = meter.read(now=second_read)
    after_second = time.process_time()
    cpu_s = figures["process_cpu"] * (second_read - first_read)
    assert before_second - after_first - 1e-9 <= cpu_s <= after_second - before_first + 1e-9
    assert cpu_s >= 0.05  # the busy loop is in it
    assert figures["memory"] > 10e6  # a Python process with pydantic loaded
    assert figures["bw_in"] >= 0 and figures["packets_out"] >= 0
    assert not any(name.startswith("port.lo.") for name in figures)


def test_the_reports_give_the_paths_to_the_peers_as_probed(controller):
    """A reporter with a path meter adds each peer's round trip, loss and jitter from echo
    probes, as metrics the protocol takes (here the one peer is loopback: nothing lost)."""
    meter = PathMeter(["127.0.0.1"], count=3, interval=0.005, rounds=2)
    reporter = reporter_to(controller, period=0.05, paths=meter)
    rtt = path_metric("127.0.0.1", "rtt")
    assert rtt == "path.127-0-0-1.rtt"
    deadline = time.monotonic() + 10
    while rtt not in meter.figures() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reporter.tick(1.0, {"sessions": 1})
    reporter.close()
    assert not meter._thread.is_alive()  # closing the reporter stops the probing
    [report] = received(controller)
    figures = {name: value for name, value in report.metrics.items() if name.startswith("path.")}
    assert set(figures) == {rtt, path_metric("127.0.0.1", "loss"),
                            path_metric("127.0.0.1", "jitter")}
    assert figures[path_metric("127.0.0.1", "loss")] == 0 and 0 < figures[rtt] < 0.5


def test_with_a_cpu_budget_the_host_meter_gives_cpu_as_a_share_of_it(tmp_path):
    proc = fake_proc(tmp_path, {"h1-eth0": (0, 0, 0, 0)}, pages=1)
    meter = HostMeter(proc=proc, cpu_budget=0.05)
    meter.read(now=100.0)
    busy_until = time.process_time() + 0.02
    while time.process_time() < busy_until:
        pass
    figures = meter.read(now=100.1)  # 0.02 CPU s or more in 0.1 s: 0.2 cores, 4x the budget
    assert figures["cpu"] == min(1.0, figures["process_cpu"] / 0.05) == 1.0
    protocol.Load(node="h1", load=0, ts=0, metrics=figures)  # a fraction, as the protocol says
    idle = HostMeter(proc=proc, cpu_budget=1e6)
    idle.read(now=100.0)
    assert 0 <= idle.read(now=101.0)["cpu"] < 1e-3
    with pytest.raises(ValueError, match="positive"):
        HostMeter(cpu_budget=0)


def test_an_agent_that_serves_no_service_can_send_no_reports(monkeypatch, controller):
    from agents.control import ReportingParams
    host, port = controller.getsockname()
    monkeypatch.setenv("EDGEBED_CONTROLLER", f"{host}:{port}")
    silent = LoadReporter.for_agent("cam1", ReportingParams(report_load=False))
    assert not silent.tick(1.0, now=0.0) and silent.close()["sent"] == 0
    reporting = LoadReporter.for_agent("edge1", ReportingParams(cpu_budget=2.0))
    assert reporting.host.cpu_budget == 2.0 and reporting.tick(1.0, now=0.0)
    reporting.close()


def bursty_reports(controller, tmp_path, window: float | None) -> list[protocol.Load]:
    """A node sending one 0.96 Mbit/s video stream for 4 s, then three: 10 kB every 0.1 s and
    an I frame's 40 kB more once every 2 s (a GOP), as its interface counters show them to a
    reporter ticking every 0.1 s with a 2 Mbit/s threshold on bw_out; its reports."""
    sent = 0
    proc = fake_proc(tmp_path, {"h1-eth0": (0, 0, 0, 0)}, pages=1)
    reporter = reporter_to(controller, period=1.0, thresholds={"bw_out": 2e6},
                           host=HostMeter(proc=proc), check_period=0.09, window=window)
    for tick in range(80):
        streams = 1 if tick < 40 else 3
        sent += streams * (10_000 + (40_000 if tick % 20 == 15 else 0))
        fake_proc(tmp_path, {"h1-eth0": (0, 0, sent, 0)}, pages=1)
        reporter.tick(1.0, now=100.0 + tick / 10)
    reporter.close()
    return received(controller)


def test_over_a_gop_s_window_an_i_frame_crosses_no_level_and_a_lasting_rise_does(
        controller, tmp_path):
    # Over the check interval each I frame of the single stream is 4 Mbit/s for a tenth of a
    # second: reported at once, and so is its fall back to 0.8 Mbit/s; then the rise to three.
    short = [r.metrics["bw_out"] for r in bursty_reports(controller, tmp_path, None)
             if r.urgent]
    assert [round(rate / 1e6, 1) for rate in short] == [4.0, 0.8, 4.0, 0.8, 2.4], short
    # Over a GOP (2 s) the single stream is its mean: no urgent report until the node carries
    # three streams, and then one.
    smooth = bursty_reports(controller, tmp_path, window=2.0)
    urgent = [r.metrics["bw_out"] for r in smooth if r.urgent]
    assert len(urgent) == 1 and urgent[0] >= 2e6, urgent
    # The periodic reports of the single stream once 2 s are measured each see one I frame
    # and 20 tenths of P frames: 0.96 Mbit/s, not 0.8 or 1.2 depending on the period.
    periodic = [r.metrics.get("bw_out") for r in smooth if not r.urgent]
    assert [round(rate / 1e6, 2) for rate in periodic[2:4]] == [0.96, 0.96], periodic
