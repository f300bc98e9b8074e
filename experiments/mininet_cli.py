"""The Mininet CLI of ``edgebed run --cli``, with edgebed's own commands added the way Mininet
extends its CLI (``do_<name>`` methods of a :class:`mininet.cli.CLI` subclass):"""

from __future__ import annotations

import io
import shlex
from typing import Callable

import yaml
from mininet.cli import CLI
from mininet.log import error, output
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from agents.control import ControlClient, ControlError
from topologies.impairments.backends import ImpairmentError
from topologies.impairments.control import DIRECTIONS, LinkControl
from topologies.model import Impairment
from topologies.problems import did_you_mean, dotted

DIRECTION_CHOICES = {"both": DIRECTIONS, "forward": ("forward",), "reverse": ("reverse",)}


class CommandError(ValueError):
    """What an edgebed CLI command was given cannot be done; the message says why."""


def parse_changes(words: list[str]) -> tuple[Impairment, tuple[str, ...]]:
    """``["delay=50ms", "loss=1%", "direction=forward"]`` -> the impairment fields to change
    and the directions, as a schedule's ``set`` and ``direction`` would give them. Values are
    read as YAML scalars (``reorder=false``, ``queue=100``); ``burst.p=1%`` sets a field of
    ``burst``."""
    if not words:
        raise CommandError("nothing to change: give key=value pairs, e.g. delay=50ms loss=1%")
    fields: dict = {}
    directions = DIRECTIONS
    for word in words:
        key, equals, text = word.partition("=")
        if not equals or not key or not text:
            raise CommandError(f"{word!r} is not key=value (e.g. delay=50ms)")
        if key == "direction":
            if text not in DIRECTION_CHOICES:
                raise CommandError(f"direction {text!r}: one of {', '.join(DIRECTION_CHOICES)}")
            directions = DIRECTION_CHOICES[text]
            continue
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        *parents, last = key.split(".")
        target = fields
        for parent in parents:
            target = target.setdefault(parent, {})
            if not isinstance(target, dict):
                raise CommandError(f"{key}: {parent} is given both as a value and with fields")
        target[last] = value
    try:
        return Impairment.model_validate(fields), directions
    except ValidationError as invalid:
        raise CommandError("; ".join(
            f"{dotted(problem['loc']) or 'impairment'}: "
            f"{problem['msg'].removeprefix('Value error, ')}"
            + (f" ({did_you_mean(str(problem['loc'][-1]), Impairment.model_fields)})"
               if problem["type"] == "extra_forbidden" else "")
            for problem in invalid.errors())) from None


def render(table: Table) -> str:
    """A rich table as plain text, for Mininet's output (which keeps a copy in runner.log)."""
    buffer = io.StringIO()
    Console(file=buffer, width=160, color_system=None, highlight=False).print(table)
    return buffer.getvalue()


class EdgebedCLI(CLI):
    """Mininet's CLI over a run's network, with ``links``, ``impair`` and ``placements``.

    ``control`` opens a client of the run's control protocol, or is None when the scenario
    has no controller."""

    def __init__(self, mininet, links: LinkControl,
                 control: Callable[[], ControlClient] | None, **kwargs):
        # Mininet's CLI runs its command loop inside __init__: set ours up first.
        self.links = links
        self.control = control
        super().__init__(mininet, **kwargs)

    def _link(self, name: str) -> int:
        """A link by one of its endpoints (``s1:eth2``, as schedules name it) or its number
        in ``links``."""
        count = len(self.links.scenario.links)
        if name.isdigit() and int(name) < count:
            return int(name)
        try:
            return self.links.link_index(name)
        except KeyError:
            endpoints = [str(end) for link in self.links.scenario.links
                         for end in link.endpoints()]
            raise CommandError(f"no link has endpoint {name!r} "
                               f"({did_you_mean(name, endpoints)})") from None

    def do_links(self, line: str) -> None:
        """List every link: number, endpoints, state, how it is impaired (backend) and the
        impairment in force per direction (forward: first endpoint to second).
        Usage: links"""
        table = Table("#", "link", "state", "backend", "forward", "reverse", box=None)
        for entry, link in zip(self.links.applied(), self.links.scenario.links):
            table.add_row(str(link.index), self.links.describe(link.index),
                          "up" if entry["up"] else "DOWN", self.links.mechanism(link.index),
                          *(self.links.current[link.index, d].describe() for d in DIRECTIONS))
        output(render(table))

    def do_impair(self, line: str) -> None:
        """Change a link's impairment now, as a schedule's set does: only the fields given
        change, 0 clears one; both directions unless direction=forward|reverse.
        Usage: impair LINK key=value ...   (LINK: an endpoint such as s1:eth2, or its number
        in `links`; keys: bw delay jitter distribution reorder loss burst.p burst.r
        burst.bad_loss burst.good_loss queue)
        Example: impair s1:eth2 delay=50ms jitter=5ms loss=1% direction=forward"""
        try:
            words = shlex.split(line)
            if not words:
                raise CommandError("usage: impair LINK key=value ... (see help impair)")
            index = self._link(words[0])
            changes, directions = parse_changes(words[1:])
            self.links.set(index, changes, directions)
        except (CommandError, ImpairmentError, ValueError) as problem:
            error(f"*** impair: {problem}; nothing changed\n")
            return
        for direction in directions:
            output(f"{self.links.describe(index)} {direction}: "
                   f"{self.links.current[index, direction].describe()}\n")

    def do_placements(self, line: str) -> None:
        """Show the controller's placed flows (client, service, server, bitrate, path,
        migrations) and its servers' loads, as the controller answers a query on the control
        protocol.
        Usage: placements"""
        if self.control is None:
            error("*** placements: this scenario runs no controller (controller: none)\n")
            return
        try:
            with self.control() as client:
                state = client.query()
        except (ControlError, OSError) as problem:
            error(f"*** placements: the controller did not answer: {problem}\n")
            return
        flows = Table("flow", "client", "service", "server", "bitrate", "via", "path",
                      "migrations", box=None, title="placements")
        for flow in state.placements:
            flows.add_row(*(_cell(flow.get(key)) for key in (
                "flow", "client", "service", "server", "bitrate", "via", "path", "migrations")))
        servers = Table("server", "service", "load", "capacity", box=None, title="servers")
        for server in state.servers:
            servers.add_row(*(_cell(server.get(key)) for key in
                              ("name", "service", "load", "capacity")))
        output(render(flows) if state.placements else "no flow is placed yet\n")
        output(render(servers))


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
