"""live_edge emulated: the ``live_edge_emulation`` kind of experiment cell (one ``edgebed run``
of ``topologies/live_edge/live_edge.yaml`` per cell), its QoE twice, as the model predicted it and as
the agents measured it (:mod:`~experiments.kinds.live_edge.emulation_measures`), and where the
run left each viewer, so that the report compares the policies viewer by viewer
(:mod:`~experiments.kinds.live_edge.emulation_remarks`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from experiments.kinds.live_edge.emulation_measures import (placement, placement_text,
                                                            run_playout, run_totals, viewer_qoe)
from experiments.kinds.live_edge.emulation_remarks import remarks
from experiments.playout_columns import (PLAYOUT_BUFFER_S, PLAYOUT_METRICS, SWITCH_METRICS,
                                         SWITCH_WINDOW_S)
from experiments.sweeps.kinds import (EMULATED_METRICS, Cell, EmulatedParameters, Kind, Metric,
                                      emulated_run, run_record)


class Parameters(EmulatedParameters):
    """What one emulated cell runs: the scenario (its ``${VAR}`` defaults otherwise), for how
    long, with which transcoding delay G (ms per Mbit/s, emulated by the edges and counted by
    the policy alike), and where the run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/live_edge/live_edge.yaml", description="the scenario file")
    duration: float = Field(20.0, gt=0, description="run length (s)")
    G: float = Field(50.0, ge=0, description="transcoding delay per Mbps below the source "
                                             "(ms/Mbps)")


def run_cell(cell: Cell) -> list[dict[str, object]]:
    """One emulated run of ``cell``'s policy: the scenario's policy, seed and G set through its
    variables; its QoE as predicted and as measured, and where it left each viewer
    (``placement``, a text column of ``results.csv``, checked against the controller's
    ``decisions`` table), and what its viewers' players showed (:func:`run_playout`)."""
    parameters: Parameters = cell.parameters
    run_dir, summary = emulated_run(cell, parameters.scenario, parameters.duration,
                                    parameters.runs_dir,
                                    {"EDGEBED_G_MS": f"{parameters.G:g}",
                                     "EDGEBED_G_SI": f"{parameters.G * 1e-9:g}"})
    rows = viewer_qoe(run_dir)
    placed, unconfirmed = placement(run_dir, rows)
    return [run_totals(rows) | run_playout(run_dir) | {**run_record(summary),
                                "unconfirmed": unconfirmed,
                                "placement": placement_text(placed)}]


METRICS = (Metric("objective_model", "objective, model's prediction"),
           Metric("objective_measured", "objective, from measurements"),
           Metric("latency_model_ms", "mean latency, model's", "ms"),
           Metric("latency_measured_ms", "mean latency, measured", "ms"),
           Metric("bitrate_mbps", "mean bitrate decided", "Mbps"),
           Metric("goodput_mbps", "mean goodput measured", "Mbps"),
           Metric("viewers", "viewers served"),
           *EMULATED_METRICS,
           Metric("latency_p99_ms", "mean 99th-percentile delay, measured", "ms"),
           Metric("loss", "mean loss of the viewers' streams, measured", "fraction"),
           Metric("unconfirmed", "viewers whose last decision the controller's decisions "
                                 "table does not name"),
           *PLAYOUT_METRICS, *SWITCH_METRICS)



ABOUT = f"""\
Each cell is one emulated run of the experiment's scenario (real packets on a Mininet network,
userspace Open vSwitch, edgebed's controller running the policy every 5 s period): a streamer's
source through a streamer-side edge to three or six transcoding edges over 150-210 ms
inter-edge links, viewers 5-15 ms from the two edges covering each, half of them joining in the
second period. Three scenarios use this kind:

- `topologies/live_edge/live_edge.yaml` (experiment `live_edge-emulation`): an 8 Mbit/s source and six
  viewers. The scale is a machine's, not the paper's: 6 viewers on 3 edges, not 50-125 on
  2-12, so capacities (the paper's 40 Mbit/s and 15 vCPU) do not bind and the allocation is
  driven by latency, interaction demand and preferences.
- `topologies/live_edge/capacity.yaml` (experiment `live_edge-capacity`): thirty viewers on
  the same three edges with every rate 1/8 of the paper's (the source, the ladder, C_m and H;
  G x8 so that G·(R−R_v) is the paper's delay for the same rung). The edges' uplinks D_m are
  set a little above the paper's D_m/8, so that the first period's viewers at the top rung do
  not fill every edge and later viewers can still be served, and queue 100 ms of their rate;
  the viewers' preferred rungs add up to more than the uplinks: capacity binds, and the
  policies choose whom to serve, where and at which rung.
- `topologies/live_edge/table3.yaml` (experiment `live_edge-table3`): the paper's default
  regime (Table 3), 100 viewers on six edges, each of six access switches covered by two
  neighbouring edges, at the same 1/8 rates. The uplinks (8 Mbit/s, queueing 100 ms) hold the
  first period's preferred rungs and not the later viewers' as well, so capacity binds when
  they join.

Per run the QoE is computed twice over the viewers' last decisions: as the policy's model
predicted it (its network delays plus G·(R−R_v)) and with what the viewers' agents measured
put in (median one-way delay from the streamer for the latency, goodput for the bitrate); the
model itself is a reconstruction. The objective is the gift-weighted QoE summed over the
viewers the controller served (a viewer it refused adds nothing either way).

What the emulation measures that the model does not (the remarks give it per policy and
value): transcoding delay is emulated as the model has it, an edge holding each transcoded
frame G·(R−R_v) after the source frame was complete, but it then sends the frame's packets
spread over the time the source frame took to arrive (paced as the source was, up to a frame
interval, 1/30 s at the stream's 30 fps), and a frame is complete only when its last fragment
arrived; the model's G·(R−R_v) counts neither. On top come queueing (the edges' uplinks are
rate-limited to D_m, counting whole Ethernet frames, which the policies fill with media bitrate
while the packets carry more: 42 bytes of Ethernet, IP and UDP headers per packet of at most
1400 bytes; and the userspace switches of a loaded machine) and loss (on the way to
the edges and from them; a frame with a lost fragment is transcoded only once its packets have
stopped coming for the reorder wait).
The delay's 99th percentile and the loss of the viewers' streams are measured to show how much
of the gap each explains.

Playout, every viewer of every run (`experiments.playout`, the player the dispatch kinds'
viewers are played through): {PLAYOUT_BUFFER_S:g} s of playout delay, a frame shown only if it
and every frame it is decoded from since its GOP's I frame arrived whole in time, all of one
encoding, a frame got from two edges while the viewer moved counting where it first came whole.
Startup runs from the viewer's join request to its first frame shown. A server switch is a
decision the viewer followed that moved it to another edge (its `live_decisions` row
`migrated`); a stall or freeze that began within {SWITCH_WINDOW_S:g} s after the viewer heard
it is the switch's (the old edge may send until its session times out, 1 s after the last pull,
and a gap reaches the player's slots the playout delay later): the interruption the model's
switch penalty S stands for, measured. An encoding is what the edges make of the source
(`emulation_measures.edge_encoding`): a viewer pulling the source's bitrate gets the source's frames passed
through, the same from every edge, so after a move at that rung a frame from the new edge
counts as decoded from the old edge's frame before it, and what is measured of the move is
the time neither edge's frames came in time; a viewer pulling less gets the source transcoded
by its edge, each edge its own encoding (the same frame numbers and I frames, other bits), so
after a move at a transcoded rung the picture freezes until the new edge's I frame, unless the
old edge's frames keep coming until then. A change of rung likewise freezes until the new
rung's I frame.

At six viewers capacity does not bind, so the policies differ only in how they weigh latency,
interaction demand and preferences; the differences the paper reports need binding capacity,
which the model-level report (`reports/live_edge/model/`), `live_edge-capacity` and
`live_edge-table3` show.
"""

KIND = Kind(name="live_edge_emulation", parameters=Parameters,
            policies=("lua", "df", "mhcp", "random", "optimal"), run=run_cell,
            metrics=METRICS, plots=tuple(metric.name for metric in METRICS[:10]), about=ABOUT,
            remarks=remarks, emulated=True, texts=("placement",))
KINDS = (KIND,)
