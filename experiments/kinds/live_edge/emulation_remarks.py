"""live_edge emulated, reported: the tables and remarks the ``live_edge_emulation`` report computes
from the results rows (placements compared, the policies' orderings, the latency gap, the
viewers' playout and what the server switches cost it)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from scipy import stats

from experiments.kinds.live_edge.emulation_measures import read_placement
from experiments.playout_columns import SWITCH_WINDOW_S
from experiments.report import CONFIDENCE, swept_values, whole
from experiments.sweeps.kinds import Table


def remarks(results: pd.DataFrame) -> list[str | Table]:
    """Per sweep value: how differently each pair of policies placed the same viewers (each
    run's ``placement``, repetition by repetition) and the media rate each left on each edge
    (:func:`placement_tables`), the objective as the model predicted it and as measured, both
    orderings of the policies and whether they match (:func:`ordering_remarks`), what the
    measured delay, its tail and loss add to the model's latency (:func:`gap_table`), and the
    viewers' playout with the server switches' share of it (:func:`playout_table`)."""
    values = []
    for sweep, at, rows in swept_values(results):
        cells = rows.groupby(["policy", "repetition"], sort=False).first().reset_index()
        values.append((f"{sweep}, {at}", cells, list(dict.fromkeys(cells["policy"]))))
    # Results made before runs recorded their placements lack them.
    placed = placement_tables(values) if "placement" in results else []
    # Results made before runs recorded their viewers' playout lack it.
    played = [playout_table(values)] if "switches" in results else []
    return [*placed, *ordering_remarks(values), gap_table(values), *played]


def placement_tables(values: list[tuple[str, pd.DataFrame, list[str]]]) -> list[Table]:
    """Per sweep value (``values``: where, its cells' rows, the policies in order), each pair
    of policies' placements compared viewer by viewer, repetition by repetition; and each
    policy's media rate on each edge at the end, with the placements the controller's
    ``decisions`` table does not confirm."""
    pairs, loads = [], []
    unserved = ("-", math.nan)
    for at, cells, order in values:
        placed = {(row.policy, row.repetition): read_placement(row.placement)
                  for row in cells.itertuples()}
        viewers = set().union(*placed.values())
        for a, b in itertools.combinations(order, 2):
            repetitions = sorted({r for p, r in placed if p == a}
                                 & {r for p, r in placed if p == b})
            edges, rungs = [], []
            for r in repetitions:
                each = [(placed[a, r].get(v, unserved), placed[b, r].get(v, unserved))
                        for v in viewers]
                edges.append(sum(x[0] != y[0] for x, y in each))
                rungs.append(sum(x[0] == y[0] != "-" and x[1] != y[1] for x, y in each))
            pairs.append((at, f"{a} and {b}", str(len(viewers)), ", ".join(map(str, edges)),
                          ", ".join(map(str, rungs))))
        for policy in order:
            runs = [where for (p, _), where in placed.items() if p == policy]
            rate: dict[str, float] = {}
            for where in runs:
                for server, bitrate in where.values():
                    rate[server] = rate.get(server, 0.0) + bitrate / 1e6
            mine = cells[cells["policy"] == policy]
            loads.append((at, policy, {server: total / len(runs)
                                       for server, total in rate.items()},
                          int(mine["unconfirmed"].sum())))
    edges = sorted({server for *_, rate, _ in loads for server in rate})
    return [Table("Placements compared pair by pair over the viewers some policy served, each "
                  "where its last decision followed put it, repetition by repetition:",
                  ("value", "policies", "viewers", "on different edges (or served by one only)",
                   "on the same edge at another rung"), tuple(pairs)),
            Table("Media rate placed on each edge at the end, Mbit/s (mean over the "
                  "repetitions; what the model's uplink capacity D_m counts, packet headers "
                  "not included), and the runs' placements whose edge the controller's "
                  "decisions table does not name:",
                  ("value", "policy", *edges, "unconfirmed placements"),
                  tuple((at, policy, *(f"{rate[edge]:.3g}" if edge in rate else "–"
                                       for edge in edges), str(unconfirmed))
                        for at, policy, rate, unconfirmed in loads))]


def ordering_remarks(values: list[tuple[str, pd.DataFrame, list[str]]]) -> list[str | Table]:
    """Per sweep value, the policies ordered by the objective the model predicted and by the
    one measured (:func:`_ordering_remark`), and a table of the pairs the measurement puts
    the other way round (with whether the repetitions resolve the measured difference: its
    paired interval leaves out 0)."""
    found, reversed_pairs = [], []
    for at, cells, order in values:
        pairs = _reversed_pairs(at, cells, order)
        found.append(_ordering_remark(at, cells, bool(pairs)))
        reversed_pairs += pairs
    if reversed_pairs:
        found.append(Table(
            "The pairs the measured objective orders the other way round from the model, the "
            "measured difference a mean over the repetitions with its paired "
            f"{CONFIDENCE:.0%} interval:",
            ("value", "measured higher", "predicted higher", "measured difference",
             "± (half the interval)", "resolved by the repetitions"), tuple(reversed_pairs)))
    return found


def _reversed_pairs(at: str, cells: pd.DataFrame, order: list[str]) -> list[tuple[str, ...]]:
    means = cells.groupby("policy", sort=False)["objective_model"].mean()
    measured_by = cells.pivot(index="repetition", columns="policy", values="objective_measured")
    found = []
    for a, b in itertools.combinations(order, 2):
        predicted = _difference(means[a], means[b])
        differences = (measured_by[a] - measured_by[b]).dropna()
        measured = float(differences.mean())
        if predicted and measured and np.sign(measured) != np.sign(predicted):
            high, low = (a, b) if predicted > 0 else (b, a)
            half = (stats.t.ppf((1 + CONFIDENCE) / 2, len(differences) - 1) * differences.std()
                    / math.sqrt(len(differences)) if len(differences) > 1 else math.nan)
            resolved = ("one repetition: no" if math.isnan(half) else
                        "yes" if abs(measured) > half else "no: within their spread")
            found.append((at, low, high, f"{abs(measured):.3g}",
                          "n/a" if math.isnan(half) else f"{half:.3g}", resolved))
    return found


def _ordering_remark(at: str, cells: pd.DataFrame, reversed_pairs: bool) -> str:
    """The policies ordered by the objective the model predicted and by the one measured, and
    whether the orderings match."""
    means = cells.groupby("policy", sort=False)[["objective_model",
                                                 "objective_measured"]].mean()
    verdict = ("the measured ordering does not match the predicted one (the pairs the other "
               "way round are tabulated below)" if reversed_pairs else
               "the measured ordering matches the predicted one")
    return (f"{at}: objective (gift-weighted QoE summed over the viewers served), predicted "
            f"{_ordering(means['objective_model'])}; measured "
            f"{_ordering(means['objective_measured'])}; {verdict}.")


def _difference(a: float, b: float) -> float:
    """a − b, or 0 when they differ only by float rounding (the same allocation's sums)."""
    return 0.0 if abs(a - b) <= 1e-9 * max(abs(a), abs(b)) else a - b


def _ordering(means: pd.Series) -> str:
    """``lua 5.12 > df 4.8 = mhcp 4.8``: the policies from the highest mean down."""
    ranked = means.sort_values(ascending=False)
    text = ""
    for index, (policy, mean) in enumerate(ranked.items()):
        if index:
            text += " = " if not _difference(ranked.iloc[index - 1], mean) else " > "
        text += f"{policy} {mean:.3g}"
    return text


def gap_table(values: list[tuple[str, pd.DataFrame, list[str]]]) -> Table:
    """What the emulation adds to the model's latency, per sweep value and policy (means over
    the repetitions of each run's mean over its viewers): the measured median one-way delay
    against the model's latency and their difference, the delay's 99th percentile and the
    loss of the viewers' streams."""
    rows = []
    for at, cells, order in values:
        means = cells.groupby("policy", sort=False)[["latency_model_ms", "latency_measured_ms",
                                                     "latency_p99_ms", "loss"]].mean()
        for policy in order:
            m = means.loc[policy]
            rows.append((at, policy, f"{m['latency_model_ms']:.0f}",
                         f"{m['latency_measured_ms']:.0f}",
                         f"{m['latency_measured_ms'] - m['latency_model_ms']:+.0f}",
                         f"{m['latency_p99_ms']:.0f}", f"{m['loss']:.2%}"))
    return Table("What the emulation adds to the model's latency (each run's mean over its "
                 "viewers, then the mean over the repetitions):",
                 ("value", "policy", "model's latency (ms)", "measured median one-way delay (ms)",
                  "measured less the model's (ms)", "99th percentile of the delay (ms)", "loss"),
                 tuple(rows))


def playout_table(values: list[tuple[str, pd.DataFrame, list[str]]]) -> Table:
    """The viewers' playout per sweep value and policy, over its runs: the mean startup (each
    run's mean over its viewers, then over the runs), the freezes, the time watched frozen (a
    share per run, then the mean), the frames watched lost, the stalls; and the server switches
    the viewers followed, those a stall or freeze began within the window after, and those
    stalls' and freezes' time with their share of all the time stalled and frozen."""
    rows = []
    for at, cells, order in values:
        for policy in order:
            runs = cells[cells["policy"] == policy]
            broken_ms = runs["stall_ms"].sum() + runs["freeze_ms"].sum()
            switch_ms = runs["switch_stall_ms"].sum() + runs["switch_freeze_ms"].sum()
            rows.append((at, policy, str(len(runs)), whole(runs["startup_mean_ms"].mean()),
                         str(int(runs["freezes"].sum())),
                         f"{runs['freeze_share_pct'].mean():.1f}%",
                         f"{int(runs['frames_lost'].sum())} of "
                         f"{int(runs['frames_watched'].sum())}",
                         str(int(runs["stalls"].sum())), str(int(runs["switches"].sum())),
                         str(int(runs["switches_interrupted"].sum())),
                         str(int(runs["switch_stalls"].sum() + runs["switch_freezes"].sum())),
                         whole(switch_ms),
                         f"{switch_ms / broken_ms:.0%}" if broken_ms else "n/a"))
    return Table("The viewers' playout (every viewer's player, from the frames it got) and what "
                 "the server switches cost it: a stall or freeze is a switch's when it began "
                 f"within {SWITCH_WINDOW_S:g} s after the viewer heard the switch (counts summed "
                 "over the runs, startup and time watched frozen means over them):",
                 ("value", "policy", "runs", "startup (ms)", "freezes", "time watched frozen",
                  "frames watched lost", "stalls", "switches",
                  "switches followed by a stall or freeze", "their stalls and freezes",
                  "their time stalled and frozen (ms)",
                  "of all the time stalled and frozen"), tuple(rows))
