"""Integration tests build real Mininet networks: they need root, Open vSwitch and mnexec.

They skip (saying why) only when not run as root; as root a missing piece is a failure,
because `make test` installs and starts everything they need.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from topologies import cleanup
from topologies.naming import prefix_of

pytestmark = pytest.mark.integration

EDGEBED = [sys.executable, "-m", "experiments.cli"]
# The confidence of an interval a single run's random loss is tested against, where nothing
# counted the loss drawn (the fallback's random loss is the kernel's, not seeded): a right loss
# rate misses it once in a million runs.
SINGLE_SHOT_CONFIDENCE = 1 - 1e-6


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="integration tests build Mininet networks and need root")
        for item in items:
            if "integration" in str(item.fspath):
                item.add_marker(skip)


# Open vSwitch's own device for each datapath type: it comes with the first bridge of that
# type and goes with the last, whoever made them (another run side by side, say).
OVS_DATAPATH_DEVICES = frozenset({"ovs-netdev", "ovs-system"})


@dataclass(frozen=True)
class SystemState:
    """What a run may create: namespaces, root links, OVS bridges, run processes."""

    netns: frozenset
    links: frozenset
    bridges: frozenset
    run_processes: frozenset  # (pid, prefix)

    @classmethod
    def now(cls) -> "SystemState":
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return cls(frozenset(line.split()[0] for line in netns.splitlines() if line.strip()),
                   frozenset(cleanup.root_links()), frozenset(cleanup.ovs_bridges()),
                   frozenset(cleanup.run_processes().items()))

    def new_since(self, before: "SystemState", ignore_prefixes=()) -> dict:
        """Objects present now that were not before, except those of other runs' prefixes."""
        def ours(name):
            return prefix_of(name) not in ignore_prefixes and name not in OVS_DATAPATH_DEVICES
        return {
            "netns": sorted(self.netns - before.netns),
            "links": sorted(n for n in self.links - before.links if ours(n)),
            "bridges": sorted(n for n in self.bridges - before.bridges if ours(n)),
            "processes": sorted(p for p in self.run_processes - before.run_processes
                                if p[1] not in ignore_prefixes),
        }


def other_live_prefixes(mine: str) -> set[str]:
    from experiments import registry
    return registry.live_prefixes() - {mine}


def assert_nothing_left(before: SystemState, prefix: str) -> None:
    after = SystemState.now()
    created = after.new_since(before, other_live_prefixes(prefix))
    assert created == {"netns": [], "links": [], "bridges": [], "processes": []}, created
    assert not cleanup.find_leftovers({prefix}), f"objects with prefix {prefix} remain"


def edgebed(*arguments: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(EDGEBED + list(arguments), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def start_edgebed(*arguments: str) -> subprocess.Popen:
    return subprocess.Popen(EDGEBED + list(arguments), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def emulator_made(summary: dict, *directions: tuple[int, str]) -> int:
    """The frames the emulator itself lost in a run, by its own count: on these (link,
    direction)s, or everywhere when none is named."""
    return sum(entry["emulator_made"] for entry in summary["emulator_loss"]
               if not directions or (entry["link"], entry["direction"]) in directions)


def only_run_dir(runs: Path) -> Path:
    found = [p for p in runs.iterdir() if p.is_dir()]
    assert len(found) == 1, found
    return found[0]


def wait_for_phase(runs: Path, phase: str, process: subprocess.Popen, timeout: float = 120) -> Path:
    """Wait until the run's manifest reports ``phase``; returns the run directory."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        dirs = [p for p in runs.iterdir() if p.is_dir()] if runs.exists() else []
        if dirs and (dirs[0] / "manifest.json").exists():
            manifest = json.loads((dirs[0] / "manifest.json").read_text())
            if manifest.get("phase") == phase:
                return dirs[0]
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    raise AssertionError(f"run did not reach phase {phase!r} in {timeout}s")


def eventually(condition, what: str, timeout: float = 60, interval: float = 0.1):
    """Poll ``condition`` until it returns something true and return that; fail naming
    ``what`` after ``timeout`` seconds. The timeout only catches a hang: a slow machine gets
    there later, a broken product never."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(interval)


def logged_at(run_dir: Path, text: str) -> float | None:
    """When the run's runner.log first logged a line containing ``text`` (epoch seconds, to
    the millisecond of its local-time stamp), or None."""
    log = run_dir / "runner.log"
    for line in (log.read_text() if log.exists() else "").splitlines():
        if text in line:
            stamp, milliseconds = line[:23].split(",")
            return (time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
                    + int(milliseconds) / 1e3)
    return None


@pytest.fixture
def state_before() -> SystemState:
    return SystemState.now()


@pytest.fixture(scope="session", autouse=True)
def open_vswitch_running():
    if os.geteuid() == 0:
        result = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True)
        assert result.returncode == 0, "Open vSwitch is not running: run `make setup`"


@pytest.fixture(scope="module")
def fallback_path(tmp_path_factory):
    """The measured line path of experiments.fidelity (v1 - s1 - s2 - e1) with the fallback
    impairment backend, built once per test module."""
    from experiments.fidelity import FidelityPath

    line = FidelityPath("fallback", tmp_path_factory.mktemp("wires"))
    try:
        line.start()
        yield line
    finally:
        line.stop()
