"""The wire messages of the shared agents: live media, chat, requests and responses, pulls."""

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
# RFC 4585's generic NACK: the first missing sequence, and a bit for each of the 16 after it
# (bit 0: sequence + 1) that is missing too.
MEDIA_NACK = MessageFormat("media_nack", 18, (
    ("stream", "I"), ("sequence", "I"), ("following", "H"), ("send_ns", "Q")),
    timestamps=frozenset({"send_ns"}))

MESSAGES = (MEDIA, DANMAKU, GIFT, REQUEST, RESPONSE, PULL, MEDIA_NACK)
