"""Programs of a run, started and stopped the way the runner does, for real: through Mininet's
``Host.popen`` and ``mnexec``. The host stand-in is this test's own namespace (``mnexec -a``
to our own pid), so no network is needed; everything else is the real code path."""

from __future__ import annotations

import os
import shutil
import signal
import time
from typing import Callable

import pytest
from mininet.node import Node

from experiments import scenarios
from agents.processes import NodeProcesses, failures
from tests.conftest import wait_until
from tests.unit.test_media_agents import HANG_GUARD_S

pytestmark = pytest.mark.skipif(shutil.which("mnexec") is None, reason="mnexec (Mininet) missing")


class ThisNamespace:
    """Enough of a Mininet host for ``Node.popen``: its namespaces are those of this process."""

    pid = os.getpid()
    popen = Node.popen
    _popen = Node._popen


def start(processes: NodeProcesses, tmp_path, argv, **kwargs):
    return processes.start(ThisNamespace(), "h1", argv, tmp_path / "h1.log", **kwargs)


def wait_for(condition, what: str) -> None:
    wait_until(condition, what, HANG_GUARD_S)


def ready_marker(tmp_path, name: str = "ready") -> tuple[str, Callable[[], None]]:
    """A shell command that leaves a marker file, and the wait for it: scripts run it once
    their traps are in place, so a signal sent afterwards meets the trap."""
    marker = tmp_path / name
    return f": > {marker}", lambda: wait_for(marker.exists, f"the script's {name} marker")


def closing_script(tmp_path, loop: str, linger: str = "") -> tuple[str, Callable[[], None]]:
    """A script whose SIGTERM trap runs ``linger``, writes its closing line and exits 0, and
    which runs ``loop`` for ever; and the wait for its trap to be in place."""
    mark_ready, wait_ready = ready_marker(tmp_path)
    script = tmp_path / "closing.sh"
    script.write_text(f"trap '{linger}echo flushed > {tmp_path}/closing; exit 0' TERM\n"
                      f"{mark_ready}\n"
                      f"while true; do {loop}; done\n")
    return str(script), wait_ready


def stop_all_closes_cleanly(processes: NodeProcesses, tmp_path) -> None:
    """Stopping every program lets the script's trap write its closing line and exit 0."""
    # A grace that only a hung trap outlasts: stop_all returns once the group is gone.
    outcomes = processes.stop_all(grace_s=HANG_GUARD_S)
    assert (tmp_path / "closing").read_text() == "flushed\n"
    assert outcomes[0]["stopped"] == "terminated" and not outcomes[0]["failed"], outcomes


def test_shell_children_get_sigterm_and_time_to_finish(tmp_path):
    processes = NodeProcesses("t0")
    # The child traps SIGTERM, takes 0.3 s to write its closing line, then exits 0.
    child, wait_ready = closing_script(tmp_path, "sleep 0.05", linger="sleep 0.3; ")
    started = start(processes, tmp_path, ["sh", "-c", f"sh {child} & wait"])
    wait_ready()
    stop_all_closes_cleanly(processes, tmp_path)
    with pytest.raises(ProcessLookupError):
        os.killpg(started.group, 0)  # nothing of the group is left to report


def test_group_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    processes = NodeProcesses("t0")
    mark_ready, wait_ready = ready_marker(tmp_path)
    sleep_s = 2 * HANG_GUARD_S
    started = start(processes, tmp_path, ["sh", "-c", f"trap '' TERM; {mark_ready}; "
                                                      f"sleep {sleep_s} & wait; sleep {sleep_s}"])
    wait_ready()  # SIGTERM is ignored from here on, by the shell and what it starts
    begun = time.monotonic()
    outcomes = processes.stop_all(grace_s=0.5)
    # Not before the grace; and well before the group would have ended by itself: a stop that
    # waited for it instead of killing it would take sleep_s.
    assert 0.5 <= time.monotonic() - begun < HANG_GUARD_S
    assert outcomes[0]["stopped"] == "killed"
    with pytest.raises(ProcessLookupError):
        os.killpg(started.group, 0)


def test_children_of_a_program_that_already_ended_are_stopped(tmp_path):
    processes = NodeProcesses("t0")
    started = start(processes, tmp_path, ["sh", "-c", f"sleep {2 * HANG_GUARD_S} & exit 0"])
    wait_for(lambda: started.process.poll() is not None, "the shell's exit")
    assert started.process.poll() == 0
    outcomes = processes.stop_all(grace_s=2)
    assert outcomes[0] | {"command": None} == {
        "node": "h1", "command": None, "exit_code": 0, "stopped": "exited", "failed": False,
        "may_fail": False}
    with pytest.raises(ProcessLookupError):
        os.killpg(started.group, 0)


def test_non_zero_exits_and_signals_are_failures_unless_allowed(tmp_path):
    processes = NodeProcesses("t0")
    start(processes, tmp_path, ["sh", "-c", "echo bad input; exit 3"])
    start(processes, tmp_path, ["no-such-program-anywhere"])
    start(processes, tmp_path, ["sh", "-c", "kill -SEGV $$"])
    start(processes, tmp_path, ["sh", "-c", "exit 5"], may_fail=True)
    start(processes, tmp_path, ["sleep", str(2 * HANG_GUARD_S)])
    ending = {"echo bad input; exit 3", "no-such-program-anywhere", "kill -SEGV $$", "exit 5"}
    exited: set[str] = set()
    wait_for(lambda: (exited.update(p.argv[-1] for p in processes.newly_exited())
                      or ending <= exited), "the four programs' exits")
    assert exited == ending  # reported once each, and not the one still sleeping
    assert processes.newly_exited() == []
    outcomes = processes.stop_all(grace_s=2)
    assert [o["failed"] for o in outcomes] == [True, True, True, False, False]
    assert "bad input" in outcomes[0]["log_tail"]
    assert outcomes[2]["exit_code"] == -signal.SIGSEGV
    assert failures(outcomes) == [
        "sh -c 'echo bad input; exit 3' on h1 exited with 3",
        f"no-such-program-anywhere on h1 exited with {outcomes[1]['exit_code']}",
        "sh -c 'kill -SEGV $$' on h1 killed by SIGSEGV"]


def test_a_program_that_fails_while_being_stopped_is_a_failure(tmp_path):
    processes = NodeProcesses("t0")
    mark_ready, wait_ready = ready_marker(tmp_path)
    start(processes, tmp_path, ["sh", "-c", "trap 'echo cleanup broke; exit 7' TERM; "
                                            f"{mark_ready}; while true; do sleep 0.05; done"])
    wait_ready()
    outcome, = processes.stop_all(grace_s=HANG_GUARD_S)
    assert outcome["stopped"] == "terminated" and outcome["exit_code"] == 7
    assert outcome["failed"] and "cleanup broke" in outcome["log_tail"]


def test_commands_get_their_run_directory(tmp_path):
    from experiments.rundir import RunDirectory
    from experiments.runner import Run, RunOptions

    loaded = scenarios.loads("""
name: placeholders
topology:
  nodes: {h1: {role: viewer}, h2: {role: edge}, s1: {role: switch}}
  links: [{endpoints: ["h1:eth1", "s1:eth1"]}, {endpoints: ["h2:eth1", "s1:eth2"]}]
workload:
  - {agent: command, nodes: [h1], command: ["sh", "-c", "echo {node} {ip} > {run_dir}/x-{{y}}"]}
""", environ={})
    run = Run(loaded, RunOptions(runs_root=tmp_path))
    run.run_dir = RunDirectory(tmp_path)
    argv = run._agent_argv(loaded.workload[0], "h1")
    assert argv == ["sh", "-c", f"echo h1 {loaded.nodes['h1'].ip.ip} > {tmp_path}/x-{{y}}"]


def process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (T: stopped)."""
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_a_stalled_node_stops_until_resumed_and_teardown_ends_it_cleanly(tmp_path):
    processes = NodeProcesses("t0")
    # It counts while it runs.
    script, wait_ready = closing_script(tmp_path, f"echo x >> {tmp_path}/ticks; sleep 0.02")
    started = start(processes, tmp_path, ["sh", script])
    wait_ready()
    ticks = tmp_path / "ticks"
    wait_for(ticks.exists, "the first tick")
    assert processes.stall("h1") == 1 and processes.stall("h2") == 0
    wait_for(lambda: process_state(started.process.pid) == "T", "the program stopped")
    stopped_at = ticks.stat().st_size
    time.sleep(0.2)  # stopped, it counts nothing, however long this takes
    assert ticks.stat().st_size == stopped_at
    assert processes.resume("h1") == 1
    wait_for(lambda: ticks.stat().st_size > stopped_at, "counting again")
    # Stalled at teardown: stop_all continues it first, so its SIGTERM trap runs.
    processes.stall("h1")
    stop_all_closes_cleanly(processes, tmp_path)
    assert processes.stalled == set()
