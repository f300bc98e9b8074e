"""The live-edge user allocation policies of live_edge (LUA and its baselines DF, MHCP, Random,
Optimal) on the plain-Python policy interface."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Annotated

import networkx as nx
import numpy as np
from pydantic import Field, model_validator

from controller.policies.live_edge.allocators import (Allocator, df, lua, mhcp, optimal,
                                                      random_allocation)
from controller.policies.live_edge.model import (DEFAULT_LADDER, SOURCE_BITRATE, Allocation,
                                                 EdgeServer, Instance, Viewer, Weights,
                                                 check_ladder)
from controller.policy import (Assignment, ModelPolicy, PolicyLabels, PolicyParams, Rejection,
                               Request, State)
from edgebed import units
from edgebed.quantities import Rate as ScenarioRate

Rate = Annotated[ScenarioRate, Field(gt=0)]


class LiveEdgeParams(PolicyParams):
    """The model's parameters, which every live-edge policy takes."""

    weights: Weights = Field(default_factory=Weights,
                             description="QoE weights and constants, SI units (see "
                                         "controller.policies.live_edge.model.Weights)")
    ladder: tuple[Rate, ...] = Field(DEFAULT_LADDER, min_length=1,
                                     description="bitrate ladder, ascending (bit/s or rates "
                                                 "such as 2.5Mbps)")
    source_bitrate: Rate = Field(SOURCE_BITRATE, description="the streamer's upload bitrate R")

    @model_validator(mode="after")
    def _ladder_fits_the_source(self) -> LiveEdgeParams:
        check_ladder(self.ladder, self.source_bitrate)
        return self


Fraction = Annotated[float, Field(ge=0)]


class ViewerLabels(PolicyLabels):
    """The viewer labels the live-edge policies read (from a request's labels, then its
    client's host); see docs/schemes/live_edge.md."""

    preferred_bitrate: Rate | None = Field(None, description="R*_v, bit/s or a rate such as "
                                                             "5Mbps")
    danmaku_rate: Fraction | None = Field(None, description="F_v, danmaku messages per second")
    gifts: Fraction | None = Field(None, description="p_v, gifts given")
    covering: str | list[str] | None = Field(None, description="M(v): server names, a list or "
                                                               "comma-separated")
    streamer: str | None = Field(None, description="the host the viewer's streamer uploads from")
    streamer_edge: str | None = Field(None, description="the node the stream enters the edge at")


class EdgeServerLabels(PolicyLabels):
    """The server labels the live-edge policies read."""

    vcpu: Annotated[float, Field(ge=0)] | None = Field(None, description="compute C_m in vCPU "
                                                                         "(absent: unlimited)")


class RandomParams(LiveEdgeParams):
    """Random allocation's parameters: the model's and a seed."""

    seed: int = Field(0, description="seed of the random choices; the policy's draws go on "
                                     "from call to call")


class OptimalParams(LiveEdgeParams):
    """Optimal allocation's parameters: the model's and the MILP solver's limits."""

    time_limit: float = Field(60.0, gt=0, description="seconds the MILP solver may take per "
                                                      "service and call")
    mip_rel_gap: float = Field(1e-6, ge=0, le=1, description="relative optimality gap at which "
                                                             "the solver stops")


def _label(labels: Mapping, key: str, default):
    """``labels[key]``, or ``default`` when it is absent or null."""
    return labels[key] if labels.get(key) is not None else default


def instance_from_state(state: State, service: str, requests: list[Request],
                        params: LiveEdgeParams) -> Instance:
    """The period ``requests`` (of ``service``) pose, as docs/schemes/live_edge.md describes;
    viewers are named by their flows."""
    graph = state.graph
    up = nx.subgraph_view(graph, filter_edge=lambda u, v, k: graph.edges[u, v, k].get("up", True))

    @cache
    def delays_from(node: str) -> dict[str, float]:
        return nx.single_source_dijkstra_path_length(up, node, weight="delay") if node in up \
            else {}

    servers = sorted(state.servers_of(service), key=lambda server: server.name)
    names = [server.name for server in servers]
    hosts = {client.name: client for client in state.clients}
    previous = {placement.request.flow: placement for placement in state.previous}
    used = defaultdict(lambda: [0.0, 0.0])  # server -> [bandwidth, compute]
    for placement in state.placements:
        if placement.request.service == service:
            bitrate = placement.bitrate
            used[placement.server][0] += placement.request.demand if bitrate is None else bitrate
            # A flow placed without a bitrate is not transcoded here.
            used[placement.server][1] += 0.0 if bitrate is None else (
                (params.source_bitrate - bitrate) * params.weights.H)

    viewers = []
    for request in requests:
        client = hosts.get(request.client)
        labels = {**(client.labels if client else {}), **request.labels}
        covering = _label(labels, "covering", names)
        if isinstance(covering, str):
            covering = [name.strip() for name in covering.split(",")]
        streamer = _label(labels, "streamer", None)
        from_streamer = delays_from(streamer) if streamer is not None else {}
        edge = _label(labels, "streamer_edge", min(
            (name for name in names if name in from_streamer), key=from_streamer.get,
            default=None))
        before = previous.get(request.flow)
        viewers.append(Viewer(
            name=request.flow,
            delays={name: delays_from(name)[request.client] for name in names
                    if name in covering and request.client in delays_from(name)},
            preferred=units.parse_rate(_label(labels, "preferred_bitrate", (
                request.bitrates[0] if request.bitrates else params.source_bitrate))),
            danmaku_rate=float(_label(labels, "danmaku_rate", 0.0)),
            gifts=float(_label(labels, "gifts", 0.0)),
            previous_server=before.server if before else None,
            previous_bitrate=before.bitrate if before else None,
            streamer_edge=edge,
            streamer_delay=from_streamer.get(edge, math.inf) if streamer is not None else 0.0))
    edges = {viewer.streamer_edge for viewer in viewers} - {None}
    return Instance(
        viewers=tuple(viewers),
        servers=tuple(EdgeServer(
            server.name, max(server.capacity - used[server.name][0], 0.0),
            max(float(server.labels.get("vcpu", math.inf)) - used[server.name][1], 0.0),
            {edge: delays_from(edge)[server.name] for edge in edges
             if server.name in delays_from(edge)}) for server in servers),
        ladder=tuple(params.ladder), source=params.source_bitrate, weights=params.weights)


class LiveEdgePolicy(ModelPolicy):
    """Base of the live-edge policies: builds each service's instance, runs ``allocator`` on it
    and turns the allocation into assignments (with bitrates) and rejections."""

    name: str
    Params: type[LiveEdgeParams] = LiveEdgeParams
    ClientLabels = ViewerLabels
    ServerLabels = EdgeServerLabels
    allocator: Allocator
    # Reported loads include the flows being decided (see above): they change nothing.
    on_load = "nothing"

    def __init__(self, params: LiveEdgeParams | None = None) -> None:
        super().__init__(params)
        # Only random allocation's parameters carry a seed; the other allocators draw nothing.
        self.rng = np.random.default_rng(getattr(self.params, "seed", None))
        self.last_period: dict[str, tuple[Instance, Allocation]] = {}

    def instance(self, state: State, service: str, view, requests: list[Request]) -> Instance:
        return instance_from_state(state, service, requests, self.params)

    def allocate(self, instance: Instance) -> Allocation:
        return type(self).allocator(instance, self.rng)

    def outcomes(self, service: str, requests: list[Request], instance: Instance,
                 allocation: Allocation) -> Iterator[Assignment | Rejection]:
        for viewer, covered in zip(instance.viewers, instance.tables.covered.any(axis=1)):
            if viewer.name in allocation.assignment:
                server, bitrate = allocation.assignment[viewer.name]
                yield Assignment(viewer.name, server, bitrate)
            elif covered:
                yield Rejection(viewer.name, f"no server of {service!r} covering it has "
                                             f"bandwidth and compute left for any bitrate")
            else:
                yield Rejection(viewer.name, f"no server of {service!r} covers it with the "
                                             f"stream reaching it over links that are up")


class Lua(LiveEdgePolicy):
    """LUA, the paper's greedy: viewers heaviest gift weight first, each to the covering server
    where the bitrate that fits gives the highest QoE (see
    ``controller.policies.live_edge.allocators.lua``)."""

    name = "lua"
    allocator = lua


class DelayFirst(LiveEdgePolicy):
    """Delay first: each viewer to the covering server with the lowest network delay, at the
    fitting bitrate nearest its preference (see ``controller.policies.live_edge.allocators.df``)."""

    name = "df"
    allocator = df


class Mhcp(LiveEdgePolicy):
    """MHCP: each viewer to the covering server with the most remaining space, at the highest
    bitrate that fits (see ``controller.policies.live_edge.allocators.mhcp``)."""

    name = "mhcp"
    allocator = mhcp


class RandomAllocation(LiveEdgePolicy):
    """Random: each viewer to a random covering server at a random bitrate, among those that
    fit, seeded (see ``controller.policies.live_edge.allocators.random_allocation``)."""

    name = "random"
    Params = RandomParams
    allocator = random_allocation


class Optimal(LiveEdgePolicy):
    """Optimal: the exact MILP allocation, the most viewers served and then the highest
    objective (see ``controller.policies.live_edge.allocators.optimal``); the solver's status
    and gap are in ``last_period[service][1].solver``."""

    name = "optimal"
    Params = OptimalParams

    def allocate(self, instance: Instance) -> Allocation:
        return optimal(instance, self.rng, time_limit=self.params.time_limit,
                       mip_rel_gap=self.params.mip_rel_gap)


POLICIES = (Lua, DelayFirst, Mhcp, RandomAllocation, Optimal)
