"""The agents a scenario's ``workload`` can start, what their parameters look like and which
tables they write."""

from __future__ import annotations

import inspect
import json
import sys
import typing
from types import ModuleType

from pydantic import BaseModel

import agents
from agents.agent import TABLES as SHARED_TABLES
from agents.agent import AgentParams, with_shared_tables
from edgebed import discovery
from topologies.commands import COMMAND


def is_agent(module: ModuleType) -> bool:
    """Whether ``module`` is an agent: it has a ``Params`` model and a ``main`` entry."""
    params = getattr(module, "Params", None)
    return (inspect.isclass(params) and issubclass(params, AgentParams)
            and callable(getattr(module, "main", None)))


def modules() -> dict[str, ModuleType]:
    """Every agent module, by agent name (the module's last name part); ValueError if two
    packages have an agent of one name."""
    found: dict[str, ModuleType] = {}
    for module in discovery.modules(sys.modules[agents.__name__], nested=True):
        if not is_agent(module):
            continue
        name = module.__name__.rsplit(".", 1)[-1]
        if found.setdefault(name, module) is not module:
            raise ValueError(f"agent {name!r} is both {found[name].__name__} and {module.__name__}")
    return found


def roles() -> dict[str, str]:
    """Every host role the agents declare (name -> what such a host is): ``ROLES`` of
    :mod:`agents.roles` and of each scheme's package; ValueError if two declare one role
    differently."""
    found: dict[str, str] = {}
    where: dict[str, str] = {}
    for module in discovery.modules(sys.modules[agents.__name__], nested=True):
        for name, meaning in getattr(module, "ROLES", {}).items():
            if found.setdefault(name, meaning) != meaning:
                raise ValueError(f"role {name!r} is declared by both {where[name]} and "
                                 f"{module.__name__}")
            where.setdefault(name, module.__name__)
    return found


def available() -> list[str]:
    """``command`` and every agent found."""
    return [COMMAND] + sorted(modules())


def params_model(name: str) -> type[BaseModel]:
    return modules()[name].Params


def module_name(name: str) -> str:
    return modules()[name].__name__


def agent_argv(python: str, name: str, node: str, out: str, params: dict, seed: int) -> list[str]:
    """The command line that starts agent ``name`` on ``node`` (the same for a Mininet host and
    an exported container), with ``params`` whose node names are already addresses."""
    return [python, "-m", module_name(name), "--node", node, "--out", out,
            "--params", json.dumps(params), "--seed", str(seed)]


def tables() -> dict[str, tuple[str, ...]]:
    """Every table an agent may write, shared or its own, with its columns; ValueError if two
    agents declare one table with different columns."""
    found = dict(SHARED_TABLES)
    where = dict.fromkeys(SHARED_TABLES, "agents.agent")
    for name, module in modules().items():
        for table, columns in with_shared_tables(getattr(module, "TABLES", {})).items():
            if found.setdefault(table, columns) != columns:
                raise ValueError(f"table {table!r} has other columns in agent {name} than in "
                                 f"{where[table]}")
            where.setdefault(table, f"agent {name}")
    return found


def node_reference_fields(model: type[BaseModel]) -> list[str]:
    """Fields that name other nodes (``NodeRef``, alone or in a list)."""
    found = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra
        annotation = info.annotation
        inner = [a for a in typing.get_args(annotation)] or [annotation]
        if (isinstance(extra, dict) and extra.get("node_ref")) or any(
                _is_node_ref(a) for a in inner):
            found.append(name)
    return found


def _is_node_ref(annotation) -> bool:
    for metadata in getattr(annotation, "__metadata__", ()):
        extra = getattr(metadata, "json_schema_extra", None)
        if isinstance(extra, dict) and extra.get("node_ref"):
            return True
    return any(_is_node_ref(a) for a in typing.get_args(annotation)
               if a is not type(None))
