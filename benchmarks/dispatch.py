"""dispatch's dispatch policy at scale: decisions per second at 10,000 clients x 100 media
nodes (5 regions, 20 sites), on the controller's policy interface (``Dispatch.decide`` on a
:class:`controller.policy.State`, as the controller calls it).

* batch: one call deciding 10k joins (a join burst reaching the controller at once);
* one by one: joins decided one call each with up to 10k flows already placed (the
  controller's usual case: a join message, a decision), timed per call, p50 and p99.

Each for tickets and shared capacity, K = 3 centers. The world is the model's
(:func:`controller.policies.dispatch.model.generate`) turned into a graph of site switches,
media node hosts and client hosts.

With ``--emulated`` it also runs ``topologies/dispatch/dispatch.yaml`` once per capacity control (real
Mininet: hold the machine lock) and gives the controller's decision latency from its
``decisions`` table: the policy's time and the time to install the rules, p50 and p99.

    .venv/bin/python benchmarks/dispatch.py [--clients N] [--nodes N] [--single N]
    flock /tmp/edgebed-mininet.lock .venv/bin/python benchmarks/dispatch.py --emulated
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import networkx as nx
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recorder import Recording  # noqa: E402
from controller.policies.dispatch import model  # noqa: E402
from controller.policies.dispatch.policies import Dispatch, DispatchParams  # noqa: E402
from controller.policy import Client, Placement, Request, Server, State  # noqa: E402
from experiments.measurements import read_table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

CENTERS = {"center0": "r0", "center1": "r1", "center2": "r2"}
DEMAND = 2e6


def world_state(clients: int, nodes: int) -> tuple[nx.MultiDiGraph, tuple, tuple]:
    world = model.generate(1, clients=clients, nodes=nodes)
    graph = nx.MultiDiGraph()
    sites = list(world.geography.regions)
    for a in sites:
        for b in sites:
            if a < b:
                here = [n.name for n in world.nodes if n.site == b]
                delay = min(world.geography.delay(a, n) for n in here) if here else 0.1
                graph.add_edge(a, b, delay=delay, up=True)
                graph.add_edge(b, a, delay=delay, up=True)
    servers = []
    for index, node in enumerate(world.nodes):
        graph.add_edge(node.name, node.site, delay=0.0005, up=True)
        graph.add_edge(node.site, node.name, delay=0.0005, up=True)
        servers.append(Server(node.name, "live", f"10.1.{index // 250}.{index % 250 + 1}",
                              node.capacity * DEMAND, labels={"region": node.region}))
    people = []
    for index, client in enumerate(world.clients):
        graph.add_edge(client.name, client.site, delay=client.access_rtt / 2, up=True)
        graph.add_edge(client.site, client.name, delay=client.access_rtt / 2, up=True)
        people.append(Client(client.name, f"10.2.{index // 250}.{index % 250 + 1}",
                             {"region": world.geography.regions[client.site]}))
    for index, (center, region) in enumerate(CENTERS.items()):
        graph.add_edge(center, f"{region}s0", delay=0.0005, up=True)
        graph.add_edge(f"{region}s0", center, delay=0.0005, up=True)
        people.append(Client(center, f"10.3.0.{index + 1}", {"region": region}))
    return graph, tuple(servers), tuple(people)


def requests_of(clients: tuple) -> list[Request]:
    return [Request(f"{c.name}/live", c.name, "live", DEMAND) for c in clients
            if c.name not in CENTERS]


def batch(control: str, graph, servers, clients) -> tuple[float, int]:
    policy = Dispatch(DispatchParams(centers=CENTERS, capacity_control=control))
    started = time.perf_counter()
    decision = policy.decide(State(graph, servers, clients, (), tuple(requests_of(clients))))
    return time.perf_counter() - started, len(decision.assignments)


def one_by_one(control: str, graph, servers, clients, count: int) -> list[float]:
    policy = Dispatch(DispatchParams(centers=CENTERS, capacity_control=control))
    requests = requests_of(clients)
    placed = tuple(Placement(r, servers[i % len(servers)].name)
                   for i, r in enumerate(requests[count:]))
    seconds = []
    for request in requests[:count]:
        started = time.perf_counter()
        decision = policy.decide(State(graph, servers, clients, placed, (request,)))
        seconds.append(time.perf_counter() - started)
        placed += tuple(Placement(request, a.server) for a in decision.assignments)
    return seconds


def emulated(control: str) -> list[dict]:
    """The controller's decision rows of one run of the dispatch scenario."""
    with tempfile.TemporaryDirectory() as runs:
        subprocess.run([sys.executable, "-m", "experiments.cli", "run",
                        str(ROOT / "topologies" / "dispatch" / "dispatch.yaml"), "--runs-dir", runs],
                       check=True, capture_output=True, cwd=ROOT,
                       env={**os.environ, "EDGEBED_CAPACITY": control})
        [run_dir] = Path(runs).iterdir()
        return [row for row in read_table(run_dir, "decisions") if row["flow"] != "-"]


def main() -> None:
    recording = Recording(__file__, __doc__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--single", type=int, default=200,
                        help="joins decided one call each, after the rest are placed")
    parser.add_argument("--emulated", action="store_true",
                        help="also run topologies/dispatch/dispatch.yaml (needs root and the lock)")
    args = parser.parse_args()
    graph, servers, clients = world_state(args.clients, args.nodes)
    table = Table(title=f"dispatch policy, {args.clients} clients x {args.nodes} nodes, K = 3")
    for column in ("case", "decisions", "decisions/s", "p50 per call", "p99 per call"):
        table.add_column(column)
    for control in ("tickets", "shared"):
        elapsed, assigned = batch(control, graph, servers, clients)
        joins = len(requests_of(clients))
        table.add_row(f"batch, {control}", f"{joins} ({assigned} assigned)",
                      f"{joins / elapsed:,.0f}", "-", "-")
        seconds = one_by_one(control, graph, servers, clients, args.single)
        p99 = float(np.percentile(seconds, 99))
        table.add_row(f"one by one, {control}", str(len(seconds)),
                      f"{len(seconds) / sum(seconds):,.0f}",
                      f"{statistics.median(seconds) * 1e3:.1f} ms", f"{p99 * 1e3:.1f} ms")
    Console().print(recording.table(table))
    if args.emulated:
        live = Table(title="decision latency in the emulated run (topologies/dispatch/dispatch.yaml)")
        for column in ("capacity control", "decisions", "policy p50", "policy p99",
                       "install p50", "install p99"):
            live.add_column(column)
        for control in ("tickets", "shared"):
            rows = emulated(control)
            policy = [float(row["policy_ms"]) for row in rows]
            install = [float(row["install_ms"]) for row in rows]
            live.add_row(control, str(len(rows)),
                         *(f"{np.percentile(values, q):.1f} ms" for values in (policy, install)
                           for q in (50, 99)))
        Console().print(recording.table(live))
    recording.save()


if __name__ == "__main__":
    main()
