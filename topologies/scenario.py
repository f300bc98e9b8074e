"""A scenario file turned into the resolved model the network is built from."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from edgebed.files import atomic_write

from .controller_resolution import ControllerResolution
from .loader import SourceMap, load_scenario_file, load_scenario_text
from .model import ScenarioDocument
from .network_resolution import NetworkResolution
from .plugins import Plugins
from .problems import Problem, ScenarioInvalid, fields_at, syntax_checked, validation_problems
from .resolved import Capture, Endpoint, Event, Link, Node, Scenario, Service, Workload
from .workload_resolution import WorkloadResolution

__all__ = ["Capture", "Endpoint", "Event", "Link", "Node", "Scenario", "Service", "Workload",
           "derive", "load", "loads", "resolve"]


def load(path: str | Path, environ: dict[str, str] | None = None, *,
         plugins: Plugins, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Read, validate and resolve a scenario file, its workload and policy checked against
    ``plugins``; raises :class:`ScenarioInvalid`. ``overrides`` replace top-level keys as
    read (a command line's ``--dilate``), so they are checked like the file's own."""
    data, source_map = syntax_checked(lambda: load_scenario_file(path, environ))
    if overrides and isinstance(data, dict):
        data = {**data, **overrides}
    return resolve(data, source_map, plugins)


def loads(text: str, file: str = "<scenario>", environ: dict[str, str] | None = None, *,
          plugins: Plugins) -> Scenario:
    """Like :func:`load`, from text."""
    return resolve(*syntax_checked(lambda: load_scenario_text(text, file, environ)), plugins)


def derive(path: str | Path, derived: str | Path, changes: Mapping[str, Any],
           environ: dict[str, str] | None = None, *, plugins: Plugins) -> Scenario:
    """Write ``derived``: the scenario file ``path`` with its variables expanded from
    ``environ`` and the top-level keys of ``changes`` (plain YAML data: a schedule of an
    experiment's own, say) put in place of its own; return it loaded. ``derived`` is checked
    like any scenario file (``path``'s syntax only: what a change replaces needs no check),
    so a bad change raises :class:`ScenarioInvalid` naming ``derived``'s line and field. A
    controller app named by a file relative to the scenario must be found from ``derived``'s
    directory too."""
    data, _ = syntax_checked(lambda: load_scenario_file(path, environ))
    if not isinstance(data, dict):
        return load(path, environ, plugins=plugins)  # raises: not a scenario document
    header = f"# {path} with {', '.join(changes)} replaced and its variables expanded\n"
    atomic_write(derived, header + yaml.safe_dump({**data, **changes}, sort_keys=False))
    return load(derived, environ, plugins=plugins)


def resolve(data: object, source_map: SourceMap, plugins: Plugins) -> Scenario:
    """Validate and resolve a parsed scenario document; raises :class:`ScenarioInvalid`."""
    if not isinstance(data, dict):
        raise ScenarioInvalid([Problem(source_map.position(()), (),
                                       "a scenario is a mapping of keys such as name and topology",
                                       "start the file with 'name: my-scenario'")])
    try:
        document = ScenarioDocument.model_validate(data)
    except ValidationError as error:
        raise ScenarioInvalid(validation_problems(error, data, source_map,
                                                  fields=fields_at)) from None
    return _Resolver(document, source_map, plugins).run()


class _Resolver(NetworkResolution, WorkloadResolution, ControllerResolution):
    """Turns a schema-valid document into a :class:`Scenario`, collecting every problem."""

    def run(self) -> Scenario:
        self._check_table_names()
        self._resolve_nodes()
        links = self._resolve_links()
        self._assign_dpids()
        self._assign_addresses()
        self._check_connectivity(links)
        workload = self._resolve_workload()
        captures = self._resolve_captures()
        schedule = self._resolve_schedule(links, workload)
        services = self._resolve_controller()
        if self.problems:
            raise ScenarioInvalid(self.problems)
        return Scenario(self.document.name, self.source_map.file, self.document, self.nodes,
                        links, workload, captures, schedule, services)
