"""Concurrent runs cannot spoil each other silently: while one run holds the machine, a second
waits (saying for whom) or, with --no-wait, is refused; --concurrent runs share on purpose and
their summaries say so. The lock file is the test's own (EDGEBED_RUN_LOCK), so the test does
not depend on what else runs on the machine."""

from __future__ import annotations

import json
import os
import subprocess
import threading

from experiments import registry
from experiments.machine_lock import machine_lock
from tests.conftest import ROOT
from tests.integration.conftest import (EDGEBED, assert_nothing_left, edgebed, eventually,
                                        only_run_dir)
from tests.integration.test_runs import LINE, scenario_file


def test_a_second_run_waits_or_is_refused_while_the_machine_is_held(tmp_path, state_before):
    lock = tmp_path / "run.lock"
    environment = dict(os.environ, EDGEBED_RUN_LOCK=str(lock))
    path = scenario_file(tmp_path, LINE.format(duration="1s"))
    runs = tmp_path / "runs"
    with machine_lock("holder", "/somewhere", path=lock):
        refused = edgebed("run", str(path), "--runs-dir", str(runs), "--no-wait",
                          env=environment)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        refusal = " ".join(refused.stderr.split())
        assert "busy with run holder" in refusal and "--concurrent" in refusal
        assert not runs.exists()

        waiting = subprocess.Popen(EDGEBED + ["run", str(path), "--runs-dir", str(runs)],
                                   cwd=ROOT, env=environment, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []

        def read() -> None:
            for line in waiting.stdout:
                lines.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def said() -> str:
            return " ".join("".join(lines).split())  # the terminal output wraps

        # It says it waits, and then it does: still running, nothing made.
        eventually(lambda: "waiting for it to end" in said() or waiting.poll() is not None,
                   "the second run saying it waits")
        assert "busy with run holder" in said() and "waiting for it to end" in said(), said()
        assert waiting.poll() is None and not runs.exists(), "the second run did not wait"
    waiting.wait(timeout=120)
    reader.join(timeout=60)
    assert waiting.returncode == 0, said()
    run = only_run_dir(runs)
    assert_nothing_left(state_before, json.loads((run / "manifest.json").read_text())["prefix"])


def test_concurrent_runs_share_the_machine_and_say_so(tmp_path, state_before):
    environment = dict(os.environ, EDGEBED_RUN_LOCK=str(tmp_path / "run.lock"))
    path = scenario_file(tmp_path, LINE.format(duration="6s"))
    first = subprocess.Popen(EDGEBED + ["run", str(path), "--runs-dir", str(tmp_path / "a"),
                                        "--concurrent"], cwd=ROOT, env=environment,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # The second starts once the first has registered as a live run (its manifest comes
    # first; it runs for 6 s after its network is up, longer than the second takes to look).
    first_dir = eventually(lambda: next((tmp_path / "a").glob("*/manifest.json"), None),
                           "the first run's manifest").parent
    prefix = json.loads((first_dir / "manifest.json").read_text())["prefix"]
    eventually(lambda: prefix in registry.live_prefixes() or first.poll() is not None,
               "the first run registered")
    assert first.poll() is None, first.stdout.read()
    second = edgebed("run", str(path), "--duration", "1s", "--runs-dir", str(tmp_path / "b"),
                     "--concurrent", env=environment)
    output, _ = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, output + second.stdout
    summary = json.loads((only_run_dir(tmp_path / "b") / "summary.json").read_text())
    assert any("ran side by side" in w for w in summary["warnings"]), summary["warnings"]
    manifest = json.loads((only_run_dir(tmp_path / "b") / "manifest.json").read_text())
    assert manifest["concurrent"] is True
