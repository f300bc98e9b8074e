"""The UDP probe's payload, figures and robustness, without root (loopback only)."""

from __future__ import annotations

import math
import random
import socket
import threading
import time

import pytest

from agents import pacing, probe

MS = 1_000_000  # nanoseconds


def test_payload_round_trips_and_has_the_documented_layout():
    payload = probe.encode(flow=7, sequence=2**40 + 5, send_ns=1_700_000_000_123_456_789,
                           size=100)
    assert len(payload) == 100
    assert payload[:4] == b"EBPR"
    assert payload[4:8] == (7).to_bytes(4, "big")
    assert payload[8:16] == (2**40 + 5).to_bytes(8, "big")
    assert payload[16:24] == (1_700_000_000_123_456_789).to_bytes(8, "big")
    assert payload[24:] == bytes(76)
    assert probe.decode(payload) == probe.ProbeHeader(7, 2**40 + 5, 1_700_000_000_123_456_789)


@pytest.mark.parametrize("size", [probe.HEADER_SIZE - 1, probe.MAX_SIZE + 1])
def test_payload_sizes_outside_udp_limits_are_refused(size):
    with pytest.raises(ValueError):
        probe.encode(0, 0, 0, size)


@pytest.mark.parametrize("payload", [b"", b"EBPR" + bytes(19), b"XBPR" + bytes(20)])
def test_decode_rejects_short_payloads_and_wrong_magic(payload):
    assert probe.decode(payload) is None


# Arrival order; sequences 0..7 were sent. 4, 6 and 7 are lost, 2 arrives after 3 (reordered),
# 3 arrives twice (one duplicate). One-way delays in ms: 1, 2, 1, 13, 4, 3.
RECORDS = [
    (0, 0 * MS, 1 * MS),
    (1, 10 * MS, 12 * MS),
    (3, 30 * MS, 31 * MS),
    (2, 20 * MS, 33 * MS),
    (3, 30 * MS, 34 * MS),
    (5, 50 * MS, 53 * MS),
]


def test_summarize_counts_loss_duplicates_and_reordering_against_sent():
    summary = probe.summarize(RECORDS, sent=8)
    assert summary["received"] == 6
    assert summary["unique"] == 5  # 0, 1, 2, 3, 5
    assert summary["lost"] == 3  # 8 - 5
    assert summary["loss_fraction"] == 3 / 8
    assert summary["duplicates"] == 1
    assert summary["reordered"] == 1  # the copy of 3 is a duplicate, not a reordering


def test_summarize_without_sent_counts_gaps_below_the_highest_sequence():
    summary = probe.summarize(RECORDS)
    assert summary["lost"] == 1  # sequences 0..5 expected, 4 missing; 6 and 7 go unnoticed
    assert summary["loss_fraction"] == 1 / 6


def test_summarize_delay_statistics():
    delay = probe.summarize(RECORDS, sent=8)["delay_ms"]
    # Sorted delays: 1, 1, 2, 3, 4, 13.
    assert delay["mean"] == pytest.approx(24 / 6)
    assert delay["p50"] == pytest.approx(2.5)  # rank 2.5: halfway between 2 and 3
    assert delay["p99"] == pytest.approx(4 + 0.95 * 9)  # rank 4.95: between 4 and 13
    assert delay["min"] == pytest.approx(1)
    assert delay["max"] == pytest.approx(13)
    # Deviations from 4: -3, -3, -2, -1, 0, 9; squares sum to 104.
    assert delay["std"] == pytest.approx(math.sqrt(104 / 6))


def test_summarize_jitter_follows_rfc_3550_over_arrivals():
    # Transit differences of consecutive arrivals: 1, -1, 12, -9, -1 ms.
    expected = 0.0
    for difference in (1, 1, 12, 9, 1):
        expected += (difference - expected) / 16
    assert probe.summarize(RECORDS, sent=8)["jitter_ms"] == pytest.approx(expected)


def test_rfc_3550_jitter_on_a_hand_computed_example():
    # Transit times 10, 12, 10, 12 ms: |D| is 2 ms each time.
    # J1 = 2/16 = 0.125; J2 = 0.125 + 1.875/16 = 0.2421875; J3 = 0.2421875 + 1.7578125/16.
    jitter = probe.interarrival_jitter_ns([10 * MS, 12 * MS, 10 * MS, 12 * MS])
    assert jitter / MS == pytest.approx(0.35205078125)


def test_summarize_with_more_arrivals_than_sent_reports_negative_loss_without_interval():
    summary = probe.summarize(RECORDS, sent=4)
    assert summary["lost"] == -1 and summary["loss_interval_99"] is None


def test_summarize_of_nothing_received():
    summary = probe.summarize([], sent=10)
    assert summary["lost"] == 10
    assert summary["loss_fraction"] == 1.0
    assert summary["delay_ms"] is None and summary["jitter_ms"] is None


def test_wilson_interval_on_known_cases():
    z = 2.5758293035489  # two-sided 99% normal quantile
    # No losses: the interval is [0, z^2 / (n + z^2)].
    low, high = probe.loss_interval(0, 1000)
    assert low == 0.0
    assert high == pytest.approx(z**2 / (1000 + z**2))
    # 100 of 1000: centre (0.1 + z^2/2000) / (1 + z^2/1000) = 0.1026365,
    # half width z / (1 + z^2/1000) * sqrt(0.09/1000 + z^2/4e6) = 2.5588517 * 0.0095739.
    low, high = probe.loss_interval(100, 1000)
    assert low == pytest.approx(0.078138, abs=1e-6)
    assert high == pytest.approx(0.127135, abs=1e-6)
    # And it is symmetric in loss and delivery.
    assert probe.loss_interval(900, 1000) == pytest.approx((1 - high, 1 - low))


class ThreadedReceiver:
    """A :class:`probe.Receiver` on loopback running in a thread of the test."""

    def __init__(self, **options):
        self.receiver = probe.Receiver(port=0, bind_address="127.0.0.1", **options)
        self.summary = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        self.summary = self.receiver.run()

    def join(self) -> dict:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        return self.summary


def test_receiver_counts_and_survives_garbage():
    receiver = ThreadedReceiver(duration_s=20, expect=100)
    generator = random.Random(1)
    garbage = [b"", b"EBPR" + bytes(19), b"XBPR" + bytes(60)]
    while len(garbage) < 1000:
        datagram = generator.randbytes(generator.randrange(1, 200))
        if not datagram.startswith(probe.MAGIC):
            garbage.append(datagram)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for index, datagram in enumerate(garbage):
            sock.sendto(datagram, ("127.0.0.1", receiver.receiver.port))
            if index % 50 == 49:
                # Without root the receive buffer is only net.core.rmem_max: let it drain.
                time.sleep(0.002)
        sock.sendto(probe.encode(flow=9, sequence=0, send_ns=time.time_ns()),
                    ("127.0.0.1", receiver.receiver.port))
    sent = probe.Sender("127.0.0.1", receiver.receiver.port, rate_pps=2000, count=100).run()
    summary = receiver.join()

    assert sent["sent"] == 100
    assert summary["datagrams"] == 1000 + 1 + 100
    assert summary["not_probe"] == 1000
    assert summary["other_flow"] == 1
    assert summary["received"] == summary["unique"] == 100
    assert summary["lost"] == 0 and summary["duplicates"] == 0
    assert summary["stopped"] == "expected packets arrived"
    assert 0 <= summary["delay_ms"]["min"] <= summary["delay_ms"]["max"]


def test_receiver_stops_when_asked():
    receiver = ThreadedReceiver(duration_s=60)
    receiver.receiver.stop()
    summary = receiver.join()
    assert summary["stopped"] == "stop requested"
    assert summary["received"] == 0 and summary["lost"] == 0


def test_the_receiver_counts_what_its_own_full_buffer_dropped():
    """Datagrams its socket dropped (the receiver did not keep up) are told apart from those the
    path lost: the socket's count, the rest reached it."""
    receiver = probe.Receiver(port=0, duration_s=0.5, expect=2000)
    # A small buffer and nobody reading yet: the kernel keeps a few and drops the rest.
    receiver._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for sequence in range(2000):
            sock.sendto(probe.encode(flow=0, sequence=sequence, send_ns=time.time_ns(),
                                     size=1000), ("127.0.0.1", receiver.port))
    summary = receiver.run()
    assert summary["socket_drops"] > 0
    assert summary["socket_drops"] + summary["unique"] == 2000 == summary["lost"] + summary["unique"]


def test_a_pacer_with_a_quantum_sleeps_a_quantum_at_least_and_is_never_early(monkeypatch):
    """The quantum pacer does not spin: each wait that has a deadline ahead sleeps at least a
    quantum, so packets 20 us apart go out a few per wake-up, none before its deadline."""
    sleeps = []
    real_sleep = time.sleep

    def recorded(seconds):
        sleeps.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(pacing.clock, "sleep", recorded)
    pacer = pacing.Pacer(quantum_ns=200_000)
    start = time.monotonic_ns() + MS
    deadlines = [start + index * 20_000 for index in range(500)]  # 50k/s for 10 ms
    for deadline in deadlines:
        pacer.wait_until(deadline)
        assert time.monotonic_ns() >= deadline
    assert sleeps and min(sleeps) >= 200e-6
    # 10 ms of deadlines, one wake-up per 0.2 ms quantum at most (the first waits for the start).
    assert len(sleeps) <= 10 / 0.2 + 1
    assert len(pacer.lateness_ns) == len(deadlines) and min(pacer.lateness_ns) >= 0


def test_a_sender_with_a_quantum_keeps_its_rate():
    # A quarter of the rate a Python sender and receiver sharing one interpreter carried on
    # a loaded machine (measured: 7,900 packets/s), so what is tested is the schedule, not the CPU.
    receiver = ThreadedReceiver(duration_s=20, expect=1000)
    sent = probe.Sender("127.0.0.1", receiver.receiver.port, rate_pps=2_000, count=1000,
                        quantum_us=2_500).run()
    summary = receiver.join()
    assert sent["sent"] == 1000 and summary["unique"] == 1000
    # Bursts of about five a wake-up, but the schedule is absolute: the mean rate holds (5 %
    # of the 0.5 s is a 25 ms late last wake-up on a loaded machine).
    assert sent["rate_pps"] == pytest.approx(2_000, rel=0.05)
