"""The live edge's GOP cache (agents.edge_server ``gop_cache``, dispatch's startup) on a real
Mininet network: two media nodes get the same stream at the same time, one keeping a GOP
cache and one not, and a viewer joins each in the middle of a GOP. Checked on what the agents
measured: the nodes' sessions (``live_sessions``, ``sender_lateness``) and frames, and the
viewers' frames.

The stream has a GOP of 4 s (100 frames at 25 fps, from 0.5 s: I frames at 0.5, 4.5, ... s
of the timeline) and the viewers pull their node straight away from 2 s, so they join
about 1.5 s into a GOP and 2.5 s before the next I frame: with the cache a viewer starts on
the I frame its node already had, without it on the next one.
"""

from __future__ import annotations

from experiments.playout import Arrival, playout
from tests.integration.conftest import assert_nothing_left
from tests.integration.test_agent_runs import run
from tests.integration.dispatch.test_dispatch_runs import rows_of

FPS = 25
GOP = 100  # frames: 4 s
GOP_S = GOP / FPS
BITRATE = 1e6
GOP_BURST = 4.0  # the cache's pacing, times the session's bitrate
PLAYOUT_BUFFER_S = 0.5
# How far from an I frame the joins must be for the run to say anything: a viewer joining
# just before its node completes an I frame gets it live, cache or not.
JOIN_MARGIN_S = 1.0
# The cached viewer's first I frame must come this soon after its session began, besides
# its node's own sending lateness (what sender_lateness counted for the session): the I frame
# itself leaves at once, about 24 kB at 4 Mbit/s (48 ms), over two switch hops.
CACHED_WAIT_S = GOP_S / 8

SCENARIO = f"""
name: gop-cache
duration: 7s
topology:
  subnet: 10.7.2.0/24
  nodes:
    streamer1: {{role: streamer}}
    ingest: {{role: edge}}
    cached: {{role: edge}}
    plain: {{role: edge}}
    viewer1: {{role: viewer}}
    viewer2: {{role: viewer}}
    s1: {{role: switch}}
  links:
    - endpoints: ["streamer1:eth1", "s1:eth1"]
    - endpoints: ["ingest:eth1", "s1:eth2"]
    - endpoints: ["cached:eth1", "s1:eth3"]
    - endpoints: ["plain:eth1", "s1:eth4"]
    - endpoints: ["viewer1:eth1", "s1:eth5"]
    - endpoints: ["viewer2:eth1", "s1:eth6"]
workload:
  - agent: edge_forwarder
    nodes: [ingest]
    params: {{port: 5004, to: [cached, plain], to_port: 5008}}
  - agent: edge_server
    nodes: [cached]
    params: {{port: 5004, source_port: 5008, transcoding_delay: 0ms, payload: 1000,
             gop_cache: true, gop_burst: {GOP_BURST:g}}}
  - agent: edge_server
    nodes: [plain]
    params: {{port: 5004, source_port: 5008, transcoding_delay: 0ms, payload: 1000}}
  - agent: streamer
    nodes: [streamer1]
    start: 0.5s
    params: {{to: ingest, port: 5004, bitrate: 1Mbps, fps: {FPS}, gop: {GOP}, payload: 1000}}
  - agent: viewer
    nodes: [viewer1]
    start: 2s
    params: {{pull: cached, pull_port: 5004, port: 5004, bitrates: [1Mbps]}}
  - agent: viewer
    nodes: [viewer2]
    start: 2s
    params: {{pull: plain, pull_port: 5004, port: 5004, bitrates: [1Mbps]}}
"""


def i_frames(run_dir, node: str) -> list[tuple[float, int, bool]]:
    """The I frames of which anything reached ``node``: (last fragment's arrival, number,
    whole), in order of arrival."""
    return sorted((float(row["arrived_s"]), int(row["frame"]), row["complete"] == "True")
                  for row in rows_of(run_dir, "frames", node) if row["frame_type"] == "I")


def test_a_viewer_joining_mid_gop_starts_on_the_cached_i_frame(tmp_path, state_before):
    run_dir, summary = run(tmp_path, SCENARIO)
    found = {}
    for node, viewer in (("cached", "viewer1"), ("plain", "viewer2")):
        [session] = rows_of(run_dir, "live_sessions", node)
        started = float(session["started_s"])
        at_node = i_frames(run_dir, node)
        before = [number for arrived, number, _ in at_node if arrived < started]
        after = [(arrived, number) for arrived, number, _ in at_node if arrived >= started]
        # The precondition: the join fell well inside a GOP (a machine that starts the
        # viewers a GOP late fails here, saying so).
        assert before and after and after[0][0] - started >= JOIN_MARGIN_S, (
            node, started, at_node)
        [first_i, *_] = i_frames(run_dir, viewer)
        frames = [Arrival(int(row["frame"]), float(row["arrived_s"]), row["frame_type"] == "I",
                          row["complete"] == "True")
                  for row in rows_of(run_dir, "frames", viewer)]
        shown = playout(frames, FPS, PLAYOUT_BUFFER_S, requested_s=started)
        [lateness] = [row for row in rows_of(run_dir, "sender_lateness", node)
                      if row["flow"].startswith(f"{session['viewer']}:")]
        found[node] = session, started, before[-1], after[0], first_i, shown, lateness
        print(f"\n{node}: session at {started - summary['timeline_origin_s']:.3f} s, "
              f"{session['cached_frames'] or 0} frames cached "
              f"({int(session['cached_bytes'] or 0) / 1e3:.0f} kB, drained in "
              f"{session['caught_up_s'] or '-'} s); {viewer}'s first I frame {first_i[1]} "
              f"{first_i[0] - started:.3f} s after, startup {shown.startup_s} s, "
              f"{shown.freezes} freezes ({shown.frames_lost} frames lost, "
              f"{shown.frames_late} late, {shown.frames_undecodable} undecodable), sender "
              f"late max {float(lateness['late_max_us']) / 1e3:.1f} ms")

    session, started, latest, _, (arrived, number, whole), shown, lateness = found["cached"]
    # The cached node sent the GOP it held at the session's admission, and said how much and
    # for how long the burst went ...
    assert int(session["cached_frames"]) > 0 and int(session["cached_bytes"]) > 0, session
    assert float(session["caught_up_s"]) > 0, session
    # ... so its viewer's first I frame was the one its node had got before the session
    # began (the latest: the cache holds one GOP), there well under a GOP after the session
    # began, though no I frame reached the node for a second after.
    assert number == latest, (number, latest)
    late_s = float(lateness["late_max_us"]) / 1e6
    assert arrived - started <= CACHED_WAIT_S + late_s, (arrived - started, late_s)
    # The cached frames came in order, from that I frame on, all of them but what the
    # emulator itself dropped (by its own count).
    emulator_made = sum(int(link["emulator_made"]) for link in summary["emulator_loss"])
    cached = sorted((int(row["frame"]), float(row["arrived_s"]))
                    for row in rows_of(run_dir, "frames", "viewer1")
                    if latest <= int(row["frame"]) < latest + int(session["cached_frames"]))
    assert [arrival for _, arrival in cached] == sorted(arrival for _, arrival in cached)
    assert len(cached) >= int(session["cached_frames"]) - emulator_made, (cached, session)

    plain, plain_started, _, (next_at, next_i), plain_first, plain_shown, _ = found["plain"]
    # Without a cache the node sent nothing from before the session, and its viewer waited
    # for the next I frame to reach the node, a second or more (the precondition) ...
    assert int(plain["cached_frames"]) == 0 and not plain["caught_up_s"], plain
    assert plain_first[1] >= next_i and plain_first[0] >= next_at, (plain_first, next_i)
    # ... while the cached viewer, which joined at the same time, was already watching: its
    # player started on the cached I frame, within a playout buffer of it arriving (unless
    # the emulator dropped a fragment of it, which it must have counted).
    assert plain_shown.shown_s is not None, plain_shown
    if not whole:
        assert emulator_made > 0, (number, summary["emulator_loss"])
    else:
        assert shown.startup_s <= CACHED_WAIT_S + late_s + PLAYOUT_BUFFER_S, shown
        assert shown.startup_s < plain_shown.startup_s - JOIN_MARGIN_S, (shown, plain_shown)
    assert_nothing_left(state_before, summary["prefix"])
