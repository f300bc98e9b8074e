"""live_edge emulated: the ``live_edge_emulation`` kind of experiment cell (one ``edgebed run`` of
``topologies/live_edge/live_edge.yaml`` per cell), and the run's QoE twice: as the model predicted it and as
the agents measured it.

The prediction is the policy's own view of the run's last period: the instance it built from
the network (delays over the scenario's links, transcoding G·(R−R_v)) and the viewers' labels,
with the allocation that was carried out. The measurement keeps everything the network cannot
change (interaction demand, preference, gift weight, the decision history behind the switch
and bitrate-drop penalties) and puts in what each viewer's agent measured since its last
decision: the median one-way delay from the streamer (kernel timestamps; transcoding and every
queue included) for the latency L, the goodput for the bitrate. Their gap is a result: what
the model leaves out (frame-by-frame transcoding, pacing, losses on the way to the edges).

A cell also records where its run left each viewer (``placement``, a text column of
``results.csv``: the last decision each viewer followed, checked against the controller's
``decisions`` table), so that the report's remarks can compare the policies viewer by viewer
on the same repetition, and order the policies by the objective predicted and measured.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats

from controller import policies
from controller.config import ControllerConfig
from controller.core import ControllerCore
from controller.policies.live_edge.model import interaction_experience, qoe, video_quality
from controller.policies.live_edge.policies import instance_from_state
from controller.policy import Placement
from controller.view import NetworkView
from experiments.measurements import read_table
from experiments.report import CONFIDENCE, plot_time_figure, swept_values
from experiments.runs import RunRecord, per_second
from experiments.sweeps.kinds import (Cell, Kind, Metric, Panel, RunSummary, Table, TimeFigure,
                                      emulated_run)
from edgebed import units

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
    at the decided bitrate (the switch penalty included): how the servers compared."""
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


def run_summary(run_dir: Path, summary: dict) -> dict:
    """What one run of a live-edge policy did (the ``scheme`` of its summary,
    :class:`~experiments.sweeps.kinds.RunSummary`): every decision a viewer followed, with its
    time on the timeline, the policy's reason (each covering server's latency and QoE in the
    model, and the network change announced since the viewer's previous decision) and the QoE
    predicted and measured (:func:`decision_qoe`); what each viewer measured, per second, in
    each phase between network changes and migrations (:func:`phases`); the migrations with
    the figures just before and after each; and ``timeline.png``, the viewers' delay and loss
    over time with the changes and migrations marked."""
    origin = summary["timeline_origin_s"]
    events = summary.get("network_events", [])
    decisions = decision_qoe(run_dir, events, origin)
    config = ControllerConfig.read(run_dir / "controller" / "config.json")
    for row in decisions:
        row["t"] = row["time_s"] - origin
    for row in decisions:
        row["reason"] = _reason(row, events, decisions, config.policy)
    seconds = per_second(RunRecord.read(run_dir))
    seconds = seconds[seconds["node"].isin({row["viewer"] for row in decisions})].copy()
    seconds["t"] = seconds["time_s"] - origin
    ends = stream_ends(decisions)
    # What still arrives on a stream after the viewer's next decision is the old way's tail.
    seconds = seconds[[t < ends.get((node, flow), math.inf) for node, flow, t in
                       zip(seconds["node"], seconds["flow"], seconds["t"])]]
    moves = [row for row in decisions if row["previous_server"] not in (None, row["server"])]
    changes = [(event["t"], f"{event['link'][0]} change at {event['t']:.1f} s")
               for event in events]
    boundaries = sorted(changes + [(row["t"], f"{row['viewer']}'s move at {row['t']:.1f} s")
                                   for row in moves])
    measured = phases(seconds, decisions, boundaries)
    migrations = []
    for move in moves:
        own = [phase for phase in measured if phase["viewer"] == move["viewer"]]
        before = [phase for phase in own if phase["end"] <= move["t"] + 1e-9]
        after = [phase for phase in own if phase["start"] >= move["t"] - 1e-9]
        migrations.append({
            "viewer": move["viewer"], "t": move["t"], "from": move["previous_server"],
            "to": move["server"], "reason": move["reason"],
            "before": _figures(before[-1]) if before else None,
            "after": _figures(after[0]) if after else None})
    plot = timeline_plot(run_dir, seconds, changes, moves)
    return {
        "title": f"{config.policy} decisions (live_edge's model) and what the viewers measured",
        "decisions": [{key: value for key, value in row.items() if key != "time_s"}
                      for row in decisions],
        "phases": measured, "migrations": migrations, "plots": [plot.name],
        "tables": [
            {"title": "decisions the viewers followed (latency L and QoE: the model's, and "
                      "with the stream's measured median delay and goodput)",
             "columns": ["t s", "viewer", "edge", "Mbit/s", "L model ms", "L measured ms",
                         "QoE model", "QoE measured"],
             "rows": [[f"{row['t']:.1f}", row["viewer"], _moved(row),
                       f"{row['bitrate_bps'] / 1e6:g}", f"{row['latency_model_ms']:.0f}",
                       f"{row['latency_measured_ms']:.0f}", f"{row['qoe_model']:.2f}",
                       f"{row['qoe_measured']:.2f}"] for row in decisions]},
            {"title": "what each viewer measured (per-second means; a second across a change "
                      "is left out)",
             "columns": ["viewer", "edge", "phase", "s", "delay ms", "loss"],
             "rows": [[phase["viewer"], phase["server"], phase["phase"], str(phase["seconds"]),
                       f"{phase['delay_ms']:.1f}", f"{phase['loss']:.1%}"]
                      for phase in measured]}],
        "notes": [f"why {row['viewer']} on {_moved(row)} at {row['t']:.1f} s: {row['reason']}"
                  for row in decisions]
                 + [f"{move['viewer']} moved {move['from']} -> {move['to']} at {move['t']:.1f} s: "
                  + (f"delay {move['before']['delay_ms']:.1f} -> "
                     f"{move['after']['delay_ms']:.1f} ms, loss {move['before']['loss']:.1%} "
                     f"-> {move['after']['loss']:.1%} (the phases before and after)"
                     if move["before"] and move["after"] else "too short to measure around")
                  for move in migrations]
                 + ["the measured latency includes what the model leaves out (an edge "
                    "transcodes a frame once all of it arrived and spreads it over a frame "
                    "interval) and a stream's whole life, any change it went through included"]
                 + [f"plot: {plot}"]}


def _reason(row: dict, events: list[dict], decisions: list[dict], policy: str) -> str:
    """Why the policy decided ``row``: the network change the controller was told of since
    the viewer's previous decision, and what the model gave each covering server."""
    earlier = [other["t"] for other in decisions
               if other["viewer"] == row["viewer"] and other["t"] < row["t"]]
    since = max(earlier, default=-math.inf)
    news = [f"{_link_change(event)} at {event['t']:.1f} s" for event in events
            if since < event["t"] <= row["t"] and event.get("controller") == "told"]
    weighed = ", ".join(f"{name} {figures['latency_ms']:.0f} ms, QoE {figures['qoe']:.2f}"
                        for name, figures in sorted(row["candidates"].items()))
    return "; ".join(news + [f"{policy} at {row['bitrate_bps'] / 1e6:g} Mbit/s: {weighed}"])


def _moved(row: dict) -> str:
    """The decision's server, with the one it left when it moved the viewer."""
    if row["previous_server"] in (None, row["server"]):
        return row["server"]
    return f"{row['previous_server']} -> {row['server']}"


def _link_change(event: dict) -> str:
    written = {"delay": units.format_duration, "jitter": units.format_duration,
               "loss": units.format_fraction, "bw": units.format_rate}
    changed = ", ".join(f"{name} {written[name](value) if name in written else value}"
                        for name, value in event["set"].items())
    arrow = {"forward": "->", "reverse": "<-"}
    directions = event["directions"]
    way = arrow[directions[0]] if len(directions) == 1 else "<->"
    return f"{event['link'][0]} {way} {event['link'][1]} {changed}"


def _figures(phase: dict) -> dict:
    return {key: phase[key] for key in ("delay_ms", "loss", "seconds", "phase", "server")}


def stream_ends(decisions: list[dict]) -> dict[tuple[str, str], float]:
    """(viewer, flow) -> when the viewer's next decision came (inf for its last): the end of
    the stream a decision started, on the timeline."""
    ends = {}
    for row in decisions:
        later = [other["t"] for other in decisions
                 if other["viewer"] == row["viewer"] and other["t"] > row["t"]]
        ends[row["viewer"], row["flow"]] = min(later, default=math.inf)
    return ends


def phases(seconds, decisions: list[dict], boundaries: list[tuple[float, str]]) -> list[dict]:
    """Per viewer, stream (decision) and phase between ``boundaries`` (time on the timeline,
    label), what its per-second rows (``seconds``, with ``t``) measured: the packet-weighted
    mean delay and the loss over the seconds wholly inside the phase. A stream counts until
    the viewer's next decision (what still arrives on it afterwards is the old way's tail), and
    its last second there may run past that decision (the stream ended there)."""
    times = [at for at, _ in boundaries]
    names = ([f"until {boundaries[0][1]}"] if boundaries else ["whole run"]) + [
        f"after {label}" for _, label in boundaries]
    server_of = {(row["viewer"], row["flow"]): row["server"] for row in decisions}
    until = stream_ends(decisions)
    found = []
    for (viewer, flow), rows in seconds.groupby(["node", "flow"], sort=False):
        if (viewer, flow) not in server_of:
            continue
        ended = until[viewer, flow]
        rows = rows[rows["t"] < ended]
        if rows.empty:
            continue
        last_start = rows["t"].max()
        for index, name in enumerate(names):
            start = times[index - 1] if index else -math.inf
            end = times[index] if index < len(times) else math.inf
            inside = rows[(rows["t"] >= start) & ((rows["t"] + 1 <= end) | (
                (rows["t"] == last_start) & (end == ended)))]
            if inside.empty:
                continue
            packets, lost = inside["packets"].sum(), inside["lost"].sum()
            found.append({"viewer": viewer, "flow": flow, "server": server_of[viewer, flow],
                          "phase": name, "start": max(start, float(inside["t"].min())),
                          "end": min(end, float(inside["t"].max()) + 1), "seconds": len(inside),
                          "delay_ms": float((inside["delay_mean_ms"] * inside["packets"]).sum()
                                            / packets),
                          "loss": float(lost / (packets + lost))})
    return sorted(found, key=lambda phase: (phase["viewer"], phase["start"]))


def timeline_plot(run_dir: Path, seconds, changes: list[tuple[float, str]],
                  moves: list[dict]) -> Path:
    """``timeline.png`` (and .svg) in ``run_dir``: every viewer's delay and loss per second on
    the timeline, its streams one after the other, with the network changes and migrations
    marked."""
    marks = {label: at for at, label in changes} | {
        f"{move['viewer']} {move['previous_server']} -> {move['server']}": move["t"]
        for move in moves}
    per_viewer = {viewer: rows.sort_values("t") for viewer, rows in seconds.groupby("node")}

    def lines(column: str, scale: float) -> dict:
        return {viewer: ((rows["t"] + 0.5).tolist(), (rows[column] * scale).tolist())
                for viewer, rows in per_viewer.items()}

    figure = TimeFigure(
        "timeline", f"{run_dir.name}: what the viewers measured", "", columns=1, panels=(
            Panel("one-way delay from the streamer, per second", "seconds into the run",
                  "delay (ms)", lines("delay_mean_ms", 1.0), marks),
            Panel("loss, per second", "seconds into the run", "loss (%)",
                  lines("loss_fraction", 100.0), marks)))
    return plot_time_figure(figure, run_dir, run_dir.name)


RUN_SUMMARIES = (RunSummary("live_edge", run_summary),)


class Parameters(BaseModel):
    """What one emulated cell runs: the scenario (its ``${VAR}`` defaults otherwise), for how
    long, with which transcoding delay G (ms per Mbit/s, emulated by the edges and counted by
    the policy alike), and where the run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/live_edge/live_edge.yaml", description="the scenario file")
    duration: float = Field(20.0, gt=0, description="run length (s)")
    G: float = Field(50.0, ge=0, description="transcoding delay per Mbps below the source "
                                             "(ms/Mbps)")
    runs_dir: str = Field("runs", description="where the runs' directories go")


def run_cell(cell: Cell) -> list[dict[str, object]]:
    """One emulated run of ``cell``'s policy: the scenario's policy, seed and G set through its
    variables; its QoE as predicted and as measured."""
    parameters: Parameters = cell.parameters
    run_dir, summary = emulated_run(cell, parameters.scenario, parameters.duration,
                                    parameters.runs_dir,
                                    {"EDGEBED_G_MS": f"{parameters.G:g}",
                                     "EDGEBED_G_SI": f"{parameters.G * 1e-9:g}"})
    rows = viewer_qoe(run_dir)
    placed, unconfirmed = placement(run_dir, rows)
    return [run_totals(rows) | {"fidelity_ok": int(summary["fidelity"]["ok"]),
                                "unconfirmed": unconfirmed,
                                "placement": placement_text(placed)}]


METRICS = (Metric("objective_model", "objective, model's prediction"),
           Metric("objective_measured", "objective, from measurements"),
           Metric("latency_model_ms", "mean latency, model's", "ms"),
           Metric("latency_measured_ms", "mean latency, measured", "ms"),
           Metric("bitrate_mbps", "mean bitrate decided", "Mbps"),
           Metric("goodput_mbps", "mean goodput measured", "Mbps"),
           Metric("viewers", "viewers served"),
           Metric("fidelity_ok", "runs the fidelity monitor passed"),
           Metric("latency_p99_ms", "mean 99th-percentile delay, measured", "ms"),
           Metric("loss", "mean loss of the viewers' streams, measured", "fraction"),
           Metric("unconfirmed", "viewers whose last decision the controller's decisions "
                                 "table does not name"))


def remarks(results: pd.DataFrame) -> list[str | Table]:
    """Per sweep value: how differently each pair of policies placed the same viewers (each
    run's ``placement``, repetition by repetition) and the media rate each left on each edge
    (:func:`placement_tables`), the objective as the model predicted it and as measured, both
    orderings of the policies and whether they match (:func:`ordering_remarks`), and what the
    measured delay, its tail and loss add to the model's latency (:func:`gap_table`)."""
    values = []
    for sweep, at, rows in swept_values(results):
        cells = rows.groupby(["policy", "repetition"], sort=False).first().reset_index()
        values.append((f"{sweep}, {at}", cells, list(dict.fromkeys(cells["policy"]))))
    # Results made before runs recorded their placements lack them.
    placed = placement_tables(values) if "placement" in results else []
    return [*placed, *ordering_remarks(values), gap_table(values)]


def placement_tables(values: list[tuple[str, pd.DataFrame, list[str]]]) -> list[Table]:
    """Per sweep value (``values``: where, its cells' rows, the policies in order), each pair
    of policies' placements compared viewer by viewer, repetition by repetition; and each
    policy's media rate on each edge at the end, with the placements the controller's
    ``decisions`` table does not confirm."""
    pairs, loads = [], []
    unserved = ("-", math.nan)
    for at, cells, order in values:
        placed = {(row.policy, row.repetition): read_placement(row.placement)
                  for row in cells.itertuples()}
        viewers = set().union(*placed.values())
        for a, b in itertools.combinations(order, 2):
            repetitions = sorted({r for p, r in placed if p == a}
                                 & {r for p, r in placed if p == b})
            edges, rungs = [], []
            for r in repetitions:
                each = [(placed[a, r].get(v, unserved), placed[b, r].get(v, unserved))
                        for v in viewers]
                edges.append(sum(x[0] != y[0] for x, y in each))
                rungs.append(sum(x[0] == y[0] != "-" and x[1] != y[1] for x, y in each))
            pairs.append((at, f"{a} and {b}", str(len(viewers)), ", ".join(map(str, edges)),
                          ", ".join(map(str, rungs))))
        for policy in order:
            runs = [where for (p, _), where in placed.items() if p == policy]
            rate: dict[str, float] = {}
            for where in runs:
                for server, bitrate in where.values():
                    rate[server] = rate.get(server, 0.0) + bitrate / 1e6
            mine = cells[cells["policy"] == policy]
            loads.append((at, policy, {server: total / len(runs)
                                       for server, total in rate.items()},
                          int(mine["unconfirmed"].sum())))
    edges = sorted({server for *_, rate, _ in loads for server in rate})
    return [Table("Placements compared pair by pair over the viewers some policy served, each "
                  "where its last decision followed put it, repetition by repetition:",
                  ("value", "policies", "viewers", "on different edges (or served by one only)",
                   "on the same edge at another rung"), tuple(pairs)),
            Table("Media rate placed on each edge at the end, Mbit/s (mean over the "
                  "repetitions; what the model's uplink capacity D_m counts, packet headers "
                  "not included), and the runs' placements whose edge the controller's "
                  "decisions table does not name:",
                  ("value", "policy", *edges, "unconfirmed placements"),
                  tuple((at, policy, *(f"{rate[edge]:.3g}" if edge in rate else "–"
                                       for edge in edges), str(unconfirmed))
                        for at, policy, rate, unconfirmed in loads))]


def ordering_remarks(values: list[tuple[str, pd.DataFrame, list[str]]]) -> list[str | Table]:
    """Per sweep value, the policies ordered by the objective the model predicted and by the
    one measured (:func:`_ordering_remark`), and a table of the pairs the measurement puts
    the other way round (with whether the repetitions resolve the measured difference: its
    paired interval leaves out 0)."""
    found, reversed_pairs = [], []
    for at, cells, order in values:
        pairs = _reversed_pairs(at, cells, order)
        found.append(_ordering_remark(at, cells, bool(pairs)))
        reversed_pairs += pairs
    if reversed_pairs:
        found.append(Table(
            "The pairs the measured objective orders the other way round from the model, the "
            "measured difference a mean over the repetitions with its paired "
            f"{CONFIDENCE:.0%} interval:",
            ("value", "measured higher", "predicted higher", "measured difference",
             "± (half the interval)", "resolved by the repetitions"), tuple(reversed_pairs)))
    return found


def _reversed_pairs(at: str, cells: pd.DataFrame, order: list[str]) -> list[tuple[str, ...]]:
    means = cells.groupby("policy", sort=False)["objective_model"].mean()
    measured_by = cells.pivot(index="repetition", columns="policy", values="objective_measured")
    found = []
    for a, b in itertools.combinations(order, 2):
        predicted = _difference(means[a], means[b])
        differences = (measured_by[a] - measured_by[b]).dropna()
        measured = float(differences.mean())
        if predicted and measured and np.sign(measured) != np.sign(predicted):
            high, low = (a, b) if predicted > 0 else (b, a)
            half = (stats.t.ppf((1 + CONFIDENCE) / 2, len(differences) - 1) * differences.std()
                    / math.sqrt(len(differences)) if len(differences) > 1 else math.nan)
            resolved = ("one repetition: no" if math.isnan(half) else
                        "yes" if abs(measured) > half else "no: within their spread")
            found.append((at, low, high, f"{abs(measured):.3g}",
                          "n/a" if math.isnan(half) else f"{half:.3g}", resolved))
    return found


def _ordering_remark(at: str, cells: pd.DataFrame, reversed_pairs: bool) -> str:
    """The policies ordered by the objective the model predicted and by the one measured, and
    whether the orderings match."""
    means = cells.groupby("policy", sort=False)[["objective_model",
                                                 "objective_measured"]].mean()
    verdict = ("the measured ordering does not match the predicted one (the pairs the other "
               "way round are tabulated below)" if reversed_pairs else
               "the measured ordering matches the predicted one")
    return (f"{at}: objective (gift-weighted QoE summed over the viewers served), predicted "
            f"{_ordering(means['objective_model'])}; measured "
            f"{_ordering(means['objective_measured'])}; {verdict}.")


def _difference(a: float, b: float) -> float:
    """a − b, or 0 when they differ only by float rounding (the same allocation's sums)."""
    return 0.0 if abs(a - b) <= 1e-9 * max(abs(a), abs(b)) else a - b


def _ordering(means: pd.Series) -> str:
    """``lua 5.12 > df 4.8 = mhcp 4.8``: the policies from the highest mean down."""
    ranked = means.sort_values(ascending=False)
    text = ""
    for index, (policy, mean) in enumerate(ranked.items()):
        if index:
            text += " = " if not _difference(ranked.iloc[index - 1], mean) else " > "
        text += f"{policy} {mean:.3g}"
    return text


def gap_table(values: list[tuple[str, pd.DataFrame, list[str]]]) -> Table:
    """What the emulation adds to the model's latency, per sweep value and policy (means over
    the repetitions of each run's mean over its viewers): the measured median one-way delay
    against the model's latency and their difference, the delay's 99th percentile and the
    loss of the viewers' streams."""
    rows = []
    for at, cells, order in values:
        means = cells.groupby("policy", sort=False)[["latency_model_ms", "latency_measured_ms",
                                                     "latency_p99_ms", "loss"]].mean()
        for policy in order:
            m = means.loc[policy]
            rows.append((at, policy, f"{m['latency_model_ms']:.0f}",
                         f"{m['latency_measured_ms']:.0f}",
                         f"{m['latency_measured_ms'] - m['latency_model_ms']:+.0f}",
                         f"{m['latency_p99_ms']:.0f}", f"{m['loss']:.2%}"))
    return Table("What the emulation adds to the model's latency (each run's mean over its "
                 "viewers, then the mean over the repetitions):",
                 ("value", "policy", "model's latency (ms)", "measured median one-way delay (ms)",
                  "measured less the model's (ms)", "99th percentile of the delay (ms)", "loss"),
                 tuple(rows))


ABOUT = """\
Each cell is one emulated run of the experiment's scenario (real packets on a Mininet network,
userspace Open vSwitch, edgebed's controller running the policy every 5 s period): a streamer's
source through a streamer-side edge to three transcoding edges over 150-174 ms inter-edge
links, viewers 5-15 ms from the two edges covering each, half of them joining in the second
period. Two scenarios use this kind:

- `topologies/live_edge/live_edge.yaml` (experiment `live_edge-emulation`): an 8 Mbit/s source and six
  viewers. The scale is a machine's, not the paper's: 6 viewers on 3 edges, not 50-125 on
  2-12, so capacities (the paper's 40 Mbit/s and 15 vCPU) do not bind and the allocation is
  driven by latency, interaction demand and preferences.
- `topologies/live_edge/capacity.yaml` (experiment `live_edge-capacity`): thirty viewers on
  the same three edges with every rate 1/8 of the paper's (the source, the ladder, C_m and H;
  G x8 so that G·(R−R_v) is the paper's delay for the same rung). The edges' uplinks D_m are
  set a little above the paper's D_m/8, so that the first period's viewers at the top rung do
  not fill every edge and later viewers can still be served; the viewers' preferred rungs add
  up to more than the uplinks: capacity binds, and the policies choose whom to serve, where
  and at which rung.

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
the edges and from them; a frame with a lost fragment is transcoded only when the next begins).
The delay's 99th percentile and the loss of the viewers' streams are measured to show how much
of the gap each explains.

At six viewers capacity does not bind, so the policies differ only in how they weigh latency,
interaction demand and preferences; the differences the paper reports need binding capacity,
which the model-level report (`reports/live_edge/model/`) and `live_edge-capacity` show.
"""

KIND = Kind(name="live_edge_emulation", parameters=Parameters,
            policies=("lua", "df", "mhcp", "random", "optimal"), run=run_cell,
            metrics=METRICS, plots=tuple(metric.name for metric in METRICS[:10]), about=ABOUT,
            remarks=remarks, emulated=True, texts=("placement",))
KINDS = (KIND,)
