"""Per-flow summaries of the edgebed messages in packet captures (pcap or pcapng, as tcpdump
writes them in a run's hosts), for ``edgebed pcap summarize``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text
from scapy.error import Scapy_Exception
from scapy.layers.inet import UDP
from scapy.utils import PcapReader

from agents import probe, protocols, wire

# The field telling a message's flows apart (with its source and destination).
FLOW_KEYS = {"media": "stream", "danmaku": "user", "gift": "user", "ai_data": "stream",
             "ai_nack": "stream",
             "request": "client", "response": "server", "pull": "user", "probe": "flow"}
# The field grouping fragments into the unit they make up, for messages that have fragments.
FRAGMENT_UNITS = {"media": "frame", "ai_data": "unit"}
MESSAGE_ORDER = [message.name for message in protocols.FORMATS.values()] + ["probe"]
OTHER_PACKETS = ("malformed", "other udp", "not udp")
UDP_HEADER_BYTES = 8
EXIT_UNREADABLE = 2  # edgebed's exit code for invalid input


class CaptureError(Exception):
    """A capture file that is missing, unreadable, or not pcap or pcapng."""


@dataclass
class Flow:
    """What the capture holds of one flow (or of one of :data:`OTHER_PACKETS`)."""

    packets: int = 0
    bytes: int = 0
    first_time: float | None = None
    last_time: float | None = None
    sequences: set[int] | None = None
    duplicates: int = 0
    # unit -> [fragments the unit announces, distinct fragment indexes seen]
    units: dict[int, list] | None = None

    def add(self, time: float, size: int) -> None:
        self.packets += 1
        self.bytes += size
        self.first_time = time if self.first_time is None else self.first_time
        self.last_time = time

    def add_sequence(self, sequence: int) -> None:
        self.sequences = set() if self.sequences is None else self.sequences
        if sequence in self.sequences:
            self.duplicates += 1
        self.sequences.add(sequence)

    def add_fragment(self, unit: int, fragment: int, fragments: int) -> None:
        self.units = {} if self.units is None else self.units
        announced, seen = self.units.setdefault(unit, [fragments, set()])
        # Fragments of one unit should all announce the same count; take the largest if not.
        self.units[unit][0] = max(announced, fragments)
        seen.add(fragment)

    def figures(self) -> dict:
        """The flow's row, without its identity: None where the message has no such figure."""
        row = {"packets": self.packets, "bytes": self.bytes, "first_time": self.first_time,
               "last_time": self.last_time, "sequence_first": None, "sequence_last": None,
               "missing": None, "gaps": None, "duplicates": None, "units": None,
               "units_complete": None, "fragments_seen": None, "fragments_expected": None}
        if self.sequences:
            ordered = sorted(self.sequences)
            row |= {"sequence_first": ordered[0], "sequence_last": ordered[-1],
                    "missing": ordered[-1] - ordered[0] + 1 - len(ordered),
                    "gaps": sum(1 for low, high in zip(ordered, ordered[1:]) if high - low > 1),
                    "duplicates": self.duplicates}
        if self.units:
            row |= {"units": len(self.units),
                    "units_complete": sum(1 for announced, seen in self.units.values()
                                          if len(seen) >= announced),
                    "fragments_seen": sum(len(seen) for _, seen in self.units.values()),
                    "fragments_expected": sum(announced for announced, _ in self.units.values())}
        return row


def message_fields(payload: bytes) -> tuple[str, dict] | None:
    """The message type and field values of a UDP payload, or None if it is neither an edgebed
    message nor a probe packet."""
    header = probe.decode(payload)
    if header is not None:
        return "probe", {"flow": header.flow, "sequence": header.sequence}
    packet = protocols.dissect(payload)
    if packet is None:
        return None
    return packet.wire_format.name, packet.fields


def _endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def summarize(path: str | Path) -> list[dict]:
    """One row per flow of edgebed messages in the capture at ``path`` (in the table's message
    order, then by source, destination and flow), then one per :data:`OTHER_PACKETS`; times are
    seconds since the epoch. Raises :class:`CaptureError` for a file it cannot read."""
    flows: dict[tuple, Flow] = {}
    others = {kind: Flow() for kind in OTHER_PACKETS}
    try:
        with PcapReader(str(path)) as reader:
            for packet in reader:
                time = float(packet.time)
                udp = packet.getlayer(UDP)  # not ICMP's quotes of UDP headers (UDPerror)
                if udp is None:
                    others["not udp"].add(time, len(packet))
                    continue
                # Scapy appends the padding of short Ethernet frames to the payload; the UDP
                # length leaves it out.
                payload = bytes(udp.payload)[:max(udp.len - UDP_HEADER_BYTES, 0)]
                message = message_fields(payload)
                if message is None:
                    starts_like_one = (
                        wire.message_type(payload, protocols.FORMATS.values()) is not None
                        or payload.startswith(probe.MAGIC))
                    kind = "malformed" if starts_like_one else "other udp"
                    others[kind].add(time, len(payload))
                    continue
                name, values = message
                ip = udp.underlayer
                key = (name, _endpoint(ip.src, udp.sport), _endpoint(ip.dst, udp.dport),
                       values[FLOW_KEYS[name]])
                flow = flows.setdefault(key, Flow())
                flow.add(time, len(payload))
                if "sequence" in values:
                    flow.add_sequence(values["sequence"])
                if name in FRAGMENT_UNITS:
                    flow.add_fragment(values[FRAGMENT_UNITS[name]], values["fragment"],
                                      values["fragments"])
    except (OSError, Scapy_Exception) as error:
        raise CaptureError(f"{path}: {_reason(error)}") from None
    rows = []
    for key in sorted(flows, key=lambda key: (MESSAGE_ORDER.index(key[0]), *key[1:])):
        name, source, destination, flow_value = key
        rows.append({"message": name, "source": source, "destination": destination,
                     "flow": f"{FLOW_KEYS[name]} {flow_value}"} | flows[key].figures())
    rows += [{"message": kind, "source": None, "destination": None, "flow": None}
             | others[kind].figures() for kind in OTHER_PACKETS]
    return rows


def _reason(error: Exception) -> str:
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return "not a pcap or pcapng capture"


def _sequence_cell(row: dict) -> str:
    if row["sequence_first"] is None:
        return ""
    text = f"{row['sequence_first']}–{row['sequence_last']}"
    if row["missing"]:
        text += f", {row['missing']} missing in {row['gaps']} gap{'s' if row['gaps'] > 1 else ''}"
    if row["duplicates"]:
        text += f", {row['duplicates']} duplicate{'s' if row['duplicates'] > 1 else ''}"
    return text


def _fragments_cell(row: dict) -> str:
    if row["units"] is None:
        return ""
    return (f"{row['units_complete']}/{row['units']} {FRAGMENT_UNITS[row['message']]}s "
            f"complete, {row['fragments_seen']}/{row['fragments_expected']} fragments")


def table(path: str, rows: list[dict]) -> Table:
    """The rows of one capture as a rich table; times in seconds since the capture's
    first packet."""
    starts = [row["first_time"] for row in rows if row["first_time"] is not None]
    start = min(starts) if starts else 0.0
    result = Table(title=Text(str(path)), title_justify="left")
    for column in ("message", "flow", "source → destination", "packets", "bytes", "seconds",
                   "sequence", "fragments"):
        # Folded rather than cut short: every figure stays readable in a narrow terminal.
        result.add_column(column, overflow="fold",
                          justify="right" if column in ("packets", "bytes") else "left")
    for row in rows:
        path_cell = f"{row['source']} → {row['destination']}" if row["source"] else ""
        seconds = (f"{row['first_time'] - start:.3f}–{row['last_time'] - start:.3f}"
                   if row["first_time"] is not None else "")
        cells = (row["message"], row["flow"] or "", path_cell, str(row["packets"]),
                 str(row["bytes"]), seconds, _sequence_cell(row), _fragments_cell(row))
        # Text, not markup: an IPv6 endpoint such as [fe80::1]:5000 looks like a markup tag.
        result.add_row(*(Text(cell) for cell in cells))
    return result


def print_summaries(paths: list[str], as_json: bool, out: Console, errors: Console) -> int:
    """``edgebed pcap summarize``: each capture's :func:`summarize` as a table on ``out``, or
    all as one JSON object by file name; 2 if a file could not be read (said on ``errors``),
    else 0."""
    summaries = {}
    status = 0
    for path in paths:
        try:
            summaries[path] = summarize(path)
        except CaptureError as error:
            errors.print(str(error), markup=False, highlight=False, emoji=False,
                         soft_wrap=True)
            status = EXIT_UNREADABLE
    if as_json:
        out.file.write(json.dumps(summaries, indent=2) + "\n")
    else:
        for path, rows in summaries.items():
            out.print(table(path, rows))
    return status
