"""The wire formats of edgebed's protocols: one declarative table, used two ways.

The agents' hot paths pack and unpack these headers with :mod:`struct` (Scapy is far too slow
per packet); :mod:`agents.protocols` builds Scapy layers from the same table for building
templates, dissecting captures and fuzzing. A test checks the two agree byte for byte.

Every message starts with the same four bytes: magic ``b"EB"``, version (1) and a message
type; numbers are big-endian (network order). Timestamps are nanoseconds since the epoch on
CLOCK_REALTIME, which all hosts of a run share, so one-way delay is receive time minus the
timestamp.

=====================  ====  ===========================================================
message                type  fields after the common four bytes (then the payload)
=====================  ====  ===========================================================
media                     1  stream u32, sequence u32, send_ns u64, frame u32,
                             frame_type u8 (1 I, 2 P), rung u8, fragment u16,
                             fragments u16, bitrate_kbps u32
danmaku                   2  user u32, room u32, sequence u32, send_ns u64, text_length
                             u16, then UTF-8 text
gift                      3  user u32, room u32, sequence u32, send_ns u64, gift u16,
                             value_cents u32
ai_data                   4  stream u32, unit u32, fragment u16, fragments u16, length u16,
                             send_ns u64, then ``length`` payload bytes
ai_nack                   7  stream u32, unit u32, count u16 (Rtr_Pkt_N), then count
                             fragment indexes u16
request                   8  request u32, client u32, content u32, send_ns u64,
                             response_bytes u32, then padding (seed 002's 60 B requests)
response                  9  request u32, server u32, content u32, request_send_ns u64,
                             service_ns u64, then padding to the size asked for
pull                     10  stream u32, delivered_stream u32, user u32, send_ns u64,
                             bitrate_kbps u32, rung u8
cdn                      11  kind u8 (1 route, 2 fetch, 3 item), flags u8, hops u8,
                             entry u8, request u32, client u32, client_port u16, content
                             u32, send_ns u64, deliver u32, deliver_port u16, copy_to u32,
                             copy_port u16, then padding or the item's bytes
filter_update            12  node u16, filter_version u32, then the deflated XOR of the filter's
                             bits since the previous version
gpu_request              13  stream u32, unit u32, unit_bytes u32
gpu_grant                14  stream u32, unit u32, sequence u32, gpu u32 (IPv4), gpu_port u16
ai_unit                  15  stream u32, unit u32, sequence u32, length u32, then ``length``
                             unit bytes
lookup_query             16  lookup u32, stream u32, attempt u8, send_ns u64
lookup_reply             17  lookup u32, stream u32, attempt u8, found u8, node u32 (IPv4),
                             query_send_ns u64
=====================  ====  ===========================================================

A tail whose size a fixed field gives (text_length, length, count) ends there; bytes after it
are padding and ignored. Types 5 and 6 are retired (they were AI load and access messages on
the data plane; load reports travel on the management network as the control protocol's
``load``, :mod:`edgebed.protocol`) and are not reused, so old captures do not dissect as
something else.

A pull is a viewer asking an edge for a live stream (:mod:`agents.live_edge`), sent again
every few hundred milliseconds for as long as it wants it: source ``stream`` transcoded to
``bitrate_kbps`` (ladder index ``rung``), its media packets carrying ``delivered_stream`` as
their stream id, so that a viewer can measure each of its decisions as a flow of its own.

A cdn message is seed 002's traffic between content nodes and the data center
(:mod:`agents.bloom_cdn_node`): a user's request routed over the Chord ring toward its home node
(``route``), a fetch from the data center (``fetch``: the item goes to ``deliver``, and a second
copy to ``copy_to`` when it is not zero) and an item sent to a node (``item``); ``client`` and
``client_port`` say whose request it is and ``send_ns`` when the user sent it. A filter update
is a node's Bloom-filter synchronisation to another node.

Seed 003's hand-over of AI data units to the GPU servers: an access server that completed a
unit asks the cluster manager where it goes (``gpu_request``, on the side band), the manager
answers with the GPU server whose turn it is (``gpu_grant``: its data-plane address and port,
and the grant's number in the rotation, :class:`agents.ai_gpu.GpuRotation`), and the
access server sends the unit there on the data plane (``ai_unit``, over TCP: the unit whole).

Seed 001's back-to-source lookup between dispatch centers (:mod:`agents.dispatch_center`): a
center that does not know ``stream`` asks another (``lookup_query``: its lookup's number, and
``attempt`` 0 for the first query, 1, 2, ... for retransmissions), which answers whether the
stream is registered with it and on which media node (``lookup_reply``: ``found`` 1 or 0,
``node`` 0 when not), echoing the query's attempt and send time so the asker times each reply.
"""

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
