"""Programs a run starts inside its hosts: workload commands and packet captures."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agents.launched import AgentLauncher
from edgebed import clock
from topologies.naming import ENVIRONMENT_KEY

GROUP_POLL_S = 0.02
KILLED_REAP_S = 2.0
LOG_TAIL_LINES = 12
# What a program stopped by SIGTERM may return: 0 (it handled the signal), death by SIGTERM,
# or a shell's 128 + SIGTERM.
STOPPED_CLEANLY = (0, -signal.SIGTERM, 128 + signal.SIGTERM)


class Program(Protocol):
    """A started program as the table sees it: a ``subprocess.Popen``, or an agent the launcher
    forked (:class:`agents.launched.LaunchedAgent`)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


@dataclass
class StartedProcess:
    node: str
    argv: list[str]
    process: Program
    log: Path
    may_fail: bool = False
    log_offset: int = 0  # where this program's output starts in the (shared) node log
    exit_reported: bool = False

    @property
    def group(self) -> int:
        return self.process.pid  # started as the leader of a new session


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with {code}"


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(group: int, number: int) -> None:
    try:
        os.killpg(group, number)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_groups_gone(items: list[StartedProcess], timeout_s: float) -> list[StartedProcess]:
    """Wait up to ``timeout_s`` for the process groups of ``items`` to empty; returns the
    items whose group still has members."""
    deadline = clock.monotonic() + timeout_s
    pending = list(items)
    while pending:
        for item in pending:
            item.process.poll()  # reaps the leader, so an empty group is seen as gone
        pending = [item for item in pending if _group_alive(item.group)]
        if not pending or clock.monotonic() >= deadline:
            break
        clock.sleep(GROUP_POLL_S)
    return pending


def log_tail(log: Path, offset: int = 0, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of ``log`` from byte ``offset`` on."""
    try:
        with open(log, "rb") as stream:
            stream.seek(offset)
            text = stream.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


@dataclass
class NodeProcesses:
    """The set of programs running inside one run's hosts."""

    prefix: str
    started: list[StartedProcess] = field(default_factory=list)
    stalled: set[str] = field(default_factory=set)  # nodes whose programs are stopped

    def start(self, host, node_name: str, argv: list[str], log: Path,
              env: dict[str, str] | None = None, may_fail: bool = False,
              launcher: AgentLauncher | None = None,
              start_after_s: float | None = None) -> StartedProcess:
        """Start ``argv`` inside ``host`` (a Mininet host), appending its output to ``log``:
        forked by ``launcher`` when given (``argv`` is then an agent's, parked until
        ``start_after_s`` after the timeline's origin when that is given), else through
        ``host.popen``."""
        environment = dict(os.environ, **(env or {}), **{ENVIRONMENT_KEY: self.prefix})
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as stream:
            when = ("start" if start_after_s is None
                    else f"parked, to start at t={start_after_s:g}s")
            stream.write(f"--- {time.strftime('%H:%M:%S')} {when}: {shlex.join(argv)}\n")
            stream.flush()
            offset = stream.tell()
        if launcher is not None:
            process = launcher.launch(host, argv, environment, log, start_after_s)
        else:
            process = self._popen(host, argv, log, environment)
        started = StartedProcess(node_name, argv, process, log, may_fail, offset)
        self.started.append(started)
        return started

    @staticmethod
    def _popen(host, argv: list[str], log: Path, environment: dict[str, str]) -> Program:
        with open(log, "a") as stream:
            # A new session made by Popen itself (not by ``mnexec -d``, which may fork): the
            # program's pid is its process group's id from the first instruction on.
            return host.popen(argv, stdin=subprocess.DEVNULL, stdout=stream,
                              stderr=subprocess.STDOUT, env=environment,
                              start_new_session=True, mncmd=["mnexec", "-a", str(host.pid)])

    def stall(self, node: str) -> int:
        """Stop every program running on ``node`` (SIGSTOP to each process group): the node's
        CPU starved outright, its network stack still answering. Returns how many."""
        return self._signal_node(node, signal.SIGSTOP, stalled=True)

    def resume(self, node: str) -> int:
        """Continue the programs :meth:`stall` stopped on ``node``. Returns how many."""
        return self._signal_node(node, signal.SIGCONT, stalled=False)

    def _signal_node(self, node: str, number: int, stalled: bool) -> int:
        running = [item for item in self.started
                   if item.node == node and item.process.poll() is None]
        for item in running:
            _signal_group(item.group, number)
        (self.stalled.add if stalled else self.stalled.discard)(node)
        return len(running)

    def newly_exited(self) -> list[StartedProcess]:
        """Programs that ended on their own since the last call (for warnings during a run)."""
        ended = []
        for item in self.started:
            if not item.exit_reported and item.process.poll() is not None:
                item.exit_reported = True
                ended.append(item)
        return ended

    def stop_all(self, grace_s: float = 2.0) -> list[dict]:
        """Stop every program's process group: SIGTERM, up to ``grace_s`` for the groups to
        empty, then SIGKILL. Returns what each program did."""
        for node in sorted(self.stalled):  # a stopped program would not see SIGTERM
            self.resume(node)
        ended_before = {id(item): item.process.poll() is not None for item in self.started}
        for item in self.started:
            _signal_group(item.group, signal.SIGTERM)
        pending = _wait_groups_gone(self.started, grace_s)
        killed = {id(item) for item in pending}
        for item in pending:
            _signal_group(item.group, signal.SIGKILL)
        # Killed children are gone once their new parent reaps them: wait for that, so that
        # whatever the leftovers check finds afterwards really was left behind.
        _wait_groups_gone(pending, KILLED_REAP_S)
        outcomes = []
        for item in self.started:
            code = item.process.wait()
            if ended_before[id(item)]:
                how, failed = "exited", code != 0
            elif id(item) in killed:
                how, failed = "killed", False  # did not stop in the grace period: a warning
            else:
                how, failed = "terminated", code not in STOPPED_CLEANLY
            outcome = {"node": item.node, "command": shlex.join(item.argv), "exit_code": code,
                       "stopped": how, "failed": failed and not item.may_fail,
                       "may_fail": item.may_fail}
            if failed:
                outcome["log_tail"] = log_tail(item.log, item.log_offset)
            outcomes.append(outcome)
        self.started.clear()
        return outcomes


def failures(outcomes: list[dict]) -> list[str]:
    """One line per failed program: where, what, how it ended."""
    return [f"{o['command']} on {o['node']} {describe_exit(o['exit_code'])}"
            + (" during teardown" if o["stopped"] == "terminated" else "")
            for o in outcomes if o["failed"]]


def tcpdump_command(interface: str, output: Path, snaplen: int, filter_expression: str,
                    rotate_size: float | None, rotate_files: int | None) -> list[str]:
    """tcpdump writing ``interface`` to ``output`` as root (``-Z root``: the run directory is
    root's), unbuffered (``-U``) so a stopped run still has every captured packet."""
    argv = ["tcpdump", "-n", "-i", interface, "-s", str(snaplen), "-U", "-Z", "root",
            "-w", str(output)]
    if rotate_size is not None:
        argv += ["-C", str(max(1, round(rotate_size / 1e6)))]
    if rotate_files is not None:
        argv += ["-W", str(rotate_files)]
    if filter_expression:
        argv += shlex.split(filter_expression)
    return argv
