"""A wake-up of a media node reads every datagram already waiting (agents.sockets.burst), up
to a cap and until a departure comes due: the helper on a loopback socket, and the edge
forwarder's and edge server's own wake-ups, each watched through the bursts it reads. No
timing is assumed: whatever was sent over loopback is on the socket before the reading."""

from __future__ import annotations

import socket
import time

import pytest

from agents import edge_forwarder, edge_server, sockets
from agents.formats import MEDIA
from agents.media import MediaMeter
from agents.sockets import BURST_DATAGRAMS, DATAGRAM_BUFFER, burst, receiving_socket
from tests.unit.test_media_agents import LOOPBACK

WAITING = 40  # fewer than a burst's cap


@pytest.fixture
def receiver():
    with receiving_socket(0, bind_address=LOOPBACK) as sock:
        yield sock


def send(sock: socket.socket, payloads: list[bytes]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for payload in payloads:
            sender.sendto(payload, sock.getsockname())


def read(reading, buffer: bytearray) -> list[bytes]:
    """The payloads a burst gives, each copied before the next read overwrites ``buffer``."""
    return [bytes(buffer[:size]) for size, _, _ in reading]


def numbered(count: int) -> list[bytes]:
    return [index.to_bytes(2, "big") for index in range(count)]


def test_one_burst_takes_every_datagram_waiting(receiver):
    send(receiver, numbered(WAITING))
    buffer = bytearray(DATAGRAM_BUFFER)
    assert read(burst(receiver, buffer, BURST_DATAGRAMS), buffer) == numbered(WAITING)
    assert read(burst(receiver, buffer, BURST_DATAGRAMS), buffer) == []


def test_a_burst_stops_at_its_cap_and_leaves_the_rest_waiting(receiver):
    send(receiver, numbered(BURST_DATAGRAMS + 10))
    buffer = bytearray(DATAGRAM_BUFFER)
    assert read(burst(receiver, buffer, BURST_DATAGRAMS), buffer) == numbered(BURST_DATAGRAMS)
    assert read(burst(receiver, buffer, BURST_DATAGRAMS), buffer) == numbered(
        BURST_DATAGRAMS + 10)[BURST_DATAGRAMS:]


def test_the_stop_predicate_ends_a_burst_and_leaves_the_rest_waiting(receiver):
    send(receiver, numbered(WAITING))
    buffer = bytearray(DATAGRAM_BUFFER)
    given = []
    first = read((given.append(arrival) or arrival
                  for arrival in burst(receiver, buffer, BURST_DATAGRAMS,
                                       stop=lambda: len(given) >= 5)), buffer)
    assert first == numbered(5)
    assert read(burst(receiver, buffer, BURST_DATAGRAMS), buffer) == numbered(WAITING)[5:]


def test_a_wake_up_reads_one_datagram_whatever_the_predicate_says(receiver):
    send(receiver, numbered(3))
    buffer = bytearray(DATAGRAM_BUFFER)
    assert read(burst(receiver, buffer, BURST_DATAGRAMS, stop=lambda: True), buffer) == [
        numbered(3)[0]]


class OneWake:
    """An agent stand-in that collects table rows and stops after its first burst, which
    :meth:`watch` records."""

    node = "e"

    def __init__(self):
        self.stopping = False
        self.rows: list[tuple] = []
        self.bursts: list[int] = []  # datagrams read by each burst

    def row(self, table_name, *values):
        self.rows.append((table_name, *values))

    def watch(self, *args, **kwargs):
        self.bursts.append(0)
        for arrival in sockets.burst(*args, **kwargs):
            self.bursts[-1] += 1
            yield arrival
        self.stopping = True


def media(sequence: int) -> bytes:
    """A whole frame in one packet."""
    return MEDIA.pack(stream=4, sequence=sequence, send_ns=time.time_ns(), frame=sequence,
                      frame_type=1, rung=0, fragment=0, fragments=1,
                      bitrate_kbps=1000).ljust(600, b"\0")


@pytest.mark.parametrize("processing_delay, burst_read", [
    (60.0, WAITING),  # no departure near: the wake-up takes everything waiting
    (0.0, 1),  # the first datagram's departure is due at once: it goes first
])
def test_a_forwarder_wake_reads_the_burst_waiting_until_a_departure_is_due(
        monkeypatch, receiver, processing_delay, burst_read):
    agent = OneWake()
    monkeypatch.setattr(edge_forwarder, "burst", agent.watch)
    send(receiver, [media(sequence) for sequence in range(WAITING)])
    params = edge_forwarder.Params(to=[LOOPBACK], to_port=9, processing_delay=processing_delay)
    routes = edge_forwarder.Routes(agent.node, params.to, params.to_port, {}, None)
    summary = edge_forwarder.forward(agent, params, receiver,
                                     MediaMeter(receiver.getsockname()[1]), routes)
    assert agent.bursts == [burst_read]
    assert summary["forwarding"]["stream-4"]["received"] == burst_read
    assert summary["forwarding"]["stream-4"]["unsent"] == burst_read


def test_an_edge_wake_reads_every_source_packet_waiting(monkeypatch, receiver):
    agent = OneWake()
    monkeypatch.setattr(edge_server, "burst", agent.watch)
    send(receiver, [media(sequence) for sequence in range(WAITING)])
    meter = MediaMeter(receiver.getsockname()[1])
    with sockets.sending_without_waiting(receiving_socket(0, bind_address=LOOPBACK)) as service:
        edge_server.serve(agent, edge_server.Params(), service, receiver, meter)
    assert agent.bursts == [WAITING]
    assert meter.unique == WAITING
