"""Seed 001 emulated: the ``dispatch_emulation`` kind of experiment cell, one ``edgebed run`` of
``topologies/dispatch.yaml`` per cell, each mechanism against its absence on the same seeds.

The cell's policy says which mechanism is on, through the scenario's variables:

* ``database`` / ``probe`` — access: each viewer takes the database's pick (one candidate), or
  probes three ranked candidates with ICMP echoes and confirms the best; the database is wrong
  for ``database_error`` of the clients in and out of cn (seeded by the cell's seed); relays
  off, so only access differs;
* ``direct`` / ``relay`` — back-source paths: never relayed, or relayed through hk1 when a media
  node's probes show its direct path from the origin poor by VIA's thresholds; viewers probe
  (the database right), the direct cn-us link's Gilbert-Elliott p is ``border_loss_p``.

Everything comes from what the run recorded: the controller's first placement of each viewer
(the database's pick), the media nodes' sessions (where a viewer's media came from), the nodes'
input (the stream's loss on its way to a viewer's node) and the viewers' own one-way delays.
"""

from __future__ import annotations

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

ACCESS = ("database", "probe")
RELAYS = ("direct", "relay")


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
            "EDGEBED_BORDER_LOSS_P": parameters.border_loss_p,
            "EDGEBED_DURATION": f"{parameters.duration:g}s"}


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
    return {"viewers_served": len(source),
            "misplaced_by_database": sum(region.get(first_place.get(v)) not in (None, region[v])
                                         for v in viewers),
            "served_abroad": sum(region[source[v]] != region[v] for v in source),
            "access_rtt_ms": statistics.fmean(rtts) if rtts else float("nan"),
            "delay_p50_ms": statistics.fmean(delays) if delays else float("nan"),
            "cross_border_node_loss_pct": 100 * statistics.fmean(node_loss) if node_loss
            else float("nan"),
            "poor_viewers": poor, "relayed_flows": len(relayed)}


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
"""

def remarks(results: pd.DataFrame) -> list[str]:
    """Per swept value, what each mechanism bought against its absence, from the results:
    viewers served from abroad (probing) and viewers poor by VIA (relays), in total over the
    value's repetitions."""
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
    return found


KINDS = (Kind(name="dispatch_emulation", parameters=Parameters, policies=ACCESS + RELAYS,
              run=run_cell, metrics=METRICS, plots=tuple(m.name for m in METRICS[:6]),
              about=ABOUT, remarks=remarks, emulated=True),)
