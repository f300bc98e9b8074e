"""The agent launcher: one process that imports a run's agent modules once and forks every agent
from itself into its host, so that an agent's start costs a fork instead of an interpreter
importing pydantic, numpy and the agent's modules all over again.

    python -m agents.launcher MODULE...

It reads requests on stdin and writes reports on stdout, one JSON object a line:

* first, once the imports are done: ``{"ready": [MODULE, ...]}``;
* a request: ``{"argv": [PYTHON, "-m", MODULE, ARG...], "host_pid": N, "env": {...},
  "log": PATH, "cwd": PATH, "cgroup": [cgroup.procs file, ...]}``, answered in order by
  ``{"started": PID}`` or ``{"refused": WHY}``; with ``"start_after_s": S`` the agent is forked
  into its host at once but parked: it runs ``S`` seconds (the run's clock) after the
  timeline's origin, which a later request gives;
* the timeline's start: ``{"origin_ns": T, "env": {...}}`` (``T`` on the run's monotonic
  clock; ``env``, variables that exist only from then on), answered by ``{"unparked": N}``;
  every parked agent then waits for its own start and runs;
* whenever a started agent ends: ``{"exited": PID, "code": C}`` (C as ``Popen.returncode``).

Parking is how a run's agents start on time: forking one, moving it into its host's namespaces
and cgroup and parsing its arguments (its first touches of the launcher's memory, copied on
write) take milliseconds of CPU, and 200 agents started together at their start time would start
over seconds while the machine is saturated with their start. A parked agent waits in its
:class:`agents.agent.Agent`'s construction, once its arguments are parsed; one never unparked
(the run was stopped first) dies by the run's SIGTERM, as an agent still starting would.

It ends when its stdin closes. The client is :class:`agents.launched.AgentLauncher`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import gc
import importlib
import json
import os
import selectors
import shlex
import sys
import threading
import traceback
from types import ModuleType

from agents import catalog
from agents.agent import park_until
from edgebed import clock

REQUESTS_FD = 0
READ_SIZE = 1 << 16
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(path: str) -> None:
    """Join the namespace ``path`` names (Python 3.11 has no os.setns)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(descriptor, 0) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"setns {path}: {os.strerror(number)}")
    finally:
        os.close(descriptor)


def enter_host(request: dict, inherited: list[int]) -> None:
    """Turn this freshly forked process into one started in the request's host, the way the
    runner's ``host.popen`` starts one: a session of its own (``start_new_session``), the host's
    cgroup (:class:`topologies.cpu_limits.CpuLimitedHost`), then the host's network and mount
    namespaces and the caller's working directory (``mnexec -a``), its output appended to the
    node log, its environment the request's."""
    os.setsid()
    # The cgroup files are only mounted in the root mount namespace, and the log path is the
    # runner's, so both are opened before joining the host's.
    for procs in request["cgroup"]:
        with open(procs, "w") as stream:
            stream.write(str(os.getpid()))
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    nothing = os.open(os.devnull, os.O_RDONLY)
    host = request["host_pid"]
    _setns(f"/proc/{host}/ns/net")
    _setns(f"/proc/{host}/ns/mnt")  # which also moves the root and working directories
    os.chdir(request["cwd"])
    os.dup2(nothing, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for descriptor in [log, nothing, *inherited]:
        os.close(descriptor)
    os.environ.clear()
    os.environ.update(request["env"])
    # random re-seeds itself in a forked child; numpy's global generator does not.
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()


def wait_for_start(start: int, start_after_s: float) -> None:
    """A parked agent's start: wait for the timeline's origin and variables on the pipe
    ``start``, take the variables and sleep until ``start_after_s`` after the origin. The
    launcher closing the pipe unsaid (it ended before the timeline began) ends the agent."""
    with open(start) as pipe:
        said = pipe.read()
    if not said:
        raise SystemExit(0)
    timeline = json.loads(said)
    os.environ.update(timeline["env"])
    wait_ns = timeline["origin_ns"] + round(start_after_s * 1e9) - clock.monotonic_ns()
    if wait_ns > 0:
        clock.sleep(wait_ns / 1e9)


def run_agent(module: ModuleType, arguments: list[str]) -> int:
    """Run ``module``'s main as ``python -m`` would, and end the way the interpreter ends:
    non-daemon threads joined, atexit handlers run, output flushed; returns the exit code."""
    sys.argv = [module.__file__, *arguments]
    try:
        code = module.main(arguments)
    except SystemExit as stop:
        code = stop.code
    except BaseException:
        traceback.print_exc()
        code = 1
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # what the interpreter does at exit (and multiprocessing's children)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return code or 0


class Launcher:
    """The request loop: forks agents, reaps them and reports their exits."""

    def __init__(self, modules: dict[str, ModuleType]):
        self.modules = modules
        self.children: dict[int, int] = {}  # pidfd -> pid
        self.parked: list[int] = []  # the write ends of the parked agents' start pipes
        self.selector = selectors.DefaultSelector()

    def serve(self) -> None:
        self._report({"ready": sorted(self.modules)})
        self.selector.register(REQUESTS_FD, selectors.EVENT_READ)
        pending = b""
        while True:
            for key, _ in self.selector.select():
                if key.fd != REQUESTS_FD:
                    self._reap(key.fd)
                    continue
                chunk = os.read(REQUESTS_FD, READ_SIZE)
                if not chunk:
                    return
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    request = json.loads(line)
                    self._report(self._unpark(request) if "origin_ns" in request
                                 else self._launch(request))

    def _report(self, message: dict) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def _launch(self, request: dict) -> dict:
        argv = request["argv"]
        module = self.modules.get(argv[2]) if argv[1:2] == ["-m"] else None
        if module is None:
            return {"refused": f"not an agent this launcher imported: {shlex.join(argv)}"}
        entered, entered_write = os.pipe()
        start, start_write = os.pipe() if "start_after_s" in request else (None, None)
        pid = os.fork()
        if pid == 0:
            self._child(module, request, entered_write, start,
                        [entered, *self.children, self.selector.fileno(), *self.parked,
                         *([start_write] if start_write is not None else [])])
        os.close(entered_write)
        if start is not None:
            os.close(start)
            self.parked.append(start_write)
        # The child says nothing once it is in its host, or why it could not get there.
        with open(entered, "rb") as pipe:
            problem = pipe.read().decode()
        if problem:
            if start_write is not None:
                os.close(self.parked.pop())
            os.waitpid(pid, 0)
            return {"refused": f"{shlex.join(argv)} could not enter its host: {problem}"}
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = pid
        self.selector.register(pidfd, selectors.EVENT_READ)
        return {"started": pid}

    def _unpark(self, request: dict) -> dict:
        """Tell every parked agent the timeline's origin and variables; how many were told."""
        message = json.dumps({"origin_ns": request["origin_ns"], "env": request["env"]})
        for start_write in self.parked:
            # An agent gone before its start (killed from outside) has its exit reported like
            # any other's.
            with contextlib.suppress(BrokenPipeError), open(start_write, "w") as pipe:
                pipe.write(message)
        count, self.parked = len(self.parked), []
        return {"unparked": count}

    def _child(self, module: ModuleType, request: dict, entered: int, start: int | None,
               inherited: list[int]) -> None:
        """The forked child's whole life: never returns."""
        code = 1
        try:
            try:
                enter_host(request, inherited)
            except BaseException as problem:
                os.write(entered, f"{type(problem).__name__}: {problem}".encode())
                return
            os.close(entered)
            if start is not None:
                park_until(functools.partial(wait_for_start, start, request["start_after_s"]))
            code = run_agent(module, request["argv"][3:])
        finally:
            os._exit(code)

    def _reap(self, pidfd: int) -> None:
        pid = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        self._report({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    modules = {name: importlib.import_module(name) for name in names}
    others = [name for name, module in modules.items() if not catalog.is_agent(module)]
    if others:
        print(f"not agent modules: {', '.join(others)}", file=sys.stderr)
        return 2
    # A fork copies only the calling thread, and joining a mount namespace needs a process
    # of one thread: a library that started threads at import would break both.
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1:
        print(f"{len(threads)} threads after importing {', '.join(names)}; the launcher forks "
              "agents and needs exactly one", file=sys.stderr)
        return 1
    gc.freeze()  # the imported objects stay shared between the children, not copied on write
    Launcher(modules).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
