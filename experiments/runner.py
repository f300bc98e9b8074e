"""One run of a scenario: build the network, start what the scenario asks for, run for its
duration (or hand over to the Mininet CLI), tear everything down, and leave a complete record."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from agents.control import SIDE_BAND_VARIABLE
from agents.processes import NodeProcesses, describe_exit, failures, tcpdump_command
from agents.reachability import ping_pairs, role_pairs
from topologies import capabilities as caps
from topologies import cleanup
from topologies.impairments.control import LinkControl, choose_backend, wired_links
from topologies.naming import RunNames, processes_carry
from topologies.scenario import Scenario

from agents import catalog
from topologies import commands

from . import delivery, measurements, registry
from .controller_watch import ControllerWatch
from .flow_dumps import FlowDumps
from .machine_lock import machine_lock
from .rundir import RunDirectory, edgebed_version, iso, utc_now

LOAD_CHECK_PERIOD_S = 1.0
AGENT_STOP_GRACE_S = 5.0  # agents write their tables and summaries when told to stop
# How long the runner waits for the controller to acknowledge an announced delay change (three
# tries, the wait doubling): the timeline must not stall on a controller that died.
ANNOUNCE_TIMEOUT_S = 0.2
EXIT_CODES = {"completed": 0, "failed": 1, "interrupted": 130, "terminated": 143}


class RunTerminated(BaseException):
    """SIGTERM or SIGHUP arrived; unwinds the run like Ctrl-C does."""

    def __init__(self, signal_number: int):
        super().__init__(signal.Signals(signal_number).name)


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


@dataclass
class RunResult:
    status: str
    run_dir: Path
    summary: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.status, 1)


@contextlib.contextmanager
def _signals_handled(handler, signals) -> Iterator[None]:
    """Handle ``signals`` with ``handler`` inside the block, as before after it."""
    previous = {number: signal.signal(number, handler) for number in signals}
    try:
        yield
    finally:
        for number, action in previous.items():
            signal.signal(number, action)


def _raise_terminated(number, _frame):
    raise RunTerminated(number)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind the run like Ctrl-C, and Ctrl-C (SIGINT) raises
    KeyboardInterrupt even where the runner was started with SIGINT ignored: Python installs
    its own handler only when SIGINT is not ignored at start-up, and a shell's background job
    (``cmd &`` in a script, nohup) starts ignoring it, so ``kill -INT`` did nothing there."""
    with _signals_handled(signal.default_int_handler, (signal.SIGINT,)), \
            _signals_handled(_raise_terminated, (signal.SIGTERM, signal.SIGHUP)):
        yield


def _signals_ignored():
    """Teardown runs to its end, whatever arrives."""
    return _signals_handled(signal.SIG_IGN, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))


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


class Run:
    """The lifecycle of one run; :func:`run_scenario` is the way to use it."""

    def __init__(self, scenario: Scenario, options: RunOptions):
        self.scenario = scenario
        self.options = options
        self.names = RunNames.fresh(registry.live_prefixes())
        self.started = utc_now()
        self.run_dir: RunDirectory | None = None
        self.processes = NodeProcesses(self.names.prefix)
        self.network = None
        self.links: LinkControl | None = None
        self.controller = None  # controller.launcher.ControllerProcess, when the scenario has one
        # Why the controller failed: it ended by itself, or an app's handler or thread raised.
        self.controller_failure: str | None = None
        self.flow_dumps: FlowDumps | None = None  # when a controller runs the switches
        self.controller_watch: ControllerWatch | None = None  # likewise, from the timeline's start
        self.cpu = measurements.CpuMonitor()
        self._agent_count = 0
        self._origin = time.monotonic()  # of the timeline, once it starts
        self.warnings: list[str] = []
        self.summary: dict = {"scenario": scenario.name, "prefix": self.names.prefix}

    def execute(self) -> RunResult:
        found = caps.probe()
        blocking = found.problems()
        if blocking:
            raise EnvironmentError("; ".join(blocking))
        emulation = self.scenario.document.emulation
        datapath = _choose_datapath(self.options.datapath or emulation.ovs_datapath, found)
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
                with _signals_raise():
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
                with _signals_ignored():
                    self._teardown(log)
            if self.controller_failure is not None and status == "completed":
                status, error = "failed", self.controller_failure
            failed = failures(self.summary.get("processes", []))
            if failed:
                log.error("failed workload processes: %s", "; ".join(failed))
                self.summary["failed_processes"] = [o for o in self.summary["processes"]
                                                    if o["failed"]]
                if status == "completed":
                    status = "failed"
                    error = (f"{len(failed)} workload process{'es' if len(failed) > 1 else ''} "
                             f"failed: {'; '.join(failed)}")
            if self._policy_controller is not None and not self.options.cli:
                self._scheme_summary(log)
        self.summary.update(status=status, error=error, warnings=self.warnings)
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
            "backends": {"ovs_datapath": datapath, "controller": self.scenario.document.controller.app,
                         "impairments": backend.name},
            "capabilities": found.as_dict(),
        }

    def _run(self, datapath: str, backend, log: logging.Logger) -> None:
        from topologies.network import ScenarioNetwork

        self.options.on_phase("building")
        wired = wired_links(self.scenario, backend)
        log.info("building %d hosts, %d switches, %d links, %d wires (prefix %s, datapath %s, "
                 "impairments %s)", len(self.scenario.hosts), len(self.scenario.switches),
                 len(self.scenario.links), len(wired), self.names.prefix, datapath, backend.name)
        self.network = ScenarioNetwork(self.scenario, self.names, datapath, wired)
        with processes_carry(self.names.prefix):
            self.network.start()
        if datapath == "user":
            self._report_switch_sockets()
        self.links = LinkControl(self.scenario, self.network, backend, self.run_dir.path / "logs")
        self.links.start()
        controller = self.scenario.document.controller
        if controller.apps:
            self.options.on_phase("starting the controller")
            self._start_controller()
        elif controller.remotes:
            self.options.on_phase("waiting for the remote controller")
            self._connect_remote_controller()
        if controller.controls_switches:
            self.flow_dumps = FlowDumps(self.run_dir.path, {
                node.name: self.network.bridge_of(node) for node in self.scenario.switches})
        timings = self.network.timings
        self.summary["bringup_s"] = round(timings.build_s + timings.start_s, 3)
        self.run_dir.update_manifest(phase="network up", network_up=iso(utc_now()),
                                     links=self.links.applied())
        self._write_host_logs()
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

    def _start_controller(self) -> None:
        """The controller process, listening before the switches are pointed at it; returns
        once every switch holds its rules."""
        from controller.launcher import ControllerProcess, free_port, scenario_config

        settings = self.scenario.document.controller
        endpoint = self._control_endpoint()
        directory = self.run_dir.path / "controller"
        self.controller = ControllerProcess(directory, scenario_config(
            self.scenario, directory, free_port(socket.SOCK_DGRAM), endpoint),
            self.names.prefix)
        self._controller_up()
        self.run_dir.update_manifest(controller={
            "openflow": self.controller.openflow_target,
            "control": endpoint and f"{endpoint.address}:{settings.control_port}",
            "control_network": settings.control_network,
            "control_loopback": "{}:{}".format(*self.controller.control_address)})

    def _controller_up(self) -> None:
        """Start a controller, point the switches at it, wait until they hold edgebed's rules
        (or, with only users' apps, until every switch is connected)."""
        self.controller.start()
        self.controller.wait_listening()
        self.network.use_controller([self.controller.openflow_target])
        if self.controller.runs_edgebed:
            self.controller.wait_synced(len(self.scenario.switches))
        else:
            self.controller.wait_connected(self.network.unconnected_switches)

    def _connect_remote_controller(self) -> None:
        """Point the switches at the scenario's remote controllers, which edgebed does not
        start, and wait until every switch is connected to one."""
        from controller.launcher import wait_remote_connected

        targets = self.scenario.document.controller.remotes
        self.run_dir.update_manifest(controller={"remote": targets})
        self.network.use_controller(targets)
        wait_remote_connected(self.network.unconnected_switches, targets)

    @property
    def _policy_controller(self):
        """The controller when edgebed's app runs in it (policies, the control protocol);
        None otherwise."""
        if self.controller is None or not self.controller.runs_edgebed:
            return None
        return self.controller

    def _control_endpoint(self):
        """Where hosts reach the control protocol (a :class:`controller.config.ControlEndpoint`):
        the controller's address on the management network (out-of-band), or the control
        host's data-plane address in its namespace (in-band: control messages cross the
        switches and impaired links); None when hosts cannot reach it."""
        from controller.config import ControlEndpoint

        settings = self.scenario.document.controller
        if self.network is None or not settings.runs_edgebed:
            return None
        if settings.control_network == "in-band":
            host = self.scenario.nodes[settings.control_host]
            return ControlEndpoint(address=str(host.ip.ip),
                                   netns_pid=self.network.net[host.name].pid)
        management = self.network.management
        return management and ControlEndpoint(address=management.controller_address,
                                              netns_pid=management.controller_pid)

    def _controller_environment(self) -> dict[str, str]:
        """Where agents find the control protocol."""
        endpoint = self._control_endpoint()
        if endpoint is None:
            return {}
        port = self.scenario.document.controller.control_port
        environment = {"EDGEBED_CONTROLLER": f"{endpoint.address}:{port}"}
        management = self.network.management
        if management is not None and \
                self.scenario.document.controller.control_network == "out-of-band":
            # Agents that talk to each other on the side band (ai_access's cluster manager)
            # find their peers' management addresses here.
            environment[SIDE_BAND_VARIABLE] = ",".join(
                f"{host}={address}" for host, address in sorted(management.addresses.items()))
        return environment

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

    def _start_workload(self, entry) -> None:
        for name in entry.nodes:
            node = self.scenario.nodes[name]
            self.processes.start(self.network.net[name], name, self._agent_argv(entry, name),
                                 self.run_dir.node_log(name),
                                 self._controller_environment() | node.env
                                 | {commands.RUN_DIR_VARIABLE: str(self.run_dir.path.resolve())},
                                 may_fail=entry.may_fail)

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
        actions = [(entry.start, f"start {entry.agent} on {len(entry.nodes)} nodes",
                    lambda entry=entry: self._start_workload(entry))
                   for entry in self.scenario.workload]
        actions += [(event.at, self._describe(event), lambda event=event: self._perform(event))
                    for event in self.scenario.schedule]
        actions.sort(key=lambda item: item[0])
        skipped = [description for at, description, _ in actions if at > duration]
        if skipped:
            self.warnings.append(f"the run ends at {duration:g}s, before: {'; '.join(skipped)}")
        self._align_with_periods(log)
        self.options.on_phase(f"running for {duration:g}s")
        self.run_dir.update_manifest(timeline_started=iso(utc_now()))
        origin = self._origin = time.monotonic()
        # The timeline's t = 0 on CLOCK_REALTIME, the clock the agents' tables keep.
        self.summary["timeline_origin_s"] = round(time.time(), 6)
        if self.flow_dumps is not None:
            self.controller_watch = ControllerWatch(
                self.run_dir.path, self.network.controller_connections, self.controller)
        self.cpu.start()
        for at, description, action in actions:
            if at > duration:
                break
            self._wait_until(origin + at, log)
            log.info("t=%.3fs %s", time.monotonic() - origin, description)
            action()
        self._wait_until(origin + duration, log)

    def _align_with_periods(self, log: logging.Logger) -> None:
        """With a controller deciding in periods and a schedule, start the timeline on a period
        boundary, so that every period ends at a multiple of the period on the timeline and a
        scheduled event falls at a known phase of them (an impairment at 13 s with 4 s periods
        is 3 s old when the policy next decides), run after run."""
        period = self.scenario.document.controller.period
        if self._policy_controller is None or not period or not self.scenario.schedule:
            return
        origin = self.controller.status().get("period_origin")
        if origin is None:
            return
        wait = (origin - time.time()) % period
        log.info("waiting %.3fs for the controller's next period to start the timeline", wait)
        time.sleep(wait)

    def _wait_until(self, deadline: float, log: logging.Logger) -> None:
        """Sleep until ``deadline`` (monotonic), looking at the wires' load and the programs'
        exits every second."""
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(remaining, LOAD_CHECK_PERIOD_S))
            for warning in (self.links.load_warnings() + self._exit_warnings()
                            + self._dump_flows(final=False) + self._controller_losses()):
                log.warning(warning)
                self.warnings.append(warning)
                self.options.on_warning(warning)

    def _exit_warnings(self) -> list[str]:
        """Programs that ended before the run did, said as it happens."""
        return [f"{' '.join(item.argv)} on {item.node} "
                f"{describe_exit(item.process.returncode)} at t="
                f"{time.monotonic() - self._origin:.1f}s"
                + (" (may_fail)" if item.may_fail else "")
                for item in self.processes.newly_exited() if item.process.returncode != 0]

    def _dump_flows(self, final: bool) -> list[str]:
        """The switches' flows recorded when due (``final``: now, the last time); what could
        not be recorded, as warnings."""
        if self.flow_dumps is None or not (final or self.flow_dumps.due()):
            return []
        return self.flow_dumps.record(time.monotonic() - self._origin, final)

    def _controller_losses(self) -> list[str]:
        """Switches that lost their controller unscheduled, said as it happens."""
        if self.controller_watch is None:
            return []
        return self.controller_watch.poll(time.monotonic() - self._origin)

    def _describe(self, event) -> str:
        if event.action.startswith("controller_"):
            return event.action
        if event.node is not None:
            return f"{event.action} {event.node}"
        link = self.scenario.links[event.link]
        text = f"{event.action} {link.a} - {link.b}"
        if event.changes is not None:
            text += (f" {'/'.join(event.directions)}: "
                     f"{event.changes.model_dump(mode='json', exclude_unset=True)}")
        return text

    def _perform(self, event) -> None:
        if event.action == "controller_down":
            self.controller.kill()
        elif event.action == "controller_up":
            self._controller_up()
            self.run_dir.update_manifest(controller=dict(
                self.run_dir.read_json("manifest.json")["controller"],
                openflow=self.controller.openflow_target))
        elif event.action == "set":
            self.links.set(event.link, event.changes, event.directions)
            self._announce(event)
        elif event.node is not None:
            self.links.set_node_state(event.node, event.action == "node_up")
        else:
            self.links.set_link_state(event.link, event.action == "link_up")

    def _announce(self, event) -> None:
        """Record a scheduled impairment change in the summary's ``network_events`` and, when
        it changes a link's delay, tell the controller as a network event it knows of: its view
        of the network (and so its policy's State.graph and its shortest-delay forwarding)
        holds the scenario's link delays, kept current this way. Loss, jitter and rate are not
        in the view: the controller learns of them only through what agents report."""
        if self._policy_controller is None:
            return
        link = self.scenario.links[event.link]
        record = {"t": round(time.monotonic() - self._origin, 3), "index": event.link,
                  "link": [str(link.a), str(link.b)], "directions": list(event.directions),
                  "set": event.changes.model_dump(mode="json", exclude_unset=True)}
        if event.changes.delay is None:
            record["controller"] = "not told (no delay change)"
        elif self.controller.process is None or self.controller.process.poll() is not None:
            record["controller"] = "not told (not running)"
        else:
            from agents.control import ControlClient, ControlError

            delays = {direction: self.links.current[event.link, direction].delay or 0.0
                      for direction in event.directions}
            try:
                with ControlClient(self.controller.control_address,
                                   timeout=ANNOUNCE_TIMEOUT_S, tries=3) as control:
                    control.link(event.link, delays.get("forward"), delays.get("reverse"))
                record.update(controller="told", delay_s=delays)
            except ControlError as error:
                record["controller"] = f"not told ({error})"
                self.warnings.append(f"the controller did not hear of the delay change on "
                                     f"{link.a} - {link.b}: {error}")
        self.summary.setdefault("network_events", []).append(record)

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
        control = None if self._policy_controller is None else functools.partial(
            ControlClient, self.controller.control_address, timeout=1.0)
        try:
            EdgebedCLI(self.network.net, self.links, control)
        finally:
            lg.removeHandler(terminal)

    def _teardown(self, log: logging.Logger) -> None:
        self.options.on_phase("tearing down")
        self.cpu.stop()
        self.summary["processes"] = self.processes.stop_all(grace_s=AGENT_STOP_GRACE_S)
        if self.flow_dumps is not None and self.network is not None and self.network.net:
            for warning in self._dump_flows(final=True):
                log.warning("%s", warning)
                self.warnings.append(warning)
            self.summary["switch_flows"] = self.flow_dumps.counts
        # Before the controller stops, which every switch would see.
        lost = ([] if self.controller_watch is None
                else self.controller_watch.finish(time.monotonic() - self._origin))
        if self.controller is not None:
            crashed = self.controller.crashed()
            self.controller.stop()
            self.summary["controller"] = {"starts": self.controller.starts,
                                          "exits": self.controller.exits,
                                          "status": self.controller.status()}
            if crashed:
                self.controller_failure = (f"the controller exited "
                                           f"({self.controller.process.returncode}) during the "
                                           f"run{self.controller.last_traceback()}")
            elif errors := self.controller.app_errors():
                self.controller_failure = (f"controller app {errors[0]['app']} "
                                           f"raised ({len(errors)} exception(s) in all, every "
                                           f"one in controller/app_errors.jsonl); the "
                                           f"first:\n{errors[0]['text']}")
        if self.links is not None:
            self.summary["links"] = self.links.applied()
            self.summary["wires"] = self.links.stop()
            self.summary["emulator_loss"] = self.links.losses()
            if self.links.counting_error:
                log.warning("%s", self.links.counting_error)
                self.warnings.append(self.links.counting_error)
        counters = self._drop_counters(log)
        self.summary["tables"] = measurements.merge_tables(self.run_dir.path)
        self.summary["fidelity"] = measurements.fidelity(
            self.run_dir.path, self.cpu, self.summary.get("wires"),
            self.summary.get("emulator_loss"), self.scenario.document.emulation.emulator_loss,
            self._delivery(counters) + self._agents_still_starting() + lost)
        self.warnings += self.summary["fidelity"]["flags"]
        if self.network is not None:
            if self.network.net is not None:
                self._write_switch_logs()
            try:
                self.network.stop()
            except Exception:
                log.error("Mininet stop failed:\n%s", traceback.format_exc())
            self.summary["teardown_s"] = round(self.network.timings.stop_s, 3)
        leftovers = cleanup.remove_run_objects(self.names.prefix)
        if leftovers:
            log.warning("removed leftovers after stop: %s", leftovers.describe())
        self.summary["leftovers_removed"] = leftovers.describe()

    def _drop_counters(self, log: logging.Logger) -> tuple[dict, dict]:
        """Per host and per switch port, what their kernels and Open vSwitch dropped, read
        after the agents stopped; empty (and a warning) when the network is not there to ask."""
        if self.network is None or self.network.net is None:
            return {}, {}
        try:
            return self.network.host_counters(), self.network.switch_port_drops()
        except Exception as problem:
            log.error("reading drop counters failed:\n%s", traceback.format_exc())
            self.warnings.append(f"no drop counters of hosts and switch ports: "
                                 f"{type(problem).__name__}: {problem}")
            return {}, {}

    def _delivery(self, counters: tuple[dict, dict]) -> list[str]:
        """Every flow's sent against received (:mod:`experiments.delivery`) into the summary's
        ``delivery``; returns the flags of the flows that arrived short."""
        hosts, ports = counters
        configured = {(entry["link"], entry["direction"]): entry["configured_loss"]
                      for entry in self.summary.get("emulator_loss") or []}
        addresses = {node.name: [str(address.ip) for address in node.interfaces.values()
                                 if address is not None] for node in self.scenario.hosts}
        found = delivery.balances(measurements.read_table(self.run_dir.path, "sent"),
                                  measurements.read_table(self.run_dir.path, "flows"),
                                  addresses, self.scenario.links, configured)
        self.summary["delivery"] = {
            "flows": len(found), "short": sum(balance.short for balance in found),
            "sent": sum(balance.sent for balance in found),
            "received": sum(balance.received for balance in found),
            "short_flows": [balance.record() for balance in found if balance.short],
            "hosts": {name: figures for name, figures in hosts.items() if any(figures.values())},
            "switch_ports": {port: drops for port, drops in ports.items()
                             if any(drops.values())}}
        flags = delivery.delivery_flags(found, hosts, self.summary.get("emulator_loss") or [],
                                        ports)
        outages = sorted({event.action for event in self.scenario.schedule
                          if event.action in ("link_down", "node_down", "controller_down")})
        if flags and outages:
            # Datagrams sent while the schedule had a link, a node or the controller down
            # were lost on purpose, in amounts no configured loss rate describes: the short
            # flows are reported, as warnings, not held against the machine.
            self.warnings += [f"{flag} (the schedule has {', '.join(outages)})"
                              for flag in flags]
            return []
        return flags

    def _agents_still_starting(self) -> list[str]:
        """A flag for the agents the run's SIGTERM ended by its default action: an agent
        handles SIGTERM from its start-up on (it then writes its tables and exits 0), so one
        killed by it was still importing, on a machine too slow to start it within the run, and
        sent or measured nothing."""
        starting = []
        for outcome in self.summary.get("processes", []):
            words = outcome["command"].split()  # python -m agents.<module> ... (catalog)
            if outcome["stopped"] == "terminated" and outcome["exit_code"] == -signal.SIGTERM \
                    and words[1:2] == ["-m"] and words[2].startswith("agents."):
                starting.append(f"{words[2].removeprefix('agents.')} on {outcome['node']}")
        if not starting:
            return []
        return [f"{len(starting)} agents were still starting when the run stopped them, and "
                f"measured nothing: {', '.join(starting[:5])}"
                + (" ..." if len(starting) > 5 else "")]

    def _write_switch_logs(self) -> None:
        for node in self.scenario.switches:
            bridge = self.network.bridge_of(node)
            switch = self.network.net[bridge]
            state = switch.cmd(f"ovs-vsctl show; ovs-ofctl -O OpenFlow13 dump-ports {bridge}; "
                               f"ovs-ofctl -O OpenFlow13 dump-flows {bridge}")
            with open(self.run_dir.node_log(node.name), "a") as stream:
                stream.write(f"--- {node.name} bridge={bridge} dpid={node.dpid:#018x}\n{state}")


def run_scenario(scenario: Scenario, options: RunOptions | None = None) -> RunResult:
    """Build, run and tear down ``scenario`` while holding the machine
    (:mod:`experiments.machine_lock`); the result points at the run directory."""
    options = options or RunOptions()
    with machine_lock(scenario.name, str(scenario.source), concurrent=options.concurrent,
                      wait=options.wait, on_wait=options.on_warning):
        return Run(scenario, options).execute()
