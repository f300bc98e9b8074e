"""Every listening agent survives hostile input: 10,000 fuzzed datagrams (Scapy fuzz() of every
edgebed message, truncations, random bytes) at each port it listens on, then still exits
cleanly with its tables written. Loopback only."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents import catalog
from agents.protocols import fuzzed_datagrams
from tests.conftest import ROOT

DATAGRAMS = 10_000

# agent, its parameters (node references already as addresses), the ports it listens on
LISTENERS = [
    ("viewer", {"port": 47001}, [47001]),
    ("chat_collector", {"port": 47002}, [47002]),
    ("edge_forwarder", {"port": 47003, "to": ["127.0.0.1"], "to_port": 47999}, [47003]),
    ("ai_receiver", {"port": 47004}, [47004]),
    ("ai_terminal", {"to": "127.0.0.1", "port": 47998, "nack_port": 47005, "unit_bytes": 7110},
     [47005]),
    ("request_server", {"port": 47006}, [47006]),
    # Fetches name where their item goes: the DC serves its content nodes' only (127.0.0.2
    # here), so no fuzzed fetch makes it send anywhere.
    ("bloom_cdn_dc", {"port": 47007, "nodes": ["127.0.0.2"]}, [47007]),
    # The fuzzer sends from 127.0.0.1, the center's own address: nothing is answered.
    ("dispatch_center", {"port": 47008, "centers": ["127.0.0.1", "127.0.0.2"],
                         "ingest": ["127.0.0.1", "127.0.0.2"]}, [47008]),
]


def receive_queues(port: int) -> list[int]:
    """The bytes waiting in the receive queue of each socket of this machine bound to UDP
    ``port`` (none bound: empty)."""
    queues = []
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                queues.append(int(fields[4].split(":")[1], 16))
    return queues


def bound(port: int) -> bool:
    """Some socket of this machine is bound to UDP ``port``."""
    return bool(receive_queues(port))


def drained(ports: list[int], timeout_s: float = 30.0) -> bool:
    """Wait until the agent has read everything sent to its ports: on a loaded machine it may
    be scheduled long after the sender finished, and stopped before, it would read nothing."""
    deadline = time.monotonic() + timeout_s
    while any(any(receive_queues(port)) for port in ports):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("agent, params, ports", LISTENERS, ids=[item[0] for item in LISTENERS])
def test_listening_agent_survives_fuzzing(agent, params, ports, tmp_path):
    if agent not in catalog.available():
        pytest.fail(f"agent {agent} is missing")
    process = subprocess.Popen(
        [sys.executable, "-m", catalog.module_name(agent), "--node", "fuzzed", "--out",
         str(tmp_path), "--params", json.dumps(params)], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            if all(bound(port) for port in ports) or process.poll() is not None:
                break
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for port in ports:
                for index, datagram in enumerate(fuzzed_datagrams(DATAGRAMS, seed=port)):
                    sender.sendto(datagram, ("127.0.0.1", port))
                    if index % 500 == 0:
                        time.sleep(0.001)  # a burst larger than the receive buffer is not fuzz
        assert drained(ports), f"{agent} left fuzzed datagrams unread for 30 s"
        time.sleep(0.5)
        assert process.poll() is None, f"{agent} died under fuzzing: {process.communicate()}"
    finally:
        if process.poll() is None:
            process.terminate()
        output, errors = process.communicate(timeout=30)
    assert process.returncode == 0, errors
    summary = json.loads(output.strip().splitlines()[-1])
    assert summary["agent"] == agent
    malformed = tmp_path / "records" / "malformed" / f"fuzzed-{agent}.csv"
    assert malformed.exists(), f"{agent} counted no malformed datagrams"
    rows = malformed.read_text().splitlines()[1:]
    assert sum(int(row.split(",")[3]) for row in rows) > 0
