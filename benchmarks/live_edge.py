"""live_edge's allocators: LUA's decision time at scale, and the exact MILP's time to optimality.

* LUA, DF and MHCP on 10,000 viewers x 100 edge servers x 5 bitrates, timed from the instance
  to the allocation (building the model's per-(viewer, server, bitrate) tables included, as a
  controller pays it every period), on two geometries: the generator's default 500 m square
  (every server covers most viewers: the worst case for the O(|V||M||ladder|) greedy) and a
  2 km square (a city: a handful of covering servers per viewer);
* the MILP (HiGHS through scipy) on the paper's small case, 2 servers x 20 viewers x 4
  bitrates, over seeds: time to proven optimality, and LUA's objective against it.

Goal: LUA < 1 s at 10k x 100 x 5.

    .venv/bin/python benchmarks/live_edge.py [--rounds N] [--seeds N]
"""

from __future__ import annotations

import argparse
import statistics
from itertools import product
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recorder import Recording  # noqa: E402
from controller.policies.live_edge.allocators import ALLOCATORS  # noqa: E402
from controller.policies.live_edge.model import MBPS, evaluate, generate  # noqa: E402

LADDER_5 = tuple(rate * MBPS for rate in (0.5, 1.0, 2.5, 5.0, 8.0))
GEOMETRIES = {"500 m square": 500.0, "2 km square": 2000.0}
# At the paper's 40 Mbit/s and 15 vCPU per server, 100 servers hold under 1k of 10k viewers
# and the greedy soon finds every server full; with room for all it weighs every choice.
CAPACITIES = {"paper capacity": {}, "room for all": {"bandwidth": 10e9, "compute": 1e5}}


def timed(allocator: str, instance) -> tuple[float, object]:
    started = time.perf_counter()
    allocation = ALLOCATORS[allocator](instance, np.random.default_rng(0))
    return time.perf_counter() - started, allocation


def scale_rows(rounds: int) -> list[tuple]:
    rows = []
    for (geometry, side), (capacity, servers) in product(GEOMETRIES.items(), CAPACITIES.items()):
        for allocator in ("lua", "df", "mhcp"):
            seconds, served = [], []
            for round_number in range(rounds):
                # a fresh instance each round: its tables are built inside the timing
                instance = generate(round_number, 10_000, 100, side=side, ladder=LADDER_5,
                                    **servers)
                elapsed, allocation = timed(allocator, instance)
                seconds.append(elapsed)
                served.append(len(allocation.assignment))
            median = statistics.median(seconds)
            rows.append((f"{allocator}, {geometry}, {capacity}", f"{median:.3f} s",
                         f"{min(seconds):.3f}-{max(seconds):.3f} s",
                         f"{statistics.mean(served):.0f} served",
                         ("< 1 s " + ("met" if median < 1 else "NOT met"))
                         if allocator == "lua" else ""))
    return rows


def small_case_rows(seeds: int) -> list[tuple]:
    solve_seconds, ratios, optimal = [], [], 0
    for seed in range(seeds):
        instance = generate(seed, 20, 2)
        elapsed, exact = timed("optimal", instance)
        solve_seconds.append(elapsed)
        optimal += exact.solver.optimal
        _, greedy = timed("lua", instance)
        ratios.append(evaluate(instance, greedy).objective / evaluate(instance, exact).objective)
    return [("MILP to optimality, 2 x 20 x 4", f"{statistics.median(solve_seconds):.3f} s",
             f"{min(solve_seconds):.3f}-{max(solve_seconds):.3f} s",
             f"{optimal}/{seeds} proven optimal", ""),
            ("LUA objective / optimum, same instances", f"{statistics.median(ratios):.1%}",
             f"{min(ratios):.1%}-{max(ratios):.1%}", "paper: LUA 14% below", "")]


def main() -> int:
    recording = Recording(__file__, __doc__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="instances per scale case")
    parser.add_argument("--seeds", type=int, default=10, help="small-case instances")
    arguments = parser.parse_args()
    table = Table(title=f"live_edge allocators (scale: 10k viewers x 100 servers x 5 bitrates, "
                        f"{arguments.rounds} instances each, median; small case: "
                        f"{arguments.seeds} seeds)", title_justify="left")
    for column in ("measure", "median", "min-max", "detail", "goal"):
        table.add_column(column)
    for row in scale_rows(arguments.rounds) + small_case_rows(arguments.seeds):
        table.add_row(*row)
    Console().print(recording.table(table))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
