"""The workload, packet captures and schedule of a scenario, checked against its nodes,
links and agents."""

from __future__ import annotations

import shlex

from pydantic import ValidationError

from . import commands
from .document_checks import DocumentChecks
from .problems import did_you_mean, validation_problems
from .resolved import Capture, Event, Link, Workload


class WorkloadResolution(DocumentChecks):
    """Resolves what runs on the network: agents, captures and scheduled events."""

    def _resolve_workload(self) -> list[Workload]:
        workload: list[Workload] = []
        if self.agents is None:
            return workload
        for i, entry in enumerate(self.document.workload):
            path = ("workload", i)
            nodes = self._select(entry.nodes, path + ("nodes",))
            if entry.agent == commands.COMMAND:
                if entry.command is None or entry.params:
                    self.problem(path, "the command agent takes command: and no params:",
                                 'write command: "iperf3 -s"')
                    continue
                self._check_placeholders(entry.command, path + ("command",))
                if self.document.time_dilation > 1:
                    self.problem(path + ("command",),
                                 f"a command cannot run at time_dilation "
                                 f"{self.document.time_dilation:g}: it reads the system's "
                                 "clock, which edgebed does not dilate",
                                 "run it in an undilated scenario (time_dilation: 1), or "
                                 "replace it with an edgebed agent")
                    continue
                workload.append(Workload(entry.agent, nodes, entry.command, entry.start,
                                         may_fail=entry.may_fail))
                continue
            if entry.agent not in self.agents.available():
                self.problem(path + ("agent",), f"unknown agent {entry.agent!r}",
                             did_you_mean(entry.agent, self.agents.available()))
                continue
            if entry.command is not None:
                self.problem(path + ("command",), f"agent {entry.agent} takes params:, not "
                                                  "command:")
                continue
            model = self.agents.params_model(entry.agent)
            try:
                params = model.model_validate(entry.params)
            except ValidationError as error:
                self.problems.extend(validation_problems(
                    error, entry.params, self.source_map, at=path + ("params",),
                    fields=lambda _: model.model_fields))
                continue
            reason = getattr(model, "undilatable", None)
            if reason is not None and self.document.time_dilation > 1:
                self.problem(path + ("agent",),
                             f"agent {entry.agent} cannot run at time_dilation "
                             f"{self.document.time_dilation:g}: {reason}",
                             "run it in an undilated scenario (time_dilation: 1)")
                continue
            references = self.agents.node_reference_fields(model)
            for name in references:
                value = getattr(params, name)
                for j, target in enumerate(value if isinstance(value, list) else [value]):
                    services = self.document.controller.services
                    if target is not None and target not in self.nodes \
                            and target not in services:
                        where = path + ("params", name) + ((j,) if isinstance(value, list) else ())
                        self.problem(where, f"unknown node or service {target!r}",
                                     did_you_mean(target, [n.name for n in self.nodes.values()
                                                           if not n.is_switch] + list(services)))
            workload.append(Workload(entry.agent, nodes, None, entry.start,
                                     params.model_dump(mode="json"), tuple(references),
                                     entry.may_fail))
        return workload

    def _check_placeholders(self, command: str | list[str], path: tuple) -> None:
        """Every ``{name}`` in a command must be one the runner fills in."""
        if isinstance(command, str):
            try:
                parts = shlex.split(command)
            except ValueError as error:
                self.problem(path, f"cannot split the command into words: {error}",
                             "close the quote, or give the command as a list")
                return
            where = [path] * len(parts)
        else:
            parts, where = command, [path + (j,) for j in range(len(command))]
        for part, at in zip(parts, where):
            if (problem := commands.command_placeholder_problem(part)) is not None:
                self.problem(at, problem)

    def _resolve_captures(self) -> list[Capture]:
        captures = []
        for i, spec in enumerate(self.document.capture):
            for name in self._select(spec.nodes, ("capture", i, "nodes")):
                node = self.nodes[name]
                for j, interface in enumerate(spec.interfaces):
                    if interface not in node.interfaces:
                        self.problem(("capture", i, "interfaces", j),
                                     f"{name} has no interface {interface!r}",
                                     did_you_mean(interface, node.interfaces))
                captures.append(Capture(name, spec.interfaces or list(node.interfaces),
                                        spec.filter, spec.snaplen, spec.rotate_size,
                                        spec.rotate_files))
        return captures

    def _resolve_schedule(self, links: list[Link], workload: list[Workload]) -> list[Event]:
        by_endpoint = {str(end): link.index for link in links for end in link.endpoints()}
        # What each direction will be after the sets so far, so every set is checked against
        # the state it really changes (sets in time order; a later set builds on earlier ones).
        planned = {(link.index, d): getattr(link, d) for link in links
                   for d in ("forward", "reverse")}
        events = []
        stalls = NodeStalls({name for entry in workload for name in entry.nodes})
        in_time_order = sorted(enumerate(self.document.schedule), key=lambda item: item[1].at)
        for i, spec in in_time_order:
            path = ("schedule", i)
            if spec.at > self.document.duration:
                self.problem(path + ("at",), f"at {spec.at:g}s is after the run ends "
                                             f"(duration {self.document.duration:g}s)",
                             "raise duration or move the event earlier")
            if spec.action.startswith("controller_"):
                if self.document.controller.remotes:
                    self.problem(path + ("action",), f"{spec.action} needs a controller "
                                                     "edgebed starts, and remote is one it "
                                                     "does not",
                                 "stop and start a remote controller outside the run")
                elif not self.document.controller.apps:
                    self.problem(path + ("action",), f"{spec.action} needs a controller",
                                 "set controller: {app: edgebed}")
                events.append(Event(spec.at, spec.action))
                continue
            if spec.node is not None:
                if spec.node not in self.nodes:
                    self.problem(path + ("node",), f"unknown node {spec.node!r}",
                                 did_you_mean(spec.node, self.nodes))
                    continue
                if spec.action in ("node_stall", "node_resume"):
                    problem = stalls.problem(spec.action, self.nodes[spec.node])
                    if problem is not None:
                        self.problem(path + ("node",), *problem)
                        continue
                events.append(Event(spec.at, spec.action, node=spec.node))
                continue
            if spec.link not in by_endpoint:
                self.problem(path + ("link",), f"no link has endpoint {spec.link!r}",
                             did_you_mean(spec.link, by_endpoint))
                continue
            index = by_endpoint[spec.link]
            directions = ("forward", "reverse") if spec.direction == "both" else (spec.direction,)
            if spec.set is None:
                events.append(Event(spec.at, spec.action, link=index))
                continue
            for direction in directions:
                planned[index, direction] = planned[index, direction].merged(spec.set)
                self._check_impairment(planned[index, direction], path + ("set",))
            events.append(Event(spec.at, spec.action, link=index, directions=directions,
                                changes=spec.set))
        return events


class NodeStalls:
    """Which hosts the schedule has stalled so far (its events taken in time order), to check
    each ``node_stall`` and ``node_resume`` against: a stall needs a host that runs a program
    of the workload and is not stalled already, a resume a stalled host."""

    def __init__(self, running: set[str]):
        self.running = running
        self.stalled: set[str] = set()

    def problem(self, action: str, node) -> tuple[str, str] | None:
        """What is wrong with ``action`` on ``node`` now (message, hint), None when nothing;
        the stall or resume is taken in."""
        if node.is_switch:
            return (f"{action} stops or continues a host's programs; {node.name} is a switch",
                    "node_down cuts every link of a switch")
        if action == "node_stall":
            if node.name not in self.running:
                return (f"{node.name} runs no program of the workload: node_stall would stop "
                        "nothing", "stall a host that a workload entry starts an agent on")
            if node.name in self.stalled:
                return f"{node.name} is stalled already", "node_resume it first"
            self.stalled.add(node.name)
        elif node.name not in self.stalled:
            return (f"{node.name} is not stalled at that time",
                    "schedule a node_stall of it earlier")
        else:
            self.stalled.discard(node.name)
        return None
