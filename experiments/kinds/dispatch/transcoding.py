"""dispatch emulated, passive transcoding: the ``dispatch_transcoding`` kind of experiment
cell, one ``edgebed run`` of ``topologies/dispatch/transcoding.yaml`` per cell: a transcoder
fed only while a viewer of another protocol than the stream's is in the room (``passive``)
against one fed from the start (``always``), the cell's policy.

Everything comes from what the run recorded: the frames the transcoder node got (when it was
pulling the stream, and its ``flows`` row for the bytes), the frames every viewer got whole
(their playout through :mod:`experiments.playout`, frames lost end to end against the origin's
as :mod:`experiments.kinds.dispatch.rooms` counts them), the decisions the viewers followed
(whether a join started the transcoder) and the nodes' sessions (which node served whom).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field

from agents.edge_server import Params as NodeParams
from controller.policies.dispatch.model import Join, transcoding
from experiments.kinds.dispatch.emulation import PLAYOUT_DELAY
from experiments.kinds.dispatch.emulation_measures import serving_nodes
from experiments.kinds.dispatch.rooms import (EDGE_S, FRAME_LOSS_EDGE, ORIGIN,
                                              viewer_frame_loss, whole_frames)
from experiments.measurements import host_addresses, network_kept_up, read_table
from experiments.playout_columns import PLAYOUT_BUFFER_S, playout_metrics
from experiments.playout import viewer_playouts
from experiments.report import against, policy_means
from experiments.sweeps.kinds import (EMULATED_METRICS, Cell, Constant, EmulatedParameters,
                                      Kind, Metric, Table, measured_run)

POLICIES = ("always", "passive")
# Frames a node got this close together (s) belong to one stretch of pulling; a longer silence
# is a pull stopped (the stream sends 25 frames/s, so a stretch never has gaps near this).
PULLING_GAP_S = 0.5
# The scenario's timeline: the stream starts at 0.5 s; the webrtc viewer stays 4 s (its
# duration); the model's prediction beside the measured figures is made on it.
STREAM_AT_S = 0.5
STAY_S = 4.0
# How long a media node keeps a session (and a back-sourcing node its pull) after the last
# pull: the edge_server agent's default, which the scenario keeps.
PULL_TIMEOUT_S = NodeParams.model_fields["pull_timeout"].default


class Parameters(EmulatedParameters):
    """One cell: the scenario, for how long, when the other protocol's viewer joins and where
    the run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/dispatch/transcoding.yaml",
                          description="the scenario file")
    duration: float = Field(14.0, gt=0, description="run length (s)")
    late_join: float = Field(7.0, gt=0, description="when the webrtc viewer joins (s)")


def variables(cell: Cell) -> dict[str, str]:
    """The scenario's variables for ``cell``'s policy and parameters."""
    parameters: Parameters = cell.parameters
    return {"EDGEBED_TRANSCODING": cell.policy,
            "EDGEBED_LATE_JOIN": f"{parameters.late_join:g}s",
            "EDGEBED_DURATION": f"{parameters.duration:g}s"}


def stretches(arrivals: list[float], gap_s: float = PULLING_GAP_S,
              frame_s: float = 0.04) -> list[tuple[float, float]]:
    """The stretches of time a node was getting a stream, from its frames' arrivals (epoch s):
    arrivals no more than ``gap_s`` apart belong to one stretch, which lasts from its first
    arrival to one frame time (``frame_s``) after its last."""
    found: list[tuple[float, float]] = []
    for at in sorted(arrivals):
        if found and at - found[-1][1] <= gap_s - frame_s:
            found[-1] = (found[-1][0], at + frame_s)
        else:
            found.append((at, at + frame_s))
    return found


def overlap(spans: list[tuple[float, float]], within: list[tuple[float, float]]) -> float:
    """Seconds of ``spans`` inside any of ``within`` (each list of disjoint intervals)."""
    return sum(max(0.0, min(end, until) - max(start, since))
               for start, end in spans for since, until in within)


def transcoder_time(arrivals: list[float], present: list[tuple[float, float]]
                    ) -> dict[str, float]:
    """How long the transcoder pulled (``pulling_s``), and of it how long no viewer of another
    protocol was there (``wasted_s``: ``present`` are their stays, join to last frame), before
    the first one joined (``before_s``) and after the last one's last frame (``after_s``)."""
    spans = stretches(arrivals)
    pulling = sum(end - start for start, end in spans)
    first = min((since for since, _ in present), default=float("inf"))
    last = max((until for _, until in present), default=float("-inf"))
    return {"pulling_s": pulling, "wasted_s": pulling - overlap(spans, present),
            "before_s": overlap(spans, [(float("-inf"), first)]),
            "after_s": overlap(spans, [(last, float("inf"))]) if present else pulling}


def _attributes(text: str) -> dict:
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}


def measure(run_dir: Path) -> dict[str, float]:
    """One row of the run's metrics (:data:`METRICS`)."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    nodes = resolved["topology"]["nodes"]
    source = resolved["controller"]["policy_params"].get("source_protocol", "rtmp")
    [transcoder] = [name for name, node in nodes.items()
                    if node.get("labels", {}).get("transcoder") in (True, "true", "True")]
    viewers = sorted({name for entry in resolved["workload"] if entry["agent"] == "viewer"
                      for name in entry["nodes"]})
    other = [v for v in viewers if nodes[v].get("labels", {}).get("protocol", source) != source]
    same = [v for v in viewers if v not in other]
    by_address = {value: name for name, value in host_addresses(nodes).items()}
    served = serving_nodes(run_dir, by_address)
    whole, delays = whole_frames(run_dir)
    [fps] = [float(entry["params"]["fps"]) for entry in resolved["workload"]
             if entry["agent"] == "streamer"]
    shown = viewer_playouts(run_dir, viewers, fps, PLAYOUT_BUFFER_S)
    # The other protocol's viewers' stays: from the join to their last whole frame.
    present = [(shown[v].requested_s, max(whole[v].values())) for v in other
               if shown[v].requested_s is not None and whole.get(v)]
    arrivals = [float(row["arrived_s"]) for row in read_table(run_dir, "frames")
                if row["node"] == transcoder and row.get("arrived_s")]
    pulled = sum(float(row["bytes"]) for row in read_table(run_dir, "flows")
                 if row["node"] == transcoder)
    duration = float(resolved["duration"])
    started = sum(bool(_attributes(row.get("attributes", "")).get("transcoder_started"))
                  for row in read_table(run_dir, "decisions_followed") if row["node"] in other)
    time_at = transcoder_time(arrivals, present)

    def losses(group: list[str]) -> tuple[int, int]:
        counted = [viewer_frame_loss(whole, served, v) for v in group]
        return sum(lost for lost, _ in counted), sum(of for _, of in counted)

    late_lost, late_of = losses(other)
    same_lost, same_of = losses(same)
    late = playout_metrics(shown[v] for v in other)
    same_play = playout_metrics(shown[v] for v in same)
    p50s = [float(np.percentile(delays[v], 50)) for v in same if delays.get(v)]
    return {"transcoder_mb": pulled / 1e6,
            "transcoder_mbps": 8 * pulled / 1e6 / duration,
            "transcoder_pulling_s": time_at["pulling_s"],
            "transcoder_wasted_s": time_at["wasted_s"],
            "transcoder_before_join_s": time_at["before_s"],
            "transcoder_after_leave_s": time_at["after_s"],
            "transcoder_started_joins": started,
            "late_on_transcoder": sum(served.get(v) == transcoder for v in other),
            "late_startup_ms": late["startup_mean_ms"],
            "late_first_frame_ms": late["first_frame_mean_ms"],
            "late_frames_lost": late_lost, "late_frames_expected": late_of,
            "late_stalls": late["stalls"], "late_freezes": late["freezes"],
            "late_freeze_ms": late["freeze_ms"],
            "same_on_transcoder": sum(served.get(v) == transcoder for v in same),
            "same_startup_mean_ms": same_play["startup_mean_ms"],
            "same_uninterrupted": same_play["uninterrupted_viewers"],
            "same_freeze_share_pct": same_play["freeze_share_pct"],
            "same_frame_loss_pct": 100 * same_lost / same_of if same_of else float("nan"),
            "same_delay_p50_ms": statistics.fmean(p50s) if p50s else float("nan"),
            "origin_sessions": sum(node == ORIGIN for node in served.values()),
            "late_viewers": len(other), "same_viewers": len(same),
            "network_kept_up": int(network_kept_up(
                json.loads((run_dir / "summary.json").read_text())))}


METRICS = (Metric("transcoder_mb", "bytes the transcoder pulled from the origin", "MB"),
           Metric("transcoder_mbps", "the transcoder's pull over the whole run", "Mbit/s"),
           Metric("transcoder_pulling_s", "time the transcoder was getting the stream", "s"),
           Metric("transcoder_wasted_s", "of it, with no viewer of another protocol", "s"),
           Metric("transcoder_before_join_s", "of it, before that viewer joined", "s"),
           Metric("transcoder_after_leave_s", "of it, after that viewer's last frame", "s"),
           Metric("transcoder_started_joins", "joins whose decision started the transcoder"),
           Metric("late_on_transcoder", "other-protocol viewers served by the transcoder"),
           Metric("late_startup_ms", "other-protocol viewer's startup (join to first frame "
                  "shown)", "ms"),
           Metric("late_first_frame_ms", "other-protocol viewer's join to first whole frame",
                  "ms"),
           Metric("late_frames_lost", "frames the origin got that it never got whole"),
           Metric("late_frames_expected", "frames counted for its loss"),
           Metric("late_stalls", "its stalls"),
           Metric("late_freezes", "its freezes (picture held until an I frame shows)"),
           Metric("late_freeze_ms", "its time frozen", "ms"),
           Metric("same_on_transcoder", "same-protocol viewers served by the transcoder"),
           Metric("same_startup_mean_ms", "same-protocol viewers' mean startup", "ms"),
           Metric("same_uninterrupted", "same-protocol viewers that never stalled or froze"),
           Metric("same_freeze_share_pct", "of their time watched, frozen", "%"),
           Metric("same_frame_loss_pct", "frames same-protocol viewers lost", "%"),
           Metric("same_delay_p50_ms", "same-protocol viewers' median frame delay (mean)",
                  "ms"),
           Metric("origin_sessions", "sessions the origin served (viewers, nodes)"),
           Metric("late_viewers", "viewers of another protocol"),
           Metric("same_viewers", "viewers of the stream's protocol"),
           Metric("network_kept_up", "the emulated network kept up (no wire late, no "
                  "emulator-made loss over its limit)"),
           *EMULATED_METRICS)
PLOTS = ("transcoder_mbps", "transcoder_pulling_s", "transcoder_wasted_s", "late_startup_ms",
         "late_first_frame_ms", "late_frames_lost", "late_freeze_ms", "same_startup_mean_ms",
         "same_frame_loss_pct", "same_freeze_share_pct")

CONSTANTS = (
    Constant("PULLING_GAP_S", f"{PULLING_GAP_S:g} s", "frames the transcoder got at most this "
             "far apart belong to one stretch of pulling"),
    PLAYOUT_DELAY, FRAME_LOSS_EDGE,
    Constant("agents.edge_server pull_timeout", f"{PULL_TIMEOUT_S:g} s",
             "a node ends a session (and stops its own pull) this long after the last pull"))

ABOUT = f"""\
Each cell is one emulated run of `topologies/dispatch/transcoding.yaml` (real packets on a
Mininet network, userspace Open vSwitch, edgebed's controller running the dispatch policy with
`transcoding` set to the cell's policy): one 1 Mbit/s stream (25 frames/s, an I frame in every
50) pushed in rtmp to the origin cn1 at 0.5 s; three rtmp viewers joining 0.6 s apart from
2 s, placed on the media nodes cn1 and cn2 (cn2 back-sources from cn1); one webrtc viewer,
webv1, joining at 7 s and leaving 4 s later, placed on the transcoder tc1 (a node of its own
site, 2 ms from the media nodes' switch). Every media node keeps a GOP cache. Policies:

* `passive` — the transcoder is a media node that back-sources the stream from cn1 only while
  it serves a viewer (dispatch's passive transcoding, the policy's `rooms.Transcoding` saying
  that webv1's join started it: decision attribute `transcoder_started`);
* `always` — the transcoder pulls the stream from cn1 from its start, viewers or not (the
  always-on transcoder: `edge_server`'s `back_source_mode: always`).

Measured: the bytes the transcoder got from the origin (its `flows` row) and their rate over
the whole run; when it was getting the stream (stretches of frames no more than
{PULLING_GAP_S:g} s apart),
and of that time how much no webrtc viewer was there (`transcoder_wasted_s`: webv1's stay is
from its join request to its last whole frame), split into before webv1 joined and after it
left; webv1's startup (join to first frame shown, `experiments.playout`,
{PLAYOUT_BUFFER_S:g} s of playout delay), the time to its first whole frame, its stalls, its
freezes (a frame lost, late or without the frames since its GOP's I frame holds the picture
until an I frame arrives whole in time) and the frames the origin got that it never got whole
(from {EDGE_S:g} s after its first frame to {EDGE_S:g} s before its last, as
`reports/dispatch/rooms/` counts them); and the rtmp viewers' startup, stalls, share of the
time watched frozen, frames lost and median delay, which the mechanism should leave alone.

What is reproduced: the talk's mechanism, a transcoder running only while a client of another
protocol is in the room, and its cost. What is not: the conversion itself (protocols are
labels; the transcoder forwards frames as any node does, so its work is counted as the stream
it pulls and the time it runs, not as CPU), and rooms with many protocols or many streams.
After the viewer leaves, passive keeps pulling for the transcoder's pull timeout
({PULL_TIMEOUT_S:g} s) and the origin's ({PULL_TIMEOUT_S:g} s) before the stream stops: that is
the tail passive wastes.

Scale: a machine's, one stream, one room, four viewers, one of another protocol; every
figure is per run. Runs made while other work loaded the shared machine; `network_kept_up`
says whether the emulated network kept up in each.
"""


def predicted(late_join: float, duration: float) -> dict[str, float]:
    """Transcoder-seconds the model (:func:`controller.policies.dispatch.model.transcoding`,
    the policy's own :class:`~controller.policies.dispatch.rooms.Transcoding`) gives each
    mechanism on the scenario's timeline: the stream from :data:`STREAM_AT_S` to the end, the
    webrtc viewer from ``late_join`` for :data:`STAY_S`."""
    joins = [Join("stream-0", "webv1", "webrtc", late_join - STREAM_AT_S,
                  late_join - STREAM_AT_S + STAY_S)]
    return {mode: transcoding(joins, {"stream-0": "rtmp"}, duration - STREAM_AT_S,
                              mode).transcoder_s for mode in POLICIES}


def remarks(results: pd.DataFrame) -> list[str | Table]:
    """Always-on against passive on the measured columns (means over the repetitions), the
    runs' counts per policy, and the model's transcoder-seconds beside the measured pulling
    time."""
    counted = policy_means(results, POLICIES)
    if counted is None:
        return []
    means, runs = counted
    compared = (("transcoder_mbps", "Mbit/s pulled by the transcoder", ".2f"),
                ("transcoder_mb", "MB pulled", ".1f"),
                ("transcoder_pulling_s", "s pulling", ".1f"),
                ("transcoder_wasted_s", "s pulling with no webrtc viewer", ".1f"),
                ("transcoder_before_join_s", "s of it before the join", ".1f"),
                ("transcoder_after_leave_s", "s after the leave", ".1f"),
                ("late_startup_ms", "ms webrtc viewer's startup", ".0f"),
                ("late_first_frame_ms", "ms to its first whole frame", ".0f"),
                ("late_frames_lost", "frames it lost", ".1f"),
                ("same_startup_mean_ms", "ms rtmp viewers' startup", ".0f"),
                ("same_frame_loss_pct", "% frames rtmp viewers lost", ".2f"),
                ("same_delay_p50_ms", "ms rtmp viewers' median delay", ".0f"))
    sides = against(means, "always", "passive", compared)
    sums = results.groupby("policy").sum(numeric_only=True).astype(int)
    return [f"Always-on against passive transcoder (means of {int(runs['always'])} and "
            f"{int(runs['passive'])} runs): " + "; ".join(sides) + ".",
            Table("The runs of each policy, in total (under passive, webv1's join is the "
                  "decision that starts the transcoder):",
                  ("policy", "runs", "the emulated network kept up",
                   "decisions that started the transcoder", "rtmp views never stalled or froze",
                   "rtmp views"),
                  tuple((policy, str(int(runs[policy])), str(sums.loc[policy, "network_kept_up"]),
                         str(sums.loc[policy, "transcoder_started_joins"]),
                         str(sums.loc[policy, "same_uninterrupted"]),
                         str(sums.loc[policy, "same_viewers"])) for policy in POLICIES)),
            model_table(results)]


def model_table(results: pd.DataFrame) -> Table:
    """The model's transcoder-seconds against the transcoder's measured pulling time."""
    late_join = float(results["value"].iloc[0])
    duration = float(Parameters().duration)
    model = predicted(late_join, duration)
    means = results.groupby("policy")["transcoder_pulling_s"].mean()
    return Table(f"The model (the policy's Transcoding on this timeline: the stream from "
                 f"{STREAM_AT_S:g} s to {duration:g} s, webv1 from {late_join:g} s for "
                 f"{STAY_S:g} s) against the transcoder's measured pulling (passive's "
                 f"difference: the back-source pull's start after the join and the two pull "
                 f"timeouts after the leave):",
                 ("policy", "transcoder running in the model (s)",
                  "measured pulling (s, mean over the runs)"),
                 tuple((policy, f"{model[policy]:.1f}", f"{means[policy]:.1f}")
                       for policy in POLICIES))


KINDS = (Kind(name="dispatch_transcoding", parameters=Parameters, policies=POLICIES,
              run=measured_run(variables, measure),
              metrics=METRICS, plots=PLOTS, constants=CONSTANTS, about=ABOUT, remarks=remarks,
              emulated=True),)
