"""What agents dropped on their own (the ``agent_drops`` table) in a run's fidelity verdict
(experiments.measurements): a full receive or send socket flags the run; packets after a frame's
cut are counted, not flagged."""

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


def test_full_sockets_flag_the_run_and_packets_after_the_cut_do_not(tmp_path):
    found = verdict(tmp_path, [drops("receive_buffer_full", 40, port="5008"),
                               drops("after_cut", 8, flow="stream-0"),
                               drops("send_buffer_full", 30, port="5004")])
    assert not found["ok"]
    assert found["flags"] == ["edge_server on node1 did not read its receive socket in time: "
                              "40 datagrams dropped for a full buffer (40 on port 5008)",
                              "edge_server on node1 could not send 30 datagrams for a full send "
                              "buffer (30 on port 5004)"]


def test_a_full_receive_socket_flags_the_run_with_its_port():
    assert measurements.agent_drop_flags([
        drops("receive_buffer_full", 40, port="5004", node="r1", agent="edge_forwarder")]) == [
        "edge_forwarder on r1 did not read its receive socket in time: 40 datagrams dropped "
        "for a full buffer (40 on port 5004)"]


def test_nothing_flagged_dropped_leaves_the_verdict_clean(tmp_path):
    found = verdict(tmp_path, [drops("after_cut", 12, flow="stream-0"),
                               drops("receive_buffer_full", 0, port="5008"),
                               drops("send_buffer_full", 0, port="5004")])
    assert found["ok"] and found["flags"] == []
