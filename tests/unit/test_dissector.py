"""The Wireshark dissector is generated from the agents' wire formats (agents.dissector); the
committed file must be what the generator makes. tests/unit/test_pcap.py decodes real captures
with it."""

import dataclasses

import pytest

from agents import dissector, formats, wire


def test_the_committed_dissector_is_the_generators_output():
    assert dissector.OUTPUT.read_text() == dissector.lua(), (
        "agents/wireshark/edgebed.lua is out of date: run `make dissector`")
    assert dissector.main(["--check"]) == 0


def test_every_field_of_every_format_is_in_the_dissector():
    text = dissector.lua()
    for code, message in wire.formats().items():
        assert f'[{code}] = {{name = "{message.name}"' in text
        for name, _ in message.fields:
            assert f'{{"{name}", ' in text
        if message.tail:
            assert f'tail = {{"{message.tail_name}", "{dissector.TAILS[message.tail]}"' in text
    assert '{"send_ns", "time"}' in text and '{"service_ns", "u64"}' in text
    assert '{"frame_type", "u8", values = VALUE_NAMES.frame_type}' in text
    assert ('local VALUE_NAMES = {found = {[0] = "not here", [1] = "found"}, frame_type = '
            '{[1] = "I", [2] = "P"}, kind = {[1] = "route", [2] = "fetch", [3] = "item"}}' in text)
    assert '{"found", "u8", values = VALUE_NAMES.found}' in text


def test_a_format_added_in_python_appears_in_the_lua(monkeypatch):
    extra = wire.MessageFormat("beacon", 99, (("node", "I"), ("send_ns", "Q")), "payload",
                               "padding", timestamps=frozenset({"send_ns"}))
    text = dissector.lua(wire.formats() | {99: extra})
    assert ('[99] = {name = "beacon", fields = {{"node", "u32"}, {"send_ns", "time"}},'
            in text)
    assert text != dissector.OUTPUT.read_text()


def test_fields_the_dissector_cannot_show_are_refused():
    odd = dataclasses.replace(formats.GIFT, fields=(("user", "f"),))
    with pytest.raises(ValueError, match="no dissector kind for struct code 'f'"):
        dissector.lua({3: odd})
    with pytest.raises(ValueError, match="timestamp field send_ns must be a u64"):
        dissector.field_kind("send_ns", "I", timestamp=True)


def test_one_field_named_two_ways_is_refused():
    renamed = dataclasses.replace(formats.GIFT, fields=(("frame_type", "B"),),
                                  named_values={"frame_type": {1: "key", 2: "delta"}})
    with pytest.raises(ValueError, match="field frame_type has other value names"):
        dissector.lua({1: formats.MEDIA, 3: renamed})
