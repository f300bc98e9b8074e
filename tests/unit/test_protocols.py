"""The Scapy layers generated from the wire-format table (agents.protocols): they agree byte for
byte with the struct hot path, compute their sizes, and dissect anything without raising."""

from __future__ import annotations

import random

import pytest

from agents import formats, protocols, wire

# A tail for every message with one, as the Scapy field and as the bytes after the header.
TAILS = {"danmaku": ({"text": "弹幕 hello".encode()}, "弹幕 hello".encode()),
         "ai_data": ({"data": bytes(range(40))}, bytes(range(40))),
         "ai_nack": ({"indexes": [0, 7, 300]}, wire.pack_u16_list([0, 7, 300]))}
RAW_TAILS = {"media": bytes(range(200)), "response": bytes(1000)}
SIZE_FIELDS = {"text_length", "length", "count"}
MESSAGES = list(protocols.FORMATS.values())


def sample(name: str, code: str, index: int):
    """A distinct value for a fixed field that uses all of its width: (Scapy value, struct
    value)."""
    value = {"B": 0xF0, "H": 0xFEDC, "I": 0xFEDC_BA98, "Q": 0xFEDC_BA98_7654_3210}[code] - index
    if name == "frame_type":
        value = 2
    return value, value


def build(message: wire.MessageFormat):
    """A message built with Scapy from sample values (sizes left to Scapy), the field values
    the struct path packs, and the bytes after the header."""
    scapy_values, struct_values = {}, {}
    for index, (name, code) in enumerate(message.fields):
        scapy_values[name], struct_values[name] = sample(name, code, index)
    tail_fields, tail = TAILS.get(message.name, ({}, RAW_TAILS.get(message.name, b"")))
    for name in SIZE_FIELDS & scapy_values.keys():
        del scapy_values[name]
        struct_values[name] = len(tail) // protocols.TAIL_ENTRY_BYTES[message.tail]
    packet = protocols.LAYERS[message.type](**scapy_values, **tail_fields)
    if message.name in RAW_TAILS:
        packet = packet / tail
    return packet, struct_values, tail


@pytest.mark.parametrize("message", MESSAGES, ids=lambda message: message.name)
def test_scapy_bytes_are_the_struct_hot_path_bytes(message):
    packet, struct_values, tail = build(message)
    assert bytes(packet) == message.pack(**struct_values) + tail


@pytest.mark.parametrize("message", MESSAGES, ids=lambda message: message.name)
def test_struct_unpacks_what_scapy_builds(message):
    packet, struct_values, _ = build(message)
    assert message.unpack(bytes(packet)) == struct_values


@pytest.mark.parametrize("message", MESSAGES, ids=lambda message: message.name)
def test_dissect_gives_back_every_field(message):
    packet, struct_values, tail = build(message)
    dissected = protocols.dissect(bytes(packet))
    assert type(dissected) is type(packet) is protocols.LAYERS[message.type]
    for name, value in struct_values.items():
        assert dissected.getfieldval(name) == value, name
    for name, value in TAILS.get(message.name, ({}, b""))[0].items():
        assert dissected.getfieldval(name) == value
    if message.name in RAW_TAILS:
        assert dissected.load == tail
    assert bytes(dissected) == bytes(packet)


@pytest.mark.parametrize("name, size, tail, entries", [
    ("danmaku", "text_length", {"text": "ü".encode() * 5}, 10),
    ("ai_data", "length", {"data": bytes(1400)}, 1400),
    ("ai_nack", "count", {"indexes": list(range(1000))}, 1000),  # past Scapy's list limit
])
def test_sizes_are_computed_from_the_tail(name, size, tail, entries):
    layer = next(layer for layer in protocols.LAYERS.values() if layer.wire_format.name == name)
    built = bytes(layer(**tail))
    assert layer.wire_format.unpack(built)[size] == entries
    assert protocols.dissect(built).getfieldval(size) == entries
    # An explicit size is kept, even when it disagrees with the tail.
    assert layer.wire_format.unpack(bytes(layer(**{size: 3}, **tail)))[size] == 3


def test_layers_are_found_by_message_name():
    names = ["Media", "Danmaku", "Gift", "AiData", "AiNack", "Request", "Response", "Pull",
             "Cdn", "FilterUpdate", "GpuRequest", "GpuGrant", "AiUnit", "LookupQuery", "LookupReply",
             "MediaNack"]
    assert [layer.__name__ for layer in protocols.LAYERS.values()] == names
    for layer in protocols.LAYERS.values():
        assert protocols.layer(layer.wire_format.name) is layer
    assert protocols.layer("media").wire_format is formats.MEDIA


def test_fields_named_like_packet_methods_read_as_fields():
    packet = protocols.layer("media")(fragment=3, fragments=4)
    assert packet.fragment == 3
    packet.fragment = 5
    assert protocols.dissect(bytes(packet)).fragment == 5
    assert protocols.layer("ai_data")(fragment=2).fragment == 2


def test_frame_types_show_as_letters():
    assert protocols.layer("media")(frame_type=1).sprintf("%frame_type%") == "I"
    assert protocols.layer("media")(frame_type=2).sprintf("%frame_type%") == "P"


DANMAKU = bytes(protocols.layer("danmaku")(user=1, text=b"hello"))


@pytest.mark.parametrize("data", [
    b"", b"EB", b"EB\x01", b"XB\x01\x01" + bytes(40), b"EB\x02\x01" + bytes(40),
    b"EB\x01\x00" + bytes(40), b"EB\x01\x20" + bytes(40),  # unknown types
    bytes(protocols.layer("gift")())[:-1],  # shorter than its fixed fields
    DANMAKU[:-1],  # text shorter than text_length says
    bytes(protocols.layer("ai_nack")(indexes=[1, 2]))[:-1],
    bytes(protocols.layer("ai_data")(data=b"abc"))[:-1],
    b"EBPR" + bytes(20),  # a probe packet is not an edgebed message
], ids=repr)
def test_dissect_returns_none_for_anything_else(data):
    assert protocols.dissect(data) is None


def test_bytes_after_a_sized_tail_are_raw():
    dissected = protocols.dissect(DANMAKU + b"!!")
    assert dissected.text == b"hello" and dissected.load == b"!!"


def test_dissect_never_raises_on_fuzzed_datagrams():
    datagrams = protocols.fuzzed_datagrams(2000, seed=1)
    assert len(datagrams) == 2000
    dissected = [protocols.dissect(data) for data in datagrams]
    kinds = {packet.wire_format.name for packet in dissected if packet is not None}
    assert kinds == {message.name for message in MESSAGES}
    assert any(packet is None for packet in dissected)
    assert sum(wire.message_type(data, protocols.FORMATS.values()) is not None
               for data in datagrams) > 1000


def test_fuzzed_datagrams_depend_only_on_the_seed():
    random.seed(99)
    expected_next = random.random()
    random.seed(99)
    first = protocols.fuzzed_datagrams(200, seed=7)
    assert random.random() == expected_next  # the caller's random state is left alone
    assert protocols.fuzzed_datagrams(200, seed=7) == first
    assert protocols.fuzzed_datagrams(200, seed=8) != first
    assert protocols.fuzzed_datagrams(50, seed=7) == first[:50]
