"""Experiment cells on a local pool and on a Dask cluster: the same results.csv as in one
process, a killed worker's cell rerun and written once, the emulated cells' lane, and an
unreachable cluster refused before anything is written.

The cluster is a real ``distributed.LocalCluster`` of two worker processes (each under its
nanny, as ``dask worker`` runs them), reached by its address as ``--cluster`` reaches a remote
one. The held kind is test-only, written at test time into a directory appended to
``experiments.kinds``' path (as tests/unit/test_adding_a_scheme.py does); the workers find it
through a Dask preload script that appends the same directory in each worker process.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import experiments.kinds
from experiments.cli import main
from experiments.sweeps import executors
from experiments.sweeps import experiment as experiments_file
from experiments.sweeps.executors import ClusterUnavailable, Dask, Serial, batches, executor_for
from experiments.sweeps.kinds import Kind
from experiments.sweeps.runner import RESULTS, read_results, run

HELD_KIND = '''
"""Test-only kind: a draw from the cell's seed per period. The first repetition of policy a at
``requests`` = ``hold`` announces each attempt at it in ``gate`` (a file named after its
worker's pid) and waits for ``gate``/release; cells at ``requests`` = ``fail`` raise."""
import os
import time
import uuid
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from experiments.sweeps.kinds import Kind, Metric


class Parameters(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    requests: int = 1
    hold: int = 0
    gate: str = ""
    fail: int = 0
    periods: int = 2


def run_cell(cell):
    p = cell.parameters
    if p.requests == p.fail:
        raise ValueError(f"cell at requests={p.requests} fails on purpose")
    if (p.requests, cell.policy, cell.repetition) == (p.hold, "a", 0):
        gate = Path(p.gate)
        (gate / f"started-{os.getpid()}-{uuid.uuid4().hex}").touch()
        deadline = time.monotonic() + 120
        while not (gate / "release").exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"nobody released {gate}")
            time.sleep(0.02)
    rng = np.random.default_rng(cell.seed)
    return [{"draw": float(rng.random()) * p.requests} for _ in range(p.periods)]


KINDS = (Kind(name="held_model", parameters=Parameters, policies=("a", "b"), run=run_cell,
              metrics=(Metric("draw", "a draw from the cell's seed"),), plots=("draw",)),)
'''

HELD_EXPERIMENT = """
name: held
kind: held_model
seed: 5
repetitions: 2
policies: [a, b]
base: {{hold: 3, gate: "{gate}"}}
sweeps:
  - name: requests
    vary: requests
    values: [1, 2, 3, 4]
"""

# live_edge at model level on a small grid: 2 values x 2 repetitions x 2 policies = 8 cells.
LIVE_EDGE_EXPERIMENT = """
name: live-edge-small
kind: live_edge_model
seed: 2023
repetitions: 2
policies: [lua, df]
base: {viewers: 10, servers: 2, periods: 2}
sweeps:
  - name: viewers
    vary: viewers
    values: [10, 15]
"""
WALL_CLOCK = ["decision_ms"]  # measured time, different in every run


@pytest.fixture(scope="module")
def held_kind(tmp_path_factory):
    """The held kind's module in a directory on ``experiments.kinds``' path, and a Dask
    preload script putting the same directory there in a worker."""
    directory = tmp_path_factory.mktemp("kinds")
    (directory / "held.py").write_text(textwrap.dedent(HELD_KIND))
    preload = directory.parent / f"{directory.name}-preload.py"
    preload.write_text(f"import experiments.kinds\n\n"
                       f"experiments.kinds.__path__.append({str(directory)!r})\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiments.kinds, "__path__", [*experiments.kinds.__path__,
                                                      str(directory)])
        yield preload
    sys.modules.pop("experiments.kinds.held", None)


@pytest.fixture(scope="module")
def cluster(held_kind):
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, scheduler_kwargs={"dashboard_address": ":0"},
                      preload=[str(held_kind)]) as local:
        yield local


def results_table(path: Path, kind: Kind, ignore: list[str] = ()) -> pd.DataFrame:
    """``results.csv`` in a canonical row order (the pool writes cells as they finish)."""
    table = read_results(path, kind).drop(columns=list(ignore))
    return table.sort_values(["cell", "period"]).reset_index(drop=True)


def wait_for(condition, running: threading.Thread, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert running.is_alive(), "the run ended before the held cell started"
        assert time.monotonic() < deadline, "the held cell did not start"
        time.sleep(0.02)
    return found


def test_a_killed_workers_cell_is_rerun_and_counted_once(cluster, tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    source = tmp_path / "held.yaml"
    source.write_text(HELD_EXPERIMENT.format(gate=gate))
    exit_codes = []
    running = threading.Thread(target=lambda: exit_codes.append(main(
        ["experiment", str(source), "--out", str(tmp_path / "cluster"),
         "--cluster", cluster.scheduler_address])))
    running.start()
    try:
        [started] = wait_for(lambda: list(gate.glob("started-*")), running)
        worker_pid = int(started.name.split("-")[1])
        assert worker_pid != os.getpid()
        os.kill(worker_pid, signal.SIGKILL)  # mid-cell: the held cell cannot finish before
    finally:
        (gate / "release").touch()
        running.join(timeout=120)
    assert exit_codes == [0]
    attempts = sorted(gate.glob("started-*"))
    assert len(attempts) == 2, "the held cell was not rerun after its worker was killed"
    assert len({attempt.name.split("-")[1] for attempt in attempts}) == 2  # two processes

    assert main(["experiment", str(source), "--out", str(tmp_path / "serial"),
                 "--workers", "1"]) == 0
    kind = experiments_file.loads(source.read_text(), str(source)).kind
    on_cluster = results_table(tmp_path / "cluster" / RESULTS, kind)
    in_one_process = results_table(tmp_path / "serial" / RESULTS, kind)
    assert not on_cluster.duplicated(["cell", "period"]).any()
    assert len(on_cluster) == 16 * 2
    pd.testing.assert_frame_equal(on_cluster, in_one_process)


def test_a_failing_cell_fails_the_run_and_the_finished_cells_stay(cluster, tmp_path, capsys):
    source = tmp_path / "failing.yaml"
    source.write_text(HELD_EXPERIMENT.format(gate=tmp_path).replace("hold: 3", "fail: 4"))
    with pytest.raises(ValueError, match="requests=4 fails on purpose"):
        main(["experiment", str(source), "--out", str(tmp_path / "out"),
              "--cluster", cluster.scheduler_address])
    kind = experiments_file.loads(source.read_text()).kind
    written = read_results(tmp_path / "out" / RESULTS, kind)
    assert set(written["value"]) <= {"1", "2", "3"}
    assert not written.duplicated(["cell", "period"]).any()


def test_the_local_pool_writes_the_table_one_process_writes_and_resumes(tmp_path, capsys):
    source = tmp_path / "live-edge-small.yaml"
    source.write_text(LIVE_EDGE_EXPERIMENT)
    pool, serial = tmp_path / "pool", tmp_path / "serial"
    assert main(["experiment", str(source), "--out", str(pool), "--workers", "2"]) == 0
    assert "8 cells run, 0 already" in capsys.readouterr().out
    assert main(["experiment", str(source), "--out", str(serial), "--workers", "1"]) == 0
    kind = experiments_file.loads(LIVE_EDGE_EXPERIMENT).kind
    pd.testing.assert_frame_equal(results_table(pool / RESULTS, kind, WALL_CLOCK),
                                  results_table(serial / RESULTS, kind, WALL_CLOCK))
    assert main(["experiment", str(source), "--out", str(pool), "--workers", "2"]) == 0
    assert "0 cells run, 8 already" in capsys.readouterr().out


def test_an_unreachable_cluster_is_refused_naming_the_address(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT_S", 1.0)
    source = tmp_path / "live-edge-small.yaml"
    source.write_text(LIVE_EDGE_EXPERIMENT)
    out = tmp_path / "out"
    for address in ("tcp://127.0.0.1:1", "no-port-here"):
        assert main(["experiment", str(source), "--out", str(out), "--cluster", address]) == 2
        assert f"cannot reach the Dask scheduler at {address}" in capsys.readouterr().err
    assert not out.exists()


def test_a_cell_that_comes_back_twice_is_written_once(tmp_path):
    class Twice(Serial):
        """As a cluster does after losing a worker that had finished a batch."""

        def results(self, run, cells, emulated):
            for cell, rows in super().results(run, cells, emulated):
                yield cell, rows
                yield cell, rows

    experiment = experiments_file.loads(LIVE_EDGE_EXPERIMENT)
    outcome = run(experiment, tmp_path, executor=Twice())
    assert (outcome.ran, outcome.reused) == (8, 0)
    results = read_results(tmp_path / RESULTS, experiment.kind)
    assert len(results) == 8 * 2
    assert not results.duplicated(["cell", "period"]).any()


def test_emulated_cells_take_the_serial_lane_or_a_machine_of_the_cluster(cluster, tmp_path):
    emulated = experiments.kinds.registered()["live_edge_emulation"]
    model = experiments.kinds.registered()["live_edge_model"]
    assert emulated.emulated and not model.emulated
    assert isinstance(executor_for(emulated, workers=2), Serial)
    assert isinstance(executor_for(model, workers=1), Serial)
    assert isinstance(executor_for(model, workers=2), Dask)
    # The test cluster's workers declare no machine: emulated cells are refused before
    # anything is written, saying how to start a worker that takes them.
    experiment = experiments_file.load(Path(__file__).resolve().parents[2]
                                       / "experiments" / "live_edge" / "emulation.yaml")
    with executor_for(emulated, cluster=cluster.scheduler_address) as executor:
        with pytest.raises(ClusterUnavailable, match="--resources machine=1") as refused:
            run(experiment, tmp_path / "out", executor=executor)
    assert cluster.scheduler_address in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_batches_are_single_emulated_cells_and_dealt_model_level_ones():
    cells = list(experiments_file.loads(LIVE_EDGE_EXPERIMENT).cells()) * 200  # 1600
    assert {len(batch) for batch in batches(cells, 2, emulated=True)} == {1}
    model = batches(cells, 2, emulated=False)
    assert sorted(id(cell) for batch in model for cell in batch) == sorted(map(id, cells))
    assert {len(batch) for batch in model} == {executors.MAX_CELLS_PER_BATCH}
    assert len(batches(cells[:32], 2, emulated=False)) == 16
