"""The scheduling policies a scenario can select by name, and what their parameters look like."""

from __future__ import annotations

import sys

from pydantic import BaseModel, ValidationError

from controller.policy import Host, Policy, PolicyLabels
from edgebed import discovery


def classes() -> dict[str, type]:
    """Every policy class the modules of this package expose in ``POLICIES``, by name."""
    return discovery.declared(sys.modules[__name__], "POLICIES")


def available() -> list[str]:
    return sorted(classes())


def policy_class(name: str) -> type:
    """The class of policy ``name``; ValueError naming the valid ones if there is none."""
    found = classes()
    if name not in found:
        raise ValueError(f"unknown policy {name!r}; valid policies: {', '.join(sorted(found))}")
    return found[name]


def params_model(name: str) -> type[BaseModel]:
    """The parameters model of policy ``name``; ValueError if there is no such policy."""
    return policy_class(name).Params


def label_models(name: str) -> tuple[type[PolicyLabels], type[PolicyLabels]]:
    """The client and server labels policy ``name`` reads (``ClientLabels`` and
    ``ServerLabels``; a policy declaring none reads none)."""
    policy = policy_class(name)
    return (getattr(policy, "ClientLabels", PolicyLabels),
            getattr(policy, "ServerLabels", PolicyLabels))


def create(name: str, params: dict | None = None) -> Policy:
    """A new policy ``name`` with ``params`` (none: the defaults); ValueError naming the policy
    and the offending parameters, with the valid ones, if ``params`` do not validate."""
    policy = policy_class(name)
    model = policy.Params
    try:
        validated = model.model_validate(params or {})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, problem['loc'])) or 'params'}: {problem['msg']}"
                             for problem in error.errors())
        raise ValueError(f"policy {name!r}: {problems} (valid params: "
                         f"{', '.join(model.model_fields) or 'none'})") from error
    return policy(validated)


def scenario_problems(name: str, params: BaseModel, hosts: dict[str, tuple[str, dict]],
                      servers: dict[str, tuple[str, ...]]) -> list:
    """Policy ``name``'s own checks of a scenario (its ``scenario_problems``, if it has one)
    with validated ``params``, the hosts as name -> (role, labels) and each service's servers."""
    check = getattr(policy_class(name), "scenario_problems", None)
    if check is None:
        return []
    return list(check(params, {host: Host(host, role, labels)
                               for host, (role, labels) in hosts.items()}, servers))
