"""Which wire relay a run starts (topologies.impairments.relay.relay_engine): the compiled one
when it is built, the Python one when asked or when it is not built (said on stderr), and an
error when the compiled one is asked for and missing."""

from __future__ import annotations

import pytest

from topologies.impairments import relay


@pytest.fixture
def built(tmp_path, monkeypatch):
    binary = tmp_path / "edgebed-wire-relay"
    monkeypatch.setattr(relay, "COMPILED_RELAY", binary)
    monkeypatch.setattr(relay, "_warned_python", False)
    monkeypatch.delenv(relay.RELAY_ENGINE_KEY, raising=False)
    return binary


def build(binary):
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)


def test_the_compiled_relay_is_used_when_built(built):
    build(built)
    assert relay.relay_engine() == ["--compiled", str(built)]


def test_python_is_used_when_asked_even_if_built(built, monkeypatch):
    build(built)
    monkeypatch.setenv(relay.RELAY_ENGINE_KEY, "python")
    assert relay.relay_engine() == []


def test_not_built_falls_back_to_python_loudly_once(built, capsys):
    assert relay.relay_engine() == []
    assert "compiled relay is not built" in capsys.readouterr().err
    assert relay.relay_engine() == []
    assert capsys.readouterr().err == ""


def test_asking_for_the_missing_compiled_relay_is_an_error(built, monkeypatch):
    monkeypatch.setenv(relay.RELAY_ENGINE_KEY, "compiled")
    with pytest.raises(RuntimeError, match="not built"):
        relay.relay_engine()
    monkeypatch.setenv(relay.RELAY_ENGINE_KEY, "fast")
    with pytest.raises(ValueError, match="python or compiled"):
        relay.relay_engine()
