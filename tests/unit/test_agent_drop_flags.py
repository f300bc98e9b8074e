"""What agents dropped on their own (the ``agent_drops`` table) in a run's fidelity verdict
(experiments.measurements): the causes nobody configured flag the run, a full send queue
behind a configured rate does not."""

import csv

from agents.agent import TABLES
from experiments import measurements


def drops(cause: str, packets: int, flow: str = "", port: str = "",
          node: str = "node1", agent: str = "edge_server") -> dict:
    return {"node": node, "agent": agent, "cause": cause, "flow": flow, "port": port,
            "packets": str(packets)}


def verdict(run_dir, rows: list[dict]) -> dict:
    """The fidelity verdict of a run whose agents wrote ``rows`` of ``agent_drops``."""
    (run_dir / "tables").mkdir()
    with open(run_dir / "tables" / "agent_drops.csv", "w", newline="") as stream:
        writer = csv.DictWriter(stream, TABLES["agent_drops"])
        writer.writeheader()
        writer.writerows(rows)
    return measurements.fidelity(run_dir, measurements.CpuMonitor())


def test_packets_after_the_cut_flag_the_run_with_the_node_and_streams(tmp_path):
    found = verdict(tmp_path, [drops("after_cut", 8, flow="stream-0"),
                               drops("after_cut", 4, flow="stream-1"),
                               drops("send_queue_full", 30, port="5004")])
    assert not found["ok"]
    assert found["flags"] == ["edge_server on node1 gave up frames whose packets still came: "
                              "12 packets after the cut (8 of stream-0, 4 of stream-1)"]


def test_a_full_receive_socket_flags_the_run_with_its_port():
    assert measurements.agent_drop_flags([
        drops("receive_buffer_full", 40, port="5004", node="r1", agent="edge_forwarder")]) == [
        "edge_forwarder on r1 did not read its receive socket in time: 40 datagrams dropped "
        "for a full buffer (40 on port 5004)"]


def test_nothing_dropped_and_full_send_queues_leave_the_verdict_clean(tmp_path):
    found = verdict(tmp_path, [drops("after_cut", 0, flow="stream-0"),
                               drops("receive_buffer_full", 0, port="5008"),
                               drops("send_queue_full", 30, port="5004")])
    assert found["ok"] and found["flags"] == []
