"""ai_access's access policies: decision time at scale and at the paper's scales.

* every access algorithm (ADGA, improved ADGA, least connections, IPVS wlc, power of two
  choices) placing 10,000 flows on 100 heterogeneous access servers (1 to 4 receive ports of
  1, 2.5 or 10 Gbit/s, 64 GB), every flow the spec's unit (945 packets of 711 bytes a second,
  paced over half the period) times a factor 0.5-1.5, timed from the servers' loads to the
  allocation; once on an idle cluster (room for every flow) and once on a cluster with room
  for about half of them (rejections and full servers in the rounds);
* the same on the paper's scale: 100 to 500 flows on the four servers of
  ``experiments/kinds/ai_access/model.py``.

Goal: every policy < 1 s at 10k x 100. Times are medians over rounds, run side by side in one
process (the machine is shared: compare the policies with each other, not across runs).

    .venv/bin/python benchmarks/ai_access.py [--rounds N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recorder import Recording  # noqa: E402
from controller.policies.ai_access.access import ALLOCATORS  # noqa: E402
from controller.policies.ai_access.model import Traffic  # noqa: E402
from controller.policies.ai_access.resources import (LoadWeights, Port, ServerLoad,  # noqa: E402
                                                     ServerSpec)
from experiments.kinds.ai_access.model import DEFAULT_SERVERS  # noqa: E402

TRAFFIC = Traffic()


def large_cluster(seed: int, scale: float) -> list[ServerLoad]:
    rng = random.Random(seed)
    return [ServerLoad.idle(ServerSpec(
        f"r{i}", tuple(Port(str(6100 + j), rng.choice((1e9, 2.5e9, 1e10)) * scale)
                       for j in range(rng.randint(1, 4))), 64e9)) for i in range(100)]


def flows(seed: int, count: int):
    rng = random.Random(seed + 1)
    return [TRAFFIC.demand_of(f"f{k}", TRAFFIC.unit_bytes * rng.uniform(0.5, 1.5))
            for k in range(count)]


def timed(name: str, demands, loads) -> tuple[float, int]:
    started = time.perf_counter()
    allocation = ALLOCATORS[name](demands, loads, LoadWeights(), random.Random(0))
    return time.perf_counter() - started, len(allocation.placed)


def rows(rounds: int) -> list[tuple]:
    paper = [ServerLoad.idle(spec.receiver(name, 0).spec)
             for name, spec in DEFAULT_SERVERS.items()]
    cases = [(f"10k flows x 100 servers, {label}", lambda r, s=scale: (
        flows(r, 10_000), large_cluster(r, s))) for label, scale in
        (("room for all", 1.0), ("room for about half", 0.09))]
    cases += [(f"{count} flows x 4 servers (paper)", lambda r, c=count: (flows(r, c), paper))
              for count in (100, 200, 300, 400, 500)]
    table = []
    for label, make in cases:
        for name in ALLOCATORS:
            seconds, placed = [], []
            for round_number in range(rounds):
                demands, loads = make(round_number)
                elapsed, count = timed(name, demands, loads)
                seconds.append(elapsed)
                placed.append(count)
            median = statistics.median(seconds)
            goal = ("< 1 s " + ("met" if median < 1 else "NOT met")) if "10k" in label else ""
            table.append((label, name, f"{median * 1e3:.1f} ms",
                          f"{min(seconds) * 1e3:.1f}-{max(seconds) * 1e3:.1f} ms",
                          f"{statistics.mean(placed):.0f}", goal))
    return table


def main(argv: list[str] | None = None) -> int:
    recording = Recording(__file__, __doc__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    table = Table(title="ai_access access policies: decision time")
    for column in ("case", "policy", "median", "range", "flows placed", "goal"):
        table.add_column(column)
    for row in rows(args.rounds):
        table.add_row(*row)
    Console(width=120).print(recording.table(table))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
