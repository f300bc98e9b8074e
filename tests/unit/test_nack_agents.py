"""NACKs wired into the media agents, run as programs over loopback: the edge server asks its
upstream for a packet missing from a frame and serves the frame whole once repaired, and answers
its viewer's NACKs from its send buffer; the forwarder, the streamer and the viewer do their
part. Loopback loses nothing, so the losses are made by leaving packets out; the NACKs' interval
(how long a packet is waited for once asked) and deadline are far beyond any machine's delay,
so a repair is never given up or late by chance."""

from __future__ import annotations

import socket
import time

from agents.formats import MEDIA
from agents.nack import asked_sequences, is_nack, nack_messages
from tests.unit.live_edge.test_live_edge_agents import (FRAGMENTS, SOURCE_KBPS, Source, Viewer,
                                                        no_agent_left_running, running,
                                                        start_edge)
from tests.unit.test_media_agents import (HANG_GUARD_S, LOOPBACK, listening_port, start,
                                          summary_of, table)

assert no_agent_left_running  # the autouse fixture stopping what a failed test left running
NACK_ON = {"nack": True, "nack_interval": 60, "nack_deadline": 60}


def datagram(sock: socket.socket) -> tuple[bytes, tuple]:
    """The next datagram on ``sock`` and where it came from (waited for up to the hang
    guard)."""
    sock.settimeout(HANG_GUARD_S)
    return sock.recvfrom(2048)


def test_the_edge_repairs_a_frame_from_upstream_and_answers_its_viewer(tmp_path):
    edge, port, source_port = start_edge(tmp_path, transcoding_delay=0, payload=1200,
                                         **NACK_ON)
    source = Source(source_port)
    watcher = Viewer(port, bitrate_kbps=SOURCE_KBPS)
    watcher.served(source)
    lost = source.sequence + 2
    source.send(fragments={0, 1, 3, 4})
    # The edge asks the address the stream came from for the one packet left out, once.
    nack, edge_source = datagram(source.sock)
    assert is_nack(nack, len(nack)) and asked_sequences(nack) == (source.stream, [lost])
    repair = MEDIA.pack(stream=source.stream, sequence=lost, send_ns=time.time_ns(),
                        frame=source.frame - 1, frame_type=2, rung=3, fragment=2,
                        fragments=FRAGMENTS, bitrate_kbps=SOURCE_KBPS)
    source.sock.sendto(repair.ljust(1000, b"\0"), edge_source)
    # Served whole: the frame waited for its repair.
    repaired = watcher.frames(source.frame - 1)
    assert sum(p["size"] for p in repaired) == FRAGMENTS * 1000

    # The viewer's NACKs: one never sent is a miss; a packet it got comes again unchanged
    # (asked last, so once it is back the edge has read both).
    first = repaired[0]
    for sequence in (10**6, first["sequence"]):
        [message] = nack_messages(1, [sequence], 0)
        watcher.sock.sendto(message, watcher.edge)
    again = watcher.receive(HANG_GUARD_S)
    assert {key: again[key] for key in ("sequence", "frame", "fragment", "size")} == {
        key: first[key] for key in ("sequence", "frame", "fragment", "size")}
    summary = summary_of(edge, stop=True)
    assert summary["nack"]["asked_upstream"] == {
        "nacks_sent": 1, "asked": 1, "repaired": 1, "repaired_late": 0, "unrepaired": 0,
        "pending": 0, "send_errors": 0}
    assert summary["nack"]["answered"] == {"nacks_received": 2, "asked": 2, "resent": 1,
                                           "resent_bytes": first["size"], "missed": 1}
    [row] = table(tmp_path, "nack_requests", "e", "edge_server")
    assert (row["flow"], row["upstream"], row["repaired"]) == (f"stream-{source.stream}",
                                                               LOOPBACK, "1")


def media(sequence: int, fragment: int = 0, fragments: int = 1) -> bytes:
    return MEDIA.pack(stream=4, sequence=sequence, send_ns=time.time_ns(), frame=0,
                      frame_type=1, rung=0, fragment=fragment, fragments=fragments,
                      bitrate_kbps=1000).ljust(600, b"\0")


def test_the_forwarder_answers_its_next_hops_nacks(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as hop, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as upstream:
        hop.bind((LOOPBACK, 0))
        forwarder = running(start("edge_forwarder", "f", tmp_path,
                                  {"port": 0, "to": [LOOPBACK], "to_port": hop.getsockname()[1]}
                                  | NACK_ON))
        port = listening_port(forwarder)
        for sequence in range(3):
            upstream.sendto(media(sequence), (LOOPBACK, port))
        forwarded = [datagram(hop) for _ in range(3)]
        sender = forwarded[0][1]
        for message in nack_messages(4, [1, 7], 0):
            hop.sendto(message, sender)
        assert datagram(hop) == forwarded[1]
        summary = summary_of(forwarder, stop=True)
    assert summary["nack"] == {"nacks_received": 1, "asked": 2, "resent": 1,
                               "resent_bytes": 600, "missed": 1}


def test_the_streamer_answers_nacks_while_it_streams(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind((LOOPBACK, 0))
        streamer = running(start("streamer", "s", tmp_path,
                                 {"to": LOOPBACK, "port": receiver.getsockname()[1],
                                  "bitrate": "1Mbps", "fps": 25, "duration": 2} | NACK_ON))
        first, sender = datagram(receiver)
        sequence = MEDIA.unpack(first)["sequence"]
        [message] = nack_messages(0, [sequence], 0)
        receiver.sendto(message, sender)
        while (packet := datagram(receiver)[0]) != first:
            assert MEDIA.unpack(packet)["sequence"] > sequence  # only new ones before it
        summary = summary_of(streamer)
    assert summary["nack"] == {"nacks_received": 1, "asked": 1, "resent": 1,
                               "resent_bytes": len(first), "missed": 0}


def test_the_viewer_asks_for_a_gap_and_counts_the_repair(tmp_path):
    viewer = running(start("viewer", "v", tmp_path, {"port": 0, "expect": 4} | NACK_ON))
    port = listening_port(viewer)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for sequence in (0, 1, 3):
            sender.sendto(media(sequence, fragment=sequence, fragments=4), (LOOPBACK, port))
        nack, _ = datagram(sender)
        assert asked_sequences(nack) == (4, [2])
        sender.sendto(media(2, fragment=2, fragments=4), (LOOPBACK, port))
        summary = summary_of(viewer)
    assert summary["nack"] == {"nacks_sent": 1, "asked": 1, "repaired": 1, "repaired_late": 0,
                               "unrepaired": 0, "pending": 0, "send_errors": 0}
    [row] = table(tmp_path, "flows", "v", "viewer")
    assert (row["unique"], row["lost"]) == ("4", "0")
