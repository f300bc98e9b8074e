"""The ``edgebed`` command.

Exit codes: 0 success; 1 a run failed; 2 invalid input (the scenario or the command line);
3 the machine is not ready (not root, Open vSwitch or Mininet missing); 130/143 a run was
interrupted by Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import sys

from edgebed.units import UnitError, format_duration, parse_duration

from .cli_commands import (AUTO, command_agents, command_clean, command_doctor, command_export,
                           command_pcap_summarize, command_policies, command_run, command_schema,
                           command_validate)
from .cli_output import errors
from .cli_results import command_compare, command_experiment, command_report, command_runs
from .rundir import edgebed_version


def _duration(text: str) -> float:
    try:
        value = parse_duration(text)
    except UnitError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {format_duration(value)}")
    return value


def _dilation(text: str) -> float | str:
    if text == AUTO:
        return AUTO
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or {AUTO!r}: {text!r}") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"a time dilation factor is from 1 to 1000, got {text}")
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
    run.add_argument("--dilate", type=_dilation, metavar="N",
                     help="override the scenario's time_dilation: run N times slower than "
                          "real time, the emulated machine N times faster; 'auto': the "
                          "smallest N whose short calibration run is clean")
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
    experiment.add_argument("--rerun-flagged", action="store_true",
                            help="emulated experiments: run again the cells whose run has no "
                                 "clean fidelity verdict (e.g. with a larger time_dilation), "
                                 "their rows replaced")
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
