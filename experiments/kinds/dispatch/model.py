"""dispatch at model level: the ``dispatch_model`` kind of experiment cell.

A cell draws one synthetic world with :func:`controller.policies.dispatch.model.generate`
(regions, sites, media nodes, clients; every number made up, see that module) and runs one of
three studies, chosen by the cell's policy:

* ``database`` / ``probe`` — first-mile access of every client: the center answers a ranked
  candidate list from the location database; ``database`` takes its first entry, ``probe``
  probes them all and takes the best measured;
* ``tickets`` / ``shared`` — a burst of joins through K dispatch centers with capacity kept by
  pre-sold tickets or by a shared capacity figure with stale load reports, redirects after
  the fact in both;
* ``broadcast`` / ``hint`` — every client's back-to-source lookup among K dispatch centers:
  the query broadcast to the other centers, or sent to the center the room's signalling
  hints at (a share of the hints stale), :func:`~controller.policies.dispatch.model.lookups`.

One row per cell; a study's metrics are empty in the other study's rows.
"""

from __future__ import annotations

from typing import Annotated

import pandas as pd
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from controller.policies.dispatch import model
from controller.policies.dispatch.access import LocationDatabase
from controller.policies.dispatch.rooms import LookupMode
from experiments.report import swept_values
from experiments.sweeps.kinds import Cell, Kind, Metric
from edgebed import units

Seconds = Annotated[float, BeforeValidator(lambda value: units.parse_duration(value)
                                           if isinstance(value, str) else value)]
Share = Annotated[float, Field(ge=0, le=1)]
ACCESS = ("database", "probe")
BURST = ("tickets", "shared")
LOOKUP = tuple(mode.value for mode in LookupMode)


class Parameters(BaseModel):
    """One cell's world and study parameters (times in seconds or with a unit: ``100ms``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    regions: int = Field(5, ge=1, description="regions (countries)")
    sites_per_region: int = Field(4, ge=1, description="cities per region")
    nodes: int = Field(100, ge=1, description="media nodes")
    clients: int = Field(10_000, ge=1, description="clients")
    capacity: int = Field(150, ge=1, description="downstream streams per node")
    home_share: Share = Field(0.5, description="share of clients in the home region")
    error_share: Share = Field(0.1, description="share of home clients the database misplaces")
    abroad_error_share: Share | None = Field(None, description="share misplaced abroad "
                                                               "(default: error_share)")
    same_region_share: Share = Field(0.5, description="share of wrong answers that stay in "
                                                      "the client's region")
    offered: int = Field(4, ge=1, description="candidates the center answers")
    other_regions: int = Field(2, ge=0, description="of them, kept for other regions")
    probe_packets: int = Field(20, ge=1, description="probe packets per candidate")
    centers: int = Field(3, ge=1, description="dispatch centers K (burst, lookup)")
    burst: Annotated[Seconds, Field(gt=0)] = Field(10.0, description="join burst length (s)")
    report_period: Annotated[Seconds, Field(gt=0)] = Field(1.0, description="load report "
                                                                            "period (s)")
    report_delay: Annotated[Seconds, Field(ge=0)] = Field(0.05, description="report transit "
                                                                           "time (s)")
    stale_hint_share: Share = Field(0.0, description="share of room hints naming a center "
                                                     "without the stream (lookup)")


def world_of(cell: Cell) -> tuple[model.World, LocationDatabase]:
    """``cell``'s world and location database, drawn from its seed."""
    p: Parameters = cell.parameters
    world = model.generate(cell.seed, regions=p.regions, sites_per_region=p.sites_per_region,
                           nodes=p.nodes, clients=p.clients, capacity=p.capacity,
                           home_share=p.home_share)
    return world, LocationDatabase(world.geography, p.error_share,
                                   abroad_error_share=p.abroad_error_share,
                                   home_region=world.home_region,
                                   same_region_share=p.same_region_share, seed=cell.seed)


def run_cell(cell: Cell) -> list[dict[str, object]]:
    """One row: the study of ``cell``'s policy on its seed's world."""
    p: Parameters = cell.parameters
    world, database = world_of(cell)
    if cell.policy in ACCESS:
        return [model.access(world, database, offered=p.offered, other_regions=p.other_regions,
                             probe=cell.policy == "probe", probe_packets=p.probe_packets,
                             seed=cell.seed).summary()]
    if cell.policy in BURST:
        return [model.join_burst(world, database, cell.policy, centers=p.centers,
                                 burst=p.burst, report_period=p.report_period,
                                 report_delay=p.report_delay, seed=cell.seed).summary()]
    if cell.policy in LOOKUP:
        return [model.lookups(world, LookupMode(cell.policy), centers=p.centers,
                              stale_hint_share=p.stale_hint_share, seed=cell.seed).summary()]
    raise ValueError(f"dispatch_model has no policy {cell.policy!r}")


METRICS = (
    Metric("database_misplaced", "clients the database misplaces", "share"),
    Metric("badly_placed", "clients > 20 ms from their best node", "share"),
    Metric("poor_sessions", "poor sessions (VIA: RTT > 320 ms, loss > 1.2% or jitter > 12 ms)",
           "share"),
    Metric("rtt_p50_ms", "access RTT p50", "ms"),
    Metric("rtt_p95_ms", "access RTT p95", "ms"),
    Metric("mean_loss_pct", "mean access loss", "%"),
    Metric("oversold_streams", "oversold streams (peak load beyond capacity, summed)"),
    Metric("oversold_nodes", "oversold nodes"),
    Metric("redirects", "clients redirected after the fact"),
    Metric("rejected", "clients no node admitted"),
    Metric("admitted", "clients admitted"),
    Metric("peak_utilization", "highest node utilization", "load/capacity"),
    Metric("burst_rtt_p50_ms", "RTT p50 of the burst's clients", "ms"),
    Metric("burst_rtt_p95_ms", "RTT p95 of the burst's clients", "ms"),
    Metric("lookup_messages", "messages per back-to-source lookup (queries and replies)"),
    Metric("lookup_messages_total", "messages of all the cell's lookups"),
    Metric("lookup_ms_mean", "lookup time, mean", "ms"),
    Metric("lookup_ms_p95", "lookup time, p95", "ms"),
    Metric("lookup_fallback", "lookups whose hint was stale (then broadcast)", "share"),
)

ABOUT = """\
**The talk gives mechanisms, not numbers**, so nothing here is compared with a paper: each
mechanism is measured against the simpler design beside it on the same synthetic worlds.
**Everything is a model**: a world of regions on a circle, cities, media nodes and clients
whose delays grow with distance and whose cross-border paths add congestion delay, loss
(1-5%) and jitter drawn from made-up ranges (`controller/policies/dispatch/model.py`); no
packet is sent. The location database is synthetic: it misplaces `error_share` of the clients,
half of its mistakes in the client's own region. The access study takes capacity as not
binding; the burst study places each client on the first node with room in its database
ranking (no probing), so only the capacity control differs between its policies. The full
scale is 10k clients, 100 nodes, 5 regions; the emulated scenario (a few hosts) measures the
same mechanisms on real packets. Intervals are 95% Student-t intervals over repetitions
(one world each).

**Back-to-source lookup** (`broadcast` / `hint`, the `lookup-*` sweeps): K centers sit with
media nodes, round robin over the regions; every one of the clients goes to its nearest
center and looks up one stream pushed through another center (a center that knows the stream
needs no lookup in either mode). Broadcast asks all K - 1 other centers at once and each
answers: 2(K - 1) messages, and the answer is in at the first positive reply, the owner's
round trip. A hint asks the center named in the room's signalling: 2 messages and the same
round trip when it is fresh; a stale hint (`stale_hint_share` of them, naming a center
without the stream) costs its round trip and 2 messages for "not here", then a broadcast to
the other K - 2. So the hint can never be faster than the broadcast here, only cheaper: what
it buys is messages, at 2 + 2(K - 2) x stale share per lookup against 2(K - 1), and what a
stale hint costs is one extra round trip to the wrong center. The round trips are the
model's (twice the one-way delay between the centers' cities, cross-border congestion
included); no timeout, loss or queueing at a center is modelled, so the times are the
propagation floor. What the sweeps show (remarks, tables): the hint's saving in messages grows
with K while its cost in time does not, and the stale hints, each paying two round trips, make
the hint's p95 lookup time rather than its mean: at a tenth of them stale the p95 is already
a stale lookup's, at half of them the mean follows."""


def remarks(results: pd.DataFrame) -> list[str]:
    """What probing bought per database error share, the oversell of each capacity control
    and what each lookup mode cost, read from the results."""
    found = []
    access = results[results["policy"].isin(ACCESS)]
    for _, at, group in swept_values(access, by_number=True):
        means = group.groupby("policy")["poor_sessions"].mean()
        if {"database", "probe"} <= set(means.index) and means["database"] > 0:
            found.append(f"At {at}, probing leaves "
                         f"{means['probe']:.1%} of sessions poor against "
                         f"{means['database']:.1%} with the database's first candidate: "
                         f"{1 - means['probe'] / means['database']:.0%} of the poor sessions "
                         "fixed.")
    burst = results[results["policy"].isin(BURST)]
    for policy in BURST:
        group = burst[burst["policy"] == policy]
        if group.empty:
            continue
        found.append(f"{policy}: {int((group['oversold_streams'] > 0).sum())} of {len(group)} "
                     f"cells oversold a node; at most {int(group['oversold_streams'].max())} "
                     f"streams oversold in a cell.")
    lookup = results[results["policy"].isin(LOOKUP)]
    for sweep, at, group in swept_values(lookup, by_number=True):
        means = group.groupby("policy")[["lookup_messages", "lookup_messages_total",
                                         "lookup_ms_mean", "lookup_fallback"]].mean()
        if set(LOOKUP) <= set(means.index):
            b, h = means.loc["broadcast"], means.loc["hint"]
            found.append(f"{sweep}, {at}: a hint takes "
                         f"{h['lookup_messages']:.2f} messages per lookup "
                         f"({h['lookup_messages_total']:.0f} in a cell) against "
                         f"{b['lookup_messages']:.2f} ({b['lookup_messages_total']:.0f}) by "
                         f"broadcast, and {h['lookup_ms_mean']:.0f} ms against "
                         f"{b['lookup_ms_mean']:.0f} ms on average; "
                         f"{h['lookup_fallback']:.1%} of the hints were stale.")
    return found


KINDS = (Kind(name="dispatch_model", parameters=Parameters, policies=ACCESS + BURST + LOOKUP,
              run=run_cell, metrics=METRICS,
              plots=("poor_sessions", "badly_placed", "rtt_p95_ms", "oversold_streams",
                     "redirects", "burst_rtt_p95_ms", "lookup_messages", "lookup_ms_mean",
                     "lookup_ms_p95"),
              about=ABOUT, remarks=remarks),)
