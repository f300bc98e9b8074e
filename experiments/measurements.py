"""What a run measured, gathered after it: the agents' tables merged, and whether the machine
kept up (the fidelity monitor)."""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgebed.files import atomic_output
from topologies.impairments.drops import EMULATOR_CAUSES
from topologies.model import EmulatorLossLimit

# A sender fell behind when more than 5% of its packets left over 1 ms late or its p99 lateness
# passed 2 ms: beyond the accuracy the emulated links themselves hold (mean delay within
# 0.5 ms, p99 within 3 ms), so what was measured no longer follows the schedule. A flow too
# sparse for percentiles (under 100 packets) fell behind when one packet left 10 ms late.
LATE_FRACTION_LIMIT = 0.05
LATE_P99_LIMIT_US = 2000.0
SPARSE_FLOW_PACKETS = 100
SPARSE_LATE_MAX_US = 10_000.0
# The machine saturated when a whole second was at least this busy, twice in a row.
CPU_BUSY_LIMIT = 0.95


def merge_tables(run_dir: Path) -> dict[str, int]:
    """``tables/<table>.csv`` from every agent's part; rows per table."""
    counts = {}
    records = run_dir / "records"
    if not records.is_dir():
        return counts
    for table in sorted(p for p in records.iterdir() if p.is_dir()):
        parts = sorted(table.glob("*.csv"))
        output = run_dir / "tables" / f"{table.name}.csv"
        output.parent.mkdir(exist_ok=True)
        rows = 0
        with atomic_output(output, newline="") as stream:
            writer = csv.writer(stream)
            header = None
            for part in parts:
                with open(part, newline="") as source:
                    reader = csv.reader(source)
                    part_header = next(reader, None)
                    if part_header is None:
                        continue
                    if header is None:
                        header = part_header
                        writer.writerow(header)
                    for row in reader:
                        writer.writerow(row)
                        rows += 1
        counts[table.name] = rows
    return counts


def host_addresses(nodes: dict) -> dict[str, str]:
    """Each host's address (its first interface's, without the prefix length) from the nodes
    of the resolved scenario a run wrote (``scenario.yaml``'s ``topology.nodes``)."""
    return {name: next(iter(node["interfaces"].values())).split("/")[0]
            for name, node in nodes.items() if node.get("interfaces")}


def read_table(run_dir: Path, table: str) -> list[dict]:
    path = run_dir / "tables" / f"{table}.csv"
    if not path.exists():
        return []
    with open(path, newline="") as stream:
        return list(csv.DictReader(stream))


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


@dataclass
class CpuMonitor:
    """The machine's CPU use, one sample per call to :meth:`sample` (the runner calls it once a
    second); the fractions are of all CPUs together."""

    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds, busy fraction)
    _last: tuple[int, int] | None = None
    _origin: float = field(default_factory=time.monotonic)

    def sample(self) -> None:
        now = _cpu_times()
        if self._last is not None:
            busy, total = now[0] - self._last[0], now[1] - self._last[1]
            if total > 0:
                self.samples.append((round(time.monotonic() - self._origin, 1), busy / total))
        self._last = now

    def saturated_at(self) -> float | None:
        """The time of the first of two consecutive saturated samples, if any."""
        for (first, busy), (_, next_busy) in zip(self.samples, self.samples[1:]):
            if busy >= CPU_BUSY_LIMIT and next_busy >= CPU_BUSY_LIMIT:
                return first
        return None


def _behind(packets: int, late_p99_us: float, late_max_us: float, late_fraction: float) -> bool:
    """Whether a flow of ``packets`` left too late (see the limits above)."""
    if packets < SPARSE_FLOW_PACKETS:
        return late_max_us > SPARSE_LATE_MAX_US
    return late_fraction > LATE_FRACTION_LIMIT or late_p99_us > LATE_P99_LIMIT_US


def emulator_loss_flags(losses: list[dict], limit: EmulatorLossLimit) -> list[str]:
    """Flags for the link directions whose emulator-made loss passed ``limit``; marks each
    entry of ``losses`` (:meth:`LinkControl.losses`) with its ``limit_fraction`` and
    ``over_limit``."""
    flags = []
    for entry in losses:
        allowed = max(limit.relative * entry["configured_loss"], limit.absolute)
        entry["limit_fraction"] = allowed
        entry["over_limit"] = entry["emulator_made"] > allowed * entry["offered"]
        if entry["over_limit"]:
            causes = ", ".join(f"{cause.replace('_', ' ')} {entry[cause]}"
                               for cause in EMULATOR_CAUSES if entry[cause])
            a, b = entry["endpoints"]
            ends = f"{a} -> {b}" if entry["direction"] == "forward" else f"{b} -> {a}"
            flags.append(f"emulator-made loss on link {entry['link']} ({ends}): "
                         f"{entry['emulator_made']} of {entry['offered']} frames "
                         f"({entry['emulator_made_fraction']:.2%}: {causes}), above the limit "
                         f"of {allowed:.2%} (configured loss {entry['configured_loss']:.2%})")
    return flags


def wire_lateness_flags(wires: dict | None) -> list[str]:
    """Flags for the wire directions that delivered frames late, from the relays' final
    statistics by link (the fallback impairment backend's; a run's summary ``wires``)."""
    flags = []
    for link, statistics in (wires or {}).items():
        for direction, figures in (statistics or {}).items():
            late = figures.get("late_us") or {}
            if _behind(figures.get("frames_out") or 0, late.get("p99") or 0,
                       late.get("max") or 0, 0.0):
                flags.append(f"the wire of link {link} ({direction}) delivered frames late: "
                             f"p99 {(late.get('p99') or 0) / 1000:.2f} ms, max "
                             f"{(late.get('max') or 0) / 1000:.2f} ms after their due time")
    return flags


def network_kept_up(summary: dict) -> bool:
    """Whether a run's emulated network did what it was configured to (from its summary): no
    wire delivered frames late and no link direction's emulator-made loss passed its limit.
    Narrower than the fidelity verdict, which also flags the hosts (a saturated CPU, a sender
    behind its schedule): what a path's measured delay and loss owe to the emulator."""
    return not wire_lateness_flags(summary.get("wires")) and not any(
        entry.get("over_limit") for entry in summary.get("emulator_loss") or [])


def fidelity(run_dir: Path, cpu: CpuMonitor, wires: dict | None = None,
             losses: list[dict] | None = None,
             loss_limit: EmulatorLossLimit | None = None) -> dict:
    """``{"ok": bool, "flags": [...], "cpu_busy_max": ...}`` for the run's summary; ``wires``
    are the relays' final statistics by link (the fallback impairment backend), ``losses``
    the links' drops by cause (:meth:`LinkControl.losses`): emulator-made loss past
    ``loss_limit`` makes the run invalid, as a saturated CPU does."""
    flags = (emulator_loss_flags(losses or [], loss_limit or EmulatorLossLimit())
             + wire_lateness_flags(wires))
    for row in read_table(run_dir, "sender_lateness"):
        late_fraction = float(row["late_over_1ms_fraction"] or 0)
        late_p99 = float(row["late_p99_us"] or 0)
        if _behind(int(row["packets"] or 0), late_p99, float(row["late_max_us"] or 0),
                   late_fraction):
            flags.append(f"{row['agent']} on {row['node']} (flow {row['flow']}) fell behind its "
                         f"schedule: {late_fraction:.1%} of packets over 1 ms late, "
                         f"p99 {late_p99 / 1000:.2f} ms")
    saturated = cpu.saturated_at()
    if saturated is not None:
        flags.append(f"the CPU was saturated (>= {CPU_BUSY_LIMIT:.0%} busy for two seconds) "
                     f"from t={saturated:g}s")
    return {"ok": not flags, "flags": flags,
            "cpu_busy_max": max((busy for _, busy in cpu.samples), default=None),
            "cpu_samples": cpu.samples}
