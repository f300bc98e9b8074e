"""What the reference pages are generated from: every import of the project's own code the
documentation hook makes is here, so a moved module is fixed in one place."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK_RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents import catalog as agent_catalog  # noqa: E402
from agents.wire import formats as message_formats  # noqa: E402
from controller import policies  # noqa: E402
from experiments.cli import parser as cli_parser  # noqa: E402
from experiments.scenarios import json_schema as scenario_schema  # noqa: E402
from topologies.commands import COMMAND  # noqa: E402


def agents() -> dict[str, tuple[str, type]]:
    """Every traffic agent: name -> (its module's docstring, its Params model)."""
    found = {}
    for name in agent_catalog.available():
        if name == COMMAND:
            continue
        module = sys.modules.get(agent_catalog.module_name(name)) or __import__(
            agent_catalog.module_name(name), fromlist=["_"])
        found[name] = (module.__doc__ or "", agent_catalog.params_model(name))
    return found


def scheduling_policies() -> dict[str, tuple[str, type]]:
    """Every policy: name -> (its class's docstring, its Params model)."""
    return {name: (policies.policy_class(name).__doc__ or "", policies.params_model(name))
            for name in policies.available()}


def wire_formats() -> list:
    """The data-plane messages, by type code."""
    return list(message_formats().values())


__all__ = ["ROOT", "BENCHMARK_RESULTS", "agents", "scheduling_policies", "wire_formats",
           "cli_parser", "scenario_schema"]
