"""The ``edgebed`` commands on scenarios and the machine: validate, run, clean, doctor, the
agent and policy catalogues, schema, export and pcap."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path

from rich.table import Table

from edgebed.files import atomic_write
from topologies import commands as command_workload
from topologies.impairments.relay import COMPILED, PYTHON, RELAY_LIMITS
from topologies.problems import ScenarioInvalid
from topologies.scenario import Scenario

from . import dilation_choice, scenarios
from .cli_output import (EXIT_INVALID, EXIT_NOT_READY, console, errors, first_sentence,
                         print_parameters, report_invalid)
from .cli_summary import print_run_summary
from .scenarios import json_schema

IMPAIRMENT_BACKENDS = {
    "netem": "netem (sch_netem) for delay, jitter and loss, HTB for rate",
    "fallback": f"fallback (no sch_netem): HTB for rate, classic-BPF TC_ACT_STOLEN for random "
                f"loss, a user-space relay in a wire namespace for delay, jitter and burst loss "
                f"(delay goals met, as measured by benchmarks/impairment.py, to "
                f"{RELAY_LIMITS[COMPILED]} by the compiled relay and {RELAY_LIMITS[PYTHON]} by "
                f"the Python relay)",
}


AUTO = "auto"  # --dilate auto: the factor is calibrated (experiments.dilation_choice)


def _load(path: str, overrides: dict | None = None) -> Scenario:
    return scenarios.load(path, overrides=overrides)


def command_validate(arguments: argparse.Namespace) -> int:
    worst = 0
    for path in arguments.files:
        try:
            loaded = _load(path)
        except ScenarioInvalid as error:
            worst = report_invalid(error)
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

    auto = arguments.dilate == AUTO
    overrides = {} if arguments.dilate in (None, AUTO) else {"time_dilation": arguments.dilate}
    try:
        loaded = _load(arguments.file, overrides)
    except ScenarioInvalid as error:
        return report_invalid(error)
    if code := _need_root("run"):
        return code
    options = RunOptions(runs_root=Path(arguments.runs_dir), cli=arguments.cli,
                         duration=arguments.duration, datapath=arguments.datapath,
                         concurrent=arguments.concurrent, wait=not arguments.no_wait)
    if auto:
        try:
            calibration = _calibrate(loaded, arguments.file, options, run_scenario)
        except RuntimeError as error:
            errors.print(f"not ready: {error}", markup=False)
            return EXIT_NOT_READY
        if calibration.chosen is None:
            errors.print(f"{arguments.file}: no time dilation up to "
                         f"{dilation_choice.FACTORS[-1]} kept a calibration run clean; the "
                         f"runs are in {Path(arguments.runs_dir) / dilation_choice.CALIBRATION_DIR}",
                         markup=False)
            return EXIT_NOT_READY
        loaded = _load(arguments.file, {"time_dilation": calibration.chosen})
        options.calibration = [dataclasses.asdict(trial) for trial in calibration.trials]
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
    print_run_summary(loaded, result)
    return result.exit_code


def _calibrate(loaded: Scenario, path: str, options, run) -> dilation_choice.Calibration:
    """``--dilate auto``: calibration runs of ``path`` (loaded as ``loaded``) at doubling
    factors until one is clean, each said as it ends."""
    seconds = dilation_choice.calibration_duration(loaded, options.duration)
    console.print(f"{loaded.name}: calibrating the time dilation on runs of {seconds:g} s "
                  "(virtual)", markup=False)

    def said(trial: dilation_choice.Trial) -> None:
        verdict = "clean" if trial.clean else "flagged: " + "; ".join(trial.flags[:2])
        console.print(f"  time dilation {trial.time_dilation:g}: {verdict}", markup=False)

    return dilation_choice.calibrate(lambda factor: _load(path, {"time_dilation": factor}),
                                     options, run, on_trial=said)


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
        print_parameters(f"{name}: {first_sentence(module.__doc__)}",
                          catalog.params_model(name))
    return 0


def _print_command_workload() -> None:
    """The ``command`` workload: the keys of its workload entry (it has no params) and the
    placeholders its command may hold."""
    from topologies.model import WorkloadEntry

    print_parameters("command: runs a program given in the scenario on each node",
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
        print_parameters(f"{name}: {first_sentence(policies.policy_class(name).__doc__)}",
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
        return report_invalid(error)
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
