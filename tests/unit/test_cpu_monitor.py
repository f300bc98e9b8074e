"""The CPU monitor samples on its own schedule, whatever the thread that started it does."""

import time

from experiments import measurements


def test_samples_keep_coming_while_the_caller_is_busy():
    monitor = measurements.CpuMonitor(period_s=0.05)
    monitor.start()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # the caller never yields on its own
        sum(range(1000))
    monitor.stop()
    # 20 periods passed; a monitor sampled by its caller would have one sample here.
    assert len(monitor.samples) >= 5
    assert all(0.0 <= busy <= 1.0 for _, busy in monitor.samples)


def test_a_long_wait_between_samples_is_a_stall(monkeypatch):
    readings = iter([0.0, 0.0, 1.0, 2.0, 6.5, 7.5])  # construction, then five samples
    monkeypatch.setattr(measurements.clock, "monotonic", lambda: next(readings))
    monitor = measurements.CpuMonitor(period_s=1.0)
    for _ in range(5):
        monitor.sample()
    assert monitor.stalled_at() == 2.0
    assert round(monitor.longest_gap_s, 1) == 4.5


def test_regular_samples_are_no_stall(monkeypatch):
    readings = iter([0.0, 0.0, 1.0, 2.0, 3.1])
    monkeypatch.setattr(measurements.clock, "monotonic", lambda: next(readings))
    monitor = measurements.CpuMonitor(period_s=1.0)
    for _ in range(4):
        monitor.sample()
    assert monitor.stalled_at() is None
