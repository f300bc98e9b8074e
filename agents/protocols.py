"""Scapy layers for edgebed's messages, generated from the wire-format table
(:func:`agents.wire.formats`), for building templates, dissecting captures and fuzzing
listeners."""

from __future__ import annotations

import random

from scapy.fields import (ByteEnumField, ByteField, FieldLenField, FieldListField, IntField,
                          LongField, ShortField, StrFixedLenField, StrLenField)
from scapy.packet import Packet, fuzz

from agents import wire

FIXED_FIELDS = {"I": IntField, "H": ShortField, "B": ByteField, "Q": LongField}
FORMATS = wire.formats()
MESSAGE_NAMES = {code: message.name for code, message in FORMATS.items()}
# The tails whose size a fixed field gives: the tail's Scapy field and that size field (media
# and response payloads have no size: they run to the end).
SIZED_TAILS = {f.name: (f.tail_name, f.tail_size) for f in FORMATS.values()
               if f.tail_size}
TAIL_ENTRY_BYTES = {"payload": 1, "text": 1, "u16 list": 2}
MAX_LIST_ENTRIES = 0xFFFF  # a u16 count; Scapy's own limit (conf.max_list_count) is 100


def _size_field(message: wire.MessageFormat, name: str, code: str) -> FieldLenField:
    """A fixed field giving the size of the message's tail: computed from the tail on build
    when left at None."""
    tail, _ = SIZED_TAILS[message.name]
    counted = "count_of" if message.tail == "u16 list" else "length_of"
    return FieldLenField(name, None, fmt=code, **{counted: tail})


def _fixed_field(message: wire.MessageFormat, name: str, code: str):
    if SIZED_TAILS.get(message.name, (None, None))[1] == name:
        return _size_field(message, name, code)
    if name in message.named_values:
        return ByteEnumField(name, 0, dict(message.named_values[name]))
    return FIXED_FIELDS[code](name, 0)


def _tail_field(message: wire.MessageFormat):
    """The Scapy field of a sized tail, as long as its size field says."""
    tail, size = SIZED_TAILS[message.name]
    size_of = (lambda packet: packet.getfieldval(size))
    if message.tail == "u16 list":
        return FieldListField(tail, None, ShortField(tail, 0), count_from=size_of,
                              max_count=MAX_LIST_ENTRIES)
    return StrLenField(tail, b"", length_from=size_of)


def message_layer(message: wire.MessageFormat) -> type[Packet]:
    """The Scapy layer of one message of the table; the class's ``wire_format`` is the
    message's :class:`~agents.wire.MessageFormat`."""
    fields_desc = [StrFixedLenField("magic", wire.MAGIC, len(wire.MAGIC)),
                   ByteField("version", wire.VERSION),
                   ByteEnumField("type", message.type, MESSAGE_NAMES)]
    fields_desc += [_fixed_field(message, name, code) for name, code in message.fields]
    if message.name in SIZED_TAILS:
        fields_desc.append(_tail_field(message))
    class_name = "".join(part.capitalize() for part in message.name.split("_"))
    layer = type(class_name, (Packet,), {
        "name": f"edgebed {message.name}", "fields_desc": fields_desc, "wire_format": message,
        "__doc__": f"The edgebed {message.name} message (type {message.type})."})
    # A field named like a Packet method (media's and ai_data's ``fragment``) reads as the
    # method; a property makes it read as the field (setting it already works). Added after the
    # class is made, because Scapy takes a class attribute named like a field for its default.
    for field in fields_desc:
        if hasattr(Packet, field.name):
            setattr(layer, field.name, property(lambda packet, name=field.name:
                                                packet.getfieldval(name)))
    return layer


LAYERS: dict[int, type[Packet]] = {code: message_layer(message)
                                   for code, message in FORMATS.items()}


def layer(name: str) -> type[Packet]:
    """The Scapy layer of the message called ``name``."""
    return next(found for found in LAYERS.values() if found.wire_format.name == name)


def dissect(data: bytes) -> Packet | None:
    """The message in a UDP payload, or None when ``data`` is not a complete edgebed message
    (other magic or version, unknown type, shorter than its fixed fields, or a sized tail
    running past the end). Bytes after a sized tail dissect as ``Raw``."""
    message = wire.message_type(data, FORMATS.values())
    if message is None or len(data) < message.header_size:
        return None
    if message.name in SIZED_TAILS:
        _, size = SIZED_TAILS[message.name]
        tail_bytes = message.unpack(data)[size] * TAIL_ENTRY_BYTES[message.tail]
        if len(data) < message.header_size + tail_bytes:
            return None
    return LAYERS[message.type](bytes(data))


def _fuzzed(layer: type[Packet]) -> bytes:
    message = layer.wire_format
    # The common bytes stay right, so the datagram gets past the magic check into the parser.
    explicit = {"magic": wire.MAGIC, "version": wire.VERSION, "type": message.type}
    if message.tail == "u16 list":
        # fuzz() would leave the list empty (it draws one number for a list field).
        explicit[SIZED_TAILS[message.name][0]] = [random.randrange(0x10000)
                                                  for _ in range(random.randrange(64))]
    return bytes(fuzz(layer(**explicit)))


def _truncated(layer: type[Packet]) -> bytes:
    whole = _fuzzed(layer)
    return whole[:random.randrange(len(whole))]


def _garbled(layer: type[Packet]) -> bytes:
    message = layer.wire_format
    common = wire.COMMON.pack(wire.MAGIC, wire.VERSION, message.type)
    return common + random.randbytes(random.randrange(message.header_size + 16))


def _random(_layer: type[Packet]) -> bytes:
    return random.randbytes(random.randrange(64))


# What a round of the fuzzer sends for each message: Scapy's fuzz() of the message, the same cut
# short, its common bytes followed by random bytes, and random bytes (mostly not edgebed).
FUZZ_VARIANTS = (_fuzzed, _truncated, _garbled, _random)


def fuzzed_datagrams(count: int, seed: int) -> list[bytes]:
    """``count`` datagrams for robustness tests of listening agents, the same for the same
    seed: every message in turn, each in every :data:`FUZZ_VARIANTS` in turn."""
    # Scapy's random values (RandNum and friends) draw from the random module's global
    # generator, so seeding it makes them reproducible; the caller's state is put back.
    saved = random.getstate()
    random.seed(seed)
    try:
        layers = list(LAYERS.values())
        return [FUZZ_VARIANTS[(index // len(layers)) % len(FUZZ_VARIANTS)](
                    layers[index % len(layers)])
                for index in range(count)]
    finally:
        random.setstate(saved)
