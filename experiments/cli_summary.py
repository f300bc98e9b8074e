"""The summary ``edgebed run`` prints at the end of a run: status, reachability, flows, the
scheme's tables, emulator-made loss, fidelity and what failed."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from edgebed.units import format_fraction
from topologies.scenario import Scenario

from .cli_output import console
from .run_clock import summary_notes


def print_run_summary(loaded: Scenario, result) -> None:
    summary = result.summary
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    roles: dict[str, int] = {}
    for node in loaded.nodes.values():
        roles[node.role] = roles.get(node.role, 0) + 1
    colour = "green" if result.status == "completed" else "red"
    console.print(f"[bold]{loaded.name}[/bold]: [{colour}]{result.status}[/{colour}]"
                  + (f" — {summary['error']}" if summary.get("error") else ""))
    console.print("  nodes: " + ", ".join(f"{count} {role}" for role, count in sorted(roles.items()))
                  + f"; links: {len(loaded.links)}")
    backends = manifest.get("backends", {})
    console.print(f"  OVS datapath: {backends.get('ovs_datapath')}; controller: "
                  f"{backends.get('controller')}; bring-up {summary.get('bringup_s', '-')} s, "
                  f"teardown {summary.get('teardown_s', '-')} s")
    for note in summary_notes(loaded):
        console.print(f"  [yellow]{note}[/yellow]", highlight=False)
    pings = summary.get("reachability", [])
    if pings:
        table = Table(title="reachability between roles", title_justify="left")
        for column in ("roles", "from", "to", "received", "configured loss", "avg RTT ms",
                       "first ms (ARP)"):
            table.add_column(column)
        for ping in pings:
            mark = "" if ping["ok"] else " [red]✗[/red]"
            configured = ping.get("configured_loss", 0.0)
            table.add_row(f"{ping['source_role']} ↔ {ping['target_role']}", ping["source"],
                          ping["target"], f"{ping['received']}/{ping['sent']}{mark}",
                          format_fraction(round(configured, 6)) if configured else "-",
                          _milliseconds(ping["rtt_avg_ms"]),
                          _milliseconds(ping.get("first_rtt_ms")))
        console.print(table)
    _print_flows(result.run_dir)
    _print_scheme(summary.get("scheme"))
    tables = summary.get("tables") or {}
    if tables:
        console.print("  tables: " + ", ".join(f"{name} ({rows} rows)"
                                               for name, rows in tables.items()))
    _print_emulator_loss(summary.get("emulator_loss"))
    delivery = summary.get("delivery")
    if delivery and delivery["flows"]:
        console.print(f"  delivery: {delivery['received']} of {delivery['sent']} datagrams "
                      f"sent in {delivery['flows']} flows arrived; {delivery['short']} flows "
                      "short of what their paths' configured loss allows")
    fidelity = summary.get("fidelity") or {}
    if fidelity.get("cpu_busy_max") is not None:
        verdict = "[green]ok[/green]" if fidelity["ok"] else "[red]flagged[/red]"
        console.print(f"  fidelity: {verdict}; CPU busy at most "
                      f"{fidelity['cpu_busy_max']:.0%}")
    for warning in summary.get("warnings", []):
        console.print(f"  [yellow]warning:[/yellow] {warning}")
    _print_failed_processes(summary.get("failed_processes", []))
    console.print(f"  left behind after teardown: {summary.get('leftovers_removed', 'nothing')}")
    console.print(f"  run directory: {result.run_dir}")


def _print_scheme(scheme: dict | None) -> None:
    """What the scheme whose policy ran says about the run: its tables and notes."""
    if not scheme:
        return
    console.print(f"[bold]{scheme['title']}[/bold]", highlight=False)
    for table in scheme.get("tables", []):
        shown = Table(title=table["title"], title_justify="left")
        for column in table["columns"]:
            shown.add_column(column, overflow="fold")
        for row in table["rows"]:
            shown.add_row(*row)
        console.print(shown)
    for note in scheme.get("notes", []):
        console.print(f"  {note}", markup=False, highlight=False, soft_wrap=True)


def _print_emulator_loss(losses: list[dict] | None) -> None:
    """Per link and direction, the frames the emulator lost that no setting asked for."""
    if losses is None:
        return
    lossy = [entry for entry in losses if entry["emulator_made"]]
    if not lossy:
        console.print(f"  emulator-made loss: none ({len(losses)} link directions counted)")
        return
    table = Table(title="emulator-made loss (not configured)", title_justify="left")
    for column in ("link", "direction", "offered", "emulator-made", "relay socket",
                   "relay queue", "interface", "qdisc", "switch socket", "configured loss",
                   "limit"):
        table.add_column(column)
    for entry in lossy:
        a, b = entry["endpoints"]
        mark = " [red]✗[/red]" if entry.get("over_limit") else ""
        table.add_row(f"{entry['link']}: {a} - {b}",
                      f"{a} -> {b}" if entry["direction"] == "forward" else f"{b} -> {a}",
                      str(entry["offered"]),
                      f"{entry['emulator_made']} ({entry['emulator_made_fraction']:.2%}){mark}",
                      str(entry["receive_queue"]), str(entry["relay_queue"]),
                      str(entry["interface"]), str(entry["qdisc"]), str(entry["switch"]),
                      f"{entry['configured_loss']:.2%}",
                      f"{entry['limit_fraction']:.2%}" if "limit_fraction" in entry else "-")
    console.print(table)


def _milliseconds(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def _print_failed_processes(failed: list[dict]) -> None:
    from agents.processes import describe_exit

    for outcome in failed:
        console.print(f"  [red]failed:[/red] {outcome['command']} on {outcome['node']} "
                      f"{describe_exit(outcome['exit_code'])}; log tail:", markup=True,
                      highlight=False, soft_wrap=True)
        for line in outcome.get("log_tail", []):
            console.print(f"    {line}", markup=False, highlight=False, soft_wrap=True)


def _print_flows(run_dir: Path, limit: int = 12) -> None:
    """What the receiving agents measured, one line per flow (the first ``limit``)."""
    from .measurements import read_table

    flows = read_table(run_dir, "flows")
    if not flows:
        return
    table = Table(title=f"flows measured ({len(flows)}; all in tables/flows.csv)",
                  title_justify="left")
    for column in ("at", "flow", "pkts", "loss", "delay ms", "p99 ms", "Mbit/s"):
        table.add_column(column, no_wrap=True)

    def number(row, key, scale=1.0, digits=1):
        return f"{float(row[key]) * scale:.{digits}f}" if row.get(key) else "-"

    for row in flows[:limit]:
        table.add_row(row["node"], row["flow"], row["unique"],
                      f"{float(row['loss_fraction']):.1%}" if row["loss_fraction"] else "-",
                      number(row, "delay_mean_ms"), number(row, "delay_p99_ms"),
                      number(row, "goodput_bps", 1e-6, 2))
    console.print(table)
