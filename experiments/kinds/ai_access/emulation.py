"""ai_access emulated (``topologies/ai_access/ai_access.yaml``): what one run of an AI access policy did,
as the ``scheme`` of its summary (:class:`~experiments.sweeps.kinds.RunSummary`), and the
``ai_access_emulation`` kind of experiment cell (one ``edgebed run`` per cell, with or without
migration).

Everything comes from what the agents and the controller recorded: the policy's decisions (its
trace: each flow's placement and every migration, with the server it left), the access servers' load
reports (``ai_load``: per port the rate and memory measured, the worker's CPU share, packets
taken and dropped over the processing budget) and the receivers' first copies (``flows``,
``flow_seconds``: loss before repair), the units' outcomes (``ai_units``) the terminals'
sending (``ai_units_sent``) and the access response time each terminal flow measured, from its
join request to the grant (``decisions_followed``: the shared decision follower's).

A server's load degree L_i is computed from its reports with the policy's own resource model
(:class:`~controller.policies.ai_access.resources.ServerTracker`, smoothing 0.8, the policy's
weights): the load as measured, without the placed flows' demands the policy adds for flows it
has not seen measured yet.
"""

from __future__ import annotations

import functools
import statistics
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from controller import policies
from controller.config import ControllerConfig
from controller.policies.ai_access.migration import DoubleSmoothing
from controller.policies.ai_access.policies import server_spec
from controller.policies.ai_access.resources import LoadWeights, Measurement, ServerTracker
from controller.policy import Policy, Server
from controller.view import NetworkView
from experiments.measurements import read_table
from experiments.sweeps.kinds import (EMULATED_METRICS, Cell, EmulatedParameters, Kind, Metric,
                                      RunSummary, emulated_run, run_record)

RECEIVER = "ai_receiver"
TERMINAL = "ai_terminal"


def servers_of(config: ControllerConfig) -> dict[str, Server]:
    """The access servers of the run's services, with their labels."""
    view = NetworkView.from_json(config.view)
    return {name: Server(name, service, view.attachment(name).address, capacity,
                         labels=dict(view.labels.get(name, {})))
            for service, spec in view.services.items()
            for name, capacity in spec.servers.items()}


def moves(run_dir: Path) -> list[dict]:
    """Every placement and migration the policy decided, in order, from the controller's
    policy trace (one decision may move several flows): ``time``, ``kind`` (``place`` or
    ``migrate``), ``flow``, ``server`` and ``source`` (where the flow was before; None when
    placed)."""
    where: dict[str, str] = {}
    result = []
    for row in sorted(read_table(run_dir, "policy_trace"), key=lambda r: float(r["time"])):
        for kind, column in (("place", "assigned"), ("migrate", "migrated")):
            for item in filter(None, row[column].split(";")):
                flow, server = item.split("@")[:2]
                result.append({"time": float(row["time"]), "kind": kind, "flow": flow,
                               "server": server, "source": where.get(flow)})
                where[flow] = server
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


def run_policy(run_dir: Path) -> tuple[ControllerConfig, Policy]:
    """A run's controller configuration and its access policy (with the run's parameters)."""
    config = ControllerConfig.read(run_dir / "controller" / "config.json")
    return config, policies.create(config.policy, config.policy_params)


def run_degrees(run_dir: Path) -> list[dict]:
    """:func:`load_degrees` of a run, with its policy's weights."""
    config, policy = run_policy(run_dir)
    return load_degrees(run_dir, servers_of(config), policy.params.weights)


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


def prediction_errors(degrees: list[dict], alpha: float, start: float, end: float
                      ) -> tuple[float | None, float | None]:
    """How far the migration's forecast (double exponential smoothing with ``alpha``, fed each
    server's load degrees in order) was from the next measured load degree: the mean absolute
    error over the reports within [start, end), and that of the persistence forecast (the last
    measured value) beside it, each over every server's reports."""
    smoothing: dict[str, DoubleSmoothing] = {}
    last: dict[str, float] = {}
    errors, persistence = [], []
    for row in degrees:
        name, measured = row["server"], row["degree"]
        if name in smoothing and start <= row["time"] < end:
            errors.append(abs(smoothing[name].forecast() - measured))
            persistence.append(abs(last[name] - measured))
        smoothing.setdefault(name, DoubleSmoothing(alpha)).update(measured)
        last[name] = measured
    if not errors:
        return None, None
    return statistics.fmean(errors), statistics.fmean(persistence)


def access_responses(run_dir: Path) -> dict[str, float]:
    """Per terminal flow, its access response time (ms): from its join request to the grant,
    measured at the terminal (:class:`agents.follower.JoinTiming`)."""
    return {row["flow"]: float(row["response_ms"])
            for row in read_table(run_dir, "decisions_followed")
            if row["agent"] == TERMINAL and row["response_ms"]}


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
    config, policy = run_policy(run_dir)
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
    responses = sorted(access_responses(run_dir).values())
    error, persistence = prediction_errors(degrees, policy.params.alpha, float("-inf"),
                                           float("inf"))
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
        "response_ms": responses,
        "prediction_error": error, "persistence_error": persistence,
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
                       if migrations else " (no migration)")]
                 + ([f"forecast of L_i (double smoothing, alpha {policy.params.alpha:g}) "
                     f"against the next report's: mean absolute error {error:.3f}, "
                     f"{persistence:.3f} for the last value as forecast"]
                    if error is not None else [])
                 + ([f"access response time at the terminals (request to grant), "
                     f"{len(responses)} joins: median {statistics.median(responses):.1f} ms, "
                     f"max {responses[-1]:.1f} ms"] if responses else [])}


RUN_SUMMARIES = (RunSummary("ai_access", run_summary),)


class Parameters(EmulatedParameters):
    """What one emulated cell runs: the scenario (its ``${VAR}`` defaults otherwise), for how
    long, with migration or not, and where the run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field("topologies/ai_access/ai_access.yaml", description="the scenario file")
    duration: float = Field(16.0, gt=0, description="run length (s)")
    migrate: bool = Field(False, description="migration by load prediction on every report")
    flows_per_terminal: int = Field(4, ge=1, description="terminal flows on each of the three "
                                                         "terminal hosts (the concurrency)")
    settle: float = Field(4.0, ge=0, description="seconds of the timeline left out at the "
                                                 "start (joins, the first units, the first "
                                                 "reports)")


def cell_figures(run_dir: Path, summary: dict, settle: float, duration: float
                 ) -> dict[str, float]:
    """One run's metrics over the timeline from ``settle`` to a second before its end."""
    origin = summary["timeline_origin_s"]
    start, end = origin + settle, origin + duration - 1.0
    losses = first_copies(run_dir, start, end)
    lost = sum(count[0] for count in losses.values())
    expected = sum(count[1] for count in losses.values())
    config, policy = run_policy(run_dir)
    degrees = load_degrees(run_dir, servers_of(config), policy.params.weights)
    deviation, means = spread(degrees, start, end)
    error, persistence = prediction_errors(degrees, policy.params.alpha, start, end)
    mean = statistics.fmean(means.values()) if means else 0.0
    units = read_table(run_dir, "ai_units")
    migrations = [move for move in moves(run_dir) if move["kind"] == "migrate"]
    responses = list(access_responses(run_dir).values())
    return {
        "loss": lost / expected if expected else None,
        "worst_server_loss": max((count[0] / count[1] for count in losses.values()
                                  if count[1]), default=None),
        "load_spread": deviation, "load_cv": deviation / mean if mean else None,
        "load_max": max(means.values(), default=None),
        "units_complete": (sum(row["complete"] == "1" for row in units) / len(units)
                           if units else None),
        "over_budget": sum(row["over_budget"] for row in degrees
                           if start <= row["time"] < end),
        "migrations": len(migrations),
        "prediction_error": error, "persistence_error": persistence,
        "response_ms": statistics.median(responses) if responses else None,
        "response_max_ms": max(responses, default=None),
        **run_record(summary)}


def run_cell(cell: Cell) -> list[dict[str, object]]:
    """One emulated run of ``cell``'s policy, with or without migration."""
    parameters: Parameters = cell.parameters
    run_dir, summary = emulated_run(cell, parameters.scenario, parameters.duration,
                                    parameters.runs_dir,
                                    {"EDGEBED_MIGRATE": str(parameters.migrate).lower(),
                                     "EDGEBED_FLOWS_PER_TERMINAL":
                                         str(parameters.flows_per_terminal)})
    return [cell_figures(run_dir, summary, parameters.settle, parameters.duration)]


METRICS = (Metric("loss", "first copies lost, all servers", "fraction"),
           Metric("worst_server_loss", "first copies lost at the worst server", "fraction"),
           Metric("load_spread", "spread (std) of the servers' mean load degree"),
           Metric("load_cv", "coefficient of variation of the servers' mean load degree"),
           Metric("load_max", "highest server's mean load degree"),
           Metric("units_complete", "AI data units complete within their period", "fraction"),
           Metric("over_budget", "datagrams dropped over a processing budget"),
           Metric("migrations", "migrations"),
           Metric("prediction_error", "mean absolute error of the migration's forecast of "
                                      "L_i (double smoothing) against the next report's"),
           Metric("persistence_error", "mean absolute error of the last measured L_i as "
                                       "the forecast of the next report's"),
           Metric("response_ms", "access response time at the terminals (request to grant), "
                                 "median over the joins", "ms"),
           Metric("response_max_ms", "access response time at the terminals, slowest join",
                  "ms"),
           *EMULATED_METRICS)

ABOUT = """\
Each cell is one emulated run of `topologies/ai_access/ai_access.yaml` (real packets on a Mininet network,
userspace Open vSwitch, edgebed's controller running the access policy and, with `migrate`,
migration by load prediction on every load report): `flows_per_terminal` AI data flows on
each of three terminal hosts, 100 KB units of 100 packets a second each (the spec's are 672 KB
in 945 packets: a scale reduction to fit one 2-core machine), joining through the controller to
three heterogeneous access servers; ar3's processing budget (350 packets/s) is below what four
flows send. Loss is what the receivers' workers dropped over their budgets, measured as the
first copies' loss at the receivers; load degrees L_i are computed from the servers' own
reports with the policy's resource model. Figures are taken from `settle` seconds into the run
(joins and the first units left out) to a second before its end.

Access response time is measured at the terminals: each flow's join request (sent over the
side-band control network) to the grant that answers it, on the terminal's monotonic clock (the
round trip, the controller's policy call for the requests decided with it and its rule sending,
and any retransmission of the request). The median and the slowest join per run are tabulated
below; a slow join can be one that waited on a slow rule installation, its own or that of the
join decided just before it (the controller takes one call at a time; the controller's decisions
table gives each decision's installing time). The figure is the per-request cost at the
emulated scale, not at the paper's batches of requests, which the model-level report times.

**The cluster manager.** ar1 doubles as the cluster manager: every access server asks it on
the side band (the management network) which GPU server takes a unit it completed, and it
grants them in rotation (g1, g2, g1, ...; `agents/ai_access/ai_gpu.py`); the units then travel whole
over TCP on the data plane. The load and access tables the paper gives the manager are held
here by edgebed's controller, where the access policy and the migration run (the servers'
load reports and the flows' joins reach it on the same side band); the manager's own role is
the rotation.

**Prediction error.** Each run's summary gives the migration's forecast of each server's L_i
(double exponential smoothing, the policy's alpha 0.5, fed the L_i computed from the server's
reports) against the L_i of the server's next report, as a mean absolute error
(`prediction_errors`), beside the error of taking the last measured L_i as the forecast; each
cell's figures give both over the same window as the other figures (results columns
`prediction_error` and `persistence_error`). On loads that hold steady once the flows have
joined and moved, the trend term can turn the reports' small fluctuations into forecast error:
the two columns side by side show whether the smoothing forecasts better than no forecast.

Not reproduced here: response time at the paper's request counts (model level) and the
paper's scale of hundreds of flows (above).
"""

def over_repetitions(cells, metric: str, form: str) -> str:
    """A metric's mean over ``cells`` (the repetitions of one value) and its range."""
    values = cells[metric].dropna()
    if values.empty:
        return "-"
    if len(values) == 1:
        return f"{values.mean():{form}}"
    return f"{values.mean():{form}} ({values.min():{form}}-{values.max():{form}})"


def concurrency_remarks(results) -> list[str]:
    """Per sweep over the concurrency (``flows_per_terminal``) and per value: the loss of all
    servers and of the worst, the highest server's and the spread of the mean load degrees,
    the units complete, the migrations and the forecast errors, as mean and range over the
    repetitions."""
    lines = []
    rising = results[results["parameter"] == "flows_per_terminal"]
    for (sweep, policy), rows in rising.groupby(["sweep", "policy"], sort=False):
        for value, cells in rows.groupby("value", sort=False):
            figure = functools.partial(over_repetitions, cells)
            lines.append(f"{sweep}, {policy}, {3 * int(value)} flows ({len(cells)} runs): "
                         f"first copies lost {figure('loss', '.1%')}, at the worst server "
                         f"{figure('worst_server_loss', '.1%')}; highest mean L_i "
                         f"{figure('load_max', '.3f')}, spread {figure('load_spread', '.3f')}; "
                         f"units complete {figure('units_complete', '.1%')}; migrations "
                         f"{figure('migrations', '.1f')}; forecast error of L_i "
                         f"{figure('prediction_error', '.3f')}, of the last value "
                         f"{figure('persistence_error', '.3f')}")
    return lines


def remarks(results) -> list[str]:
    """Per policy, the loss and the load spread without and with migration, the access
    response time at the terminals (median and slowest join, each way) and the forecast
    errors; then
    :func:`concurrency_remarks`."""
    lines = []
    for policy, rows in results[results["parameter"] == "migrate"].groupby("policy",
                                                                           sort=False):
        by = {str(value).lower(): row for value, row in
              rows.groupby("value")[["loss", "load_spread", "migrations", "response_ms",
                                     "response_max_ms", "prediction_error",
                                     "persistence_error"]].mean().iterrows()}
        if {"false", "true"} <= set(by):
            still, moving = by["false"], by["true"]
            lines.append(f"{policy}: first copies lost {still['loss']:.2%} without migration, "
                         f"{moving['loss']:.2%} with ({moving['migrations']:.0f} migrations); "
                         f"spread of the mean L_i {still['load_spread']:.3f} -> "
                         f"{moving['load_spread']:.3f}; access response time median "
                         f"{still['response_ms']:.1f} / {moving['response_ms']:.1f} ms, "
                         f"slowest join {still['response_max_ms']:.1f} / "
                         f"{moving['response_max_ms']:.1f} ms (without / with migration); "
                         f"forecast error of L_i {still['prediction_error']:.3f} / "
                         f"{moving['prediction_error']:.3f}, of the last value "
                         f"{still['persistence_error']:.3f} / "
                         f"{moving['persistence_error']:.3f}")
    return lines + concurrency_remarks(results)


KIND = Kind(name="ai_access_emulation", parameters=Parameters,
            policies=("ai_lc_capacity", "ai_adga", "ai_adga_grouped", "ai_wlc", "ai_p2c"),
            run=run_cell,
            metrics=METRICS, plots=("loss", "worst_server_loss", "load_spread", "load_cv",
                                    "units_complete", "prediction_error",
                                    "persistence_error", "response_ms", "response_max_ms",
                                    "fidelity_ok"),
            about=ABOUT, remarks=remarks, emulated=True)
KINDS = (KIND,)
