"""Seed 001 emulated: the ``dispatch_emulation`` kind of experiment cell, one ``edgebed run`` of
``topologies/dispatch.yaml`` per cell, each mechanism against its absence on the same seeds.

The cell's policy says which mechanism is on, through the scenario's variables:

* ``database`` / ``probe`` — access: each viewer takes the database's pick (one candidate), or
  probes three ranked candidates with ICMP echoes and confirms the best; the database is wrong
  for ``database_error`` of the clients in and out of cn (seeded by the cell's seed); relays
  off, so only access differs;
* ``direct`` / ``relay`` — back-source paths: never relayed, or relayed through hk1 when a media
  node's probes show its direct path from the origin poor by VIA's thresholds; viewers probe
  (the database right), the direct cn-us link's Gilbert-Elliott p is ``border_loss_p``;
* ``recompute`` / ``hot_standby`` — failure handling when the scheduled cut takes the cn-eu link
  down mid-stream: the controller recomputes the routes after the switch reports the port
  down, or every switch already holds the standby route in an OpenFlow fast-failover group;
  viewers probe (the database right), relays off.

Everything comes from what the run recorded: the controller's first placement of each viewer
(the database's pick), the media nodes' sessions (where a viewer's media came from), the nodes'
input (the stream's loss on its way to a viewer's node) and the viewers' own one-way delays.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import networkx as nx
import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field

from controller.config import ControllerConfig
from controller.policies.dispatch.quality import VIA
from controller.view import NetworkView
from experiments.measurements import read_table
from experiments.sweeps.kinds import Cell, Kind, Metric, emulated_run
from topologies.units import parse_duration

ACCESS = ("database", "probe")
RELAYS = ("direct", "relay")
FAILOVER = ("recompute", "hot_standby")
# The viewer whose stream crosses the link the scenario cuts (eu1 gets it over cn-eu), and how
# long after the cut its outage is looked for: long enough for the recomputed route.
CUT_VIEWER = "euv1"
INGEST = "cn0"
FAILOVER_WINDOW_S = 4.0


class Parameters(BaseModel):
    """One emulated cell: the scenario, for how long, the database's error share (in and out
    of cn alike), the direct cn-us link's burst-loss p, and where the run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/dispatch.yaml", description="the scenario file")
    duration: float = Field(14.0, gt=0, description="run length (s)")
    database_error: float = Field(0.0, ge=0, le=1, description="clients the database "
                                                                "misplaces")
    border_loss_p: str = Field("0.5%", description="Gilbert-Elliott p of the cn-us link")
    runs_dir: str = Field("runs", description="where the runs' directories go")


def variables(cell: Cell) -> dict[str, str]:
    """The scenario's variables for ``cell``'s policy and parameters."""
    parameters: Parameters = cell.parameters
    access = cell.policy in ACCESS
    # EDGEBED_SEED is the cell's seed already (emulated_run sets it).
    return {"EDGEBED_DATABASE_SEED": str(cell.seed % 2**32),
            "EDGEBED_CANDIDATES": "1" if cell.policy == "database" else "3",
            "EDGEBED_DATABASE_ERROR": f"{parameters.database_error:g}" if access else "0",
            "EDGEBED_DATABASE_ERROR_ABROAD": f"{parameters.database_error:g}" if access
            else "0",
            "EDGEBED_RELAYS": "true" if cell.policy == "relay" else "false",
            "EDGEBED_FAST_FAILOVER": "false" if cell.policy == "recompute" else "true",
            "EDGEBED_BORDER_LOSS_P": parameters.border_loss_p,
            "EDGEBED_DURATION": f"{parameters.duration:g}s"}


def failover(run_dir: Path, viewer: str = CUT_VIEWER, ingest: str = INGEST,
             window_s: float = FAILOVER_WINDOW_S) -> tuple[float, int]:
    """``viewer``'s outage at the scenario's link cut.

    The failover gap (s) is the longest time between two whole frames arriving at the viewer,
    from the last before the cut to the first after ``window_s`` past it (the window's end
    when none came): link down to the viewer receiving again, plus up to one frame interval
    (the last frame before the cut arrived up to 40 ms before it). The frames lost are those
    the ingest node got whole from 0.1 s before the cut (frames in flight on the 90 ms link
    die with it) to the window's end that the viewer never got whole: the source's frame
    numbers, which media nodes keep. They include the cross-border links' own burst losses in
    the window (about a frame a second at the scenario's p 0.5%). The cut's time is the run's
    timeline origin plus the schedule's ``link_down`` time (the runner performs it within
    milliseconds of that)."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    [cut_at] = [parse_duration(event["at"]) for event in resolved.get("schedule") or []
                if event.get("action") == "link_down"]
    origin = json.loads((run_dir / "summary.json").read_text())["timeline_origin_s"]
    cut, end = origin + cut_at, origin + cut_at + window_s
    whole: dict[str, dict[int, float]] = {viewer: {}, ingest: {}}
    for row in read_table(run_dir, "frames"):
        if row["node"] in whole and row["complete"] == "True":
            whole[row["node"]][int(row["frame"])] = float(row["arrived_s"])
    arrivals = sorted(whole[viewer].values())
    before = [t for t in arrivals if t < cut]
    later = [t for t in arrivals if t > end]
    times = ([before[-1] if before else cut] + [t for t in arrivals if cut <= t <= end]
             + [later[0] if later else end])
    made = [frame for frame, t in whole[ingest].items() if cut - 0.1 <= t <= end]
    return (max(b - a for a, b in zip(times, times[1:])),
            sum(frame not in whole[viewer] for frame in made))


def measure(run_dir: Path) -> dict[str, float]:
    """One row of the run's metrics (:data:`METRICS`)."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    nodes = resolved["topology"]["nodes"]
    region = {name: node.get("labels", {}).get("region") for name, node in nodes.items()}
    viewers = sorted(name for name, node in nodes.items() if node.get("role") == "viewer")
    address = {name: next(iter(node["interfaces"].values())).split("/")[0]
               for name, node in nodes.items() if "interfaces" in node}
    graph = NetworkView.from_json(
        ControllerConfig.read(run_dir / "controller" / "config.json").view).policy_graph()
    first_place = {}
    for row in sorted(read_table(run_dir, "decisions"), key=lambda r: float(r["time"])):
        if row["kind"] == "place" and row["flow"] != "-":
            first_place.setdefault(row["flow"].split("/")[0], row["server"])
    sessions = read_table(run_dir, "live_sessions")
    by_address = {value: name for name, value in address.items()}
    served: dict[str, dict[str, int]] = {}
    for row in sessions:
        viewer = by_address.get(row["viewer"], row["viewer"])
        served.setdefault(viewer, {})
        served[viewer][row["node"]] = served[viewer].get(row["node"], 0) + int(row["packets"])
    source = {viewer: max(counts, key=counts.get) for viewer, counts in served.items()
              if any(counts.values())}
    flows = {row["node"]: row for row in read_table(run_dir, "flows")}
    rtts, delays, poor, node_loss = [], [], 0, []
    for viewer in viewers:
        node = source.get(viewer)
        if node is None:
            continue
        rtts.append(2e3 * nx.dijkstra_path_length(graph, viewer, node, weight="delay"))
        delay = float(flows[viewer]["delay_p50_ms"]) if viewer in flows else float("nan")
        delays.append(delay)
        loss = float(flows[node]["loss_fraction"]) if node in flows else 0.0
        if region[viewer] != "cn":
            node_loss.append(loss)
        # VIA's thresholds on what a viewer gets: its node's input loss, its one-way delay
        # from the streamer doubled for a round trip.
        poor += loss > VIA.loss or 2 * delay / 1e3 > VIA.rtt
    relayed = {row["flow"] for row in read_table(run_dir, "decisions_followed")
               if row["node"] == "cn0" and "hk1" in row["via"].split(";")}
    gap_s, frames_lost = failover(run_dir)
    return {"viewers_served": len(source),
            "misplaced_by_database": sum(region.get(first_place.get(v)) not in (None, region[v])
                                         for v in viewers),
            "served_abroad": sum(region[source[v]] != region[v] for v in source),
            "access_rtt_ms": statistics.fmean(rtts) if rtts else float("nan"),
            "delay_p50_ms": statistics.fmean(delays) if delays else float("nan"),
            "cross_border_node_loss_pct": 100 * statistics.fmean(node_loss) if node_loss
            else float("nan"),
            "poor_viewers": poor, "relayed_flows": len(relayed),
            "failover_gap_ms": 1e3 * gap_s, "failover_frames_lost": frames_lost}


def run_cell(cell: Cell) -> list[dict[str, object]]:
    parameters: Parameters = cell.parameters
    run_dir, _ = emulated_run(cell, parameters.scenario, parameters.duration,
                              parameters.runs_dir, variables(cell))
    return [measure(run_dir)]


METRICS = (Metric("misplaced_by_database", "viewers the database placed abroad"),
           Metric("served_abroad", "viewers served from another region"),
           Metric("access_rtt_ms", "mean round trip to the serving node (configured path)",
                  "ms"),
           Metric("cross_border_node_loss_pct",
                  "stream loss at the nodes of viewers outside cn", "%"),
           Metric("poor_viewers", "viewers poor by VIA (node loss > 1.2% or RTT > 320 ms)"),
           Metric("delay_p50_ms", "mean of viewers' median one-way delay", "ms"),
           Metric("relayed_flows", "flows the origin sent through hk1"),
           Metric("failover_gap_ms", f"{CUT_VIEWER}'s longest wait for a whole frame after "
                  "the cn-eu cut", "ms"),
           Metric("failover_frames_lost", f"frames {CUT_VIEWER} lost from the cut to "
                  f"{FAILOVER_WINDOW_S:g} s after"),
           Metric("viewers_served", "viewers served"))

ABOUT = """\
Each cell is one emulated run of `topologies/dispatch.yaml` (real packets on a Mininet network,
userspace Open vSwitch, edgebed's controller running the dispatch policy for three regional
centers): one 1 Mbit/s stream pushed in cn and back-sourced to seven media nodes in cn, us and
eu, six viewers (four in cn, one in us, one in eu), a relay host hk1 between cn and us. The
scale is a machine's: 6 viewers and 7 nodes, not the talk's millions; the model-level report
(`reports/dispatch-model/`) runs 10k clients on 100 nodes. A metric is counted over the six
viewers of a run, so one misplaced viewer moves a count by one: read counts, not shares.
`access_rtt_ms` is the configured round trip between a viewer and the node its media came
from (what the database's mistake costs the pulls); the stream's loss is measured at the
viewers' nodes' input (a media node re-packetises, so a viewer's own loss counter starts at
its node).

What to expect: hk1 sits between cn and us only, so a relay can fix the us viewer's node and
not the eu viewer's, fed over the lossy cn-eu link under both policies (and over cn-us too
after that link is cut at 9 s): relays fix at most one of the two poor viewers here. A node's
loss counts the whole run, the seconds before the relay was inserted included. Probing shows
only when the seeded database sends a viewer abroad, which at six viewers few seeds do (an
in-country mistake costs a few milliseconds here), and probing can only pick among the
candidates answered: a viewer the database puts in another country gets that country's best
node and the best of one other region (`other_regions: 1`), which need not be its own, so it
may stay abroad, nearer than the database's pick (the model-level report's list-reach sweep
measures this at scale). Runs made while other work loaded the machine: delays carry its
queues. One repetition per seed: read the counts with the number of runs beside them.

Failover: at 9 s the scenario takes the cn-eu link down, over which eu1 gets the stream for
euv1; the standby route is cn-us-eu (80 + 35 ms against 90 ms one way). `failover_gap_ms` is
euv1's longest wait for a whole frame from the last before the cut to 4 s after it (link down
to receiving again, plus up to one 40 ms frame interval); `failover_frames_lost` counts the
frames the ingest node cn0 got in that time that euv1 never got whole, the cross-border links'
own burst losses included (about a frame a second). Every run has the cut; the hot_standby and
recompute cells differ only in the controller's `fast_failover`.
"""

def remarks(results: pd.DataFrame) -> list[str]:
    """Per swept value, what each mechanism bought against its absence, from the results:
    viewers served from abroad (probing) and viewers poor by VIA (relays), in total over the
    value's repetitions; the failover gap's range and the frames lost in total (failover)."""
    found = []
    for (baseline, mechanism), metric, what in (
            (ACCESS, "served_abroad", "viewers served from another region"),
            (RELAYS, "poor_viewers", "viewers poor by VIA's thresholds")):
        chosen = results[results["policy"].isin((baseline, mechanism))]
        for value, group in chosen.groupby("value", sort=False):
            totals = group.groupby("policy")[metric].sum()
            runs = group.groupby("policy").size()
            if {baseline, mechanism} <= set(totals.index):
                found.append(
                    f"At {group['parameter'].iloc[0]} = {value}: {int(totals[mechanism])} "
                    f"{what} with {mechanism} against {int(totals[baseline])} with {baseline} "
                    f"({int(runs[mechanism])} and {int(runs[baseline])} runs of six viewers).")
    chosen = results[results["policy"].isin(FAILOVER)]
    for value, group in chosen.groupby("value", sort=False):
        by = group.groupby("policy")
        if set(FAILOVER) <= set(by.groups):
            gaps, lost = by["failover_gap_ms"].agg(["min", "max"]), by["failover_frames_lost"]
            found.append(
                f"At {group['parameter'].iloc[0]} = {value}: failover gap "
                + " against ".join(
                    f"{gaps.loc[policy, 'min']:.0f}-{gaps.loc[policy, 'max']:.0f} ms with "
                    f"{policy} ({int(lost.sum()[policy])} frames lost in "
                    f"{int(by.size()[policy])} runs)" for policy in reversed(FAILOVER)) + ".")
    return found


KINDS = (Kind(name="dispatch_emulation", parameters=Parameters, policies=ACCESS + RELAYS + FAILOVER,
              run=run_cell, metrics=METRICS,
              plots=tuple(m.name for m in METRICS[:6] + METRICS[-2:]),
              about=ABOUT, remarks=remarks, emulated=True),)
