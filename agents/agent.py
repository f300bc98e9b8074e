"""An agent's command line, tables and stop flag: what every traffic agent is.

An agent is a module run inside a host as::

    python -m agents.<agent> --node NAME --out RUN_DIR --params JSON [--seed N]

(or forked into the host by :mod:`agents.launcher`, which calls its ``main`` with those
arguments).

Each agent module defines ``Params`` (an :class:`AgentParams` model: what the scenario's
``params:`` may say, with units parsed by :mod:`edgebed.units`), ``main(argv=None)`` and, if
it writes tables of its own, ``TABLES`` (table name -> columns); :mod:`agents.catalog` finds
agent modules by these names, so adding an agent edits no shared file.
The runner passes the validated parameters as JSON, node references already turned into IPs.

It writes tidy tables (one CSV per table and agent: ``RUN_DIR/records/<table>/<node>-<agent>.csv``,
merged by the runner into ``RUN_DIR/tables/<table>.csv``), stops cleanly on SIGTERM or SIGINT
(the runner's way of ending it), and prints one JSON summary line on stdout when it ends.

Tables every agent may write (columns in order; docs: concepts, agents):

* ``flows``: node, agent, flow, peer, packets, unique, lost, loss_fraction, duplicates,
  reordered, bytes, duration_s, goodput_bps, delay_mean_ms, delay_p50_ms, delay_p99_ms,
  delay_max_ms, delay_std_ms, jitter_ms
* ``flow_seconds``: node, agent, flow, second, packets, bytes, lost, delay_mean_ms, jitter_ms,
  time_s (when the second began: CLOCK_REALTIME seconds, so flows line up on one clock)
* ``sender_lateness``: node, agent, flow, packets, late_p50_us, late_p99_us, late_max_us,
  late_over_1ms_fraction
* ``malformed``: node, agent, port, count, first_seen_ns, example_hex (datagrams that were not
  what the agent listens for; counted, logged, skipped)
* ``agent_drops``: node, agent, cause, flow, port, packets (what an agent dropped on its own,
  by cause: the fidelity monitor flags those nobody configured)
"""

from __future__ import annotations

import argparse
import gc
import json
import signal
from pathlib import Path
from typing import Annotated, Callable, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from edgebed.tables import TableWriter

# A parameter naming another node of the scenario (``to: edge1``) or a controller service
# (``to: video``). The scenario's checks make sure it exists; the runner hands the agent its IP
# address (a service's virtual address) instead of its name.
NodeRef = Annotated[str, Field(json_schema_extra={"node_ref": True},
                               description="a node or service of the scenario (the agent gets "
                                           "its IP)")]


class AgentParams(BaseModel):
    """Base of every agent's parameters: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    undilatable: ClassVar[str | None] = None
    """Why the agent cannot run in dilated time (a clock or timers of its own that edgebed's
    clock does not reach); None when it can."""


TABLES = {
    # gap_max_ms: the longest time between two consecutive arrivals (new packets only).
    "flows": ("node", "agent", "flow", "peer", "packets", "unique", "lost", "loss_fraction",
              "duplicates", "reordered", "bytes", "duration_s", "goodput_bps", "delay_mean_ms",
              "delay_p50_ms", "delay_p99_ms", "delay_max_ms", "delay_std_ms", "jitter_ms",
              "gap_max_ms"),
    "flow_seconds": ("node", "agent", "flow", "second", "packets", "bytes", "lost",
                     "delay_mean_ms", "jitter_ms", "time_s"),
    "sender_lateness": ("node", "agent", "flow", "packets", "late_p50_us", "late_p99_us",
                        "late_max_us", "late_over_1ms_fraction"),
    # Per flow a receiver measures (its flows row has the same flow name): where it went and
    # how many datagrams the socket took, so the runner can balance sent against received.
    "sent": ("node", "agent", "flow", "to", "datagrams", "send_errors"),
    "malformed": ("node", "agent", "port", "count", "first_seen_ns", "example_hex"),
    # Per cause, and per stream or socket where the cause has one (the other column empty).
    "agent_drops": ("node", "agent", "cause", "flow", "port", "packets"),
}
"""The tables every agent may write (through :class:`agents.flows.FlowStats`,
:class:`agents.pacing.Pacer`, :class:`agents.flows.MalformedLog` and
:func:`agents.sockets.record_socket_drops`). An agent module declares the tables only it writes in its own ``TABLES``
(table name -> columns, ``node`` and ``agent`` first) and hands them to :class:`Agent`."""

# The causes of ``agent_drops``: a packet of a frame the agent had given up on already came;
# the kernel found the agent's receive socket full; its send socket's buffer refused a send.
AFTER_CUT = "after_cut"
RECEIVE_BUFFER_FULL = "receive_buffer_full"
SEND_BUFFER_FULL = "send_buffer_full"


def with_shared_tables(tables: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """An agent module's ``tables`` with the shared :data:`TABLES`; ValueError if it redeclares
    a shared one."""
    clash = sorted(set(tables) & set(TABLES))
    if clash:
        raise ValueError(f"tables {', '.join(clash)} are shared (agents.agent.TABLES); "
                         f"an agent module may not declare them again")
    return TABLES | tables


# Set in an agent the launcher parked (:mod:`agents.launcher`): the next Agent constructed
# calls it once its arguments are parsed, and it returns at the agent's start on the timeline.
_start_gate: Callable[[], None] | None = None


def park_until(gate: Callable[[], None]) -> None:
    """Make the Agent this process constructs wait in ``gate`` before it starts: after its
    arguments are parsed (what an agent's start costs before anything of its own), before its
    signal handlers (SIGTERM ends a parked agent as it ends one still starting)."""
    global _start_gate
    _start_gate = gate


def _pass_start_gate() -> None:
    global _start_gate
    gate, _start_gate = _start_gate, None
    if gate is not None:
        gate()


class Agent:
    """An agent's context: who and where it is, its parameters, its tables, its stop flag."""

    def __init__(self, name: str, argv: list[str] | None = None,
                 tables: dict[str, tuple[str, ...]] | None = None):
        parser = argparse.ArgumentParser(prog=f"python -m agents.{name}")
        parser.add_argument("--node", required=True)
        parser.add_argument("--out", required=True, type=Path, help="the run directory")
        parser.add_argument("--params", default="{}", help="JSON parameters")
        parser.add_argument("--seed", type=int, default=1)
        arguments = parser.parse_args(argv)
        self.name = name
        self.node = arguments.node
        self.out = arguments.out
        self.seed = arguments.seed
        try:
            self.params = json.loads(arguments.params)
        except ValueError as error:
            parser.error(f"--params: {error}")
        _pass_start_gate()
        self.stopping = False
        self.columns = with_shared_tables(tables or {})
        self._tables: dict[str, TableWriter] = {}
        # Measurement state grows with every packet (flows, frames, per-second buckets), and
        # the cycle collector's passes over it stall the hot path for milliseconds; agents
        # make no reference cycles that matter for their lifetime.
        gc.disable()
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._stop)

    def _stop(self, _number, _frame) -> None:
        self.stopping = True

    def table(self, name: str) -> TableWriter:
        if name not in self._tables:
            path = self.out / "records" / name / f"{self.node}-{self.name}.csv"
            if name not in self.columns:
                raise KeyError(f"agent {self.name} writes table {name!r}, which neither its "
                               f"module's TABLES nor agents.agent.TABLES declares")
            self._tables[name] = TableWriter(path, self.columns[name])
        return self._tables[name]

    def row(self, table: str, *values) -> None:
        """A row of ``table``; the node and agent columns are filled in."""
        self.table(table).row(self.node, self.name, *values)

    def finish(self, summary: dict) -> None:
        for writer in self._tables.values():
            writer.close()
        print(json.dumps({"node": self.node, "agent": self.name} | summary), flush=True)



def epoch_seconds(ns: int) -> str:
    """A time in seconds since the epoch as a table writes it: to the microsecond (the
    tables' default of six significant digits would leave whole minutes)."""
    return f"{ns / 1e9:.6f}"
