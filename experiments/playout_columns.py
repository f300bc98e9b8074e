"""A run's playout as columns of its results row: what its viewers' players showed
(:mod:`experiments.playout`), all views together, and what of it followed a viewer's switch
of server, for any scheme's emulated kinds."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

from experiments.playout import Playout, Span
from experiments.sweeps.kinds import Metric

# The viewers' player (experiments.playout): half a second of playout delay, a low-latency
# live player's (not fitted to anything; the talk gives none).
PLAYOUT_BUFFER_S = 0.5
# A stall or freeze that begins this soon after a viewer heard a switch of server is the
# switch's: the old server may keep sending until the session times out (agents.edge_server's
# pull timeout, 1 s, which the live_edge scenarios keep), and a gap in what arrives reaches
# the player's slots the playout delay later. Two seconds covers both with half a second to
# spare and stays below a controller period (4-5 s in the live_edge scenarios), so that one
# window holds one decision of a viewer's.
SWITCH_WINDOW_S = 2.0

# What became of a frame a player watched (experiments.playout), as its columns name it.
FRAME_FATES = ("watched", "shown", "lost", "late", "undecodable")
PLAYOUT_METRICS = (
    Metric("uninterrupted_viewers", "viewers whose playout never stalled or froze"),
    Metric("stalls", "stalls (nothing due in the buffer), all viewers"),
    Metric("stall_ms", "time stalled, all viewers together", "ms"),
    Metric("freezes", "freezes (picture held until an I frame shows), all viewers"),
    Metric("freeze_ms", "time frozen, all viewers together", "ms"),
    Metric("watch_ms", "time watched, first frame shown to the last, all viewers", "ms"),
    Metric("freeze_share_pct", "time frozen of the time watched", "%"),
    Metric("frames_watched", "frames from each viewer's first shown to its last whole"),
    Metric("frames_shown", "of them, shown"),
    Metric("frames_lost", "of them, never arrived whole"),
    Metric("frames_late", "of them, arrived whole after their slot"),
    Metric("frames_undecodable", "of them, in time but a frame they are decoded from not"),
    Metric("startup_mean_ms", "mean startup (join request to first frame shown)", "ms"),
    Metric("startup_max_ms", "slowest viewer's startup", "ms"),
    Metric("startups_under_1s", "viewers that started within 1 s"),
    Metric("first_frame_mean_ms", "mean time from join request to the first whole frame", "ms"))


def playout_metrics(shown: Iterable[Playout]) -> dict[str, float]:
    """The playout columns of a run's row from its viewers' playouts (:data:`PLAYOUT_METRICS`):
    the views that never stalled or froze (a view that never showed a frame is not one), the
    stalls, the freezes and their time, the time watched and what became of the frames
    watched, all views together; startup's mean, maximum and how many were under 1 s (views
    whose startup is known), and the mean time from the join to the first whole frame."""
    shown = list(shown)
    startups = [1e3 * p.startup_s for p in shown if p.startup_s is not None]
    firsts = [1e3 * (p.first_s - p.requested_s) for p in shown
              if p.first_s is not None and p.requested_s is not None]
    freeze_ms = 1e3 * sum(p.freeze_s for p in shown)
    watch_ms = 1e3 * sum(p.watch_s for p in shown)
    return {"uninterrupted_viewers": sum(p.shown_s is not None and not p.stalls and not p.freezes
                                      for p in shown),
            "stalls": sum(p.stalls for p in shown),
            "stall_ms": 1e3 * sum(p.stall_s for p in shown),
            "freezes": sum(p.freezes for p in shown), "freeze_ms": freeze_ms,
            "watch_ms": watch_ms,
            "freeze_share_pct": 100 * freeze_ms / watch_ms if watch_ms else float("nan"),
            **{f"frames_{fate}": sum(getattr(p, f"frames_{fate}") for p in shown)
               for fate in FRAME_FATES},
            "startup_mean_ms": statistics.fmean(startups) if startups else float("nan"),
            "startup_max_ms": max(startups, default=float("nan")),
            "startups_under_1s": sum(startup < 1e3 for startup in startups),
            "first_frame_mean_ms": statistics.fmean(firsts) if firsts else float("nan")}


SWITCH_METRICS = (
    Metric("switches", "server switches the viewers followed"),
    Metric("switches_interrupted", "of them, followed by a stall or freeze within the window"),
    Metric("switch_stalls", "stalls that began within the window after a switch"),
    Metric("switch_stall_ms", "their time stalled", "ms"),
    Metric("switch_freezes", "freezes that began within the window after a switch"),
    Metric("switch_freeze_ms", "their time frozen", "ms"))


def switch_metrics(playouts: Mapping[str, Playout],
                   switches: Mapping[str, Iterable[float]]) -> dict[str, float]:
    """The switch columns of a run's row (:data:`SWITCH_METRICS`) from its viewers' playouts
    and when each viewer heard a switch of server (epoch seconds): the switches, those a stall
    or freeze began within :data:`SWITCH_WINDOW_S` of, and those stalls and freezes with their
    time, each counted once when two switches' windows hold it."""
    count, interrupted = 0, 0
    stalls: set[tuple[str, Span]] = set()
    freezes: set[tuple[str, Span]] = set()
    for viewer, times in switches.items():
        for at_s in times:
            count += 1
            stalled, frozen = playouts[viewer].began_after(at_s, SWITCH_WINDOW_S)
            interrupted += bool(stalled or frozen)
            stalls.update((viewer, span) for span in stalled)
            freezes.update((viewer, span) for span in frozen)
    return {"switches": count, "switches_interrupted": interrupted,
            "switch_stalls": len(stalls),
            "switch_stall_ms": 1e3 * sum(span.length_s for _, span in stalls),
            "switch_freezes": len(freezes),
            "switch_freeze_ms": 1e3 * sum(span.length_s for _, span in freezes)}
