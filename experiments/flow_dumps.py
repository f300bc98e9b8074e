"""The switches' flow tables as the controller's apps left them, whoever wrote the apps: every
switch's OpenFlow 1.3 flow dump appended to ``switch_flows/<switch>.txt`` in the run directory every
:data:`PERIOD_S` of the timeline and once more at its end, and the flows, packets and bytes of
each of its tables in the ``switch_flows`` table (``tables/switch_flows.csv`` after the run).
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

from edgebed.tables import TableWriter
from edgebed import clock

PERIOD_S = 5.0
COLUMNS = ("node", "agent", "time", "t_s", "final", "switch", "table", "flows", "packets",
           "bytes")
DUMP_TIMEOUT_S = 10.0
FLOW_FIELDS = re.compile(r"\btable=(\d+), n_packets=(\d+), n_bytes=(\d+)")


def table_counts(dump: str) -> dict[int, list[int]]:
    """Table id -> [flows, packets, bytes] of an ``ovs-ofctl dump-flows`` output."""
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for line in dump.splitlines():
        found = FLOW_FIELDS.search(line)
        if found is None:
            continue
        table, packets, size = map(int, found.groups())
        counts[table][0] += 1
        counts[table][1] += packets
        counts[table][2] += size
    return dict(counts)


class FlowDumps:
    """The flow dumps of a run's switches (``bridges``: switch -> its OVS bridge)."""

    def __init__(self, run_dir: Path, bridges: dict[str, str]):
        self.directory = run_dir / "switch_flows"
        self.directory.mkdir(exist_ok=True)
        self.bridges = bridges
        self.table = TableWriter(run_dir / "records" / "switch_flows" / "runner-runner.csv",
                                 COLUMNS, flush=True)
        self.counts: dict[str, int] = {}  # switch -> flows at the latest dump
        self.next_due = clock.monotonic()

    def due(self) -> bool:
        return clock.monotonic() >= self.next_due

    def record(self, t_s: float, final: bool) -> list[str]:
        """Dump every switch now (``t_s`` on the timeline); returns the switches that could
        not be dumped, said as warnings. The final dump closes the table."""
        self.next_due = clock.monotonic() + PERIOD_S
        stamp = f"{clock.time():.6f}"
        problems = []
        for switch, bridge in self.bridges.items():
            try:
                dump = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge],
                                      capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                problems.append(f"no flow dump of {switch} at t={t_s:.1f}s: ovs-ofctl did not "
                                f"answer within {DUMP_TIMEOUT_S:g}s")
                continue
            if dump.returncode != 0:
                problems.append(f"no flow dump of {switch} at t={t_s:.1f}s: "
                                f"{dump.stderr.strip() or f'ovs-ofctl exited {dump.returncode}'}")
                continue
            with open(self.directory / f"{switch}.txt", "a") as stream:
                stream.write(f"--- t={t_s:.3f}s{' final' if final else ''} bridge={bridge}\n"
                             f"{dump.stdout}")
            counts = table_counts(dump.stdout)
            self.counts[switch] = sum(flows for flows, _, _ in counts.values())
            for table, (flows, packets, size) in sorted(counts.items()):
                self.table.row("runner", "runner", stamp, f"{t_s:.3f}", int(final), switch,
                               table, flows, packets, size)
        if final:
            self.table.close()
        return problems
