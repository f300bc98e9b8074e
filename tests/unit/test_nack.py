"""NACK-based loss recovery (agents.nack): a receiver's gaps asked for once after the reorder
wait, trailing gaps found by silence, repairs in time and late counted apart; a sender's buffer
bounded by packets and age, answering what it holds and counting what it no longer does."""

from __future__ import annotations

import socket

from hypothesis import given, settings, strategies as st

from agents.formats import MEDIA
from agents.nack import (Arrival, NackParams, SendBuffer, StreamGaps, answer_waiting,
                         asked_sequences, is_nack, nack_messages)
from agents.wire import MAGIC, VERSION
from edgebed import clock

MS = 1_000_000
WAIT, INTERVAL, DEADLINE = 20 * MS, 250 * MS, 500 * MS


def gaps(retries: int = 1) -> StreamGaps:
    return StreamGaps(WAIT, retries, INTERVAL, DEADLINE)


def receive(stream: StreamGaps, sequence: int, now_ns: int, fragment: int = 0,
            fragments: int = 1, send_ns: int | None = None) -> Arrival:
    return stream.receive(sequence, fragment, fragments,
                          now_ns if send_ns is None else send_ns, now_ns)


def test_a_gap_is_asked_for_after_the_reorder_wait_and_only_once():
    stream = gaps()
    receive(stream, 0, 0)
    receive(stream, 3, 1 * MS)  # 1 and 2 missing
    assert stream.due(10 * MS) == []  # still within the reorder wait
    assert stream.due(21 * MS) == [1, 2]
    assert stream.due(200 * MS) == []  # given up: asked once, the default
    assert stream.due(400 * MS) == []
    assert stream.figures() | {"nacks_sent": 0} == {
        "nacks_sent": 0, "asked": 2, "repaired": 0, "repaired_late": 0, "unrepaired": 2,
        "pending": 0}


def test_a_packet_back_within_the_wait_is_reordering_not_a_loss():
    stream = gaps()
    receive(stream, 0, 0)
    receive(stream, 2, 1 * MS)
    assert receive(stream, 1, 5 * MS) is Arrival.NEW
    assert stream.due(50 * MS) == []
    assert stream.asked == 0


def test_retries_ask_again_every_interval_then_give_up():
    stream = gaps(retries=3)
    receive(stream, 0, 0)
    receive(stream, 2, 0)
    assert stream.due(WAIT) == [1]
    assert stream.due(WAIT + INTERVAL - 1) == []
    assert stream.due(WAIT + INTERVAL) == [1]
    assert stream.due(WAIT + 2 * INTERVAL) == [1]
    assert stream.due(WAIT + 3 * INTERVAL) == []
    assert (stream.asked, stream.unrepaired) == (1, 1)


def test_a_trailing_gap_is_found_by_silence():
    stream = gaps()
    receive(stream, 7, 0, fragment=1, fragments=4)  # fragments 2 and 3 of its frame to come
    assert stream.due(WAIT - 1) == []
    assert stream.due(WAIT) == [8, 9]
    # The next frame's first packet follows them: no gap asked twice.
    receive(stream, 10, WAIT + MS)
    assert stream.due(WAIT + 2 * MS) == []


def test_repairs_in_time_and_late_are_counted_apart():
    stream = gaps()
    receive(stream, 0, 0)
    receive(stream, 4, 0)
    assert stream.due(WAIT) == [1, 2, 3]
    assert receive(stream, 1, 60 * MS, send_ns=0) is Arrival.REPAIRED
    # Past the packet's playout deadline
    assert receive(stream, 2, DEADLINE + MS, send_ns=0) is Arrival.LATE
    stream.due(WAIT + INTERVAL)  # 3 given up
    assert stream.unrepaired == 1
    # After it was given up: late, whatever its deadline says
    assert receive(stream, 3, WAIT + INTERVAL + MS, send_ns=WAIT + INTERVAL) is Arrival.LATE
    assert receive(stream, 3, WAIT + INTERVAL + 2 * MS) is Arrival.OLD  # a duplicate
    assert stream.figures() | {"nacks_sent": 0} == {
        "nacks_sent": 0, "asked": 3, "repaired": 1, "repaired_late": 2, "unrepaired": 0,
        "pending": 0}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30 * MS)), min_size=1,
                max_size=80),
       st.integers(1, 3))
def test_every_sequence_is_received_asked_or_within_the_wait(arrivals, retries):
    """Sequences arriving in any order at any times (time only goes on): after each step every
    sequence from the first to the highest is received, asked for, or missing less than the
    wait."""
    stream = gaps(retries)
    now, received, missing_since = 0, set(), {}
    for sequence, step in arrivals:
        now += step
        if stream.highest is not None:
            missing_since.update({lost: now for lost in range(stream.highest + 1, sequence)
                                  if lost not in missing_since})
        receive(stream, sequence, now)
        received.add(sequence)
        stream.due(now)
        asked = stream.given_up | {s for s, entry in stream.missing.items() if entry.asks}
        for lost in range(arrivals[0][0], stream.highest + 1):
            assert (lost in received or lost in asked
                    or now - missing_since[lost] < WAIT), (lost, now)
    assert stream.asked == (stream.repaired + stream.repaired_late + stream.unrepaired
                            + stream.pending)


@given(st.sets(st.integers(0, 200), min_size=1, max_size=60))
def test_nacks_carry_exactly_the_sequences_asked(sequences):
    messages = nack_messages(5, sequences, 123)
    carried = []
    for message in messages:
        assert is_nack(message, len(message))
        stream, asked = asked_sequences(message)
        assert stream == 5
        carried += asked
    assert sorted(carried) == sorted(sequences)
    assert len(messages) <= len(sequences)


def media(sequence: int) -> bytes:
    return MEDIA.struct.pack(MAGIC, VERSION, MEDIA.type, 5, sequence, 0, 0, 1, 0, 0, 1, 1000)


def test_the_send_buffer_answers_what_it_holds_and_counts_misses():
    peer, other = ("10.0.0.2", 5004), ("10.0.0.3", 5004)
    sent = SendBuffer(packets=3, age_ns=1000 * MS)
    for sequence in range(5):  # 0 and 1 pushed out by the packet bound
        sent.add(peer, 5, sequence, media(sequence), sequence * MS)
    [nack] = nack_messages(5, [1, 2, 4], 0)
    assert sent.answer(nack, peer, 5 * MS) == [media(2), media(4)]
    assert sent.answer(nack, other, 5 * MS) == []  # what went to another peer is not its
    # The age bound: nothing sent more than a second ago is held.
    assert sent.answer(nack, peer, 1003 * MS) == [media(4)]
    assert sent.answered == {
        (5, peer): {"nacks_received": 2, "asked": 6, "resent": 3,
                    "resent_bytes": 3 * len(media(0)), "missed": 3},
        (5, other): {"nacks_received": 1, "asked": 3, "resent": 0, "resent_bytes": 0,
                     "missed": 3}}


def test_a_sender_answers_the_nacks_waiting_on_its_socket():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        sender.bind(("127.0.0.1", 0))
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(5)
        peer = receiver.getsockname()
        sent = NackParams(nack=True).send_buffer()
        sent.add(peer, 5, 7, media(7), clock.time_ns())
        receiver.sendto(b"not a nack", sender.getsockname())
        for message in nack_messages(5, [7, 8], 0):
            receiver.sendto(message, sender.getsockname())
        # Over loopback a datagram is queued on the receiving socket before sendto returns.
        assert answer_waiting(sender, sent, bytearray(2048)) == 0
        assert receiver.recv(2048) == media(7)
        assert sent.answered[5, peer] == {"nacks_received": 1, "asked": 2, "resent": 1,
                                                 "resent_bytes": len(media(7)), "missed": 1}


def test_nack_parameters_make_nothing_when_off():
    assert NackParams().receiver() is None and NackParams().send_buffer() is None
    receiver = NackParams(nack=True, nack_retries=2).receiver()
    assert receiver.settings == (WAIT, 2, INTERVAL, DEADLINE)
