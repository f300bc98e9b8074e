"""Why live_edge's model-level results come out as they do, worded from the rows of the sweep
they are measured on: each reason is a function of the experiment and the sweep's cell means
(one row per cell) that states what those rows show, and says nothing ("") when the rows do
not bear it out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

Reason = Callable[[Any, pd.DataFrame], str]
NAMES = {"lua": "LUA", "df": "DF", "mhcp": "MHCP", "random": "Random", "optimal": "Optimal",
         "optimal_served_first": "Optimal (served first)"}


def _at(experiment: Any, cells: pd.DataFrame, at: str) -> pd.DataFrame:
    """The cells of the sweep's values a claim counts: ``all``, or only the ``first`` or
    ``last``."""
    if at == "all" or cells.empty:
        return cells
    labels = experiment.sweep(cells["sweep"].iloc[0]).labels
    return cells[cells["value"] == labels[0 if at == "first" else -1]]


def _means(cells: pd.DataFrame, metric: str, policies: tuple[str, ...]) -> pd.Series:
    """``metric`` averaged over the sweep's cells, for those of ``policies`` it ran."""
    means = cells.groupby("policy")[metric].mean()
    return means.reindex([p for p in policies if p in means.index]).dropna()


def _listed(values: pd.Series, form: Callable[[float], str]) -> str:
    return ", ".join(f"{NAMES.get(policy, policy)} {form(value)}"
                     for policy, value in values.items())


def combined(*parts: str | Reason) -> Reason:
    """A reason made of ``parts`` (texts that hold for every run, or reasons), in order."""
    def reason(experiment: Any, cells: pd.DataFrame) -> str:
        said = (part(experiment, cells) if callable(part) else part for part in parts)
        return " ".join(filter(None, said))
    return reason


def served(*policies: str, at: str = "all") -> Reason:
    """The share of viewers each policy served over the sweep, beside a QoE figure."""
    def reason(experiment: Any, cells: pd.DataFrame) -> str:
        cells = _at(experiment, cells, at)
        shares = _means(cells, "served_share", policies)
        if shares.empty:
            return ""
        level = ("every policy served every viewer" if (shares == 1).all() else
                 "mean QoE per viewer counts an unserved one as 0")
        return f"Viewers served: {_listed(shares, lambda s: f'{s:.0%}')}; {level}."
    return reason


def _transcoding_ms(experiment: Any, cells: pd.DataFrame) -> pd.Series:
    """Each cell's mean transcoding delay G (R - mean bitrate), with the G and source of the
    cell's value of its sweep."""
    sweep = experiment.sweep(cells["sweep"].iloc[0])
    at = {label: parameters for label, parameters in zip(sweep.labels, sweep.parameters)}
    return cells.apply(lambda row: at[row["value"]].G * (
        at[row["value"]].source * at[row["value"]].ladder_scale - row["mean_bitrate_mbps"]),
        axis=1)


def latency_parts(policy: str, versus: str = "", at: str = "all") -> Reason:
    """Each side's mean latency split into its network part and its transcoding part
    G (R - mean bitrate) (exact: latency is linear in the bitrate), and which part makes
    most of the gap (``versus`` empty: ``policy``'s split alone)."""
    sides = tuple(filter(None, (policy, versus)))

    def reason(experiment: Any, cells: pd.DataFrame) -> str:
        cells = _at(experiment, cells, at)
        latency = _means(cells, "mean_latency_ms", sides)
        if len(latency) < len(sides):
            return ""
        transcoding = _means(cells.assign(transcoding=_transcoding_ms(experiment, cells)),
                             "transcoding", sides)
        network = latency - transcoding
        parts = "; ".join(
            f"{NAMES[p]} {latency[p]:.0f} ms = {network[p]:.0f} network + "
            f"{transcoding[p]:.0f} transcoding" for p in sides)
        if not versus:
            return f"Mean latency: {parts}."
        gaps = {"network": network[policy] - network[versus],
                "transcoding": transcoding[policy] - transcoding[versus]}
        larger, smaller = sorted(gaps, key=lambda part: abs(gaps[part]), reverse=True)
        return (f"Mean latency: {parts}. {NAMES[policy]}'s gap to {NAMES[versus]} is mostly "
                f"{larger} ({gaps[larger]:+.0f} ms against {gaps[smaller]:+.0f} ms).")
    return reason


def _per_served_viewer(policy: str, versus: str, metric: str, label: str,
                       form: Callable[[float], str], count: str, counted: str,
                       per: str = "") -> Reason:
    """``metric`` per served viewer on each side, beside the mean ``count`` it comes from and
    the viewers served (a policy serving fewer can count fewer)."""
    def reason(experiment: Any, cells: pd.DataFrame) -> str:
        mean, raw, served = (_means(cells, column, (policy, versus))
                             for column in (metric, count, "served"))
        if len(mean) < 2:
            return ""
        return (f"{label}: {_listed(mean, form)} ({per}{_listed(raw, lambda c: f'{c:.1f}')} "
                f"{counted} among {_listed(served, lambda c: f'{c:.1f}')} served).")
    return reason


def switches_per_served(policy: str, versus: str) -> Reason:
    """Switches per served viewer on each side, and the raw counts with the served counts
    they come from (a policy serving fewer can switch fewer)."""
    return _per_served_viewer(policy, versus, "switch_share", "Switches per served viewer",
                              lambda share: f"{share:.2f}", "switches", "switches",
                              per="per period: ")


def last_step(policy: str, metric: str, label: str) -> Reason:
    """How ``metric`` and the served share of ``policy`` move between the sweep's last two
    values, for a claim that it levels off there."""
    def reason(experiment: Any, cells: pd.DataFrame) -> str:
        rows = cells[cells["policy"] == policy]
        by_value = rows.groupby("value", sort=False)[[metric, "served_share"]].mean()
        if len(by_value) < 2:
            return ""
        (before, previous), (last, final) = list(by_value.iterrows())[-2:]
        return (f"From {before} to {last}, {NAMES[policy]}'s {label} moves from "
                f"{previous[metric]:.3g} to {final[metric]:.3g} and the share it serves from "
                f"{previous['served_share']:.0%} to {final['served_share']:.0%}.")
    return reason


# The terms of QoE a report compares: label, format, and +1 where more is better for QoE (Q,
# the bitrate), -1 where less is (switches, drops).
TERMS = {"mean_interaction": ("Q", "{:.2f}", 1),
         "mean_bitrate_mbps": ("bitrate", "{:.2f} Mbps", 1),
         "switch_share": ("switches per viewer", "{:.2f}", -1),
         "mean_drop_mbps": ("bitrate drop", "{:.2f} Mbps", -1)}


def qoe_terms(policy: str, versus: str, at: str = "all") -> Reason:
    """The served viewers' mean terms of QoE on each side: interaction experience Q, bitrate,
    switches per served viewer and mean bitrate drop, and which of them ``policy`` is ahead
    on."""
    def reason(experiment: Any, cells: pd.DataFrame) -> str:
        cells = _at(experiment, cells, at)
        means = {column: _means(cells, column, (policy, versus)) for column in TERMS}
        if any(len(values) < 2 for values in means.values()):
            return ""
        listed = "; ".join(
            f"{label} " + ", ".join(f"{NAMES[p]} {form.format(means[column][p])}"
                                    for p in (policy, versus))
            for column, (label, form, _) in TERMS.items())
        lead = {TERMS[c][0]: TERMS[c][2] * (means[c][policy] - means[c][versus]) for c in TERMS}
        ahead = [label for label, by in lead.items() if by > 0]
        behind = [label for label, by in lead.items() if by < 0]
        return (f"Per served viewer, {listed}: {NAMES[policy]} is ahead on "
                f"{', '.join(ahead) or 'none'} and behind on {', '.join(behind) or 'none'}.")
    return reason


def interaction_at_latency(policy: str, versus: str, at: str = "all") -> Reason:
    """Each side's mean interaction experience Q beside its mean latency and beta: Q is
    (1 + I)(1 - L/beta)-like, so it is near 0, and a percentage of it large, where latency
    is near beta."""
    def reason(experiment: Any, cells: pd.DataFrame) -> str:
        cells = _at(experiment, cells, at)
        interaction = _means(cells, "mean_interaction", (policy, versus))
        latency = _means(cells, "mean_latency_ms", (policy, versus))
        if len(interaction) < 2 or len(latency) < 2:
            return ""
        beta = experiment.base.beta
        return (f"Mean Q: {_listed(interaction, lambda q: f'{q:.3g}')}, at mean latencies "
                f"{_listed(latency, lambda ms: f'{ms:.0f} ms')} against beta = {beta:g} ms: "
                f"the latencies are {min(latency) / beta:.0%} to {max(latency) / beta:.0%} "
                "of beta, where Q turns negative.")
    return reason


def drops(policy: str, versus: str) -> Reason:
    """The mean bitrate drop per served viewer and the viewers dropping on each side."""
    return _per_served_viewer(policy, versus, "mean_drop_mbps",
                              "Mean bitrate drop per served viewer",
                              lambda drop: f"{drop:.2f} Mbps", "drops", "viewers dropping")


def at_ends(policy: str) -> Reason:
    """``policy``'s mean latency, its split, its mean Q and its switches per served viewer at
    the sweep's first and last values, for a claim about how they move."""
    def reason(experiment: Any, cells: pd.DataFrame) -> str:
        rows = cells[cells["policy"] == policy].assign(
            transcoding=lambda rows: _transcoding_ms(experiment, rows))
        by_value = rows.groupby("value", sort=False)[
            ["mean_latency_ms", "transcoding", "mean_interaction", "switch_share"]].mean()
        if len(by_value) < 2:
            return ""
        sweep = experiment.sweep(cells["sweep"].iloc[0])
        ends = [by_value.loc[label] for label in (sweep.labels[0], sweep.labels[-1])
                if label in by_value.index]
        if len(ends) < 2:
            return ""
        said = [f"{sweep.parameter} = {label}: latency {end['mean_latency_ms']:.0f} ms "
                f"({end['transcoding']:.0f} of it transcoding), Q {end['mean_interaction']:.3g}, "
                f"{end['switch_share']:.2f} switches per served viewer"
                for label, end in zip((sweep.labels[0], sweep.labels[-1]), ends)]
        return f"{NAMES[policy]} at {'; at '.join(said)}."
    return reason
