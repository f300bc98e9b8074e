"""The iperf3 agent: its command lines, reading iperf3's JSON reports, and real iperf3 tests over
loopback (no root), one with a report far beyond the 64 KiB at which the PyPI wrapper hangs."""

from __future__ import annotations

import json
import socket

import pytest
from pydantic import ValidationError

from agents import iperf
from tests.unit.test_media_agents import LOOPBACK, listening_port, start, summary_of, table

PIPE_BUFFER = 64 * 1024


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


# Command lines and parameters.

def test_a_client_command_carries_every_option():
    params = iperf.Params.model_validate({
        "role": "client", "to": "10.0.0.2", "port": 5301, "protocol": "udp",
        "bandwidth": "20Mbps", "duration": "5s", "reverse": True, "omit": 1, "interval": "500ms",
        "streams": 4})
    assert params.command() == [
        "iperf3", "--json", "--port", "5301", "--interval", "0.5", "--client", "10.0.0.2",
        "--time", "5", "--parallel", "4", "--udp", "--bitrate", "20000000", "--reverse",
        "--omit", "1"]


@pytest.mark.parametrize("once, tail", [(True, ["--server", "--one-off"]),
                                        (False, ["--server"])])
def test_a_server_serves_once_or_until_stopped(once, tail):
    params = iperf.Params.model_validate({"role": "server", "once": once})
    assert params.command() == ["iperf3", "--json", "--port", "5201", "--interval", "1"] + tail


@pytest.mark.parametrize("values", [
    {"role": "client"},  # no server to go to
    {"role": "server", "to": "10.0.0.2"},
    {"role": "client", "to": "10.0.0.2", "duration": "2.5s"},  # iperf3 would read 2
    {"role": "client", "to": "10.0.0.2", "duration": "500ms"},  # iperf3 would read 0: forever
    {"role": "client", "to": "10.0.0.2", "omit": 0.5},
    {"role": "client", "to": "10.0.0.2", "interval": "50ms"},  # below iperf3's minimum
    {"role": "client", "to": "10.0.0.2", "protocol": "sctp"},
], ids=["client without to", "server with to", "fractional duration", "sub-second duration",
        "fractional omit", "short interval", "unknown protocol"])
def test_parameters_iperf3_would_misread_are_refused(values):
    with pytest.raises(ValidationError):
        iperf.Params.model_validate(values)


# Reading reports.

def test_reports_reads_one_report_per_test_and_drops_a_cut_tail():
    first, second = {"end": {"sum_sent": {"bytes": 1}}}, {"end": {}, "error": "interrupt"}
    text = json.dumps(first, indent=1) + "\n" + json.dumps(second, indent="\t") + "\n"
    assert iperf.reports(text) == [first, second]
    assert iperf.reports(text + '{"start": {"connect') == [first, second]
    assert iperf.reports("") == [] and iperf.reports("\n  \n") == []


# Real tests over loopback.

def iperf_test(out, client_params: dict) -> tuple[dict, dict]:
    """A one-off server and a client with ``client_params`` on a free loopback port; (client
    summary, server summary)."""
    port = free_tcp_port()
    server = start("iperf", "s", out, {"role": "server", "port": port})
    assert listening_port(server) == port
    client = start("iperf", "c", out, {"role": "client", "to": LOOPBACK, "port": port}
                   | client_params)
    return summary_of(client), summary_of(server)  # the server ends after its one test


def test_tcp_test_gives_goodput_and_retransmits_on_both_sides(tmp_path):
    client, server = iperf_test(tmp_path, {"duration": 1})
    assert client["tests"] == server["tests"] == 1 and not client["failed"]
    for node in ("c", "s"):
        rows = {row["side"]: row for row in table(tmp_path, "iperf", node, "iperf")}
        assert set(rows) == {"sent", "received"}
        assert rows["received"]["protocol"] == "tcp" and float(rows["received"]["bytes"]) > 0
        assert rows["received"]["jitter_ms"] == rows["received"]["lost_percent"] == ""
    client_rows = {row["side"]: row for row in table(tmp_path, "iperf", "c", "iperf")}
    assert client_rows["sent"]["retransmits"] != ""  # the sender counts them
    assert len(table(tmp_path, "iperf_intervals", "c", "iperf")) == client["last"]["intervals"]


def test_udp_test_gives_jitter_and_loss_on_the_receiving_side(tmp_path):
    client, _ = iperf_test(tmp_path, {"duration": 1, "protocol": "udp", "bandwidth": "10Mbps"})
    rows = {row["side"]: row for row in table(tmp_path, "iperf", "c", "iperf")}
    assert rows["received"]["protocol"] == "udp"
    assert rows["received"]["jitter_ms"] != "" and rows["received"]["lost_percent"] != ""
    assert rows["sent"]["jitter_ms"] == rows["sent"]["lost_percent"] == ""
    assert client["last"]["received"]["lost_percent"] is not None


def test_a_report_beyond_the_pipe_buffer_is_read_whole(tmp_path):
    # 8 streams reported every 0.1 s for 3 s: about 100 KB of JSON from the client.
    client, _ = iperf_test(tmp_path, {"duration": 3, "interval": "100ms", "streams": 8})
    assert client["output_bytes"] > PIPE_BUFFER and not client["failed"]
    intervals = table(tmp_path, "iperf_intervals", "c", "iperf")
    assert len(intervals) == client["last"]["intervals"]
    # Every interval read, none cut off: they follow each other from 0 to the end of the test
    # as iperf3's own clock and its end report have it (3 s or, when a busy machine makes
    # iperf3 end late, a little more), about 30 of them (fewer when it reports late).
    assert float(intervals[0]["start_s"]) == 0
    assert all(float(earlier["end_s"]) == pytest.approx(float(later["start_s"]), abs=1e-3)
               for earlier, later in zip(intervals, intervals[1:]))
    sent = {row["side"]: row for row in table(tmp_path, "iperf", "c", "iperf")}["sent"]
    assert float(intervals[-1]["end_s"]) == pytest.approx(float(sent["seconds"]), abs=1e-3)
    assert float(sent["seconds"]) >= 3.0 - 1e-3
    assert client["last"]["received"]["bytes"] > 0


def test_sigterm_stops_the_server_and_its_iperf3(tmp_path):
    port = free_tcp_port()
    server = start("iperf", "s", tmp_path, {"role": "server", "port": port, "once": False})
    listening_port(server)
    summary = summary_of(server, stop=True)
    assert summary["stopped"] and not summary["failed"] and summary["tests"] == 0
    assert not iperf.tcp_listening(port)  # iperf3 is gone with its socket


def test_a_client_without_a_server_fails_with_iperf3s_error(tmp_path):
    client = start("iperf", "c", tmp_path, {"role": "client", "to": LOOPBACK,
                                             "port": free_tcp_port(), "duration": 1})
    output, _ = client.communicate(timeout=60)
    summary = json.loads(output.splitlines()[-1])
    assert client.returncode == 1 and summary["failed"] and summary["tests"] == 0
    assert "connect" in summary["errors"][0]
