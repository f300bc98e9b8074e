"""``edgebed run --cli`` works as plain Mininet does, seen through a real pty: commands answer
on the terminal and no spinner is drawn over the prompt; edgebed's own commands (``links``,
``impair``, ``placements``) act on the running network and its controller."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import subprocess
import time
from typing import Callable, Iterator

from tests.conftest import ROOT
from tests.integration.conftest import EDGEBED, assert_nothing_left, only_run_dir
from tests.integration.test_runs import LINE, scenario_file

PROMPT = b"mininet> "


def read_until(master: int, wanted: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    return seen


@contextlib.contextmanager
def cli_session(tmp_path, body: str, state_before) -> Iterator[Callable[[str], str]]:
    """``edgebed run --cli`` of ``body`` on a pty; yields ``send(command) -> what the terminal
    showed until the next prompt``. On leaving, types ``exit`` and checks the run ended well
    and left nothing behind."""
    path = scenario_file(tmp_path, body)
    runs = tmp_path / "runs"
    master, slave = pty.openpty()
    process = subprocess.Popen(EDGEBED + ["run", str(path), "--cli", "--runs-dir", str(runs)],
                               cwd=ROOT, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    try:
        before_prompt = read_until(master, PROMPT, 120)
        assert PROMPT in before_prompt, before_prompt
        # rich's spinner redraws with carriage returns and hides the cursor
        assert b"\x1b[?25l" not in before_prompt

        def send(command: str, timeout: float = 30) -> str:
            os.write(master, command.encode() + b"\n")
            answer = read_until(master, PROMPT, timeout)
            assert answer.endswith(PROMPT), answer  # the CLI is still there
            return answer.decode(errors="replace")

        yield send
        os.write(master, b"exit\n")
        rest = read_until(master, b"run directory", 60)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    assert process.returncode == 0, rest
    run = only_run_dir(runs)
    assert_nothing_left(state_before, json.loads((run / "manifest.json").read_text())["prefix"])


def test_cli_output_reaches_the_terminal(tmp_path, state_before):
    with cli_session(tmp_path, LINE.format(duration="60s"), state_before) as send:
        nodes = send("nodes")
        assert "v1" in nodes and "e1" in nodes, nodes
        ping = send("v1 ping -c 2 10.9.0.2")
        assert "2 packets transmitted, 2 received" in ping, ping


def min_rtt_ms(ping_output: str) -> float:
    """The smallest RTT of a ping run: the first packet's ARP and any scheduling hiccup of a
    loaded machine only ever add to the others."""
    summary = re.search(r"rtt min/avg/max/mdev = ([\d.]+)/", ping_output)
    assert summary, ping_output
    return float(summary.group(1))


# The middle link starts with a 1 ms delay, so that with the fallback backend (no sch_netem)
# it is built with a wire and can take any delay live.
DELAYED_LINE = LINE.replace('- endpoints: ["s1:eth2", "s2:eth2"]',
                            '- {{endpoints: ["s1:eth2", "s2:eth2"], delay: 1ms}}')


def test_impair_changes_the_delay_a_ping_measures_and_refuses_bad_values(tmp_path,
                                                                         state_before):
    assert DELAYED_LINE != LINE
    with cli_session(tmp_path, DELAYED_LINE.format(duration="60s"), state_before) as send:
        links = send("links")
        assert re.search(r"s1:eth2 - s2:eth2 +up .*delay=1ms +delay=1ms", links), links
        before = min_rtt_ms(send("v1 ping -n -c 5 -i 0.2 10.9.0.2"))
        changed = send("impair s1:eth2 delay=40ms")
        assert "s1:eth2 - s2:eth2 forward: delay=40ms" in changed, changed
        assert "s1:eth2 - s2:eth2 reverse: delay=40ms" in changed, changed
        after = min_rtt_ms(send("v1 ping -n -c 5 -i 0.2 10.9.0.2"))
        # 40 ms each way on the middle link: the RTT rises by 2 x 39 ms. The relay never
        # sends early, so 80 ms is a floor. Above it, the smallest of five RTTs has what the
        # path itself costs on this machine, measured the same way just before (``before``,
        # the 1 ms links included), and stays within 20 ms of that unless every one of the
        # five was held up: a delay set twice over or kept at 1 ms is far outside.
        assert 80 <= after and after - before < 78 + 20, (before, after)
        assert before < 10, before

        for bad, why in (("impair s1:eth2 delay=fast", "delay:"),
                         ("impair s1:eth2 jitter=90ms", "jitter 90ms is larger"),
                         ("impair s1:eth2 dealy=5ms", "did you mean 'delay'"),
                         ("impair", "usage: impair"),
                         ("impair s9:eth1 delay=5ms", "no link has endpoint 's9:eth1'")):
            answer = send(bad)
            assert "*** impair:" in answer and why in answer and "nothing changed" in answer, \
                answer
        links = send("links")
        assert re.search(r"s1:eth2 - s2:eth2 +up .*delay=40ms +delay=40ms", links), links
        assert min_rtt_ms(send("v1 ping -n -c 3 -i 0.2 10.9.0.2")) >= 80
        assert "Usage: impair LINK key=value" in send("help impair")


SERVICE = """
name: placed
duration: 60s
topology:
  subnet: 10.9.0.0/24
  nodes:
    v1: {role: viewer}
    e[1-2]: {role: edge}
    s1: {role: switch}
  links:
    - endpoints: ["v1:eth1", "s1:eth1"]
    - endpoints: ["e[1-2]:eth1", "s1:eth[2-3]"]
controller:
  app: edgebed
  services:
    video: {address: 10.9.0.200, port: 5004, servers: ["role:edge"]}
workload:
  - agent: streamer
    nodes: [v1]
    params: {to: video, bitrate: 1Mbps, fps: 30, gop: 30, duration: 50s}
"""


def test_placements_shows_where_the_controller_placed_a_flow(tmp_path, state_before):
    with cli_session(tmp_path, SERVICE, state_before) as send:
        deadline = time.monotonic() + 20
        shown = send("placements")
        while "v1/video" not in shown and time.monotonic() < deadline:
            time.sleep(0.5)  # the streamer's first packet is what gets the flow placed
            shown = send("placements")
        assert re.search(r"v1/video +v1 +video +e[12] ", shown), shown
        assert "servers" in shown and "e1" in shown and "e2" in shown, shown
