"""Past runs, read back from their directories: the list (``edgebed runs``), two runs side by
side (``edgebed compare``) and one run's report with plots (``edgebed report``).

Everything here reads what a run left (``manifest.json``, ``summary.json``, ``tables/``) and
writes only into ``<run>/report/``; nothing runs or touches the network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from edgebed.files import atomic_write

from .measurements import read_table
from .report import markdown_table, save_figure

FLOW_KEY = ("node", "agent", "flow")
PLOTS = (("delay_mean_ms", "mean one-way delay (ms)", "delay"),
         ("loss_fraction", "loss (fraction of the second's packets)", "loss"),
         ("mbps", "goodput (Mbit/s)", "throughput"))


@dataclass
class RunRecord:
    """What a run directory says about its run."""

    path: Path
    manifest: dict
    summary: dict

    @classmethod
    def read(cls, path: Path) -> "RunRecord":
        path = Path(path)
        if not (path / "manifest.json").exists():
            raise FileNotFoundError(f"{path} is not a run directory (no manifest.json)")
        summary = path / "summary.json"
        return cls(path, json.loads((path / "manifest.json").read_text()),
                   json.loads(summary.read_text()) if summary.exists() else {})

    @property
    def status(self) -> str:
        return self.manifest.get("status", "?")

    @property
    def duration_s(self) -> float | None:
        started, ended = self.manifest.get("started"), self.manifest.get("ended")
        if not (started and ended):
            return None
        return (_moment(ended) - _moment(started)).total_seconds()

    @property
    def verdict(self) -> str:
        fidelity = self.summary.get("fidelity")
        if not fidelity:
            return "-"
        return "ok" if fidelity.get("ok") else "flagged: " + "; ".join(fidelity.get("flags", []))

    def flows(self) -> pd.DataFrame:
        return pd.DataFrame(read_table(self.path, "flows"))

    def flow_seconds(self) -> pd.DataFrame:
        return pd.DataFrame(read_table(self.path, "flow_seconds"))


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def list_runs(root: Path) -> list[RunRecord]:
    """Every run directory under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [RunRecord.read(p) for p in root.iterdir() if (p / "manifest.json").exists()]
    return sorted(found, key=lambda r: r.manifest.get("started") or "")


def compare(first: RunRecord, second: RunRecord) -> pd.DataFrame:
    """The flows both runs (or either) measured, with loss, delay and goodput side by side."""
    columns = ["packets", "loss_fraction", "delay_mean_ms", "delay_p99_ms", "goodput_bps"]
    frames = []
    for suffix, record in (("a", first), ("b", second)):
        flows = record.flows()
        if flows.empty:
            flows = pd.DataFrame(columns=list(FLOW_KEY) + columns)
        flows = flows[list(FLOW_KEY) + columns].copy()
        for column in columns:
            flows[column] = pd.to_numeric(flows[column], errors="coerce")
        frames.append(flows.set_index(list(FLOW_KEY)).add_suffix(f"_{suffix}"))
    joined = frames[0].join(frames[1], how="outer")
    for column in ("loss_fraction", "delay_mean_ms", "goodput_bps"):
        joined[f"{column}_change"] = joined[f"{column}_b"] - joined[f"{column}_a"]
    return joined.reset_index()


def per_second(record: RunRecord) -> pd.DataFrame:
    """The run's ``flow_seconds`` as numbers, with each second's ``loss_fraction`` and
    ``mbps``."""
    seconds = record.flow_seconds()
    if seconds.empty:
        return seconds
    for column in ("second", "packets", "bytes", "lost", "delay_mean_ms", "time_s"):
        if column in seconds:  # time_s: not in runs made before it was written
            seconds[column] = pd.to_numeric(seconds[column], errors="coerce")
    seconds["loss_fraction"] = seconds["lost"] / (seconds["packets"] + seconds["lost"]).where(
        lambda total: total > 0)
    seconds["mbps"] = seconds["bytes"] * 8 / 1e6
    return seconds


def plot_flows(record: RunRecord, directory: Path) -> list[Path]:
    """PNG plots of every flow's per-second delay, loss and goodput; returns their paths."""
    seconds = per_second(record)
    if seconds.empty:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    made = []
    for column, axis, name in PLOTS:
        figure = Figure(figsize=(7.0, 3.6))
        figure.subplots_adjust(left=0.1, right=0.72, bottom=0.14, top=0.9)
        axes = figure.subplots()
        for (node, agent, flow), rows in seconds.groupby(list(FLOW_KEY)):
            axes.plot(rows["second"], rows[column], marker=".", linewidth=1,
                      label=f"{node} {flow}")
        axes.set_xlabel("seconds since the flow's first packet")
        axes.set_ylabel(axis)
        axes.set_title(f"{record.manifest.get('scenario')}: {name} per flow", fontsize=10)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        path = directory / f"{name}.png"
        save_figure(figure, path, dpi=110)
        made.append(path)
    return made


def _number(value, digits: int = 2, scale: float = 1.0) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return "-" if number != number else f"{number * scale:.{digits}f}"


def write_report(record: RunRecord) -> Path:
    """``<run>/report/report.md`` with the run's tables and plots; returns its path."""
    out = record.path / "report"
    plots = plot_flows(record, out / "plots")
    summary, manifest = record.summary, record.manifest
    parts = [f"# Run {record.path.name}", "",
             f"Scenario `{manifest.get('scenario')}` (seed {manifest.get('seed')}), status "
             f"**{record.status}**" + (f": {summary['error']}" if summary.get("error") else "")
             + f"; started {manifest.get('started')}, {_number(record.duration_s, 1)} s; "
             f"backends {manifest.get('backends')}.", "",
             f"Fidelity verdict: {record.verdict}.", ""]
    flows = record.flows()
    if not flows.empty:
        parts += ["## Flows", "", markdown_table(
            ["node", "agent", "flow", "packets", "loss", "delay ms", "p99 ms", "Mbit/s"],
            [[r["node"], r["agent"], r["flow"], str(r["unique"]),
              _number(r["loss_fraction"], 2, 100) + " %", _number(r["delay_mean_ms"]),
              _number(r["delay_p99_ms"]), _number(r["goodput_bps"], 3, 1e-6)]
             for _, r in flows.iterrows()]), ""]
    if summary.get("reachability"):
        parts += ["## Reachability", "", markdown_table(
            ["from", "to", "received", "avg RTT ms", "first RTT ms (ARP)"],
            [[p["source"], p["target"], f"{p['received']}/{p['sent']}",
              _number(p.get("rtt_avg_ms"), 3), _number(p.get("first_rtt_ms"), 3)]
             for p in summary["reachability"]]), ""]
    if summary.get("processes"):
        parts += ["## Programs", "", markdown_table(
            ["node", "command", "exit", "stopped", "failed"],
            [[p["node"], f"`{p['command']}`", str(p["exit_code"]), p["stopped"],
              "yes" if p.get("failed") else "no"] for p in summary["processes"]]), ""]
    if summary.get("warnings"):
        parts += ["## Warnings", ""] + [f"- {w}" for w in summary["warnings"]] + [""]
    if plots:
        parts += ["## Per-flow time series", ""]
        parts += [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    path = out / "report.md"
    atomic_write(path, "\n".join(parts))
    return path
