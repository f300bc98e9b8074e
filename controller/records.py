"""What edgebed's controller app keeps on disk: its tables (decisions, policy calls, load
reports), its placements in ``state.json`` for a controller that takes over, and its
``status.json`` for the runner."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

from edgebed.files import atomic_write
from edgebed import clock

from .traces import TRACE_COLUMNS

TABLES = {
    # One row per decision carried out: from the policy's answer to the switches' barriers.
    # Joins decided together (one policy call, one barrier per switch) have a row each, with
    # the batch's figures; ``together`` counts the flows decided in that pass. ``attributes``:
    # a placed or moved flow's decision attributes as JSON (what the policy told its hosts,
    # dispatch's transcoder_started say), ``{}`` for other rows.
    "decisions": ("node", "agent", "time", "kind", "flow", "server", "switches", "messages",
                  "policy_ms", "send_ms", "install_ms", "together", "attributes"),
    # One row per policy call: what it was given, what it answered, how long it took.
    "policy_trace": ("node", "agent", "time", *TRACE_COLUMNS),
    # One row per load report that arrived, kept or not: its age is arrival minus the sender's
    # clock (the hosts of a run share CLOCK_REALTIME), gaps in seq are reports lost on the way.
    "load_reports": ("node", "agent", "time", "server", "service", "seq", "urgent", "load",
                     "age_ms", "kept", "metrics"),
}
"""The tables the controller writes, as ``records/<table>/controller-controller.csv`` beside the
agents' (:class:`edgebed.tables.TableWriter`), merged with theirs after the run."""
LOG = logging.getLogger("edgebed.controller")


@dataclass
class PendingInstall:
    """A decision whose rules are on their way: done when every switch answered its barrier."""

    kind: str
    placed: dict[str, str]  # flow -> server
    decided_ns: int
    policy_ms: float
    switches: set[str]
    messages: int
    sent_ns: int  # when the last message was handed to the switch connections
    waiting: set[int] = field(default_factory=set)  # barrier xids


class Records:
    """The records part of :class:`controller.app.EdgebedController`."""

    def _restore(self) -> None:
        state = self.out / "state.json"
        if state.exists():
            self.core.restore(json.loads(state.read_text()))
            LOG.info("took over %d placed flows from %s", len(self.core.flows), state)

    def _save(self) -> None:
        atomic_write(self.out / "state.json", json.dumps(self.core.snapshot()))
    def _write_status(self, stopped: bool = False) -> None:
        status = {"pid": os.getpid(), "stopped": stopped,
                  "connected": sorted(self.datapaths), "synced": sorted(self.synced),
                  "flows": len(self.core.flows), "links_down": sorted(self.core.down),
                  "control": self.control.counters(), "load_reports": dict(self.core.load_counts),
                  "period_origin": self.period_origin}
        atomic_write(self.out / "status.json", json.dumps(status))

    def _record(self, pending: PendingInstall, done_ns: int) -> None:
        """The decision's ``decisions`` row: one per flow for placements (each join is a
        decision of its own to the host that asked), one for the others."""
        placed = pending.placed
        if pending.kind == "place" and placed:
            rows = [(flow, server) for flow, server in sorted(placed.items())]
        else:
            rows = [(",".join(sorted(placed)) or "-", ",".join(sorted(set(placed.values())))
                     or "-")]
        stamp = f"{clock.time():.6f}"
        for flow, server in rows:
            record = self.core.flows.get(flow) if pending.kind != "leave" else None
            attributes = dict(record.placement.attributes) if record is not None else {}
            self.tables["decisions"].row(
                "controller", "controller", stamp, pending.kind, flow, server,
                len(pending.switches), pending.messages, f"{pending.policy_ms:.3f}",
                f"{(pending.sent_ns - pending.decided_ns) / 1e6:.3f}",
                f"{(done_ns - pending.decided_ns) / 1e6:.3f}", max(1, len(placed)),
                json.dumps(attributes, sort_keys=True, separators=(",", ":")))

    def _write_traces(self) -> None:
        """A ``policy_trace`` row for each policy call the core made since the last."""
        stamp = f"{clock.time():.6f}"
        for trace in self.core.take_traces():
            self.tables["policy_trace"].row("controller", "controller", stamp, *trace.row())
