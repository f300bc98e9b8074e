"""The Wireshark dissector is generated from agents/formats.py (agents.dissector); the committed
file must be what the generator makes. tests/unit/test_pcap.py decodes real captures with it."""

import dataclasses

import pytest

from agents import dissector, formats


def test_the_committed_dissector_is_the_generators_output():
    assert dissector.OUTPUT.read_text() == dissector.lua(), (
        "agents/wireshark/edgebed.lua is out of date: run `make dissector`")
    assert dissector.main(["--check"]) == 0


def test_every_field_of_every_format_is_in_the_dissector():
    text = dissector.lua()
    for code, message in formats.FORMATS.items():
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
    extra = formats.MessageFormat("beacon", 13, (("node", "I"), ("send_ns", "Q")), "payload",
                                  "padding")
    monkeypatch.setattr(formats, "FORMATS", formats.FORMATS | {13: extra})
    text = dissector.lua()
    assert ('[13] = {name = "beacon", fields = {{"node", "u32"}, {"send_ns", "time"}},'
            in text)
    assert dissector.main(["--check"]) == 1


def test_fields_the_dissector_cannot_show_are_refused(monkeypatch):
    odd = dataclasses.replace(formats.GIFT, fields=(("user", "f"),))
    monkeypatch.setattr(formats, "FORMATS", {3: odd})
    with pytest.raises(ValueError, match="no dissector kind for struct code 'f'"):
        dissector.lua()
    with pytest.raises(ValueError, match="timestamp field send_ns must be a u64"):
        dissector.field_kind("send_ns", "I")
