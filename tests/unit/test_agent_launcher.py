"""The agent launcher for real: agents forked into a Mininet host's namespaces (a bare node, no
links), through the process table the runner uses, with their exits, stops, environment and
logs."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import threading

import pytest

from agents import catalog
from agents.agent import Agent
from agents.launched import AgentLauncher, LauncherError
from agents.processes import NodeProcesses
from edgebed import clock
from tests.conftest import wait_until
from tests.unit.test_media_agents import HANG_GUARD_S

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mnexec") is None,
                                reason="needs root and mnexec (Mininet)")

AGENT = "tests.unit.launcher_agent"
PREFIX = "t0"


@pytest.fixture
def host():
    from mininet.node import Node

    node = Node(f"lt{secrets.token_hex(3)}")
    yield node
    node.terminate()


@pytest.fixture
def launcher(tmp_path):
    started = AgentLauncher([AGENT], PREFIX, tmp_path / "launcher.log")
    started.wait_ready(HANG_GUARD_S * 10)
    yield started
    started.stop()


def argv(*arguments: str) -> list[str]:
    return ["python", "-m", AGENT, *arguments]


def reported(log) -> dict:
    return json.loads(next(line for line in log.read_text().splitlines()
                           if line.startswith("{")))


def test_an_agent_runs_in_its_host_with_its_environment_and_log(host, launcher, tmp_path):
    processes = NodeProcesses(PREFIX)
    log = tmp_path / "h1.log"
    started = processes.start(host, "h1", argv("exit", "3"), log, {"ONLY_HERE": "yes"},
                              launcher=launcher)
    wait_until(lambda: processes.newly_exited() == [started], "the agent's exit", HANG_GUARD_S)
    assert started.process.returncode == 3
    said = reported(log)
    assert said["net"] == os.stat(f"/proc/{host.pid}/ns/net").st_ino
    assert said["net"] != os.stat("/proc/self/ns/net").st_ino
    assert said["mnt"] == os.stat(f"/proc/{host.pid}/ns/mnt").st_ino
    assert said["pid"] == said["group"] == said["session"] == started.group
    assert said["environment"]["ONLY_HERE"] == "yes"
    assert said["environment"]["EDGEBED_RUN"] == PREFIX
    assert "OPENBLAS_NUM_THREADS" not in said["environment"]  # the launcher's, not the agent's
    assert said["cwd"] == os.getcwd() and said["argv"] == ["exit", "3"]
    assert not said["scapy"]  # nothing the launcher loaded reads the root namespace's routes
    assert log.read_text().startswith("--- ")  # the table's header, then the agent's output
    outcome, = processes.stop_all(grace_s=HANG_GUARD_S)
    assert outcome["stopped"] == "exited" and outcome["exit_code"] == 3 and outcome["failed"]


def test_an_agent_of_a_host_with_a_cpu_limit_runs_in_its_cgroup(launcher, tmp_path):
    from topologies.cpu_limits import CpuLimit, CpuLimitedHost

    name = f"lt{secrets.token_hex(3)}"
    limit = CpuLimit(name, 0.5)
    limited = CpuLimitedHost(name, limit)
    try:
        started = launcher.launch(limited, argv("exit", "0"), {}, tmp_path / "h1.log")
        assert started.wait() == 0
        assert f"/{name}\n" in reported(tmp_path / "h1.log")["cgroup"]
    finally:
        limited.terminate()
        limit.remove()


def test_stopping_ends_the_agents_whole_group(host, launcher, tmp_path):
    processes = NodeProcesses(PREFIX)
    log = tmp_path / "h1.log"
    started = processes.start(host, "h1", argv("wait", "0"), log, launcher=launcher)
    wait_until(lambda: "child" in log.read_text(), "the agent's report", HANG_GUARD_S)
    child = reported(log)["child"]
    assert os.getpgid(child) == started.group
    outcome, = processes.stop_all(grace_s=HANG_GUARD_S)
    assert outcome["stopped"] == "terminated" and outcome["exit_code"] == -signal.SIGTERM
    assert not outcome["failed"]
    with pytest.raises(ProcessLookupError):
        os.killpg(started.group, 0)


def test_a_parked_agent_waits_in_its_agent_until_its_start_after_the_origin(host, launcher,
                                                                            tmp_path):
    """Forked and entered at once, it gets past its Agent only at its start: 0.2 s after the
    origin given later, with the variables given then; it never starts before."""
    processes = NodeProcesses(PREFIX)
    log = tmp_path / "h1.log"
    started = processes.start(host, "h1", argv("agent", "--node", "h1", "--out", str(tmp_path)),
                              log, launcher=launcher, start_after_s=0.2)
    assert "parked, to start at t=0.2s" in log.read_text()
    origin_ns = clock.monotonic_ns()
    assert launcher.unpark(origin_ns, {"FROM_THE_ORIGIN": "on"}) == 1
    assert started.process.wait() == 0
    said = reported(log)
    assert said["started_ns"] >= origin_ns + 200_000_000
    assert said["environment"]["FROM_THE_ORIGIN"] == "on"
    assert launcher.unpark(origin_ns, {}) == 0  # each agent is unparked once


def test_a_parked_agent_the_run_stops_first_ends_as_one_still_starting(host, launcher,
                                                                       tmp_path):
    processes = NodeProcesses(PREFIX)
    processes.start(host, "h1", argv("agent", "--node", "h1", "--out", str(tmp_path)),
                    tmp_path / "h1.log", launcher=launcher, start_after_s=0.0)
    outcome, = processes.stop_all(grace_s=HANG_GUARD_S)
    assert outcome["stopped"] == "terminated" and outcome["exit_code"] == -signal.SIGTERM


def test_what_the_launcher_cannot_start_is_refused(host, launcher, tmp_path):
    with pytest.raises(LauncherError, match="not an agent"):
        launcher.launch(host, ["python", "-m", "agents.viewer"], {}, tmp_path / "x.log")
    gone = type("Gone", (), {"pid": 2 ** 22 + 1})()  # above any pid the kernel hands out
    with pytest.raises(LauncherError, match="could not enter its host"):
        launcher.launch(gone, argv("exit", "0"), {}, tmp_path / "x.log")
    started = launcher.launch(host, argv("exit", "0"), {}, tmp_path / "x.log")
    assert started.wait() == 0  # and it still serves


def test_a_launcher_that_dies_kills_its_agents_and_says_so(host, launcher, tmp_path):
    processes = NodeProcesses(PREFIX)
    log = tmp_path / "h1.log"
    started = processes.start(host, "h1", argv("wait", "0"), log, launcher=launcher)
    wait_until(lambda: "child" in log.read_text(), "the agent's report", HANG_GUARD_S)
    launcher.process.kill()
    assert started.process.wait() == -signal.SIGKILL
    assert "ended (exit code -9" in launcher.failure and "1 agents running" in launcher.failure
    wait_until(lambda: not _group_exists(started.group), "the group's end", HANG_GUARD_S)
    with pytest.raises(LauncherError, match="ended"):
        launcher.launch(host, argv("exit", "0"), {}, tmp_path / "x.log")


def test_a_launcher_given_no_agent_fails_before_it_is_ready(tmp_path):
    launcher = AgentLauncher(["agents.processes"], PREFIX, tmp_path / "launcher.log")
    with pytest.raises(LauncherError, match="exit code 2"):
        launcher.wait_ready(HANG_GUARD_S * 10)
    assert "not agent modules: agents.processes" in (tmp_path / "launcher.log").read_text()
    launcher.stop()


def _group_exists(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


class _AtTheGate(Exception):
    pass


@pytest.mark.parametrize("name", sorted(catalog.modules()))
def test_every_agent_constructs_its_agent_first(name, monkeypatch, tmp_path):
    """A parked agent waits in its Agent's construction: an agent that opened sockets or
    started threads before it would do so before its start."""
    def gate(self, *args, **kwargs):
        raise _AtTheGate

    monkeypatch.setattr(Agent, "__init__", gate)
    before = set(os.listdir("/proc/self/fd")), threading.active_count()
    with pytest.raises(_AtTheGate):
        catalog.modules()[name].main(["--node", "h1", "--out", str(tmp_path)])
    assert (set(os.listdir("/proc/self/fd")), threading.active_count()) == before
