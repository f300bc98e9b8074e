"""Capture summaries (agents.pcap), ``edgebed pcap summarize`` and the Wireshark dissector, on a
capture written with Scapy: every message type in a few flows, deliberate gaps, and junk."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror, UDPerror
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from scapy.utils import wrpcap

from agents import formats, pcap, probe, protocols
from agents.ai_access.formats import AI_NACK
from experiments import cli
from experiments.cli_output import EXIT_INVALID

ROOT = Path(__file__).resolve().parents[2]
DISSECTOR = ROOT / "agents" / "wireshark" / "edgebed.lua"
START = 1_700_000_000.0
SEND_NS = 1_699_999_999_990_000_000  # 10 ms before the capture starts
# Endpoints on ports no Wireshark dissector claims, so its heuristics get the payloads.
STREAMER, VIEWER, VIEWER2 = ("10.0.0.1", 47001), ("10.0.0.2", 47002), ("10.0.0.3", 47003)
EDGE, SCHEDULER = ("10.0.0.9", 47009), ("10.0.0.10", 47010)


def datagram(source, destination, payload) -> Packet:
    return (Ether() / IP(src=source[0], dst=destination[0])
            / UDP(sport=source[1], dport=destination[1]) / bytes(payload))


def media(stream: int, sequence: int) -> Packet:
    # Three fragments a frame: frames 0, 1, 2, ... are sequences 0-2, 3-5, 6-8, ...
    return protocols.layer("media")(stream=stream, sequence=sequence, send_ns=SEND_NS,
                           frame=sequence // 3, frame_type=1 if sequence < 3 else 2, rung=2,
                           fragment=sequence % 3, fragments=3, bitrate_kbps=2500) / bytes(100)


def danmaku(sequence: int) -> Packet:
    return protocols.layer("danmaku")(user=7, room=1, sequence=sequence, send_ns=SEND_NS,
                             text="弹幕 hello".encode())


def ai_data(unit: int, fragment: int) -> Packet:
    return protocols.layer("ai_data")(stream=3, unit=unit, fragment=fragment, fragments=4,
                            send_ns=SEND_NS, data=bytes([fragment]) * 50)


# The capture, in order. Media stream 1 loses sequence 4 (frame 1 incomplete) and sends only the
# first fragment of frame 3; stream 2 repeats sequence 2. Danmaku skips 3 and 4, the probe 3.
# ai_data unit 1 gets fragments 0 and 2 of 4.
FLOWS = (
    [datagram(STREAMER, VIEWER, media(1, sequence)) for sequence in range(10) if sequence != 4]
    + [datagram(STREAMER, VIEWER2, media(2, sequence)) for sequence in (0, 1, 2, 2, 3, 4)]
    + [datagram(VIEWER, STREAMER, danmaku(sequence)) for sequence in (0, 1, 2, 5)]
    + [datagram(VIEWER, STREAMER, protocols.layer("gift")(user=7, room=1, sequence=sequence,
                                                 send_ns=SEND_NS, gift=12, value_cents=500))
       for sequence in (0, 1)]
    + [datagram(STREAMER, EDGE, ai_data(0, fragment)) for fragment in range(4)]
    + [datagram(STREAMER, EDGE, ai_data(1, fragment)) for fragment in (0, 2)]
    + [datagram(EDGE, STREAMER, protocols.layer("ai_nack")(stream=3, unit=1, indexes=[1, 3]))
       for _ in range(2)]
    + [datagram(SCHEDULER, STREAMER, protocols.layer("ai_nack")(stream=5, unit=1,
                                                      indexes=[9000, 9001, 9002]))]
    + [datagram(VIEWER, EDGE, protocols.layer("request")(request=request, client=5, content=42,
                                                send_ns=SEND_NS, response_bytes=1000))
       for request in (1, 2)]
    + [datagram(EDGE, VIEWER, protocols.layer("response")(request=request, server=9, content=42,
                                                 request_send_ns=SEND_NS,
                                                 service_ns=1_500_000) / bytes(1000))
       for request in (1, 2)]
    + [datagram(VIEWER, VIEWER2, probe.encode(4, sequence, SEND_NS, 64))
       for sequence in range(6) if sequence != 3]
)
# A message shorter than its tail says, a DNS-looking datagram, random bytes, a TCP segment and
# an ICMP error quoting an edgebed datagram.
MALFORMED = [datagram(VIEWER, STREAMER, bytes(danmaku(9))[:-3])]
OTHER_UDP = [datagram(VIEWER, ("10.0.0.53", 53), bytes.fromhex("abcd01000001000000000000")),
             datagram(VIEWER, STREAMER, b"\x00" * 30)]
NOT_UDP = [Ether() / IP(src=VIEWER[0], dst=EDGE[0]) / TCP(sport=40000, dport=80),
           Ether() / IP(src=VIEWER2[0], dst=STREAMER[0]) / ICMP(type=3, code=3)
           / IPerror(src=STREAMER[0], dst=VIEWER2[0]) / UDPerror(sport=47001, dport=47003)
           / bytes(media(2, 9))]


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    packets = FLOWS + MALFORMED + OTHER_UDP + NOT_UDP
    # A padded Ethernet frame (60 bytes minimum): the padding is not part of the message.
    packets.append(Ether(bytes(datagram(SCHEDULER, STREAMER, protocols.layer("ai_nack")(
        stream=5, unit=2, indexes=[9003]))) + bytes(6)))
    for index, packet in enumerate(packets):
        packet.time = START + index / 1000
    path = tmp_path_factory.mktemp("pcap") / "edgebed.pcap"
    wrpcap(str(path), packets)
    return path


def rows_by_flow(rows: list[dict]) -> dict[tuple, dict]:
    return {(row["message"], row["source"], row["destination"], row["flow"]): row
            for row in rows}


def at(endpoint) -> str:
    return f"{endpoint[0]}:{endpoint[1]}"


def test_summary_has_one_row_per_flow_and_the_other_packets(capture):
    rows = pcap.summarize(capture)
    assert [(row["message"], row["flow"]) for row in rows] == [
        ("media", "stream 1"), ("media", "stream 2"), ("danmaku", "user 7"),
        ("gift", "user 7"), ("ai_data", "stream 3"), ("ai_nack", "stream 5"),
        ("ai_nack", "stream 3"), ("request", "client 5"),
        ("response", "server 9"), ("probe", "flow 4"),
        ("malformed", None), ("other udp", None), ("not udp", None)]
    assert sum(row["packets"] for row in rows) == (len(FLOWS) + len(MALFORMED) + len(OTHER_UDP)
                                                  + len(NOT_UDP) + 1)  # + the padded frame


def test_sequence_gaps_and_duplicates(capture):
    flows = rows_by_flow(pcap.summarize(capture))
    stream_1 = flows["media", at(STREAMER), at(VIEWER), "stream 1"]
    assert (stream_1["packets"], stream_1["bytes"]) == (9, 9 * (formats.MEDIA.header_size + 100))
    assert (stream_1["sequence_first"], stream_1["sequence_last"], stream_1["missing"],
            stream_1["gaps"], stream_1["duplicates"]) == (0, 9, 1, 1, 0)
    stream_2 = flows["media", at(STREAMER), at(VIEWER2), "stream 2"]
    assert (stream_2["packets"], stream_2["missing"], stream_2["duplicates"]) == (6, 0, 1)
    chat = flows["danmaku", at(VIEWER), at(STREAMER), "user 7"]
    assert (chat["packets"], chat["missing"], chat["gaps"]) == (4, 2, 1)
    gifts = flows["gift", at(VIEWER), at(STREAMER), "user 7"]
    assert (gifts["packets"], gifts["missing"]) == (2, 0)
    probes = flows["probe", at(VIEWER), at(VIEWER2), "flow 4"]
    assert (probes["packets"], probes["bytes"], probes["sequence_last"], probes["missing"]) == (
        5, 5 * 64, 5, 1)


def test_fragment_coverage_of_frames_and_ai_units(capture):
    flows = rows_by_flow(pcap.summarize(capture))
    stream_1 = flows["media", at(STREAMER), at(VIEWER), "stream 1"]
    # Frames 0 and 2 complete; frame 1 lost sequence 4; frame 3 only has its first fragment.
    assert (stream_1["units"], stream_1["units_complete"], stream_1["fragments_seen"],
            stream_1["fragments_expected"]) == (4, 2, 9, 12)
    ai = flows["ai_data", at(STREAMER), at(EDGE), "stream 3"]
    assert (ai["packets"], ai["units"], ai["units_complete"], ai["fragments_seen"],
            ai["fragments_expected"]) == (6, 2, 1, 6, 8)
    assert ai["sequence_first"] is None  # ai_data has no sequence number


def test_flows_without_sequence_count_packets_bytes_and_times(capture):
    flows = rows_by_flow(pcap.summarize(capture))
    nacks = flows["ai_nack", at(SCHEDULER), at(STREAMER), "stream 5"]
    # 3 indexes and, from the padded frame, 1 index; the Ethernet padding is not counted.
    assert (nacks["packets"], nacks["bytes"]) == (2, 2 * AI_NACK.header_size + 8)
    repeated = flows["ai_nack", at(EDGE), at(STREAMER), "stream 3"]
    assert repeated["packets"] == 2
    assert repeated["last_time"] - repeated["first_time"] == pytest.approx(0.001, abs=1e-6)
    assert flows["response", at(EDGE), at(VIEWER), "server 9"]["bytes"] == 2 * (
        formats.RESPONSE.header_size + 1000)
    assert flows["ai_nack", at(EDGE), at(STREAMER), "stream 3"]["missing"] is None


def test_junk_is_counted_by_kind(capture):
    flows = rows_by_flow(pcap.summarize(capture))
    assert flows["malformed", None, None, None]["packets"] == 1
    assert flows["other udp", None, None, None]["packets"] == 2
    assert flows["other udp", None, None, None]["bytes"] == 12 + 30
    assert flows["not udp", None, None, None]["packets"] == 2  # TCP, and ICMP quoting UDP


def test_tables_show_flows_gaps_and_coverage(capture):
    out, errors = Console(file=io.StringIO(), width=250), Console(file=io.StringIO())
    assert pcap.print_summaries([str(capture)], False, out, errors) == 0
    text = out.file.getvalue()
    assert "10.0.0.1:47001 → 10.0.0.2:47002" in text
    assert "0–9, 1 missing in 1 gap" in text and "0–4, 1 duplicate" in text
    assert "2/4 frames complete, 9/12 fragments" in text
    assert "1/2 units complete, 6/8 fragments" in text


def test_cli_prints_tables_and_json(capture, capsys):
    assert cli.main(["pcap", "summarize", str(capture)]) == 0
    assert str(capture) in capsys.readouterr().out
    assert cli.main(["pcap", "summarize", "--json", str(capture)]) == 0
    summaries = json.loads(capsys.readouterr().out)
    assert summaries == {str(capture): pcap.summarize(capture)}


@pytest.mark.parametrize("content", [b"not a capture\n", b"", None])
def test_cli_refuses_files_that_are_not_captures(tmp_path, capture, capsys, content):
    bad = tmp_path / "bad.pcap"
    if content is not None:
        bad.write_bytes(content)
    assert cli.main(["pcap", "summarize", str(capture), str(bad)]) == EXIT_INVALID
    output = capsys.readouterr()
    assert str(bad) in output.err and "Traceback" not in output.err
    assert str(capture) in output.out  # the readable capture is still summarised


# The Wireshark dissector, checked against the Python table by decoding the capture with tshark.
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                  reason="tshark is not installed (apt-get install tshark)")


def tshark(*arguments: str) -> str:
    return subprocess.run(["tshark", "-X", f"lua_script:{DISSECTOR}", *arguments],
                          capture_output=True, text=True, check=True, timeout=120).stdout


def wireshark_fields(packet: Packet) -> dict[str, str]:
    """The edgebed fields tshark should show for a message, as ``-T fields`` prints them."""
    message = packet.wire_format
    expected = {}
    for name, value in packet.fields.items():
        if name in ("magic", "version", "type"):
            continue
        if isinstance(value, list):
            value = ",".join(str(entry) for entry in value)
        elif isinstance(value, bytes):
            value = value.decode() if name == "text" else value.hex()
        expected[f"edgebed.{message.name}.{name}"] = str(value)
    return expected


@needs_tshark
def test_wireshark_dissector_decodes_every_field(capture):
    payloads = [bytes(packet[UDP].payload) for packet in FLOWS]
    messages = [protocols.dissect(payload) for payload in payloads]
    expected = [wireshark_fields(message) if message else
                {"edgebed.probe.flow": "4", "edgebed.probe.sequence":
                 str(probe.decode(payload).sequence)}
                for message, payload in zip(messages, payloads)]
    names = sorted({name for fields in expected for name in fields})
    lines = tshark("-r", str(capture), "-T", "fields", "-E", "separator=|",
                   *[argument for name in ["edgebed.type"] + names
                     for argument in ("-e", name)]).splitlines()
    for line, fields in zip(lines, expected):
        columns = dict(zip(["edgebed.type"] + names, line.split("|")))
        assert {name: columns[name] for name in fields} == fields
    malformed, dns, zeros, tcp, icmp, padded = lines[len(FLOWS):]
    assert malformed.startswith("2|")  # the cut-short danmaku is still shown
    assert not any(line.strip("|") for line in (dns, zeros, tcp))
    # Wireshark dissects the datagram an ICMP error quotes, here a media message.
    assert icmp.startswith("1|") and padded.startswith("7|")


@needs_tshark
def test_wireshark_dissector_shows_frame_types_times_and_lists(capture):
    text = tshark("-r", str(capture), "-V", "-Y", "edgebed")
    assert "Frame type: I (1)" in text and "Frame type: P (2)" in text
    assert "UTC, " in text and "ms before capture)" in text
    assert "Indexes (2)" in text and "Indexes (3)" in text
    assert "Text: 弹幕 hello" in text
    assert "text_length says 12 bytes follow, 9 do" in text  # the cut-short danmaku
    assert "Lua Error" not in text


@needs_tshark
def test_wireshark_dissector_survives_fuzzed_datagrams(tmp_path):
    path = tmp_path / "fuzz.pcap"
    wrpcap(str(path), [datagram(STREAMER, VIEWER, data)
                       for data in protocols.fuzzed_datagrams(2000, seed=1)])
    text = tshark("-r", str(path), "-V")
    assert "edgebed media" in text and "Lua Error" not in text
