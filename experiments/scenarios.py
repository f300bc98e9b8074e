"""Scenarios loaded with every agent and policy edgebed has: the one place the layers below
are wired together for the scenario checks and the published schema."""

from __future__ import annotations

import functools

from agents import catalog
from controller import policies
from topologies import scenario
from topologies.json_schema import scenario_schema
from topologies.plugins import Plugins

PLUGINS = Plugins(agents=catalog, policies=policies)

load = functools.partial(scenario.load, plugins=PLUGINS)
loads = functools.partial(scenario.loads, plugins=PLUGINS)
derive = functools.partial(scenario.derive, plugins=PLUGINS)


def json_schema() -> dict:
    """The published JSON Schema of scenario files (``edgebed schema``)."""
    return scenario_schema(PLUGINS)
