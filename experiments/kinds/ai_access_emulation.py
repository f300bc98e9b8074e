"""Seed 003 emulated (``topologies/ai_access.yaml``): what one run of an AI access policy did,
as the ``scheme`` of its summary (:class:`~experiments.sweeps.kinds.RunSummary`).

Everything comes from what the agents and the controller recorded: the controller's decisions
(each flow's placement and every migration, with the server it left), the access servers' load
reports (``ai_load``: per port the rate and memory measured, the worker's CPU share, packets
taken and dropped over the processing budget) and the receivers' first copies (``flows``,
``flow_seconds``: loss before repair), the units' outcomes (``ai_units``) and the terminals'
sending (``ai_units_sent``).

A server's load degree L_i is computed from its reports with the policy's own resource model
(:class:`~controller.policies.ai_access.resources.ServerTracker`, smoothing 0.8, the policy's
weights): the load as measured, without the placed flows' demands the policy adds for flows it
has not seen measured yet.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from controller import policies
from controller.config import ControllerConfig
from controller.policies.ai_access.policies import server_spec
from controller.policies.ai_access.resources import LoadWeights, Measurement, ServerTracker
from controller.policy import Server
from controller.view import NetworkView
from experiments.measurements import read_table
from experiments.sweeps.kinds import RunSummary

RECEIVER = "ai_receiver"


def servers_of(config: ControllerConfig) -> dict[str, Server]:
    """The access servers of the run's services, with their labels."""
    view = NetworkView.from_json(config.view)
    return {name: Server(name, service, view.attachment(name).address, capacity,
                         labels=dict(view.labels.get(name, {})))
            for service, spec in view.services.items()
            for name, capacity in spec.servers.items()}


def moves(run_dir: Path) -> list[dict]:
    """Every placement and migration the controller carried out, in order: ``time``, ``kind``,
    ``flow``, ``server`` and ``source`` (where the flow was before; None when placed)."""
    where: dict[str, str] = {}
    result = []
    for row in sorted(read_table(run_dir, "decisions"), key=lambda r: float(r["time"])):
        if row["kind"] not in ("place", "migrate"):
            continue
        result.append({"time": float(row["time"]), "kind": row["kind"], "flow": row["flow"],
                       "server": row["server"], "source": where.get(row["flow"])})
        where[row["flow"]] = row["server"]
    return result


def load_degrees(run_dir: Path, servers: dict[str, Server], weights: LoadWeights
                 ) -> list[dict]:
    """Per server and load report (in time order): ``time``, ``server``, ``degree`` (L_i from
    the reports so far), ``cpu``, ``received`` and ``over_budget`` in the report's period."""
    reports: dict[tuple[str, float], list[dict]] = defaultdict(list)
    for row in read_table(run_dir, "ai_load"):
        if row["agent"] == RECEIVER and row["node"] in servers:
            reports[row["node"], float(row["time_s"])].append(row)
    trackers = {name: ServerTracker(server_spec(server)) for name, server in servers.items()}
    result = []
    for (name, time), rows in sorted(reports.items(), key=lambda item: item[0][1]):
        load = trackers[name].update(Measurement(
            {row["port"]: float(row["bw_in_bps"]) for row in rows},
            {row["port"]: float(row["memory_bytes"]) for row in rows},
            min(1.0, float(rows[0]["cpu"]))))
        result.append({"time": time, "server": name, "degree": load.degree(weights),
                       "cpu": float(rows[0]["cpu"]),
                       "received": sum(int(row["received"]) for row in rows),
                       "over_budget": sum(int(row["over_budget"]) for row in rows)})
    return result


def run_degrees(run_dir: Path) -> list[dict]:
    """:func:`load_degrees` of a run, with its policy's weights."""
    config = ControllerConfig.read(run_dir / "controller" / "config.json")
    weights = policies.create(config.policy, config.policy_params).params.weights
    return load_degrees(run_dir, servers_of(config), weights)


def first_copies(run_dir: Path, start: float = float("-inf"), end: float = float("inf")
                 ) -> dict[str, tuple[int, int]]:
    """Per access server, (first copies lost, first copies expected) in the seconds of the
    receivers' flows that began within [start, end) (CLOCK_REALTIME seconds)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in read_table(run_dir, "flow_seconds"):
        if row["agent"] != RECEIVER or not start <= float(row["time_s"]) < end:
            continue
        lost, packets = int(row["lost"]), int(row["packets"])
        counts[row["node"]][0] += lost
        counts[row["node"]][1] += lost + packets
    return {node: (lost, expected) for node, (lost, expected) in counts.items()}


def spread(degrees: list[dict], start: float, end: float) -> tuple[float, dict[str, float]]:
    """The population standard deviation of the servers' mean load degrees over the reports
    within [start, end), and those means."""
    by_server: dict[str, list[float]] = defaultdict(list)
    for row in degrees:
        if start <= row["time"] < end:
            by_server[row["server"]].append(row["degree"])
    means = {name: statistics.fmean(values) for name, values in sorted(by_server.items())}
    return (statistics.pstdev(means.values()) if len(means) > 1 else 0.0), means


def run_summary(run_dir: Path, summary: dict) -> dict:
    """Per server: the flows it held at the end, the first copies lost, dropped over budget,
    its mean load degree and CPU; the migrations; the spread of load degrees before the first
    migration and after the last (the whole run without any)."""
    config = ControllerConfig.read(run_dir / "controller" / "config.json")
    policy = policies.create(config.policy, config.policy_params)
    servers = servers_of(config)
    decided = moves(run_dir)
    degrees = run_degrees(run_dir)
    migrations = [move for move in decided if move["kind"] == "migrate"]
    holding: dict[str, str] = {}
    for move in decided:
        holding[move["flow"]] = move["server"]
    losses = first_copies(run_dir)
    units = defaultdict(lambda: [0, 0])
    for row in read_table(run_dir, "ai_units"):
        units[row["node"]][0] += 1
        units[row["node"]][1] += row["complete"] == "1"
    origin = summary.get("timeline_origin_s", 0.0)
    first = migrations[0]["time"] if migrations else float("inf")
    last = migrations[-1]["time"] if migrations else float("-inf")
    before, _ = spread(degrees, float("-inf"), first)
    after, _ = spread(degrees, last, float("inf"))
    rows = []
    for name in sorted(servers):
        own = [row for row in degrees if row["server"] == name]
        lost, expected = losses.get(name, (0, 0))
        rows.append({
            "server": name, "flows_at_end": sum(server == name for server in holding.values()),
            "first_copies": expected, "lost": lost,
            "loss": lost / expected if expected else None,
            "over_budget": sum(row["over_budget"] for row in own),
            "degree_mean": statistics.fmean(r["degree"] for r in own) if own else None,
            "cpu_mean": statistics.fmean(r["cpu"] for r in own) if own else None,
            "units": units[name][0], "complete": units[name][1]})
    return {
        "title": f"{config.policy} access{' with migration' if policy.params.migrate else ''}: "
                 f"what the access servers measured",
        "servers": rows, "migrations": [move | {"t": move["time"] - origin}
                                        for move in migrations],
        "spread_before": before, "spread_after": after if migrations else None,
        "tables": [{
            "title": "per access server (first copies: loss before repair; L_i from its reports)",
            "columns": ["server", "flows at end", "first copies", "lost", "over budget",
                        "mean L_i", "mean CPU", "units complete"],
            "rows": [[row["server"], str(row["flows_at_end"]), str(row["first_copies"]),
                      f"{row['loss']:.1%}" if row["loss"] is not None else "-",
                      str(row["over_budget"]),
                      f"{row['degree_mean']:.3f}" if row["degree_mean"] is not None else "-",
                      f"{row['cpu_mean']:.2f}" if row["cpu_mean"] is not None else "-",
                      f"{row['complete']}/{row['units']}"] for row in rows]}],
        "notes": [f"{move['flow']} moved {move['source']} -> {move['server']} at "
                  f"{move['time'] - origin:.1f} s" for move in migrations]
                 + [f"spread of the servers' mean L_i: {before:.3f}"
                    + (f" before the first migration, {after:.3f} after the last"
                       if migrations else " (no migration)")]}


RUN_SUMMARIES = (RunSummary("ai_access", run_summary),)
