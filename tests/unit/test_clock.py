"""The run's clock: virtual time at a dilation factor, its conversions, and its environment."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgebed import clock
from edgebed.clock import Clock

NS = st.integers(min_value=0, max_value=2**62)
DILATIONS = st.floats(min_value=1.0, max_value=1000.0, allow_nan=False)


@given(NS, NS, NS)
def test_undilated_readings_are_the_systems(realtime_epoch, monotonic_epoch, real):
    undilated = Clock(1.0, realtime_epoch, monotonic_epoch)
    assert undilated.virtual_realtime_ns(real) == real
    assert undilated.virtual_monotonic_ns(real) == real
    assert undilated.real_seconds(1.25) == 1.25


@given(DILATIONS, NS, st.integers(min_value=0, max_value=10**15))
def test_virtual_time_passes_n_times_slower_from_the_epoch(dilation, epoch, elapsed):
    dilated = Clock(dilation, epoch, epoch)
    assert dilated.virtual_realtime_ns(epoch) == epoch
    virtual = dilated.virtual_realtime_ns(epoch + elapsed)
    assert abs((virtual - epoch) * dilation - elapsed) <= dilation
    assert dilated.virtual_monotonic_ns(epoch + elapsed) == virtual


@given(DILATIONS, NS, st.integers(min_value=0, max_value=10**12),
       st.integers(min_value=0, max_value=10**12))
def test_dilated_readings_keep_their_order(dilation, epoch, earlier, later):
    dilated = Clock(dilation, epoch, epoch)
    first, second = sorted((earlier, later))
    assert (dilated.virtual_realtime_ns(epoch + first)
            <= dilated.virtual_realtime_ns(epoch + second))


@given(DILATIONS, st.floats(min_value=0, max_value=1e6))
def test_a_virtual_duration_lasts_n_times_longer_for_real(dilation, seconds):
    dilated = Clock(dilation, 0, 0)
    assert dilated.real_seconds(seconds) == pytest.approx(seconds * dilation)
    assert dilated.virtual_seconds(dilated.real_seconds(seconds)) == pytest.approx(seconds)


@given(DILATIONS, NS, NS)
def test_the_environment_carries_the_clock(dilation, realtime_epoch, monotonic_epoch):
    original = Clock(dilation, realtime_epoch, monotonic_epoch)
    assert Clock.from_environment(original.environment()) == original


def test_no_environment_is_the_undilated_clock():
    assert Clock.from_environment({}) == Clock()
    assert not Clock().dilated


@pytest.mark.parametrize("dilation", [0.5, 0.0, -2.0, float("nan"), float("inf")])
def test_a_dilation_below_one_is_refused(dilation):
    with pytest.raises(ValueError, match="time dilation"):
        Clock(dilation)


def test_a_dilated_process_clock_reads_and_sleeps_in_virtual_time():
    previous = clock.current()
    clock.use(Clock.starting_now(4.0))
    try:
        # Each virtual reading is bracketed by two real ones, so the bounds hold however long
        # the process waits between readings.
        real_before, virtual_before, real_after = (time.monotonic(), clock.monotonic(),
                                                   time.monotonic())
        clock.sleep(0.01)
        real_until, virtual_slept, real_end = (time.monotonic(), clock.monotonic() - virtual_before,
                                               time.monotonic())
        assert real_until - real_before >= 0.04
        shortest, longest = (real_until - real_after) / 4, (real_end - real_before) / 4
        assert shortest - 1e-6 <= virtual_slept <= longest + 1e-6
        assert clock.real_timeout(None) is None
        assert clock.real_timeout(0.5) == 2.0
        assert abs(clock.time() - time.time()) < 1.0
    finally:
        clock.use(previous)


def test_real_elapsed_is_never_dilated():
    previous = clock.current()
    clock.use(Clock.starting_now(8.0))
    try:
        # Bracketed by the performance counter on both sides: bounds no wait can break, and a
        # dilated reading (an eighth of the real one) would miss them.
        before, begun, after = time.perf_counter(), clock.real_elapsed(), time.perf_counter()
        time.sleep(0.02)
        until, ended, end = time.perf_counter(), clock.real_elapsed(), time.perf_counter()
        assert until - after <= ended - begun <= end - before
    finally:
        clock.use(previous)
