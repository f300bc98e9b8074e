"""What a run measured, gathered after it: the agents' tables merged, and whether the machine
kept up (the fidelity monitor)."""

from __future__ import annotations

import csv
import math
import threading
from pathlib import Path

from agents.agent import RECEIVE_BUFFER_FULL, SEND_BUFFER_FULL
from edgebed.files import atomic_output
from edgebed import clock
from experiments.cpu_accounting import machine_times
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
CPU_SAMPLE_PERIOD_S = 1.0
# A thread that only sleeps and reads /proc/stat wakes within milliseconds on a machine that
# keeps up; three periods without a sample means it stalled.
CPU_SAMPLE_GAP_LIMIT = 3


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


class CpuMonitor:
    """The machine's CPU use, sampled every ``period_s`` by a thread of its own from
    :meth:`start` to :meth:`stop`, on absolute deadlines: whatever the runner is doing (starting
    200 agents, waiting on a switch), the samples keep coming. The fractions are of all CPUs
    together. A sample that came more than :data:`CPU_SAMPLE_GAP_LIMIT` periods after the one
    before says the machine could not even wake this thread: :meth:`stalled_at`."""

    def __init__(self, period_s: float = CPU_SAMPLE_PERIOD_S):
        self.period_s = period_s
        self.samples: list[tuple[float, float]] = []  # (seconds since start, busy fraction)
        self._origin = clock.monotonic()
        self._last: tuple[int, int] | None = None
        self._last_at = self._origin
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.longest_gap_s = 0.0
        self._gap_at: float | None = None

    def start(self) -> None:
        self._origin = self._last_at = clock.monotonic()
        self._last = machine_times()
        self._thread = threading.Thread(target=self._run, name="cpu-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample()

    def _run(self) -> None:
        due = self._origin + self.period_s
        while not self._stop.wait(clock.real_seconds(max(0.0, due - clock.monotonic()))):
            self.sample()
            # The next deadline after now: a stall skips deadlines rather than bunching samples.
            due += self.period_s * max(1, math.ceil((clock.monotonic() - due) / self.period_s))

    def sample(self) -> None:
        now, at = machine_times(), clock.monotonic()
        if self._last is not None:
            busy, total = now[0] - self._last[0], now[1] - self._last[1]
            if total > 0:
                self.samples.append((round(at - self._origin, 1), busy / total))
            if at - self._last_at > self.longest_gap_s:
                self.longest_gap_s, self._gap_at = at - self._last_at, self._last_at - self._origin
        self._last, self._last_at = now, at

    def saturated_at(self) -> float | None:
        """The time of the first of two consecutive saturated samples, if any."""
        for (first, busy), (_, next_busy) in zip(self.samples, self.samples[1:]):
            if busy >= CPU_BUSY_LIMIT and next_busy >= CPU_BUSY_LIMIT:
                return first
        return None

    def stalled_at(self) -> float | None:
        """When the longest wait between two samples began, if it passed the limit."""
        if self.longest_gap_s > CPU_SAMPLE_GAP_LIMIT * self.period_s:
            return round(self._gap_at, 1)
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


# What an agent dropped on its own (``agent_drops``) that flags a run, by cause: loss nobody
# configured. A send its socket's buffer refused is one: the buffer
# (:data:`agents.sockets.SEND_BUFFER`) holds the link's queue several times, so a configured
# rate's congestion fills that queue, whose drops are counted as the rate's, before it.
# Counted, not flagged: a packet of a frame the node had given up on already (``after_cut``):
# the node's own reorder wait decided, as a real server's does, and the same count comes from
# causes that are the scheme's, not the emulator's (the node's upstream moved mid-frame, a
# repair came after the wait, configured jitter); a run's table says how many, for the report
# to weigh.
AGENT_DROP_FLAGS = {
    RECEIVE_BUFFER_FULL: "did not read its receive socket in time: {packets} datagrams "
                         "dropped for a full buffer",
    SEND_BUFFER_FULL: "could not send {packets} datagrams for a full send buffer",
}


def agent_drop_flags(rows: list[dict]) -> list[str]:
    """Flags for what agents dropped on their own, nobody having configured it (rows of
    ``agent_drops``): one per agent on a node and cause, with the streams or ports."""
    counted: dict[tuple[str, str, str], dict[str, int]] = {}
    for row in rows:
        packets = int(row["packets"] or 0)
        if row["cause"] in AGENT_DROP_FLAGS and packets:
            where = f"of {row['flow']}" if row["flow"] else f"on port {row['port']}"
            by_where = counted.setdefault((row["agent"], row["node"], row["cause"]), {})
            by_where[where] = by_where.get(where, 0) + packets
    return [f"{agent} on {node} "
            + AGENT_DROP_FLAGS[cause].format(packets=sum(by_where.values()))
            + f" ({', '.join(f'{packets} {where}' for where, packets in by_where.items())})"
            for (agent, node, cause), by_where in counted.items()]


def network_kept_up(summary: dict) -> bool:
    """Whether a run's emulated network did what it was configured to (from its summary): no
    wire delivered frames late and no link direction's emulator-made loss passed its limit.
    Narrower than the fidelity verdict, which also flags the hosts (a saturated CPU, a sender
    behind its schedule): what a path's measured delay and loss owe to the emulator."""
    return not wire_lateness_flags(summary.get("wires")) and not any(
        entry.get("over_limit") for entry in summary.get("emulator_loss") or [])


def fidelity(run_dir: Path, cpu: CpuMonitor, wires: dict | None = None,
             losses: list[dict] | None = None,
             loss_limit: EmulatorLossLimit | None = None,
             delivery_flags: list[str] | None = None) -> dict:
    """``{"ok": bool, "flags": [...], "cpu_busy_max": ...}`` for the run's summary; ``wires``
    are the relays' final statistics by link (the fallback impairment backend), ``losses``
    the links' drops by cause (:meth:`LinkControl.losses`): emulator-made loss past
    ``loss_limit`` makes the run invalid, as a saturated CPU does, as flows that arrived
    short of what was sent do (``delivery_flags``, :mod:`experiments.delivery`), and as
    packets an agent dropped on its own do (:func:`agent_drop_flags`)."""
    flags = (list(delivery_flags or [])
             + emulator_loss_flags(losses or [], loss_limit or EmulatorLossLimit())
             + wire_lateness_flags(wires) + agent_drop_flags(read_table(run_dir, "agent_drops")))
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
    stalled = cpu.stalled_at()
    if stalled is not None:
        flags.append(f"the machine stalled: the CPU monitor's thread got no sample for "
                     f"{cpu.longest_gap_s:.1f}s from t={stalled:g}s")
    return {"ok": not flags, "flags": flags,
            "cpu_busy_max": max((busy for _, busy in cpu.samples), default=None),
            "cpu_samples": cpu.samples}
