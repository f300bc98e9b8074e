"""experiments.playout: a player's stalls and startup from the frames a viewer got."""

from __future__ import annotations

import csv

import pytest

from experiments.playout import playout, viewer_playouts

FPS = 25


def stream(numbers, delay_s=0.1, gop=50, origin=100.0):
    """Frames sent at ``origin + n / FPS`` arriving ``delay_s`` later (a number or a function
    of the frame number), frame 0 of every ``gop`` an I frame."""
    late = delay_s if callable(delay_s) else (lambda n: delay_s)
    return [(n, origin + n / FPS + late(n), n % gop == 0) for n in numbers]


def test_a_steady_stream_never_stalls_and_starts_on_its_first_i_frame():
    # The viewer asked at 100.9 s and got frames from 25 on: it can only start on frame 50,
    # the next I frame, arriving at 102.1 s, and shows it half a second later.
    shown = playout(stream(range(25, 200)), FPS, buffer_s=0.5, requested_s=100.9)
    assert (shown.stalls, shown.stall_s, shown.played, shown.skipped) == (0, 0.0, 150, 0)
    assert shown.startup_s == pytest.approx(102.1 + 0.5 - 100.9)
    assert shown.first_s == pytest.approx(101.1)  # frame 25, of no use without an I frame
    assert (shown.start_frame, shown.first_stall_s) == (50, None)


def test_a_gop_cache_starts_the_player_on_the_cached_i_frame_without_a_stall():
    # The viewer asks at 101.05 s, mid-GOP: its node sends frames 0-25 (since the latest I
    # frame) as a burst from 101.1 s, 10 ms apart (2.5 times real time), then the live stream
    # from 26 on as it arrives. It starts on frame 0, 0.5 s after it came, and never runs dry:
    # the burst outruns the playout, and the live frames come before their (later) slots.
    burst = [(n, 101.1 + 0.01 * n, n == 0) for n in range(26)]
    shown = playout(burst + stream(range(26, 200)), FPS, buffer_s=0.5, requested_s=101.05)
    assert (shown.start_frame, shown.stalls, shown.first_stall_s) == (0, 0, None)
    assert shown.startup_s == pytest.approx(0.55)


def test_a_frame_later_than_its_deadline_is_a_stall_as_long_as_it_is_late():
    # An outage: frames 80-104 never come whole, the rest come 0.8 s later than before. Frame
    # 79 showed 0.6 s after it was sent; the slot after it is 40 ms later, and the next frame
    # there, 105, comes 1 + 0.8 s after 79 did: one stall of 1.8 - 0.5 s. Played from there
    # on, the frames after it, as late as it, are on time.
    frames = stream([n for n in range(200) if not 80 <= n < 105],
                    delay_s=lambda n: 0.1 if n < 80 else 0.9)
    shown = playout(frames, FPS, buffer_s=0.5, requested_s=99.0)
    assert shown.stalls == 1 and shown.stall_s == pytest.approx(1.3)
    assert shown.first_stall_s == pytest.approx(100.6 + 80 / FPS)  # the slot after frame 79
    assert (shown.played, shown.skipped) == (175, 25)
    # A buffer longer than the outage and the delay's rise together holds through it.
    assert playout(frames, FPS, buffer_s=1.9).stalls == 0
    # Lost frames alone are skipped, not stalls: the frames after them are on time.
    missing = set(range(3, 190, 7))
    lost = playout(stream([n for n in range(200) if n not in missing]), FPS, buffer_s=0.2)
    assert lost.stalls == 0 and lost.skipped == len(missing)
    # A frame got twice, from two nodes while the viewer moved, is played once.
    again = playout(frames + [(n, t + 0.3, key) for n, t, key in frames[100:110]], FPS,
                    buffer_s=0.5)
    assert (again.played, again.skipped, again.stall_s) == (175, 25, shown.stall_s)


def test_without_a_whole_i_frame_nothing_shows():
    shown = playout(stream(range(1, 49)), FPS, buffer_s=0.5, requested_s=99.0)
    assert shown.shown_s is None and shown.startup_s is None and shown.played == 0
    assert shown.first_s == pytest.approx(100.14)


def test_viewer_playouts_read_the_run_tables(tmp_path):
    (tmp_path / "tables").mkdir()
    with open(tmp_path / "tables" / "frames.csv", "w", newline="") as stream_file:
        table = csv.writer(stream_file)
        table.writerow(["node", "frame", "frame_type", "complete", "arrived_s"])
        for n, arrived, key in stream(range(100)):
            table.writerow(["v1", n, "I" if key else "P", True, f"{arrived:.6f}"])
            table.writerow(["v2", n, "I" if key else "P", n != 0, f"{arrived:.6f}"])
    with open(tmp_path / "tables" / "decisions_followed.csv", "w", newline="") as stream_file:
        table = csv.writer(stream_file)
        table.writerow(["node", "time_s", "requested_s"])
        table.writerows([["v1", 100.05, 99.95], ["v1", 101.0, ""], ["v2", 100.0, 99.9]])
    shown = viewer_playouts(tmp_path, ["v1", "v2"], FPS, buffer_s=0.5)
    assert shown["v1"].startup_s == pytest.approx(100.1 + 0.5 - 99.95)
    # v2's first I frame arrived incomplete: it starts on the next, 2 s later.
    assert shown["v2"].startup_s == pytest.approx(102.1 + 0.5 - 99.9)
    assert shown["v1"].stalls == shown["v2"].stalls == 0
