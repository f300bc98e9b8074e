"""The allocators of live_edge: LUA (the paper's greedy) and its baselines DF, MHCP, Random and
Optimal, on the model of :mod:`controller.policies.live_edge.model`."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_array

from controller.policies.live_edge.model import Allocation, Instance, SolverReport, Tables, headroom
from edgebed import clock

Allocator = Callable[[Instance, np.random.Generator], Allocation]


class Loads:
    """What a greedy pass has handed out on each server so far, and from it the window of
    rungs a new viewer still fits at: ``lowest`` (compute allows it and every rung above) to
    ``highest`` (bandwidth allows it and every rung below)."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        servers = len(tables.bandwidth)
        self.bandwidth = np.zeros(servers)
        self.compute = np.zeros(servers)
        self.viewers = np.zeros(servers, dtype=int)
        self.lowest = np.zeros(servers, dtype=int)
        self.highest = np.zeros(servers, dtype=int)
        self._refresh(slice(None))

    def _refresh(self, servers: slice | int) -> None:
        tables = self.tables
        self.highest[servers] = np.searchsorted(
            tables.ladder, headroom(self.bandwidth[servers], tables.bandwidth[servers]),
            side="right") - 1
        # compute_use falls as the rung rises; negated it is ascending for searchsorted.
        self.lowest[servers] = np.searchsorted(
            -tables.compute_use, -headroom(self.compute[servers], tables.compute[servers]),
            side="left")

    @property
    def open(self) -> np.ndarray:
        """The servers with room for some rung."""
        return self.lowest <= self.highest

    def share_left(self, count_exponent: float = 1.0) -> np.ndarray:
        """MHCP's remaining-space score RS_m = (RC_m + RD_m) / (2 * (1 + count_m)^e), RC and RD
        the shares of compute and bandwidth left (1 for an unlimited resource, 0 for none);
        e = ``count_exponent`` (the paper's formula is lost: e = 1 is the spec's stand-in, 0
        ranks by room alone, larger e spreads viewers by count)."""
        tables = self.tables

        def share(used: np.ndarray, capacity: np.ndarray) -> np.ndarray:
            left = np.ones_like(capacity)
            finite = np.isfinite(capacity)
            np.divide(capacity - used, capacity, out=left, where=finite & (capacity > 0))
            left[finite & (capacity <= 0)] = 0.0
            return left

        return ((share(self.compute, tables.compute) + share(self.bandwidth, tables.bandwidth))
                / (2 * (1.0 + self.viewers) ** count_exponent))

    def take(self, server: int, rung: int) -> None:
        self.bandwidth[server] += self.tables.ladder[rung]
        self.compute[server] += self.tables.compute_use[rung]
        self.viewers[server] += 1
        self._refresh(server)


RungRule = Callable[[int, Loads], np.ndarray]  # viewer -> the rung at every server
ScoreRule = Callable[[int, np.ndarray, Loads], np.ndarray]  # viewer, rungs -> score per server


def greedy(tables: Tables, order: np.ndarray, rung: RungRule, score: ScoreRule) -> Allocation:
    """Viewers in ``order`` each take the open covering server with the highest ``score`` at the
    rung ``rung`` gives it there (the first such server on ties)."""
    loads = Loads(tables)
    server = np.full(len(tables.preferred), -1)
    chosen_rung = np.full(len(tables.preferred), -1)
    for viewer in order:
        usable = tables.covered[viewer] & loads.open
        if not usable.any():
            continue
        rungs = rung(viewer, loads)
        best = int(np.argmax(np.where(usable, score(viewer, rungs, loads), -np.inf)))
        loads.take(best, rungs[best])
        server[viewer], chosen_rung[viewer] = best, rungs[best]
    return tables.allocation(server, chosen_rung)


def nearest_fitting(start: np.ndarray) -> RungRule:
    """The rung rule of LUA's step 2: from the viewer's ``start`` rung, down while bandwidth is
    short, up while compute is short."""
    return lambda viewer, loads: np.clip(start[viewer], loads.lowest, loads.highest)


def lua(instance: Instance, rng: np.random.Generator) -> Allocation:
    """LUA: viewers by gift weight Y_v, heaviest first (ties in instance order), each starting
    from max(R*_v, Rprev_v) snapped up to the ladder, moved to the nearest rung that fits each
    covering server, and assigned where that gives the highest QoE. O(|V| |M| |ladder|)."""
    tables = instance.tables
    order = np.argsort(-tables.weight, kind="stable")
    start = tables.rung_at_least(np.fmax(tables.preferred, tables.previous_bitrate))
    servers = np.arange(len(tables.bandwidth))
    qoe = tables.qoe_table
    return greedy(tables, order, nearest_fitting(start),
                  lambda viewer, rungs, loads: qoe[viewer, servers, rungs])


DF_BITRATES = ("preferred", "highest")


def df(instance: Instance, rng: np.random.Generator, *,
       bitrate: str = "preferred") -> Allocation:
    """Delay first: viewers in instance order each take the open covering server with the
    lowest network delay (T(b_v, m_bv) + T(m_bv, m) + T(m, v)); history plays no part. The
    paper has DF set the bitrate "from the server's remaining resources and the viewer's
    preference, for the best experience", which reads two ways (``bitrate``): the fitting
    rung nearest the preference (``preferred``, the spec's), or the highest fitting rung
    (``highest``: QoE rises with the bitrate, Theorem 2, so that is the best experience)."""
    tables = instance.tables
    if bitrate not in DF_BITRATES:
        raise ValueError(f"DF's bitrate rule is one of {DF_BITRATES}, not {bitrate!r}")
    start = (tables.rung_at_least(tables.preferred) if bitrate == "preferred"
             else np.full(len(tables.preferred), len(tables.ladder) - 1))
    return greedy(tables, np.arange(len(tables.preferred)), nearest_fitting(start),
                  lambda viewer, rungs, loads: -tables.network[viewer])


def mhcp(instance: Instance, rng: np.random.Generator, *,
         count_exponent: float = 1.0) -> Allocation:
    """MHCP: viewers in instance order each take the open covering server with the most
    remaining space RS_m (:meth:`Loads.share_left` with ``count_exponent``, this module's
    stand-in for the paper's lost formula; count_m counts this period's viewers), at the
    highest rung that fits there."""
    tables = instance.tables
    top = np.full(len(tables.preferred), len(tables.ladder) - 1)
    return greedy(tables, np.arange(len(tables.preferred)), nearest_fitting(top),
                  lambda viewer, rungs, loads: loads.share_left(count_exponent))


def random_allocation(instance: Instance, rng: np.random.Generator) -> Allocation:
    """Random: viewers in instance order each take a uniformly random open covering server at a
    uniformly random rung that fits there."""
    tables = instance.tables
    servers = len(tables.bandwidth)

    def random_rung(viewer: int, loads: Loads) -> np.ndarray:
        width = np.maximum(loads.highest - loads.lowest + 1, 1)
        return loads.lowest + (rng.random(servers) * width).astype(int)

    return greedy(tables, np.arange(len(tables.preferred)), random_rung,
                  lambda viewer, rungs, loads: rng.random(servers))


OPTIMAL_OBJECTIVES = ("paper", "served-first")


def optimal(instance: Instance, rng: np.random.Generator, *, time_limit: float = 60.0,
            mip_rel_gap: float = 1e-6, objective: str = "paper") -> Allocation:
    """The exact allocation by MILP (HiGHS through :func:`scipy.optimize.milp`), binary
    x[v, m, r] for every covered (v, m) and rung r, each viewer on at most one, within
    ``time_limit`` seconds. ``objective`` ``paper``: the highest sum_v Y_v QoE_v, the paper's
    objective, an unserved viewer counting 0 (its Algorithm 1, line 11), so a viewer whose
    every choice has QoE below 0 is left out. ``served-first``: in two stages sharing the
    time, first the most viewers that can be served at all, then the highest objective
    serving that many. Linear in x: QoE is a constant per (v, m, r). Capacities get the same
    slack as the greedy allocators'. A run cut short keeps the best solution found and says so
    in ``solver``; if the objective's stage found none, the served stage's stands."""
    if objective not in OPTIMAL_OBJECTIVES:
        raise ValueError(f"Optimal's objective is one of {OPTIMAL_OBJECTIVES}, not "
                         f"{objective!r}")
    end = clock.monotonic() + time_limit
    tables = instance.tables
    viewer, server = np.nonzero(tables.covered)
    viewers, servers = len(tables.preferred), len(tables.bandwidth)
    if not len(viewer):
        # HiGHS refuses a problem without variables; with no viewer covered there is no choice.
        return tables.allocation(np.full(viewers, -1), np.full(viewers, -1), SolverReport(
            0, "no viewer is covered: nothing to decide", 0.0, 0.0, True))
    rungs = len(tables.ladder)
    viewer, server = np.repeat(viewer, rungs), np.repeat(server, rungs)
    rung = np.tile(np.arange(rungs), len(viewer) // rungs)
    columns = np.arange(len(viewer))

    def rows(values: np.ndarray, row: np.ndarray, count: int) -> csr_array:
        return csr_array((values, (row, columns)), shape=(count, len(columns)))

    ones = np.ones(len(columns))
    # Bandwidth in units of the source bitrate keeps its row coefficients near 1, as compute's.
    scale = instance.source
    constraints = [
        LinearConstraint(rows(ones, viewer, viewers), 0, 1),
        LinearConstraint(rows(tables.ladder[rung] / scale, server, servers), -np.inf,
                         headroom(0.0, tables.bandwidth) / scale),
        LinearConstraint(rows(tables.compute_use[rung], server, servers), -np.inf,
                         headroom(0.0, tables.compute)),
        # Implied by the two above, but HiGHS would otherwise prove it branch by branch.
        LinearConstraint(rows(ones, server, servers), 0, _server_room(tables, scale)),
    ]
    value = tables.weight[viewer] * tables.terms(viewer, server, tables.ladder[rung]).qoe

    def solve(cost: np.ndarray, extra: list[LinearConstraint]):
        # HiGHS needs a positive limit; with the budget spent it still reports what it has.
        options = {"time_limit": max(end - clock.monotonic(), 1e-3), "mip_rel_gap": mip_rel_gap,
                   "disp": False}
        return milp(cost, constraints=constraints + extra, integrality=ones,
                    bounds=Bounds(0, 1), options=options)

    most, at_least_served = None, []
    if objective == "served-first":
        most = solve(-ones, [])
        served = 0 if most.x is None else int(round(-most.fun))
        at_least_served = [LinearConstraint(ones[None, :], served, np.inf)]
    best = solve(-value, at_least_served)
    solution = best.x if best.x is not None or most is None else most.x
    chosen = np.zeros(len(columns), dtype=bool) if solution is None else solution > 0.5
    assigned_server = np.full(viewers, -1)
    assigned_rung = np.full(viewers, -1)
    assigned_server[viewer[chosen]] = server[chosen]
    assigned_rung[viewer[chosen]] = rung[chosen]
    # HiGHS leaves the gap and the bound out (None) when it found no solution in time.
    report = SolverReport(status=best.status, message=best.message,
                          gap=np.nan if best.mip_gap is None else float(best.mip_gap),
                          bound=np.nan if best.mip_dual_bound is None
                          else -float(best.mip_dual_bound),
                          served_proven=most is None or most.status == 0)
    return tables.allocation(assigned_server, assigned_rung, report)


def _server_room(tables: Tables, scale: float) -> np.ndarray:
    """The most viewers each server could hold on its own: how many of those it covers fit, at
    the best mix of rungs (a small integer program per server)."""
    use = np.vstack([tables.ladder / scale, tables.compute_use])
    room = tables.covered.sum(axis=0).astype(float)
    for m in np.flatnonzero(room):
        fit = milp(-np.ones(len(tables.ladder)), integrality=np.ones(len(tables.ladder)),
                   bounds=Bounds(0, room[m]), constraints=LinearConstraint(use, -np.inf, [
                       headroom(0.0, tables.bandwidth[m]) / scale,
                       headroom(0.0, tables.compute[m])]))
        room[m] = round(-fit.fun)
    return room


ALLOCATORS: dict[str, Allocator] = {
    "lua": lua, "df": df, "mhcp": mhcp, "random": random_allocation, "optimal": optimal,
    "optimal_served_first": partial(optimal, objective="served-first")}
