"""The ``edgebed`` command.

Exit codes: 0 success; 1 a run failed; 2 invalid input (the scenario or the command line);
3 the machine is not ready (not root, Open vSwitch or Mininet missing); 130/143 a run was
interrupted by Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from edgebed.files import atomic_write
from edgebed.units import UnitError, format_duration, format_fraction, parse_duration
from topologies import commands as command_workload
from topologies import scenario as scenario_module
from topologies.impairments.relay import COMPILED, PYTHON, RELAY_LIMITS
from topologies.problems import ScenarioInvalid

from . import scenarios
from .rundir import edgebed_version
from .scenarios import json_schema

IMPAIRMENT_BACKENDS = {
    "netem": "netem (sch_netem) for delay, jitter and loss, HTB for rate",
    "fallback": f"fallback (no sch_netem): HTB for rate, classic-BPF TC_ACT_STOLEN for random "
                f"loss, a user-space relay in a wire namespace for delay, jitter and burst loss "
                f"(delay goals met, as measured by benchmarks/impairment.py, to "
                f"{RELAY_LIMITS[COMPILED]} by the compiled relay and {RELAY_LIMITS[PYTHON]} by "
                f"the Python relay)",
}
EXIT_INVALID = 2
EXIT_NOT_READY = 3

console = Console(highlight=False)
# An error is never wrapped: it names a file or a path, and a path broken over two lines
# can be neither copied nor found by grep (CI failed on "... is not\na run directory").
errors = Console(stderr=True, highlight=False, soft_wrap=True)


def _load(path: str) -> scenario_module.Scenario:
    return scenarios.load(path)


def _report_invalid(error: ScenarioInvalid) -> int:
    for problem in error.problems:
        errors.print(str(problem), markup=False)
    count = len(error.problems)
    errors.print(f"{count} problem{'s' if count != 1 else ''}; nothing was built.", markup=False)
    return EXIT_INVALID


def command_validate(arguments: argparse.Namespace) -> int:
    worst = 0
    for path in arguments.files:
        try:
            loaded = _load(path)
        except ScenarioInvalid as error:
            worst = _report_invalid(error)
            continue
        console.print(f"{path}: valid — {len(loaded.hosts)} hosts, {len(loaded.switches)} "
                      f"switches, {len(loaded.links)} links", markup=False)
    return worst


def _need_root(command: str) -> int:
    if os.geteuid() != 0:
        errors.print(f"edgebed {command} needs root: runs create namespaces, veth links and OVS "
                     "bridges (try: sudo edgebed ...)")
        return EXIT_NOT_READY
    return 0


def command_run(arguments: argparse.Namespace) -> int:
    from .runner import RunOptions, run_scenario

    try:
        loaded = _load(arguments.file)
    except ScenarioInvalid as error:
        return _report_invalid(error)
    if code := _need_root("run"):
        return code
    options = RunOptions(runs_root=Path(arguments.runs_dir), cli=arguments.cli,
                         duration=arguments.duration, datapath=arguments.datapath,
                         concurrent=arguments.concurrent, wait=not arguments.no_wait)
    # No spinner over the Mininet prompt: with --cli the phases are printed as lines.
    progress = (contextlib.nullcontext() if arguments.cli
                else console.status(f"{loaded.name}: starting"))
    with progress as status:
        options.on_phase = ((lambda phase: console.print(f"{loaded.name}: {phase}",
                                                         markup=False))
                            if arguments.cli else
                            (lambda phase: status.update(f"{loaded.name}: {phase}")))
        options.on_warning = lambda warning: console.print(f"[yellow]warning:[/yellow] {warning}",
                                                           markup=True, highlight=False)
        try:
            result = run_scenario(loaded, options)
        except (EnvironmentError, RuntimeError) as error:
            errors.print(f"not ready: {error}", markup=False)
            return EXIT_NOT_READY
    _print_summary(loaded, result)
    return result.exit_code


def _print_summary(loaded: scenario_module.Scenario, result) -> None:
    summary = result.summary
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    roles: dict[str, int] = {}
    for node in loaded.nodes.values():
        roles[node.role.value] = roles.get(node.role.value, 0) + 1
    colour = "green" if result.status == "completed" else "red"
    console.print(f"[bold]{loaded.name}[/bold]: [{colour}]{result.status}[/{colour}]"
                  + (f" — {summary['error']}" if summary.get("error") else ""))
    console.print("  nodes: " + ", ".join(f"{count} {role}" for role, count in sorted(roles.items()))
                  + f"; links: {len(loaded.links)}")
    backends = manifest.get("backends", {})
    console.print(f"  OVS datapath: {backends.get('ovs_datapath')}; controller: "
                  f"{backends.get('controller')}; bring-up {summary.get('bringup_s', '-')} s, "
                  f"teardown {summary.get('teardown_s', '-')} s")
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


def command_clean(arguments: argparse.Namespace) -> int:
    from .registry import clean

    if code := _need_root("clean"):
        return code
    reports = clean()
    if not reports:
        console.print("nothing to clean: no edgebed objects without a live run")
    for report in reports:
        where = f" (run {report.run_dir} marked incomplete)" if report.run_dir else ""
        console.print(f"{report.prefix}: removed {report.removed}{where}", markup=False)
    return 0


def command_doctor(arguments: argparse.Namespace) -> int:
    from topologies.capabilities import probe

    found = probe()
    if arguments.json:
        console.print_json(data=found.as_dict())
        return 0 if not found.problems() else EXIT_NOT_READY
    table = Table(title="edgebed doctor", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("found")
    table.add_row("kernel", found.kernel)
    table.add_row("python", found.python)
    table.add_row("mininet", found.mininet or "[red]not importable[/red]")
    table.add_row("controller framework", found.controller or
                  "[red]neither os-ken nor Ryu: controller app edgebed cannot run[/red]")
    for name, present in found.qdiscs.items():
        table.add_row(f"qdisc {name}", "yes" if present else "[yellow]no[/yellow]")
    table.add_row("openvswitch kernel module", "yes" if found.ovs_kernel_module else "no")
    table.add_row("ovs-vswitchd running", "yes" if found.ovs_running else "[red]no[/red]")
    if found.cpu_emulated:
        table.add_row("CPU", "[yellow]emulated (qemu TCG): timing bounds for emulated CPUs "
                      "apply[/yellow]")
    table.add_row("cgroup v2", " ".join(found.cgroup_v2) if found.cgroup_v2 is not None else "no")
    for tool, version in found.tools.items():
        table.add_row(tool, version or "[red]missing[/red]")
    table.add_row("[bold]will use: OVS datapath[/bold]",
                  f"{found.ovs_datapath}" + ("" if found.ovs_kernel_module else
                                             " (no openvswitch module: userspace datapath, "
                                             "host offloads off)"))
    table.add_row("[bold]will use: impairments[/bold]", IMPAIRMENT_BACKENDS[found.impairment_backend])
    console.print(table)
    for problem in found.problems():
        errors.print(f"[red]not ready:[/red] {problem}")
    return EXIT_NOT_READY if found.problems() else 0


def _print_parameters(title: str, model, leave_out: tuple[str, ...] = (),
                      kind: str = "parameter") -> None:
    """A parameters model (pydantic) as a table: name, default, meaning; without the fields
    in ``leave_out``."""
    table = Table(title=title, title_justify="left")
    for column in (kind, "default", "meaning"):
        table.add_column(column)
    for field_name, info in model.model_fields.items():
        if field_name in leave_out:
            continue
        default = "required" if info.is_required() else repr(info.get_default(
            call_default_factory=True))
        table.add_row(field_name, default, info.description or "")
    console.print(table)


def _first_sentence(text: str | None) -> str:
    text = (text or "").strip()
    return " ".join(text.split(".")[0].split()) if text else ""


def command_agents(arguments: argparse.Namespace) -> int:
    """The agents a workload can start, and each one's parameters (from its Params model)."""
    from agents import catalog

    names = arguments.names or [n for n in catalog.available() if n != command_workload.COMMAND]
    unknown = [n for n in names if n not in catalog.available()]
    if unknown:
        errors.print(f"unknown agent {unknown[0]!r}; agents: {', '.join(catalog.available())}")
        return EXIT_INVALID
    for name in names:
        if name == command_workload.COMMAND:
            _print_command_workload()
            continue
        module = __import__(catalog.module_name(name), fromlist=["_"])
        _print_parameters(f"{name}: {_first_sentence(module.__doc__)}",
                          catalog.params_model(name))
    return 0


def _print_command_workload() -> None:
    """The ``command`` workload: the keys of its workload entry (it has no params) and the
    placeholders its command may hold."""
    from topologies.model import WorkloadEntry

    _print_parameters("command: runs a program given in the scenario on each node",
                      WorkloadEntry, leave_out=("agent", "params"), kind="key")
    table = Table(title="placeholders in command", title_justify="left")
    table.add_column("placeholder")
    table.add_column("replaced with")
    for placeholder, meaning in command_workload.COMMAND_PLACEHOLDERS.items():
        table.add_row("{" + placeholder + "}", meaning)
    console.print(table)


def command_policies(arguments: argparse.Namespace) -> int:
    """The controller's scheduling policies and each one's parameters."""
    from controller import policies

    for name in policies.available():
        _print_parameters(f"{name}: {_first_sentence(policies.policy_class(name).__doc__)}",
                          policies.params_model(name))
    return 0


def command_schema(arguments: argparse.Namespace) -> int:
    text = json.dumps(json_schema(), indent=2) + "\n"
    if arguments.output:
        atomic_write(arguments.output, text)
    else:
        sys.stdout.write(text)
    return 0


def command_export(arguments: argparse.Namespace) -> int:
    """The scenario as another engine's topology file, written whole or not at all."""
    from experiments.export import ExportError, exporter

    try:
        loaded = _load(arguments.file)
    except ScenarioInvalid as error:
        return _report_invalid(error)
    out = Path(arguments.output or f"{loaded.name}.clab.yml")
    try:
        exported = exporter(arguments.to)(loaded, arguments.file, out.parent)
    except ExportError as error:
        errors.print(f"{error}; nothing was written.", markup=False)
        return EXIT_INVALID
    atomic_write(out, exported.text())
    console.print(f"{out}: {arguments.to} topology of {loaded.name}: "
                  f"{len(exported.topology['topology']['nodes'])} nodes, "
                  f"{len(exported.topology['topology'].get('links', []))} links", markup=False,
                  soft_wrap=True)
    if exported.host_setup:
        console.print("before deploying, run on the host (also in the file's header):",
                      markup=False)
        for command in exported.host_setup:
            console.print(f"  {command}", markup=False, soft_wrap=True)
    for item in exported.unmapped:
        console.print(f"[yellow]not exported:[/yellow] {item}", highlight=False, soft_wrap=True)
    return 0


def command_pcap_summarize(arguments: argparse.Namespace) -> int:
    from agents.pcap import print_summaries

    return print_summaries(arguments.files, arguments.json, console, errors)


def command_experiment(arguments: argparse.Namespace) -> int:
    """Run an experiment file's cells (resuming from its results.csv), then write its report."""
    from .sweeps import experiment as experiment_module
    from .sweeps.executors import ClusterUnavailable, executor_for
    from .sweeps.runner import ResultsMismatch, run

    try:
        loaded = experiment_module.load(arguments.file)
    except ScenarioInvalid as error:
        return _report_invalid(error)
    if arguments.quick:
        loaded = loaded.quick_version()
    out = Path(arguments.out or loaded.report_directory)
    if arguments.report_only:
        return _write_experiment_report(loaded, out)
    try:
        with executor_for(loaded.kind, arguments.cluster, arguments.workers) as executor:
            outcome = run(loaded, out, fresh=arguments.fresh, console=console,
                          executor=executor)
    except (ResultsMismatch, ClusterUnavailable) as error:
        errors.print(str(error), markup=False)
        return EXIT_INVALID
    except KeyboardInterrupt:
        errors.print(f"interrupted; the finished cells are in {out / 'results.csv'}: run the "
                     "same command again to go on from there", markup=False)
        return 130
    # soft_wrap: paths stay whole, to be copied
    console.print(f"{loaded.name}: {outcome.ran} cells run, {outcome.reused} already in "
                  f"{out / 'results.csv'}", markup=False, soft_wrap=True)
    return _write_experiment_report(loaded, out)


def _write_experiment_report(loaded, out: Path) -> int:
    """Write ``out``'s summary, plots and report from its results.csv and print the headlines."""
    from . import report

    if not (out / "results.csv").exists():
        errors.print(f"no results in {out / 'results.csv'}: run the experiment first",
                     markup=False, soft_wrap=True)
        return EXIT_INVALID
    written = report.write(loaded, out)
    if written.left_out:
        console.print(f"{written.left_out} rows of results.csv belong to cells not in this "
                      "experiment (other parameters, or a fuller run): left out", markup=False,
                      soft_wrap=True)
    if written.headlines:
        table = Table(title="the paper's results beside ours", title_justify="left")
        for column in ("result", "sweep", "ours", "paper", "agreement"):
            table.add_column(column)
        for headline in written.headlines:
            table.add_row(headline.label, headline.sweep, headline.ours, headline.paper,
                          headline.agreement)
        console.print(table)
    console.print(f"report: {written.path}; summary.csv and plots/ beside it", markup=False,
                  soft_wrap=True)
    return 0


def _runs_root(arguments: argparse.Namespace) -> Path:
    return Path(arguments.runs_dir)


def _run_record(text: str, root: Path):
    """A run named by its directory, or by its name under the runs directory."""
    from .runs import RunRecord

    path = Path(text)
    if not (path / "manifest.json").exists() and (root / text / "manifest.json").exists():
        path = root / text
    return RunRecord.read(path)


def command_runs(arguments: argparse.Namespace) -> int:
    """Past runs under the runs directory, oldest first."""
    from .runs import list_runs

    records = list_runs(_runs_root(arguments))
    if not records:
        console.print(f"no runs under {_runs_root(arguments)}", markup=False)
        return 0
    table = Table(title=f"runs in {_runs_root(arguments)}", title_justify="left")
    for column in ("run", "scenario", "status", "duration s", "verdict"):
        table.add_column(column, no_wrap=True)
    for record in records:
        colour = {"completed": "green", "running": "yellow"}.get(record.status, "red")
        table.add_row(record.path.name, str(record.manifest.get("scenario")),
                      f"[{colour}]{record.status}[/{colour}]",
                      f"{record.duration_s:.1f}" if record.duration_s is not None else "-",
                      record.verdict.split(":")[0])
    console.print(table)
    console.print("(edgebed report RUN for a run's flags, tables and plots)", markup=False)
    return 0


def command_compare(arguments: argparse.Namespace) -> int:
    """Two runs' statuses, verdicts and flows side by side."""
    from .runs import compare

    try:
        first, second = (_run_record(r, _runs_root(arguments)) for r in arguments.runs)
    except FileNotFoundError as error:
        errors.print(str(error), markup=False)
        return EXIT_INVALID
    heading = Table(title="runs compared", title_justify="left")
    for column in ("", "A", "B"):
        heading.add_column(column, overflow="fold")
    heading.add_row("run", first.path.name, second.path.name)
    heading.add_row("scenario", str(first.manifest.get("scenario")),
                    str(second.manifest.get("scenario")))
    heading.add_row("status", first.status, second.status)
    heading.add_row("verdict", first.verdict, second.verdict)
    console.print(heading)
    joined = compare(first, second)
    if joined.empty:
        console.print("neither run measured a flow", markup=False)
        return 0
    table = Table(title="flows (A → B; delay: mean one-way ms)", title_justify="left")
    table.add_column("node", no_wrap=True)
    table.add_column("flow", overflow="fold", min_width=12)
    for column in ("loss A", "loss B", "delay A", "delay B", "Mb/s A", "Mb/s B"):
        table.add_column(column, no_wrap=True, min_width=len(column))

    def cell(value, scale=1.0, digits=2, suffix=""):
        return "-" if value != value else f"{value * scale:.{digits}f}{suffix}"

    for _, row in joined.iterrows():
        table.add_row(row["node"], row["flow"],
                      cell(row["loss_fraction_a"], 100, 2, "%"),
                      cell(row["loss_fraction_b"], 100, 2, "%"),
                      cell(row["delay_mean_ms_a"]), cell(row["delay_mean_ms_b"]),
                      cell(row["goodput_bps_a"], 1e-6, 3), cell(row["goodput_bps_b"], 1e-6, 3))
    console.print(table)
    return 0


def command_report(arguments: argparse.Namespace) -> int:
    """A markdown report of one run, with PNG plots of its flows over time."""
    from .runs import write_report

    try:
        record = _run_record(arguments.run, _runs_root(arguments))
    except FileNotFoundError as error:
        errors.print(str(error), markup=False)
        return EXIT_INVALID
    path = write_report(record)
    console.print(f"report: {path}; plots in {path.parent / 'plots'}", markup=False,
                  soft_wrap=True)
    return 0


def _duration(text: str) -> float:
    try:
        value = parse_duration(text)
    except UnitError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {format_duration(value)}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="edgebed", description="Network emulation testbed for "
                                  "live streaming and edge computing scheduling policies.")
    top.add_argument("--version", action="version", version=f"edgebed {edgebed_version()}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser("validate", help="check scenario files; exit 2 if invalid")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(handler=command_validate)

    run = commands.add_parser("run", help="build the scenario's network, run it, tear it down")
    run.add_argument("file", metavar="FILE")
    run.add_argument("--cli", action="store_true", help="open the Mininet CLI in the running "
                                                        "network instead of waiting for duration")
    run.add_argument("--duration", type=_duration, help="override the scenario's duration, e.g. 30s")
    run.add_argument("--runs-dir", default=os.environ.get("EDGEBED_RUNS", "runs"),
                     help="where run directories go (default: ./runs, or $EDGEBED_RUNS)")
    run.add_argument("--datapath", choices=("kernel", "user"),
                     help="override the detected OVS datapath")
    run.add_argument("--concurrent", action="store_true",
                     help="run side by side with other --concurrent runs on purpose (they "
                          "share ovs-vswitchd and the CPUs; the summary warns)")
    run.add_argument("--no-wait", action="store_true",
                     help="if another run holds the machine, exit 3 instead of waiting")
    run.set_defaults(handler=command_run)

    runs_dir = argparse.ArgumentParser(add_help=False)
    runs_dir.add_argument("--runs-dir", default=os.environ.get("EDGEBED_RUNS", "runs"),
                          help="where run directories are (default: ./runs, or $EDGEBED_RUNS)")
    listing = commands.add_parser("runs", parents=[runs_dir], help="past runs with status, "
                                  "scenario, duration and fidelity verdict")
    listing.set_defaults(handler=command_runs)
    compare = commands.add_parser("compare", parents=[runs_dir],
                                  help="two runs' flows and verdicts side by side")
    compare.add_argument("runs", nargs=2, metavar="RUN", help="run directory or its name")
    compare.set_defaults(handler=command_compare)
    report = commands.add_parser("report", parents=[runs_dir], help="markdown report of one run "
                                 "with plots of per-flow delay, loss and throughput over time")
    report.add_argument("run", metavar="RUN", help="run directory or its name")
    report.set_defaults(handler=command_report)

    clean = commands.add_parser("clean", help="remove what crashed runs left behind (by prefix)")
    clean.set_defaults(handler=command_clean)

    doctor = commands.add_parser("doctor", help="kernel and tool capabilities, and what "
                                                "edgebed will use")
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(handler=command_doctor)

    agents = commands.add_parser("agents", help="the traffic agents and their parameters")
    agents.add_argument("names", nargs="*", metavar="AGENT")
    agents.set_defaults(handler=command_agents)
    policies = commands.add_parser("policies", help="the controller's scheduling policies and "
                                                    "their parameters")
    policies.set_defaults(handler=command_policies)

    schema = commands.add_parser("schema", help="print the scenario JSON Schema")
    schema.add_argument("--output", "-o", help="write to this file instead of stdout")
    schema.set_defaults(handler=command_schema)

    experiment = commands.add_parser(
        "experiment", help="run an experiment file's sweeps (resumable) and write its report; "
                           "exit 2 if the file is invalid")
    experiment.add_argument("file", metavar="FILE")
    experiment.add_argument("--out", metavar="DIR",
                            help="where results.csv, summary.csv, plots/ and report.md go "
                                 "(default: reports/<slug>/<name> for a scheme's "
                                 "experiments/<slug>/<name>.yaml, else reports/<name>)")
    experiment.add_argument("--fresh", action="store_true",
                            help="discard the results of earlier runs instead of resuming")
    experiment.add_argument("--report-only", action="store_true",
                            help="run no cells: rebuild summary.csv, plots/ and report.md from "
                                 "the results.csv already there")
    experiment.add_argument("--quick", action="store_true",
                            help="smoke run: a couple of repetitions, each sweep's first and "
                                 "last value")
    where = experiment.add_mutually_exclusive_group()
    where.add_argument("--workers", type=_positive, metavar="N",
                       help="worker processes for model-level cells on this machine (default: "
                            "one per core; 1 runs them in this process); emulated cells run "
                            "one at a time here")
    where.add_argument("--cluster", metavar="ADDRESS",
                       help="run the cells on the Dask scheduler at ADDRESS "
                            "(tcp://host:8786; docs/experiments.md)")
    experiment.set_defaults(handler=command_experiment)

    from experiments.export import targets

    export = commands.add_parser(
        "export", help="write the scenario as a topology of another engine (containerlab); "
                       "exit 2 if the file is invalid or does not map")
    export.add_argument("file", metavar="FILE")
    export.add_argument("--to", required=True, choices=targets(), help="the target engine")
    export.add_argument("--output", "-o", metavar="OUT",
                        help="the file to write (default: <scenario name>.clab.yml)")
    export.set_defaults(handler=command_export)

    pcap = commands.add_parser("pcap", help="look into packet captures of edgebed traffic")
    pcap_commands = pcap.add_subparsers(dest="pcap_command", required=True, metavar="COMMAND")
    summarize = pcap_commands.add_parser(
        "summarize", help="per-flow packets, bytes, sequence gaps and fragment coverage of the "
                          "edgebed messages in pcap/pcapng files; exit 2 if a file is unreadable")
    summarize.add_argument("files", nargs="+", metavar="FILE")
    summarize.add_argument("--json", action="store_true", help="JSON by file instead of tables")
    summarize.set_defaults(handler=command_pcap_summarize)
    return top


def main(argv: list[str] | None = None) -> int:
    arguments = parser().parse_args(argv)
    try:
        return arguments.handler(arguments)
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
