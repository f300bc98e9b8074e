"""dispatch emulated: the ``dispatch_emulation`` kind of experiment cell, one ``edgebed run`` of
``topologies/dispatch/dispatch.yaml`` per cell, each mechanism against its absence on the same seeds.

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
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats

from agents.echo import PROBE_INTERVAL, PROBE_TIMEOUT, PROBES
from controller.config import ControllerConfig
from controller.policies.dispatch.quality import VIA
from controller.view import NetworkView
from experiments.measurements import host_addresses, network_kept_up, read_table
from experiments.playout import Playout, viewer_playouts
from experiments.report import CONFIDENCE, at_value, swept_values
from experiments.sweeps.kinds import Cell, Constant, Kind, Metric, Table, measured_run
from edgebed.units import parse_duration

ACCESS = ("database", "probe")
RELAYS = ("direct", "relay")
FAILOVER = ("recompute", "hot_standby")
# The viewer whose stream crosses the link the scenario cuts (eu1 gets it over cn-eu), and how
# long after the cut its outage is looked for: long enough for the recomputed route.
CUT_VIEWER = "euv1"
INGEST = "cn0"
FAILOVER_WINDOW_S = 4.0
# Frames the ingest node got from this long before the cut count for the viewer's frames lost:
# those in flight on the cut link die with it.
IN_FLIGHT_S = 0.1
# A run measures failover only if the cut viewer was receiving normally in the second before
# the cut and the ingest node all along: at 25 frames a second a whole frame comes every 40 ms,
# a burst loss on a cross-border link takes one or two (in five clean runs the longest wait
# before the cut was 49-66 ms, the ingest node's 47-149 ms); a wait past STALL_S is the
# emulator stalling on a loaded machine (one run waited 2.9 s before the cut while the
# relays delivered frames up to 1.4 s late).
PRE_CUT_S = 1.0
STALL_S = 0.25
# The viewers' player (experiments.playout): half a second of playout delay, a low-latency
# live player's (not fitted to anything; the talk gives none).
PLAYOUT_BUFFER_S = 0.5
# LiveNet's goals: shares of views never stalled and of startups under 1 s.
STALL_FREE_GOAL = 0.98
STARTUP_GOAL = 0.95
# VIA's anchor for relays: relays with probing fix at least this share of direct access's poor
# sessions.
RELAY_FIX_GOAL = 0.5
# A stall this soon after the first frame shown counts as one right after startup (what a GOP
# cache's burst could cause): one GOP of the scenario's stream (50 frames at 25 fps).
EARLY_S = 2.0


class Parameters(BaseModel):
    """One emulated cell: the scenario, for how long, the database's error share (in and out
    of cn alike), the direct cn-us link's burst-loss p, whether media nodes keep a GOP cache
    and viewers probe in parallel (startup), and where the run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/dispatch/dispatch.yaml", description="the scenario file")
    duration: float = Field(14.0, gt=0, description="run length (s)")
    database_error: float = Field(0.0, ge=0, le=1, description="clients the database "
                                                                "misplaces")
    border_loss_p: str = Field("0.5%", description="Gilbert-Elliott p of the cn-us link")
    gop_cache: bool = Field(False, description="media nodes send a joining viewer the frames "
                                               "since the latest I frame first")
    parallel_probes: bool = Field(False, description="viewers probe their candidates all at "
                                                     "once, not in turn")
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
            "EDGEBED_GOP_CACHE": str(parameters.gop_cache).lower(),
            "EDGEBED_PARALLEL_PROBES": str(parameters.parallel_probes).lower(),
            "EDGEBED_DURATION": f"{parameters.duration:g}s"}


@dataclass(frozen=True)
class Failover:
    """A viewer's outage at the scenario's link cut, from the whole frames it and the ingest
    node got (see :func:`failover`), and whether the run can measure it at all."""

    viewer: str
    ingest: str
    gap_s: float  # the viewer's longest wait for a whole frame across the cut
    frames_lost: int  # frames the ingest node got whole that the viewer never did
    # The viewer's longest wait for a whole frame in the PRE_CUT_S before the cut, and the
    # ingest node's from PRE_CUT_S before the cut to the window's end (s).
    viewer_wait_before_s: float
    ingest_wait_s: float

    @property
    def invalid(self) -> str | None:
        """Why this run measures something other than failover, or None: the cut viewer was
        not receiving normally before the cut (its wait runs back before the link went down),
        or the ingest node, upstream of the cut and untouched by it, stopped receiving (what
        the viewer lost then the source or the emulator lost, not the failover)."""
        reasons = []
        if self.viewer_wait_before_s > STALL_S:
            reasons.append(f"{self.viewer} got no whole frame for "
                           f"{1e3 * self.viewer_wait_before_s:.0f} ms in the "
                           f"{PRE_CUT_S:g} s before the cut")
        if self.ingest_wait_s > STALL_S:
            reasons.append(f"{self.ingest}, the ingest node, got no whole frame for "
                           f"{1e3 * self.ingest_wait_s:.0f} ms from {PRE_CUT_S:g} s before "
                           f"the cut to the window's end")
        return "; ".join(reasons) or None


def cut_time(run_dir: Path) -> float:
    """When the scenario's link cut happened (epoch seconds): the run's timeline origin plus
    the schedule's ``link_down`` time (the runner performs it within milliseconds of that)."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    [cut_at] = [parse_duration(event["at"]) for event in resolved.get("schedule") or []
                if event.get("action") == "link_down"]
    return json.loads((run_dir / "summary.json").read_text())["timeline_origin_s"] + cut_at


def rerouted_after(run_dir: Path) -> float:
    """How long after the cut (s) the controller had its recomputed routes in every switch
    (its ``reroute`` decision is recorded when the switches' barrier replies are in); NaN
    when it recorded none. With hot standby the switches' fast-failover groups moved the
    traffic before that."""
    cut = cut_time(run_dir)
    done = [float(row["time"]) for row in read_table(run_dir, "decisions")
            if row["kind"] == "reroute" and float(row["time"]) >= cut]
    return min(done) - cut if done else float("nan")


def longest_wait(arrivals: list[float], start: float, end: float) -> float:
    """The longest time from ``start`` to ``end`` without an arrival (sorted ``arrivals``;
    the window's edges count as arrivals)."""
    times = [start, *(t for t in arrivals if start < t < end), end]
    return max(b - a for a, b in zip(times, times[1:]))


def failover(run_dir: Path, viewer: str = CUT_VIEWER, ingest: str = INGEST,
             window_s: float = FAILOVER_WINDOW_S) -> Failover:
    """``viewer``'s outage at the scenario's link cut.

    The failover gap (s) is the longest time between two whole frames arriving at the viewer,
    from the last before the cut to the first after ``window_s`` past it (the window's end
    when none came): link down to the viewer receiving again, plus up to one frame interval
    (the last frame before the cut arrived up to a frame interval before it). The frames
    lost are those the ingest node got whole from :data:`IN_FLIGHT_S` before the cut (frames
    in flight on the cut link die with it) to the window's end that the viewer never got
    whole: the source's frame numbers, which media nodes keep. They include the cross-border
    links' own burst losses in the window. The cut's time is
    :func:`cut_time`'s. The waits before the cut and at the ingest node say whether the
    run measured failover at all (:attr:`Failover.invalid`)."""
    cut = cut_time(run_dir)
    end = cut + window_s
    whole: dict[str, dict[int, float]] = {viewer: {}, ingest: {}}
    for row in read_table(run_dir, "frames"):
        if row["node"] in whole and row["complete"] == "True":
            whole[row["node"]][int(row["frame"])] = float(row["arrived_s"])
    arrivals = sorted(whole[viewer].values())
    before = [t for t in arrivals if t < cut]
    later = [t for t in arrivals if t > end]
    made = [frame for frame, t in whole[ingest].items() if cut - IN_FLIGHT_S <= t <= end]
    return Failover(
        viewer, ingest,
        gap_s=longest_wait(arrivals, before[-1] if before else cut, later[0] if later else end),
        frames_lost=sum(frame not in whole[viewer] for frame in made),
        viewer_wait_before_s=longest_wait(arrivals, cut - PRE_CUT_S, cut),
        ingest_wait_s=longest_wait(sorted(whole[ingest].values()), cut - PRE_CUT_S, end))


def serving_nodes(run_dir: Path, by_address: dict[str, str]) -> dict[str, str]:
    """Which media node served each peer (a viewer, or a node back-sourcing from another):
    the one that sent it the most packets by the nodes' ``live_sessions`` tables, peers named
    through ``by_address`` (address -> host); a peer no node sent a packet to is left out."""
    counts: dict[str, Counter] = {}
    for row in read_table(run_dir, "live_sessions"):
        peer = by_address.get(row["viewer"], row["viewer"])
        counts.setdefault(peer, Counter())[row["node"]] += int(row["packets"])
    return {peer: max(sent, key=sent.get) for peer, sent in counts.items()
            if any(sent.values())}


def measure(run_dir: Path) -> dict[str, float]:
    """One row of the run's metrics (:data:`METRICS`)."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    nodes = resolved["topology"]["nodes"]
    region = {name: node.get("labels", {}).get("region") for name, node in nodes.items()}
    viewers = sorted(name for name, node in nodes.items() if node.get("role") == "viewer")
    address = host_addresses(nodes)
    graph = NetworkView.from_json(
        ControllerConfig.read(run_dir / "controller" / "config.json").view).policy_graph()
    first_place = {}
    for row in sorted(read_table(run_dir, "decisions"), key=lambda r: float(r["time"])):
        if row["kind"] == "place" and row["flow"] != "-":
            first_place.setdefault(row["flow"].split("/")[0], row["server"])
    source = serving_nodes(run_dir, {value: name for name, value in address.items()})
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
    [fps] = [float(entry["params"]["fps"]) for entry in resolved["workload"]
             if entry["agent"] == "streamer"]
    playouts = viewer_playouts(run_dir, viewers, fps, PLAYOUT_BUFFER_S)
    shown = playouts.values()
    cut = failover(run_dir)
    # An invalid run's failover figures are kept under failover_measured_*, and left out of
    # failover_gap_ms and failover_frames_lost (empty), which the means are taken of.
    valid = cut.invalid is None
    return {"viewers_served": len(source),
            "misplaced_by_database": sum(region.get(first_place.get(v)) not in (None, region[v])
                                         for v in viewers),
            "served_abroad": sum(region[source[v]] != region[v] for v in source),
            "access_rtt_ms": statistics.fmean(rtts) if rtts else float("nan"),
            "delay_p50_ms": statistics.fmean(delays) if delays else float("nan"),
            "cross_border_node_loss_pct": 100 * statistics.fmean(node_loss) if node_loss
            else float("nan"),
            "poor_viewers": poor, "relayed_flows": len(relayed),
            "failover_gap_ms": 1e3 * cut.gap_s if valid else float("nan"),
            "failover_frames_lost": cut.frames_lost if valid else float("nan"),
            "failover_valid": int(valid),
            "failover_measured_gap_ms": 1e3 * cut.gap_s,
            "failover_measured_frames_lost": cut.frames_lost,
            "failover_wait_before_ms": 1e3 * cut.viewer_wait_before_s,
            "failover_ingest_wait_ms": 1e3 * cut.ingest_wait_s,
            "failover_reroute_ms": 1e3 * rerouted_after(run_dir),
            **playout_metrics(shown), **gop_cache_costs(run_dir, playouts),
            "viewers": len(viewers), "fidelity_ok": int(summary["fidelity"]["ok"]),
            "network_kept_up": int(network_kept_up(summary))}


def gop_cache_costs(run_dir: Path, playouts: dict[str, Playout]) -> dict[str, float]:
    """What a GOP cache costs, from a run's tables: the bytes the media nodes sent from their
    caches and the longest backlog (``live_sessions``), and the player's lag behind the
    source at the end of each view, the frame it started on's send time (its arrival less
    its delay, ``frames``) to when it was shown, plus the time stalled (each stall moves the
    playout later): a cache's older frames make a player start further behind live. Runs
    made before the cache existed have no cache columns: nothing sent."""
    sent = {}
    for row in read_table(run_dir, "frames"):
        playout = playouts.get(row["node"])
        if (playout is not None and row["complete"] == "True"
                and int(row["frame"]) == playout.start_frame and row["delay_ms"]):
            send = float(row["arrived_s"]) - float(row["delay_ms"]) / 1e3
            sent[row["node"]] = min(send, sent.get(row["node"], send))
    lags = [1e3 * (p.shown_s + p.stall_s - sent[v]) for v, p in playouts.items() if v in sent]
    sessions = read_table(run_dir, "live_sessions")
    catch_up = [1e3 * float(row["caught_up_s"]) for row in sessions if row.get("caught_up_s")]
    return {"early_stall_viewers": early_stall_viewers(playouts.values()),
            "cached_kbytes": sum(int(row.get("cached_bytes") or 0) for row in sessions) / 1e3,
            "catch_up_max_ms": max(catch_up, default=float("nan")),
            "playout_lag_mean_ms": statistics.fmean(lags) if lags else float("nan")}


def early_stall_viewers(shown: Iterable[Playout]) -> int:
    """The views whose first stall came within :data:`EARLY_S` of their first frame shown
    (what a GOP cache's burst could cause)."""
    return sum(p.first_stall_s is not None and p.first_stall_s - p.shown_s < EARLY_S
               for p in shown)


def playout_metrics(shown: Iterable[Playout]) -> dict[str, float]:
    """The playout columns of a run's row from its viewers' playouts: the views never stalled
    (a view that never showed a frame is not one), the stalls and their time, startup's mean,
    maximum and how many were under 1 s (views whose startup is known), and the mean time from
    the join to the first whole frame."""
    shown = list(shown)
    startups = [1e3 * p.startup_s for p in shown if p.startup_s is not None]
    firsts = [1e3 * (p.first_s - p.requested_s) for p in shown
              if p.first_s is not None and p.requested_s is not None]
    return {"stall_free_viewers": sum(p.shown_s is not None and not p.stalls for p in shown),
            "stalls": sum(p.stalls for p in shown),
            "stall_ms": 1e3 * sum(p.stall_s for p in shown),
            "startup_mean_ms": statistics.fmean(startups) if startups else float("nan"),
            "startup_max_ms": max(startups, default=float("nan")),
            "startups_under_1s": sum(startup < 1e3 for startup in startups),
            "first_frame_mean_ms": statistics.fmean(firsts) if firsts else float("nan")}


METRICS = (Metric("misplaced_by_database", "viewers the database placed abroad"),
           Metric("served_abroad", "viewers served from another region"),
           Metric("access_rtt_ms", "mean round trip to the serving node (configured path)",
                  "ms"),
           Metric("cross_border_node_loss_pct",
                  "stream loss at the nodes of viewers outside cn", "%"),
           Metric("poor_viewers", f"viewers poor by VIA (node loss > {VIA.loss:.1%} or RTT > "
                                  f"{1e3 * VIA.rtt:.0f} ms)"),
           Metric("delay_p50_ms", "mean of viewers' median one-way delay", "ms"),
           Metric("relayed_flows", "flows the origin sent through hk1"),
           Metric("failover_gap_ms", f"{CUT_VIEWER}'s longest wait for a whole frame after "
                  "the cn-eu cut (valid runs)", "ms"),
           Metric("failover_frames_lost", f"frames {CUT_VIEWER} lost from the cut to "
                  f"{FAILOVER_WINDOW_S:g} s after (valid runs)"),
           Metric("failover_valid", f"runs receiving normally before the cut ({CUT_VIEWER}) "
                  f"and throughout ({INGEST})"),
           Metric("failover_measured_gap_ms", "failover_gap_ms as measured, valid or not",
                  "ms"),
           Metric("failover_measured_frames_lost",
                  "failover_frames_lost as measured, valid or not"),
           Metric("failover_wait_before_ms", f"{CUT_VIEWER}'s longest wait for a whole frame "
                  f"in the {PRE_CUT_S:g} s before the cut", "ms"),
           Metric("failover_ingest_wait_ms", f"{INGEST}'s longest wait for a whole frame from "
                  f"{PRE_CUT_S:g} s before the cut to {FAILOVER_WINDOW_S:g} s after", "ms"),
           Metric("failover_reroute_ms", "the controller's recomputed routes installed, after "
                  "the cut", "ms"),
           Metric("stall_free_viewers", "viewers whose playout never stalled"),
           Metric("stalls", "stalls (a frame later than its playout deadline), all viewers"),
           Metric("stall_ms", "time stalled, all viewers together", "ms"),
           Metric("startup_mean_ms", "mean startup (join request to first frame shown)",
                  "ms"),
           Metric("startup_max_ms", "slowest viewer's startup", "ms"),
           Metric("startups_under_1s", "viewers that started within 1 s"),
           Metric("first_frame_mean_ms", "mean time from join request to the first whole "
                  "frame", "ms"),
           Metric("early_stall_viewers", f"viewers whose first stall came within {EARLY_S:g} s "
                  "of their startup"),
           Metric("cached_kbytes", "bytes media nodes sent from their GOP caches", "kB"),
           Metric("catch_up_max_ms", "longest GOP-cache backlog, admission to drained", "ms"),
           Metric("playout_lag_mean_ms", "mean lag of the player behind the source", "ms"),
           Metric("viewers_served", "viewers served"),
           Metric("viewers", "viewers in the scenario"),
           Metric("fidelity_ok", "runs the fidelity monitor passed"),
           Metric("network_kept_up", "runs whose wires kept time and emulator-made loss "
                  "stayed within its limit"))
PLOTS = ("misplaced_by_database", "served_abroad", "access_rtt_ms",
         "cross_border_node_loss_pct", "poor_viewers", "delay_p50_ms", "failover_gap_ms",
         "failover_frames_lost", "failover_valid", "failover_reroute_ms",
         "stall_free_viewers", "stalls", "stall_ms", "startup_mean_ms", "startup_max_ms",
         "startups_under_1s", "first_frame_mean_ms", "early_stall_viewers", "cached_kbytes",
         "playout_lag_mean_ms", "viewers_served")

# The viewers' playout delay and LiveNet's goals as the dispatch reports of emulated runs
# tabulate them.
PLAYOUT_DELAY = Constant("PLAYOUT_BUFFER_S", f"{PLAYOUT_BUFFER_S:g} s",
                         "the viewers' player's playout delay (a low-latency live player's; "
                         "chosen, not fitted)")
GOALS = (Constant("STALL_FREE_GOAL", f"{STALL_FREE_GOAL:.0%}",
                  "LiveNet's goal: views never stalled"),
         Constant("STARTUP_GOAL", f"{STARTUP_GOAL:.0%}", "LiveNet's goal: startups under 1 s"))
CONSTANTS = (
    Constant("FAILOVER_WINDOW_S", f"{FAILOVER_WINDOW_S:g} s",
             f"how long after the cut {CUT_VIEWER}'s outage is looked for"),
    Constant("IN_FLIGHT_S", f"{IN_FLIGHT_S:g} s",
             f"frames {INGEST} got from this long before the cut count for "
             f"{CUT_VIEWER}'s frames lost (those in flight on the cut link die with it)"),
    Constant("PRE_CUT_S", f"{PRE_CUT_S:g} s", "how long before the cut the waits for a whole "
             "frame that flag a run are looked at"),
    Constant("STALL_S", f"{1e3 * STALL_S:.0f} ms",
             f"a longer wait for a whole frame, at {CUT_VIEWER} before the cut or at "
             f"{INGEST} from then to the window's end, flags the run (the emulator stalled)"),
    PLAYOUT_DELAY, *GOALS,
    Constant("EARLY_S", f"{EARLY_S:g} s", "a first stall this soon after startup counts as "
             "one right after it (what a GOP cache's burst could cause)"),
    Constant("VIA.loss", f"{VIA.loss:.1%}", "VIA's threshold of a poor session: loss above it"),
    Constant("VIA.rtt", f"{1e3 * VIA.rtt:.0f} ms",
             "VIA's threshold of a poor session: round trip above it"),
    Constant("RELAY_FIX_GOAL", f"{RELAY_FIX_GOAL:.0%}", "VIA's anchor for relays: the share of "
             "direct access's poor viewers relays with probing fix"),
    Constant("agents.echo.PROBES", f"{PROBES}", "ICMP echo requests a viewer sends each "
             "candidate it probes"),
    Constant("agents.echo.PROBE_INTERVAL", f"{1e3 * PROBE_INTERVAL:.0f} ms",
             "between a candidate's echo requests"),
    Constant("agents.echo.PROBE_TIMEOUT", f"{PROBE_TIMEOUT:g} s",
             "an echo's answer later than this after the last request counts as lost"))

ABOUT = f"""\
Each cell is one emulated run of `topologies/dispatch/dispatch.yaml` (real packets on a Mininet network,
userspace Open vSwitch, edgebed's controller running the dispatch policy for three regional
centers): one 1 Mbit/s stream pushed in cn and back-sourced to seven media nodes in cn, us and
eu, six viewers (four in cn, one in us, one in eu), a relay host hk1 between cn and us. The
scale is a machine's: 6 viewers and 7 nodes, not the talk's millions; the model-level report
(`reports/dispatch/model/`) runs 10k clients on 100 nodes. A metric is counted over the six
viewers of a run, so one misplaced viewer moves a count by one: read counts, not shares.
`access_rtt_ms` is the configured round trip between a viewer and the node its media came
from (what the database's mistake costs the pulls); the stream's loss is measured at the
viewers' nodes' input (a media node re-packetises, so a viewer's own loss counter starts at
its node).

Failover: at 9 s the scenario takes the cn-eu link down (both ends lose carrier), over which
eu1 gets the stream for {CUT_VIEWER}; the standby route is cn-us-eu (80 + 35 ms against 90 ms
one way). `failover_gap_ms` is {CUT_VIEWER}'s longest wait for a whole frame from the last
before the cut to {FAILOVER_WINDOW_S:g} s after it (link down to receiving again, plus up to
one frame interval, 1/25 s at the stream's 25 frames a second); `failover_frames_lost` counts
the frames the ingest node {INGEST} got from {IN_FLIGHT_S:g} s before the cut to the window's
end that {CUT_VIEWER} never got whole, the cross-border links' own burst losses included. Every
run has the cut; the hot_standby and recompute cells differ only in the controller's
`fast_failover`. `failover_reroute_ms` is when the controller had its recomputed routes in
every switch (its `reroute` decision, recorded once the switches' barrier replies are in): it
recomputes under both policies, but with hot standby the switches' fast-failover groups have
moved the traffic already.

A run measures failover only if {CUT_VIEWER} was receiving normally in the {PRE_CUT_S:g} s before
the cut and {INGEST}, upstream of the cut and untouched by it, from then to the window's end: no
wait for a whole frame over {1e3 * STALL_S:.0f} ms at either (a clean run's waits are a few frame
intervals). Otherwise the emulator stalled on the loaded machine (its relays then deliver frames
late) and the gap measures the stall. Such a run is flagged (`failover_valid` 0): it stays in
`results.csv` with its figures under `failover_measured_*` and its longest waits, the remarks
list it with the reason, and it is left out of `failover_gap_ms` and `failover_frames_lost`,
whose means count the valid runs only.

What to expect at this scale: a difference of about the controller's own reaction. The cut
is a carrier loss both switches at its ends see at once, so recomputation starts from the same
port-down event that flips a fast-failover group; what hot standby saves is the controller's
part, the port-status message, the new routes and their installation in every switch
(`failover_reroute_ms`), during which recomputed frames still go to the dead port. Neither
saves the frames in flight on the dead 90 ms link nor the standby route's longer way
(80 + 35 ms), so a valid run's gap is at least the standby route's one-way delay plus up to a
frame interval of phase. Hot standby's margin grows where the control plane is slow or far (a
loaded controller, many switches and flows to recompute, a controller out of reach), which
this experiment does not vary.

Playout, every viewer of every run (`experiments.playout`, the same for any scheme's runs): a
player with {PLAYOUT_BUFFER_S:g} s of playout delay (a low-latency live player's; chosen, not
fitted) starts on the first I frame the viewer got whole and shows the frames at the stream's
rate after it. A stall is the buffer running dry: the next whole frame not there by its slot (a
frame later than its playout deadline); frames that never came while later ones were buffered
are skipped without one. `startup_*` run from the viewer's join request to its first frame
shown: the join's answer, the probes, the pull, the wait for an I frame (one in 50 frames, the
stream's GOP: without a GOP cache a viewer joining mid-GOP waits for the next; with one it gets
the latest at once) and the {PLAYOUT_BUFFER_S:g} s of playout delay; `first_frame_mean_ms` is
the part up to the first whole frame of any kind. The anchors are LiveNet's
{STALL_FREE_GOAL:.0%} stall-free views and {STARTUP_GOAL:.0%} of startups under 1 s; the remarks
tabulate each policy's shares against them with the number of views and a {CONFIDENCE:.0%}
Clopper-Pearson interval (a goal is met when the share of views reaches it; at six views a run
the interval says how little a few runs can show), and split the mean startup into its parts.

Startup with a GOP cache and parallel probes (`gop_cache`, `parallel_probes`): every
media node keeps each stream's frames since its latest I frame and sends them to a viewer's
new session first, paced at 4 times its bitrate (the live frames completed meanwhile queue
behind them), so the player starts on the cached I frame instead of waiting for the next;
and viewers probe their three candidates all at once ({PROBES} ICMP echoes
{1e3 * PROBE_INTERVAL:.0f} ms apart to each, an answer later than {PROBE_TIMEOUT:g} s after the
last request lost) and stop as soon as no answer still to come could change their choice
(`agents.follower.probes_settled`), so probing takes about the best candidate's round trip
after the last request: neither the farthest candidate's nor, when a far candidate loses an
echo, the {PROBE_TIMEOUT:g} s timeout. A lost echo of the candidate that would win still waits
it out.
What the cache costs: `cached_kbytes`, the bytes sent from the caches (the burst: up to a GOP
of the stream per viewer), `catch_up_max_ms`, the longest time from a session's admission to
its backlog drained, `early_stall_viewers`, views whose first stall came within {EARLY_S:g} s
of their startup (what a burst could cause), and `playout_lag_mean_ms`, how far the player
runs behind the source (the frame it started on was sent up to a GOP before the join, and this
player does not catch up: it lags by the cached GOP's age plus the playout delay for the whole
view; real players skip ahead or play faster). The viewers' one-way delays (`delay_p50_ms`)
include the cached frames, which are old when they arrive. The sweep `startup-before` runs the
old arm (no cache, probes in turn) beside the others.

"""


def by_value_and_policy(results: pd.DataFrame):
    """``results``' rows per sweep, value and policy, in their order: the value as
    :func:`~experiments.report.at_value` words it, the policy and the rows."""
    for (_, _, policy), group in results.groupby(["sweep", "value", "policy"], sort=False):
        yield at_value(group), policy, group


def whole(x: float) -> str:
    """``x`` to a whole number (of milliseconds, say; no sign on a 0); n/a when it is
    missing."""
    if pd.isna(x):
        return "n/a"
    text = f"{x:.0f}"
    return "0" if text == "-0" else text


def playout_table(results: pd.DataFrame) -> Table:
    """Each policy's views at each swept value, over all its runs: the views never stalled,
    the stalls and their time, the startups under 1 s and the slowest, the mean time to the
    first whole frame and (when the rows have it) the player's mean lag behind the source."""
    lag = "playout_lag_mean_ms" in results
    rows = []
    for at, policy, group in by_value_and_policy(results):
        recorded = group["startup_max_ms"].notna().any()
        rows.append((at, policy, str(len(group)), str(int(group["viewers"].sum())),
                     str(int(group["stall_free_viewers"].sum())), str(int(group["stalls"].sum())),
                     whole(group["stall_ms"].sum()),
                     str(int(group["startups_under_1s"].sum())) if recorded else "n/a",
                     whole(group["startup_max_ms"].max()),
                     whole(group["first_frame_mean_ms"].mean()))
                    + ((whole(group["playout_lag_mean_ms"].mean()),) if lag else ()))
    return Table(
        "Playout per swept value and policy, over all its runs' views (counts and time stalled "
        "summed over the runs):",
        ("value", "policy", "runs", "views", "never stalled", "stalls",
         "time stalled (ms)", "started within 1 s", "slowest startup (ms)",
         "join to first whole frame (ms, mean)")
        + (("player behind the source (ms, mean)",) if lag else ()), tuple(rows))


def gop_cache_table(results: pd.DataFrame) -> list[Table]:
    """What the GOP caches cost where media nodes kept them: the bytes they sent a run, the
    longest backlog, the views stalled right after startup; none when no cache sent a byte."""
    if "cached_kbytes" not in results:
        return []
    rows = tuple((at, policy, whole(group["cached_kbytes"].mean()),
                  whole(group["catch_up_max_ms"].max()),
                  str(int(group["early_stall_viewers"].sum())))
                 for at, policy, group in by_value_and_policy(results)
                 if group["cached_kbytes"].sum() > 0)
    return [Table("What the GOP caches cost, where the media nodes kept them:",
                  ("value", "policy", "sent from the caches (kB a run, mean)",
                   "backlogs drained within (ms)",
                   f"views stalled within {EARLY_S:g} s of startup"), rows)] if rows else []


def goals_tables(results: pd.DataFrame) -> list[Table]:
    """Each policy's views at each swept value against LiveNet's goals: the share never
    stalled against :data:`STALL_FREE_GOAL` and the share started within 1 s against
    :data:`STARTUP_GOAL`, each with its Clopper-Pearson interval (the views are few, so the
    interval says what the count can show); and where the startup went: the mean first whole
    frame after the join, the wait from it to the first frame shown less the playout delay
    (the wait for an I frame) and the playout delay. A view that never showed a frame counts
    as neither stall-free nor started."""
    shares, startups = [], []
    for at, policy, group in by_value_and_policy(results):
        views = int(group["viewers"].sum())
        for count, goal, what in ((int(group["stall_free_viewers"].sum()), STALL_FREE_GOAL,
                                   "never stalled"),
                                  (int(group["startups_under_1s"].sum()), STARTUP_GOAL,
                                   "started within 1 s")):
            low, high = (stats.binomtest(count, views).proportion_ci(CONFIDENCE) if views
                         else (0, 1))
            shares.append((at, policy, what, str(count), str(views),
                           f"{100 * count / views:.0f}%" if views else "n/a",
                           f"{100 * low:.0f}-{100 * high:.0f}%", f"{100 * goal:.0f}%",
                           "met" if views and count >= goal * views else "not met"))
        if group["startup_mean_ms"].notna().any():
            first = group["first_frame_mean_ms"].mean()
            keyframe = group["startup_mean_ms"].mean() - first - 1e3 * PLAYOUT_BUFFER_S
            startups.append((at, policy, whole(group["startup_mean_ms"].mean()), whole(first),
                             whole(keyframe), whole(1e3 * PLAYOUT_BUFFER_S)))
    found = [Table("LiveNet's goals per swept value and policy, from the views of all its runs "
                   "(a goal is met when the share of views reaches it):",
                   ("value", "policy", "views that", "count", "of views", "share",
                    f"{CONFIDENCE:.0%} Clopper-Pearson interval", "LiveNet's goal", "met"),
                   tuple(shares))]
    if startups:
        found.append(Table("Where the mean startup went (means over the runs):",
                           ("value", "policy", "startup (ms)", "join to first whole frame (ms)",
                            "then to the first I frame (ms)", "playout delay (ms)"),
                           tuple(startups)))
    return found


def verdict(runs: pd.DataFrame) -> str:
    """Whether hot standby's failover gap is shorter than recomputation's in ``runs`` (one
    swept value's), from the valid runs: shorter when the Student-t intervals of the two means
    (at the report's confidence) do not overlap; otherwise not shown apart at this number of
    runs."""
    gaps = {policy: runs.loc[(runs["policy"] == policy) & (runs["failover_valid"] == 1),
                             "failover_gap_ms"] for policy in FAILOVER}
    if min(len(gap) for gap in gaps.values()) < 2:
        return "too few valid runs to compare hot standby with recomputation."
    interval = {policy: (gap.mean(), stats.t.ppf((1 + CONFIDENCE) / 2, len(gap) - 1) * gap.std()
                         / len(gap) ** 0.5) for policy, gap in gaps.items()}
    (hot, hot_half), (recomputed, recomputed_half) = (interval["hot_standby"],
                                                      interval["recompute"])
    figures = (f"mean gap {hot:.0f} ± {hot_half:.0f} ms with hot standby against "
               f"{recomputed:.0f} ± {recomputed_half:.0f} ms recomputed ({CONFIDENCE:.0%} "
               f"intervals over the valid runs)")
    if hot + hot_half < recomputed - recomputed_half:
        return f"hot standby re-sources faster: {figures}."
    if recomputed + recomputed_half < hot - hot_half:
        return f"recomputation re-sources faster: {figures}."
    return f"hot standby is not shown faster than recomputation at this scale: {figures}."


def fixed_rows(at: str, group: pd.DataFrame, baseline: str, mechanism: str
               ) -> list[tuple[str, ...]]:
    """VIA's anchor for relays (:data:`RELAY_FIX_GOAL` of direct access's poor sessions fixed)
    on ``group``'s runs: the share of the baseline's poor viewers the mechanism's runs do not
    have (poor viewers a run), over every run and over the runs whose emulated network kept
    up (``network_kept_up``: a run whose impairment relays fell behind makes viewers poor
    that the policy did not; the hosts' own flags, a CPU busy at start-up, do not) when some
    did not."""
    def row(runs: pd.DataFrame, which: str) -> tuple[str, ...]:
        poor = runs.groupby("policy")["poor_viewers"].mean()  # a run: the two may differ in runs
        counted = runs.groupby("policy").size()
        both = {baseline, mechanism} <= set(poor.index)
        fixed = 1 - poor[mechanism] / poor[baseline] if both and poor[baseline] else None
        return (at, which,
                *(f"{int(counted[p])}" if p in counted else "0" for p in (mechanism, baseline)),
                *(f"{poor[p]:.2f}" if p in poor else "n/a" for p in (mechanism, baseline)),
                f"{100 * fixed:.0f}%" if fixed is not None else f"no poor viewer with {baseline}",
                ("met" if fixed >= RELAY_FIX_GOAL else "not met") if fixed is not None else "–")
    rows = [row(group, "every run")]
    if "network_kept_up" in group and group["network_kept_up"].notna().all():
        kept_up = group[group["network_kept_up"] == 1]
        if len(kept_up) < len(group):
            rows.append(row(kept_up, "the runs whose network kept up"))
    return rows


def mechanism_tables(results: pd.DataFrame) -> list[Table]:
    """Per swept value, what probing and relays bought against their absence: viewers served
    from abroad (probing) and viewers poor by VIA (relays), in total over the value's runs,
    and for relays the share of the poor viewers they fixed against VIA's anchor."""
    found = []
    for (baseline, mechanism), metric, what in (
            (ACCESS, "served_abroad", "Viewers served from another region"),
            (RELAYS, "poor_viewers", "Viewers poor by VIA's thresholds")):
        chosen = results[results["policy"].isin((baseline, mechanism))]
        totals, fixed = [], []
        for _, at, group in swept_values(chosen):
            summed = group.groupby("policy")[metric].sum()
            runs = group.groupby("policy").size()
            if {baseline, mechanism} <= set(summed.index):
                totals.append((at, str(int(summed[mechanism])),
                               str(int(summed[baseline])), str(int(runs[mechanism])),
                               str(int(runs[baseline])), f"{group['viewers'].mean():g}"))
                if metric == "poor_viewers":
                    fixed += fixed_rows(at, group, baseline, mechanism)
        if totals:
            found.append(Table(f"{what}, {mechanism} against {baseline}, in total over the "
                               "runs:", ("value", f"with {mechanism}", f"with {baseline}",
                                         f"runs of {mechanism}", f"runs of {baseline}",
                                         "viewers a run"), tuple(totals)))
        if fixed:
            found.append(Table(
                f"Of {baseline}'s poor viewers, the share {mechanism} fixed (poor viewers a run), "
                f"against VIA's anchor for relays:",
                ("value", "runs counted", f"runs of {mechanism}", f"runs of {baseline}",
                 f"poor a run with {mechanism}", f"poor a run with {baseline}", "fixed",
                 f"VIA's anchor ({RELAY_FIX_GOAL:.0%})"), tuple(fixed)))
    return found


def failover_remarks(results: pd.DataFrame) -> list[str | Table]:
    """Per swept value that ran both: the failover gap's range and mean, the frames lost in
    total and the controller's reroute, over the valid runs, with the number flagged; whether
    hot standby is faster (:func:`verdict`); and every run as measured, the flagged ones with
    the reason."""
    chosen = results[results["policy"].isin(FAILOVER)]
    summaries, verdicts, each = [], [], []
    for _, at, group in swept_values(chosen):
        if not set(FAILOVER) <= set(group["policy"]):
            continue
        for policy in reversed(FAILOVER):
            runs = group[group["policy"] == policy]
            valid = runs[runs["failover_valid"] == 1]
            gap, reroute = valid["failover_gap_ms"], valid["failover_reroute_ms"]
            summaries.append((at, policy, str(len(valid)), str(len(runs) - len(valid)),
                              *(whole(x) for x in (gap.min(), gap.max(), gap.mean())),
                              str(int(valid["failover_frames_lost"].sum())),
                              f"{whole(reroute.min())}-{whole(reroute.max())}"
                              if len(valid) else "n/a"))
        verdicts.append(f"At {at}: {verdict(group)}")
        for _, row in group.iterrows():
            cut = Failover(CUT_VIEWER, INGEST, row["failover_measured_gap_ms"] / 1e3,
                           int(row["failover_measured_frames_lost"]),
                           row["failover_wait_before_ms"] / 1e3,
                           row["failover_ingest_wait_ms"] / 1e3)
            each.append((at, row["policy"], str(row["repetition"]), str(row["seed"]),
                         whole(1e3 * cut.gap_s), str(cut.frames_lost),
                         whole(1e3 * cut.viewer_wait_before_s), whole(1e3 * cut.ingest_wait_s),
                         f"flagged, left out of the means: {cut.invalid}" if cut.invalid
                         else "valid"))
    if not summaries:
        return []
    return [Table("The failover gap over the valid runs (a flagged run is left out), the frames "
                  f"{CUT_VIEWER} lost in total over them and when the controller's recomputed "
                  "routes were in:",
                  ("value", "policy", "valid runs", "flagged", "shortest gap (ms)",
                   "longest gap (ms)", "mean gap (ms)", "frames lost",
                   "routes recomputed after the cut (ms)"), tuple(summaries)),
            *verdicts,
            Table("Every run as measured (the longest waits for a whole frame say whether it "
                  "measured failover):",
                  ("value", "policy", "repetition", "seed", "gap (ms)", "frames lost",
                   f"{CUT_VIEWER}'s longest wait in the {PRE_CUT_S:g} s before the cut (ms)",
                   f"{INGEST}'s longest wait around it (ms)", "run"), tuple(each))]


def remarks(results: pd.DataFrame) -> list[str | Table]:
    """Per swept value and policy, from the results: the views' playout and startup
    (:func:`playout_table`), what the GOP caches cost, the views against LiveNet's goals and
    where the startup went (:func:`goals_tables`), what probing and relays bought
    (:func:`mechanism_tables`) and the failover (:func:`failover_remarks`)."""
    return [playout_table(results), *gop_cache_table(results), *goals_tables(results),
            *mechanism_tables(results), *failover_remarks(results)]


KINDS = (Kind(name="dispatch_emulation", parameters=Parameters, policies=ACCESS + RELAYS + FAILOVER,
              run=measured_run(variables, measure), metrics=METRICS,
              plots=PLOTS, constants=CONSTANTS,
              about=ABOUT, remarks=remarks, emulated=True),)
