"""What the scenario checks share: the problems collected, node ranges, host selectors and the
impairment checks that links, schedules and live changes apply alike."""

from __future__ import annotations

import re
from typing import Iterator

from .loader import SourceMap
from .model import Impairment, ScenarioDocument
from .plugins import Plugins
from .problems import Problem, did_you_mean
from .resolved import Endpoint, Node

RANGE = re.compile(r"\[(\d+)-(\d+)\]")
MAX_RANGE = 4096
MAX_BANDWIDTH = 100e9


def impairment_problems(impairment: Impairment) -> list[tuple[str, str]]:
    """What is wrong with one direction's impairment as a whole (each field on its own is the
    schema's job), as (message, hint) pairs: the same checks for links, schedules and live
    changes."""
    problems = []
    if (impairment.jitter or 0) > (impairment.delay or 0):
        problems.append((f"jitter {impairment.jitter * 1e3:g}ms is larger than delay "
                         f"{(impairment.delay or 0) * 1e3:g}ms",
                         "the delay would have to go negative; raise delay or lower jitter"))
    if impairment.bw is not None and impairment.bw > MAX_BANDWIDTH:
        problems.append((f"bw {impairment.bw / 1e9:g}Gbps is more than a veth can carry",
                         "at most 100Gbps"))
    if impairment.loss and impairment.burst:  # p: 0 clears a burst (BurstLoss.__bool__)
        problems.append(("both loss and burst are set",
                         "loss is independent random loss, burst the Gilbert–Elliott model; "
                         "choose one"))
    return problems


class DocumentChecks:
    """The state every check of a schema-valid document shares, and the problems it collects."""

    def __init__(self, document: ScenarioDocument, source_map: SourceMap, plugins: Plugins):
        self.document = document
        self.agents = plugins.agents
        self.policies = plugins.policies
        self.topology = document.topology
        self.source_map = source_map
        self.problems: list[Problem] = []
        self.nodes: dict[str, Node] = {}
        self.origin: dict[str, tuple] = {}  # expanded node name -> path of its definition
        self.unusable: set[str] = set()  # node keys as written that were reported unusable
        self.unusable_roles: set[tuple] = set()  # where unknown roles were written
        self.linked: set[str] = set()  # nodes some link names, whether or not the link is valid
        self.unknown_endpoint = False  # some endpoint could not be tied to defined nodes
        self.endpoint_paths: dict[Endpoint, tuple] = {}  # linked interface -> where written

    def problem(self, path: tuple, message: str, hint: str = "", *, key: bool = False) -> None:
        self.problems.append(Problem(self.source_map.position(path, key=key), path, message, hint))

    def _expand(self, text: str, path: tuple) -> list[str] | None:
        """``viewer[1-3]`` -> viewer1, viewer2, viewer3 (None after reporting a bad range)."""
        match = RANGE.search(text)
        if not match:
            return [text]
        first, last = int(match.group(1)), int(match.group(2))
        head, tail = text[:match.start()], text[match.end():]
        if first > last:
            self.problem(path, f"bad range [{first}-{last}] in {text!r}: it counts down",
                         f"write [first-last] with first <= last: {head}[{last}-{first}]{tail}")
            return None
        if last - first + 1 > MAX_RANGE:
            self.problem(path, f"bad range [{first}-{last}] in {text!r}: {last - first + 1} "
                               f"items, at most {MAX_RANGE}",
                         f"split it into ranges of at most {MAX_RANGE} items")
            return None
        return [f"{head}{i}{tail}" for i in range(first, last + 1)]

    def hosts_in_order(self) -> Iterator[Node]:
        return (n for n in self.nodes.values() if not n.is_switch)
    def _select(self, selectors: list[str], path: tuple) -> list[str]:
        """Node names from names, ranges, ``role:NAME`` and ``group:NAME`` selectors."""
        chosen: list[str] = []
        for index, selector in enumerate(selectors):
            where = path + (index,)
            prefix, sep, value = selector.partition(":")
            if sep and prefix in ("role", "group", "kind"):
                attribute = {"role": lambda n: n.role, "group": lambda n: n.group,
                             "kind": lambda n: n.kind}[prefix]
                matched = [n.name for n in self.nodes.values()
                           if attribute(n) == value and not n.is_switch]
                if not matched:
                    self.problem(where, f"no node has {prefix} {value!r}",
                                 did_you_mean(value, {attribute(n) for n in self.nodes.values()
                                                      if attribute(n)}))
                chosen += matched
                continue
            if selector in self.unusable:
                continue  # reported where the node is written
            for name in self._expand(selector, where) or []:
                if name in self.origin and name not in self.nodes:
                    continue  # the node failed its own checks and says so there
                if name not in self.nodes:
                    self.problem(where, f"unknown node {name!r}", did_you_mean(
                        name, [n.name for n in self.nodes.values() if not n.is_switch]))
                elif self.nodes[name].is_switch:
                    self.problem(where, f"{name} is a switch; agents and captures run on hosts")
                else:
                    chosen.append(name)
        return list(dict.fromkeys(chosen))

    def _check_impairment(self, impairment: Impairment, where: tuple) -> None:
        for message, hint in impairment_problems(impairment):
            self.problem(where, message, hint)
