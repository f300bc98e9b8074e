"""The wire messages of the shared agents: live media, chat, requests and responses, pulls.

=====================  ====  ===========================================================
message                type  fields after the common four bytes (:mod:`agents.wire`)
=====================  ====  ===========================================================
media                     1  stream u32, sequence u32, send_ns u64, frame u32,
                             frame_type u8 (1 I, 2 P), rung u8, fragment u16,
                             fragments u16, bitrate_kbps u32, then the payload
danmaku                   2  user u32, room u32, sequence u32, send_ns u64, text_length
                             u16, then UTF-8 text
gift                      3  user u32, room u32, sequence u32, send_ns u64, gift u16,
                             value_cents u32
request                   8  request u32, client u32, content u32, send_ns u64,
                             response_bytes u32, then padding (seed 002's 60 B requests)
response                  9  request u32, server u32, content u32, request_send_ns u64,
                             service_ns u64, then padding to the size asked for
pull                     10  stream u32, delivered_stream u32, user u32, send_ns u64,
                             bitrate_kbps u32, rung u8
=====================  ====  ===========================================================

A pull is a viewer asking an edge for a live stream (:mod:`agents.edge_server`), sent again
every few hundred milliseconds for as long as it wants it: source ``stream`` transcoded to
``bitrate_kbps`` (ladder index ``rung``), its media packets carrying ``delivered_stream`` as
their stream id, so that a viewer can measure each of its decisions as a flow of its own.
"""

from __future__ import annotations

from agents.wire import MessageFormat

FRAME_TYPES = {1: "I", 2: "P"}

MEDIA = MessageFormat("media", 1, (
    ("stream", "I"), ("sequence", "I"), ("send_ns", "Q"), ("frame", "I"), ("frame_type", "B"),
    ("rung", "B"), ("fragment", "H"), ("fragments", "H"), ("bitrate_kbps", "I")), "payload",
    "payload", timestamps=frozenset({"send_ns"}), named_values={"frame_type": FRAME_TYPES})
DANMAKU = MessageFormat("danmaku", 2, (
    ("user", "I"), ("room", "I"), ("sequence", "I"), ("send_ns", "Q"), ("text_length", "H")),
    "text", "text", "text_length", timestamps=frozenset({"send_ns"}))
GIFT = MessageFormat("gift", 3, (
    ("user", "I"), ("room", "I"), ("sequence", "I"), ("send_ns", "Q"), ("gift", "H"),
    ("value_cents", "I")), timestamps=frozenset({"send_ns"}))
REQUEST = MessageFormat("request", 8, (
    ("request", "I"), ("client", "I"), ("content", "I"), ("send_ns", "Q"),
    ("response_bytes", "I")), "payload", "padding", timestamps=frozenset({"send_ns"}))
RESPONSE = MessageFormat("response", 9, (
    ("request", "I"), ("server", "I"), ("content", "I"), ("request_send_ns", "Q"),
    ("service_ns", "Q")), "payload", "payload", timestamps=frozenset({"request_send_ns"}))
PULL = MessageFormat("pull", 10, (
    ("stream", "I"), ("delivered_stream", "I"), ("user", "I"), ("send_ns", "Q"),
    ("bitrate_kbps", "I"), ("rung", "B")), timestamps=frozenset({"send_ns"}))

MESSAGES = (MEDIA, DANMAKU, GIFT, REQUEST, RESPONSE, PULL)
