"""CPU per packet received by a viewer on loopback, one wake-up a datagram beside batched reads.

A 3 Mbit/s and a 30 Mbit/s streamer (30 fps, about 300 and 3,000 packets/s) send to one viewer
process for a few seconds each, on loopback; the viewer reads with ``receive_quantum: 0`` (a
wake-up a datagram) and with its default quantum, one run after the other. The viewer's CPU
over a run is its CPU at exit (``wait4``'s resource use, which counts the end-of-run tables)
less its CPU once its socket was bound (``/proc/<pid>/schedstat``: its start-up and imports);
both are the scheduler's nanosecond counts, where ``/proc/<pid>/stat``'s 10 ms ticks would be
a tenth of a 300 packets/s run's figure. A run of the same length with no sender gives the
viewer's fixed cost (its idle wake-ups, its tables, its exit: about 0.1 CPU-s, more than a
300 packets/s run's packets cost); the cost per packet is the rest, divided by the packets
received.
``--before PATH`` adds a column for the viewer of another checkout (its own default params).

    .venv/bin/python benchmarks/receive_cost.py [--seconds 8] [--before /path/to/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgebed import clock  # noqa: E402
from recorder import Recording  # noqa: E402

RATES = {"3Mbps": "~300", "30Mbps": "~3,000"}  # bitrate -> packets/s at 30 fps
LISTENING = re.compile(r"listening on (\d+)")


def scheduler_cpu_ns(pid: int) -> int:
    """CPU time ``pid`` took so far, in ns (the scheduler's count)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def viewer_cpu(tree: Path, params: dict, bitrate: str | None,
               seconds: float) -> tuple[int, int]:
    """(ns of CPU from listening to exit, packets received) of the viewer of checkout ``tree``,
    taking ``params``, receiving a 30 fps streamer at ``bitrate`` on loopback for ``seconds``
    (None: no streamer, the viewer listens as long)."""
    with tempfile.TemporaryDirectory() as out:
        viewer = subprocess.Popen(
            [sys.executable, "-m", "agents.viewer", "--node", "v", "--out", out, "--params",
             json.dumps({"port": 0} | params)], cwd=tree,
            env=dict(os.environ, PYTHONPATH=str(tree)), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            port = None
            while port is None:
                line = viewer.stderr.readline()
                if not line:
                    raise RuntimeError(f"the viewer of {tree} ended before it listened")
                if match := LISTENING.search(line):
                    port = int(match.group(1))
            started_ns = scheduler_cpu_ns(viewer.pid)
            if bitrate is None:
                clock.sleep(seconds)
            else:
                subprocess.run(
                    [sys.executable, "-m", "agents.streamer", "--node", "s", "--out", out,
                     "--params", json.dumps({"to": "127.0.0.1", "port": port,
                                             "bitrate": bitrate, "fps": 30,
                                             "duration": seconds})],
                    cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True,
                    stdout=subprocess.DEVNULL)
            viewer.send_signal(signal.SIGTERM)
            summary = json.loads(viewer.stdout.read().strip().splitlines()[-1])
            _, status, usage = os.wait4(viewer.pid, 0)
            viewer.returncode = os.waitstatus_to_exitcode(status)
        finally:
            if viewer.returncode is None:
                viewer.kill()
                viewer.wait()
            viewer.stdout.close()
            viewer.stderr.close()
    return round((usage.ru_utime + usage.ru_stime) * 1e9) - started_ns, summary["packets"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="each run's sending time")
    parser.add_argument("--before", type=Path, help="another checkout's viewer, for a column "
                                                    "of its own")
    arguments = parser.parse_args()
    recording = Recording(__file__, __doc__)
    variants = {"a wake-up a datagram (quantum 0)": (ROOT, {"receive_quantum": 0}),
                "batched (default quantum)": (ROOT, {})}
    if arguments.before is not None:
        variants = {f"viewer of {arguments.before}": (arguments.before, {})} | variants
    table = Table(title=f"CPU per packet received, viewer on loopback (30 fps streamer, "
                        f"{arguments.seconds:g} s a run)", title_justify="left")
    table.add_column("bitrate")
    table.add_column("packets/s")
    for name in variants:
        table.add_column(name)
    fixed_ns = [viewer_cpu(tree, params, None, arguments.seconds)[0]
                for tree, params in variants.values()]
    table.add_row("none", "0", *(f"{used_ns / 1e9:.3f} CPU-s fixed" for used_ns in fixed_ns))
    for bitrate, rate in RATES.items():
        cells = []
        for (tree, params), idle_ns in zip(variants.values(), fixed_ns):
            used_ns, packets = viewer_cpu(tree, params, bitrate, arguments.seconds)
            cells.append(f"{(used_ns - idle_ns) / 1e3 / packets:.1f} µs ({packets} packets)")
        table.add_row(bitrate, rate, *cells)
    Console().print(recording.table(table))
    print(f"written {recording.save()}")


if __name__ == "__main__":
    main()
