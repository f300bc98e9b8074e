"""live_edge emulated, measured: the QoE of one run's decisions as the model predicted it and as
the agents measured it, the run's totals, what its viewers' players showed (a switch of
server's stalls and freezes among it), and where the run left each viewer. The QoE's two
figures' gap is a result: what the model leaves out (frame-by-frame transcoding, pacing, losses
on the way to the edges)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from collections.abc import Callable, Hashable
from pathlib import Path

import numpy as np
import yaml

from controller import policies
from controller.config import ControllerConfig
from controller.core import ControllerCore
from controller.policies.live_edge.model import interaction_experience, qoe, video_quality
from controller.policies.live_edge.policies import instance_from_state
from controller.policy import Placement
from controller.view import NetworkView
from edgebed.units import parse_rate
from experiments.measurements import read_table
from experiments.playout import viewer_playouts
from experiments.playout_columns import PLAYOUT_BUFFER_S, playout_metrics, switch_metrics

COLUMNS = ("viewer", "flow", "server", "bitrate_bps", "goodput_bps", "latency_model_ms",
           "latency_measured_ms", "latency_p99_ms", "loss", "weight", "qoe_model",
           "qoe_measured")


def decision_qoe(run_dir: Path, events: list[dict] = (), origin: float = 0.0) -> list[dict]:
    """One row per decision a pulling viewer followed (:data:`COLUMNS`, then ``time_s``, when
    the viewer heard it on CLOCK_REALTIME, ``previous_server`` and ``candidates``), in the
    order heard: the model's QoE for it, as the policy's instance has it at that moment, and
    the QoE of what arrived on its stream (0, and no latency, when nothing of the decided
    stream arrived, or one packet with no rate to measure: a decision replaced before its
    stream began, or a viewer left unserved).
    The instance's network is the scenario's as the
    controller knew it then: the link delays ``events`` (the run summary's ``network_events``,
    ``t`` seconds after ``origin`` on CLOCK_REALTIME) announced before the decision applied.
    ``candidates`` maps every server covering the viewer to the model's latency and QoE there
    at the decided bitrate (the switch penalty included): how the servers compared.

    The prediction is the policy's own view: the instance it built from the network (delays
    over the scenario's links, transcoding G·(R−R_v)) and the viewers' labels, with the
    allocation that was carried out. The measurement keeps everything the network cannot
    change (interaction demand, preference, gift weight, the decision history behind the switch
    and bitrate-drop penalties) and puts in what the viewer's agent measured: the median
    one-way delay from the streamer (kernel timestamps; transcoding and every queue included)
    for the latency L, the goodput for the bitrate."""
    config = ControllerConfig.read(run_dir / "controller" / "config.json")
    policy = policies.create(config.policy, config.policy_params)
    followed = defaultdict(list)
    for row in sorted(read_table(run_dir, "live_decisions"), key=lambda r: float(r["time_s"])):
        followed[row["node"]].append(row)
    placed = {flow["client"]: flow for flow in json.loads(
        (run_dir / "controller" / "state.json").read_text())["flows"] if flow["client"] in followed}
    measured = {(row["node"], row["flow"]): row for row in read_table(run_dir, "flows")}
    announced = [event for event in events if event.get("controller") == "told"]
    rows = []
    for viewer, flow in placed.items():
        for index, decision in enumerate(followed[viewer]):
            heard = float(decision["time_s"])
            core = ControllerCore(NetworkView.from_json(config.view), policy)
            for event in announced:
                if origin + event["t"] <= heard:
                    core.link_delay_changed(event["index"], event["delay_s"].get("forward"),
                                            event["delay_s"].get("reverse"))
            request = core.request_for(viewer, flow["service"], flow["demand"],
                                       tuple(flow["bitrates"]), flow["flow"])
            before = followed[viewer][index - 1] if index else None
            previous = (Placement(request, before["server"], float(before["bitrate_bps"])),) \
                if before else ()
            state = dataclasses.replace(core.state((request,)), previous=previous)
            instance = instance_from_state(state, flow["service"], [request], policy.params)
            tables, weights = instance.tables, instance.weights
            server, bitrate = tables.server_index[decision["server"]], float(
                decision["bitrate_bps"])
            predicted = tables.terms(0, server, bitrate)
            stream = measured.get((viewer, decision["flow"]))
            # A stream of one packet has no duration and so no goodput (an empty field): as
            # if nothing arrived (seen in a run of Random, whose last decision for a viewer
            # came as the run ended); a goodput of 0 would make the QoE's log -inf.
            if stream is None or not stream["goodput_bps"]:
                # replaced before its stream began, or never served
                latency, goodput, experienced = math.nan, 0.0, 0.0
                tail, loss = math.nan, math.nan
            else:
                latency = float(stream["delay_p50_ms"]) / 1e3
                tail, loss = float(stream["delay_p99_ms"]), float(stream["loss_fraction"])
                goodput = float(stream["goodput_bps"])
                interaction = interaction_experience(tables.demand[0], latency, weights)
                quality = video_quality(goodput, tables.preferred[0], instance.r_min, weights)
                experienced = float(qoe(interaction, quality, predicted.drop, predicted.switch,
                                        weights))
            candidates = {}
            for name, m in tables.server_index.items():
                if tables.covered[0, m]:
                    terms = tables.terms(0, m, bitrate)
                    candidates[name] = {"latency_ms": 1e3 * float(terms.latency),
                                        "qoe": float(terms.qoe)}
            rows.append(dict(zip(COLUMNS, (
                viewer, decision["flow"], decision["server"], bitrate, goodput,
                1e3 * float(predicted.latency), 1e3 * latency, tail, loss,
                float(tables.weight[0]), float(predicted.qoe), experienced)))
                | {"time_s": heard, "previous_server": before["server"] if before else None,
                   "candidates": candidates})
    return rows


def viewer_qoe(run_dir: Path) -> list[dict]:
    """One row per pulling viewer of the run (:data:`COLUMNS`): its last decision, the model's
    QoE for it and the QoE of what arrived (:func:`decision_qoe`, with the delay changes the
    controller was told of, from the run's summary)."""
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    last = {row["viewer"]: row for row in decision_qoe(
        run_dir, summary.get("network_events", []), summary.get("timeline_origin_s", 0.0))}
    return [{column: row[column] for column in COLUMNS} for row in last.values()]


def run_totals(rows: list[dict]) -> dict:
    """The run as one observation: the objective (sum of gift-weighted QoE) both ways, the
    means of latency and bitrate both ways."""
    def total(column: str) -> float:
        return float(sum(row["weight"] * row[column] for row in rows))

    def mean(column: str) -> float:
        # nanmean: a viewer nothing reached has no measured latency (and a QoE of 0).
        values = [row[column] for row in rows if not math.isnan(row[column])]
        return float(np.mean(values)) if values else float("nan")

    return {"viewers": len(rows), "objective_model": total("qoe_model"),
            "objective_measured": total("qoe_measured"),
            "latency_model_ms": mean("latency_model_ms"),
            "latency_measured_ms": mean("latency_measured_ms"),
            "latency_p99_ms": mean("latency_p99_ms"), "loss": mean("loss"),
            "bitrate_mbps": mean("bitrate_bps") / 1e6, "goodput_mbps": mean("goodput_bps") / 1e6}


def edge_encoding(run_dir: Path, source_bps: float) -> Callable[[dict], Hashable]:
    """The encoding of a frame a viewer got (a ``frames`` row; the player's key,
    :func:`~experiments.playout.viewer_playouts`), as an edge server serves it
    (agents.edge_server): pulled at ``source_bps``, the source's bitrate, or above, the edge
    passes the source's frames through, the same from every edge, and the key is the rung
    alone; pulled below, each edge transcodes the source its own way, and the key is (the edge
    that sent it, its rung). Either way the frame keeps the source's number and type. The
    stream a frame came on (its ``flow``, one per decision) names the decision the viewer
    followed, whose ``live_decisions`` row gives the edge and the bitrate."""
    decided = {(row["node"], row["flow"]): (row["server"], float(row["bitrate_bps"]))
               for row in read_table(run_dir, "live_decisions")}

    def encoding(row: dict) -> Hashable:
        try:
            server, bitrate = decided[row["node"], row["flow"]]
        except KeyError:
            raise ValueError(f"{run_dir / 'tables' / 'frames.csv'}: field flow: {row['node']} "
                             f"got frames on {row['flow']}, which no row of its "
                             f"live_decisions names") from None
        rung = int(row["rung"])
        return rung if bitrate >= source_bps else (server, rung)

    return encoding


def run_playout(run_dir: Path) -> dict[str, float]:
    """The run's playout columns: every viewer's player, from the frames it got
    (:func:`~experiments.playout.viewer_playouts` at the streamer's frame rate with
    :data:`~experiments.playout_columns.PLAYOUT_BUFFER_S` of playout delay, the frames' encodings
    told apart as the edges make them, :func:`edge_encoding`), all views together
    (:func:`~experiments.playout_columns.playout_metrics`), and the stalls and freezes that
    followed a switch of server, a decision the viewer followed that moved it (its
    ``live_decisions`` row ``migrated``; :func:`~experiments.playout_columns.switch_metrics`)."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    viewers = [name for name, node in resolved["topology"]["nodes"].items()
               if node.get("role") == "viewer"]
    [streamer] = [entry["params"] for entry in resolved["workload"]
                  if entry["agent"] == "streamer"]
    playouts = viewer_playouts(run_dir, viewers, float(streamer["fps"]), PLAYOUT_BUFFER_S,
                               edge_encoding(run_dir, parse_rate(streamer["bitrate"])))
    switches = defaultdict(list)
    for row in read_table(run_dir, "live_decisions"):
        if row["migrated"] == "True":
            switches[row["node"]].append(float(row["time_s"]))
    return playout_metrics(playouts.values()) | switch_metrics(playouts, switches)


def placement(run_dir: Path, rows: list[dict]) -> tuple[dict[str, tuple[str, float]], int]:
    """Where the run left each viewer it served: viewer -> (edge, bitrate) of the last decision
    the viewer followed (``rows``, :func:`viewer_qoe`'s: the viewers the controller held at the
    end), and how many of them the controller's ``decisions`` table does not confirm (its last
    row about the viewer's flow, which lists every edge that decision sent flows to, does not
    name the edge: a push the viewer missed, or a decision it heard that was not carried
    out)."""
    flows = {flow["client"]: flow["flow"] for flow in json.loads(
        (run_dir / "controller" / "state.json").read_text())["flows"]}
    carried = sorted(read_table(run_dir, "decisions"), key=lambda row: float(row["time"]))
    last = {}
    for row in carried:
        for flow in row["flow"].split(","):
            last[flow] = row["server"].split(",")
    placed = {row["viewer"]: (row["server"], float(row["bitrate_bps"])) for row in rows}
    unconfirmed = sum(server not in last.get(flows.get(viewer), ())
                      for viewer, (server, _) in placed.items())
    return placed, unconfirmed


def placement_text(placed: dict[str, tuple[str, float]]) -> str:
    """A placement as one field of ``results.csv``: ``viewer=edge@bits`` joined by ``;``."""
    return ";".join(f"{viewer}={server}@{bitrate:.0f}"
                    for viewer, (server, bitrate) in sorted(placed.items()))


def read_placement(text: str) -> dict[str, tuple[str, float]]:
    """:func:`placement_text` read back."""
    placed = {}
    for item in filter(None, text.split(";")):
        viewer, where = item.split("=")
        server, bitrate = where.split("@")
        placed[viewer] = (server, float(bitrate))
    return placed
