"""The timeline's end as the run's processes see it, and the senders' lateness that stops there."""

from __future__ import annotations

from agents import pacing
from edgebed import clock, timeline

MS = 1_000_000


def test_the_environment_carries_the_end_and_none_means_no_timeline():
    assert timeline.end_ns(timeline.environment(123_456_789)) == 123_456_789
    assert timeline.end_ns({}) is None


def test_a_pacer_reads_the_end_its_process_was_started_with(monkeypatch):
    monkeypatch.setenv(timeline.END_ENV, "987654321")
    assert pacing.Pacer().timeline_end_ns == 987_654_321
    monkeypatch.delenv(timeline.END_ENV)
    assert pacing.Pacer().timeline_end_ns is None


def test_lateness_is_kept_only_for_deadlines_before_the_end():
    """Packets due at or after the end are still paced, but how late they left is teardown's
    doing and stays out of ``sender_lateness``."""
    start = clock.monotonic_ns() + MS
    deadlines = [start + index * MS for index in range(10)]
    pacer = pacing.Pacer(timeline_end_ns=deadlines[6])
    for deadline in deadlines:
        pacer.wait_until(deadline)
        assert clock.monotonic_ns() >= deadline
    assert len(pacer.lateness_ns) == 6


def test_without_a_timeline_every_deadline_counts():
    start = clock.monotonic_ns() + MS
    pacer = pacing.Pacer(timeline_end_ns=None)
    for index in range(5):
        pacer.wait_until(start + index * MS)
    assert len(pacer.lateness_ns) == 5
