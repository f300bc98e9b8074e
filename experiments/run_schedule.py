"""What a scenario's schedule does at its times: links and nodes up and down, a host's programs
stalled and resumed, impairment changes (told to the controller when they change a delay), the
controller down and up."""

from __future__ import annotations

from edgebed import clock


class ScheduledEvents:
    """The schedule's events, described and performed on a run's network and controller
    (:class:`experiments.runner.Run`)."""

    def __init__(self, run):
        self.run = run

    def describe(self, event) -> str:
        """The event as the run's log says it."""
        if event.action.startswith("controller_"):
            return event.action
        if event.node is not None:
            return f"{event.action} {event.node}"
        link = self.run.scenario.links[event.link]
        text = f"{event.action} {link.a} - {link.b}"
        if event.changes is not None:
            text += (f" {'/'.join(event.directions)}: "
                     f"{event.changes.model_dump(mode='json', exclude_unset=True)}")
        return text

    def perform(self, event) -> None:
        """Carry the event out now."""
        if event.action == "controller_down":
            self.run.controller.process.kill()
        elif event.action == "controller_up":
            self.run.controller.up(self.run.network)
            self.run.run_dir.update_manifest(controller=dict(
                self.run.run_dir.read_json("manifest.json")["controller"],
                openflow=self.run.controller.process.openflow_target))
        elif event.action == "set":
            self.run.links.set(event.link, event.changes, event.directions)
            self._announce(event)
        elif event.action in ("node_stall", "node_resume"):
            # Teardown resumes a node still stalled (NodeProcesses.stop_all).
            (self.run.processes.stall if event.action == "node_stall"
             else self.run.processes.resume)(event.node)
        elif event.node is not None:
            self.run.links.set_node_state(event.node, event.action == "node_up")
        else:
            self.run.links.set_link_state(event.link, event.action == "link_up")

    def _announce(self, event) -> None:
        """Record a scheduled impairment change in the summary's ``network_events`` and, when
        it changes a link's delay, tell the controller as a network event it knows of: its view
        of the network (and so its policy's State.graph and its shortest-delay forwarding)
        holds the scenario's link delays, kept current this way. Loss, jitter and rate are not
        in the view: the controller learns of them only through what agents report."""
        if self.run.controller.policy_process is None:
            return
        link = self.run.scenario.links[event.link]
        record = {"t": round(clock.monotonic() - self.run.origin, 3), "index": event.link,
                  "link": [str(link.a), str(link.b)], "directions": list(event.directions),
                  "set": event.changes.model_dump(mode="json", exclude_unset=True)}
        if event.changes.delay is None:
            record["controller"] = "not told (no delay change)"
        elif not self.run.controller.running():
            record["controller"] = "not told (not running)"
        else:
            from agents.control import ControlError

            delays = {direction: self.run.links.current[event.link, direction].delay or 0.0
                      for direction in event.directions}
            try:
                self.run.controller.announce_delay(event.link, delays)
                record.update(controller="told", delay_s=delays)
            except ControlError as error:
                record["controller"] = f"not told ({error})"
                self.run.warnings.append(f"the controller did not hear of the delay change on "
                                     f"{link.a} - {link.b}: {error}")
        self.run.summary.setdefault("network_events", []).append(record)
