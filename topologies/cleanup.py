"""Finding and removing what a run left behind, strictly by its prefix."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from edgebed import clock

from . import cpu_limits
from .naming import ENVIRONMENT_KEY, prefix_of

PROC = Path("/proc")


@dataclass
class Leftovers:
    """Objects that carry run prefixes, grouped by kind."""

    bridges: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.bridges or self.links or self.processes or self.cgroups)

    def describe(self) -> str:
        parts = [f"{len(v)} {k}: {' '.join(map(str, v[:8]))}{' ...' if len(v) > 8 else ''}"
                 for k, v in (("bridges", self.bridges), ("links", self.links),
                              ("processes", self.processes), ("cgroups", self.cgroups)) if v]
        return "; ".join(parts) or "nothing"


def _run(args: list[str], timeout: float = 15) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


def ovs_bridges() -> list[str]:
    """All OVS bridge names, or an empty list when OVS is not running."""
    try:
        result = _run(["ovs-vsctl", "--timeout=5", "list-br"])
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return []
    return result.stdout.split() if result.returncode == 0 else []


def root_links() -> list[str]:
    """Interface names in the root network namespace."""
    result = _run(["ip", "-o", "link", "show"])
    names = []
    for line in result.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def process_run_prefix(pid: int) -> str | None:
    """The run prefix in a process's environment, if it has one."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    marker = ENVIRONMENT_KEY.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(marker):
            return entry[len(marker):].decode(errors="replace")
    return None


def run_processes() -> dict[int, str]:
    """pid -> run prefix for every process that carries one, except this process."""
    found = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            prefix = process_run_prefix(int(entry.name))
            if prefix:
                found[int(entry.name)] = prefix
    return found


def find_leftovers(prefixes: set[str] | None = None) -> dict[str, Leftovers]:
    """Objects carrying a run prefix, by prefix (only ``prefixes`` when given)."""
    found: dict[str, Leftovers] = {}

    def bucket(prefix: str | None) -> Leftovers | None:
        if prefix is None or (prefixes is not None and prefix not in prefixes):
            return None
        return found.setdefault(prefix, Leftovers())

    for bridge in ovs_bridges():
        if (b := bucket(prefix_of(bridge))) is not None:
            b.bridges.append(bridge)
    for link in root_links():
        if (b := bucket(prefix_of(link))) is not None and link not in b.bridges:
            b.links.append(link)
    for pid, prefix in run_processes().items():
        if (b := bucket(prefix)) is not None:
            b.processes.append(pid)
    for name in cpu_limits.top_level_names():
        if (b := bucket(prefix_of(name))) is not None:
            b.cgroups.append(name)
    return found


def kill_processes(pids: list[int], grace_s: float = 2.0) -> None:
    """SIGTERM, then SIGKILL whatever is still there after ``grace_s``."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = clock.monotonic() + grace_s
    alive = list(pids)
    while alive and clock.monotonic() < deadline:
        clock.sleep(0.05)
        alive = [pid for pid in alive if _exists(pid)]
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _exists(pid: int) -> bool:
    try:
        state = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def remove(prefix: str, leftovers: Leftovers) -> None:
    """Remove one run's leftovers: processes first (they hold namespaces), then bridges, links."""
    kill_processes(leftovers.processes)
    if leftovers.bridges:
        command = ["ovs-vsctl", "--timeout=10"]
        for bridge in leftovers.bridges:
            assert prefix_of(bridge) == prefix
            command += ["--", "--if-exists", "del-br", bridge]
        _run(command, timeout=30)
    for link in leftovers.links:
        assert prefix_of(link) == prefix
        _run(["ip", "link", "del", "dev", link])
    for name in leftovers.cgroups:  # after the processes, which kept them busy
        assert prefix_of(name) == prefix
        cpu_limits.CpuLimit(name, 0).remove()


def remove_run_objects(prefix: str) -> Leftovers:
    """Remove everything carrying ``prefix``; returns what was found (empty when all was clean)."""
    leftovers = find_leftovers({prefix}).get(prefix, Leftovers())
    if leftovers:
        remove(prefix, leftovers)
    return leftovers
