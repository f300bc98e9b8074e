"""One run of a scenario: build the network, start what the scenario asks for, run for its
duration (or hand over to the Mininet CLI), tear everything down, and leave a complete record."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from edgebed import clock, timeline
from agents.launched import AgentLauncher, LauncherError
from agents.processes import NodeProcesses, describe_exit, failures, tcpdump_command
from agents.reachability import ping_pairs, role_pairs
from topologies import capabilities as caps
from topologies import cleanup
from topologies.impairments.control import LinkControl, choose_backend, wired_links
from topologies.naming import RunNames, processes_carry
from topologies.scenario import Scenario

from agents import catalog
from topologies import commands

from . import dilation_choice, measurements, registry, run_accounts
from .controller_watch import ControllerWatch
from .flow_dumps import FlowDumps
from .machine_lock import machine_lock
from .run_clock import manifest_entry, start_run_clock, stop_run_clock
from .run_controller import RunController
from .run_schedule import ScheduledEvents
from .run_signals import RunTerminated, signals_ignored, signals_raise
from .rundir import RunDirectory, edgebed_version, iso, utc_now

LOAD_CHECK_PERIOD_S = 1.0
AGENT_STOP_GRACE_S = 5.0  # agents write their tables and summaries when told to stop
EXIT_CODES = {"completed": 0, "failed": 1, "interrupted": 130, "terminated": 143}


@dataclass
class RunOptions:
    runs_root: Path = Path("runs")
    cli: bool = False
    duration: float | None = None  # overrides the scenario's
    datapath: str | None = None  # overrides detection: "kernel" or "user"
    on_phase: Callable[[str], None] = lambda phase: None
    on_warning: Callable[[str], None] = lambda warning: None  # as it happens, during the run
    concurrent: bool = False  # run beside other concurrent runs (shared machine lock)
    wait: bool = True  # for the machine when another run holds it; False: refuse
    calibration: list[dict] | None = None  # the runs that chose the time dilation (--dilate auto)


@dataclass
class RunResult:
    status: str
    run_dir: Path
    summary: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.status, 1)


@contextlib.contextmanager
def _mininet_log_to(path: Path) -> Iterator[logging.Logger]:
    """Send Mininet's log (and ours) to the run's runner.log instead of the terminal."""
    from mininet.log import lg

    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    saved_handlers, saved_level = lg.handlers[:], lg.level
    lg.handlers = [handler]
    lg.setLevel(logging.INFO)
    logger = logging.getLogger("edgebed.run")
    logger.propagate = False  # the terminal gets the summary, not log records
    # Importing Mininet makes every new logger a MininetLogger, which comes with a console
    # handler of its own: replace the handlers rather than add to them.
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    try:
        yield logger
    finally:
        logger.handlers = []
        lg.handlers, lg.level = saved_handlers, saved_level
        handler.close()


def _choose_datapath(requested: str, found: caps.Capabilities) -> str:
    if requested == "auto":
        return found.ovs_datapath
    if requested == "kernel" and not found.ovs_kernel_module:
        raise RuntimeError("the scenario asks for the kernel OVS datapath, but the openvswitch "
                           "module is not available; use ovs_datapath: auto or user")
    return requested


def _check_userspace_ports(scenario: Scenario, datapath: str, found: caps.Capabilities) -> None:
    if (datapath == "user" and scenario.document.emulation.userspace_ports == "af_xdp"
            and not found.ovs_af_xdp):
        raise RuntimeError(f"{scenario.source}: emulation.userspace_ports: af_xdp, but this "
                           "Open vSwitch has no AF_XDP ports (its iface_types lack afxdp); "
                           "use packet_socket")


class Run:
    """The lifecycle of one run; :func:`run_scenario` is the way to use it."""

    def __init__(self, scenario: Scenario, options: RunOptions):
        self.scenario = scenario
        self.options = options
        self.names = RunNames.fresh(registry.live_prefixes())
        self.started = utc_now()
        self.run_dir: RunDirectory | None = None
        self.processes = NodeProcesses(self.names.prefix)
        self.launcher: AgentLauncher | None = None  # forks the agents, once ready
        self.network = None
        self.links: LinkControl | None = None
        self.controller = RunController(scenario, self.names.prefix)
        self.flow_dumps: FlowDumps | None = None  # when a controller runs the switches
        self.controller_watch: ControllerWatch | None = None  # likewise, from the timeline's start
        self.cpu = measurements.CpuMonitor()
        self._agent_count = 0
        self.origin = clock.monotonic()  # of the timeline, once it starts
        self.timeline_end_ns: int | None = None  # on the run's monotonic clock, likewise
        self.warnings: list[str] = []
        self.summary: dict = {"scenario": scenario.name, "prefix": self.names.prefix}
        if options.calibration is not None:
            self.summary["calibration"] = options.calibration

    def execute(self) -> RunResult:
        found = caps.probe()
        blocking = found.problems()
        if blocking:
            raise EnvironmentError("; ".join(blocking))
        emulation = self.scenario.document.emulation
        datapath = _choose_datapath(self.options.datapath or emulation.ovs_datapath, found)
        _check_userspace_ports(self.scenario, datapath, found)
        backend = choose_backend(emulation.impairments, found.qdiscs.get("netem", False))
        self.run_dir = RunDirectory.create(self.options.runs_root, self.scenario.name, self.started)
        self.summary["run_dir"] = str(self.run_dir.path)
        self.run_dir.write_yaml("scenario.yaml", self.scenario.resolved())
        self.run_dir.write_json("manifest.json", self._manifest(found, datapath, backend))
        others = registry.live_prefixes()
        registry.register(self.names.prefix, self.run_dir.path)
        if others:  # only --concurrent runs get here while others are live
            self.warnings.append(f"ran side by side with {len(others)} other run(s) "
                                 f"({', '.join(sorted(others))}, --concurrent): they share "
                                 "ovs-vswitchd and the CPUs, so timing may be disturbed")
        status, error = "failed", None
        with _mininet_log_to(self.run_dir.path / "runner.log") as log:
            try:
                with signals_raise():
                    self._run(datapath, backend, log)
                status = "completed"
            except KeyboardInterrupt:
                status = "interrupted"
            except RunTerminated as signal_name:
                status, error = "terminated", f"received {signal_name}"
            except Exception as problem:  # recorded in the run; the CLI shows it too
                status, error = "failed", f"{type(problem).__name__}: {problem}"
                log.error("run failed:\n%s", traceback.format_exc())
            finally:
                with signals_ignored():
                    self._teardown(log)
            if self.controller.failure is not None and status == "completed":
                status, error = "failed", self.controller.failure
            if self.launcher is not None and self.launcher.failure and status == "completed":
                status, error = "failed", self.launcher.failure
            failed = failures(self.summary.get("processes", []))
            if failed:
                log.error("failed workload processes: %s", "; ".join(failed))
                self.summary["failed_processes"] = [o for o in self.summary["processes"]
                                                    if o["failed"]]
                if status == "completed":
                    status = "failed"
                    error = (f"{len(failed)} workload process{'es' if len(failed) > 1 else ''} "
                             f"failed: {'; '.join(failed)}")
            # A run stopped before its timeline began measured nothing a scheme could summarize.
            if (self.controller.policy_process is not None and not self.options.cli
                    and "timeline_origin_s" in self.summary):
                self._scheme_summary(log)
        self.summary.update(status=status, error=error, warnings=self.warnings,
                            **manifest_entry(self.scenario))
        self.run_dir.write_json("summary.json", self.summary)
        self.run_dir.update_manifest(status=status, ended=iso(utc_now()), error=error,
                                     exit_code=EXIT_CODES.get(status, 1))
        registry.unregister(self.names.prefix)
        return RunResult(status, self.run_dir.path, self.summary)

    def _scheme_summary(self, log: logging.Logger) -> None:
        """What the scheme whose policy the controller ran says about the run (its decisions,
        what they did to the clients), as ``scheme`` in the summary: found by convention in
        ``experiments/kinds/`` (:class:`~experiments.sweeps.kinds.RunSummary`). A summary that
        cannot be made is a warning, not a silent gap."""
        from controller import policies
        from experiments import kinds

        policy = self.scenario.document.controller.policy
        # controller.policies.<slug>[.<module>]: the scheme the policy belongs to.
        slug = policies.policy_class(policy).__module__.split(".")[2]
        try:
            scheme = kinds.run_summaries().get(slug)
            if scheme is not None:
                self.summary["scheme"] = scheme.summarize(self.run_dir.path, self.summary)
        except Exception as problem:
            log.error("the %s summary failed:\n%s", slug, traceback.format_exc())
            self.warnings.append(f"no {slug} summary of this run: "
                                 f"{type(problem).__name__}: {problem}")

    def _manifest(self, found: caps.Capabilities, datapath: str, backend) -> dict:
        return {
            "edgebed": edgebed_version(),
            "scenario": self.scenario.name,
            "source": str(Path(self.scenario.source).resolve()),
            "prefix": self.names.prefix,
            "seed": self.scenario.seed,
            "duration_s": self.options.duration or self.scenario.duration,
            "status": "running",
            "started": iso(self.started),
            "ended": None,
            "host": platform.node(),
            "runner_pid": os.getpid(),
            "concurrent": self.options.concurrent,
            "backends": {"ovs_datapath": datapath,
                         "userspace_ports": (self.scenario.document.emulation.userspace_ports
                                             if datapath == "user" else None),
                         "controller": self.scenario.document.controller.app,
                         "impairments": backend.name},
            "capabilities": found.as_dict(),
            **manifest_entry(self.scenario),
        }

    def _run(self, datapath: str, backend, log: logging.Logger) -> None:
        from topologies.network import ScenarioNetwork

        self.options.on_phase("building")
        self._start_launcher()
        wired = wired_links(self.scenario, backend)
        log.info("building %d hosts, %d switches, %d links, %d wires (prefix %s, datapath %s, "
                 "impairments %s)", len(self.scenario.hosts), len(self.scenario.switches),
                 len(self.scenario.links), len(wired), self.names.prefix, datapath, backend.name)
        self.network = ScenarioNetwork(self.scenario, self.names, datapath, wired,
                                       self.scenario.document.emulation.userspace_ports)
        with processes_carry(self.names.prefix):
            self.network.start()
        if self.network.af_xdp:
            self._report_af_xdp_ports()
        elif datapath == "user":
            self._report_switch_sockets()
        self.links = LinkControl(self.scenario, self.network, backend, self.run_dir.path / "logs")
        self.links.start()
        controller = self.scenario.document.controller
        if controller.apps:
            self.options.on_phase("starting the controller")
            self.controller.start(self.network, self.run_dir)
        elif controller.remotes:
            self.options.on_phase("waiting for the remote controller")
            self.controller.connect_remote(self.network, self.run_dir)
        if controller.controls_switches:
            self.flow_dumps = FlowDumps(self.run_dir.path, {
                node.name: self.network.bridge_of(node) for node in self.scenario.switches})
        timings = self.network.timings
        self.summary["bringup_s"] = round(timings.build_s + timings.start_s, 3)
        self.run_dir.update_manifest(phase="network up", network_up=iso(utc_now()),
                                     links=self.links.applied())
        self._write_host_logs()
        self._launcher_ready()
        self._start_captures()
        self.options.on_phase("checking reachability")
        results = ping_pairs({h.name: self.network.net[h.name] for h in self.scenario.hosts},
                             self.scenario, role_pairs(self.scenario))
        self.summary["reachability"] = [r.as_dict() for r in results]
        failed = [f"{r.source}->{r.target}" for r in results if not r.ok]
        if failed:
            self.warnings.append(f"no full reachability for {', '.join(failed)}")
        if self.options.cli:
            self._interactive()
        else:
            self._timeline(log)

    def _report_switch_sockets(self) -> None:
        """How many of the userspace switch's per-port sockets got room for bursts
        (:mod:`topologies.switch_sockets`); a port left with the default is a warning, and
        what its socket drops is still counted."""
        from topologies.switch_sockets import RECEIVE_BUFFER

        ports, small = self.network.switch_ports(), self.network.small_switch_sockets
        self.summary["switch_sockets"] = {"ports": len(ports), "enlarged": len(ports) - len(small),
                                          "receive_buffer": RECEIVE_BUFFER}
        if small:
            self.warnings.append(
                f"the userspace switch's receive sockets of {len(small)} port(s) keep the "
                f"kernel's default buffer ({', '.join(small[:5])}): bursts may overflow them "
                "(counted as emulator-made loss, cause switch)")

    def _report_af_xdp_ports(self) -> None:
        """The userspace switch's AF_XDP ports: how many, the locked memory they take and the
        longest its polling thread sleeps (a frame may wait that long in each switch)."""
        from topologies.network import AF_XDP_PORT_MEMORY, PMD_MAX_SLEEP_US

        ports = len(self.network.switch_ports())
        self.summary["af_xdp_ports"] = {"ports": ports,
                                        "locked_memory_mib": ports * AF_XDP_PORT_MEMORY >> 20,
                                        "pmd_max_sleep_us": PMD_MAX_SLEEP_US}

    def _write_host_logs(self) -> None:
        for node in self.scenario.hosts:
            host = self.network.net[node.name]
            state = host.cmd("ip -br addr; ip route")
            with open(self.run_dir.node_log(node.name), "a") as stream:
                stream.write(f"--- {node.name} role={node.role} kind={node.kind} "
                             f"group={node.group} labels={node.labels}\n{state}")

    def _start_captures(self) -> None:
        for capture in self.scenario.captures:
            host = self.network.net[capture.node]
            for interface in capture.interfaces:
                output = self.run_dir.pcap(capture.node, interface)
                output.parent.mkdir(exist_ok=True)
                self.processes.start(host, capture.node, tcpdump_command(
                    interface, output, capture.snaplen, capture.filter, capture.rotate_size,
                    capture.rotate_files), self.run_dir.node_log(capture.node))

    def _start_launcher(self) -> None:
        """The agent launcher, importing the scenario's agent modules while the network is
        built, so that no agent pays for its imports on the timeline."""
        modules = sorted({catalog.module_name(entry.agent) for entry in self.scenario.workload
                          if entry.agent != commands.COMMAND})
        if modules:
            self.launcher = AgentLauncher(modules, self.names.prefix,
                                          self.run_dir.path / "logs" / "agent-launcher.log")

    def _launcher_ready(self) -> None:
        """Wait for the launcher's imports; a launcher that fails leaves the agents to start as
        interpreters of their own, said in a warning."""
        if self.launcher is None:
            return
        self.options.on_phase("importing the agents")
        try:
            self.launcher.wait_ready()
        except LauncherError as error:
            self.launcher.stop()
            self.launcher = None
            self.warnings.append(f"agents start as interpreters of their own, paying their "
                                 f"imports on the timeline: {error}")

    def _start_workload(self, entry, parked: bool = False) -> None:
        """Start ``entry``'s programs now, or with ``parked`` fork its agents into their hosts
        now to run at the entry's start on the timeline (:mod:`agents.launcher`)."""
        launcher = self._launcher_for(entry)
        for name in entry.nodes:
            node = self.scenario.nodes[name]
            self.processes.start(self.network.net[name], name, self._agent_argv(entry, name),
                                 self.run_dir.node_log(name),
                                 self.controller.environment(self.network) | node.env
                                 | {commands.RUN_DIR_VARIABLE: str(self.run_dir.path.resolve())}
                                 | ({} if self.timeline_end_ns is None
                                    else timeline.environment(self.timeline_end_ns)),
                                 may_fail=entry.may_fail, launcher=launcher,
                                 start_after_s=entry.start if parked else None)

    def _launcher_for(self, entry) -> AgentLauncher | None:
        return self.launcher if entry.agent != commands.COMMAND else None

    def _agent_argv(self, entry, name: str) -> list[str]:
        node = self.scenario.nodes[name]
        if entry.agent == commands.COMMAND:
            return commands.command_argv(entry.command, name,
                                        str(node.ip.ip) if node.ip else "",
                                        str(self.run_dir.path.resolve()))
        self._agent_count += 1
        return catalog.agent_argv(sys.executable, entry.agent, name, str(self.run_dir.path),
                                  self.scenario.agent_params(entry),
                                  self.scenario.seed * 1000 + self._agent_count)

    def _timeline(self, log: logging.Logger) -> None:
        """Workload starts and scheduled events at their times, until the duration is over."""
        duration = self.options.duration or self.scenario.duration
        # Agents the launcher forks are parked in their hosts before the timeline and start
        # themselves on it; other programs are started at their time.
        parked = [entry for entry in self.scenario.workload
                  if self._launcher_for(entry) is not None and entry.start < duration]
        if parked:
            self.options.on_phase(f"parking {sum(len(e.nodes) for e in parked)} agents")
            for entry in parked:
                self._start_workload(entry, parked=True)
        parked_ids = {id(entry) for entry in parked}
        actions = [(entry.start, f"start {entry.agent} on {len(entry.nodes)} nodes"
                    + (" (parked, starting itself)" if id(entry) in parked_ids else ""),
                    (lambda: None) if id(entry) in parked_ids
                    else lambda entry=entry: self._start_workload(entry))
                   for entry in self.scenario.workload]
        events = ScheduledEvents(self)
        actions += [(event.at, events.describe(event), lambda event=event: events.perform(event))
                    for event in self.scenario.schedule]
        actions.sort(key=lambda item: item[0])
        skipped = [description for at, description, _ in actions if at > duration]
        if skipped:
            self.warnings.append(f"the run ends at {duration:g}s, before: {'; '.join(skipped)}")
        self.controller.align_with_periods(log)
        self.options.on_phase(f"running for {duration:g}s")
        self.run_dir.update_manifest(timeline_started=iso(utc_now()))
        origin = self.origin = clock.monotonic()
        # The timeline's t = 0 on CLOCK_REALTIME, the clock the agents' tables keep.
        self.summary["timeline_origin_s"] = round(clock.time(), 6)
        self.timeline_end_ns = round((origin + duration) * 1e9)
        if parked:
            self.launcher.unpark(round(origin * 1e9), timeline.environment(self.timeline_end_ns))
        if self.flow_dumps is not None:
            self.controller_watch = ControllerWatch(
                self.run_dir.path, self.network.controller_connections, self.controller.process)
        self.cpu.start()
        for at, description, action in actions:
            if at > duration:
                break
            self._wait_until(origin + at, log)
            log.info("t=%.3fs %s", clock.monotonic() - origin, description)
            action()
        self._wait_until(origin + duration, log)

    def _wait_until(self, deadline: float, log: logging.Logger) -> None:
        """Sleep until ``deadline`` (monotonic), looking at the wires' load and the programs'
        exits every second."""
        while (remaining := deadline - clock.monotonic()) > 0:
            clock.sleep(min(remaining, LOAD_CHECK_PERIOD_S))
            for warning in (self.links.load_warnings() + self._exit_warnings()
                            + self._dump_flows(final=False) + self._controller_losses()):
                log.warning(warning)
                self.warnings.append(warning)
                self.options.on_warning(warning)

    def _exit_warnings(self) -> list[str]:
        """Programs that ended before the run did, said as it happens."""
        return [f"{' '.join(item.argv)} on {item.node} "
                f"{describe_exit(item.process.returncode)} at t="
                f"{clock.monotonic() - self.origin:.1f}s"
                + (" (may_fail)" if item.may_fail else "")
                for item in self.processes.newly_exited() if item.process.returncode != 0]

    def _dump_flows(self, final: bool) -> list[str]:
        """The switches' flows recorded when due (``final``: now, the last time); what could
        not be recorded, as warnings."""
        if self.flow_dumps is None or not (final or self.flow_dumps.due()):
            return []
        return self.flow_dumps.record(clock.monotonic() - self.origin, final)

    def _controller_losses(self) -> list[str]:
        """Switches that lost their controller unscheduled, said as it happens."""
        if self.controller_watch is None:
            return []
        return self.controller_watch.poll(clock.monotonic() - self.origin)

    def _interactive(self) -> None:
        from agents.control import ControlClient

        from .mininet_cli import EdgebedCLI

        for node in self.scenario.switches:
            print(f"switch {node.name} is bridge {self.network.bridge_of(node)}")
        print("edgebed commands: links, impair LINK key=value ..., placements "
              "(help NAME tells more)")
        from mininet.log import StreamHandlerNoNewline, lg

        for entry in self.scenario.workload:
            self._start_workload(entry)
        # The CLI prints what commands answer through Mininet's log: to the terminal, as in
        # plain Mininet, while the log file keeps its copy.
        terminal = StreamHandlerNoNewline(sys.stdout)
        lg.addHandler(terminal)
        control = None if self.controller.policy_process is None else functools.partial(
            ControlClient, self.controller.process.control_address, timeout=1.0)
        try:
            EdgebedCLI(self.network.net, self.links, control)
        finally:
            lg.removeHandler(terminal)

    def _teardown(self, log: logging.Logger) -> None:
        self.options.on_phase("tearing down")
        self.cpu.stop()
        self.summary["processes"] = self.processes.stop_all(grace_s=AGENT_STOP_GRACE_S)
        if self.launcher is not None:
            code = self.launcher.stop()
            if code != 0:
                self.warnings.append(f"the agent launcher ended with exit code {code} "
                                     f"(see {self.launcher.log})")
        if self.flow_dumps is not None and self.network is not None and self.network.net:
            for warning in self._dump_flows(final=True):
                log.warning("%s", warning)
                self.warnings.append(warning)
            self.summary["switch_flows"] = self.flow_dumps.counts
        # Before the controller stops, which every switch would see.
        lost = ([] if self.controller_watch is None
                else self.controller_watch.finish(clock.monotonic() - self.origin))
        stopped = self.controller.stop()
        if stopped is not None:
            self.summary["controller"] = stopped
        if self.links is not None:
            self.summary["links"] = self.links.applied()
            self.summary["wires"] = self.links.stop()
            self.summary["emulator_loss"] = self.links.losses()
            if self.links.counting_error:
                log.warning("%s", self.links.counting_error)
                self.warnings.append(self.links.counting_error)
        counters, warnings = run_accounts.drop_counters(self.network, log)
        self.warnings += warnings
        self.summary["tables"] = measurements.merge_tables(self.run_dir.path)
        self.summary["delivery"], short, warnings = run_accounts.delivery_balance(
            self.run_dir, self.scenario, self.summary.get("emulator_loss"), counters)
        self.warnings += warnings
        self.summary["fidelity"] = measurements.fidelity(
            self.run_dir.path, self.cpu, self.summary.get("wires"),
            self.summary.get("emulator_loss"), self.scenario.document.emulation.emulator_loss,
            short + run_accounts.agents_not_accounted(self.summary.get("processes", [])) + lost)
        self.warnings += self.summary["fidelity"]["flags"]
        least = dilation_choice.least_factor(self.summary["fidelity"], self.scenario.time_dilation)
        if least is not None:
            self.summary["fidelity"]["least_time_dilation"] = least
            self.warnings.append(dilation_choice.least_factor_warning(
                self.summary["fidelity"], self.scenario.time_dilation))
        if self.network is not None:
            if self.network.net is not None:
                run_accounts.write_switch_logs(self.network, self.scenario, self.run_dir)
            try:
                self.network.stop()
            except Exception:
                log.error("Mininet stop failed:\n%s", traceback.format_exc())
            self.summary["teardown_s"] = round(self.network.timings.stop_s, 3)
        leftovers = cleanup.remove_run_objects(self.names.prefix)
        if leftovers:
            log.warning("removed leftovers after stop: %s", leftovers.describe())
        self.summary["leftovers_removed"] = leftovers.describe()


def run_scenario(scenario: Scenario, options: RunOptions | None = None) -> RunResult:
    """Build, run and tear down ``scenario`` while holding the machine
    (:mod:`experiments.machine_lock`); the result points at the run directory."""
    options = options or RunOptions()
    with machine_lock(scenario.name, str(scenario.source), concurrent=options.concurrent,
                      wait=options.wait, on_wait=options.on_warning):
        start_run_clock(scenario)
        try:
            return Run(scenario, options).execute()
        finally:
            stop_run_clock()
