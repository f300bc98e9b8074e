"""Which runs are alive: one small file per run under ``/var/lib/edgebed/runs``.

A run registers its prefix, the runner's pid (with the pid's start time, so a recycled pid is
not mistaken for the runner) and its run directory. ``edgebed clean`` removes the objects of
prefixes whose runner is gone, and never touches a live run.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from topologies import cleanup
from topologies.naming import PREFIX_PATTERN

from edgebed.files import atomic_write

from .rundir import RunDirectory, iso, utc_now

# Kept on disk, not in /run: OVS bridges outlive a reboot, and so must the record of whose
# they were, so that `edgebed clean` can mark those runs incomplete afterwards.
REGISTRY = Path(os.environ.get("EDGEBED_STATE_DIR", "/var/lib/edgebed")) / "runs"


def _start_time(pid: int) -> str | None:
    try:
        return (cleanup.PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclass
class RunRecord:
    prefix: str
    pid: int
    pid_start: str | None
    run_dir: str

    def alive(self) -> bool:
        return self.pid_start is not None and _start_time(self.pid) == self.pid_start


def register(prefix: str, run_dir: Path) -> RunRecord:
    record = RunRecord(prefix, os.getpid(), _start_time(os.getpid()), str(run_dir))
    atomic_write(REGISTRY / f"{prefix}.json", json.dumps(asdict(record)))
    return record


def unregister(prefix: str) -> None:
    (REGISTRY / f"{prefix}.json").unlink(missing_ok=True)


@contextlib.contextmanager
def registered(prefix: str, run_dir: Path) -> Iterator[RunRecord]:
    """Hold ``prefix`` as a live run for the duration (benchmarks, test harnesses), so that
    ``edgebed clean`` leaves its objects alone."""
    record = register(prefix, run_dir)
    try:
        yield record
    finally:
        unregister(prefix)


def records() -> list[RunRecord]:
    found = []
    if REGISTRY.is_dir():
        for path in REGISTRY.glob("eb*.json"):
            try:
                found.append(RunRecord(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError):
                continue
    return [r for r in found if PREFIX_PATTERN.match(r.prefix)]


def live_prefixes() -> set[str]:
    return {r.prefix for r in records() if r.alive()}


@dataclass
class CleanReport:
    prefix: str
    removed: str
    run_dir: str | None


def clean() -> list[CleanReport]:
    """Remove the leftovers of every run whose runner is gone; mark their runs incomplete."""
    live = live_prefixes()
    dead = {r.prefix: r for r in records() if r.prefix not in live}
    leftovers = cleanup.find_leftovers()
    reports = []
    for prefix in sorted(set(leftovers) | set(dead)):
        if prefix in live:
            continue
        found = leftovers.get(prefix, cleanup.Leftovers())
        if found:
            cleanup.remove(prefix, found)
        record = dead.get(prefix)
        if record is not None:
            _mark_incomplete(Path(record.run_dir))
            unregister(prefix)
        reports.append(CleanReport(prefix, found.describe(), record.run_dir if record else None))
    return reports


def _mark_incomplete(path: Path) -> None:
    run = RunDirectory(path)
    try:
        manifest = run.read_json("manifest.json")
    except (OSError, ValueError):
        return
    if manifest.get("status") == "running":
        run.update_manifest(status="incomplete", ended=None, cleaned=iso(utc_now()),
                            note="the runner died before it finished; cleaned by edgebed clean")
