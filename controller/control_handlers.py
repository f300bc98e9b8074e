"""The control protocol's messages as edgebed's controller app handles them (joins, leaves,
load reports, steering, link delays, pinned paths, subscriptions, queries)."""

from __future__ import annotations

import json
import logging

from edgebed import clock, protocol

from .core import Outcome

LOG = logging.getLogger("edgebed.controller")


class ControlHandlers:
    """The control-protocol part of :class:`controller.app.EdgebedController`."""

    def handle_control(self, message, reply, source) -> None:
        """One control-protocol message (from :class:`ControlServer`'s thread)."""
        with self.lock:
            getattr(self, f"_on_{message.type}")(message, reply, source)

    def _on_load(self, message, reply, source) -> None:
        """A load report: recorded in the ``load_reports`` table with its age, kept in the
        server's history unless stale (counted in the status), then whatever the policy's
        ``on_load`` asks for (least_loaded rebalances, a policy that redecides places every
        flow again, most only keep it for their next decision)."""
        now = clock.monotonic() - self.started
        arrived = clock.time()
        kept = self.core.report_load(message.node, message.load, metrics=message.metrics,
                                     now=now, sent=message.ts, urgent=message.urgent,
                                     wall_clock=arrived)
        self.tables["load_reports"].row(
            "controller", "controller", f"{arrived:.6f}", message.node, message.service,
            message.seq, int(message.urgent), f"{message.load:g}",
            f"{(arrived - message.ts) * 1e3:.3f}", int(kept),
            json.dumps(message.metrics, sort_keys=True, separators=(",", ":")))
        if not kept:
            return
        started = clock.real_elapsed_ns()
        outcome = self.core.react_to_load(now)
        self._write_traces()
        if outcome.placed:
            self._carry_out(outcome, "migrate" if self.core.on_load == "rebalance"
                            else "redecide", started)

    def _on_join(self, message, reply, source) -> None:
        try:
            request = self.core.request_for(message.node, message.service, message.demand,
                                            tuple(message.bitrates), message.flow, message.port)
        except KeyError as error:
            reply(protocol.Rejected(id=message.id, flow=message.flow, reason=_reason(error)))
            return
        if message.node not in self.view.roles:
            reply(protocol.Rejected(id=message.id, flow=message.flow,
                                    reason=_reason(f"unknown node {message.node}")))
            return
        if not self.joins:
            self.joins_since = clock.monotonic()
        self.joins.append((message, request, reply))

    def decide_joins(self) -> float | None:
        """Decide the joins that arrived together (:meth:`ControlServer` calls this once it
        has drained them) in one policy call, installed with one barrier per switch and one
        save of the state, then answer each. One pass per burst instead of one per join: a
        burst costs a policy call and a sync per switch, not one per flow. A policy with a
        ``join_window`` has the joins gathered that long from the first one held: returns the
        seconds left of it (None: nothing waits)."""
        if not self.joins:
            # Without the lock: only this thread adds joins, and a shutdown holding the lock
            # waits for this thread to end.
            return None
        left = getattr(self.core.policy, "join_window", 0.0) - (clock.monotonic()
                                                                 - self.joins_since)
        if left > 0:
            return left
        with self.lock:
            joins, self.joins = self.joins, []
            try:
                waiting = [request for _, request, _ in joins
                           if request.flow not in self.core.flows]
                rejected = {}
                if waiting:
                    outcome = self._place(waiting)
                    rejected = {r.flow: r.reason for r in outcome.decision.rejections}
            except Exception:
                LOG.exception("joins of %s failed", ", ".join(r.flow for _, r, _ in joins))
                for message, _, reply in joins:
                    reply(protocol.Error(id=message.id,
                                         reason="the controller failed to handle join"))
                return
            for message, request, reply in joins:
                if request.flow in rejected:
                    reply(protocol.Rejected(id=message.id, flow=request.flow,
                                            reason=_reason(rejected[request.flow])))
                elif request.flow in self.core.flows:
                    reply(self.core.decision_message(message.id, request.flow, migrated=False))
                else:
                    reply(protocol.Error(id=message.id, reason=_reason(
                        f"the policy neither placed nor rejected {request.flow}")))

    def _on_leave(self, message, reply, source) -> None:
        started = clock.real_elapsed_ns()
        outcome = self.core.leave(message.flow)
        self._install(outcome, "leave", started, 0.0)
        self._save()
        reply(protocol.Ack(id=message.id))

    def _on_steer(self, message, reply, source) -> None:
        started = clock.real_elapsed_ns()
        try:
            outcome = self.core.steer(message.flow, message.server,
                                      now=clock.monotonic() - self.started)
        except (KeyError, ValueError) as error:
            reply(protocol.Rejected(id=message.id, flow=message.flow, reason=_reason(error)))
            return
        self._carry_out(outcome, "migrate", started)
        reply(self.core.decision_message(message.id, message.flow, migrated=True))

    def _on_link(self, message, reply, source) -> None:
        """A link's delay changed: the view follows (the policy sees it at its next decision)
        and the switches get the forwarding that follows the new delays."""
        try:
            switches = self.core.link_delay_changed(message.link, message.delay_forward,
                                                    message.delay_reverse)
        except KeyError as error:
            reply(protocol.Error(id=message.id, reason=_reason(error)))
            return
        LOG.info("link %d delay now %s / %s s (announced)", message.link,
                 message.delay_forward, message.delay_reverse)
        self._install(Outcome(switches=switches), "link", clock.real_elapsed_ns(), 0.0)
        self._save()
        reply(protocol.Ack(id=message.id))

    def _on_path(self, message, reply, source) -> None:
        started = clock.real_elapsed_ns()
        try:
            outcome = self.core.pin(message.flow, tuple(message.via))
        except (KeyError, ValueError) as error:
            reply(protocol.Rejected(id=message.id, flow=message.flow, reason=_reason(error)))
            return
        self._install(outcome, "pin", started, 0.0)
        self._save()
        reply(protocol.Ack(id=message.id))

    def _on_subscribe(self, message, reply, source) -> None:
        self.subscribers[message.node] = source
        reply(protocol.Ack(id=message.id))

    def _on_query(self, message, reply, source) -> None:
        snapshot = self.core.snapshot()
        servers = [{"name": s.name, "service": s.service, "capacity": s.capacity
                    if s.capacity != float("inf") else None, "load": s.load}
                   for s in self.core.servers()]
        # Entries are flat: what a flow asked for and its attribute map stay out.
        placements = [{key: value for key, value in flow.items()
                       if key not in ("bitrates", "attributes")}
                      for flow in snapshot["flows"]]
        for part in protocol.state_replies(message.id, placements, servers):
            reply(part)

    def _notify(self, flow: str, migrated: bool) -> None:
        record = self.core.flows.get(flow)
        if record is None:
            return
        placement = record.placement
        # The client, the server and every relay on the way follow the decision.
        for node in dict.fromkeys((placement.request.client, placement.server,
                                   *placement.via)):
            if node in self.subscribers:
                self.control.push(self.subscribers[node], self.core.decision_message(0, flow,
                                                                                migrated))


def _reason(problem) -> str:
    """A rejection reason the protocol accepts: short, printable."""
    text = str(problem.args[0]) if isinstance(problem, KeyError) and problem.args else str(problem)
    return protocol.clip("".join(c if c.isprintable() else " " for c in text), protocol.MAX_REASON)
