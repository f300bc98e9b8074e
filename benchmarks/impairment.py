"""Impairment fidelity: configured against measured, for every backend this kernel has, and the
packet rate at which the fallback relay's delay error passes 1 ms.

Measured on a real Mininet path (experiments.fidelity: v1 - s1 - s2 - e1) with the UDP probe
(kernel receive timestamps) and iperf3. Host-switch and switch-switch links are measured alike.

    sudo .venv/bin/python benchmarks/impairment.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tempfile
from pathlib import Path

from mininet.log import setLogLevel
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.fidelity import HOST_SWITCH, SWITCH_SWITCH, FidelityPath  # noqa: E402
from topologies.capabilities import probe_qdiscs  # noqa: E402
from topologies.impairments.relay import RELAY_ENGINE_KEY  # noqa: E402
from topologies.model import Impairment  # noqa: E402

LINK_NAMES = {HOST_SWITCH: "host-switch", SWITCH_SWITCH: "switch-switch"}
RATE_SWEEP_PPS = (1000, 2000, 5000, 7500, 10_000, 15_000, 20_000, 30_000, 40_000, 50_000)
# Issue 17's frames: 1,200 bytes on the wire (Ethernet 14 + IPv4 20 + UDP 8 + payload).
SWEEP_PAYLOAD_BYTES = 1200 - 42
# Both relays, side by side in one run (topologies.impairments.relay.RELAY_ENGINE_KEY).
ENGINES = ("python", "compiled")


def fidelity_rows(path: FidelityPath, link: int, quick: bool) -> list[tuple[str, str, str, str]]:
    """(what, configured, measured, error) rows for one link."""
    rows = []
    for delay_ms in (50, 150):
        path.only(link, Impairment(delay=delay_ms / 1e3))
        delay = path.udp(rate_pps=1000, count=1000 if quick else 3000)["delay_ms"]
        rows.append(("delay @1k pps (mean / p99)", f"{delay_ms} ms",
                     f"{delay['mean']:.3f} / {delay['p99']:.3f} ms",
                     f"{delay['mean'] - delay_ms:+.3f} ms"))
    path.only(link, Impairment(delay=0.05, jitter=0.01))
    delay = path.udp(rate_pps=1000, count=2000 if quick else 5000)["delay_ms"]
    rows.append(("jitter (std, normal)", "10 ms", f"{delay['std']:.3f} ms",
                 f"{(delay['std'] - 10) / 10:+.1%}"))
    for loss in (0.01, 0.05, 0.20):
        path.only(link, Impairment(loss=loss))
        measured = path.udp(rate_pps=4000, count=4000 if quick else 10_000)
        low, high = measured["loss_interval_99"]
        rows.append(("random loss", f"{loss:.0%}", f"{measured['loss_fraction']:.2%}",
                     "inside 99% interval" if low <= loss <= high else "OUTSIDE 99% interval"))
    for mbps in (10, 50):
        path.only(link, Impairment(bw=mbps * 1e6))
        goodput = path.tcp_goodput(seconds=3 if quick else 6) / 1e6
        rows.append(("rate (TCP goodput)", f"{mbps} Mbit/s", f"{goodput:.2f} Mbit/s",
                     f"{(goodput - mbps) / mbps:+.1%}"))
    return rows


def rate_limit_rows(path: FidelityPath, quick: bool) -> tuple[list[tuple], int | None]:
    """Delay error of a 50 ms wired link as the rate of 1,200-byte frames grows, with what the
    relay counted as its own drops; the first rate whose mean error passes 0.5 ms."""
    rows, first_bad = [], None
    for rate in RATE_SWEEP_PPS:
        path.only(HOST_SWITCH, Impairment(delay=0.05))
        before = emulator_drops(path)
        measured = path.udp(rate_pps=rate, count=int(rate * (1 if quick else 2)),
                            size=SWEEP_PAYLOAD_BYTES, all_sent=False)
        delay = measured["delay_ms"]
        error = delay["mean"] - 50 if delay else float("nan")
        rows.append((f"{rate}", f"{error:+.3f}", f"{delay['p99'] - 50:+.3f}" if delay else "-",
                     f"{measured['loss_fraction']:.2%}", f"{emulator_drops(path) - before}"))
        if first_bad is None and not abs(error) <= 0.5:
            first_bad = rate
    return rows, first_bad


def emulator_drops(path: FidelityPath) -> int:
    """Frames the host-switch link's relay has dropped so far that nobody configured."""
    # The relay writes its status once a second: wait for one taken after the last frame.
    time.sleep(1.2)
    statistics = json.loads(path.links.relays[HOST_SWITCH].status.read_text())
    return sum(statistics[direction][cause] for direction in ("forward", "reverse")
               for cause in ("dropped_receive_queue", "dropped_queue_full", "send_errors"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer packets, shorter TCP runs")
    parser.add_argument("--sweep-only", action="store_true",
                        help="only the fallback relays' rate sweep, both relays")
    arguments = parser.parse_args()
    setLogLevel("error")
    console = Console()
    backends = ["fallback"] + (["netem"] if probe_qdiscs()["netem"] else [])
    if "netem" not in backends:
        console.print("netem: not measured, this kernel has no sch_netem")
    for backend in [] if arguments.sweep_only else backends:
        with tempfile.TemporaryDirectory() as logs:
            path = FidelityPath(backend, Path(logs))
            path.start()
            try:
                table = Table(title=f"{backend} backend: configured vs measured",
                              title_justify="left")
                for column in ("link", "what", "configured", "measured", "error"):
                    table.add_column(column)
                for link, name in LINK_NAMES.items():
                    for row in fidelity_rows(path, link, arguments.quick):
                        table.add_row(name, *row)
                console.print(table)
            finally:
                path.stop()
    # The rate sweep: each relay on its own path, in this one run, so the two compare.
    sweeps = {}
    for engine in ENGINES:
        os.environ[RELAY_ENGINE_KEY] = engine
        with tempfile.TemporaryDirectory() as logs:
            path = FidelityPath("fallback", Path(logs))
            path.start()
            try:
                sweeps[engine] = rate_limit_rows(path, arguments.quick)
            finally:
                path.stop()
    sweep = Table(title="fallback relays, 50 ms delay, 1,200-byte frames: error against packet "
                        "rate (one direction)", title_justify="left")
    sweep.add_column("packets/s")
    for engine in ENGINES:
        for column in ("mean error ms", "p99 - 50 ms", "loss", "emulator-made"):
            sweep.add_column(f"{engine}: {column}")
    for index, rate in enumerate(RATE_SWEEP_PPS):
        sweep.add_row(str(rate), *(cell for engine in ENGINES
                                   for cell in sweeps[engine][0][index][1:]))
    console.print(sweep)
    for engine in ENGINES:
        first_bad = sweeps[engine][1]
        console.print(f"{engine} relay: mean delay error passes 0.5 ms at: "
                      + (f"{first_bad} packets/s" if first_bad else
                         f"not within {RATE_SWEEP_PPS[-1]} packets/s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
