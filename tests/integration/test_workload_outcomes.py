"""What a run's programs do is never silent: a workload that fails fails the run, shell
children are stopped politely with their shell, and commands learn their run directory."""

from __future__ import annotations

import json
import re

from tests.integration.conftest import assert_nothing_left, edgebed, only_run_dir
from tests.integration.test_runs import LINE, scenario_file


def run_line(tmp_path, workload: str, duration: str = "3s"):
    path = scenario_file(tmp_path, LINE.format(duration=duration) + "workload:\n" + workload)
    runs = tmp_path / "runs"
    result = edgebed("run", str(path), "--runs-dir", str(runs))
    run = only_run_dir(runs)
    return result, run, json.loads((run / "summary.json").read_text())


def test_failed_workloads_fail_the_run_with_their_logs(tmp_path, state_before):
    result, run, summary = run_line(tmp_path, """
  - {agent: command, nodes: [v1], command: ["sh", "-c", "echo about to fail; exit 3"]}
  - {agent: command, nodes: [e1], command: "no-such-program-anywhere --flag"}
  - {agent: command, nodes: [e1], command: ["sh", "-c", "exit 4"], may_fail: true}
  - {agent: command, nodes: [v1], command: ["python3", "-c", "raise SystemExit(open('/nonexistent'))"]}
  - {agent: command, nodes: [e1], command: sleep 600}
""")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output.split("log tail")[0]
    assert summary["status"] == "failed"
    failed = {(p["node"], p["command"]): p for p in summary["failed_processes"]}
    assert set(failed) == {("v1", "sh -c 'echo about to fail; exit 3'"),
                           ("e1", "no-such-program-anywhere --flag"),
                           ("v1", "python3 -c 'raise SystemExit(open('\"'\"'/nonexistent'\"'\"'))'")}
    shell = failed[("v1", "sh -c 'echo about to fail; exit 3'")]
    assert shell["exit_code"] == 3 and "about to fail" in shell["log_tail"]
    assert any("FileNotFoundError" in line for line in
               failed[("v1", "python3 -c 'raise SystemExit(open('\"'\"'/nonexistent'\"'\"'))'")]
               ["log_tail"])
    allowed = [p for p in summary["processes"] if p["may_fail"]]
    assert allowed[0]["exit_code"] == 4 and not allowed[0]["failed"]
    sleeper = [p for p in summary["processes"] if p["command"] == "sleep 600"][0]
    assert sleeper["stopped"] == "terminated" and not sleeper["failed"]
    assert "3 workload processes failed" in summary["error"]
    assert "line: failed" in result.stdout and "exited with 3" in result.stdout
    assert "about to fail" in result.stdout  # the tail of its log, on the terminal
    assert_nothing_left(state_before, summary["prefix"])


def test_shell_children_get_sigterm_and_finish(tmp_path, state_before):
    """tcpdump under ``sh -c`` gets the run's SIGTERM and writes its closing statistics and
    its file; nothing is left behind to be killed."""
    result, run, summary = run_line(tmp_path, """
  - agent: command
    nodes: [e1]
    command: ["sh", "-c", "tcpdump -n -U -i eth1 -c 100000 -w {run_dir}/{node}.pcap icmp 2> $EDGEBED_RUN_DIR/tcpdump.txt"]
  - {agent: command, nodes: [v1], start: 1s, command: "ping -n -i 0.2 10.9.0.2"}
""")
    assert result.returncode == 0, result.stdout + result.stderr
    statistics = (run / "tcpdump.txt").read_text()
    captured = int(re.search(r"(\d+) packets captured", statistics).group(1))
    assert captured >= 10, statistics  # echo requests and replies over about 2 s
    assert (run / "e1.pcap").stat().st_size > 24 + 10 * 16
    assert all(p["stopped"] == "terminated" for p in summary["processes"]), summary["processes"]
    assert summary["leftovers_removed"] == "nothing"
    assert "left behind after teardown: nothing" in result.stdout
    assert_nothing_left(state_before, summary["prefix"])
