"""experiments.playout: what a player shows, freezes and stalls on, and its startup, from the
frames a viewer got."""

from __future__ import annotations

import csv

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.playout import Arrival, playout, viewer_playouts

FPS = 25


def stream(numbers, delay_s=0.1, gop=50, origin=100.0):
    """Frames sent at ``origin + n / FPS`` arriving whole ``delay_s`` later (a number or a
    function of the frame number), frame 0 of every ``gop`` an I frame."""
    late = delay_s if callable(delay_s) else (lambda n: delay_s)
    return [(n, origin + n / FPS + late(n), n % gop == 0) for n in numbers]


def at_rung(frames, rung):
    """``frames`` (:func:`stream`'s) sent at ``rung`` (or any other key of an encoding)."""
    return [Arrival(n, t, key, True, rung) for n, t, key in frames]


def fates(shown):
    return (shown.frames_shown, shown.frames_lost, shown.frames_late, shown.frames_undecodable)


def test_a_steady_stream_never_stalls_or_freezes_and_starts_on_its_first_i_frame():
    # The viewer asked at 100.9 s and got frames from 25 on: it can only start on frame 50,
    # the next I frame, arriving at 102.1 s, and shows it half a second later.
    shown = playout(stream(range(25, 200)), FPS, buffer_s=0.5, requested_s=100.9)
    assert (shown.stalls, shown.stall_s, shown.freezes, shown.freeze_s) == (0, 0.0, 0, 0.0)
    assert fates(shown) == (150, 0, 0, 0)
    assert shown.startup_s == pytest.approx(102.1 + 0.5 - 100.9)
    assert shown.first_s == pytest.approx(101.1)  # frame 25, of no use without an I frame
    assert (shown.start_frame, shown.first_stall_s) == (50, None)
    assert shown.watch_s == pytest.approx(150 / FPS)


def test_a_lost_reference_freezes_the_picture_until_the_next_i_frame():
    # Frame 60 never comes: 61-99 come in time but are P frames decoded from it, so nothing
    # shows until frame 100, the next I frame. The buffer never runs dry.
    shown = playout(stream([n for n in range(200) if n != 60]), FPS, buffer_s=0.5)
    assert fates(shown) == (200 - 40, 1, 0, 39)
    assert (shown.freezes, shown.stalls) == (1, 0)
    assert shown.freeze_s == pytest.approx(40 / FPS)
    assert shown.watch_s == pytest.approx(200 / FPS)
    # A frame lost just before an I frame freezes its slot only.
    assert fates(playout(stream([n for n in range(200) if n != 99]), FPS, 0.5)) == (
        199, 1, 0, 0)


def test_a_lost_i_frame_freezes_its_whole_gop():
    # Frame 50 is the second GOP's I frame: 51-99 are all decoded from it.
    shown = playout(stream([n for n in range(200) if n != 50]), FPS, buffer_s=0.5)
    assert fates(shown) == (150, 1, 0, 49)
    assert shown.freezes == 1 and shown.freeze_s == pytest.approx(2.0)
    # An I frame that arrived in part is lost as well.
    partial = [Arrival(n, t, key, whole=n != 50) for n, t, key in stream(range(200))]
    assert fates(playout(partial, FPS, buffer_s=0.5)) == (150, 1, 0, 49)


def test_a_frame_after_its_slot_is_late_not_lost_and_freezes_like_a_lost_one():
    # Frame 60 comes 0.8 s after it was sent, 0.2 s after its slot (sent at 102.4 s, shown
    # 0.6 s after sending), while 61 on are buffered: the player goes on without it.
    shown = playout(stream(range(200), lambda n: 0.8 if n == 60 else 0.1), FPS, buffer_s=0.5)
    assert fates(shown) == (160, 0, 1, 39)
    assert (shown.stalls, shown.freezes) == (0, 1)
    # Two freezes in two GOPs.
    twice = playout(stream(range(200), lambda n: 0.8 if n in (60, 170) else 0.1), FPS, 0.5)
    assert fates(twice) == (160 - 30, 0, 2, 39 + 29) and twice.freezes == 2


def test_a_buffer_run_dry_is_a_stall_that_moves_the_slots_after_it():
    # From frame 80 on the frames come a second later (frame 80 itself 20 ms after 81 would
    # have): at frame 80's slot, 103.8 s, nothing of it or after it is there until it arrives
    # at 104.3 s. The player waits 0.5 s and the later frames are in time again.
    shown = playout(stream(range(200), lambda n: 0.1 if n < 80 else 1.1 if n == 80 else 1.08),
                    FPS, buffer_s=0.5)
    assert (shown.stalls, shown.stall_s) == (1, pytest.approx(0.5))
    assert shown.first_stall_s == pytest.approx(100.6 + 80 / FPS)
    assert fates(shown) == (200, 0, 0, 0) and shown.freezes == 0
    assert shown.watch_s == pytest.approx(200 / FPS + 0.5)


def test_an_outage_stalls_and_then_freezes_until_an_i_frame():
    # Frames 80-104 never come whole, the rest come 0.8 s later than before. At frame 80's
    # slot (103.8 s) nothing is there: the player stalls until frame 105 arrives at 105.1 s.
    # 80-104 are lost, 105-149 undecodable without them; 150, an I frame, shows again.
    frames = stream([n for n in range(200) if not 80 <= n < 105],
                    delay_s=lambda n: 0.1 if n < 80 else 0.9)
    shown = playout(frames, FPS, buffer_s=0.5, requested_s=99.0)
    assert shown.stalls == 1 and shown.stall_s == pytest.approx(1.3)
    assert shown.first_stall_s == pytest.approx(100.6 + 80 / FPS)
    assert fates(shown) == (130, 25, 0, 45)
    assert shown.freezes == 1 and shown.freeze_s == pytest.approx(70 / FPS)
    # A buffer longer than the outage and the delay's rise together holds through it, but
    # the picture still freezes.
    longer = playout(frames, FPS, buffer_s=1.9)
    assert longer.stalls == 0 and fates(longer) == (130, 25, 0, 45)


def test_duplicate_arrivals_count_at_their_first_whole_arrival():
    frames = stream(range(200))
    # Frames 100-109 got again 0.3 s later from another node, while the viewer moved.
    assert playout(frames + [(n, t + 0.3, key) for n, t, key in frames[100:110]], FPS,
                   buffer_s=0.5) == playout(frames, FPS, buffer_s=0.5)
    # Frame 60 listed first as arriving after its slot, then in time: in time is when it
    # first came; in part first and whole later (after its slot) is late.
    again = [(60, 100 + 60 / FPS + 0.8, False), *frames]
    assert fates(playout(again, FPS, buffer_s=0.5)) == (200, 0, 0, 0)
    part = [Arrival(n, t, key, whole=n != 60) for n, t, key in frames]
    assert fates(playout(part + [(60, 100 + 60 / FPS + 0.8, False)], FPS, 0.5)) == (
        160, 0, 1, 39)


def test_a_gop_cache_starts_the_player_on_the_cached_i_frame_without_a_stall():
    # The viewer asks at 101.05 s, mid-GOP: its node sends frames 0-25 (since the latest I
    # frame) as a burst from 101.1 s, 10 ms apart (2.5 times real time), then the live stream
    # from 26 on as it arrives. It starts on frame 0, 0.5 s after it came, and never runs dry:
    # the burst outruns the playout, and the live frames come before their (later) slots.
    burst = [(n, 101.1 + 0.01 * n, n == 0) for n in range(26)]
    shown = playout(burst + stream(range(26, 200)), FPS, buffer_s=0.5, requested_s=101.05)
    assert (shown.start_frame, shown.stalls, shown.first_stall_s) == (0, 0, None)
    assert fates(shown) == (200, 0, 0, 0)
    assert shown.startup_s == pytest.approx(0.55)


def test_a_change_of_rung_mid_gop_freezes_the_picture_until_the_new_rungs_i_frame():
    # The viewer gets rung 2 up to frame 129, then rung 1 from 130 on, every frame whole and
    # in time: 130-149 are P frames of another encoding than 129, so nothing shows until
    # frame 150, rung 1's next I frame.
    frames = at_rung(stream(range(130)), 2) + at_rung(stream(range(130, 300)), 1)
    shown = playout(frames, FPS, buffer_s=0.5)
    assert fates(shown) == (280, 0, 0, 20)
    assert (shown.freezes, shown.stalls) == (1, 0)
    assert shown.freeze_spans[0].start_s == pytest.approx(100.6 + 130 / FPS)
    assert shown.freeze_s == pytest.approx(20 / FPS)
    # At an I frame the change costs nothing.
    at_key = at_rung(stream(range(150)), 2) + at_rung(stream(range(150, 300)), 1)
    assert fates(playout(at_key, FPS, buffer_s=0.5)) == (300, 0, 0, 0)
    # Nor when the old rung's frames keep coming until the new rung's I frame: the player
    # moves to rung 1 there.
    overlap = at_rung(stream(range(160)), 2) + at_rung(stream(range(130, 300), 0.12), 1)
    assert fates(playout(overlap, FPS, buffer_s=0.5)) == (300, 0, 0, 0)


def test_another_node_at_the_same_rung_goes_on_decoding():
    # The viewer moves to another node at frame 130: the same rung, so the same frames,
    # arriving 30 ms later than the first node's; nothing freezes.
    frames = (at_rung(stream(range(130)), 2)
              + at_rung(stream(range(130, 300), delay_s=0.13), 2))
    shown = playout(frames, FPS, buffer_s=0.5)
    assert fates(shown) == (300, 0, 0, 0) and (shown.freezes, shown.stalls) == (0, 0)


def test_a_rung_keyed_by_its_node_is_another_encoding_at_another_node():
    # The same move where each node encodes the rung its own way: 130-149 from the new node
    # are P frames of its encoding, whose I frame 100 the viewer never got. Keys of two types
    # (a node and a rung, a rung alone) are told apart alike.
    frames = (at_rung(stream(range(130)), ("edge1", 2))
              + at_rung(stream(range(130, 300), delay_s=0.13), ("edge2", 2)))
    shown = playout(frames, FPS, buffer_s=0.5)
    assert fates(shown) == (280, 0, 0, 20) and (shown.freezes, shown.stalls) == (1, 0)
    back = frames[:130] + at_rung(stream(range(130, 300), delay_s=0.13), 3)
    assert fates(playout(back, FPS, buffer_s=0.5)) == (280, 0, 0, 20)


def test_without_a_whole_i_frame_nothing_shows():
    shown = playout(stream(range(1, 49)), FPS, buffer_s=0.5, requested_s=99.0)
    assert shown.shown_s is None and shown.startup_s is None
    assert fates(shown) == (0, 0, 0, 0) and shown.freeze_s == shown.watch_s == 0
    assert shown.first_s == pytest.approx(100.14)


@st.composite
def viewers_frames(draw):
    """A viewer's frames: some never come, some come in part, some twice, each after a delay
    of its own; I frames every ``gop`` frames."""
    count = draw(st.integers(1, 120))
    gop = draw(st.integers(1, 60))
    # Rungs and nodes' encodings of a rung, as the schemes key them.
    encodings = [0, ("edge1", 0), ("edge2", 0)][:draw(st.integers(1, 3))]
    frames = []
    for n in range(count):
        for _ in range(draw(st.integers(0, 2))):
            frames.append(Arrival(n, 100 + n / FPS + draw(st.floats(0, 2.0)), n % gop == 0,
                                  draw(st.booleans()) or draw(st.booleans()),
                                  draw(st.sampled_from(encodings))))
    return frames


@settings(max_examples=300, deadline=None)
@given(viewers_frames(), st.floats(0, 2.0))
def test_every_watched_frame_has_one_fate_and_freezes_fit_in_the_watch(frames, buffer_s):
    shown = playout(frames, FPS, buffer_s)
    whole = {frame.frame for frame in frames if frame.whole}
    if shown.shown_s is None:
        assert not any(frame.key for frame in frames if frame.whole)
        return
    start, last = shown.start_frame, max(whole)
    assert shown.frames_watched == last - start + 1
    assert shown.frames_lost == sum(n not in whole for n in range(start, last + 1))
    assert shown.frames_shown >= 1  # the I frame it started on
    assert 0 <= shown.freeze_s <= shown.watch_s and shown.stall_s >= 0
    assert shown.freezes <= shown.frames_watched - shown.frames_shown
    assert (shown.freezes == 0) == (shown.freeze_s == 0)
    if shown.frames_lost == shown.frames_late == 0 and len({f.encoding for f in frames}) == 1:
        assert shown.frames_undecodable == 0  # nothing broke a chain


@settings(max_examples=300, deadline=None)
@given(viewers_frames(), st.floats(0, 2.0))
def test_telling_encodings_apart_only_takes_shown_frames_away(frames, buffer_s):
    # The same arrivals taken as one encoding: the buffer, and so the stalls and the frames
    # lost and late, are the same; a chain across encodings no longer decodes.
    apart = playout(frames, FPS, buffer_s)
    one = playout([frame._replace(encoding=0) for frame in frames], FPS, buffer_s)
    assert (apart.shown_s, apart.stall_spans, apart.frames_watched) == (
        one.shown_s, one.stall_spans, one.frames_watched)
    assert (apart.frames_lost, apart.frames_late) == (one.frames_lost, one.frames_late)
    assert apart.frames_shown <= one.frames_shown


def test_viewer_playouts_read_the_run_tables(tmp_path):
    (tmp_path / "tables").mkdir()
    with open(tmp_path / "tables" / "frames.csv", "w", newline="") as stream_file:
        table = csv.writer(stream_file)
        table.writerow(["node", "flow", "frame", "frame_type", "rung", "complete", "arrived_s"])
        for n, arrived, key in stream(range(100)):
            frame_type = "I" if key else "P"
            table.writerow(["v1", "stream-1", n, frame_type, 1, True, f"{arrived:.6f}"])
            table.writerow(["v2", "stream-1", n, frame_type, 1, n != 0, f"{arrived:.6f}"])
            table.writerow(["v3", "stream-1", n, frame_type, 1, n != 10, f"{arrived:.6f}"])
            # v4 gets frames 70 on as another flow at the same rung, v5 at another.
            moved = "stream-1" if n < 70 else "stream-2"
            table.writerow(["v4", moved, n, frame_type, 1, True, f"{arrived:.6f}"])
            table.writerow(["v5", moved, n, frame_type, 1 if n < 70 else 0, True,
                            f"{arrived:.6f}"])
    with open(tmp_path / "tables" / "decisions_followed.csv", "w", newline="") as stream_file:
        table = csv.writer(stream_file)
        table.writerow(["node", "time_s", "requested_s"])
        table.writerows([["v1", 100.05, 99.95], ["v1", 101.0, ""], ["v2", 100.0, 99.9]])
    shown = viewer_playouts(tmp_path, ["v1", "v2", "v3", "v4", "v5"], FPS, buffer_s=0.5)
    assert shown["v1"].startup_s == pytest.approx(100.1 + 0.5 - 99.95)
    # v2's first I frame arrived incomplete: it starts on the next, 2 s later.
    assert shown["v2"].startup_s == pytest.approx(102.1 + 0.5 - 99.9)
    assert shown["v1"].stalls == shown["v2"].stalls == 0
    # v3's frame 10 arrived in part: 11-49 have no reference.
    assert fates(shown["v3"]) == (60, 1, 0, 39) and shown["v3"].requested_s is None
    assert fates(shown["v4"]) == (100, 0, 0, 0)
    # v5's frames 70-99 are P frames of rung 0, whose I frame it never got.
    assert fates(shown["v5"]) == (70, 0, 0, 30)
