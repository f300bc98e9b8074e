"""Sent against received, per flow, from the agents' own tables: the fidelity monitor's check
that what the senders handed to their sockets reached their receivers, configured loss aside.

A sender writes a ``sent`` row per flow a receiver measures (the flow's name, the destination
address, the datagrams its socket took); the receiver's ``flows`` row of the same name, from
the sender's address, says how many distinct datagrams arrived (``unique``). A flow whose
receiver got fewer than the configured loss of its path allows (a binomial bound, plus a slack
for the datagrams still on their way when the run stopped) flags the run, and the flag names
where frames were lost on that path: the sender's socket and neighbour table, each link
direction's drops by cause, the switch ports' drops, the receiver's socket.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

# A flow is short when fewer arrive than its path's configured loss lets through minus this many
# standard deviations (binomial): about one flow in 30,000 that lost only what was configured
# is flagged.
DEVIATIONS = 4.0
# Datagrams still in flight when the runner stopped senders and receivers together (a relay's
# delay holds some), and a first datagram sent before its receiver was listening.
SLACK_DATAGRAMS = 3
SLACK_FRACTION = 0.01


@dataclass(frozen=True)
class PathLink:
    """One link direction on a path: the link's index, ``forward`` or ``reverse``, and the
    switch ports the path enters and leaves through (``s1:eth2``)."""

    link: int
    direction: str
    ports: tuple[str, ...]


@dataclass
class Balance:
    """One flow's datagrams: sent by ``sender`` to ``to`` (``receiver`` when that is a host of
    the scenario), received, and what the path's configured loss allows to be missing."""

    flow: str
    sender: str
    to: str
    receiver: str | None
    sent: int
    send_errors: int
    received: int
    configured_loss: float
    allowed_missing: float
    path: list[PathLink] = field(default_factory=list)

    @property
    def missing(self) -> int:
        return max(0, self.sent - self.received)

    @property
    def short(self) -> bool:
        return self.missing > self.allowed_missing

    def record(self) -> dict:
        return {"flow": self.flow, "sender": self.sender, "to": self.to,
                "receiver": self.receiver, "sent": self.sent, "send_errors": self.send_errors,
                "received": self.received, "missing": self.missing,
                "configured_loss": round(self.configured_loss, 6),
                "allowed_missing": round(self.allowed_missing, 1), "ok": not self.short}


def allowed_missing(sent: int, loss: float) -> float:
    """How many of ``sent`` datagrams may be missing on a path of configured ``loss``."""
    spread = DEVIATIONS * math.sqrt(sent * loss * (1 - loss))
    return sent * loss + spread + max(SLACK_DATAGRAMS, SLACK_FRACTION * sent)


def path(links, hosts: set[str], source: str, target: str) -> list[PathLink] | None:
    """The fewest-hop path of link directions from host ``source`` to host ``target`` through
    switches (``links``: the scenario's resolved links); None when there is none."""
    neighbours: dict[str, list[tuple[str, PathLink]]] = {}
    for link in links:
        for near, far, direction in ((link.a, link.b, "forward"), (link.b, link.a, "reverse")):
            ports = tuple(str(end) for end in (near, far) if end.node not in hosts)
            neighbours.setdefault(near.node, []).append(
                (far.node, PathLink(link.index, direction, ports)))
    previous: dict[str, tuple[str, PathLink] | None] = {source: None}
    queue = deque([source])
    while queue:
        node = queue.popleft()
        if node == target:
            steps = []
            while previous[node] is not None:
                node, step = previous[node]
                steps.append(step)
            return steps[::-1]
        if node in hosts and node != source:
            continue  # hosts end paths; they do not forward
        for far, step in neighbours.get(node, []):
            if far not in previous:
                previous[far] = (node, step)
                queue.append(far)
    return None


def balances(sent_rows: list[dict], flow_rows: list[dict], addresses: dict[str, list[str]],
             links, configured_loss: dict[tuple[int, str], float]) -> list[Balance]:
    """Every sent flow against what its receiver measured. ``addresses``: each host's
    addresses; ``configured_loss``: the mean loss configured per (link, direction)."""
    host_of = {address: host for host, owned in addresses.items() for address in owned}
    received: dict[tuple[str, str, str], int] = {}
    for row in flow_rows:
        key = (row["node"], row["flow"], host_of.get(row["peer"], row["peer"]))
        received[key] = received.get(key, 0) + int(row["unique"] or 0)
    found = []
    for row in sent_rows:
        sender, receiver = row["node"], host_of.get(row["to"])
        steps = path(links, set(addresses), sender, receiver) if receiver else None
        loss = 1 - math.prod(1 - configured_loss.get((step.link, step.direction), 0.0)
                             for step in steps or [])
        if receiver is None:  # a service address: any receiver that measured the flow
            got = sum(count for (_, flow, peer), count in received.items()
                      if flow == row["flow"] and peer == sender)
        else:
            got = received.get((receiver, row["flow"], sender), 0)
        sent = int(row["datagrams"] or 0)
        found.append(Balance(row["flow"], sender, row["to"], receiver, sent,
                             int(row["send_errors"] or 0), got, loss,
                             allowed_missing(sent, loss), steps or []))
    return found


def where_lost(balance: Balance, hosts: dict[str, dict], losses: list[dict],
               ports: dict[str, dict]) -> str:
    """Where the path of ``balance`` lost frames, from the run's counters: the sender's
    socket and neighbour table, each link direction's drops, switch port drops, the
    receiver's socket (``hosts``: per host counters, ``losses``: the links' drops by cause,
    ``ports``: per switch port drops)."""
    parts = []
    sender = hosts.get(balance.sender, {})
    parts.append(f"sender {balance.sender}: {balance.send_errors} send errors, "
                 f"{sender.get('unresolved_neighbours', 0)} unresolved neighbours, "
                 f"{sender.get('SndbufErrors', 0)} send buffer errors")
    by_direction = {(entry["link"], entry["direction"]): entry for entry in losses}
    for step in balance.path:
        entry = by_direction.get((step.link, step.direction))
        if entry is not None:
            parts.append(f"link {step.link} {step.direction}: {entry['offered']} frames offered, "
                         f"{entry['configured']} dropped as configured, "
                         f"{entry['emulator_made']} emulator-made")
        for port in step.ports:
            drops = ports.get(port)
            if drops and (drops.get("rx_dropped") or drops.get("tx_dropped")):
                parts.append(f"switch port {port}: {drops.get('rx_dropped', 0)} received and "
                             f"{drops.get('tx_dropped', 0)} sent frames dropped")
    if balance.receiver is None:
        parts.append(f"{balance.to} is no host's address: its receivers are not known")
    else:
        receiver = hosts.get(balance.receiver, {})
        parts.append(f"receiver {balance.receiver}: {receiver.get('RcvbufErrors', 0)} receive "
                     f"buffer errors, {receiver.get('NoPorts', 0)} to no listening port")
    return "; ".join(parts)


def delivery_flags(found: list[Balance], hosts: dict[str, dict], losses: list[dict],
                   ports: dict[str, dict], shown: int = 5) -> list[str]:
    """One flag per short flow (the first ``shown`` of them; the rest counted in one more),
    each saying where its frames were lost."""
    short = [balance for balance in found if balance.short]
    flags = [f"{balance.flow} from {balance.sender} to {balance.receiver or balance.to}: "
             f"{balance.received} of {balance.sent} datagrams arrived (configured loss "
             f"{balance.configured_loss:.2%} allows {balance.allowed_missing:.0f} missing); "
             f"{where_lost(balance, hosts, losses, ports)}" for balance in short[:shown]]
    if len(short) > shown:
        missing = sum(balance.missing for balance in short)
        flags.append(f"{len(short) - shown} more flows arrived short: {len(short)} of "
                     f"{len(found)} flows, {missing} datagrams missing in all")
    return flags
