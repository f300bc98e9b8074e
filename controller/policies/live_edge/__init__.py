"""live_edge, live-edge user allocation: the reconstructed QoE model and instance generator
(:mod:`.model`), the allocators LUA, DF, MHCP, Random and Optimal on it (:mod:`.allocators`), and
the controller policies running them on the controller's state (:mod:`.policies`)."""

from __future__ import annotations

import dataclasses
import random

from controller.policies.live_edge.policies import POLICIES
from controller.policy import State

__all__ = ["POLICIES", "contract_state"]


def contract_state(state: State, rng: random.Random) -> State:
    """``state`` with the labels these policies read drawn by ``rng``: viewers' preferred
    bitrate, danmaku rate and gifts, servers' compute (the policy contract tests' hook)."""
    clients = tuple(dataclasses.replace(client, labels={
        "preferred_bitrate": rng.choice((1e6, 2.5e6, 5e6, 8e6)),
        "danmaku_rate": rng.uniform(0, 3), "gifts": rng.choice((0, 10, 500))})
        for client in state.clients)
    servers = tuple(dataclasses.replace(server, labels={"vcpu": rng.choice((0.5, 4, 15))})
                    for server in state.servers)
    return dataclasses.replace(state, clients=clients, servers=servers)
