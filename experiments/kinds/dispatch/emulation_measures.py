"""dispatch emulated, measured: the policies and fixed figures of the ``dispatch_emulation`` kind
and the row one ``edgebed run`` of it yields, read off what the run recorded."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import yaml

from controller.config import ControllerConfig
from controller.policies.dispatch.quality import VIA
from controller.view import NetworkView
from experiments.measurements import host_addresses, network_kept_up, read_table
from experiments.playout import Playout, viewer_playouts
from experiments.playout_columns import PLAYOUT_BUFFER_S, playout_metrics
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
# LiveNet's goals: shares of views never stalled and of startups under 1 s.
STALL_FREE_GOAL = 0.98
STARTUP_GOAL = 0.95
# VIA's anchor for relays: relays with probing fix at least this share of direct access's poor
# sessions.
RELAY_FIX_GOAL = 0.5
# A stall this soon after the first frame shown counts as one right after startup (what a GOP
# cache's burst could cause): one GOP of the scenario's stream (50 frames at 25 fps).
EARLY_S = 2.0


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
            "viewers": len(viewers),
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
