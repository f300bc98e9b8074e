"""Whether time dilation leaves a run's results alone: the same scenario at several factors.

The scale benchmark's video scenario (``n`` streams, 3 Mbit/s at 30 fps, each crossing one link
of 20 ms delay and 1 % loss each way) runs at each time dilation factor N; every run's figures
are its own tables, in virtual time. Against the run at the first factor, each run's stream
delay mean must agree within max(0.5 ms, 2 %), its 99th percentile within 5 %, its goodput
within 3 %, and its loss must agree with the first run's at 99 %: Fisher's exact test on the
two runs' lost and received packets does not reject one loss rate for both (p >= 0.01; each
run's count is a sample, so neither run's own interval is the other's truth). Runs the
fidelity monitor flagged are shown, and their agreement is not counted as met.

    sudo .venv/bin/python benchmarks/dilation.py [--flows 2] [--duration 10] [--dilate 1,2,4,8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from scipy.stats import fisher_exact
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments import scenarios  # noqa: E402
from experiments.measurements import read_table  # noqa: E402
from experiments.runner import RunOptions, run_scenario  # noqa: E402
from recorder import Recording  # noqa: E402
from scale import KINDS, scenario_text  # noqa: E402

DELAY_MEAN_WITHIN_MS = 0.5
DELAY_MEAN_WITHIN = 0.02
DELAY_P99_WITHIN = 0.05
GOODPUT_WITHIN = 0.03
LOSS_CONFIDENCE = 0.99


@dataclass
class Figures:
    """One run's streams, pooled: delay mean and worst p99 (ms), goodput (bit/s), packets
    lost of sent, and whether its fidelity verdict was clean."""

    dilation: float
    delay_mean_ms: float
    delay_p99_ms: float
    goodput_bps: float
    lost: int
    sent: int
    clean: bool
    flags: str


def run_at(dilation: float, flows: int, duration_s: float, runs_root: Path) -> Figures:
    text = scenario_text(KINDS["video"], flows, duration_s, dilation=dilation)
    loaded = scenarios.loads(text, file=f"<dilation {dilation:g}>")
    result = run_scenario(loaded, RunOptions(runs_root=runs_root))
    if result.status != "completed":
        raise RuntimeError(f"the run at N = {dilation:g} {result.status}: "
                           f"{result.summary.get('error')}")
    streams = [row for row in read_table(result.run_dir, "flows") if row["agent"] == "viewer"]
    received = sum(int(row["unique"]) for row in streams)
    lost = sum(int(row["lost"]) for row in streams)
    fidelity = result.summary.get("fidelity") or {}
    return Figures(
        dilation,
        sum(float(row["delay_mean_ms"]) * int(row["unique"]) for row in streams) / received,
        max(float(row["delay_p99_ms"]) for row in streams),
        sum(float(row["goodput_bps"]) for row in streams), lost, lost + received,
        bool(fidelity.get("ok")), "; ".join(fidelity.get("flags") or []))


def agreement(base: Figures, other: Figures) -> dict[str, bool]:
    """Which of ``other``'s figures agree with ``base``'s within the stated ranges."""
    losses = fisher_exact([[base.lost, base.sent - base.lost],
                           [other.lost, other.sent - other.lost]])
    return {
        "delay mean": abs(other.delay_mean_ms - base.delay_mean_ms)
        <= max(DELAY_MEAN_WITHIN_MS, DELAY_MEAN_WITHIN * base.delay_mean_ms),
        "delay p99": abs(other.delay_p99_ms - base.delay_p99_ms)
        <= DELAY_P99_WITHIN * base.delay_p99_ms,
        "goodput": abs(other.goodput_bps - base.goodput_bps) <= GOODPUT_WITHIN * base.goodput_bps,
        "loss": losses.pvalue >= 1 - LOSS_CONFIDENCE,
    }


def main() -> int:
    recording = Recording(__file__, __doc__)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=2, help="video streams a run")
    parser.add_argument("--duration", type=float, default=10.0, help="virtual seconds a run")
    parser.add_argument("--dilate", default="1,2,4,8",
                        help="comma-separated factors; the first is the reference")
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    arguments = parser.parse_args()
    factors = [float(factor) for factor in arguments.dilate.split(",")]
    console = Console(width=200)
    with tempfile.TemporaryDirectory(prefix="edgebed-dilation-") as scratch:
        runs_root = arguments.keep or Path(scratch)
        runs = [run_at(factor, arguments.flows, arguments.duration, runs_root)
                for factor in factors]
    table = Table(title=f"the same {arguments.flows} video streams at each time dilation "
                        f"({arguments.duration:g} s of virtual time; figures in virtual time; "
                        f"agreement against N = {factors[0]:g})", title_justify="left")
    for column in ("N", "delay mean ms", "delay p99 ms", "goodput Mbit/s", "loss",
                   "fidelity", "agrees with the reference"):
        table.add_column(column)
    for run in runs:
        agrees = agreement(runs[0], run)
        said = ("reference" if run is runs[0] else
                "not counted (flagged)" if not (run.clean and runs[0].clean) else
                ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in agrees.items()))
        table.add_row(f"{run.dilation:g}", f"{run.delay_mean_ms:.2f}", f"{run.delay_p99_ms:.2f}",
                      f"{run.goodput_bps / 1e6:.3f}", f"{run.lost} of {run.sent}",
                      "clean" if run.clean else run.flags, said)
    console.print(recording.table(table))
    recording.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
