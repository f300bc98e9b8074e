"""The measuring receivers' loop (agents.sockets.datagrams), which wakes at most once a quantum
and reads all that waits: nothing lost, arrivals in order, the caller's timer run when due
whatever the quantum, and what waits at the stop still read. Nothing here depends on how long
anything takes: the loop is ended by what it read or by the timer's own count."""

from __future__ import annotations

import socket
from types import SimpleNamespace

from agents.nack import NackReceiver
from agents.formats import MEDIA
from agents.sockets import DATAGRAM_BUFFER, datagrams, receiving_socket
from edgebed import clock

LOOPBACK = "127.0.0.1"
LONG_QUANTUM_S = 1000.0  # longer than any test: only a timer or a stop can end a wait


def numbered(count: int) -> list[bytes]:
    return [index.to_bytes(4, "big") for index in range(count)]


def test_every_datagram_is_given_once_in_the_order_it_arrived():
    agent = SimpleNamespace(stopping=False)
    sent = numbered(300)
    with receiving_socket(0, bind_address=LOOPBACK) as sock, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for data in sent[:150]:
            sender.sendto(data, sock.getsockname())
        buffer = bytearray(DATAGRAM_BUFFER)
        given = []
        for size, _, _ in datagrams(agent, sock, buffer, quantum_s=0.005):
            given.append(bytes(buffer[:size]))
            if len(given) == 100:  # the rest comes while the loop is reading
                for data in sent[150:]:
                    sender.sendto(data, sock.getsockname())
            if len(given) == len(sent):
                agent.stopping = True
        assert given == sent


def test_a_stop_in_the_middle_of_a_batch_still_gives_all_that_had_arrived():
    agent = SimpleNamespace(stopping=False)
    sent = numbered(20)
    with receiving_socket(0, bind_address=LOOPBACK) as sock, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for data in sent:
            sender.sendto(data, sock.getsockname())
        buffer = bytearray(DATAGRAM_BUFFER)
        given = []
        for size, _, _ in datagrams(agent, sock, buffer, quantum_s=LONG_QUANTUM_S):
            given.append(bytes(buffer[:size]))
            agent.stopping = True  # at the first: the rest is read by the end-of-run drain
        assert given == sent


def test_the_timer_runs_when_due_though_the_quantum_is_far_from_over():
    """With a quantum longer than the test and datagrams waiting, the loop still wakes for
    the timer, never before it is due, and reads what arrived in between."""
    agent = SimpleNamespace(stopping=False)
    calls: list[float] = []
    due = [0.0]
    with receiving_socket(0, bind_address=LOOPBACK) as sock, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:

        def timer() -> float:
            now = clock.monotonic()
            assert now >= due[0]
            calls.append(now)
            sender.sendto(len(calls).to_bytes(4, "big"), sock.getsockname())
            if len(calls) == 5:
                agent.stopping = True
            due[0] = now + 0.002
            return 0.002

        buffer = bytearray(DATAGRAM_BUFFER)
        sender.sendto((0).to_bytes(4, "big"), sock.getsockname())
        given = [int.from_bytes(buffer[:size], "big") for size, _, _ in
                 datagrams(agent, sock, buffer, quantum_s=LONG_QUANTUM_S, timer=timer)]
    assert len(calls) == 5
    assert given == list(range(6))  # each sent in a timer call, the last read at the end


def test_a_timer_with_nothing_pending_leaves_the_loop_to_the_datagrams():
    agent = SimpleNamespace(stopping=False)
    calls = []
    with receiving_socket(0, bind_address=LOOPBACK) as sock, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for data in numbered(3):
            sender.sendto(data, sock.getsockname())
        buffer = bytearray(DATAGRAM_BUFFER)
        given = []
        for size, _, _ in datagrams(agent, sock, buffer, quantum_s=0.0,
                                    timer=lambda: calls.append(1)):
            given.append(bytes(buffer[:size]))
            agent.stopping = len(given) == 3
        assert given == numbered(3) and calls  # a quantum of 0: one datagram a wake-up


def media(sequence: int, fragment: int = 0, fragments: int = 1) -> bytes:
    return MEDIA.pack(stream=1, sequence=sequence, send_ns=0, frame=sequence, frame_type=1,
                      rung=0, fragment=fragment, fragments=fragments, bitrate_kbps=1000)


def test_the_nack_timer_is_due_when_a_gap_is_asked_for_and_then_again_at_the_interval():
    wait_ns, interval_ns = 20_000_000, 250_000_000
    nacks = NackReceiver(wait_ns, retries=2, interval_ns=interval_ns, deadline_ns=10**9)
    peer = (LOOPBACK, 9)
    assert nacks.next_due_ns() is None
    nacks.receive(media(0), 1_000, peer)
    assert nacks.next_due_ns() is None
    nacks.receive(media(3), 2_000, peer)  # 1 and 2 missing since 2 µs
    assert nacks.next_due_ns() == 2_000 + wait_ns
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        nacks.ask(sock, 2_000 + wait_ns)
    assert nacks.next_due_ns() == 2_000 + wait_ns + interval_ns


def test_the_nack_timer_is_due_at_the_end_of_the_wait_for_a_frames_trailing_fragments():
    wait_ns = 20_000_000
    nacks = NackReceiver(wait_ns, retries=1, interval_ns=250_000_000, deadline_ns=10**9)
    nacks.receive(media(0, fragment=0, fragments=3), 5_000, (LOOPBACK, 9))
    assert nacks.next_due_ns() == 5_000 + wait_ns
