"""The compiled send engine (agents/send_engine.c) behind a paced agent: which sender runs, the
engine's own process, stopping, and the lateness it hands back. What it sends (formats,
sequence numbers, send stamps, rates, GOP restarts) is checked by the media agents' tests,
run with each sender (the ``send_engine`` fixture)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from agents import send_engine
from tests.conftest import ROOT
from tests.unit.test_media_agents import (HANG_GUARD_S, LOOPBACK, agent_argv, start, summary_of,
                                          table)


def test_without_a_built_engine_the_agent_sends_from_python_and_says_so(monkeypatch, capsys,
                                                                        tmp_path):
    monkeypatch.delenv(send_engine.ENGINE_KEY, raising=False)
    monkeypatch.setattr(send_engine, "BUILT_ENGINE", tmp_path / "edgebed-send-engine")
    assert send_engine.engine_binary("streamer") is None
    assert "streamer: the compiled send engine is not built" in capsys.readouterr().err
    monkeypatch.setenv(send_engine.ENGINE_KEY, send_engine.PYTHON)
    assert send_engine.engine_binary("streamer") is None
    assert capsys.readouterr().err == ""  # asked for, not a fallback
    monkeypatch.setenv(send_engine.ENGINE_KEY, str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="no such engine"):
        send_engine.engine_binary("streamer")


def children(pid: int) -> list[int]:
    return [int(child) for child in
            Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_the_engine_sends_in_a_process_of_its_own_and_stops_with_the_agent(
        tmp_path, monkeypatch, compiled_send_engine):
    monkeypatch.setenv(send_engine.ENGINE_KEY, compiled_send_engine)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind((LOOPBACK, 0))
        sink.settimeout(5)
        sender = start("streamer", "s", tmp_path, {"to": LOOPBACK, "port": sink.getsockname()[1],
                                                   "bitrate": "1Mbps"})
        sink.recv(2048)  # it sends: the engine runs
        [engine] = children(sender.pid)
        assert os.readlink(f"/proc/{engine}/exe") == compiled_send_engine
        time.sleep(0.3)
        sent = summary_of(sender, stop=True)
    assert not Path(f"/proc/{engine}").exists()  # ended, and reaped by the agent
    assert sent["packets"] > 0 and sent["send_errors"] == 0
    assert sent["frames"] == pytest.approx(sent["duration_s"] * 30, abs=2)
    lateness = sent["lateness"]
    assert lateness["packets"] == sent["packets"]
    assert 0 <= lateness["late_p50_us"] <= lateness["late_p99_us"] <= lateness["late_max_us"]
    [row] = table(tmp_path, "sender_lateness", "s", "streamer")
    assert (row["flow"], int(row["packets"])) == ("stream-0", sent["packets"])
    [row] = table(tmp_path, "sent", "s", "streamer")
    assert (int(row["datagrams"]), int(row["send_errors"])) == (sent["packets"], 0)


def test_an_agent_stopped_with_its_process_group_still_reports(tmp_path, monkeypatch,
                                                               compiled_send_engine):
    """The runner stops an agent's whole process group, the engine with it: the engine sends
    no more and hands back its figures, and the agent writes its tables."""
    monkeypatch.setenv(send_engine.ENGINE_KEY, compiled_send_engine)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind((LOOPBACK, 0))
        sink.settimeout(5)
        sender = subprocess.Popen(
            agent_argv("streamer", "s", tmp_path, {"to": LOOPBACK, "bitrate": "1Mbps",
                                                   "port": sink.getsockname()[1]}),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            process_group=0)
        sink.recv(2048)
        time.sleep(0.3)
        os.killpg(sender.pid, signal.SIGTERM)
        output, errors = sender.communicate(timeout=HANG_GUARD_S)
    assert sender.returncode == 0, errors
    assert '"lateness": {"packets": ' in output
    assert table(tmp_path, "sender_lateness", "s", "streamer")
