"""Impairment fidelity: configured against measured, for every backend this kernel has, and the
packet rate at which the fallback relay's delay error passes 1 ms.

Measured on a real Mininet path (experiments.fidelity: v1 - s1 - s2 - e1) with the UDP probe
(kernel receive timestamps) and iperf3. Host-switch and switch-switch links are measured alike.

    sudo .venv/bin/python benchmarks/impairment.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from mininet.log import setLogLevel
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.fidelity import HOST_SWITCH, SWITCH_SWITCH, FidelityPath  # noqa: E402
from topologies.capabilities import probe_qdiscs  # noqa: E402
from topologies.model import Impairment  # noqa: E402

LINK_NAMES = {HOST_SWITCH: "host-switch", SWITCH_SWITCH: "switch-switch"}
RATE_SWEEP_PPS = (1000, 2000, 3000, 4000, 5000, 7500, 10_000, 15_000, 20_000)


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
    """Delay error of a 50 ms wired link as the packet rate grows; the first rate past 1 ms."""
    rows, first_bad = [], None
    for rate in RATE_SWEEP_PPS:
        path.only(HOST_SWITCH, Impairment(delay=0.05))
        measured = path.udp(rate_pps=rate, count=int(rate * (1 if quick else 2)))
        delay = measured["delay_ms"]
        error = delay["mean"] - 50 if delay else float("nan")
        rows.append((f"{rate}", f"{error:+.3f}", f"{delay['p99'] - 50:+.3f}" if delay else "-",
                     f"{measured['loss_fraction']:.2%}"))
        if first_bad is None and not abs(error) < 1.0:
            first_bad = rate
    return rows, first_bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer packets, shorter TCP runs")
    arguments = parser.parse_args()
    setLogLevel("error")
    console = Console()
    backends = ["fallback"] + (["netem"] if probe_qdiscs()["netem"] else [])
    if "netem" not in backends:
        console.print("netem: not measured, this kernel has no sch_netem")
    for backend in backends:
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
                if backend == "fallback":
                    rows, first_bad = rate_limit_rows(path, arguments.quick)
                    sweep = Table(title="fallback relay, 50 ms delay: error against packet rate "
                                        "(one direction)", title_justify="left")
                    for column in ("packets/s", "mean error ms", "p99 - 50 ms", "loss"):
                        sweep.add_column(column)
                    for row in rows:
                        sweep.add_row(*row)
                    console.print(sweep)
                    console.print("mean delay error passes 1 ms at: "
                                  + (f"{first_bad} packets/s" if first_bad else
                                     f"not within {RATE_SWEEP_PPS[-1]} packets/s"))
            finally:
                path.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
