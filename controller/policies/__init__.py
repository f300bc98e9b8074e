"""The scheduling policies a scenario can select by name, and what their parameters look like.

A policy here is a class with a ``name``, a ``Params`` model (a pydantic model; unknown keys are
errors) and a constructor taking validated ``Params``; registering one is listing it in
``POLICIES``. The scenario checks validate ``params:`` with :func:`params_model`; the controller
builds the policy with :func:`create`.
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from controller.policies.baseline import LeastLoaded, RoundRobin
from controller.policies.live_edge import LIVE_EDGE_POLICIES
from controller.policy import Policy

POLICIES = {policy.name: policy for policy in (RoundRobin, LeastLoaded, *LIVE_EDGE_POLICIES)}


def available() -> list[str]:
    return sorted(POLICIES)


def params_model(name: str) -> type[BaseModel]:
    """The parameters model of policy ``name``; ValueError if there is no such policy."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; valid policies: {', '.join(available())}")
    return POLICIES[name].Params


def create(name: str, params: dict | None = None) -> Policy:
    """A new policy ``name`` with ``params`` (none: the defaults); ValueError naming the policy
    and the offending parameters, with the valid ones, if ``params`` do not validate."""
    model = params_model(name)
    try:
        validated = model.model_validate(params or {})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, problem['loc'])) or 'params'}: {problem['msg']}"
                             for problem in error.errors())
        raise ValueError(f"policy {name!r}: {problems} (valid params: "
                         f"{', '.join(model.model_fields) or 'none'})") from error
    return POLICIES[name](validated)
