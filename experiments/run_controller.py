"""The run's controller: the one edgebed starts (and restarts when the schedule says), or
remote ones it only points the switches at; where hosts reach its control protocol, and what
it says when the run ends."""

from __future__ import annotations

import logging
import socket

from edgebed import clock
from agents.control import SIDE_BAND_VARIABLE
from topologies.scenario import Scenario

from .rundir import RunDirectory

# How long the runner waits for the controller to acknowledge an announced delay change (three
# tries, the wait doubling): the timeline must not stall on a controller that died.
ANNOUNCE_TIMEOUT_S = 0.2


class RunController:
    """The scenario's controller during one run (``prefix`` names the run's objects)."""

    def __init__(self, scenario: Scenario, prefix: str):
        self.scenario = scenario
        self.prefix = prefix
        self.process = None  # controller.launcher.ControllerProcess, when the scenario has one
        # Why the controller failed: it ended by itself, or an app's event handler raised.
        self.failure: str | None = None

    @property
    def policy_process(self):
        """The controller process when edgebed's app runs in it (policies, the control
        protocol); None otherwise."""
        if self.process is None or not self.process.runs_edgebed:
            return None
        return self.process

    def start(self, network, run_dir: RunDirectory) -> None:
        """The controller process, listening before the switches are pointed at it; returns
        once every switch holds its rules."""
        from controller.launcher import ControllerProcess, free_port, scenario_config

        settings = self.scenario.document.controller
        endpoint = self.endpoint(network)
        directory = run_dir.path / "controller"
        self.process = ControllerProcess(directory, scenario_config(
            self.scenario, directory, free_port(socket.SOCK_DGRAM), endpoint), self.prefix)
        self.up(network)
        run_dir.update_manifest(controller={
            "openflow": self.process.openflow_target,
            "control": endpoint and f"{endpoint.address}:{settings.control_port}",
            "control_network": settings.control_network,
            "control_loopback": "{}:{}".format(*self.process.control_address)})

    def up(self, network) -> None:
        """Start the controller, point the switches at it, wait until they hold edgebed's rules
        (or, with only users' apps, until every switch is connected)."""
        self.process.start()
        self.process.wait_listening()
        network.use_controller([self.process.openflow_target])
        if self.process.runs_edgebed:
            self.process.wait_synced(len(self.scenario.switches))
        else:
            self.process.wait_connected(network.unconnected_switches)

    def connect_remote(self, network, run_dir: RunDirectory) -> None:
        """Point the switches at the scenario's remote controllers, which edgebed does not
        start, and wait until every switch is connected to one."""
        from controller.launcher import wait_remote_connected

        targets = self.scenario.document.controller.remotes
        run_dir.update_manifest(controller={"remote": targets})
        network.use_controller(targets)
        wait_remote_connected(network.unconnected_switches, targets)

    def endpoint(self, network):
        """Where hosts reach the control protocol (a :class:`controller.config.ControlEndpoint`):
        the controller's address on the management network (out-of-band), or the control
        host's data-plane address in its namespace (in-band: control messages cross the
        switches and impaired links); None when hosts cannot reach it."""
        from controller.config import ControlEndpoint

        settings = self.scenario.document.controller
        if network is None or not settings.runs_edgebed:
            return None
        if settings.control_network == "in-band":
            host = self.scenario.nodes[settings.control_host]
            return ControlEndpoint(address=str(host.ip.ip), netns_pid=network.net[host.name].pid)
        management = network.management
        return management and ControlEndpoint(address=management.controller_address,
                                              netns_pid=management.controller_pid)

    def environment(self, network) -> dict[str, str]:
        """Where agents find the control protocol."""
        endpoint = self.endpoint(network)
        if endpoint is None:
            return {}
        port = self.scenario.document.controller.control_port
        environment = {"EDGEBED_CONTROLLER": f"{endpoint.address}:{port}"}
        management = network.management
        if management is not None and \
                self.scenario.document.controller.control_network == "out-of-band":
            # Agents that talk to each other on the side band (ai_access's cluster manager)
            # find their peers' management addresses here.
            environment[SIDE_BAND_VARIABLE] = ",".join(
                f"{host}={address}" for host, address in sorted(management.addresses.items()))
        return environment

    def align_with_periods(self, log: logging.Logger) -> None:
        """With a controller deciding in periods and a schedule, start the timeline on a period
        boundary, so that every period ends at a multiple of the period on the timeline and a
        scheduled event falls at a known phase of them (an impairment at 13 s with 4 s periods
        is 3 s old when the policy next decides), run after run."""
        period = self.scenario.document.controller.period
        if self.policy_process is None or not period or not self.scenario.schedule:
            return
        origin = self.process.status().get("period_origin")
        if origin is None:
            return
        wait = (origin - clock.time()) % period
        log.info("waiting %.3fs for the controller's next period to start the timeline", wait)
        clock.sleep(wait)

    def running(self) -> bool:
        """Whether the controller process is up."""
        return self.process.process is not None and self.process.process.poll() is None

    def announce_delay(self, link: int, delays: dict[str, float]) -> None:
        """Tell the controller that ``link`` now delays as ``delays`` (by direction) says;
        raises :class:`agents.control.ControlError` when it does not acknowledge."""
        from agents.control import ControlClient

        with ControlClient(self.process.control_address, timeout=ANNOUNCE_TIMEOUT_S,
                           tries=3) as control:
            control.link(link, delays.get("forward"), delays.get("reverse"))

    def stop(self) -> dict | None:
        """Stop the controller; returns what the summary records of it (None without one) and
        sets :attr:`failure` when it crashed or an app's handler or thread raised."""
        if self.process is None:
            return None
        crashed = self.process.crashed()
        self.process.stop()
        record = {"starts": self.process.starts, "exits": self.process.exits,
                  "status": self.process.status()}
        if crashed:
            self.failure = (f"the controller exited ({self.process.process.returncode}) during "
                            f"the run{self.process.last_traceback()}")
        elif errors := self.process.app_errors():
            self.failure = (f"controller app {errors[0]['app']} raised "
                            f"({len(errors)} exception(s) in all, every one in "
                            f"controller/app_errors.jsonl); the first:\n{errors[0]['text']}")
        return record
