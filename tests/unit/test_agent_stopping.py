"""What a receiving agent does with the datagrams that reached its socket before it stopped:
it reads and measures them (agents.sockets.datagrams), directly and through a real agent
stopped with SIGTERM the way a run stops it. No timing is assumed: whatever was sent before the
stop is on the socket when the stop comes."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace

from agents.sockets import DATAGRAM_BUFFER, datagrams, receiving_socket, waiting_datagrams
from agents.formats import DANMAKU
from tests.unit.test_media_agents import LOOPBACK, listening_port, start, summary_of


def loopback_socket() -> socket.socket:
    return receiving_socket(0, bind_address=LOOPBACK)


def test_datagrams_waiting_when_the_agent_stops_are_still_given():
    stopped = SimpleNamespace(stopping=True)
    with loopback_socket() as sock, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for index in range(5):
            sender.sendto(bytes([index]), sock.getsockname())
        buffer = bytearray(DATAGRAM_BUFFER)
        given = [buffer[0] for size, _, _ in datagrams(stopped, sock, buffer)]
        assert given == [0, 1, 2, 3, 4]
        assert list(datagrams(stopped, sock, buffer)) == []  # and then it ends at once


def test_waiting_datagrams_end_with_those_waiting_when_the_reading_began():
    """What a sender sends while the waiting datagrams are read is left for later: the end is
    marked in the socket's queue, not judged by a clock."""
    with loopback_socket() as sock, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(b"before", sock.getsockname())
        buffer = bytearray(DATAGRAM_BUFFER)
        reading = waiting_datagrams(sock, buffer)
        read = [bytes(buffer[:next(reading)[0]])]
        for _ in range(3):
            sender.sendto(b"after", sock.getsockname())
        read += [bytes(buffer[:size]) for size, _, _ in reading]
        assert read == [b"before"]
        assert [bytes(buffer[:size]) for size, _, _ in waiting_datagrams(sock, buffer)] == [
            b"after"] * 3


def test_a_collector_stopped_right_after_the_chat_was_sent_counts_all_of_it(tmp_path):
    collector = start("chat_collector", "c", tmp_path, {"port": 0})
    port = listening_port(collector)
    messages = 50
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for sequence in range(messages):
            sender.sendto(DANMAKU.pack(user=1, room=1, sequence=sequence, send_ns=time.time_ns(),
                                       text_length=2) + b"hi", (LOOPBACK, port))
    collected = summary_of(collector, stop=True)  # no pause: every message is on its socket
    assert collected["danmaku"] == {"users": 1, "messages": messages, "lost": 0,
                                    "duplicates": 0}
