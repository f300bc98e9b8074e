"""The UDP probe between two network namespaces joined by a veth pair.

Each test gets two throwaway namespaces named ``ebp<3 hex digits>-snd`` and ``-rcv``; the veth
ends are created directly inside them, so deleting the namespaces removes everything. The
probe runs as it does in a run: ``ip netns exec <namespace> python -m agents.probe ...``.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0,
                                 reason="creates network namespaces and veth links: needs root")]

SENDER_IP, RECEIVER_IP = "192.0.2.1", "192.0.2.2"  # TEST-NET-1, never routed anywhere
SENDER_MAC, RECEIVER_MAC = "02:eb:c0:00:02:01", "02:eb:c0:00:02:02"
PORT = 47000


def ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class VethPair:
    """Two namespaces, each holding one end of a veth pair named after it."""

    prefix: str

    @property
    def sender(self) -> str:
        return f"{self.prefix}-snd"

    @property
    def receiver(self) -> str:
        return f"{self.prefix}-rcv"

    def probe(self, namespace: str, *arguments: str) -> list[str]:
        return ["ip", "netns", "exec", namespace, sys.executable, "-m", "agents.probe",
                *arguments]


@pytest.fixture
def veth_pair(request) -> VethPair:
    pair = VethPair(f"ebp{secrets.token_hex(2)[:3]}")
    created = []

    def remove_what_was_created():
        for namespace in created:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        remaining = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        assert pair.prefix not in remaining.stdout

    request.addfinalizer(remove_what_was_created)
    for namespace in (pair.sender, pair.receiver):
        ip("netns", "add", namespace)
        created.append(namespace)
    ip("link", "add", pair.sender, "netns", pair.sender, "address", SENDER_MAC, "type", "veth",
       "peer", "name", pair.receiver, "netns", pair.receiver, "address", RECEIVER_MAC)
    for namespace, address, peer_address, peer_mac in (
            (pair.sender, SENDER_IP, RECEIVER_IP, RECEIVER_MAC),
            (pair.receiver, RECEIVER_IP, SENDER_IP, SENDER_MAC)):
        ip("-n", namespace, "addr", "add", f"{address}/30", "dev", namespace)
        ip("-n", namespace, "link", "set", namespace, "up")
        # Permanent neighbours: no ARP, whose frames the loss filter would drop too.
        ip("-n", namespace, "neigh", "add", peer_address, "lladdr", peer_mac, "dev", namespace,
           "nud", "permanent")
    return pair


def add_random_loss(namespace: str, device: str, loss: float) -> None:
    """Drop each frame leaving ``device`` with probability ``loss``: a classic BPF program on
    clsact egress that loads a random u32 and returns TC_ACT_STOLEN (4, a silent drop) below
    loss * 2^32, TC_ACT_UNSPEC (-1, carry on) otherwise."""
    threshold = int(loss * 2**32)
    subprocess.run(["tc", "-n", namespace, "qdisc", "add", "dev", device, "clsact"], check=True)
    subprocess.run(["tc", "-n", namespace, "filter", "add", "dev", device, "egress", "bpf", "da",
                    "bytecode", f"4,32 0 0 4294963256,53 1 0 {threshold},6 0 0 4,"
                                "6 0 0 4294967295,"], check=True)


def probe_run(pair: VethPair, directory: Path, count: int, rate: float,
              size: int = 64) -> tuple[dict, dict]:
    """Receive in one namespace while the other sends; returns both summaries.

    The receiver stops by itself once all ``count`` packets arrived; when some are lost it is
    stopped with SIGTERM after the sender finished, and still writes its summary."""
    receiver_output = directory / "receiver.json"
    sender_output = directory / "sender.json"
    allowed_s = (count / rate if rate else 10) + 60
    receiver = subprocess.Popen(
        pair.probe(pair.receiver, "receive", "--port", str(PORT), "--duration", str(allowed_s),
                   "--expect", str(count), "--output", str(receiver_output),
                   "--records", str(directory / "records.csv")),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ready = receiver.stderr.readline()
        assert ready.startswith("listening"), ready + receiver.stderr.read()
        sender = subprocess.run(
            pair.probe(pair.sender, "send", "--to", f"{RECEIVER_IP}:{PORT}", "--rate", str(rate),
                       "--count", str(count), "--size", str(size),
                       "--output", str(sender_output)),
            cwd=ROOT, capture_output=True, text=True, timeout=allowed_s)
        assert sender.returncode == 0, sender.stderr
        try:
            receiver.wait(timeout=2)
        except subprocess.TimeoutExpired:
            receiver.send_signal(signal.SIGTERM)
            receiver.wait(timeout=10)
        assert receiver.returncode == 0, receiver.stderr.read()
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
        receiver.stderr.close()
    return json.loads(sender_output.read_text()), json.loads(receiver_output.read_text())


def test_clean_link_delivers_every_packet_at_the_requested_rate(veth_pair, tmp_path):
    sent, received = probe_run(veth_pair, tmp_path, count=5000, rate=1000)

    assert sent["sent"] == 5000 and sent["send_errors"] == 0
    # The sender's span runs from its first send to its last, each on the schedule (4.999 s
    # apart) plus its own counted lateness: the two differ by at most the latest of them.
    late_s = sent["lateness_us"]["max"] / 1e6
    assert abs(sent["duration_s"] - 4999 / 1000) <= late_s + 1e-9
    assert sent["rate_pps"] == pytest.approx(4999 / sent["duration_s"])
    assert received["received"] == received["unique"] == 5000
    assert received["lost"] == received["duplicates"] == received["reordered"] == 0
    assert received["not_probe"] == 0
    assert 0 < received["delay_ms"]["min"] and received["delay_ms"]["mean"] < 1
    with open(tmp_path / "records.csv") as stream:
        records = list(csv.DictReader(stream))
    assert [int(row["seq"]) for row in records] == list(range(5000))
    assert all(int(row["recv_ns"]) > int(row["send_ns"]) for row in records)
    # What arrived spans what was sent (by the packets' own send stamps), give or take how much
    # the first and last packets' measured delays differ.
    first, last = records[0], records[-1]
    sent_span = int(last["send_ns"]) - int(first["send_ns"])
    received_span = int(last["recv_ns"]) - int(first["recv_ns"])
    delays = received["delay_ms"]
    assert abs(received_span - sent_span) <= (delays["max"] - delays["min"]) * 1e6 + 1
    print(f"\nclean veth, 5000 at 1000 pps: rate {sent['rate_pps']:.3f} pps, lateness "
          f"{sent['lateness_us']}, delay {received['delay_ms']}, "
          f"jitter {received['jitter_ms']:.4f} ms")


def test_random_loss_is_measured_within_its_binomial_interval(veth_pair, tmp_path):
    add_random_loss(veth_pair.sender, veth_pair.sender, 0.10)
    # 10% inside the Wilson interval of the measurement is the same as the measurement inside
    # the 99% binomial range around 10%: one run misses it once in a hundred by design, so a
    # miss gets a second, independent run (a right loss rate misses both once in 10,000).
    for attempt in range(2):
        directory = tmp_path / f"attempt{attempt}"
        directory.mkdir()
        sent, received = probe_run(veth_pair, directory, count=10000, rate=5000)
        low, high = received["loss_interval_99"]
        if low <= 0.10 <= high:
            break

    assert sent["sent"] == 10000 and sent["send_errors"] == 0
    assert received["duplicates"] == received["reordered"] == 0
    assert low <= 0.10 <= high, received
    print(f"\n10% BPF loss: measured {received['lost']}/10000 = {received['loss_fraction']:.4f}, "
          f"99% interval [{low:.4f}, {high:.4f}]")


def test_report_sender_and_receiver_capacity(veth_pair, tmp_path):
    """Figures for the record (printed, not asserted): the sender's top rate with 64-byte
    payloads, and whether the receiver keeps up with 50k packets/s."""
    flat_out, flat_out_received = probe_run(veth_pair, tmp_path, count=200_000, rate=0)
    paced, paced_received = probe_run(veth_pair, tmp_path, count=250_000, rate=50_000)

    assert flat_out["sent"] + flat_out["send_errors"] == 200_000
    assert paced["sent"] + paced["send_errors"] == 250_000
    print(f"\n--rate 0, 64 B: sender {flat_out['rate_pps']:.0f} pps, receiver got "
          f"{flat_out_received['received']}/{flat_out['sent']} "
          f"(loss {flat_out_received['loss_fraction']:.4f})")
    print(f"--rate 50000, 250000 packets: sender {paced['rate_pps']:.1f} pps, lateness "
          f"{paced['lateness_us']}; receiver lost {paced_received['lost']} "
          f"({paced_received['loss_fraction']:.5f}), delay {paced_received['delay_ms']}")
