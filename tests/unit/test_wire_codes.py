"""A message's type code never changes once published and a retired code is never reused:
every message the agents declare is held to its package's wire_codes.json, so an old capture
always dissects as what it was."""

import sys

import pytest

import agents
from agents import wire
from agents.wire import MessageFormat


def test_every_shipped_message_has_its_published_code():
    published, retired = wire.published_codes()
    declared = {message.name: code for code, message in wire.formats().items()}
    assert declared == published, "a message changed its code, or was added or removed "\
        "without its package's wire_codes.json: published codes never change"
    assert not retired.keys() & set(published.values())


def test_published_codes_are_unique():
    published, retired = wire.published_codes()
    codes = list(published.values()) + list(retired)
    assert len(codes) == len(set(codes))
    assert all(0 < code < 256 for code in codes)  # the common header's type byte


def test_two_messages_sharing_a_code_or_a_name_are_refused(tmp_path, monkeypatch):
    package = tmp_path / "clash"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "formats.py").write_text(
        "from agents.wire import MessageFormat\n\n"
        "MESSAGES = (MessageFormat('beacon', 1, (('node', 'I'),)),)\n")
    monkeypatch.setattr(agents, "__path__", [*agents.__path__, str(tmp_path)])
    try:
        with pytest.raises(ValueError, match="agents.formats and agents.clash.formats both "
                                             "declare a message with type code 1"):
            wire.formats()
        (package / "formats.py").write_text(
            "from agents.wire import MessageFormat\n\n"
            "MESSAGES = (MessageFormat('media', 200, (('node', 'I'),)),)\n")
        sys.modules.pop("agents.clash.formats")
        with pytest.raises(ValueError, match="with the name 'media'"):
            wire.formats()
    finally:
        sys.modules.pop("agents.clash.formats", None)
        sys.modules.pop("agents.clash", None)


def test_a_message_is_recognised_only_among_those_expected():
    beacon = MessageFormat("beacon", 200, (("node", "I"),))
    data = beacon.pack(node=7)
    assert wire.message_type(data, (beacon,)) is beacon
    assert wire.message_type(data, wire.formats().values()) is None
    assert wire.message_type(data[:3], (beacon,)) is None
    assert wire.message_type(b"XX" + data[2:], (beacon,)) is None


def test_a_package_recording_another_packages_code_is_refused(tmp_path, monkeypatch):
    package = tmp_path / "clash"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "formats.py").write_text("MESSAGES = ()\n")
    (package / "wire_codes.json").write_text('{"published": {"beacon": 1}, "retired": {}}')
    monkeypatch.setattr(agents, "__path__", [*agents.__path__, str(tmp_path)])
    try:
        with pytest.raises(ValueError, match=r"records \['1'\] another package's"):
            wire.published_codes()
    finally:
        sys.modules.pop("agents.clash.formats", None)
        sys.modules.pop("agents.clash", None)
