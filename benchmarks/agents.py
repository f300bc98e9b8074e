"""The agents' hot paths against iperf3, side by side in one run on the same path.

The path is a direct veth link between two Mininet hosts (no switch, no impairment), so what is
measured is the agents' own cost. Rows:

* unpaced UDP sender, 64-byte payloads: packets/s of our sender (the probe's, which every
  sending agent's loop follows) beside ``iperf3 -u -b 0 -l 64`` (goal: >= 0.7x iperf3 and
  >= 100k packets/s; both run on one core each);
* paced 8 Mbit/s (1000-byte payloads at 1000 packets/s): mean-rate error (goal < 0.1%) and
  p99 lateness against the schedule (goal < 0.5 ms);
* receiver at 50k packets/s: loss (goal: none);
* one-way delay on a bare veth, whose true delay is a few microseconds: what the measurement
  adds (goal: error < 50 µs);
* an agent's start: the CPU time a chat collector takes from its start until its socket is
  bound (from /proc), as a fresh interpreter and forked by the agent launcher
  (:mod:`agents.launcher`; goal: a tenth of a fresh interpreter's).

A second table, on loopback: CPU per packet sent by a 3 Mbit/s 30 fps streamer, from Python
beside the compiled send engine (goal: <= 10 µs a packet compiled, a tenth of Python's).

    sudo .venv/bin/python benchmarks/agents.py
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mininet.log import setLogLevel
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents import catalog  # noqa: E402
from agents.launched import AgentLauncher  # noqa: E402
from agents.processes import NodeProcesses  # noqa: E402
from experiments import scenarios  # noqa: E402
from recorder import Recording  # noqa: E402
from experiments import registry  # noqa: E402
from topologies import cleanup  # noqa: E402
from topologies.naming import RunNames, processes_carry  # noqa: E402
from topologies.network import ScenarioNetwork  # noqa: E402
from agents.send_engine import BUILT_ENGINE, ENGINE_KEY, PYTHON  # noqa: E402

PAIR = """
name: agents-bench
topology:
  nodes:
    a: {role: client, ip: 10.8.0.1/24}
    b: {role: edge, ip: 10.8.0.2/24}
  links:
    - endpoints: ["a:eth1", "b:eth1"]
"""


def probe(network, rate: float, count: int, size: int) -> tuple[dict, dict]:
    """Probe from a to b; (sender summary, receiver summary)."""
    receiver = network.net["b"].popen(
        [sys.executable, "-m", "agents.probe", "receive", "--port", "6000", "--expect",
         str(count), "--duration", str(count / rate + 10 if rate else 30)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    receiver.stderr.readline()  # "listening on ..."
    sent = network.net["a"].cmd(f"{sys.executable} -m agents.probe send --to 10.8.0.2:6000 "
                                f"--rate {rate} --count {count} --size {size}")
    received, _ = receiver.communicate(timeout=120)
    return json.loads(sent), json.loads(received)


def iperf3_pps(network, size: int, seconds: int = 3) -> float:
    server = network.net["b"].popen(["iperf3", "-s", "-1", "-B", "10.8.0.2"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            if "5201" in network.net["b"].cmd("ss -ltn"):
                break
        result = json.loads(network.net["a"].cmd(
            f"iperf3 -c 10.8.0.2 -u -b 0 -l {size} -t {seconds} -J"))
    finally:
        server.wait(timeout=30)
    total = result["end"]["sum"]
    return total["packets"] / total["seconds"]


START_SAMPLES = 5


def start_cost(network, prefix: str, out: Path, launcher: AgentLauncher | None) -> float:
    """Mean CPU-seconds of a chat collector on b from its start until its socket is bound
    (it says "listening on"), started one at a time: forked by ``launcher``, or, without one,
    a fresh interpreter through ``host.popen`` as commands are."""
    processes = NodeProcesses(prefix)
    costs = []
    try:
        for index in range(START_SAMPLES):
            log = out / f"start-{'forked' if launcher else 'fresh'}-{index}.log"
            started = processes.start(network.net["b"], "b", catalog.agent_argv(
                sys.executable, "chat_collector", "b", str(out), {"port": 0}, index), log,
                launcher=launcher)
            while "listening on" not in log.read_text():
                if started.process.poll() is not None:
                    raise RuntimeError(f"the chat collector ended: see {log}")
                time.sleep(0.01)
            costs.append(cpu_ns(started.process.pid) / 1e9)
    finally:
        processes.stop_all()
    return statistics.mean(costs)
def cpu_ns(pid: int) -> int:
    """CPU time a process and its children took so far, in ns (the scheduler's, not the ticks of
    /proc/<pid>/stat: a compiled sender takes a few of those in ten seconds)."""
    pids = [pid] + [int(child) for child in
                    Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return sum(int(Path(f"/proc/{each}/schedstat").read_text().split()[0]) for each in pids)


def sender_cpu(engine: str, spread: bool, seconds: float,
               warm_up_s: float = 1.0) -> tuple[float, int]:
    """(µs of CPU per packet, packets) of a 3 Mbit/s 30 fps streamer sending to a socket here
    on loopback, with the send ``engine`` (``python`` or the compiled one's path), its frames'
    packets ``spread`` or in bursts, over ``seconds`` of its steady state: its start-up
    (imports) and end are left out."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink, \
            tempfile.TemporaryDirectory() as out:
        sink.bind(("127.0.0.1", 0))
        sink.settimeout(0.05)
        params = {"to": "127.0.0.1", "port": sink.getsockname()[1], "bitrate": "3Mbps",
                  "fps": 30, "spread": spread, "duration": warm_up_s + seconds + 1}
        sender = subprocess.Popen(
            [sys.executable, "-m", "agents.streamer", "--node", "s", "--out", out, "--params",
             json.dumps(params)], env=dict(os.environ, **{ENGINE_KEY: engine}),
            stdout=subprocess.DEVNULL)

        def drain(until: float) -> int:
            received = 0
            while time.monotonic() < until:
                try:
                    sink.recv(2048)
                    received += 1
                except socket.timeout:
                    pass
            return received

        drain(time.monotonic() + warm_up_s)
        before = cpu_ns(sender.pid)
        packets = drain(time.monotonic() + seconds)
        used = cpu_ns(sender.pid) - before
        sender.wait(timeout=60)
    return used / 1e3 / packets, packets


def sender_cpu_table(seconds: float) -> Table:
    """CPU per packet sent from Python and from the compiled engine, one after the other, with
    a frame's packets spread over the frame interval (a wake-up each) and in bursts (one
    wake-up a frame)."""
    table = Table(title="CPU per packet sent, Python vs compiled (3 Mbit/s 30 fps streamer, "
                        f"loopback, {seconds:g} s each)", title_justify="left")
    for column in ("packets of a frame", "Python", "compiled", "ratio", "goal", "met"):
        table.add_column(column)
    built = os.access(BUILT_ENGINE, os.X_OK)
    for spread in (True, False):
        python_us, _ = sender_cpu(PYTHON, spread, seconds)
        if not built:
            table.add_row("spread" if spread else "burst", f"{python_us:.1f} µs",
                          f"not built ({BUILT_ENGINE})", "", "<= 10 µs", "no")
            continue
        compiled_us, _ = sender_cpu(str(BUILT_ENGINE), spread, seconds)
        table.add_row("spread" if spread else "burst", f"{python_us:.1f} µs",
                      f"{compiled_us:.1f} µs", f"{python_us / compiled_us:.1f}x",
                      "<= 10 µs and <= 0.1x Python",
                      "yes" if compiled_us <= min(10, python_us / 10) else "no")
    return table


def main() -> int:
    recording = Recording(__file__, __doc__)
    setLogLevel("error")
    console = Console()
    loaded = scenarios.loads(PAIR, "agents-bench.yaml", {})
    names = RunNames.fresh()
    with tempfile.TemporaryDirectory() as state, registry.registered(names.prefix, Path(state)):
        network = ScenarioNetwork(loaded, names, "user")
        with processes_carry(names.prefix):
            network.start()
        try:
            ours_sent, _ = probe(network, rate=0, count=300_000, size=64)
            theirs = iperf3_pps(network, 64)
            paced_sent, paced_received = probe(network, rate=1000, count=10_000, size=1000)
            fast_sent, fast_received = probe(network, rate=50_000, count=250_000, size=64)
            fresh_start = start_cost(network, names.prefix, Path(state), None)
            launcher = AgentLauncher([catalog.module_name("chat_collector")], names.prefix,
                                     Path(state) / "launcher.log")
            try:
                launcher.wait_ready()
                forked_start = start_cost(network, names.prefix, Path(state), launcher)
            finally:
                launcher.stop()
        finally:
            network.stop()
            cleanup.remove_run_objects(names.prefix)

    ours = ours_sent["rate_pps"]
    rate_error = (paced_sent["rate_pps"] - 1000) / 1000
    table = Table(title="agents against iperf3 (direct veth between two hosts, one run)",
                  title_justify="left")
    for column in ("what", "edgebed", "iperf3", "goal", "met"):
        table.add_column(column)
    table.add_row("unpaced UDP sender, 64 B, packets/s", f"{ours:,.0f}", f"{theirs:,.0f}",
                  ">= 0.7x iperf3 and >= 100k", "yes" if ours >= max(0.7 * theirs, 100e3)
                  else "no")
    table.add_row("  ratio", f"{ours / theirs:.2f}", "", "", "")
    table.add_row("paced 8 Mbit/s: mean rate error", f"{rate_error:+.4%}", "", "< 0.1%",
                  "yes" if abs(rate_error) < 0.001 else "no")
    p99 = paced_sent["lateness_us"]["p99"]
    table.add_row("paced 8 Mbit/s: p99 lateness", f"{p99:.1f} µs", "", "< 500 µs",
                  "yes" if p99 < 500 else "no")
    table.add_row("receiver at 50k packets/s: lost", f"{fast_received['lost']} of "
                  f"{fast_sent['sent']}", "", "0", "yes" if fast_received["lost"] == 0 else "no")
    table.add_row("  achieved send rate", f"{fast_sent['rate_pps']:,.0f} packets/s", "", "", "")
    delay = paced_received["delay_ms"]
    table.add_row("one-way delay on a bare veth (p50 / p99)",
                  f"{delay['p50'] * 1e3:.1f} / {delay['p99'] * 1e3:.1f} µs", "", "< 50 µs",
                  "yes" if delay["p50"] * 1e3 < 50 else "no")
    table.add_row("agent start until listening, fresh interpreter: CPU-s",
                  f"{fresh_start:.3f}", "", "", "")
    table.add_row("agent start until listening, forked by the launcher: CPU-s",
                  f"{forked_start:.3f}", "", "<= 0.1x a fresh interpreter",
                  "yes" if forked_start <= 0.1 * fresh_start else "no")
    console.print(recording.table(table))
    console.print(recording.table(sender_cpu_table(seconds=10)))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
