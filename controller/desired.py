"""What every switch should hold: the base rules, forwarding for the links that are up and the
placed flows' rules, kept per switch and rule key so that a change costs the rules it touches."""

from __future__ import annotations

from dataclasses import dataclass

from . import rules
from .policy import Placement
from .view import NetworkView


@dataclass
class FlowRecord:
    """A placed flow: where it is and how it got there."""

    placement: Placement
    path: tuple[str, ...] | None = None  # waypoint switches, when pinned
    migrations: int = 0
    # Servers the flow was moved away from: their answers still in flight (or sent before they
    # learn of the move) keep coming back from the service address until the flow leaves.
    former_servers: tuple[str, ...] = ()
    # Counts the flow's decisions (1: placed), so a host can tell a late push from a newer one.
    version: int = 1


class DesiredRules:
    """Every switch's desired state, and the rule keys changed since each switch was last
    told (None: everything, after forwarding changed)."""

    def __init__(self, view: NetworkView, fast_failover: bool = True):
        self.view = view
        self.fast_failover = fast_failover
        self.down: frozenset[int] = frozenset()
        self._placed_rules: dict[str, dict[str, list[rules.Rule]]] = {
            switch: {} for switch in view.switches}
        # Per switch and rule key, the flows holding a rule with that key, in the order they
        # were last refreshed (the last one wins, as it would when adding them all in turn):
        # a flow's change then rewrites the keys it touches instead of the whole switch.
        self._holders: dict[str, dict[tuple, dict[str, rules.Rule]]] = {
            switch: {} for switch in view.switches}
        self._base = rules.base_rules(view)
        self.set_forwarding(self.down)

    def desired(self, switch: str) -> rules.SwitchRules:
        """Everything ``switch`` should hold (a copy)."""
        wanted = self._desired[switch]
        return rules.SwitchRules(dict(wanted.rules), dict(wanted.groups))

    def changes(self, switch: str, installed: rules.SwitchRules,
                everything: bool = False) -> rules.Changes:
        """What to send ``switch``, holding ``installed`` (kept in step by the caller with
        :meth:`controller.rules.SwitchRules.apply`), for it to hold what it should. Only the
        rules changed since the last call are compared, unless forwarding changed meanwhile or
        ``everything`` is asked for (a switch that just connected): a decision then costs the
        rules it touched, not the rules the switch holds."""
        keys = self._changed[switch]
        self._changed[switch] = set()
        return rules.diff(installed, self._desired[switch], None if everything else keys)

    def set_forwarding(self, down: frozenset[int]) -> None:
        """Forwarding with the links ``down`` cut, and every switch's desired state anew."""
        self.down = down
        self._forwarding = rules.forwarding(self.view, down, self.fast_failover)
        self._desired = {}
        for switch in self.view.switches:
            wanted = self._base.merged(self._forwarding[switch])
            for holders in self._holders[switch].values():
                rule = next(reversed(holders.values()))
                wanted.rules[rule.key] = rule
            self._desired[switch] = wanted
        self._changed = {switch: None for switch in self.view.switches}

    def refresh(self, flow: str, record: FlowRecord | None) -> set[str]:
        """Recompute one flow's rules after it changed (``record`` None: it left); returns the
        switches they were or are on."""
        touched = {switch for switch, held in self._placed_rules.items() if flow in held}
        keys: dict[str, set[tuple]] = {switch: set() for switch in touched}
        for switch in touched:
            for rule in self._placed_rules[switch].pop(flow):
                keys[switch].add(rule.key)
                self._holders[switch][rule.key].pop(flow, None)
        for switch, rule in self.flow_rules(record) if record else ():
            self._placed_rules[switch].setdefault(flow, []).append(rule)
            holders = self._holders[switch].setdefault(rule.key, {})
            holders.pop(flow, None)  # re-added last: the latest refresh wins, as before
            holders[flow] = rule
            keys.setdefault(switch, set()).add(rule.key)
            touched.add(switch)
        for switch, changed in keys.items():
            wanted = self._desired[switch]
            for key in changed:
                holders = self._holders[switch].get(key)
                if holders:
                    wanted.rules[key] = next(reversed(holders.values()))
                    continue
                if holders is not None:
                    del self._holders[switch][key]
                fallback = (self._forwarding[switch].rules.get(key)
                            or self._base.rules.get(key))
                if fallback is None:
                    wanted.rules.pop(key, None)
                else:
                    wanted.rules[key] = fallback
            if self._changed[switch] is not None:
                self._changed[switch] |= changed
        return touched

    def flow_rules(self, record: FlowRecord) -> list[tuple[str, rules.Rule]]:
        """A placed flow's rules, each with the switch it goes on."""
        request = record.placement.request
        service = self.view.services[request.service]
        client = self.view.attachment(request.client)
        server = self.view.attachment(record.placement.server)
        port = request.client_port
        switch, steering = rules.steering(self.view, service, client, server, port)
        placed = [(switch, rule) for rule in steering]
        for former in record.former_servers:
            _, (_, answers) = rules.steering(self.view, service, client,
                                             self.view.attachment(former), port)
            placed.append((switch, answers))
        if record.path:
            outbound = dict(steering[0].match) | {"ipv4_dst": server.address}
            try:
                placed += rules.explicit_path(self.view, client, record.path,
                                              rules.match(**outbound), self.down)
            except ValueError:
                pass  # its waypoints are cut off: the flow follows the shortest path meanwhile
        return placed
