"""The runner's side of the agent launcher (:mod:`agents.launcher`): starting it, asking it for
agents, and the agents it started, seen like the programs ``host.popen`` starts."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
from pathlib import Path

from topologies.naming import ENVIRONMENT_KEY

LAUNCHER_MODULE = "agents.launcher"  # its forked agents keep this command line

READY_TIMEOUT_S = 300.0  # the imports, on a machine a run may keep busy
STOP_TIMEOUT_S = 10.0
READ_SIZE = 1 << 16


class LauncherError(RuntimeError):
    """The launcher did not start, refused an agent, or is gone."""


class LaunchedAgent:
    """An agent the launcher forked: its pid (also its process group's, as it leads a session
    of its own) and its exit code once the launcher reports it, like a ``subprocess.Popen``."""

    def __init__(self, launcher: "AgentLauncher", pid: int):
        self.launcher = launcher
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.launcher.read_reports(timeout=0)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self.launcher.read_reports(timeout=None)
        return self.returncode


class AgentLauncher:
    """A running :mod:`agents.launcher` process holding ``modules``, carrying the run's
    ``prefix`` in its environment like every process of a run; its errors go to ``log``."""

    def __init__(self, modules: list[str], prefix: str, log: Path):
        # Its BLAS would start threads at import, and the launcher may have but one.
        environment = dict(os.environ, OPENBLAS_NUM_THREADS="1", **{ENVIRONMENT_KEY: prefix})
        self.log = log
        with open(log, "a") as stream:
            self.process = subprocess.Popen(
                [sys.executable, "-m", LAUNCHER_MODULE, *modules], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=stream, env=environment, start_new_session=True)
        self.agents: dict[int, LaunchedAgent] = {}
        self.replies: list[dict] = []
        self.failure: str | None = None  # why the launcher ended while agents still ran
        self.gone = False
        self._pending = b""
        self._stopping = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.process.stdout, selectors.EVENT_READ)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait for the imports; LauncherError if the launcher ends or takes too long."""
        while not self.replies:
            if not self.read_reports(timeout=timeout_s):
                raise LauncherError(f"the agent launcher was not ready in {timeout_s:g} s"
                                    if not self.gone else self._ended())
        if "ready" not in self.replies.pop(0):
            raise LauncherError("the agent launcher began with something else than ready")

    def launch(self, host, argv: list[str], env: dict[str, str], log: Path,
               start_after_s: float | None = None) -> LaunchedAgent:
        """Start ``argv`` (``python -m <agent module> ...``) inside ``host`` (a Mininet host),
        appending its output to ``log``; with ``start_after_s``, parked until that long after
        the timeline's origin (:meth:`unpark`). LauncherError if the launcher refuses or is
        gone."""
        # Imported here: the agents package is imported (by the catalog) where Mininet is not.
        from topologies.cpu_limits import CpuLimitedHost

        cgroup = [str(path) for path in host.limit.procs_files()] \
            if isinstance(host, CpuLimitedHost) else []
        request = {"argv": argv, "host_pid": host.pid, "env": env, "log": str(log),
                   "cwd": os.getcwd(), "cgroup": cgroup}
        if start_after_s is not None:
            request["start_after_s"] = start_after_s
        reply = self._ask(request)
        if "refused" in reply:
            raise LauncherError(reply["refused"])
        return self.agents[reply["started"]]

    def unpark(self, origin_ns: int, env: dict[str, str]) -> int:
        """Start the timeline for the parked agents: ``origin_ns`` on the run's monotonic clock,
        ``env`` added to their environment; how many agents were parked."""
        return self._ask({"origin_ns": origin_ns, "env": env})["unparked"]

    def _ask(self, request: dict) -> dict:
        """Send ``request`` and return the launcher's reply; LauncherError if it is gone."""
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # the launcher is gone; its end is read below
        while not self.replies:
            if not self.read_reports(timeout=None):
                raise LauncherError(self._ended())
        return self.replies.pop(0)

    def read_reports(self, timeout: float | None) -> bool:
        """Take in what the launcher said within ``timeout`` (None: until it says something);
        whether it said anything; False at once once it is gone."""
        if self.gone or not self._selector.select(timeout):
            return False
        chunk = os.read(self.process.stdout.fileno(), READ_SIZE)
        if not chunk:
            self._lost()
            return False
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "started" in message:  # before its exit, which may come in the same read
                self.agents[message["started"]] = LaunchedAgent(self, message["started"])
            if "exited" in message:
                self.agents[message["exited"]].returncode = message["code"]
            else:
                self.replies.append(message)
        return True

    def _lost(self) -> None:
        """The launcher ended: the agents it started have no parent that could tell their exit
        codes any more, so they are killed and recorded so, and the run is told why."""
        self.gone = True
        running = [agent for agent in self.agents.values() if agent.returncode is None]
        if running and not self._stopping:
            self.failure = f"{self._ended()} with {len(running)} agents running; they were killed"
        for agent in running:
            try:
                os.killpg(agent.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            agent.returncode = -signal.SIGKILL

    def _ended(self) -> str:
        return f"the agent launcher ended (exit code {self.process.wait()}; see {self.log})"

    def stop(self) -> int:
        """End the launcher (after the agents it started); its exit code."""
        self._stopping = True
        with contextlib.suppress(BrokenPipeError):  # a request it never read
            self.process.stdin.close()
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
        finally:
            self._selector.close()
            self.process.stdout.close()
