"""Whether the switches keep their controller through the timeline: their connection state
polled every :data:`PERIOD_S` (OVS's own view, each Controller record's ``is_connected``), each
switch's spells without one recorded in the ``controller_connections`` table
(``tables/controller_connections.csv`` after the run), and a spell the schedule did not ask for
(a remote controller that died, edgebed's that crashed) flagged in the fidelity verdict.

A spell starts at the first poll that finds the switch unconnected and ends at the first that
finds it connected again. OVS writes a change of connection to its database only at its next
statistics update (every 5 s): a spell is seen up to :data:`OVS_REPORT_S` late, and one
shorter than that may go unseen; a switch whose controllers it has not yet reported connected
(one started or restarted moments before) neither begins nor ends a spell.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgebed.tables import TableWriter
from edgebed import clock

PERIOD_S = 1.0
OVS_REPORT_S = 5.0  # ovs-vswitchd's stats-update-interval, when it writes a connection's state
TABLE = "controller_connections"
COLUMNS = ("node", "agent", "switch", "lost_t_s", "regained_t_s", "lost_for_s", "scheduled")


@dataclass
class Loss:
    """One switch's spell without a controller, on the timeline; ``regained_s`` None while it
    lasts (and when it lasted to the run's end)."""

    switch: str
    lost_s: float
    regained_s: float | None
    scheduled: bool  # the schedule had had the controller down, lately enough, when it began

    def length(self, end_s: float) -> float:
        return (end_s if self.regained_s is None else self.regained_s) - self.lost_s


class Losses:
    """The spells of a run's switches, from what each poll finds."""

    def __init__(self):
        self.all: list[Loss] = []
        self._open: dict[str, Loss] = {}  # switch -> its spell going on

    def observe(self, t_s: float, connections: dict[str, bool | None],
                scheduled: bool) -> list[Loss]:
        """One poll at ``t_s``: ``connections``, whether each switch had a controller then
        (None: not known yet); ``scheduled``: the schedule has had the controller down lately.
        Returns the spells it began."""
        began = []
        for switch, connected in sorted(connections.items()):
            if connected and switch in self._open:
                self._open.pop(switch).regained_s = t_s
            elif connected is False and switch not in self._open:
                loss = self._open[switch] = Loss(switch, t_s, None, scheduled)
                self.all.append(loss)
                began.append(loss)
        return began


def loss_flags(losses: list[Loss], end_s: float) -> list[str]:
    """The fidelity flags of the spells the schedule did not ask for, one per moment and
    length (the switches that lost their controller together, named together)."""
    together: dict[tuple, list[str]] = {}
    for loss in losses:
        if not loss.scheduled:
            together.setdefault((loss.lost_s, loss.regained_s), []).append(loss.switch)
    flags = []
    for (lost_s, regained_s), switches in together.items():
        subject = (f"switch {switches[0]} lost its controller" if len(switches) == 1 else
                   f"switches {', '.join(switches)} lost their controller")
        if regained_s is None:
            flags.append(f"{subject} at t={lost_s:.1f}s, unscheduled, and had none at the "
                         f"run's end ({end_s - lost_s:.1f}s later)")
        else:
            flags.append(f"{subject} at t={lost_s:.1f}s for {regained_s - lost_s:.1f}s, "
                         "unscheduled")
    return flags


class ControllerWatch:
    """The watch over one run's switches: ``connections()`` says whether each is connected to
    a controller now (:meth:`topologies.network.ScenarioNetwork.controller_connections`);
    ``controller`` is edgebed's controller process (:class:`controller.launcher.ControllerProcess`),
    None for a remote controller, which the schedule cannot take down."""

    def __init__(self, run_dir: Path, connections: Callable[[], dict[str, bool | None]],
                 controller=None):
        self.path = run_dir / "records" / TABLE / "runner-runner.csv"
        self.connections = connections
        self.controller = controller
        self.losses = Losses()
        self.next_due = clock.monotonic()
        self._stops = 0  # of edgebed's controller by the run, counted at the latest poll
        self._outage_s: float | None = None  # the latest poll in or after a scheduled outage

    def poll(self, t_s: float) -> list[str]:
        """Look when due (``t_s`` on the timeline); returns the unscheduled losses it found,
        and a look that failed, said as warnings as they happen."""
        if clock.monotonic() < self.next_due:
            return []
        self.next_due = clock.monotonic() + PERIOD_S
        scheduled = self._scheduled(t_s)
        try:
            connections = self.connections()
        except subprocess.SubprocessError as problem:
            return [f"no look at the switches' controller connections at t={t_s:.1f}s: "
                    f"{problem}"]
        began = self.losses.observe(t_s, connections, scheduled)
        return [f"switch {loss.switch} lost its controller at t={t_s:.1f}s"
                for loss in began if not loss.scheduled]

    def _scheduled(self, t_s: float) -> bool:
        """Whether a loss found at ``t_s`` may be the schedule's: its ``controller_down`` had
        edgebed's controller down now, or since the previous poll, within the time OVS takes
        to report a loss."""
        if self.controller is not None and (self.controller.stopped_by_run()
                                            or len(self.controller.exits) != self._stops):
            self._stops = len(self.controller.exits)
            self._outage_s = t_s
        return self._outage_s is not None and t_s - self._outage_s <= OVS_REPORT_S + PERIOD_S

    def finish(self, t_s: float) -> list[str]:
        """The last look, at the timeline's end ``t_s``: writes the table and returns the
        fidelity flags of the unscheduled losses."""
        self.next_due = 0.0
        self.poll(t_s)
        table = TableWriter(self.path, COLUMNS)
        for loss in self.losses.all:
            table.row("runner", "runner", loss.switch, round(loss.lost_s, 3),
                      None if loss.regained_s is None else round(loss.regained_s, 3),
                      round(loss.length(t_s), 3), int(loss.scheduled))
        table.close()
        return loss_flags(self.losses.all, t_s)
