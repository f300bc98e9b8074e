"""What the scenario checks need from the layers above: the agents' (with the host roles they
declare) and the policies' catalogues."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel


class AgentCatalog(Protocol):
    """The agents a workload entry may name (``agents.catalog``); ``available`` may list the
    ``command`` workload, which has no params."""

    def available(self) -> list[str]: ...

    def params_model(self, name: str) -> type[BaseModel]: ...

    def node_reference_fields(self, model: type[BaseModel]) -> list[str]: ...

    def roles(self) -> Mapping[str, str]:
        """The roles of hosts the agents key on (name -> what such a host is); ``switch`` is
        this layer's own."""
        ...


class PolicyCatalog(Protocol):
    """The policies a controller may run (``controller.policies``)."""

    def available(self) -> list[str]: ...

    def policy_class(self, name: str) -> type: ...

    def params_model(self, name: str) -> type[BaseModel]: ...

    def label_models(self, name: str) -> tuple[type[BaseModel], type[BaseModel]]: ...

    def scenario_problems(self, name: str, params: BaseModel,
                          hosts: Mapping[str, tuple[str, Mapping[str, Any]]],
                          servers: Mapping[str, tuple[str, ...]]) -> Iterable[Any]: ...


class _NoAgents:
    """A catalogue without agents: every workload entry but a command is unknown."""

    def available(self) -> list[str]:
        return []

    def params_model(self, name: str) -> type[BaseModel]:
        raise ValueError(f"unknown agent {name!r}")

    def node_reference_fields(self, model: type[BaseModel]) -> list[str]:
        return []

    def roles(self) -> Mapping[str, str]:
        return {}


class _NoPolicies:
    """A catalogue without policies: every policy a scenario names is unknown."""

    def available(self) -> list[str]:
        return []

    def policy_class(self, name: str) -> type:
        raise ValueError(f"unknown policy {name!r}")

    # No name is available, so every lookup by name fails the same way.
    params_model = label_models = policy_class

    def scenario_problems(self, name, params, hosts, servers) -> Iterable[Any]:
        return ()


@dataclass(frozen=True)
class Plugins:
    """The catalogues a scenario is checked against. Left out, a catalogue knows nothing, so a
    scenario naming an agent or a policy is refused as unknown rather than passed unchecked.
    ``agents=None`` is for a reader that starts no workload (the controller): the workload is
    then not resolved at all, the scenario's ``workload`` is empty and host roles are taken as
    written (the runner that starts the workload has checked them)."""

    agents: AgentCatalog | None = field(default_factory=_NoAgents)
    policies: PolicyCatalog = field(default_factory=_NoPolicies)
