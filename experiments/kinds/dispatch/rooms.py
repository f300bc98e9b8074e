"""dispatch emulated, scheduling modes: the ``dispatch_rooms`` kind of experiment cell, one
``edgebed run`` of ``topologies/dispatch/rooms.yaml`` per cell: single-point against
multi-point scheduling (the cell's policy) for a same-city or a cross-border room (the
``room`` parameter), on the same seeds.

Everything comes from what the run recorded: the media nodes' sessions (which node served a
viewer, and which nodes the origin served as back-sourcing downstreams), the frames every
agent metering media got whole (each frame's one-way delay from the streamer, the origin's
frames against a viewer's for the frames lost end to end, the viewers' playout), the bytes
each media flow delivered (``flows``) and the frames the cross-border wires carried.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field

from experiments.kinds.dispatch.emulation import GOALS, PLAYOUT_DELAY
from experiments.kinds.dispatch.emulation_measures import serving_nodes
from experiments.kinds.dispatch.emulation_remarks import (freeze_table, goals_tables,
                                                          playout_table)
from experiments.measurements import host_addresses, read_table
from experiments.playout_columns import PLAYOUT_BUFFER_S, PLAYOUT_METRICS, playout_metrics
from experiments.playout import viewer_playouts
from experiments.report import against, policy_means, swept_values
from experiments.sweeps.kinds import (EMULATED_METRICS, Cell, Constant, EmulatedParameters,
                                      Kind, Metric, Table, measured_run)

POLICIES = ("single", "multi")
ORIGIN = "cn1"  # the media node the scenario's streamer pushes to
# A viewer's frames count as lost end to end from this long after its first whole frame (its
# join) to this long before its last: frames the origin got in between that it never got whole.
EDGE_S = 0.5


class Parameters(EmulatedParameters):
    """One cell: the scenario, for how long, the room, the cn-us link's burst-loss p and where
    the run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/dispatch/rooms.yaml", description="the scenario file")
    duration: float = Field(12.0, gt=0, description="run length (s)")
    room: Literal["city", "border"] = Field("city", description="same-city (viewers in cn) "
                                                                "or cross-border (us, eu)")
    border_loss_p: str = Field("0.5%", description="Gilbert-Elliott p of the cn-us link")


def variables(cell: Cell) -> dict[str, str]:
    """The scenario's variables for ``cell``'s policy and parameters."""
    parameters: Parameters = cell.parameters
    return {"EDGEBED_SCHEDULING": cell.policy, "EDGEBED_ROOM": parameters.room,
            "EDGEBED_BORDER_LOSS_P": parameters.border_loss_p,
            "EDGEBED_DURATION": f"{parameters.duration:g}s"}


def frame_loss(reference: dict[int, float], got: dict[int, float], edge_s: float = EDGE_S
               ) -> tuple[int, int]:
    """Frames lost end to end by a viewer: of the frames the origin got whole (``reference``:
    frame number -> arrival, epoch s) from ``edge_s`` after the viewer's first whole frame
    to ``edge_s`` before its last (``got``, the same), those it never got whole; returns
    (lost, of how many). (0, 0) when the viewer got no frame."""
    if not got:
        return 0, 0
    start, end = min(got.values()) + edge_s, max(got.values()) - edge_s
    expected = [frame for frame, at in reference.items() if start <= at <= end]
    return sum(frame not in got for frame in expected), len(expected)


def whole_frames(run_dir: Path) -> tuple[dict[str, dict[int, float]], dict[str, list[float]]]:
    """Per node of a run, the frames it got whole (frame number -> arrival, epoch s) and their
    one-way delays from the streamer (ms), from the ``frames`` table."""
    whole: dict[str, dict[int, float]] = {}
    delays: dict[str, list[float]] = {}
    for row in read_table(run_dir, "frames"):
        if row["complete"] == "True":
            whole.setdefault(row["node"], {})[int(row["frame"])] = float(row["arrived_s"])
            delays.setdefault(row["node"], []).append(float(row["delay_ms"]))
    return whole, delays


def viewer_frame_loss(whole: dict[str, dict[int, float]], served: dict[str, str], viewer: str,
                      origin: str = ORIGIN) -> tuple[int, int]:
    """:func:`frame_loss` of ``viewer`` against the ``origin``'s whole frames (``whole`` as
    :func:`whole_frames` gives it; ``served``: which node served each peer)."""
    node = served.get(viewer)
    got = whole.get(viewer, {})
    if node not in (None, origin):
        # Lost on the way to the node is lost to the viewer.
        got = {frame: at for frame, at in got.items() if frame in whole.get(node, {})}
    return frame_loss(whole.get(origin, {}), got)


def cross_border(regions: dict[str, str | None], flows: list[dict], served: dict[str, str],
                 by_address: dict[str, str]) -> float:
    """Mbit/s of media delivered across a border: for every media flow a host received (a row
    of ``flows``), its mean rate (bytes over its duration) when its sender (a viewer's serving
    node, ``served``; else the flow's peer address by ``by_address``) is in another region
    than its receiver."""
    total = 0.0
    for row in flows:
        receiver = row["node"]
        sender = served.get(receiver) or by_address.get(row["peer"])
        duration = float(row["duration_s"] or 0)
        if sender is None or duration <= 0 or regions.get(sender) == regions.get(receiver):
            continue
        total += 8 * float(row["bytes"]) / duration / 1e6
    return total


def measure(run_dir: Path) -> dict[str, float]:
    """One row of the run's metrics (:data:`METRICS`)."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    nodes = resolved["topology"]["nodes"]
    region = {name: node.get("labels", {}).get("region") for name, node in nodes.items()}
    viewers = sorted({name for entry in resolved["workload"] if entry["agent"] == "viewer"
                      for name in entry["nodes"]})
    by_address = {value: name for name, value in host_addresses(nodes).items()}
    served = serving_nodes(run_dir, by_address)
    whole, delays = whole_frames(run_dir)
    p50s, p95s, lost, expected, hops = [], [], 0, 0, []
    for viewer in viewers:
        if delays.get(viewer):
            p50s.append(float(np.percentile(delays[viewer], 50)))
            p95s.append(float(np.percentile(delays[viewer], 95)))
        node = served.get(viewer)
        missed, of = viewer_frame_loss(whole, served, viewer)
        lost, expected = lost + missed, expected + of
        if node is not None:
            # Media nodes after the origin: none when the viewer pulls from it, one when its
            # node back-sourced from the origin (the origin's sessions show that node).
            hops.append(0 if node == ORIGIN else int(served.get(node) == ORIGIN))
    sessions: dict[str, int] = {}
    for peer, node in served.items():
        sessions[node] = sessions.get(node, 0) + 1
    duration = float(resolved["duration"])
    switch_region = {}
    for link in resolved["topology"]["links"]:
        (a, _), (b, _) = (end.split(":") for end in link["endpoints"])
        for host, switch in ((a, b), (b, a)):
            if nodes.get(host, {}).get("role") not in (None, "switch") and region.get(host):
                switch_region.setdefault(switch, region[host])
    summary = json.loads((run_dir / "summary.json").read_text())
    border_frames = 0
    for index, link in enumerate(summary["links"]):
        a, b = (end.split(":")[0] for end in link["endpoints"])
        wire = summary.get("wires", {}).get(str(index))
        if (wire and a in switch_region and b in switch_region
                and switch_region[a] != switch_region[b]):
            border_frames += sum(wire[side]["frames_out"] for side in ("forward", "reverse"))
    [fps] = [float(entry["params"]["fps"]) for entry in resolved["workload"]
             if entry["agent"] == "streamer"]
    shown = viewer_playouts(run_dir, viewers, fps, PLAYOUT_BUFFER_S).values()
    return {"viewers_served": sum(viewer in served for viewer in viewers),
            "delay_p50_ms": statistics.fmean(p50s) if p50s else float("nan"),
            "delay_p95_ms": statistics.fmean(p95s) if p95s else float("nan"),
            "delay_p95_max_ms": max(p95s, default=float("nan")),
            "frame_loss_pct": 100 * lost / expected if expected else float("nan"),
            "cross_border_mbps": cross_border(region, read_table(run_dir, "flows"), served,
                                              by_address),
            "cross_border_pps": border_frames / duration,
            "node_hops_mean": statistics.fmean(hops) if hops else float("nan"),
            "origin_sessions": sessions.get(ORIGIN, 0),
            "node_sessions_max": max(sessions.values(), default=0),
            "nodes_serving": len(sessions),
            **playout_metrics(shown), "viewers": len(viewers)}


METRICS = (Metric("delay_p50_ms", "viewers' median frame delay from the streamer (mean)", "ms"),
           Metric("delay_p95_ms", "viewers' 95th-percentile frame delay (mean)", "ms"),
           Metric("delay_p95_max_ms", "worst viewer's 95th-percentile frame delay", "ms"),
           Metric("frame_loss_pct", "frames the origin got that viewers never got whole", "%"),
           Metric("cross_border_mbps", "media delivered across a border", "Mbit/s"),
           Metric("cross_border_pps", "frames on the cross-border wires, both ways",
                  "frames/s"),
           Metric("node_hops_mean", "media nodes after the origin, per viewer (mean)"),
           Metric("origin_sessions", "sessions the origin served (viewers, nodes)"),
           Metric("node_sessions_max", "most sessions one media node served"),
           Metric("nodes_serving", "media nodes that served a session"),
           *PLAYOUT_METRICS,
           Metric("viewers_served", "viewers served"),
           Metric("viewers", "viewers in the room"),
           *EMULATED_METRICS)
PLOTS = ("delay_p50_ms", "delay_p95_ms", "frame_loss_pct", "cross_border_mbps",
         "cross_border_pps", "node_hops_mean", "origin_sessions", "node_sessions_max",
         "nodes_serving", "uninterrupted_viewers", "stalls", "freeze_share_pct", "startup_mean_ms",
         "first_frame_mean_ms")

FRAME_LOSS_EDGE = Constant("EDGE_S", f"{EDGE_S:g} s", "a viewer's frames count for its frames "
                           "lost from this long after its first whole frame to this long "
                           "before its last")
CONSTANTS = (PLAYOUT_DELAY, *GOALS, FRAME_LOSS_EDGE)

ABOUT = f"""\
Each cell is one emulated run of `topologies/dispatch/rooms.yaml` (real packets on a Mininet
network, userspace Open vSwitch, edgebed's controller running the dispatch policy for three
regional centers): one 1 Mbit/s stream (25 frames/s, an I frame in every 50) pushed in cn to the
origin cn1, six viewers joining 0.6 s apart from 2 s, seven media nodes (cn1, cn2 in machine
room cn-a, cn3 behind the second ISP, two in the us, two in eu). The room is the same-city one
(six viewers in cn) or the cross-border one (three in the us, three in eu). Policies:

* `single` — single-point: every viewer pulls from the origin itself, or from cn2, the
  origin's machine-room neighbour, once its center has no ticket left at cn1 (spill-over;
  tickets 3/3/2 of each node's 8 streams);
* `multi` — multi-point: each viewer pulls from its own best node (nearest, then least loaded
  by the last load report, every 0.25 s), which back-sources the stream from cn1 while it has
  viewers.

Viewers take the center's pick in both (one candidate, the database right: no probing), so
only the scheduling differs. The cross-border links are cn-us 80 ms and cn-eu 90 ms one way
with Gilbert-Elliott burst loss (p 0.5%, r 30%: about 1.6% each way), us-eu 35 ms clean.

Measured: the viewers' frame delays (from the streamer's send time to the frame whole at the
viewer, per viewer its median and 95th percentile, then their mean); `frame_loss_pct`, the
frames the origin got whole, from {EDGE_S:g} s after a viewer's first frame to {EDGE_S:g} s
before its last, that the viewer, or the node that served it, never got whole (a frame a node
got in part reaches its viewers in part); `cross_border_mbps`, the media every host received from a sender in another region,
each flow's bytes over its duration, summed (a viewer's sender is the node that served it,
from the nodes' session tables); `cross_border_pps`, every frame the cross-border wires carried
over the run, both ways, pulls and load reports included (counted by the wires themselves);
`node_hops_mean`, media nodes after the origin on a viewer's way (0 served by the origin, 1 by a
node the origin served); `origin_sessions` and `node_sessions_max`, the sessions (viewers and
back-sourcing nodes) the origin and the busiest node served, `nodes_serving` how many nodes
served any. Playout, stalls, freezes and startup as in the other dispatch reports
(`experiments.playout`: {PLAYOUT_BUFFER_S:g} s of playout delay; a frame shows only if it and
the frames since its GOP's I frame arrived whole by its slot, else the picture freezes until an
I frame does; a stall is nothing due in the buffer), and the views against LiveNet's goals of
stall-free views (neither stalled nor frozen) and startups under 1 s.

Scale: a machine's, one stream and six viewers; a count moves by one with one viewer. Runs made
while other work loaded the shared machine: delays carry its queues, and a run whose
impairment relays fell behind (fidelity flags in its `summary.json`) delivers frames late.
"""


def remarks(results: pd.DataFrame) -> list[str | Table]:
    """Per room, single-point against multi-point on the measured columns (means over the
    repetitions), and each policy's views: their playout (:func:`playout_table`), their
    freezes (:func:`freeze_table`) and against LiveNet's goals (:func:`goals_tables`)."""
    found = []
    compared = (("cross_border_mbps", "Mbit/s across borders", ".2f"),
                ("origin_sessions", "sessions at the origin", ".1f"),
                ("node_sessions_max", "sessions at the busiest node", ".1f"),
                ("nodes_serving", "nodes serving", ".1f"),
                ("node_hops_mean", "node hops per viewer", ".2f"),
                ("delay_p50_ms", "ms median delay", ".0f"),
                ("delay_p95_ms", "ms 95th-percentile delay", ".0f"),
                ("frame_loss_pct", "% frames lost", ".2f"),
                ("startup_mean_ms", "ms mean startup", ".0f"))
    for _, _, group in swept_values(results):
        counted = policy_means(group, POLICIES)
        if counted is None:
            continue
        means, runs = counted
        value = group["value"].iloc[0]
        sides = against(means, "single", "multi", compared)
        found.append(
            f"Room {value}, single-point against multi-point (means of {int(runs['single'])} "
            f"and {int(runs['multi'])} runs): " + "; ".join(sides) + ".")
    return [*found, playout_table(results), *freeze_table(results), *goals_tables(results)]


KINDS = (Kind(name="dispatch_rooms", parameters=Parameters, policies=POLICIES,
              run=measured_run(variables, measure),
              metrics=METRICS, plots=PLOTS, constants=CONSTANTS, about=ABOUT, remarks=remarks,
              emulated=True),)
