"""dispatch at model level, capacity near full load: the ``dispatch_capacity`` kind of
experiment cell.

A cell is ``dispatch_model``'s burst of joins through K dispatch centers (its world, its
parameters, :func:`controller.policies.dispatch.model.join_burst`) with two more: the
dimensions a node's capacity has (``streams`` alone, or ``media``: streams, video and audio
bitrate and CPU, joins drawn from :data:`~controller.policies.dispatch.model.MEDIA`) and the
load it runs at (the clients' demand over the nodes' capacity). It counts the joins no node
admitted and, of them, the fragmented ones: those the room left across all nodes and centers
would have held.
"""

from __future__ import annotations

from typing import Literal

import pandas as pd
from pydantic import Field, model_validator

from controller.policies.dispatch import model
from experiments.kinds.dispatch import model as model_kind
from experiments.report import policy_means, swept_values, versus
from experiments.sweeps.kinds import Cell, Constant, Kind, Metric

POLICIES = model_kind.BURST


class Parameters(model_kind.Parameters):
    """``dispatch_model``'s parameters with the dimensions of a node's capacity and its load."""

    dimensions: Literal["streams", "media"] = Field(
        "streams", description="streams: every join one stream, nodes limited in streams; "
                               "media: audio-only, SD and HD joins, nodes limited in streams, "
                               "video and audio bitrate and CPU")
    load: float | None = Field(None, gt=0, description="the clients' demand over the nodes' "
                                                       "capacity in the dimension that binds "
                                                       "(none: capacity streams per node)")

    @model_validator(mode="after")
    def _media_has_a_load(self) -> Parameters:
        if self.dimensions == "media" and self.load is None:
            raise ValueError("dimensions media sizes the nodes by load: set load")
        return self


def run_cell(cell: Cell) -> list[dict[str, object]]:
    """One row: the burst of ``cell``'s policy on its seed's world at its load."""
    p: Parameters = cell.parameters
    if cell.policy not in POLICIES:
        raise ValueError(f"dispatch_capacity has no policy {cell.policy!r}")
    world, database = model_kind.world_of(cell)
    profile = model.PROFILES[p.dimensions]
    demands = model.draw_demands(world, profile, cell.seed)
    capacities = (None if p.load is None
                  else model.capacities_at_load(world, demands, profile, p.load))
    result = model.join_burst(world, database, cell.policy, centers=p.centers, burst=p.burst,
                              report_period=p.report_period, report_delay=p.report_delay,
                              seed=cell.seed, demands=demands, capacities=capacities)
    return [result.summary() | {"fragmented": result.fragmented,
                                "rejected_with_room": result.rejected_with_room,
                                "rejected_share": result.rejected / len(world.clients)}]


METRICS = (
    Metric("rejected", "joins no node admitted"),
    Metric("rejected_share", "joins no node admitted", "share"),
    Metric("fragmented", "rejected joins the room left across all nodes and centers would "
                         "have held"),
    Metric("rejected_with_room", "rejected joins one node alone had room for"),
    Metric("admitted", "clients admitted"),
    Metric("redirects", "clients redirected after the fact"),
    Metric("oversold_streams", "clients beyond a node's capacity at its peak, summed"),
    Metric("oversold_nodes", "oversold nodes"),
    Metric("peak_utilization", "highest node utilization in any dimension", "load/capacity"),
    Metric("burst_rtt_p50_ms", "RTT p50 of the admitted clients", "ms"),
    Metric("burst_rtt_p95_ms", "RTT p95 of the admitted clients", "ms"),
)


def _demand(demand: model.Resources) -> str:
    return ", ".join(f"{amount} {dimension}" for dimension, amount in demand.items())


CONSTANTS = (
    *(Constant(f"MEDIA.mix[{index}]", f"{share:.0%}", f"of the joins under media ask "
                                                      f"{_demand(demand)}")
      for index, (share, demand) in enumerate(model.MEDIA.mix)),
    *(Constant(f"MEDIA.headroom[{dimension}]", f"{headroom:g}",
               f"a media node's {dimension} over its share of the demand at load 1")
      for dimension, headroom in model.MEDIA.headroom.items()),
)

ABOUT = """\
**Capacity control near full load, in one dimension and in several.** Each cell is the burst
of joins of `dispatch-model` (a synthetic world, its clients joining through K dispatch
centers that each pick the first node with room in the location database's ranking, no
probing) under one capacity control: `tickets`, each node's capacity pre-sold to the centers
in equal shares, or `shared`, every center admitting against the node's whole capacity from
the last load report plus its own admissions since, and redirecting the latest joins off a
node its report shows oversold. A node's capacity has `dimensions`: `streams` alone, every
join one stream (the one-dimensional case of `dispatch-model`), or `media`: stream slots,
video bitrate, audio bitrate and CPU, apart, every join asking for a kind drawn from the mix
in the constants' table (audio-only listeners, SD and HD viewers) and admitted only with
room in every dimension. Tickets are per dimension: each center holds a share of each
(`controller/policies/dispatch/capacity.py` says why not per bundle). `load` is the clients'
total demand over the nodes' total capacity in the dimension that binds (video bitrate under
`media`, built with the headroom in the constants' table in the others); nodes are alike.

A join is **rejected** when no node has room for it in its center's view; it is
**fragmented** when, at that moment, the room left free across all nodes (every center's
share together) would still have held it in every dimension: under tickets, because the room
sits in other centers' shares; under `media`, also because it is scattered over nodes none of
which holds the whole join. Of them, those **with room** on one node alone were stranded
by the control, not by the nodes' split: in other centers' tickets, or beyond a center's
stale view. A shared figure strands nothing among centers, but its stale
reports oversell nodes and move clients after the fact (`redirects`); a redirected client
joins again, and may then be rejected. Everything is a model, no packet is sent; intervals are
95% Student-t intervals over repetitions (one world each)."""


def remarks(results: pd.DataFrame) -> list[str]:
    """Each sweep value's rejections and fragmented rejections per control, read from the
    results."""
    found = []
    for sweep, at, group in swept_values(results, by_number=True):
        counted = policy_means(group, POLICIES)
        if counted is None:
            continue
        means, _ = counted
        found.append(f"{sweep}, {at}: tickets reject "
                     f"{versus(means, 'tickets', 'shared', 'rejected', '.1f')} joins with "
                     f"shared capacity, of them fragmented "
                     f"{versus(means, 'tickets', 'shared', 'fragmented', '.1f')} and with "
                     f"room on one node "
                     f"{versus(means, 'tickets', 'shared', 'rejected_with_room', '.1f')}; "
                     f"shared "
                     f"capacity redirects {means.loc['shared', 'redirects']:.1f} after the "
                     "fact.")
    return found


KINDS = (Kind(name="dispatch_capacity", parameters=Parameters, policies=POLICIES,
              run=run_cell, metrics=METRICS,
              plots=("rejected", "fragmented", "rejected_with_room", "redirects",
                     "oversold_streams"),
              about=ABOUT, remarks=remarks, constants=CONSTANTS),)
