"""The published JSON Schema of scenario files: the schema's models, every typed value also
writable as ``${VAR}``, and each agent's and policy's parameters chosen by name."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .commands import COMMAND
from .model import ROLE_MARK, SWITCH, Controller, ScenarioDocument
from .plugins import AgentCatalog, PolicyCatalog, Plugins


VARIABLE_SCHEMA = {"type": "string", "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*((:=|:-)[^}]*)?\}",
                   "description": "an environment variable, expanded before validation"}


def _allow_variables(schema: Any) -> Any:
    """Let every number, integer, boolean, choice and patterned string also be written as
    ``${VAR:=default}``, as the loader expands variables before types are checked."""
    if isinstance(schema, dict):
        schema = {key: _allow_variables(value) for key, value in schema.items()}
        typed_scalar = schema.get("type") in ("integer", "number", "boolean") or (
            schema.get("type") == "string" and ("pattern" in schema or "enum" in schema)
            and schema is not VARIABLE_SCHEMA)
        if typed_scalar:
            typed = {k: v for k, v in schema.items() if k not in ("title", "description", "default")}
            kept = {k: v for k, v in schema.items() if k in ("title", "description", "default")}
            return {**kept, "anyOf": [typed, VARIABLE_SCHEMA]}
        return schema
    if isinstance(schema, list):
        return [_allow_variables(item) for item in schema]
    return schema


def _roles(schema: dict, catalog: AgentCatalog) -> dict:
    """``schema`` with the roles a node may have (``switch`` and every role the agents
    declare) as ``$defs/Role``, referred to from every role field."""

    def referred(part):
        if part == ROLE_MARK:
            return {"$ref": "#/$defs/Role"}
        if isinstance(part, dict):
            return {key: referred(value) for key, value in part.items()}
        if isinstance(part, list):
            return [referred(item) for item in part]
        return part

    schema = referred(schema)
    roles = {SWITCH: "an Open vSwitch bridge", **catalog.roles()}
    schema["$defs"]["Role"] = _allow_variables({
        "title": "Role", "type": "string", "enum": list(roles),
        "description": "what a node is; agents and policies key on it: " + "; ".join(
            f"{name}: {meaning}" for name, meaning in roles.items())})
    return schema


def _agent_params(schema: dict, catalog: AgentCatalog) -> None:
    """Each agent's ``params`` schema, chosen by the entry's ``agent`` (if/then), so editors
    complete and check parameters too."""
    entry = schema["$defs"]["WorkloadEntry"]
    agents = [name for name in catalog.available() if name != COMMAND]
    entry["properties"]["agent"]["enum"] = [COMMAND, *agents]
    clauses = [
        {"if": {"properties": {"agent": {"const": name}}},
         "then": {"properties": {"params": _allow_variables(
             catalog.params_model(name).model_json_schema(ref_template="#/$defs/{model}"))}}}
        for name in agents]
    if clauses:
        entry["allOf"] = clauses
    for clause in clauses:
        params = clause["then"]["properties"]["params"]
        schema["$defs"].update(params.pop("$defs", {}))


def _policy_contracts(schema: dict, policies: PolicyCatalog) -> None:
    """Each policy's ``policy_params`` and the host labels it reads, chosen by the
    controller's ``policy`` (if/then), so editors complete and check them too. Definitions are
    named ``<scheme>.<Model>`` (two schemes may each have a ``LoadWeights``). A host's labels
    are checked against both the client and server labels the policy reads: which hosts serve
    is only known once services are resolved."""
    controller = schema["$defs"]["Controller"]
    names = policies.available()
    controller["properties"]["policy"] = _allow_variables(
        {**controller["properties"]["policy"], "enum": names})
    default = Controller.model_fields["policy"].default

    def definition(model: type[BaseModel], scheme: str) -> dict:
        prefix = f"{scheme}."
        part = _allow_variables(model.model_json_schema(ref_template=f"#/$defs/{prefix}{{model}}"))
        for name, inner in part.pop("$defs", {}).items():
            schema["$defs"].setdefault(prefix + name, inner)
        schema["$defs"].setdefault(prefix + model.__name__, part)
        return {"$ref": f"#/$defs/{prefix}{model.__name__}"}

    def chosen(name: str) -> dict:
        """``if`` the scenario's policy is ``name`` (an absent policy is the default)."""
        clause = {"properties": {"policy": {"const": name}}}
        return clause if name == default else {**clause, "required": ["policy"]}

    params_clauses, label_clauses = [], []
    for name in names:
        policy = policies.policy_class(name)
        scheme = policy.__module__.removeprefix("controller.policies.").split(".")[0]
        params_clauses.append({"if": chosen(name), "then": {"properties": {
            "policy_params": definition(policy.Params, scheme)}}})
        models = [model for model in policies.label_models(name) if model.model_fields]
        if not models:
            continue
        labels = {"allOf": [definition(model, scheme) for model in dict.fromkeys(models)]}
        settings = {"properties": {"labels": labels}}
        label_clauses.append({
            "if": {"properties": {"controller": chosen(name)}, "required": ["controller"]},
            "then": {"properties": {"topology": {"properties": {
                "defaults": settings, **{table: {"additionalProperties": settings}
                                         for table in ("kinds", "groups", "nodes")}}}}}})
    controller["allOf"] = params_clauses
    if label_clauses:
        schema["allOf"] = label_clauses


def scenario_schema(plugins: Plugins) -> dict:
    """The published JSON Schema of scenario files, with the params of the agents and policies
    in ``plugins``."""
    schema = _roles(_allow_variables(ScenarioDocument.model_json_schema()), plugins.agents)
    _agent_params(schema, plugins.agents)
    _policy_contracts(schema, plugins.policies)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://edgebed.invalid/scenario.schema.json"
    schema["title"] = "edgebed scenario"
    return schema
