"""live_edge's run summary: what one ``edgebed run`` of a live-edge policy adds to its summary
(each decision with its reason and QoE, the phases between network changes, the timeline plot)."""

from __future__ import annotations

import math
from pathlib import Path

from controller.config import ControllerConfig
from experiments.kinds.live_edge.emulation_measures import decision_qoe
from experiments.report import plot_time_figure
from experiments.runs import RunRecord, per_second
from experiments.sweeps.kinds import Panel, RunSummary, TimeFigure
from edgebed import units


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
