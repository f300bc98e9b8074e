"""surveillance emulated: the ``surveillance_emulation`` kind of experiment cell, one ``edgebed run``
of ``topologies/surveillance/surveillance.yaml`` per cell with its clients replaced by a request trace.

The trace is the model's (:func:`controller.policies.surveillance.model.draw_trace`: cameras, a
hot few of them likelier by ``hot_factor``, requests at uniform random times, exponential
sessions), drawn from the cell's seed, so every policy of a repetition serves the same requests.
Each request becomes a client host (label ``camera``) running a viewer from its arrival for its
session; the cameras are spread over the scenario's two camera hosts. Nodes, links, CPU budgets,
report period and queue levels are the scenario's.

Everything measured comes from the run's records: per node, the load reports it sent (its
process CPU over its budget, its interface's bytes over its link rate, L of eq. 2 from them with
the policy's weights), the policy's refusals (``policy_trace``), the sessions that ended and
left (``decisions``: a viewer leaves when its session ends, and the controller releases its
placement) and which node each node server pulled a stream from (``flows`` of the edge_server
agents: a node fed by another node is a cascade).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field

from controller.policies.surveillance.load import HEAVY_ABOVE, LoadWeights, Usage, node_load
from controller.policies.surveillance.model import Workload, _mean_cv, draw_trace
from experiments.measurements import read_table
from edgebed.files import atomic_write
from experiments.sweeps.kinds import (EMULATED_METRICS, ROOT, Cell, EmulatedParameters, Kind,
                                      Metric, Panel, TimeFigure, emulated_run, run_record)
from experiments.kinds.surveillance.model import CLAIMS, METRICS as MODEL_METRICS

CAMERA_HOSTS = ("camA", "camB")
START_S = 1.0  # the first request's earliest start: the cameras and nodes are up by then


class Parameters(EmulatedParameters):
    """The request trace (the model's workload fields it uses), the scenario it replaces the
    clients of, and the run: its length, the queue levels, where the run directories go."""

    model_config = ConfigDict(extra="forbid")

    cameras: int = Field(10, ge=1, description="cameras")
    hot: int = Field(1, ge=0, description="hot cameras")
    hot_factor: float = Field(10.0, ge=1, description="a hot camera's request probability "
                                                      "over a cold one's")
    requests: int = Field(24, ge=1, description="client requests (one client host each)")
    horizon_s: float = Field(60.0, gt=0, description="requests arrive within this time (s)")
    session_mean_s: float = Field(20.0, gt=0, description="mean session (exponential, s)")
    scenario: str = Field("topologies/surveillance/surveillance.yaml", description="the scenario file")
    duration: float = Field(70.0, gt=0, description="run length (s)")
    light_below: float = Field(0.6, gt=0, description="light queue: L below")
    heavy_above: float = Field(HEAVY_ABOVE, gt=0, description="heavy queue: L above")
    settle: float = Field(START_S, ge=0, description="seconds left out at the start")

    def trace(self, seed: int):
        workload = Workload(cameras=self.cameras, hot=self.hot, hot_factor=self.hot_factor,
                            requests=self.requests, horizon_s=self.horizon_s,
                            session_mean_s=self.session_mean_s)
        return draw_trace(workload, seed)


def traced_scenario(parameters: Parameters, seed: int) -> dict:
    """The scenario with its clients replaced by the trace of ``seed``: client ``i`` asks for
    camera ``camera[i] + 1`` (camera 1 is the hottest) at ``START_S + arrival[i]`` for
    ``session[i]`` seconds."""
    scenario = yaml.safe_load((ROOT / parameters.scenario).read_text())
    trace = parameters.trace(seed)
    nodes = scenario["topology"]["nodes"]
    links = scenario["topology"]["links"]
    for name in [n for n in nodes if n.startswith("client")]:
        del nodes[name]
    cameras = [str(c) for c in range(1, parameters.cameras + 1)]
    hosts = {host: cameras[i::len(CAMERA_HOSTS)] for i, host in enumerate(CAMERA_HOSTS)}
    for host, streams in hosts.items():
        nodes[host]["labels"]["cameras"] = ",".join(streams)
    count = len(trace.arrival_s)
    for i, camera in enumerate(trace.camera, start=1):
        nodes[f"client{i}"] = {"kind": "client", "labels": {"camera": int(camera) + 1}}
    [client_link] = [link for link in links if link["endpoints"][0].startswith("client")]
    client_link["endpoints"] = [f"client[1-{count}]:eth1", f"s0:eth[21-{20 + count}]"]
    workload = [entry for entry in scenario["workload"]
                if entry["agent"] not in ("viewer", "camera")]
    camera_entry = next(e for e in scenario["workload"] if e["agent"] == "camera")
    viewer = next(e for e in scenario["workload"] if e["agent"] == "viewer")["params"]
    for host, streams in hosts.items():
        for stream in streams:
            workload.append({**camera_entry, "nodes": [host],
                             "params": {**camera_entry["params"], "to": host,
                                        "stream": int(stream)}})
    for i, (at, camera, length) in enumerate(zip(trace.arrival_s, trace.camera,
                                                 trace.session_s), start=1):
        workload.append({"agent": "viewer", "nodes": [f"client{i}"],
                         "start": f"{START_S + at:.3f}s",
                         "params": {**viewer, "pull_stream": int(camera) + 1,
                                    "duration": f"{max(length, 0.5):.3f}s"}})
    scenario["workload"] = workload
    scenario["duration"] = f"{parameters.duration:g}s"
    return scenario


def node_samples(run_dir: Path, origin: float) -> pd.DataFrame:
    """Per node and second of the run (``time_s``, from the timeline's origin): CPU and
    bandwidth utilisation and L, the mean of the kept reports it sent in that second."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    hosts = resolved["topology"]["nodes"]
    rows = []
    for row in read_table(run_dir, "load_reports"):
        if row["kept"] != "1":
            continue
        labels = hosts[row["server"]].get("labels", {})
        metrics = json.loads(row["metrics"])
        link = float(labels["bandwidth_mbps"]) * 1e6
        usage = Usage(cpu=metrics.get("cpu"),
                      memory=(metrics["memory"] / (float(labels["memory_gb"]) * 1e9)
                              if metrics.get("memory") is not None else None),
                      bandwidth=max(metrics.get("bw_in", 0.0), metrics.get("bw_out", 0.0))
                      / link)
        rows.append({"time_s": math.floor(float(row["time"]) - origin), "node": row["server"],
                     "cpu": usage.cpu, "bandwidth": usage.bandwidth,
                     "load": node_load(usage, LoadWeights())})
    table = pd.DataFrame(rows, columns=["time_s", "node", "cpu", "bandwidth", "load"])
    return table.groupby(["time_s", "node"], as_index=False).mean().sort_values(
        ["time_s", "node"])


def cascade_depths(run_dir: Path) -> dict[str, int]:
    """Per camera stream, the longest chain of node servers pulling it from one another (0: the
    origin only)."""
    resolved = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    by_address = {next(iter(node["interfaces"].values())).split("/")[0]: name
                  for name, node in resolved["topology"]["nodes"].items()
                  if "interfaces" in node}
    fed_by: dict[str, dict[str, str]] = defaultdict(dict)
    nodes = {name for name, node in resolved["topology"]["nodes"].items()
             if node.get("role") == "edge"}
    for row in read_table(run_dir, "flows"):
        if row["agent"] == "edge_server" and row["node"] in nodes:
            feeder = by_address.get(row["peer"].split(":")[0])
            if feeder in nodes and feeder != row["node"]:
                fed_by[row["flow"]][row["node"]] = feeder
    depths = {}
    for stream, feeders in fed_by.items():
        def depth(node: str, seen: frozenset = frozenset()) -> int:
            feeder = feeders.get(node)
            return 0 if feeder is None or node in seen else 1 + depth(feeder, seen | {node})
        depths[stream] = max(depth(node) for node in feeders)
    return depths


def heavy_spells(samples: pd.DataFrame, heavy: float) -> list[int]:
    """The lengths (s) of every spell a node's L stayed above ``heavy``."""
    spells = []
    for _, rows in samples.groupby("node"):
        length = 0
        for value in rows.sort_values("time_s")["load"]:
            if value > heavy:
                length += 1
            elif length:
                spells.append(length)
                length = 0
        if length:
            spells.append(length)
    return spells


def cell_figures(run_dir: Path, summary: dict, parameters: Parameters) -> dict[str, float]:
    origin = summary["timeline_origin_s"]
    samples = node_samples(run_dir, origin)
    samples = samples[(samples["time_s"] >= parameters.settle)
                      & (samples["time_s"] < parameters.duration - 1)]
    spells = heavy_spells(samples, parameters.heavy_above)
    rejected = sum(len([r for r in (row["rejected"] or "").split(";") if r])
                   for row in read_table(run_dir, "policy_trace"))
    decisions = read_table(run_dir, "decisions")
    placed = {row["flow"] for row in decisions if row["kind"] == "place"}
    depths = cascade_depths(run_dir)
    clients = [row for row in read_table(run_dir, "flows") if row["agent"] == "viewer"]
    streams = {row["flow"] for row in clients if int(row["unique"] or 0) > 0}
    return {"cv_load": _mean_cv(samples, "load"), "cv_cpu": _mean_cv(samples, "cpu"),
            "cv_bandwidth": _mean_cv(samples, "bandwidth"),
            "peak_load": samples["load"].max(), "peak_cpu": samples["cpu"].max(),
            "peak_bandwidth": samples["bandwidth"].max(),
            "overloads": len(spells), "heavy_max_s": max(spells, default=0),
            "rejected": rejected, "placed": len(placed),
            "left": sum(1 for row in decisions if row["kind"] == "leave"),
            "clients_per_stream": (sum(int(r["unique"] or 0) > 0 for r in clients)
                                   / len(streams) if streams else None),
            "cascades": sum(1 for d in depths.values() if d > 0),
            "max_depth": max(depths.values(), default=0),
            **run_record(summary)}


def scenario_path(cell: Cell) -> Path:
    return ROOT / cell.parameters.runs_dir / f"{cell.experiment}-{cell.id}.yaml"


def run_cell(cell: Cell) -> list[dict[str, object]]:
    """One emulated run of ``cell``'s policy on its repetition's request trace."""
    parameters: Parameters = cell.parameters
    path = scenario_path(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, yaml.safe_dump(traced_scenario(parameters, cell.seed % 2**32),
                                      sort_keys=False))
    run_dir, summary = emulated_run(cell, str(path), parameters.duration, parameters.runs_dir,
                                    {"EDGEBED_LIGHT_BELOW": f"{parameters.light_below:g}",
                                     "EDGEBED_HEAVY_ABOVE": f"{parameters.heavy_above:g}"})
    return [cell_figures(run_dir, summary, parameters)]


def latest_run(cell: Cell) -> Path | None:
    runs = ROOT / cell.parameters.runs_dir / f"{cell.experiment}-{cell.id}"
    found = sorted((p for p in runs.iterdir() if (p / "summary.json").exists()),
                   key=lambda p: p.stat().st_mtime) if runs.is_dir() else []
    return found[-1] if found else None


def figures(experiment) -> list[TimeFigure]:
    """The paper's Fig. 3 from the runs of the first repetition of the first sweep value:
    per-node CPU and bandwidth utilisation, original dynamic feedback against improved."""
    cells = {cell.policy: cell for cell in experiment.cells()
             if cell.repetition == 0 and cell.sweep == experiment.sweeps[0].name
             and cell.value == experiment.sweeps[0].labels[0]}
    runs = {}
    for name in ("sv_feedback", "sv_improved"):
        run_dir = latest_run(cells[name]) if name in cells else None
        if run_dir is not None:
            summary = json.loads((run_dir / "summary.json").read_text())
            runs[name] = node_samples(run_dir, summary["timeline_origin_s"])
    if len(runs) < 2:
        return []
    panels = []
    for letters, column, what in (("ab", "cpu", "CPU"), ("cd", "bandwidth", "bandwidth")):
        for letter, name in zip(letters, runs):
            lines = {node: (rows["time_s"].to_numpy(), 100 * rows[column].to_numpy())
                     for node, rows in runs[name].groupby("node", sort=True)}
            panels.append(Panel(f"({letter}) {what}, {name}", "seconds into the run",
                                f"{what} utilisation (%)", lines))
    caption = ("The paper's Fig. 3, emulated: per-node CPU (a, b; process CPU over its budget) "
               "and bandwidth (c, d; interface bytes over the link rate) utilisation per second "
               "as the nodes reported it, the original dynamic feedback (a, c) against the "
               "improved algorithm (b, d), on the same request trace (repetition 1).")
    return [TimeFigure("fig3", f"{experiment.name}: utilisation over time", caption,
                       tuple(panels))]


def model_metrics(*names: str) -> tuple[Metric, ...]:
    """The model-level kind's metrics of these names: the same figure under the same label and
    unit in both reports, defined once (experiments/kinds/surveillance/model.py)."""
    by_name = {metric.name: metric for metric in MODEL_METRICS}
    return tuple(by_name[name] for name in names)


METRICS = (
    *model_metrics("cv_load", "cv_cpu", "cv_bandwidth", "peak_load", "peak_cpu",
                   "peak_bandwidth"),
    # The model counts L passing the level at its samples; here a spell of reports above it.
    Metric("overloads", "overload events (spells of L above the heavy level)"),
    *model_metrics("heavy_max_s", "rejected"),
    Metric("placed", "requests placed"),
    Metric("left", "sessions that ended and left"),
    Metric("clients_per_stream", "clients receiving per camera stream received"),
    Metric("cascades", "camera streams cascaded"),
    *model_metrics("max_depth"),
    *EMULATED_METRICS,
)

ABOUT = """\
**Emulated, real packets.** Each cell is one `edgebed run` of `topologies/surveillance/surveillance.yaml`
(Mininet, userspace Open vSwitch, edgebed's controller running the balancer) with its clients
replaced by a request trace drawn as the model's is: 10 cameras (camera 1 hot, 10x as likely),
24 requests at uniform random times within 60 s, exponential sessions of mean 20 s, each request
a client host running a viewer from its arrival for its session. Nodes, links (8/6/4 Mbit/s),
CPU budgets (1/0.5/0.02 cores), 1 Mbit/s cameras, the 1 s report period and the paper's queue
levels (0.6/0.9) are the scenario's. Utilisation is what each node reported every second: its
process CPU over its budget and its interface's bytes over its link rate; L is eq. 2 from them
(disk unmeasured). The CV is across the nodes at each second, averaged over the seconds from
1 s to a second before the end; overload events are spells of L above 0.9.

**Scale reductions.** The paper's test is 100 cameras (10 hot) and 1,000 requests in 10
minutes; one 2-core machine emulating every host in real time takes 10 cameras (1 hot, the
same tenth), 24 requests in 60 s: time 10x faster, 40x fewer
requests. The model-level reports (`reports/surveillance/model`, `reports/surveillance/large`)
have the paper's scale. Three repetitions (three traces, each served by both policies);
with three samples the intervals are wide.

**Sessions end.** A viewer whose session ends sends `leave` and the controller releases its
placement (the decisions table's `leave` rows, metric `left`). A request is refused when no node
can take it: the original refuses when a camera's origin is full ("no room"), the improved when
every node that could serve is heavy (its queues count placed demand over capacity). Node
reports average the host's rates over 2 s (a GOP) for threshold checks. The fidelity monitor's
verdict is `fidelity_ok`."""


KIND = Kind(name="surveillance_emulation", parameters=Parameters,
            policies=("sv_rr", "sv_wrr", "sv_lc", "sv_wlc", "sv_hashing", "sv_p2c",
                      "sv_feedback", "sv_feedback_greedy", "sv_improved",
                      "sv_improved_periodic"),
            run=run_cell, metrics=METRICS,
            plots=("cv_load", "cv_cpu", "cv_bandwidth", "peak_load", "overloads",
                   "heavy_max_s", "rejected", "clients_per_stream", "max_depth"),
            claims=CLAIMS, about=ABOUT, figures=figures, emulated=True)
KINDS = (KIND,)
