"""The AI data agents (ai_access's terminal and access-server receiver): NACK messages, unit
sizes, and the two agents run as programs over loopback (no root needed), directly or through a
relay that drops chosen first copies, so selective retransmission is tested deterministically.

Nothing here is a timed assertion: the drops are chosen, not random, and what is asserted follows
from them.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Callable

import pytest
from pydantic import ValidationError

from agents.ai_access import ai_receiver, ai_terminal
from agents.sockets import receiving_socket
from agents.ai_access.formats import AI_DATA, AI_NACK
from agents.formats import GIFT
from tests.conftest import LoopbackRelay
from tests.unit.test_media_agents import (HANG_GUARD_S, LOOPBACK, listening_port, start,
                                          summary_of, table)

# Short units so a run takes a second or two: 60 fragments of 500 bytes (the last 300) every
# 0.4 s, sent within the first 0.2 s.
SHORT = {"unit_bytes": 29_800, "fragment_payload": 500, "period": 0.4, "send_window": 0.5}
SHORT_FRAGMENTS = 60
SHORT_TIMING = {key: SHORT[key] for key in ("period", "send_window")}


def free_udp_port() -> int:
    """A UDP port nothing on loopback is bound to right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


# NACK messages.

def test_nack_round_trips_with_the_documented_layout():
    [message] = ai_terminal.nack_messages(stream=7, unit=3, fragments=[0, 5, 944])
    assert message == (b"EB\x01\x07" + (7).to_bytes(4, "big") + (3).to_bytes(4, "big")
                       + (3).to_bytes(2, "big") + b"\x00\x00\x00\x05\x03\xb0")
    assert ai_terminal.read_nack(message) == (7, 3, [0, 5, 944])


def test_a_long_nack_list_is_split_into_messages_that_fit_an_ethernet_frame():
    missing = list(range(0, 4000, 2))  # 2000 fragments: more than two NACKs hold
    messages = ai_terminal.nack_messages(1, 9, missing)
    assert ai_terminal.NACK_CAPACITY == (1472 - AI_NACK.header_size) // 2 == 729
    assert len(messages) == 3
    assert all(len(message) <= 1472 for message in messages)
    read = [ai_terminal.read_nack(message) for message in messages]
    assert {(stream, unit) for stream, unit, _ in read} == {(1, 9)}
    assert [index for _, _, indexes in read for index in indexes] == missing
    assert ai_terminal.nack_messages(1, 9, []) == []


def test_a_nack_list_fills_its_messages_exactly_at_capacity():
    messages = ai_terminal.nack_messages(0, 0, list(range(2 * 729)))
    assert [len(message) for message in messages] == [1472, 1472]  # 14 + 2 * 729: full


@pytest.mark.parametrize("message", [
    b"",
    AI_NACK.pack(stream=0, unit=0, count=2) + b"\x00\x01",  # one index short
    AI_NACK.pack(stream=0, unit=0, count=1) + b"\x00\x01\x00",  # a byte too many
    GIFT.pack(user=0, room=0, sequence=0, send_ns=0, gift=0, value_cents=0),
], ids=["empty", "short list", "trailing byte", "another message"])
def test_read_nack_refuses_anything_but_a_whole_nack(message):
    with pytest.raises(ValueError):
        ai_terminal.read_nack(message)


# Unit sizes.

def test_the_defaults_are_the_specs_unit_of_945_packets():
    params = ai_terminal.Params.model_validate({"to": LOOPBACK})
    assert params.fragments == 945
    assert {params.fragment_length(i) for i in range(945)} == {711}
    assert params.gap_ns(945) == pytest.approx(0.5e9 / 945)


def test_the_last_fragment_carries_the_rest_of_the_unit():
    params = ai_terminal.Params.model_validate({"to": LOOPBACK, "unit_bytes": "672KB"})
    assert params.fragments == 946  # 672,000 / 711 = 945.15
    assert params.fragment_length(945) == 672_000 - 945 * 711
    assert sum(params.fragment_length(i) for i in range(946)) == 672_000


@pytest.mark.parametrize("values", [
    {"unit_bytes": 65_536, "fragment_payload": 1},  # more fragments than a u16 counts
    {"fragment_payload": 1472 - AI_DATA.header_size + 1},  # beyond an Ethernet frame
    {"send_window": 0},
    {"period": "0s"},
], ids=["too many fragments", "fragment too large", "no send window", "no period"])
def test_impossible_units_are_refused(values):
    with pytest.raises(ValidationError):
        ai_terminal.Params.model_validate({"to": LOOPBACK} | values)


def test_receiver_and_terminal_agree_on_timing_defaults():
    terminal = ai_terminal.Params.model_validate({"to": LOOPBACK})
    receiver = ai_receiver.Params.model_validate({})
    assert (terminal.period_ns, terminal.window_ns) == (receiver.period_ns, receiver.window_ns)
    assert terminal.nack_port == receiver.nack_port and terminal.port == receiver.port


# The agents over loopback.

class DroppingRelay(LoopbackRelay):
    """Forwards datagrams from a loopback port to ``target``, except those ``drop`` picks."""

    def __init__(self, target: int, drop: Callable[[bytes], bool]):
        super().__init__()
        self.target, self.drop = (LOOPBACK, target), drop
        self.dropped = 0
        self.start()

    def relay(self, datagram: bytes, sender: tuple) -> None:
        if self.drop(datagram):
            self.dropped += 1
        else:
            self.sock.sendto(datagram, self.target)


def first_copies_of(picked: Callable[[int], bool]) -> Callable[[bytes], bool]:
    """A drop rule: the first copy of each fragment (of each unit) ``picked`` chooses."""
    seen: set[tuple[int, int]] = set()

    def drop(datagram: bytes) -> bool:
        header = AI_DATA.unpack(datagram)
        key = header["unit"], header["fragment"]
        first = key not in seen
        seen.add(key)
        return first and picked(header["fragment"])

    return drop


def transfer(out: Path, units: int, terminal_params: dict, receiver_params: dict | None = None,
             drop: Callable[[bytes], bool] | None = None) -> tuple[dict, dict]:
    """``units`` units from a terminal to a receiver over loopback, through a dropping relay if
    ``drop``; (terminal summary, receiver summary)."""
    nack_port = free_udp_port()
    receiver = start("ai_receiver", "r", out, {"port": 0, "nack_port": nack_port,
                                                 "units": units} | SHORT_TIMING
                     | (receiver_params or {}))
    port = listening_port(receiver)
    relay = DroppingRelay(port, drop) if drop is not None else None
    try:
        terminal = start("ai_terminal", "t", out, {
            "to": LOOPBACK, "port": relay.port if relay else port, "nack_port": nack_port,
            "units": units} | SHORT | terminal_params)
        sent = summary_of(terminal)
        received = summary_of(receiver)  # it ends by itself once every unit has its row
    finally:
        if relay is not None:
            relay.close()
    return sent, received


def test_three_units_arrive_complete_within_their_periods(tmp_path):
    sent, received = transfer(tmp_path, 3, {})
    assert sent["units"] == 3 and sent["sent"] == 3 * SHORT_FRAGMENTS
    rows = table(tmp_path, "ai_units", "r", "ai_receiver")
    assert [(row["unit"], row["received"], row["complete"]) for row in rows] \
        == [(str(unit), str(SHORT_FRAGMENTS), "1") for unit in range(3)]
    # The last needed fragment is the last one sent, at 59/60 of the send window.
    assert all(float(row["completion_ms"]) >= 59 / 60 * 200 for row in rows)
    [flow] = table(tmp_path, "flows", "r", "ai_receiver")
    assert flow["flow"] == "ai-0" and int(flow["unique"]) + int(flow["lost"]) == 180
    # Loopback loses nothing; a busy machine's kernel may drop what the receiver did not read
    # in time (NACKs then repair the units), and the receiver counts those drops.
    assert int(flow["lost"]) <= sum(received["socket_drops"].values()), received["socket_drops"]
    # Nothing was lost, so a NACK asks for a fragment only when it was behind its schedule by
    # more than the grace (at least MIN_GRACE_NS): left that late (the terminal counts it) or
    # that long on its way (the receiver measures it). A busy machine may do that; otherwise
    # no NACK may go out.
    [lateness] = table(tmp_path, "sender_lateness", "t", "ai_terminal")
    behind_ms = float(lateness["late_max_us"]) / 1e3 + float(flow["delay_max_ms"])
    if behind_ms < ai_receiver.MIN_GRACE_NS / 1e6:
        assert [row["nacks_sent"] for row in rows] == ["0"] * 3, behind_ms
    assert received["residual_loss_fraction"] == 0 and received["complete"] == 3
    assert [row["sent"] for row in table(tmp_path, "ai_units_sent", "t", "ai_terminal")] \
        == [str(SHORT_FRAGMENTS)] * 3


class RowsKept:
    """Stands in for the receiver's Agent: keeps the rows instead of writing tables."""

    def __init__(self):
        self.rows: list[tuple] = []

    def row(self, table_name: str, *values) -> None:
        self.rows.append((table_name, *values))


@pytest.mark.parametrize("withheld", [None, 7], ids=["all waiting", "one missing"])
def test_fragments_waiting_on_the_socket_are_read_before_a_nack_is_decided(withheld):
    """A receiver woken long after a unit's NACK was due, with the unit's 300 fragments (more
    than any read batch) waiting on its socket, reads them all first: it asks for nothing, or
    exactly for the one fragment that did not come."""
    fragments = 300
    params = ai_receiver.Params.model_validate({
        "port": 0, "nack_port": free_udp_port(), "period": 10, "send_window": 0.5,
        "nack_after": 0.01})
    gap_ns = params.gap_ns(fragments)
    # The unit opened 5.5 s ago: its window (5 s) and the grace are over, its period is not.
    opens_ns = time.time_ns() - 5_500_000_000
    sock = receiving_socket(0, bind_address=LOOPBACK)
    sock.setblocking(False)
    with sock, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as terminal:
        receiver = ai_receiver.AiReceiver(RowsKept(), params, sock)
        for fragment in range(fragments):
            if fragment != withheld:
                terminal.sendto(AI_DATA.pack(stream=0, unit=0, fragment=fragment,
                                             fragments=fragments, length=0,
                                             send_ns=opens_ns + round(fragment * gap_ns)),
                                sock.getsockname())
        now_ns = time.time_ns()
        receiver.drain()
        receiver.tick(now_ns)
        [arrival] = receiver.streams[0].units.values()
    assert arrival.received == fragments - (withheld is not None)
    assert arrival.missing() == ([] if withheld is None else [withheld])
    assert arrival.nacks_sent == (0 if withheld is None else 1)


def every_seventh(fragment: int) -> bool:
    # Fragments 2, 9, ..., 58: 9 of 60, not the last (a lost tail goes unnoticed in "flows").
    return fragment % 7 == 2


def test_lost_fragments_are_retransmitted_selectively_and_units_complete(tmp_path):
    sent, received = transfer(tmp_path, 3, {}, drop=first_copies_of(every_seventh))
    lost = sum(1 for fragment in range(SHORT_FRAGMENTS) if every_seventh(fragment))
    rows = table(tmp_path, "ai_units", "r", "ai_receiver")
    assert [row["complete"] for row in rows] == ["1"] * 3
    for row in rows:
        assert int(row["missing_at_end"]) == 0 and int(row["nacks_sent"]) >= 1
        assert int(row["retransmissions_received"]) >= lost
    # The first copies measure the path: exactly the dropped ones are lost.
    [flow] = table(tmp_path, "flows", "r", "ai_receiver")
    assert int(flow["lost"]) == 3 * lost
    assert sent["retransmitted"] >= 3 * lost and sent["nacks_received"] >= 3
    for row in table(tmp_path, "ai_units_sent", "t", "ai_terminal"):
        assert int(row["sent"]) == SHORT_FRAGMENTS and int(row["retransmitted"]) >= lost


def test_without_retransmission_the_lost_fragments_stay_missing(tmp_path):
    sent, received = transfer(tmp_path, 3, {"retransmit": False},
                              drop=first_copies_of(every_seventh))
    lost = sum(1 for fragment in range(SHORT_FRAGMENTS) if every_seventh(fragment))
    rows = table(tmp_path, "ai_units", "r", "ai_receiver")
    assert [(row["complete"], row["missing_at_end"], row["retransmissions_received"],
             row["completion_ms"]) for row in rows] == [("0", str(lost), "0", "")] * 3
    assert sent["retransmitted"] == 0 and sent["nacks_received"] >= 3
    assert received["residual_loss_fraction"] == pytest.approx(lost / SHORT_FRAGMENTS)


def test_a_long_missing_list_goes_out_in_several_nacks_and_is_repaired(tmp_path):
    # 800 fragments of 100 bytes, all but every twentieth first copy dropped: 760 missing, more
    # than one NACK holds (729). Their retransmission takes 760 gaps of 0.25 ms, within the
    # period's 0.8 s after the window.
    params = {"unit_bytes": 80_000, "fragment_payload": 100, "period": 1.0, "send_window": 0.2}
    sent, received = transfer(tmp_path, 2, params,
                              {"period": 1.0, "send_window": 0.2},
                              drop=first_copies_of(lambda fragment: fragment % 20 != 0))
    rows = table(tmp_path, "ai_units", "r", "ai_receiver")
    assert [row["complete"] for row in rows] == ["1", "1"]
    assert all(int(row["nacks_sent"]) >= 2 for row in rows)
    assert all(int(row["retransmissions_received"]) >= 760 for row in rows)


def test_the_receiver_counts_malformed_datagrams_and_still_measures(tmp_path):
    nack_port = free_udp_port()
    receiver = start("ai_receiver", "r", tmp_path, {"port": 0, "nack_port": nack_port,
                                                     "units": 1} | SHORT_TIMING)
    port = listening_port(receiver)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for garbage in (b"", b"EB", b"\xff" * 40,
                        AI_DATA.pack(stream=0, unit=0, fragment=0, fragments=1, length=0,
                                     send_ns=2**63),  # sent in the future
                        AI_DATA.pack(stream=0, unit=0, fragment=5, fragments=5, length=0,
                                     send_ns=0),
                        AI_DATA.pack(stream=0, unit=0, fragment=0, fragments=5, length=9,
                                     send_ns=0)):
            sender.sendto(garbage, (LOOPBACK, port))
    terminal = start("ai_terminal", "t", tmp_path, {"to": LOOPBACK, "port": port,
                                                     "nack_port": nack_port, "units": 1} | SHORT)
    summary_of(terminal)
    received = summary_of(receiver)
    assert received["malformed"] == 6 and received["complete"] == 1
    [row] = table(tmp_path, "malformed", "r", "ai_receiver")
    assert int(row["count"]) == 6


def test_the_terminal_stops_on_sigterm_with_the_unit_it_was_sending(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind((LOOPBACK, 0))
        sink.settimeout(HANG_GUARD_S)
        terminal = start("ai_terminal", "t", tmp_path,
                         {"to": LOOPBACK, "port": sink.getsockname()[1],
                          "nack_port": free_udp_port()} | SHORT)
        listening_port(terminal)
        sink.recv(2048)  # its first fragment arrived: it is sending a unit
        summary = summary_of(terminal, stop=True)
    rows = table(tmp_path, "ai_units_sent", "t", "ai_terminal")
    assert summary["units"] == len(rows) >= 1
    [lateness] = table(tmp_path, "sender_lateness", "t", "ai_terminal")
    assert int(lateness["packets"]) == summary["sent"] + summary["retransmitted"] \
        + summary["send_errors"]
