"""ai_access's agents as the emulated cluster runs them: an access server's receiver with several
receive ports, one processing budget and its load reports, and a terminal host sending several
flows. The budget's drops follow from the arrival times handed to it, so nothing here depends
on how fast the machine is; the program-level test sends over loopback.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess

import pytest

from agents.ai_access import ai_receiver
from agents.pacing import ProcessingBudget
from agents.sockets import receiving_socket
from agents.follower import FOLLOWER_TABLES
from agents.ai_access.formats import AI_DATA, AI_NACK
from tests.unit.ai_access.test_ai_agents import (SHORT, SHORT_FRAGMENTS, SHORT_TIMING, RowsKept,
                                       every_seventh, free_udp_port, transfer)
from controller import netns
from edgebed import protocol
from controller.control_server import ControlServer
from controller.core import ControllerCore
from controller.policies import create
from controller.view import NetworkView
from controller.config import ControllerConfig
from experiments.kinds.ai_access.emulation import access_responses, cell_figures, prediction_errors
from tests.conftest import ROOT
from tests.unit.test_media_agents import LOOPBACK, agent_argv, summary_of, start, table
from experiments.scenarios import load

MS = 1_000_000


def test_a_worker_drops_what_exceeds_its_budget_and_queue():
    # 1000 packets/s: one per ms. Ten arrive at once into a queue of 4: four are held, six
    # dropped; a millisecond later one has been processed and one more is taken.
    budget = ProcessingBudget(None, 1000, queue=4)
    taken = [budget.admit(0, 100) for _ in range(10)]
    assert taken[:4] == [MS, 2 * MS, 3 * MS, 4 * MS] and taken[4:] == [None] * 6
    assert budget.admit(MS, 100) == 5 * MS and budget.admit(MS, 100) is None
    assert budget.busy_ns == 5 * MS


def test_a_worker_without_a_budget_takes_everything_at_once():
    budget = ProcessingBudget(None, None, queue=1)
    assert [budget.admit(5, 100) for _ in range(3)] == [5, 5, 5] and budget.busy_ns == 0


def data(stream: int, unit: int, fragment: int, fragments: int, send_ns: int,
         payload: int = 100) -> bytes:
    return AI_DATA.pack(stream=stream, unit=unit, fragment=fragment, fragments=fragments,
                        length=payload, send_ns=send_ns) + bytes(payload)


class Reports:
    """Stands in for the load reporter: keeps what it was asked to send."""

    def __init__(self):
        self.sent: list[tuple[float, dict]] = []

    def tick(self, load, metrics) -> bool:
        self.sent.append((load, dict(metrics)))
        return True

    def close(self) -> dict:
        return {"sent": len(self.sent)}


def test_the_overloaded_receiver_loses_exactly_the_first_copies_over_its_budget():
    """Two ports share one worker of 1000 packets/s holding 5: twenty fragments a stream arrive
    0.1 ms apart, interleaved over the ports, so the worker takes the first five and then one a
    millisecond; every drop is a first copy lost in that stream's flow, and the report says
    what each port took and that the worker was busy."""
    params = ai_receiver.Params.model_validate({
        "ports": [0, 0], "nack_port": free_udp_port(), "budget_packets": 1000, "queue": 5,
        "period": 10, "send_window": 0.5})
    socks = [receiving_socket(0, bind_address=LOOPBACK) for _ in range(2)]
    agent = RowsKept()
    server = ai_receiver.AccessServer(agent, params, socks, Reports())
    start_ns = 1_000_000_000_000
    try:
        for index in range(40):
            stream = index % 2
            receiver = server.receivers[stream]
            message = data(stream, 0, index // 2, 20, start_ns)
            receiver.buffer[:len(message)] = message
            receiver.add(len(message), start_ns + index * MS // 10, (LOOPBACK, 9))
    finally:
        for sock in socks:
            sock.close()
    # 40 arrivals over 3.9 ms: 5 held at once, then one freed per ms (3 more): 8 taken.
    taken = sum(receiver.taken for receiver in server.receivers)
    dropped = sum(receiver.over_budget for receiver in server.receivers)
    assert (taken, dropped) == (8, 32)
    for receiver in server.receivers:
        [stream] = receiver.streams.values()
        assert stream.flow.lost() == receiver.over_budget - (
            20 - 1 - max(i for i, got in enumerate(stream.units[0].have) if got))
    # The report: per port what was taken at the paced rate and held, the worker's share.
    server._last = (start_ns, 0, [(0, 0, 0), (0, 0, 0)])
    server.report(start_ns + 10 * MS)
    [(load, metrics)] = server.reporter.sent
    ports = [receiver.port for receiver in server.receivers]
    wire_bits = (AI_DATA.header_size + 100 + 42) * 8
    for receiver, port in zip(server.receivers, ports):
        assert metrics[f"port.{port}.bw_in"] == pytest.approx(
            receiver.taken * wire_bits / 0.010 / 0.5)
        assert metrics[f"port.{port}.memory"] == receiver.taken * 100
    assert metrics["cpu"] == pytest.approx(8 * MS / (10 * MS))
    assert load == pytest.approx(sum(metrics[f"port.{port}.bw_in"] for port in ports))
    rows = [row for row in agent.rows if row[0] == "ai_load"]
    assert [(row[2], row[6], row[7]) for row in rows] == [
        (receiver.port, receiver.taken, receiver.over_budget) for receiver in server.receivers]


def every_streams_seventh():
    """A drop rule: the first copy of fragments 2, 9, ... of every stream's every unit."""
    seen: set[tuple[int, int, int]] = set()

    def drop(datagram: bytes) -> bool:
        header = AI_DATA.unpack(datagram)
        key = header["stream"], header["unit"], header["fragment"]
        first = key not in seen
        seen.add(key)
        return first and every_seventh(header["fragment"])

    return drop


def test_a_terminal_host_sends_several_flows_each_repaired_by_its_own_nacks(tmp_path):
    """Three flows from one terminal process to one receiver: each is its own flow at the
    receiver, each loses exactly the first copies dropped on the way, and the NACKs (one
    socket for all three, by stream id) bring every unit in whole."""
    sent, received = transfer(tmp_path, 6, {"streams": [4, 5, 6], "units": 2},
                              drop=every_streams_seventh())
    lost = sum(1 for fragment in range(SHORT_FRAGMENTS) if every_seventh(fragment))
    flows = {row["flow"]: row for row in table(tmp_path, "flows", "r", "ai_receiver")}
    assert sorted(flows) == ["ai-4", "ai-5", "ai-6"]
    assert all(int(flow["lost"]) == 2 * lost for flow in flows.values())
    rows = table(tmp_path, "ai_units", "r", "ai_receiver")
    assert sorted((row["stream"], row["unit"], row["complete"]) for row in rows) == [
        (str(stream), str(unit), "1") for stream in (4, 5, 6) for unit in (0, 1)]
    assert [flow["stream"] for flow in sent["streams"]] == [4, 5, 6]
    assert all(flow["retransmitted"] >= 2 * lost for flow in sent["streams"])
    assert sent["malformed"] == 0 and sent["refused"] == {}


def test_a_terminal_counts_nacks_for_streams_it_does_not_send_and_keeps_sending(tmp_path):
    """NACKs naming a stream the host does not send, or fragments its units do not have, are
    garbage: counted, and no retransmission follows from them."""
    nack_port = free_udp_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind((LOOPBACK, 0))
        terminal = start("ai_terminal", "t", tmp_path, {
            "to": LOOPBACK, "port": sink.getsockname()[1], "nack_port": nack_port,
            "streams": [1, 2], "units": 2} | SHORT)
        sink.settimeout(10)
        sink.recv(2048)  # it is sending
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            for garbage in (AI_NACK.pack(stream=9, unit=0, count=1) + b"\x00\x01",
                            AI_NACK.pack(stream=1, unit=0, count=1) + b"\xff\xff",
                            b"\x00" * 7):
                peer.sendto(garbage, (LOOPBACK, nack_port))
        sent = summary_of(terminal)
    assert sent["malformed"] == 3 and sent["retransmitted"] == 0
    assert sent["units"] == 4 and sent["sent"] == 4 * SHORT_FRAGMENTS
    assert SHORT_TIMING["period"] == SHORT["period"]


class AccessController:
    """ai_access's access through the control protocol on loopback: a real ControllerCore on
    topologies/ai_access/ai_access.yaml with the least-connections policy, answering joins as the
    controller app does (a decision, or the policy's rejection), without OpenFlow."""

    def __init__(self):
        self.core = ControllerCore(NetworkView.from_scenario(load(ROOT / "topologies" /
                                                                  "ai_access" / "ai_access.yaml")),
                                   create("ai_lc_capacity", {"flow_memory": 200000}))
        sock = netns.udp_socket("127.0.0.1", 0)
        self.address = "%s:%d" % sock.getsockname()
        self.server = ControlServer([sock], self.handle).start()

    def handle(self, message, reply, source):
        if message.type == "subscribe":
            reply(protocol.Ack(id=message.id))
        elif message.type == "join":
            request = self.core.request_for(message.node, message.service, message.demand,
                                            tuple(message.bitrates), message.flow, message.port)
            for rejection in self.core.place([request]).decision.rejections:
                reply(protocol.Rejected(id=message.id, flow=rejection.flow,
                                        reason=rejection.reason))
                return
            reply(self.core.decision_message(message.id, request.flow))


@pytest.fixture
def access_controller():
    controller = AccessController()
    yield controller
    controller.server.stop()


def terminal_through(controller: AccessController, out, params: dict) -> dict:
    """A terminal on t1 joining the service ``ai`` through ``controller``; its summary."""
    process = subprocess.Popen(
        agent_argv("ai_terminal", "t1", out, {"to": LOOPBACK, "service": "ai",
                                              "nack_port": free_udp_port(), "units": 1}
                   | SHORT | params),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "EDGEBED_CONTROLLER": controller.address})
    return summary_of(process)


def test_a_flow_larger_than_any_port_is_rejected_and_sends_nothing(access_controller, tmp_path):
    # 1 MB units over half a second: 16.5 Mbit/s, more than any port of the cluster (12 at most).
    sent = terminal_through(access_controller, tmp_path,
                            {"streams": [1, 2], "unit_bytes": 1_000_000, "period": 1.0})
    assert sent["sent"] == 0 and sent["units"] == 0
    assert sorted(sent["refused"]) == ["1", "2"]
    assert all("no access server has a port" in why for why in sent["refused"].values())
    # A refusal is an answer too: each join's response time, request to refusal, is measured.
    assert all(0 < flow["response_ms"] < 2000 for flow in sent["followed"].values())
    assert access_controller.core.flows == {}


def test_an_accepted_flow_is_told_its_server_and_receive_port(access_controller, tmp_path):
    sent = terminal_through(access_controller, tmp_path, {"streams": [1, 2, 3]})
    assert sent["refused"] == {} and sent["units"] == 3
    rows = table(tmp_path, "decisions_followed", "t1", "ai_terminal")
    placed = {flow: record.placement for flow, record in access_controller.core.flows.items()}
    assert sorted(row["flow"] for row in rows) == sorted(placed)
    # Least connections: one flow on each server, each told the port the policy chose.
    assert sorted(row["server"] for row in rows) == ["ar1", "ar2", "ar3"]
    for row in rows:
        assert json.loads(row["attributes"]) == {"port": placed[row["flow"]].attributes["port"]}
        # Each grant answered its own join: timed at the terminal, request to grant.
        assert 0 < float(row["response_ms"]) < 2000 and float(row["requested_s"]) <= float(
            row["time_s"])


def test_the_emulated_kind_takes_the_terminals_join_response_times(tmp_path):
    # decisions_followed as a run merges it: a terminal's granted join, the same flow's pushed
    # migration (no response time), and another agent's join (not a terminal's).
    columns = ("node", "agent", *FOLLOWER_TABLES["decisions_followed"][2:])
    rows = [("t1", "ai_terminal", "10.5", "t1/ai:4000", "1", "ar1", "", "False", "", "", "",
             "{}", "10.49", "12.250"),
            ("t1", "ai_terminal", "14.0", "t1/ai:4000", "2", "ar2", "", "True", "", "", "",
             "{}", "", ""),
            ("v1", "viewer", "11.0", "v1/live", "1", "e1", "", "False", "", "", "", "{}",
             "10.9", "3.0")]
    (tmp_path / "tables").mkdir()
    with open(tmp_path / "tables" / "decisions_followed.csv", "w", newline="") as stream:
        csv.writer(stream).writerows([columns, *rows])
    assert access_responses(tmp_path) == {"t1/ai:4000": 12.25}


def test_the_forecast_error_is_taken_against_the_next_measured_load_degree():
    # Alpha 0.5 on 0.2, 0.4, 0.6, 0.8 (by hand): forecasts 0.2, 0.4, 0.65 for the next three,
    # errors 0.2, 0.2, 0.15; the last value as forecast misses by 0.2 each time. A report
    # before the window feeds the smoothing but is not scored; a server's first report never.
    rows = [{"server": "a", "time": t, "degree": v} for t, v in enumerate([0.2, 0.4, 0.6, 0.8])]
    rows.append({"server": "b", "time": 3.5, "degree": 0.9})
    assert prediction_errors(rows, 0.5, 0, 10) == pytest.approx((0.55 / 3, 0.2))
    assert prediction_errors(rows, 0.5, 2, 10) == pytest.approx((0.35 / 2, 0.2))
    assert prediction_errors(rows[:1], 0.5, 0, 10) == (None, None)


def test_the_emulated_kind_gives_the_forecast_error_as_a_results_column(tmp_path):
    # A run directory holding only ar1's load reports, nothing received: bandwidth and memory
    # 0, so L_i is the CPU share over three (equal weights), 0.05, 0.1, 0.15, 0.2 at 3-6 s. By
    # hand, alpha 0.5: forecasts 0.05, 0.1, 0.1625 for the reports at 4, 5, 6 s (the window
    # from settle 4 s to a second before the end at 16 s), errors 0.05, 0.05, 0.0375; the last
    # value misses by 0.05 each time. The report at 3 s feeds the smoothing unscored, the one
    # at 15 s (past the window) is not scored however far off.
    view = NetworkView.from_scenario(load(ROOT / "topologies" / "ai_access" / "ai_access.yaml"))
    (tmp_path / "controller").mkdir()
    ControllerConfig(out=tmp_path / "controller", view=view.to_json(), policy="ai_lc_capacity",
                     policy_params={"alpha": 0.5}, control_port=1, loopback_control_port=2
                     ).write(tmp_path / "controller" / "config.json")
    (tmp_path / "tables").mkdir()
    with open(tmp_path / "tables" / "ai_load.csv", "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["node", "agent", "time_s", "port", "bw_in_bps", "memory_bytes", "cpu",
                         "received", "over_budget"])
        for time, cpu in ((3, 0.15), (4, 0.3), (5, 0.45), (6, 0.6), (15, 0.0)):
            for port in ("6100", "6102"):
                writer.writerow(["ar1", "ai_receiver", time, port, 0, 0, cpu, 0, 0])
    figures = cell_figures(tmp_path, {"timeline_origin_s": 0.0, "fidelity": {"ok": True}},
                           settle=4.0, duration=16.0)
    assert figures["prediction_error"] == pytest.approx(0.1375 / 3)
    assert figures["persistence_error"] == pytest.approx(0.05)
