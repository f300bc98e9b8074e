"""Impairment backends: how one direction of a link gets its rate, loss, delay and jitter."""

from __future__ import annotations

from dataclasses import dataclass

from edgebed import clock

from ..model import Impairment
from . import tc
from .relay import Relay, relay_direction


class ImpairmentError(RuntimeError):
    """tc refused an impairment; the message carries tc's words."""


@dataclass
class Placement:
    """Where one direction of a link is impaired: an interface in some node's namespace and,
    for a wired link, the relay and the relay's name for the direction."""

    link_index: int
    direction: str  # "forward" (first endpoint to second) or "reverse"
    node: object  # the Mininet node whose namespace holds ``interface``
    interface: str
    where: str  # for people: "s1:eth2", or "wire 3 toward v1"
    relay: Relay | None = None


def _run(placement: Placement, commands: list[str]) -> list[str]:
    output = placement.node.cmd(" ; ".join(commands)).strip()
    if output:
        raise ImpairmentError(f"{placement.where}: {output}")
    return commands


def needs_relay(impairment: Impairment) -> bool:
    return bool(impairment.delay or impairment.jitter or impairment.burst)


class NetemBackend:
    name = "netem"

    def needs_wire(self, impairment: Impairment) -> bool:
        return False

    def apply(self, placement: Placement, impairment: Impairment) -> dict:
        interface = placement.interface
        kernel = tc.in_real_time(impairment, clock.current().dilation)
        commands = tc.shaping(interface, kernel.bw, kernel.queue, leaf=tc.netem_spec(kernel))
        _run(placement, tc.clear(interface) + commands)
        return {"where": placement.where, "tc": commands}


class FallbackBackend:
    name = "fallback"

    def needs_wire(self, impairment: Impairment) -> bool:
        return needs_relay(impairment)

    def apply(self, placement: Placement, impairment: Impairment) -> dict:
        if needs_relay(impairment) and placement.relay is None:
            raise ImpairmentError(
                f"{placement.where}: delay, jitter and burst loss need a wire, and this link "
                "was built without one; declare the impairment on the link or in its schedule "
                "so the link is built with a wire")
        interface = placement.interface
        # The relays keep the run's clock and take the impairment as written; HTB keeps real
        # time.
        kernel = tc.in_real_time(impairment, clock.current().dilation)
        commands = tc.shaping(interface, kernel.bw, kernel.queue)
        if impairment.loss:
            commands += tc.random_loss(interface, impairment.loss)
        _run(placement, tc.clear(interface) + commands)
        record = {"where": placement.where, "tc": commands}
        if placement.relay is not None:
            placement.relay.update(placement.direction, impairment)
            record["relay"] = relay_direction(impairment)
        return record
