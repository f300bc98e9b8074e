"""The controller's speed: decision-to-flow-installed latency, flow-setup rate, failover gap.

Everything is measured on real runs (``edgebed run``, userspace OVS here) from the outside:

* **decision to flow installed**: clients join a service over the control protocol one after
  another, then every flow is migrated by hand; the controller times each decision from the
  policy's answer to the barrier replies of every switch it changed (its ``decisions`` table);
* **flow-setup rate**: all clients join at once (one datagram a flow, not waiting; with
  ``--ports N`` each client asks for N flows, one per client port, so a burst is many more
  joins than there are hosts to bring up); flows placed and installed per second, from the
  first join sent to the last barrier reply, for a fixed number of switches, and flows
  answered per second, from the first join sent to the last decision back at the sender;
* **failover gap**: a steady stream (one packet every 2 ms) crosses a ring whose primary link is
  cut mid-stream; the receiving agent's longest silence between two packets, with OpenFlow
  fast-failover groups and with reactive rerouting only, beside the same stream uncut.

Goals: decision-to-flow p50 < 10 ms; fast-failover gap < 50 ms; flow setup >= 2,000 flows/s.

With ``--against COMMIT`` the same measurements are also taken of the controller (the whole
edgebed) of an earlier commit, exported with ``git archive`` and run by the same interpreter,
and both are shown side by side: a change's before and after in one run on one machine state.

    sudo .venv/bin/python benchmarks/controller.py [--clients N] [--ports N] [--rounds N]
        [--against COMMIT] [--only decisions|failover]
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recorder import Recording  # noqa: E402
from agents.control import ControlClient  # noqa: E402
from edgebed import protocol  # noqa: E402
from experiments.measurements import read_table  # noqa: E402

EDGEBED = [sys.executable, "-m", "experiments.cli"]
# What --only can choose: the decision runs (latency and the burst), the failover runs.
PARTS = ("decisions", "failover")
SWITCHES = 4
# The client ports of a burst's flows with --ports (the first flow's is FIRST_PORT).
FIRST_PORT = 40000

STAR = """
name: controller-bench
duration: 600s
topology:
  subnet: 10.20.0.0/16
  nodes:
    client[1-{clients}]: {{role: client}}
    edge[1-4]: {{role: edge}}
    core: {{role: switch}}
    access[1-3]: {{role: switch}}
  links:
{client_links}
    - endpoints: ["edge[1-4]:eth1", "core:eth[1-4]"]
    - endpoints: ["access[1-3]:eth100", "core:eth[10-12]"]
controller:
  app: edgebed
  services:
    video: {{address: 10.20.255.1, port: 5004, servers: ["role:edge"]}}
"""

RING = """
name: failover-bench
duration: 9s
topology:
  subnet: 10.21.0.0/24
  nodes:
    viewer1: {{role: viewer}}
    edge1: {{role: edge}}
    s[1-4]: {{role: switch}}
  links:
    - endpoints: ["viewer1:eth1", "s1:eth1"]
    - endpoints: ["edge1:eth1", "s3:eth1"]
    - {{endpoints: ["s1:eth10", "s2:eth10"], delay: 2ms}}
    - {{endpoints: ["s2:eth11", "s3:eth11"], delay: 2ms}}
    - {{endpoints: ["s3:eth12", "s4:eth12"], delay: 5ms}}
    - {{endpoints: ["s4:eth13", "s1:eth13"], delay: 5ms}}
controller: {{app: edgebed, fast_failover: {fast_failover}}}
workload:
  - agent: viewer
    nodes: [edge1]
    params: {{port: 5004}}
  - agent: streamer
    nodes: [viewer1]
    start: 1s
    params: {{to: edge1, duration: 6s, payload: 1000, bitrate: 4Mbps, fps: 500, gop: 1,
             i_to_p: 1, noise: 0}}
schedule:
{schedule}
"""


def star(clients: int) -> str:
    """Clients spread over three access switches, edges on the core: four switches."""
    per_switch = -(-clients // 3)
    links = []
    for index in range(3):
        first, last = index * per_switch + 1, min(clients, (index + 1) * per_switch)
        if first <= last:
            links.append(f'    - endpoints: ["client[{first}-{last}]:eth1", '
                         f'"access{index + 1}:eth[1-{last - first + 1}]"]')
    return STAR.format(clients=clients, client_links="\n".join(links))


class LiveRun:
    """An ``edgebed run`` in the background, until stopped."""

    def __init__(self, text: str, directory: Path, root: Path = ROOT):
        directory.mkdir(parents=True)
        self.path = directory / "scenario.yaml"
        self.path.write_text(text)
        self.runs = directory / "runs"
        self.process = subprocess.Popen(EDGEBED + ["run", str(self.path), "--runs-dir",
                                                   str(self.runs)], cwd=root,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)

    def wait_up(self, timeout_s: float = 180) -> Path:
        """The run directory, once the timeline runs (the ping check before it would compete
        for the CPU with what is measured)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(self.process.stdout.read())
            for manifest in self.runs.glob("*/manifest.json"):
                if "timeline_started" in json.loads(manifest.read_text()):
                    return manifest.parent
            time.sleep(0.2)
        raise RuntimeError("the run did not come up")

    def control(self, run_dir: Path) -> tuple[str, int]:
        host, port = json.loads((run_dir / "manifest.json").read_text())["controller"][
            "control_loopback"].rsplit(":", 1)
        return host, int(port)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.communicate(timeout=180)


def wait_for_rows(run_dir: Path, kind: str, count: int, timeout_s: float = 60) -> list[dict]:
    """The controller's decision rows of ``kind`` once there are ``count`` (it writes them as
    barriers come back; the run's merged table only exists after teardown)."""
    path = run_dir / "records" / "decisions" / "controller-controller.csv"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(path, newline="") as stream:
            rows = [row for row in csv.DictReader(stream) if row["kind"] == kind]
        if len(rows) >= count:
            return rows
        time.sleep(0.05)
    raise RuntimeError(f"only {len(rows)} of {count} {kind} decisions were installed")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def last_answer(sock: socket.socket, count: int, timeout_s: float = 60) -> float:
    """When the last of ``count`` answers to the joins sent from ``sock`` came back (epoch
    seconds)."""
    deadline = time.monotonic() + timeout_s
    for _ in range(count):
        sock.settimeout(max(0.0, deadline - time.monotonic()))
        protocol.decode(sock.recv(protocol.MAX_DATAGRAM), protocol.TO_HOST)
    return time.time()


def decision_latency(clients: int, directory: Path, root: Path = ROOT, ports: int = 1) -> dict:
    """One join at a time, then one migration at a time; then all joins at once, ``ports``
    flows a client (a second run, so every join is a new flow); edgebed as in ``root``."""
    run = LiveRun(star(clients), directory / "sequential", root)
    try:
        run_dir = run.wait_up()
        address = run.control(run_dir)
        servers = {}
        for index in range(1, clients + 1):
            with ControlClient(address, f"client{index}") as client:
                servers[index] = client.join("video").server
        for index in range(1, clients + 1):
            with ControlClient(address) as client:
                target = f"edge{int(servers[index][-1]) % 4 + 1}"
                client.steer(f"client{index}/video", target)
        placed = wait_for_rows(run_dir, "place", clients)
        migrated = wait_for_rows(run_dir, "migrate", clients)
    finally:
        run.stop()
    burst = LiveRun(star(clients), directory / "burst", root)
    try:
        run_dir = burst.wait_up()
        address = burst.control(run_dir)
        joins = [protocol.encode(protocol.Join(
            id=number, node=f"client{index}", service="video",
            port=None if ports == 1 else FIRST_PORT + port))
            for number, (port, index) in enumerate(
                ((port, index) for port in range(ports) for index in range(1, clients + 1)), 1)]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            sender.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            started = time.time()
            for join in joins:
                sender.sendto(join, address)
            answered = last_answer(sender, len(joins))
        rows = wait_for_rows(run_dir, "place", len(joins))
        # a row's time is when its last barrier came back (the controller writes it then)
        finished = max(float(row["time"]) for row in rows)
        # joins decided together share a row's messages: each row carries the batch's
        rules = sum(int(row["messages"]) / int(row.get("together") or 1) for row in rows)
        batches = len({(row["time"], row["install_ms"]) for row in rows})
    finally:
        burst.stop()
    return {"place": [float(r["install_ms"]) for r in placed],
            "migrate": [float(r["install_ms"]) for r in migrated],
            "policy": [float(r["policy_ms"]) for r in placed],
            "send": [float(r["send_ms"]) for r in placed + migrated],
            "burst_flows": len(joins), "burst_s": finished - started, "burst_rules": rules,
            "burst_answered_s": answered - started,
            "burst_batches": batches}


def failover_gap(fast_failover: bool | None, directory: Path, root: Path = ROOT) -> dict:
    """The receiver's longest silence with the primary link cut at 4 s (None: not cut);
    edgebed as in ``root``."""
    schedule = "  []" if fast_failover is None else \
        '  - {at: 4s, action: link_down, link: "s1:eth10"}'
    text = RING.format(fast_failover=str(bool(fast_failover)).lower(), schedule=schedule)
    path = directory / "scenario.yaml"
    path.write_text(textwrap.dedent(text))
    runs = directory / "runs"
    result = subprocess.run(EDGEBED + ["run", str(path), "--runs-dir", str(runs)], cwd=root,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stdout + result.stderr)
    [run_dir] = list(runs.iterdir())
    [flow] = [row for row in read_table(run_dir, "flows") if row["node"] == "edge1"]
    return {"gap_ms": float(flow["gap_max_ms"]), "lost": int(flow["lost"])}


def export(commit: str, directory: Path) -> Path:
    """The tree of ``commit`` (this repository's), written into ``directory``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True,
                             check=True).stdout
    directory.mkdir()
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory


def measure(root: Path, clients: int, ports: int, rounds: int, directory: Path,
            console: Console, label: str, parts: tuple[str, ...] = PARTS) -> dict:
    """The measurements of the module docstring named in ``parts``, of edgebed as in
    ``root``."""
    latency, gaps = None, {}
    if "decisions" in parts:
        console.print(f"{label}: decisions: {clients} clients, {SWITCHES} switches ...")
        latency = decision_latency(clients, directory, root, ports)
    for name, variant in (("uncut", None), ("fast-failover", True), ("reactive", False)) \
            if "failover" in parts else ():
        gaps[name] = []
        for round_number in range(rounds):
            run_directory = directory / f"{name}-{round_number}"
            run_directory.mkdir()
            gaps[name].append(failover_gap(variant, run_directory, root))
            console.print(f"{label}: failover {name} {round_number + 1}/{rounds}: "
                          f"gap {gaps[name][-1]['gap_ms']:.1f} ms, "
                          f"lost {gaps[name][-1]['lost']}")
    return {"latency": latency, "gaps": gaps}


def cells(measured: dict) -> dict[str, tuple[str, str, str]]:
    """Each row's p50, p99 / max and goal for one tree's measurements."""
    latency, gaps, rows = measured["latency"], measured["gaps"], {}
    for kind in ("place", "migrate") if latency else ():
        values = latency[kind]
        rows[f"decision to flow installed: {kind} (ms)"] = (
            f"{statistics.median(values):.2f}", f"{percentile(values, 99):.2f}",
            "p50 < 10 ms " + ("met" if statistics.median(values) < 10 else "NOT met"))
    for name, label in (("send", "of which the controller's own (ms)"),
                        ("policy", "policy decision (ms)")) if latency else ():
        rows[label] = (f"{statistics.median(latency[name]):.3f}",
                       f"{percentile(latency[name], 99):.3f}", "")
    if latency:
        rate = latency["burst_flows"] / latency["burst_s"]
        rows["flow setup, all joins at once"] = (
            f"{rate:.0f} flows/s", f"{latency['burst_rules'] / latency['burst_s']:.0f} rules/s",
            f">= 2,000 {'met' if rate >= 2000 else 'NOT met'}, "
            f"{latency['burst_batches']} batches")
        rows["flow setup, every join answered"] = (
            f"{latency['burst_flows'] / latency['burst_answered_s']:.0f} flows/s", "", "")
    for name, runs in gaps.items():
        values = [run["gap_ms"] for run in runs]
        goal = ("< 50 ms " + ("met" if statistics.median(values) < 50 else "NOT met")
                if name == "fast-failover" else "")
        rows[f"failover gap, {name} (ms; lost packets)"] = (
            f"{statistics.median(values):.1f} "
            f"({statistics.median(r['lost'] for r in runs):.0f})", f"{max(values):.1f}", goal)
    return rows


def main() -> int:
    recording = Recording(__file__, __doc__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=60, help="clients (flows) per run")
    parser.add_argument("--ports", type=int, default=1,
                        help="flows each client asks for in the burst (one per client port)")
    parser.add_argument("--rounds", type=int, default=3, help="failover runs per variant")
    parser.add_argument("--only", choices=PARTS, help="take only these measurements")
    parser.add_argument("--against", metavar="COMMIT",
                        help="also measure edgebed as of COMMIT, shown beside this tree")
    arguments = parser.parse_args()
    console = Console(width=200)
    measured = {}
    with tempfile.TemporaryDirectory(prefix="edgebed-bench-") as scratch:
        scratch = Path(scratch)
        trees = {"this tree": ROOT}
        if arguments.against:
            trees = {arguments.against: export(arguments.against, scratch / "against")} | trees
        for index, (label, root) in enumerate(trees.items()):
            directory = scratch / f"tree-{index}"
            directory.mkdir()
            measured[label] = cells(measure(root, arguments.clients, arguments.ports,
                                            arguments.rounds, directory, console, label,
                                            (arguments.only,) if arguments.only else PARTS))
    table = Table(title=f"controller: {SWITCHES} switches, {arguments.clients} clients, burst "
                        f"of {arguments.clients * arguments.ports} joins, failover over "
                        f"{arguments.rounds} runs each", title_justify="left")
    table.add_column("measure")
    for label in measured:
        prefix = f"{label}: " if len(measured) > 1 else ""
        for column in ("p50", "p99 / max", "goal"):
            table.add_column(prefix + column)
    for row in next(iter(measured.values())):
        table.add_row(row, *(cell for rows in measured.values() for cell in rows[row]))
    console.print(recording.table(table))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
