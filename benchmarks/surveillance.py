"""surveillance's balancers: decisions per second, side by side in one run.

* the balancer alone (:meth:`Balancer.choose` plus carrying the choice out), on a standing
  cluster: the paper's scale (3 nodes, 100 cameras) and a larger one (20 nodes, 1,000
  cameras), each holding about 60% of its capacity in sessions, every decision followed by one
  session leaving so the state stays put;
* the controller policy (``decide`` on a :class:`~controller.policy.State`, rebuilding the
  cluster from the placements, as the controller calls it), one request per call, with 200 and
  2,000 flows placed.

Decision-to-flow latency on real packets (a decision's rules installed in the switches) is not
measured here: it is the controller's, whatever the policy, and ``benchmarks/controller.py``
measures it; each emulated run also records the clients' access response times
(``decisions_followed``' ``response_ms``, ``topologies/surveillance/surveillance.yaml``).

    .venv/bin/python benchmarks/surveillance.py [--decisions N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import networkx as nx
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recorder import Recording  # noqa: E402
from controller.policies.surveillance import POLICIES  # noqa: E402
from controller.policies.surveillance.balancer import BALANCERS, Choice, Cluster  # noqa: E402
from controller.policies.surveillance.load import node_weights  # noqa: E402
from controller.policies.surveillance.model import Workload, make_balancer  # noqa: E402
from controller.policy import Placement, Request, Server, State  # noqa: E402

SCALES = {"3 nodes, 100 cameras": (3, 100, 100), "20 nodes, 1,000 cameras": (20, 1000, 1300)}


def standing(nodes: int, cameras: int, sessions: int, balancer, rng) -> tuple[Cluster, list]:
    """A cluster holding ``sessions`` sessions placed by ``balancer``, light to moderate."""
    workload = Workload(nodes=nodes)
    names = [f"node{i + 1}" for i in range(nodes)]
    cluster = Cluster.of(dict(zip(names, node_weights(workload.hardware()))))
    held = []
    for _ in range(sessions):
        camera = f"camera{rng.integers(cameras)}"
        choice = balancer.choose(camera, cluster)
        if isinstance(choice, Choice):
            cluster.assign(camera, choice)
            held.append((camera, choice.node))
    for name in names:
        cluster.report(name, float(rng.uniform(0.3, 0.8)))
    return cluster, held


def balancer_rate(name: str, nodes: int, cameras: int, sessions: int, decisions: int) -> float:
    rng = np.random.default_rng(0)
    balancer = make_balancer(name, Workload(nodes=nodes), 0)
    cluster, held = standing(nodes, cameras, sessions, balancer, rng)
    requests = [f"camera{i}" for i in rng.integers(cameras, size=decisions)]
    leaving = rng.integers(1 << 30, size=decisions)
    started = time.perf_counter()
    for camera, index in zip(requests, leaving):
        choice = balancer.choose(camera, cluster)
        if isinstance(choice, Choice):
            cluster.assign(camera, choice)
            held.append((camera, choice.node))
        if held:
            gone = held.pop(index % len(held))
            cluster.release(*gone)
    return decisions / (time.perf_counter() - started)


def policy_rate(name: str, placed: int, decisions: int) -> float:
    rng = np.random.default_rng(0)
    servers = tuple(Server(f"node{i}", "video", f"10.0.0.{i + 1}", 1e12, 0.4,
                           {"cpu_ghz": 4 * (1 + i % 3), "bandwidth_mbps": 100 * (1 + i % 3)})
                    for i in range(20))
    policy = POLICIES[name]()

    def request(i: int) -> Request:
        return Request(f"c{i}/video", f"c{i}", "video", 4e6,
                       labels={"camera": f"camera{rng.integers(1000)}"})

    placements = tuple(Placement(request(i), f"node{rng.integers(20)}") for i in range(placed))
    states = [State(nx.MultiDiGraph(), servers, (), placements=placements,
                    requests=(request(placed + k),)) for k in range(decisions)]
    started = time.perf_counter()
    for state in states:
        policy.decide(state)
    return decisions / (time.perf_counter() - started)


def main() -> int:
    recording = Recording(__file__, __doc__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=20_000,
                        help="balancer decisions timed per case (policy calls: a tenth)")
    arguments = parser.parse_args()
    table = Table(title="surveillance balancers: decisions per second (this machine, one run)",
                  title_justify="left")
    table.add_column("balancer")
    for scale in SCALES:
        table.add_column(f"balancer, {scale}", justify="right")
    for placed in (200, 2000):
        table.add_column(f"policy decide(), 20 nodes, {placed} flows", justify="right")
    for name in BALANCERS:
        row = [name]
        row += [f"{balancer_rate(name, *scale, arguments.decisions):,.0f}"
                for scale in SCALES.values()]
        row += [f"{policy_rate(name, placed, max(1, arguments.decisions // 10)):,.0f}"
                for placed in (200, 2000)]
        table.add_row(*row)
    Console().print(recording.table(table))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
