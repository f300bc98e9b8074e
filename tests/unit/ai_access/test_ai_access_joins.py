"""A batch of simultaneous access requests (the paper's Table 3, emulated by
experiments/kinds/ai_access/joins.py): one agent asks for many flows at once
(:meth:`ControlClient.join_all`), the controller gathers the joins for the policy's
``join_window`` and decides the batch in one call of the access policy (ADGA's rounds of maximum
matching over the whole batch), and every join is answered once."""

from __future__ import annotations

import math
import socket
import threading

import pandas as pd
import pytest

from agents.control import ControlClient
from controller.control_server import ControlServer
from controller.core import ControllerCore
from controller.policies import create
from controller.policies.ai_access.access import adga, grouped_adga
from controller.policies.ai_access.resources import FlowDemand, Port, ServerLoad, ServerSpec
from controller.view import NetworkView
from edgebed import protocol
from experiments.kinds.ai_access.joins import response_remarks
from experiments.scenarios import load
from tests.conftest import ROOT

LOOPBACK = "127.0.0.1"
HANG_GUARD = 30.0
SCENARIO = ROOT / "topologies" / "ai_access" / "ai_joins.yaml"
MB = 1e6


def joins_core(policy: str) -> ControllerCore:
    view = NetworkView.from_scenario(load(str(SCENARIO)))
    return ControllerCore(view, create(policy, {"flow_memory": 8000, "join_window": 0.1}))


@pytest.mark.parametrize("policy", ["ai_lc_capacity", "ai_adga", "ai_adga_grouped"])
@pytest.mark.parametrize("batch", [40, 500, 600])
def test_a_batch_of_joins_is_decided_in_one_policy_call_each_once(policy, batch):
    core = joins_core(policy)
    demand = 68352.0  # the scenario's flow: 4 packets of 1000 bytes over half a second
    requests = [core.request_for("t1", "ai", demand, port=40000 + index)
                for index in range(batch)]
    outcome = core.place(requests, now=5.0)
    [trace] = core.take_traces()
    assert trace.kind == "place" and trace.requests == batch
    decided = [a.flow for a in outcome.decision.assignments] + [
        r.flow for r in outcome.decision.rejections]
    assert sorted(decided) == sorted(request.flow for request in requests)
    # The scenario's ports take 526 such flows: all of a batch that fits, no more.
    assert len(outcome.decision.assignments) == min(batch, 526)
    per_server = {name: sum(server == name for server in outcome.placed.values())
                  for name in ("ar1", "ar2", "ar3")}
    assert per_server["ar2"] <= 58  # its one 4 Mbit/s port


def test_the_papers_least_connections_decides_the_batch_in_one_call_beyond_capacity():
    core = joins_core("ai_lc")
    requests = [core.request_for("t1", "ai", 68352.0, port=40000 + index)
                for index in range(500)]
    outcome = core.place(requests, now=5.0)
    [trace] = core.take_traces()
    assert trace.requests == 500 and not outcome.decision.rejections
    # Fewest flows whatever the servers have left: a third each, ar2 far past its 58.
    per_server = sorted(sum(server == name for server in outcome.placed.values())
                        for name in ("ar1", "ar2", "ar3"))
    assert per_server == [166, 167, 167]


def server(name: str, *rates: float) -> ServerLoad:
    return ServerLoad.idle(ServerSpec(name, tuple(Port(f"p{i}", rate)
                                                  for i, rate in enumerate(rates)), 100 * MB))


def test_adga_decides_a_batch_in_rounds_of_one_flow_per_server_every_flow_once():
    servers = [server("a", 40e6), server("b", 20e6, 20e6), server("c", 40e6)]
    flows = [FlowDemand(f"f{index}", 68352.0, 8000.0) for index in range(300)]
    plain = adga(flows, servers)
    assert plain.rounds == math.ceil(300 / 3)  # room for all: every round matches 3
    assert sorted([*plain.placed, *plain.rejected]) == sorted(f.flow for f in flows)
    assert len(plain.granted) == len(plain.placed) == 300
    grouped = grouped_adga(flows, servers)
    # Groups of K = ceil(m / n): one round when every server takes its group.
    assert grouped.rounds < plain.rounds
    assert sorted([*grouped.placed, *grouped.rejected]) == sorted(f.flow for f in flows)


def test_drained_is_called_again_when_it_asks_though_nothing_arrives():
    calls = []
    again = threading.Event()

    def drained():
        calls.append(len(calls))
        if len(calls) == 3:
            again.set()
            return None
        return 0.01

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((LOOPBACK, 0))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        with ControlServer([sock], lambda message, reply, source: None, drained):
            sender.sendto(protocol.encode(protocol.Load(node="a", load=1.0, ts=0.0)),
                          sock.getsockname())
            assert again.wait(HANG_GUARD)
    sock.close()
    assert calls == [0, 1, 2]


def batch_controller(sock: socket.socket, batch: int, lose_first: set[int],
                     batches: list[list[int]]) -> None:
    """A controller on ``sock`` that gathers joins until ``batch`` distinct ones are there
    and then rejects each, in one pass; the first send of the joins whose flow number is in
    ``lose_first`` is lost on the way."""
    held: dict[int, tuple[protocol.Join, tuple]] = {}
    lost = set()
    sock.settimeout(HANG_GUARD)
    while len(held) < batch:
        data, source = sock.recvfrom(protocol.MAX_DATAGRAM)
        join = protocol.decode(data, protocol.TO_CONTROLLER)
        number = int(join.flow.rsplit("-", 1)[1])
        if number in lose_first and number not in lost:
            lost.add(number)
            continue
        held[number] = (join, source)
    batches.append(sorted(held))
    for join, source in held.values():
        sock.sendto(protocol.encode(protocol.Rejected(id=join.id, flow=join.flow,
                                                      reason="full")), source)


@pytest.mark.parametrize("lost", [set(), {3, 17}])
def test_join_all_sends_every_join_at_once_and_gets_each_answer_once(lost):
    batch, batches = 30, []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((LOOPBACK, 0))
        controller = threading.Thread(target=batch_controller,
                                      args=(sock, batch, lost, batches), daemon=True)
        controller.start()
        with ControlClient(sock.getsockname(), node="t1", timeout=0.2, tries=6) as client:
            answers = client.join_all([{"service": "ai", "flow": f"t1/ai-{number}",
                                        "port": number} for number in range(1, batch + 1)])
        controller.join(HANG_GUARD)
    assert [answer.reply.flow for answer in answers] == [f"t1/ai-{number}"
                                                         for number in range(1, batch + 1)]
    assert all(answer.error is None and answer.reply.type == "rejected"
               and answer.response_ns >= 0 for answer in answers)
    # Every join was in the one batch answered; the lost ones were sent again.
    assert batches == [list(range(1, batch + 1))]
    assert {number for number, answer in enumerate(answers, 1) if answer.sends > 1} >= lost


def joins_results(means: dict[tuple[int, str], list[float]]) -> pd.DataFrame:
    """Rows as results.csv holds them: one per repetition of (requests, policy)."""
    return pd.DataFrame([{"parameter": "joins", "value": str(requests), "policy": policy,
                          "repetition": repetition, "response_mean_ms": value}
                         for (requests, policy), values in means.items()
                         for repetition, value in enumerate(values)])


def test_the_remarks_say_what_the_rows_say_at_100_and_above_200_requests():
    results = joins_results({
        (100, "ai_adga"): [10.0, 11.0, 12.0], (100, "ai_adga_grouped"): [20.0, 21.0, 22.0],
        (200, "ai_adga"): [10.0, 11.0, 12.0], (200, "ai_adga_grouped"): [30.0, 31.0, 32.0],
        (300, "ai_adga"): [40.0, 41.0, 42.0], (300, "ai_adga_grouped"): [40.0, 46.0, 38.0],
        (300, "ai_lc"): [100.0, 110.0, 120.0]})
    lines = response_remarks(results)
    # 200 requests is neither the paper's 100 nor above 200; least connections ran at 300.
    assert len(lines) == 3
    at_100, at_300, least_connections = lines
    assert least_connections == (
        "300 requests: the paper's least connections 110.0 ± 24.8 ms against ADGA 41.0 ± 2.5 "
        "ms, 168.3% slower, beyond the intervals; as the paper's Table 3 has it")
    assert at_100.startswith("100 requests: improved ADGA 21.0 ± 2.5 ms against plain ADGA "
                             "11.0 ± 2.5 ms, 90.9% slower, beyond the intervals")
    assert at_100.endswith("as the paper's Table 3 has it")
    assert "41.3" in at_300 and "0.8% slower, within the intervals" in at_300
    # Not resolved: neither agreement nor its opposite, the paper's direction said beside it.
    assert at_300.endswith("; the paper's Table 3 has improved ADGA faster")
