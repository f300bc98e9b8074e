"""CPU time of one run's processes, per component, from /proc.

A sampler thread walks the process tree under one root (the ``edgebed run`` process: every
host shell, agent, relay and controller of the run is its descendant) plus processes named by
pid (ovs-vswitchd, from its pid file), reads each one's utime + stime from
``/proc/<pid>/stat`` and keeps the latest value seen, so a process that exits between two
samples loses at most one period of its CPU. A caller's ``classify`` names each process's
component from its command line; nothing is found by a program's name alone, so other users'
processes are never counted."""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_PERIOD_S = 0.1
_THREAD_NUMBER = re.compile(r"\d+$")


@dataclass(frozen=True)
class Process:
    """One process as /proc shows it: its parent, command line and CPU seconds so far."""

    pid: int
    ppid: int
    cmdline: tuple[str, ...]
    cpu_s: float


def _stat_fields(path: Path) -> list[str] | None:
    """The fields of a stat file after the command name (which may hold spaces), or None
    when the process is gone."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _cpu_s(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def read_process(pid: int, proc: Path = PROC) -> Process | None:
    fields = _stat_fields(proc / str(pid) / "stat")
    if fields is None:
        return None
    try:
        cmdline = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return Process(pid, int(fields[1]), tuple(part.decode(errors="replace")
                                              for part in cmdline if part), _cpu_s(fields))


def thread_cpu_s(pid: int, tid: int, proc: Path = PROC) -> float:
    """CPU seconds of one thread of ``pid`` (0 once it is gone)."""
    fields = _stat_fields(proc / str(pid) / "task" / str(tid) / "stat")
    return _cpu_s(fields) if fields else 0.0


def thread_groups(pid: int, proc: Path = PROC) -> dict[str, float]:
    """CPU seconds of the threads of ``pid`` by name, numbers dropped (ovs-vswitchd's
    ``handler12`` and ``handler13`` are ``handler``)."""
    groups: dict[str, float] = {}
    for task in (proc / str(pid) / "task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        fields = _stat_fields(task / "stat")
        if fields is not None:
            key = _THREAD_NUMBER.sub("", name) or name
            groups[key] = groups.get(key, 0.0) + _cpu_s(fields)
    return groups


def children(pid: int, proc: Path = PROC) -> set[int]:
    """The children of every thread of ``pid``."""
    found = set()
    for task in (proc / str(pid) / "task").glob("*"):
        try:
            found.update(int(child) for child in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def machine_times(proc: Path = PROC) -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    fields = [int(v) for v in (proc / "stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def datagrams(pid: int, proc: Path = PROC) -> int | None:
    """UDP datagrams in and out of the network namespace ``pid`` lives in (a host's agent has
    its host's namespace to itself)."""
    try:
        lines = [line.split() for line in (proc / str(pid) / "net" / "snmp").read_text()
                 .splitlines() if line.startswith("Udp:")]
    except OSError:
        return None
    if len(lines) < 2:
        return None
    counters = dict(zip(lines[0][1:], lines[1][1:]))
    return int(counters.get("InDatagrams", 0)) + int(counters.get("OutDatagrams", 0))


@dataclass
class Life:
    """What was seen of one process: its component, CPU seconds counted, and CPU seconds until
    the first datagram its namespace sent or received (its start-up), when watched for it."""

    component: str
    counted_from: float
    cpu_s: float
    datagrams_at_start: int | None = None
    startup_cpu_s: float | None = None


class CpuAccounting:
    """CPU seconds per component of the processes under ``root`` and of ``pinned`` (pid to
    component), sampled every ``period_s`` by a thread of its own between :meth:`start` and
    :meth:`stop`. A process found at :meth:`start` counts from then, a later one from its
    birth. The sampling thread's own CPU is taken out of the root's. ``startup`` names the
    components whose processes' start-up (:class:`Life`) is watched."""

    def __init__(self, root: int, classify: Callable[[Process], str], *,
                 pinned: dict[int, str] | None = None, startup: frozenset[str] = frozenset(),
                 proc: Path = PROC, period_s: float = SAMPLE_PERIOD_S):
        self.root, self.classify, self.proc, self.period_s = root, classify, proc, period_s
        self.pinned = pinned or {}
        self.startup = startup
        self.lives: dict[int, Life] = {}
        self.threads_at_start: dict[int, dict[str, float]] = {}
        self.threads_at_stop: dict[int, dict[str, float]] = {}
        self._machine_at_start = self._machine_at_stop = (0, 0)
        self._sampler_tid: int | None = None
        self._sampler_cpu_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._machine_at_start = machine_times(self.proc)
        self.threads_at_start = {pid: thread_groups(pid, self.proc) for pid in self.pinned}
        self.sample(first=True)
        self._thread = threading.Thread(target=self._run, name="cpu-accounting", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.sample()
        self._machine_at_stop = machine_times(self.proc)
        self.threads_at_stop = {pid: thread_groups(pid, self.proc) for pid in self.pinned}

    def _run(self) -> None:
        self._sampler_tid = threading.get_native_id()
        while not self._stop.wait(self.period_s):
            self.sample()
            self._sampler_cpu_s = thread_cpu_s(self.root, self._sampler_tid, self.proc)

    def _tree(self) -> list[int]:
        found, pending = [], [self.root]
        while pending:
            pid = pending.pop()
            found.append(pid)
            pending.extend(children(pid, self.proc))
        return found + [pid for pid in self.pinned if pid not in found]

    def sample(self, first: bool = False) -> None:
        for pid in self._tree():
            process = read_process(pid, self.proc)
            if process is None:
                continue
            life = self.lives.get(pid)
            if life is None:
                life = self.lives[pid] = Life(self._component(process),
                                              process.cpu_s if first else 0.0, process.cpu_s)
            # Classified at every sample: before its exec a child carries its parent's command
            # line. An exited, unreaped process has none and keeps what it was.
            elif process.cmdline:
                life.component = self._component(process)
            life.cpu_s = process.cpu_s
            if life.component in self.startup and life.startup_cpu_s is None:
                self._watch_startup(pid, life)

    def _component(self, process: Process) -> str:
        return self.pinned.get(process.pid) or self.classify(process)

    def _watch_startup(self, pid: int, life: Life) -> None:
        count = datagrams(pid, self.proc)
        if count is None:
            return
        if life.datagrams_at_start is None:
            life.datagrams_at_start = count
        elif count > life.datagrams_at_start:
            life.startup_cpu_s = life.cpu_s

    def totals(self) -> dict[str, float]:
        """CPU seconds per component over the accounting's span."""
        found: dict[str, float] = {}
        for pid, life in self.lives.items():
            used = life.cpu_s - life.counted_from
            if pid == self.root:
                used -= self._sampler_cpu_s
            found[life.component] = found.get(life.component, 0.0) + used
        return found

    def machine_busy_s(self) -> float:
        """CPU seconds the whole machine was busy over the accounting's span."""
        return (self._machine_at_stop[0] - self._machine_at_start[0]) / CLOCK_TICKS

    def thread_totals(self, pid: int) -> dict[str, float]:
        """CPU seconds per thread group of a pinned process over the accounting's span."""
        before = self.threads_at_start.get(pid, {})
        return {name: used - before.get(name, 0.0)
                for name, used in self.threads_at_stop.get(pid, {}).items()}

    def startups(self) -> dict[str, list[float]]:
        """Per watched component, the start-up CPU seconds of each process that got as far as
        its first datagram."""
        found: dict[str, list[float]] = {}
        for life in self.lives.values():
            if life.startup_cpu_s is not None:
                found.setdefault(life.component, []).append(life.startup_cpu_s)
        return found
