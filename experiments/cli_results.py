"""The ``edgebed`` commands on results: an experiment file's sweeps and report, and past
runs listed, compared and reported."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from topologies.problems import ScenarioInvalid

from .cli_output import EXIT_INVALID, console, errors, report_invalid


def command_experiment(arguments: argparse.Namespace) -> int:
    """Run an experiment file's cells (resuming from its results.csv), then write its report."""
    from .sweeps import experiment as experiment_module
    from .sweeps.executors import ClusterUnavailable, executor_for
    from .sweeps.runner import ResultsMismatch, run

    try:
        loaded = experiment_module.load(arguments.file)
    except ScenarioInvalid as error:
        return report_invalid(error)
    if arguments.quick:
        loaded = loaded.quick_version()
    out = Path(arguments.out or loaded.report_directory)
    if arguments.report_only:
        return _write_experiment_report(loaded, out)
    try:
        with executor_for(loaded.kind, arguments.cluster, arguments.workers) as executor:
            outcome = run(loaded, out, fresh=arguments.fresh,
                          rerun_unfaithful=arguments.rerun_flagged, console=console,
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
