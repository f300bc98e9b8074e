"""dispatch emulated, gray failures: the ``dispatch_gray_emulation`` kind of experiment cell,
one ``edgebed run`` of ``topologies/dispatch/dispatch.yaml`` per cell with its schedule
replaced by one scheduled degradation (the ``degradation`` parameter), with the dispatch
center's gray failover (``on``) and without it (``off``), on the same seeds.

Everything comes from what the run recorded: the centers' first placement of each viewer
(which viewers the degradation strikes), the policy's moves, and every viewer's playout of
the frames it got (:mod:`experiments.playout`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import pandas as pd
import yaml
from pydantic import ConfigDict, Field

from experiments.kinds.dispatch.emulation import PLAYOUT_DELAY
from experiments.kinds.dispatch.emulation_remarks import by_value_and_policy, share_with_interval
from experiments.measurements import read_table
from experiments.playout import Playout, viewer_playouts
from experiments.playout_columns import PLAYOUT_BUFFER_S, playout_metrics
from experiments.sweeps.kinds import (EMULATED_METRICS, Cell, Constant, EmulatedParameters,
                                      Kind, Metric, Table, measured_run)

POLICIES = ("off", "on")
DEGRADATIONS = ("node_stall", "loss_ramp", "delay_jump")
STALLED = "cn1"  # the cn viewers' nearest node: the centers place them there first
BORDER = "cn:eth21"  # the direct cn-us link
# The media nodes whose path from the origin cn0 crosses BORDER.
BEHIND_BORDER = ("us1", "us2")
BURST_R = "30%"  # the scenario's Gilbert-Elliott r on BORDER, kept while its p ramps
# The views' figures each row gives for the struck viewers and for every viewer.
VIEW_FIGURES = {"freeze_ms": ("time frozen", "ms"),
                "freeze_share_pct": ("time frozen of the time watched", "%"),
                "stall_ms": ("time stalled (nothing due in the buffer)", "ms"),
                "frames_lost": ("frames watched that never arrived whole", ""),
                "startup_mean_ms": ("mean startup (join request to first frame shown)", "ms")}
SCOPES = {"struck": "viewers the centers placed on a degraded node",
          "all": "all viewers"}


class Parameters(EmulatedParameters):
    """One emulated cell: the scenario, for how long, the degradation and its timing, the
    center's detection time, and where the run directories go (times in seconds)."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/dispatch/dispatch.yaml", description="the scenario file")
    duration: float = Field(12.0, gt=0, description="run length (s)")
    degradation: Literal[DEGRADATIONS] = Field(
        "node_stall", description="node_stall: the serving node cn1 stalls and resumes; "
                                  "loss_ramp: the direct cn-us link's burst loss ramps up; "
                                  "delay_jump: its one-way delay jumps")
    degrade_at: float = Field(5.0, gt=0, description="when the degradation starts (s)")
    resume_at: float = Field(10.0, gt=0, description="when a stalled node resumes (s)")
    ramp: tuple[str, ...] = Field(("1%", "3%", "5%"), min_length=1,
                                  description="the cn-us link's Gilbert-Elliott p, one step a "
                                              "second (r stays the scenario's)")
    jump_delay: str = Field("250ms", description="the cn-us link's one-way delay after the jump")
    detection_time: float = Field(3.0, gt=0, description="how long a node is poor or silent "
                                                         "before the center moves its viewers")


def variables(cell: Cell) -> dict[str, str]:
    """The scenario's variables for ``cell``: gray failover as its policy says; relay insertion
    off (it reacts to one poor report, and only gray failover or nothing should react); one
    candidate a viewer and the database right (a viewer stays where its center put it)."""
    parameters: Parameters = cell.parameters
    return {"EDGEBED_GRAY_FAILOVER": "true" if cell.policy == "on" else "false",
            "EDGEBED_RELAYS": "false",
            "EDGEBED_DETECTION_TIME": f"{parameters.detection_time:g}",
            "EDGEBED_REPORT_PERIOD": "1s", "EDGEBED_CANDIDATES": "1",
            "EDGEBED_DATABASE_ERROR": "0", "EDGEBED_DATABASE_ERROR_ABROAD": "0",
            "EDGEBED_DATABASE_SEED": str(cell.seed % 2**32),
            "EDGEBED_DURATION": f"{parameters.duration:g}s"}


def schedule(parameters: Parameters) -> list[dict[str, object]]:
    """The schedule of the cell's degradation, in the scenario's own terms."""
    at = parameters.degrade_at
    if parameters.degradation == "node_stall":
        return [{"at": f"{at:g}s", "action": "node_stall", "node": STALLED},
                {"at": f"{parameters.resume_at:g}s", "action": "node_resume", "node": STALLED}]
    if parameters.degradation == "loss_ramp":
        return [{"at": f"{at + step:g}s", "action": "set", "link": BORDER,
                 "set": {"burst": {"p": p, "r": BURST_R}}}
                for step, p in enumerate(parameters.ramp)]
    return [{"at": f"{at:g}s", "action": "set", "link": BORDER,
             "set": {"delay": parameters.jump_delay}}]


def changes(cell: Cell) -> dict[str, object]:
    """What the cell changes of the scenario: its schedule, for the cell's degradation."""
    return {"schedule": schedule(cell.parameters)}


def degraded_nodes(events: Iterable[dict]) -> set[str]:
    """The media nodes a run's schedule (its resolved ``events``) degrades: the nodes it
    stalls, and those whose path from the origin crosses a link it changes."""
    nodes = set()
    for event in events:
        if event["action"] == "node_stall":
            nodes.add(event["node"])
        elif event.get("link") == BORDER:
            nodes.update(BEHIND_BORDER)
        elif event.get("link") is not None:
            raise ValueError(f"the schedule changes link {event['link']}: which media nodes "
                             f"it strikes is known for {BORDER} only")
    return nodes


def struck_viewers(run_dir: Path, nodes: Iterable[str]) -> list[str]:
    """The viewers the centers first placed on one of ``nodes`` (their ``place`` decisions)."""
    first: dict[str, str] = {}
    for row in sorted(read_table(run_dir, "decisions"), key=lambda r: float(r["time"])):
        if row["kind"] == "place" and row["flow"] != "-":
            first.setdefault(row["flow"].split("/")[0], row["server"])
    return sorted(viewer for viewer, node in first.items() if node in set(nodes))


def moved_flows(run_dir: Path) -> int:
    """The flows the policy moved at least once (its trace's ``migrated``)."""
    return len({moved.split("@")[0] for row in read_table(run_dir, "policy_trace")
                if row["migrated"] for moved in row["migrated"].split(";")})


def view_figures(playouts: dict[str, Playout], viewers: Iterable[str], scope: str
                 ) -> dict[str, float]:
    """The :data:`VIEW_FIGURES` of ``viewers``' playouts, named ``<scope>_<figure>``."""
    figures = playout_metrics(playouts[viewer] for viewer in viewers)
    return {f"{scope}_{name}": figures[name] for name in VIEW_FIGURES}


def measure(run_dir: Path) -> dict[str, float]:
    """One row of the run's metrics (:data:`METRICS`)."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    viewers = sorted(name for name, node in resolved["topology"]["nodes"].items()
                     if node.get("role") == "viewer")
    [fps] = [float(entry["params"]["fps"]) for entry in resolved["workload"]
             if entry["agent"] == "streamer"]
    playouts = viewer_playouts(run_dir, viewers, fps, PLAYOUT_BUFFER_S)
    struck = struck_viewers(run_dir, degraded_nodes(resolved.get("schedule") or []))
    return {"struck_viewers": len(struck), "viewers": len(viewers),
            "moved_flows": moved_flows(run_dir),
            **view_figures(playouts, struck, "struck"), **view_figures(playouts, viewers, "all")}


METRICS = (Metric("struck_viewers", SCOPES["struck"]),
           Metric("viewers", "viewers in the scenario"),
           Metric("moved_flows", "flows the center moved"),
           *(Metric(f"{scope}_{name}", f"{label}, {SCOPES[scope]}", unit)
             for scope in SCOPES for name, (label, unit) in VIEW_FIGURES.items()),
           *EMULATED_METRICS)
PLOTS = ("struck_freeze_ms", "struck_freeze_share_pct", "struck_stall_ms",
         "all_freeze_share_pct", "moved_flows")


def remarks(results: pd.DataFrame) -> list[Table]:
    """Each degradation's and policy's freezes, struck viewers and all, over its runs."""
    rows = tuple((at, policy, str(len(group)), str(int(group["struck_viewers"].sum())),
                  f"{group['struck_freeze_ms'].sum() / 1e3:.1f}",
                  share_with_interval(group["struck_freeze_share_pct"].dropna()),
                  f"{group['all_freeze_ms'].sum() / 1e3:.1f}",
                  share_with_interval(group["all_freeze_share_pct"].dropna()),
                  str(int(group["moved_flows"].sum())))
                 for at, policy, group in by_value_and_policy(results))
    return [Table("Freezes per degradation and policy, over its runs (shares of the time "
                  "watched are means over the runs with their Student-t intervals):",
                  ("value", "policy", "runs", "struck views", "struck time frozen (s)",
                   "struck time watched frozen", "all time frozen (s)",
                   "all time watched frozen", "flows moved"), rows)] if rows else []


ABOUT = """Each cell is one emulated run of `topologies/dispatch/dispatch.yaml` (real packets on a Mininet
network, userspace Open vSwitch, edgebed's controller running the dispatch policy for three
regional centers) with the scenario's schedule replaced by one degradation of the cell's own:
the kind writes the scenario with that schedule into the cell's directory and runs it. The
degradations are gray failures, none of which takes a carrier down, so the switches' fast
failover sees none of them:

* `node_stall`: the media node cn1, where the centers put the cn viewers first, stalls (its
  programs stopped, its links and kernel up) at `degrade_at` and resumes at `resume_at`;
* `loss_ramp`: the direct cn-us link's Gilbert-Elliott p steps through `ramp`, a step a
  second from `degrade_at`, its r kept: the path from the origin to the us nodes turns lossy;
* `delay_jump`: the direct cn-us link's one-way delay jumps to `jump_delay` at `degrade_at`,
  the us nodes' round trip from the origin over VIA's threshold.

The policy is the dispatch center's gray failover: `on`, the centers move the viewers of a
node whose path from the origin has probed poor by VIA's thresholds, or whose load reports
have stopped, for `detection_time` (onto the standby route's relay hk1 when only the path is
poor, else to their next ranked node that is well); `off`, nobody moves them. Relay insertion
is off in both (it reacts to one poor report), every viewer takes its center's one candidate
and the location database is right, so a viewer stays where its center put it unless gray
failover moves it. Every media node probes its paths to the origin and the relay all along
in both arms.

The struck viewers are those the centers first placed on a degraded node (cn1 for the stall,
us1 or us2, whose path from the origin crosses the cn-us link, for the link's degradations);
each row gives their playout's figures and every viewer's. Playout is `experiments.playout`'s,
as the other dispatch reports of emulated runs compute it: a frame shows in its slot only if
it and every frame since its GOP's I frame arrived whole by then, else the picture freezes
until an I frame shows; a stall is the buffer running dry. `freeze_ms` sums the slots frozen,
`freeze_share_pct` is that over the time watched; `stall_ms` sums the stalls. A run's
fidelity verdict is in its row and a report counts the clean runs only."""

KINDS = (Kind(name="dispatch_gray_emulation", parameters=Parameters, policies=POLICIES,
              run=measured_run(variables, measure, changes), metrics=METRICS, plots=PLOTS,
              about=ABOUT, remarks=remarks, emulated=True,
              constants=(PLAYOUT_DELAY,
                         Constant("BURST_R", BURST_R, "the cn-us link's Gilbert-Elliott r "
                                                      "while its p ramps (the scenario's)"))),)
