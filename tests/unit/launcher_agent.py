"""An agent for the launcher's tests: it says where and how it runs, then exits with the code
its arguments ask for, or starts a child and waits to be stopped, or constructs its Agent and
says when it got past it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from agents.agent import Agent, AgentParams
from edgebed import clock


class Params(AgentParams):
    """It takes none."""


def main(argv: list[str] | None = None) -> int:
    what, *rest = argv
    if what == "agent":  # an Agent's arguments follow: where a parked agent waits for its start
        Agent("launcher_agent", rest)
        print(json.dumps({"started_ns": clock.monotonic_ns(), "environment": dict(os.environ)}),
              flush=True)
        return 0
    child = subprocess.Popen(["sleep", "600"]) if what == "wait" else None
    print(json.dumps({
        "net": os.stat("/proc/self/ns/net").st_ino, "mnt": os.stat("/proc/self/ns/mnt").st_ino,
        "pid": os.getpid(), "group": os.getpgid(0), "session": os.getsid(0),
        "environment": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv[1:],
        "scapy": "scapy" in sys.modules, "child": child and child.pid,
        "cgroup": open("/proc/self/cgroup").read()}), flush=True)
    if child is not None:
        signal.pause()
    return int(rest[0])
