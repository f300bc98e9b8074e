"""An experiment's cells in one process against the local pool of worker processes.

The model-level live_edge experiment (experiments/live_edge/model.yaml: 2,360 cells of 5
periods, the exact MILP's 120 among them), run into a fresh results.csv once in this process
(``--workers 1``) and once on the local Dask pool (the default of ``edgebed experiment``), side
by side in one run, alternating which goes first over ``--rounds``. The pool's time includes
starting and stopping its worker processes. Both tables are then compared, the wall-clock
column (``decision_ms``) left out: the pool must write what one process writes.

Goal: the pool on 2 cores at least 1.7x faster. The machine may be shared: others' load takes
cores from the pool, and the ratio with them; the table shows the load average around the run.
With the kernel's autogroup on (``/proc/sys/kernel/sched_autogroup_enabled``, the title says),
CPU time is shared between sessions, not processes: on a machine busy with other sessions the
pool's two workers together get about the share the one process got, and the ratio falls
toward 1 whatever the pool does. Only a quiet machine measures the pool. Even a quiet
machine's cores may not add up: a virtual machine's two may be one core's hyperthreads or
shared with the host's other guests. The run therefore also measures the machine's own ceiling
(two copies of a CPU-bound loop at once against one, before and after) and says how much of it
the pool reached.

    .venv/bin/python benchmarks/sweeps.py [--workers N] [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recorder import Recording  # noqa: E402
from experiments.sweeps import experiment as experiments_file  # noqa: E402
from experiments.sweeps.executors import Dask, Executor, Serial, cores  # noqa: E402
from experiments.sweeps.runner import RESULTS, read_results, run  # noqa: E402

EXPERIMENT = ROOT / "experiments" / "live_edge" / "model.yaml"
WALL_CLOCK = ["decision_ms"]


def timed_run(experiment, executor: Executor, out: Path) -> tuple[float, float]:
    """Wall and this process's CPU seconds of one run into ``out``."""
    wall, cpu = time.perf_counter(), time.process_time()
    with executor:
        outcome = run(experiment, out, executor=executor, console=Console(quiet=True))
    assert outcome.ran == len({cell.id for cell in experiment.cells()})
    return time.perf_counter() - wall, time.process_time() - cpu


def autogroup() -> str:
    try:
        return "on" if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1" \
            else "off"
    except OSError:
        return "unknown"


def spin(iterations: int, start: multiprocessing.synchronize.Barrier | None = None,
         out: multiprocessing.queues.Queue | None = None) -> float:
    """Wall seconds of a pure-Python loop (CPU-bound work that shares nothing), begun once
    every copy is at ``start``; put on ``out`` when given."""
    if start is not None:
        start.wait()
    started = time.perf_counter()
    total = 0
    for step in range(iterations):
        total += step
    wall = time.perf_counter() - started
    if out is not None:
        out.put(wall)
    return wall


def parallel_ceiling(workers: int, iterations: int = 20_000_000) -> float:
    """What ``workers`` processes give on this machine for work that shares nothing: the
    loop's throughput with ``workers`` copies at once (started together, forked so no start-up
    is counted) over one copy alone. A virtual machine's cores may be hyperthreads or shared
    with its host's other guests; this is the most any pool can reach here, measured in the
    same run as the pool."""
    alone = spin(iterations)
    context = multiprocessing.get_context("fork")
    start, out = context.Barrier(workers), context.Queue()
    copies = [context.Process(target=spin, args=(iterations, start, out))
              for _ in range(workers)]
    for copy in copies:
        copy.start()
    walls = [out.get() for _ in copies]
    for copy in copies:
        copy.join()
    return workers * alone / max(walls)


def table(path: Path, kind) -> pd.DataFrame:
    results = read_results(path, kind).drop(columns=WALL_CLOCK)
    return results.sort_values(["cell", "period"]).reset_index(drop=True)


def main() -> int:
    recording = Recording(__file__, __doc__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=cores())
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--quick", action="store_true",
                        help="the experiment's --quick subset (2 repetitions, first and last "
                             "value of each sweep) instead of all of it")
    arguments = parser.parse_args()
    experiment = experiments_file.load(EXPERIMENT)
    if arguments.quick:
        experiment = experiment.quick_version()
    cells = len(list(experiment.cells()))
    modes = {"one process": Serial, f"local pool, {arguments.workers} workers":
             lambda: Dask.local(arguments.workers)}
    walls = {mode: [] for mode in modes}
    cpus = {mode: [] for mode in modes}
    load_before = os.getloadavg()[0]
    ceilings = [parallel_ceiling(arguments.workers)]
    with tempfile.TemporaryDirectory(prefix="edgebed-bench-sweeps-") as scratch:
        for round_number in range(arguments.rounds):
            order = list(modes) if round_number % 2 == 0 else list(reversed(modes))
            for mode in order:
                out = Path(scratch) / f"{round_number}-{mode.split(',')[0].replace(' ', '-')}"
                wall, cpu = timed_run(experiment, modes[mode](), out)
                walls[mode].append(wall)
                cpus[mode].append(cpu)
        serial, pool = (Path(scratch) / f"0-{name}" for name in ("one-process", "local-pool"))
        same = table(serial / RESULTS, experiment.kind).equals(
            table(pool / RESULTS, experiment.kind))
    ceilings.append(parallel_ceiling(arguments.workers))
    load_after = os.getloadavg()[0]

    serial_mode, pool_mode = modes
    out = Table(title=f"{EXPERIMENT.name}{' --quick' if arguments.quick else ''}: {cells} "
                      f"cells, {arguments.rounds} round(s), {cores()} cores; load average "
                      f"{load_before:.1f} before, {load_after:.1f} after; autogroup "
                      f"{autogroup()}",
                title_justify="left")
    for column in ("executor", "wall s (best)", "wall s (all)", "cells/s", "parent CPU s",
                   "speed-up"):
        out.add_column(column)
    best_serial = min(walls[serial_mode])
    for mode in modes:
        best = min(walls[mode])
        out.add_row(mode, f"{best:.1f}", " ".join(f"{w:.1f}" for w in walls[mode]),
                    f"{cells / best:.1f}", f"{min(cpus[mode]):.1f}",
                    f"{best_serial / best:.2f}x")
    console = Console()
    console.print(recording.table(out))
    ratio = best_serial / min(walls[pool_mode])
    ceiling = max(ceilings)
    console.print(f"this machine's ceiling for {arguments.workers} processes (a CPU-bound loop, "
                  f"{arguments.workers} copies at once against one, before and after): "
                  f"{' and '.join(f'{c:.2f}x' for c in ceilings)}")
    console.print(f"goal: local pool >= 1.7x one process on 2 cores: "
                  f"{'met' if ratio >= 1.7 else 'NOT met'} ({ratio:.2f}x"
                  f"{'; the machine itself gives at most ' + f'{ceiling:.2f}x' if ceiling < 1.7 else ''}"
                  f"); tables equal (wall-clock column left out): {'yes' if same else 'NO'}")
    recording.save()
    return 0 if same else 1


if __name__ == "__main__":  # the pool's worker processes start by importing this file anew
    sys.exit(main())
