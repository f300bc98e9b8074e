"""Starting, stopping and killing the controller process of a run, and its entry point."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from edgebed import clock
from topologies.model import EDGEBED_APP_MODULE
from topologies.naming import ENVIRONMENT_KEY

from . import thread_errors
from .app_logs import APP_ERRORS, AppLogs
from .config import ControllerConfig, ControlEndpoint

CONFIG_ENVIRONMENT = "EDGEBED_CONTROLLER_CONFIG"
READY_TIMEOUT_S = 30.0
# Getting to listen includes the imports (a second here, half a minute under an emulated CPU).
STARTUP_TIMEOUT_S = 300.0
STOP_GRACE_S = 5.0
SWITCH_INTERVAL_S = 0.0005
REMOTE_POLL_S = 0.2  # each look at the switches' connections runs ovs-vsctl twice


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A TCP (or UDP) port nothing on loopback uses now (the controller binds it moments
    later)."""
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scenario_config(scenario, out: Path, loopback_control_port: int,
                    control_endpoint: ControlEndpoint | None) -> ControllerConfig:
    """The controller's configuration for ``scenario`` (a resolved
    :class:`topologies.scenario.Scenario`): its network view, policy and control ports."""
    from .view import NetworkView

    settings = scenario.document.controller
    return ControllerConfig(
        out=out, apps=scenario.controller_apps(), view=NetworkView.from_scenario(scenario).to_json(), policy=settings.policy,
        policy_params=settings.policy_params, fast_failover=settings.fast_failover,
        control_port=settings.control_port, period=settings.period,
        loopback_control_port=loopback_control_port,
        control_endpoint=control_endpoint)


@dataclass
class ControllerProcess:
    """One run's controller: ``directory`` holds its config, log, state and status."""

    directory: Path
    config: ControllerConfig
    prefix: str
    process: subprocess.Popen | None = None
    starts: int = 0
    exits: list[int] = field(default_factory=list)

    @property
    def runs_edgebed(self) -> bool:
        return EDGEBED_APP_MODULE in self.config.apps

    @property
    def openflow_target(self) -> str:
        return f"tcp:127.0.0.1:{self.config.openflow_port}"

    @property
    def control_address(self) -> tuple[str, int]:
        """Where tools in the root namespace reach the control protocol (loopback)."""
        return "127.0.0.1", self.config.loopback_control_port

    def start(self) -> None:
        """Start a controller process. Each start listens at a port of its own: a switch that
        is told a new target connects at once, where a switch that lost its controller backs
        off up to 8 s before trying the old one again."""
        self.config.openflow_port = free_port()
        self.directory.mkdir(parents=True, exist_ok=True)
        config_path = self.directory / "config.json"
        self.config.write(config_path)
        (self.directory / "status.json").unlink(missing_ok=True)
        environment = dict(os.environ, **{ENVIRONMENT_KEY: self.prefix})
        with open(self.directory / "controller.log", "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "controller", "--config", str(config_path)],
                stdout=log, stderr=subprocess.STDOUT, env=environment,
                cwd=Path(__file__).resolve().parent.parent)
        self.starts += 1

    def status(self) -> dict:
        try:
            return json.loads((self.directory / "status.json").read_text())
        except (OSError, ValueError):
            return {}

    def wait_until(self, ready, what: str, timeout_s: float = READY_TIMEOUT_S,
                   missing=lambda: "") -> dict:
        """Poll the status file until ``ready(status)``; raises if the process dies or time
        runs out (saying ``missing()`` then). The status file is edgebed's app's: with only
        users' apps it stays empty and ``ready`` alone decides."""
        deadline = clock.monotonic() + timeout_s
        while True:
            status = self.status()
            if (status or not self.runs_edgebed) and ready(status):
                return status
            if self.process.poll() is not None:
                raise RuntimeError(f"the controller exited ({self.process.returncode}) before "
                                   f"{what}; see {self.directory / 'controller.log'}"
                                   f"{self.last_traceback()}")
            if clock.monotonic() > deadline:
                raise RuntimeError(f"the controller did not get to {what} within "
                                   f"{timeout_s:g}s{missing()}; see "
                                   f"{self.directory / 'controller.log'}")
            clock.sleep(0.05)

    def last_traceback(self) -> str:
        """The last traceback in the controller's log, on lines of its own after a newline
        (an app that failed to import or crashed); empty when there is none."""
        try:
            text = (self.directory / "controller.log").read_text(errors="replace")
        except OSError:
            return ""
        start = text.rfind("Traceback (most recent call last)")
        return "" if start < 0 else "\n" + text[start:].rstrip()

    def crashed(self) -> bool:
        """Whether the process ended by itself (neither stopped nor killed by the run)."""
        return (self.process is not None and self.process.poll() is not None
                and len(self.exits) < self.starts)

    def stopped_by_run(self) -> bool:
        """Whether the process is not running because the run stopped or killed it (a
        scheduled ``controller_down``), not because it ended by itself."""
        return (self.process is not None and self.process.poll() is not None
                and not self.crashed())

    def app_errors(self) -> list[dict]:
        """What the apps' event handlers and threads raised, in order: each an ``app`` and a
        ``text`` with its traceback."""
        try:
            lines = (self.directory / APP_ERRORS).read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines]

    def wait_connected(self, unconnected, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until ``unconnected()`` (the switches not connected to this controller) is
        empty; raises naming them when time runs out, or if the process dies."""
        self.wait_until(lambda status: not unconnected(), "every switch connected",
                        timeout_s, lambda: f"; not connected: {', '.join(unconnected())}")

    def wait_listening(self) -> None:
        port = self.config.openflow_port
        self.wait_until(lambda status: not status.get("stopped") and _listening(port),
                        f"listening for switches on port {port}", STARTUP_TIMEOUT_S)

    def wait_synced(self, switches: int) -> dict:
        return self.wait_until(lambda status: len(status.get("synced", [])) >= switches,
                               f"all {switches} switches holding their rules")

    def kill(self) -> None:
        """Die like a crash: no state saved, no goodbye to the switches."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.exits.append(self.process.wait())

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.exits.append(self.process.wait(timeout=STOP_GRACE_S))
        except subprocess.TimeoutExpired:
            self.kill()


def wait_remote_connected(unconnected, targets: list[str],
                          timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait until ``unconnected()`` (the switches not connected to a controller) is empty;
    raises naming them when time runs out (the remote controllers ``targets`` are not
    edgebed's to start)."""
    deadline = clock.monotonic() + timeout_s
    while missing := unconnected():
        if clock.monotonic() > deadline:
            raise RuntimeError(f"not every switch connected to the remote controller "
                               f"{', '.join(targets)} within {timeout_s:g}s; not connected: "
                               f"{', '.join(missing)}")
        clock.sleep(REMOTE_POLL_S)


def _listening(port: int) -> bool:
    """Whether something listens on TCP ``port`` in this network namespace (from
    /proc/net/tcp: local address, state 0A = LISTEN), without connecting to it."""
    wanted = f":{port:04X}"
    with open("/proc/net/tcp") as table:
        return any(fields[1].endswith(wanted) and fields[3] == "0A"
                   for fields in (line.split() for line in list(table)[1:]))


def _serve(config_path: Path) -> None:
    from .ryu_api import FRAMEWORK, app_manager, cfg, hub

    config = ControllerConfig.read(config_path)
    if FRAMEWORK == "os-ken":
        from . import ryu_namespace

        ryu_namespace.install()
    os.environ[CONFIG_ENVIRONMENT] = str(config_path)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg.CONF(args=[], project=FRAMEWORK.replace("-", "_"))
    cfg.CONF.set_override("ofp_listen_host", config.openflow_host)
    cfg.CONF.set_override("ofp_tcp_listen_port", config.openflow_port)

    def stop(number, _frame):
        # os-ken's native-thread hub cannot kill its threads (its run_apps cleanup raises on
        # them), so the app saves its state and the process exits here.
        for application in app_manager.AppManager.get_instance().applications.values():
            if hasattr(application, "shutdown"):
                application.shutdown()
        logging.getLogger("edgebed.controller").info("stopped by %s",
                                                     signal.Signals(number).name)
        logging.shutdown()
        os._exit(0)

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, stop)
    # os-ken runs a thread per switch connection direction plus the app's event loop; with the
    # default 5 ms GIL switch interval a barrier reply can wait milliseconds for its turn.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    logging.getLogger("edgebed.controller").info("%s, OpenFlow on %s:%d", FRAMEWORK,
                                                 config.openflow_host, config.openflow_port)
    # What AppManager.run_apps does, an app at a time: each user's app logs to its own file,
    # and every app's event handlers and threads are watched (controller.app_logs,
    # controller.thread_errors).
    manager = app_manager.AppManager.get_instance()
    logs = AppLogs(config.out, manager)
    thread_errors.watch(hub, logs.record)
    for app in config.apps:
        logs.load(app)
    services = manager.instantiate_apps(**manager.create_contexts())
    hub.joinall(services)


def standalone_config(scenario_path: Path, out: Path, management_address: str | None,
                      openflow_host: str, openflow_port: int) -> Path:
    """Write the configuration of a controller started on its own, outside ``edgebed run``
    (a containerlab node of an exported scenario): the scenario's view and policy, OpenFlow
    on ``openflow_host:openflow_port``, the control protocol on ``management_address`` in this
    namespace. Returns the file written."""
    from controller import policies
    from topologies import scenario as scenario_module
    from topologies.plugins import Plugins

    # The controller starts no workload, so it reads the scenario without the agents.
    loaded = scenario_module.load(scenario_path, plugins=Plugins(agents=None, policies=policies))
    config = scenario_config(
        loaded, out, free_port(socket.SOCK_DGRAM),
        management_address and ControlEndpoint(address=management_address, netns_pid=None))
    config.openflow_host, config.openflow_port = openflow_host, openflow_port
    out.mkdir(parents=True, exist_ok=True)
    config.write(out / "config.json")
    return out / "config.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller",
                                     description="edgebed's SDN controller")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", type=Path, help="the JSON configuration the runner writes")
    source.add_argument("--scenario", type=Path,
                        help="run on its own for this scenario file (an exported lab): "
                             "switches connect over TCP, agents over the management network")
    parser.add_argument("--out", type=Path, default=Path("controller"),
                        help="with --scenario: where config, log and state go")
    parser.add_argument("--management-address",
                        help="with --scenario: this host's address for the control protocol")
    parser.add_argument("--openflow-host", default="0.0.0.0",
                        help="with --scenario: address to listen for switches on")
    parser.add_argument("--openflow-port", type=int, default=6653)
    arguments = parser.parse_args(argv)
    config = arguments.config or standalone_config(
        arguments.scenario, arguments.out, arguments.management_address,
        arguments.openflow_host, arguments.openflow_port)
    _serve(config)
    return 0
