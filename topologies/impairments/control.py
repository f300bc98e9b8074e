"""Run-time control of a run's links: impairments per direction, links and nodes up and down.

One API for everything that changes links while a run goes on: the scenario's ``schedule``,
tests, experiments and (later) the controller's failure tests.
"""

from __future__ import annotations

from pathlib import Path

from ..document_checks import impairment_problems
from ..model import Impairment
from ..scenario import Scenario
from . import drops as loss_accounting
from .backends import FallbackBackend, ImpairmentError, NetemBackend, Placement
from .drops import DirectionDrops
from .relay import RELAY_LIMITS, WIRE_TOWARD_A, WIRE_TOWARD_B, Relay

DIRECTIONS = ("forward", "reverse")
# Frames leaving a wire more than this late (p99) are beyond the accuracy the links promise.
LATE_WARNING_US = 2000


def choose_backend(requested: str, kernel_has_netem: bool):
    """``auto``: netem where the kernel has it, else the fallback."""
    if requested == "netem" and not kernel_has_netem:
        raise RuntimeError("the scenario asks for the netem impairment backend, but this "
                           "kernel has no sch_netem; use emulation.impairments: auto or fallback")
    if requested == "netem" or (requested == "auto" and kernel_has_netem):
        return NetemBackend()
    return FallbackBackend()


def wired_links(scenario: Scenario, backend) -> frozenset[int]:
    """Links that need a wire at any time of the run: what they start with, or any scheduled
    change, needs the relay."""
    needs = {link.index for link in scenario.links
             if backend.needs_wire(link.forward) or backend.needs_wire(link.reverse)}
    needs |= {event.link for event in scenario.schedule
              if event.changes is not None and backend.needs_wire(
                  Impairment().merged(event.changes))}
    return frozenset(needs)


class LinkControl:
    """The links of one running network, and what is applied to each direction now."""

    def __init__(self, scenario: Scenario, network, backend, log_dir: Path):
        self.scenario = scenario
        self.network = network
        self.backend = backend
        self.log_dir = log_dir
        self.current = {(link.index, d): Impairment() for link in scenario.links
                        for d in DIRECTIONS}
        self.records: dict[tuple[int, str], dict] = {}
        self.relays: dict[int, Relay] = {}
        self.down: set[int] = set()
        # Links taken down at some time of the run: their interface drops are the down time.
        self.went_down: set[int] = set()
        self.warned: set[tuple[int, str, str]] = set()
        self.drops = {key: DirectionDrops() for key in self.current}
        self.counting_error: str | None = None

    def start(self) -> None:
        """Start every wire's relay and apply what the scenario declares."""
        for link in self.scenario.links:
            ends = self.network.ends(link.index)
            if ends.wire is not None:
                self.relays[link.index] = Relay(
                    ends.wire, self.log_dir / f"wire{link.index}.log", self.network.names.prefix,
                    self.scenario.seed + link.index, link.forward, link.reverse)
            for direction in DIRECTIONS:
                impairment = getattr(link, direction)
                if not impairment.is_empty():
                    self._apply(link.index, direction, impairment)
        for relay in self.relays.values():
            relay.wait_ready()

    def placement(self, link_index: int, direction: str) -> Placement:
        link = self.scenario.links[link_index]
        ends = self.network.ends(link_index)
        sender, receiver = (link.a, link.b) if direction == "forward" else (link.b, link.a)
        if ends.wire is not None:
            interface = WIRE_TOWARD_B if direction == "forward" else WIRE_TOWARD_A
            return Placement(link_index, direction, ends.wire, interface,
                             f"wire {link_index} toward {receiver}", self.relays[link_index])
        intf = ends.a if direction == "forward" else ends.b
        return Placement(link_index, direction, intf.node, intf.name, str(sender))

    def _apply(self, link_index: int, direction: str, impairment: Impairment) -> None:
        placement = self.placement(link_index, direction)
        # Replacing a qdisc loses its counters: what it dropped so far is counted first.
        self._count_qdisc_drops(link_index, direction, placement)
        record = self.backend.apply(placement, impairment)
        self.current[link_index, direction] = impairment
        self.records[link_index, direction] = record
        drops = self.drops[link_index, direction]
        drops.configured_loss = max(drops.configured_loss,
                                    loss_accounting.mean_loss(impairment))

    def _count_qdisc_drops(self, link_index: int, direction: str,
                           placement: Placement | None = None) -> None:
        """Add what the qdisc in force on a direction dropped (once: the qdisc is about to go)."""
        if (link_index, direction) not in self.records:
            return  # nothing of ours there
        placement = placement or self.placement(link_index, direction)
        _, dropped = loss_accounting.root_qdisc(
            placement.node.cmd(f"tc -s -j qdisc show dev {placement.interface}"))
        loss_accounting.add_qdisc_drops(self.drops[link_index, direction], dropped,
                                        self.current[link_index, direction], self.backend.name)

    def set(self, link_index: int, changes: Impairment,
            directions: tuple[str, ...] = DIRECTIONS) -> None:
        """Change the fields ``changes`` sets (0 clears one) in each of ``directions``. What
        the link cannot take (jitter above the delay, delay on a link built without a wire)
        raises :class:`ImpairmentError` before any direction changes."""
        planned = {direction: self.current[link_index, direction].merged(changes)
                   for direction in directions}
        for direction, impairment in planned.items():
            where = f"{self.describe(link_index)} ({direction})"
            problems = impairment_problems(impairment)
            if problems:
                raise ImpairmentError(f"{where}: " + "; ".join(
                    f"{message} ({hint})" for message, hint in problems))
            if self.backend.needs_wire(impairment) and link_index not in self.relays:
                raise ImpairmentError(
                    f"{where}: with the {self.backend.name} backend delay, jitter and burst "
                    "loss need a wire, and this link was built without one; declare an "
                    "impairment on the link or in its schedule so the link is built with a wire")
        for direction, impairment in planned.items():
            self._apply(link_index, direction, impairment)

    def describe(self, link_index: int) -> str:
        link = self.scenario.links[link_index]
        return f"{link.a} - {link.b}"

    def mechanism(self, link_index: int) -> str:
        """How this link is impaired, for people."""
        if self.backend.name == "netem":
            return "netem (tc HTB + netem)"
        if link_index in self.relays:
            return "fallback (tc HTB + BPF loss, relay wire for delay/jitter/burst)"
        return "fallback (tc HTB + BPF loss; no wire: no delay, jitter or burst)"

    def set_link_state(self, link_index: int, up: bool) -> None:
        self.network.set_link_state(link_index, up)
        (self.down.discard if up else self.down.add)(link_index)
        if not up:
            self.went_down.add(link_index)

    def set_node_state(self, node: str, up: bool) -> None:
        """A node going down takes every link it has with it."""
        for link in self.scenario.links:
            if node in (link.a.node, link.b.node):
                self.set_link_state(link.index, up)

    def link_index(self, endpoint: str) -> int:
        """The link with ``endpoint`` ("node:interface")."""
        for link in self.scenario.links:
            if endpoint in (str(link.a), str(link.b)):
                return link.index
        raise KeyError(f"no link has endpoint {endpoint!r}")

    def applied(self) -> list[dict]:
        """Per link and direction: the settings in force and how they were applied."""
        report = []
        for link in self.scenario.links:
            entry = {"endpoints": [str(link.a), str(link.b)], "wire": link.index in self.relays,
                     "up": link.index not in self.down}
            for direction in DIRECTIONS:
                settings = self.current[link.index, direction]
                entry[direction] = {
                    "settings": settings.model_dump(mode="json", exclude_none=True),
                    "applied": self.records.get((link.index, direction))}
            report.append(entry)
        return report

    def load_warnings(self) -> list[str]:
        """Wires whose traffic nears the relay's accurate packet rate, whose frames leave late
        or that lose frames they cannot take; each (wire, direction, reason) is reported once
        per run."""
        warnings = []
        for index, relay in self.relays.items():
            link = self.scenario.links[index]
            loads = relay.load()
            limit = RELAY_LIMITS[relay.kind]
            for direction, load in loads.items():
                name = f"wire of {link.a} - {link.b} ({direction})"
                opposite_pps = sum(other["pps"] for other_direction, other in loads.items()
                                   if other_direction != direction)
                if limit.near(load["pps"], opposite_pps) and (index, direction, "rate") \
                        not in self.warned:
                    self.warned.add((index, direction, "rate"))
                    warnings.append(f"{name} carries {load['pps']:.0f} packets/s "
                                    f"({opposite_pps:.0f} the other way), near where the "
                                    f"{relay.kind} relay was measured accurate ({limit}): "
                                    "delays may grow")
                if load.get("emulator_dropped") and (index, direction, "dropped") \
                        not in self.warned:
                    self.warned.add((index, direction, "dropped"))
                    warnings.append(f"{name} lost {load['emulator_dropped']} frames it could "
                                    "not take in time (emulator-made loss)")
                late = load["late_p99_us"]
                if late is not None and late > LATE_WARNING_US and load["frames"] >= 100 \
                        and (index, direction, "late") \
                        not in self.warned:
                    self.warned.add((index, direction, "late"))
                    warnings.append(f"{name}: frames leave late (p99 {late / 1000:.1f} ms "
                                    "after their due time); the machine cannot keep up")
        return warnings

    def stop(self) -> dict[int, dict | None]:
        """Count the links' drops (:meth:`losses`), then stop the relays; their statistics by
        link."""
        try:
            for link_index, direction in self.records:
                self._count_qdisc_drops(link_index, direction)
            self._count_interface_drops()
        except Exception as error:  # a dead namespace must not stop the teardown
            self.counting_error = f"drops not counted: {error!r}"
        wires = {index: relay.stop() for index, relay in self.relays.items()}
        for index, statistics in wires.items():
            for direction in DIRECTIONS:
                drops = self.drops[index, direction]
                if statistics and direction in statistics:
                    loss_accounting.add_relay_statistics(drops, statistics[direction])
        return wires

    def _count_interface_drops(self) -> None:
        """Each direction's frames offered (sent or dropped by its first sending interface),
        the frames every veth on its way could not hand to its peer and those the userspace
        switch's port on its far end had no room for."""
        counters: dict[int, dict] = {}

        def read(node, interface: str) -> tuple[int, int]:
            if id(node) not in counters:
                counters[id(node)] = loss_accounting.interface_counters(
                    node.cmd("ip -s -j link show"))
            return counters[id(node)].get(interface, (0, 0))

        switch_drops = self.network.switch_receive_drops()
        for link in self.scenario.links:
            ends = self.network.ends(link.index)
            for direction in DIRECTIONS:
                sender, receiver = (ends.a, ends.b) if direction == "forward" else (ends.b, ends.a)
                segments = [(sender.node, sender.name)]
                if ends.wire is not None:
                    segments.append((ends.wire, WIRE_TOWARD_B if direction == "forward"
                                     else WIRE_TOWARD_A))
                dropped = sum(read(node, name)[1] for node, name in segments)
                drops = self.drops[link.index, direction]
                sent, first_dropped = read(sender.node, sender.name)
                # What the first interface sent reached the next one, the wire's relay
                # socket included; without a wire the direction's qdisc sits on the sending
                # interface and drops before it sends.
                drops.offered = sent + first_dropped
                if ends.wire is None:
                    drops.offered += drops.qdisc + drops.rate_limit + drops.configured
                if link.index in self.went_down:
                    drops.configured += dropped
                else:
                    drops.interface += dropped
                drops.switch += switch_drops.get(receiver.name, 0)

    def losses(self) -> list[dict]:
        """After :meth:`stop`: per link and direction that carried frames, the frames offered
        and lost by cause, emulator-made apart from configured
        (:mod:`topologies.impairments.drops`)."""
        report = []
        for link in self.scenario.links:
            for direction in DIRECTIONS:
                drops = self.drops[link.index, direction]
                if not drops.offered and not drops.emulator_made:
                    continue
                report.append({"link": link.index, "endpoints": [str(link.a), str(link.b)],
                               "direction": direction, "wire": link.index in self.relays,
                               **drops.record()})
        return report
