"""What ends a thread an app started (``hub.spawn``, ``hub.spawn_after``, ``threading.Thread``)
is recorded once, on behalf of the app; the framework's own threads are left alone."""

from __future__ import annotations

import threading

import pytest

from controller import thread_errors
from controller.ryu_api import hub


class Recorded(list):
    def __call__(self, app, text, logger):
        self.append((app, text, logger.name))


@pytest.fixture
def recorded(monkeypatch):
    """The hooks installed for the test alone, recording into the list returned."""
    for name in ("spawn", "spawn_after"):
        monkeypatch.setattr(hub, name, getattr(hub, name))
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    found = Recorded()
    thread_errors.watch(hub, found)
    return found


def fails():
    raise ZeroDivisionError("this thread fails")


class Monitor:
    """Stands for a user's app whose method runs in a thread."""

    def poll(self):
        fails()


def test_a_hub_thread_that_raises_is_recorded_with_its_traceback(recorded):
    hub.spawn(Monitor().poll).join()
    [(app, text, logger)] = recorded
    assert app == "Monitor" and logger == __name__
    assert text.startswith("hub thread Monitor.poll of Monitor raised\n")
    assert "Traceback (most recent call last)" in text
    assert "ZeroDivisionError: this thread fails" in text


def test_a_timer_is_recorded_once(recorded):
    hub.spawn_after(0, fails).join()
    [(app, text, _)] = recorded
    assert app == __name__ and "hub thread fails of" in text


def test_a_python_thread_is_recorded_under_its_name(recorded):
    thread = threading.Thread(target=fails, name="poller")
    thread.start()
    thread.join()
    [(app, text, _)] = recorded
    assert app == __name__ and text.startswith(f"thread poller of {__name__} raised\n")
    assert "ZeroDivisionError: this thread fails" in text


def test_the_frameworks_own_threads_are_left_alone(recorded):
    framework = {"__name__": "os_ken.controller.example", "hub": hub, "fails": fails}
    exec("thread = hub.spawn(fails)", framework)
    framework["thread"].join()
    assert recorded == []


def test_a_thread_that_returns_records_nothing(recorded):
    hub.spawn(lambda: None).join()
    assert recorded == []
