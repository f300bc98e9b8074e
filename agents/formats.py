"""The wire formats of edgebed's protocols: one declarative table, used two ways."""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

MAGIC = b"EB"
VERSION = 1
COMMON = struct.Struct("!2sBB")


@dataclass(frozen=True)
class MessageFormat:
    """One message: its type code, the fixed fields after the common bytes (name, struct
    code) and, for messages with a variable tail, what the tail is."""

    name: str
    type: int
    fields: tuple[tuple[str, str], ...]
    tail: str = ""  # "", "payload", "text", "u16 list"
    tail_name: str = ""  # what the tail is called (Scapy field, dissector)
    tail_size: str = ""  # the fixed field giving the tail's length or count; "": to the end

    @functools.cached_property
    def struct(self) -> struct.Struct:
        return struct.Struct("!2sBB" + "".join(code for _, code in self.fields))

    @property
    def header_size(self) -> int:
        return self.struct.size

    def field_offset(self, name: str) -> int:
        """Byte offset of a fixed field, for patching it in place in a preallocated buffer."""
        codes = "!2sBB"
        for field_name, code in self.fields:
            if field_name == name:
                return struct.calcsize(codes)
            codes += code
        raise KeyError(name)

    def pack(self, **values) -> bytes:
        return self.struct.pack(MAGIC, VERSION, self.type,
                                *(values[name] for name, _ in self.fields))

    def unpack(self, data) -> dict:
        magic, version, kind, *values = self.struct.unpack_from(data)
        if magic != MAGIC or version != VERSION or kind != self.type:
            raise ValueError(f"not a {self.name} message")
        return dict(zip((name for name, _ in self.fields), values))


MEDIA = MessageFormat("media", 1, (
    ("stream", "I"), ("sequence", "I"), ("send_ns", "Q"), ("frame", "I"), ("frame_type", "B"),
    ("rung", "B"), ("fragment", "H"), ("fragments", "H"), ("bitrate_kbps", "I")), "payload",
    "payload")
DANMAKU = MessageFormat("danmaku", 2, (
    ("user", "I"), ("room", "I"), ("sequence", "I"), ("send_ns", "Q"), ("text_length", "H")),
    "text", "text", "text_length")
GIFT = MessageFormat("gift", 3, (
    ("user", "I"), ("room", "I"), ("sequence", "I"), ("send_ns", "Q"), ("gift", "H"),
    ("value_cents", "I")))
AI_DATA = MessageFormat("ai_data", 4, (
    ("stream", "I"), ("unit", "I"), ("fragment", "H"), ("fragments", "H"), ("length", "H"),
    ("send_ns", "Q")), "payload", "data", "length")
AI_NACK = MessageFormat("ai_nack", 7, (("stream", "I"), ("unit", "I"), ("count", "H")),
                        "u16 list", "indexes", "count")
REQUEST = MessageFormat("request", 8, (
    ("request", "I"), ("client", "I"), ("content", "I"), ("send_ns", "Q"),
    ("response_bytes", "I")), "payload", "padding")
RESPONSE = MessageFormat("response", 9, (
    ("request", "I"), ("server", "I"), ("content", "I"), ("request_send_ns", "Q"),
    ("service_ns", "Q")), "payload", "payload")
PULL = MessageFormat("pull", 10, (
    ("stream", "I"), ("delivered_stream", "I"), ("user", "I"), ("send_ns", "Q"),
    ("bitrate_kbps", "I"), ("rung", "B")))

CDN = MessageFormat("cdn", 11, (
    ("kind", "B"), ("flags", "B"), ("hops", "B"), ("entry", "B"), ("request", "I"),
    ("client", "I"), ("client_port", "H"), ("content", "I"), ("send_ns", "Q"),
    ("deliver", "I"), ("deliver_port", "H"), ("copy_to", "I"), ("copy_port", "H")), "payload",
    "payload")
FILTER_UPDATE = MessageFormat("filter_update", 12, (("node", "H"), ("filter_version", "I")),
                              "payload", "delta")
GPU_REQUEST = MessageFormat("gpu_request", 13, (("stream", "I"), ("unit", "I"),
                                                ("unit_bytes", "I")))
GPU_GRANT = MessageFormat("gpu_grant", 14, (
    ("stream", "I"), ("unit", "I"), ("sequence", "I"), ("gpu", "I"), ("gpu_port", "H")))
AI_UNIT = MessageFormat("ai_unit", 15, (
    ("stream", "I"), ("unit", "I"), ("sequence", "I"), ("length", "I")), "payload", "data",
    "length")
LOOKUP_QUERY = MessageFormat("lookup_query", 16, (
    ("lookup", "I"), ("stream", "I"), ("attempt", "B"), ("send_ns", "Q")))
LOOKUP_REPLY = MessageFormat("lookup_reply", 17, (
    ("lookup", "I"), ("stream", "I"), ("attempt", "B"), ("found", "B"), ("node", "I"),
    ("query_send_ns", "Q")))

FORMATS = {f.type: f for f in (MEDIA, DANMAKU, GIFT, AI_DATA, AI_NACK, REQUEST, RESPONSE,
                               PULL, CDN, FILTER_UPDATE, GPU_REQUEST, GPU_GRANT, AI_UNIT,
                               LOOKUP_QUERY, LOOKUP_REPLY)}
CDN_KINDS = {1: "route", 2: "fetch", 3: "item"}
FRAME_TYPES = {1: "I", 2: "P"}
LOOKUP_FOUND = {0: "not here", 1: "found"}
# What a field means beyond its size, for the Wireshark dissector (agents/dissector.py):
# timestamps (CLOCK_REALTIME ns, shown with their date and age) and fields with named values.
TIMESTAMP_FIELDS = frozenset({"send_ns", "request_send_ns", "query_send_ns"})
NAMED_VALUES = {"frame_type": FRAME_TYPES, "kind": CDN_KINDS, "found": LOOKUP_FOUND}


def message_type(data) -> MessageFormat | None:
    """The format of ``data`` from its common bytes, or None for anything else."""
    if len(data) < COMMON.size:
        return None
    magic, version, kind = COMMON.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        return None
    return FORMATS.get(kind)


def pack_u16_list(values) -> bytes:
    return struct.pack(f"!{len(values)}H", *values)


def unpack_u16_list(data, offset: int, count: int) -> list[int]:
    """``count`` u16 values from ``offset``; ValueError when the datagram is too short."""
    if len(data) < offset + 2 * count:
        raise ValueError(f"list of {count} entries runs past the end of the message")
    return list(struct.unpack_from(f"!{count}H", data, offset))
