"""Programs a run starts inside its hosts: workload commands and packet captures.

Every program runs in its host's namespace with ``EDGEBED_RUN=<prefix>`` in its environment
(so ``edgebed clean`` can find it after a crash), writes its output to the node's log, and is
stopped with the run: SIGTERM first (tcpdump flushes its file), SIGKILL after a grace period.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from topologies.naming import ENVIRONMENT_KEY


@dataclass
class StartedProcess:
    node: str
    argv: list[str]
    process: subprocess.Popen
    log: Path


@dataclass
class NodeProcesses:
    """The set of programs running inside one run's hosts."""

    prefix: str
    started: list[StartedProcess] = field(default_factory=list)

    def start(self, host, node_name: str, argv: list[str], log: Path,
              env: dict[str, str] | None = None) -> StartedProcess:
        """Start ``argv`` inside ``host`` (a Mininet host), appending its output to ``log``."""
        environment = dict(os.environ, **(env or {}), **{ENVIRONMENT_KEY: self.prefix})
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as stream:
            stream.write(f"--- {time.strftime('%H:%M:%S')} start: {shlex.join(argv)}\n")
            stream.flush()
            process = host.popen(argv, stdin=subprocess.DEVNULL, stdout=stream,
                                 stderr=subprocess.STDOUT, env=environment)
        started = StartedProcess(node_name, argv, process, log)
        self.started.append(started)
        return started

    def stop_all(self, grace_s: float = 2.0) -> list[dict]:
        """Stop everything; returns what each program did (exit code, how it was stopped)."""
        for item in self.started:
            if item.process.poll() is None:
                item.process.terminate()
        deadline = time.monotonic() + grace_s
        outcomes = []
        for item in self.started:
            how = "exited"
            try:
                item.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                if item.process.returncode in (-15, 143):
                    how = "terminated"
            except subprocess.TimeoutExpired:
                item.process.kill()
                item.process.wait()
                how = "killed"
            outcomes.append({"node": item.node, "command": shlex.join(item.argv),
                             "exit_code": item.process.returncode, "stopped": how})
        self.started.clear()
        return outcomes


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
