"""``edgebed run --cli`` works as plain Mininet does, seen through a real pty: commands answer
on the terminal and no spinner is drawn over the prompt."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time

from tests.conftest import ROOT
from tests.integration.conftest import EDGEBED, assert_nothing_left, only_run_dir
from tests.integration.test_runs import LINE, scenario_file


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


def test_cli_output_reaches_the_terminal(tmp_path, state_before):
    path = scenario_file(tmp_path, LINE.format(duration="60s"))
    runs = tmp_path / "runs"
    master, slave = pty.openpty()
    process = subprocess.Popen(EDGEBED + ["run", str(path), "--cli", "--runs-dir", str(runs)],
                               cwd=ROOT, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    try:
        before_prompt = read_until(master, b"mininet> ", 120)
        assert b"mininet> " in before_prompt, before_prompt
        # rich's spinner redraws with carriage returns and hides the cursor
        assert b"\x1b[?25l" not in before_prompt
        os.write(master, b"nodes\n")
        nodes = read_until(master, b"mininet> ", 30)
        assert b"v1" in nodes and b"e1" in nodes, nodes
        os.write(master, b"v1 ping -c 2 10.9.0.2\n")
        ping = read_until(master, b"mininet> ", 30)
        assert b"2 packets transmitted, 2 received" in ping, ping
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
