"""Programs of a run, started and stopped the way the runner does, for real: through Mininet's
``Host.popen`` and ``mnexec``. The host stand-in is this test's own namespace (``mnexec -a``
to our own pid), so no network is needed; everything else is the real code path."""

from __future__ import annotations

import os
import shutil
import signal
import time

import pytest
from mininet.node import Node

from agents.processes import NodeProcesses, failures

pytestmark = pytest.mark.skipif(shutil.which("mnexec") is None, reason="mnexec (Mininet) missing")


class ThisNamespace:
    """Enough of a Mininet host for ``Node.popen``: its namespaces are those of this process."""

    pid = os.getpid()
    popen = Node.popen
    _popen = Node._popen


def start(processes: NodeProcesses, tmp_path, argv, **kwargs):
    return processes.start(ThisNamespace(), "h1", argv, tmp_path / "h1.log", **kwargs)


def test_shell_children_get_sigterm_and_time_to_finish(tmp_path):
    processes = NodeProcesses("t0")
    # The child traps SIGTERM, takes 0.3 s to write its closing line, then exits 0.
    child = tmp_path / "child.sh"
    child.write_text(f"trap 'sleep 0.3; echo flushed > {tmp_path}/closing; exit 0' TERM\n"
                     "while true; do sleep 0.05; done\n")
    started = start(processes, tmp_path, ["sh", "-c", f"sh {child} & wait"])
    time.sleep(0.5)
    outcomes = processes.stop_all(grace_s=3)
    assert (tmp_path / "closing").read_text() == "flushed\n"
    assert outcomes[0]["stopped"] == "terminated" and not outcomes[0]["failed"], outcomes
    with pytest.raises(ProcessLookupError):
        os.killpg(started.group, 0)  # nothing of the group is left to report


def test_group_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    processes = NodeProcesses("t0")
    started = start(processes, tmp_path, ["sh", "-c", "trap '' TERM; sleep 30 & wait; sleep 30"])
    time.sleep(0.3)
    begun = time.monotonic()
    outcomes = processes.stop_all(grace_s=0.5)
    assert 0.5 <= time.monotonic() - begun < 3
    assert outcomes[0]["stopped"] == "killed"
    with pytest.raises(ProcessLookupError):
        os.killpg(started.group, 0)


def test_children_of_a_program_that_already_ended_are_stopped(tmp_path):
    processes = NodeProcesses("t0")
    started = start(processes, tmp_path, ["sh", "-c", "sleep 30 & exit 0"])
    time.sleep(0.3)
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
    start(processes, tmp_path, ["sleep", "30"])
    time.sleep(0.5)
    assert {p.argv[-1] for p in processes.newly_exited()} == {
        "echo bad input; exit 3", "no-such-program-anywhere", "kill -SEGV $$", "exit 5"}
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
    start(processes, tmp_path, ["sh", "-c", "trap 'echo cleanup broke; exit 7' TERM; "
                                            "while true; do sleep 0.05; done"])
    time.sleep(0.3)
    outcome, = processes.stop_all(grace_s=2)
    assert outcome["stopped"] == "terminated" and outcome["exit_code"] == 7
    assert outcome["failed"] and "cleanup broke" in outcome["log_tail"]


def test_commands_get_their_run_directory(tmp_path):
    from experiments.rundir import RunDirectory
    from experiments.runner import Run, RunOptions
    from topologies import scenario

    loaded = scenario.loads("""
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
