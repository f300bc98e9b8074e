"""Bring-up and teardown time of a scenario, edgebed beside plain Mininet, in one run.

Both sides build the same hosts, OVS switches (same datapath, batched startup, standalone) and
links; rounds alternate (edgebed, Mininet, edgebed, ...) so a noisy machine hurts both alike.
edgebed's side includes what a run pays on top of Mininet: reading and validating the scenario,
explicit names, MACs, DPIDs and ports, per-interface addresses and offload settings.
Goal: edgebed / Mininet <= 1.2 for bring-up and for teardown.

    sudo .venv/bin/python benchmarks/bringup.py [SCENARIO] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from mininet.link import Link
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host, OVSSwitch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments import scenarios  # noqa: E402
from recorder import Recording  # noqa: E402
from topologies import cleanup  # noqa: E402
from topologies.capabilities import ovs_kernel_module  # noqa: E402
from experiments.registry import registered  # noqa: E402
from topologies.naming import RunNames, processes_carry  # noqa: E402
from topologies.network import ScenarioNetwork  # noqa: E402


def edgebed_round(path: Path, datapath: str) -> tuple[float, float]:
    names = RunNames.fresh()
    with registered(names.prefix, path), processes_carry(names.prefix):
        started = time.perf_counter()
        network = ScenarioNetwork(scenarios.load(path), names, datapath)
        network.start()
        up = time.perf_counter() - started
        started = time.perf_counter()
        network.stop()
        down = time.perf_counter() - started
        cleanup.remove_run_objects(names.prefix)
    return up, down


def mininet_round(path: Path, datapath: str) -> tuple[float, float]:
    """The same topology through Mininet's own API with its defaults for names and ports."""
    loaded = scenarios.load(path)  # read outside the timed part: Mininet has no format
    prefix = RunNames.fresh().prefix
    with registered(prefix, path), processes_carry(prefix):
        return _mininet_build_and_stop(loaded, prefix, datapath)


def _mininet_build_and_stop(loaded, prefix: str, datapath: str) -> tuple[float, float]:
    started = time.perf_counter()
    net = Mininet(topo=None, build=False, controller=None, waitConnected=False)
    mininet_name = {}
    for node in loaded.hosts:
        net.addHost(node.name, cls=Host, ip=str(node.ip))
        mininet_name[node.name] = node.name
    for index, node in enumerate(loaded.switches):
        # Bridge names carry a prefix so that a crashed benchmark is cleaned like a run.
        name = f"{prefix}s{index}"
        net.addSwitch(name, cls=OVSSwitch, dpid=f"{node.dpid:016x}", failMode="standalone",
                      datapath=datapath, batch=True)
        mininet_name[node.name] = name
    for link in loaded.links:
        net.addLink(mininet_name[link.a.node], mininet_name[link.b.node], cls=Link)
    net.build()
    net.start()
    up = time.perf_counter() - started
    started = time.perf_counter()
    net.stop()
    down = time.perf_counter() - started
    cleanup.remove_run_objects(prefix)
    return up, down


def main() -> int:
    recording = Recording(__file__, __doc__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="topologies/city-113.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    setLogLevel("error")
    path = Path(arguments.scenario)
    datapath = "kernel" if ovs_kernel_module() else "user"
    loaded = scenarios.load(path)
    results = {"edgebed": [], "mininet": []}
    console = Console()
    for round_number in range(arguments.rounds):
        for name, function in (("edgebed", edgebed_round), ("mininet", mininet_round)):
            results[name].append(function(path, datapath))
            console.print(f"round {round_number + 1}/{arguments.rounds} {name}: "
                          f"up {results[name][-1][0]:.2f} s, down {results[name][-1][1]:.2f} s")
    table = Table(title=f"{loaded.name}: {len(loaded.hosts)} hosts, {len(loaded.switches)} "
                        f"switches, {len(loaded.links)} links, OVS {datapath} datapath, "
                        f"{arguments.rounds} rounds (median, min-max)", title_justify="left")
    for column in ("phase", "edgebed s", "plain Mininet s", "ratio", "goal"):
        table.add_column(column)
    for index, phase in enumerate(("bring-up", "teardown")):
        ours = [r[index] for r in results["edgebed"]]
        theirs = [r[index] for r in results["mininet"]]
        ratio = statistics.median(ours) / statistics.median(theirs)
        table.add_row(phase, f"{statistics.median(ours):.2f} ({min(ours):.2f}-{max(ours):.2f})",
                      f"{statistics.median(theirs):.2f} ({min(theirs):.2f}-{max(theirs):.2f})",
                      f"{ratio:.2f}", "≤ 1.20 " + ("met" if ratio <= 1.2 else "NOT met"))
    console.print(recording.table(table))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
