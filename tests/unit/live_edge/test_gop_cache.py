"""The live edge's GOP cache (agents.edge_server, dispatch): what a viewer joining mid-GOP gets
first (the frames since the latest I frame, once, in order, then the live stream), that the
cache never holds more than one GOP, and that the burst is paced at ``gop_burst`` times the
session's bitrate and counted in ``live_sessions``. Over loopback, no root; the edge is the
real agent, the source and viewers are sockets (tests.unit.live_edge.test_live_edge_agents)."""

from __future__ import annotations

import pytest

from agents.gop_cache import GopCache, SourceFrame
from agents.streamer import I_FRAME, P_FRAME
from tests.unit.live_edge.test_live_edge_agents import (FRAGMENT_BYTES, FRAGMENTS, SOURCE_KBPS, Source,
                                              Viewer, sessions, start_edge, summary_of)

GOP = 10


def frame(number: int, gop: int = GOP) -> SourceFrame:
    return SourceFrame(number, I_FRAME if number % gop == 0 else P_FRAME, 1, 1e6, 0, 0, 0)


def test_the_cache_holds_the_frames_since_the_latest_i_frame_and_no_more():
    cache = GopCache(limit=100)
    for number in range(3, 2 * GOP + 4):  # from mid-GOP: frames 3-9 come before any I frame
        cache.add(7, frame(number))
        held = [f.number for f in cache.gop(7)]
        # Never more than one GOP, always from its I frame.
        assert len(held) <= GOP and (not held or held[0] % GOP == 0)
        assert held == list(range(number - number % GOP, number + 1)) if number >= GOP else (
            held == [])
    assert [f.number for f in cache.gop(7)] == [20, 21, 22, 23] and cache.gop(8) == []


def test_a_stream_whose_next_i_frame_is_lost_is_not_cached_past_the_limit():
    cache = GopCache(limit=GOP)
    for number in range(0, GOP + 3):
        # Frame 10, the next I frame, lost: 0-9 then 11, 12 would be one "GOP" of 12.
        if number != GOP:
            cache.add(1, frame(number))
    assert cache.gop(1) == []
    cache.add(1, frame(2 * GOP))
    assert [f.number for f in cache.gop(1)] == [2 * GOP]


@pytest.mark.parametrize("gop_cache", [True, False])
def test_a_late_joiner_gets_the_cached_gop_paced_then_the_live_stream(tmp_path, gop_cache):
    burst = 1.25  # times the session's bitrate: 625-byte packets 4 ms apart at 1 Mbit/s
    edge, port, source_port = start_edge(tmp_path, transcoding_delay=0, gop_cache=gop_cache,
                                         gop_burst=burst)
    source = Source(source_port, gop=GOP)
    early = Viewer(port, bitrate_kbps=SOURCE_KBPS, delivered=1)
    early.served(source)
    while source.frame < 2 * GOP + 5:  # frames up to 24: the latest I frame is 20
        early.pull()
        source.send()
        # Read as they come (a socket's buffer holds fewer); once the early viewer has a
        # frame, the edge has taken it.
        early.frames(source.frame - 1)
    late = Viewer(port, bitrate_kbps=1000, delivered=2)
    late.pull()
    pulled_ns = late.last_pull_ns
    cached = late.arrivals_from(0)
    source.send()  # frame 25, live
    late.pull()
    [live] = late.frames(source.frame - 1)
    if not gop_cache:
        assert cached == [] and live["frame"] == 2 * GOP + 5
        summary = summary_of(edge, stop=True)
        assert summary["gop_cache"] is None
        return
    # Frames 20-24 (5000 bytes scaled to 1 Mbit/s: one 625-byte packet each), the I frame
    # first, in order, then the live frame: sequence numbers with no gap.
    assert [(p["frame"], p["frame_type"], p["size"]) for p in cached] == [
        (2 * GOP, I_FRAME, 625)] + [(n, P_FRAME, 625) for n in range(2 * GOP + 1, 2 * GOP + 5)]
    assert [p["sequence"] for p in cached + [live]] == list(range(6))
    # Paced: packet k of the backlog left no sooner than k packets' bits at the burst rate
    # after the pull (a lower bound: a loaded machine only sends later).
    spacing_ns = 625 * 8 / (burst * 1e6) * 1e9
    for k, packet in enumerate(cached):
        assert packet["arrived_ns"] - pulled_ns >= k * spacing_ns - 1e3
    summary = summary_of(edge, stop=True)
    row = next(r for r in sessions(tmp_path) if r["flow"] == "stream-2")
    # What it cost, counted: the five frames and their bytes, and the burst's length.
    assert (int(row["cached_frames"]), int(row["cached_bytes"])) == (5, 5 * 625)
    assert float(row["caught_up_s"]) >= 5 * spacing_ns / 1e9 - 1e-6
    assert summary["gop_cache"]["frames"] >= 5 and summary["gop_cache"]["bytes"] >= 3125


def test_a_viewer_changing_bitrate_on_the_same_edge_gets_no_second_cache(tmp_path):
    edge, port, source_port = start_edge(tmp_path, transcoding_delay=0, gop_cache=True)
    source = Source(source_port, gop=GOP)
    watcher = Viewer(port, bitrate_kbps=SOURCE_KBPS, delivered=1)
    watcher.served(source)
    while source.frame < GOP + 3:
        watcher.pull()
        source.send()
        watcher.frames(source.frame - 1)
    # The same viewer asks for another bitrate (a new session that follows its first).
    watcher.pull_bytes = Viewer(port, bitrate_kbps=2000, delivered=1).pull_bytes
    watcher.pull()
    assert watcher.arrivals_from(0) == []
    summary_of(edge, stop=True)
    assert [int(r["cached_frames"]) for r in sessions(tmp_path)][-1] == 0
    assert FRAGMENTS * FRAGMENT_BYTES == 5000  # the sizes above assume it
