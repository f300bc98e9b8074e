"""The report of an experiment, from its ``results.csv``: ``summary.csv``, plots and
``report.md``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from edgebed.files import atomic_output, atomic_write

from experiments.sweeps.experiment import Experiment, PaperEntry, Sweep
from experiments.sweeps.kinds import Claim, Kind, Table, TimeFigure, unfaithful
from experiments.sweeps.runner import RESULTS, read_results

GROUP = ["sweep", "parameter", "value", "policy"]
# Line styles of a time figure's marks, in turn, so that marks close together stay apart.
MARK_STYLES = ("--", ":", "-.")
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Headline:
    """One claim of the paper beside ours: the claim's key and label, the sweep measured on,
    ours pooled over it (and per value), the paper's number, how they compare, why they differ
    when the model tells, and the claim along the kind's ablation sweeps."""

    key: str
    label: str
    sweep: str
    ours: str
    per_value: str
    paper: str
    agreement: str
    why: str
    ablation: str


@dataclass(frozen=True)
class Report:
    """What :func:`write` made: the report's path, the headlines, how many rows of
    ``results.csv`` belong to no cell of this experiment, and how many runs (cells) the
    fidelity monitor did not pass."""

    path: Path
    headlines: list[Headline]
    left_out: int
    unfaithful: int


def cell_means(experiment: Experiment, results: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: its metrics averaged over its periods, in the experiment's order
    (sweep, value, policy, repetition)."""
    metrics = [metric.name for metric in experiment.kind.metrics]
    cells = results.groupby([*GROUP, "repetition"], sort=False)[metrics].mean().reset_index()
    rank = {(sweep.name, label): (i, j) for i, sweep in enumerate(experiment.sweeps)
            for j, label in enumerate(sweep.labels)}
    policy_rank = {policy: i for i, policy in enumerate(experiment.kind.policies)}
    order = sorted(range(len(cells)), key=lambda row: (
        rank[cells.at[row, "sweep"], cells.at[row, "value"]],
        policy_rank[cells.at[row, "policy"]], cells.at[row, "repetition"]))
    return cells.iloc[order].reset_index(drop=True)


ROUNDING = 1e-9  # relative spread below which equal results differ only by float rounding


def summarize(cells: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per sweep, value, policy and metric: n, mean, std, ``ci95`` (the half-width of the
    Student-t 95% interval of the mean over the cells, NaN for fewer than two), low, high."""
    long = cells.melt(id_vars=[*GROUP, "repetition"], value_vars=metrics, var_name="metric",
                      value_name="x")
    summary = (long.groupby([*GROUP, "metric"], sort=False)["x"]
               .agg(n="count", mean="mean", std="std", least="min", most="max").reset_index())
    # Cells that agree but for the last bits of a float sum (the same allocation's objective
    # added up in another order) have no spread: their std is rounding, not variation.
    least, most = summary.pop("least"), summary.pop("most")
    rounding = (summary["n"] > 1) & (most - least <= ROUNDING * np.maximum(most.abs(),
                                                                           least.abs()))
    summary.loc[rounding, "std"] = 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        sem = summary["std"] / np.sqrt(summary["n"])
        summary["ci95"] = stats.t.ppf((1 + CONFIDENCE) / 2, summary["n"] - 1) * sem
    summary["low"] = summary["mean"] - summary["ci95"]
    summary["high"] = summary["mean"] + summary["ci95"]
    return summary


def compare(ours: float, theirs: float, relative: bool) -> float:
    """``ours`` against ``theirs``: the change in percent of |theirs| (so that more is a rise
    even from a negative baseline; infinite from a baseline of 0), or the difference."""
    if not relative:
        return ours - theirs
    if theirs == 0:
        return math.copysign(math.inf, ours) if ours else math.nan
    return (ours - theirs) / abs(theirs) * 100


@dataclass(frozen=True)
class Measure:
    """A claim measured on one sweep: the means of its two sides pooled over the values it
    takes, their comparison, and the comparison value by value (empty for a claim across
    values)."""

    ours: float
    theirs: float
    change: float
    by_value: pd.Series


def measure(claim: Claim, cells: pd.DataFrame, sweep: Sweep) -> Measure:
    """``claim`` on ``sweep``."""
    data = cells[cells["sweep"] == sweep.name]

    def mean(policy: str, labels: list[str]) -> float:
        if not policy:  # a claim on the metric's own value
            return 0.0
        chosen = data[(data["policy"] == policy) & data["value"].isin(labels)]
        return chosen[claim.metric].mean()

    last = sweep.labels[-1]
    if claim.across_values:
        against = sweep.labels[0] if claim.values == "last-vs-first" else sweep.labels[-2]
        sides, by_value = (mean(claim.policy, [last]), mean(claim.versus, [against])), {}
    else:
        labels = {"all": list(sweep.labels), "first": [sweep.labels[0]],
                  "last": [last]}[claim.values]
        sides = mean(claim.policy, labels), mean(claim.versus, labels)
        by_value = {label: compare(mean(claim.policy, [label]), mean(claim.versus, [label]),
                                   claim.relative) for label in labels}
    return Measure(*sides, compare(*sides, claim.relative), pd.Series(by_value, dtype=float))


def agreement(ours: float, paper: PaperEntry) -> str:
    """Whether ours goes the paper's way: within its range, the same direction (stronger or
    weaker), the opposite one, or no difference where the paper has one."""
    low, high = paper.range
    if math.isnan(ours):
        return "not measured"
    if ours == 0 and not low <= 0 <= high:
        return "no difference"
    if low <= ours <= high:
        return "within the paper's range" if low < high else "as the paper"
    if np.sign(ours) == np.sign(low) == np.sign(high):
        stronger = abs(ours) > max(abs(low), abs(high))
        return f"same direction, {'stronger' if stronger else 'weaker'}"
    return "opposite direction"


def headlines(experiment: Experiment, cells: pd.DataFrame) -> list[Headline]:
    """The claims the experiment file cites, ours beside the paper's."""
    kind = experiment.kind
    found = []
    for key, entry in experiment.paper.items():
        claim = kind.claims[key]
        sweep = experiment.sweep(entry.sweep)
        measured = measure(claim, cells, sweep)
        unit = "%" if claim.relative else kind.metric(claim.metric).unit
        label = claim.label
        if claim.across_values:
            # Only then: a sweep of one value has no value before its last.
            against = sweep.labels[0] if claim.values == "last-vs-first" else sweep.labels[-2]
            label += f" ({sweep.parameter} {sweep.labels[-1]} against {against})"
        verdict = agreement(measured.change, entry)
        why = []
        if verdict not in ("within the paper's range", "as the paper"):
            reason = claim.reason(experiment, cells[cells["sweep"] == sweep.name])
            why = [reason] if reason else []
        difference = measured.ours - measured.theirs
        if claim.relative and abs(measured.theirs) < abs(difference):
            why.append(f"The baseline's mean ({measured.theirs:.3g}) is small next to the "
                       f"difference ({difference:+.3g}), which makes the percentage large.")
        per_value = [_signed(change, unit) for change in measured.by_value]
        found.append(Headline(
            key, label, sweep.name, ours=_signed(measured.change, unit),
            per_value=", ".join(per_value) if len(per_value) > 1 else "",
            paper=_paper(entry, unit), agreement=verdict, why=" ".join(why),
            ablation=_along_ablation(experiment, claim, cells, unit)))
    return found


def _along_ablation(experiment: Experiment, claim: Claim, cells: pd.DataFrame,
                    unit: str) -> str:
    """``claim`` value by value on each sweep of the kind's ablation parameter that runs both
    its policies (a claim across values or at one value has no meaning there)."""
    if claim.values != "all":
        return ""
    return "; ".join(
        f"{sweep.name}: " + ", ".join(f"{sweep.parameter} = {value}: {_signed(change, unit)}"
                                      for value, change in
                                      measure(claim, cells, sweep).by_value.items())
        for sweep in experiment.sweeps if sweep.parameter == experiment.kind.ablation
        and claim.policies <= set(sweep.policies))


def _paper(entry: PaperEntry, unit: str) -> str:
    low, high = entry.range
    if high == math.inf:
        return f"≥ {_signed(low, unit)}"
    if low == -math.inf:
        return f"≤ {_signed(high, unit)}"
    return " to ".join(dict.fromkeys(_signed(x, unit) for x in (low, high)))


def _signed(value: float, unit: str) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:+.0f}%" if unit == "%" else f"{value:+.3g} {unit}".rstrip()


def plot(experiment: Experiment, summary: pd.DataFrame, directory: Path) -> list[Path]:
    """One figure per sweep and plotted metric, PNG and SVG; returns the PNG paths."""
    directory.mkdir(parents=True, exist_ok=True)
    kind = experiment.kind
    made = []
    for sweep in experiment.sweeps:
        positions = (np.array(sweep.values, dtype=float) if sweep.numeric
                     else np.arange(len(sweep.labels), dtype=float))
        span = np.ptp(positions) or 1.0
        for name in kind.plots:
            metric = kind.metric(name)
            figure = Figure(figsize=(6.4, 4.2))
            # Fixed margins: a layout engine would measure every label of every figure.
            figure.subplots_adjust(left=0.12, right=0.97, bottom=0.13, top=0.92)
            axes = figure.subplots()
            line = kind.lines.get(name)
            for i, policy in enumerate(sweep.policies):
                def rows(metric: str) -> pd.DataFrame:
                    return (summary[(summary["sweep"] == sweep.name)
                                    & (summary["metric"] == metric)
                                    & (summary["policy"] == policy)]
                            .set_index("value").reindex(list(sweep.labels)))
                # Side by side, so the policies' error bars do not hide one another.
                shift = (i - (len(sweep.policies) - 1) / 2) * 0.012 * span
                measured = rows(name)
                drawn = axes.errorbar(positions + shift, measured["mean"],
                                      yerr=measured["ci95"], marker="o", markersize=4,
                                      capsize=3, linewidth=0 if line else 1.2,
                                      elinewidth=1.2, label=policy)
                if line:
                    axes.plot(positions, rows(line)["mean"], color=drawn[0].get_color(),
                              linewidth=1.2, label=f"{policy}, {line}")
            if not sweep.numeric:
                axes.set_xticks(positions, sweep.labels)
            axes.set_xlabel(_parameter_label(kind, sweep.parameter))
            axes.set_ylabel(metric.axis)
            axes.set_title(f"{experiment.name}: {sweep.name}", fontsize=10)
            axes.grid(alpha=0.3)
            axes.legend(fontsize=8)
            stem = directory / f"{sweep.name}-{name}"
            save_figure(figure, stem.with_suffix(".png"), dpi=120)
            # No date, element ids from a fixed salt: the same results give the same SVG.
            with matplotlib.rc_context({"svg.hashsalt": experiment.name}):
                save_figure(figure, stem.with_suffix(".svg"), metadata={"Date": None})
            made.append(stem.with_suffix(".png"))
    return made


def save_figure(figure: Figure, path: Path, **options) -> None:
    """``figure`` drawn into ``path`` (format from its suffix) in one step."""
    with atomic_output(path, "wb") as stream:
        figure.savefig(stream, format=path.suffix.lstrip("."), **options)


def plot_time_figure(figure: TimeFigure, directory: Path, salt: str) -> Path:
    """``figure`` as PNG and SVG in ``directory``; returns the PNG's path."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = math.ceil(len(figure.panels) / figure.columns)
    drawn = Figure(figsize=(5.2 * figure.columns, 3.4 * rows + 0.5))
    drawn.subplots_adjust(left=0.07, right=0.98, bottom=0.08, top=0.9, hspace=0.45, wspace=0.2)
    drawn.suptitle(figure.title, fontsize=11)
    axes = drawn.subplots(rows, figure.columns, squeeze=False).ravel()
    for panel, ax in zip(figure.panels, axes):
        for label, (x, y) in panel.lines.items():
            ax.plot(x, y, label=label, linewidth=0.9)
        for (label, x), style in zip(panel.marks.items(), MARK_STYLES * len(panel.marks)):
            ax.axvline(x, color="0.3", linestyle=style, linewidth=1.0, label=label)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel(panel.x_label)
        ax.set_ylabel(panel.y_label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncols=max(1, math.ceil(len(panel.lines) / 5)))
    for ax in axes[len(figure.panels):]:
        ax.set_visible(False)
    stem = directory / figure.name
    save_figure(drawn, stem.with_suffix(".png"), dpi=110)
    with matplotlib.rc_context({"svg.hashsalt": salt}):
        save_figure(drawn, stem.with_suffix(".svg"), metadata={"Date": None})
    return stem.with_suffix(".png")


def _parameter_label(kind: Kind, parameter: str) -> str:
    description = kind.parameters.model_fields[parameter].description
    return f"{parameter}: {description}" if description else parameter


def write(experiment: Experiment, out: Path, *, plots: bool = True) -> Report:
    """``summary.csv``, ``plots/`` (unless not ``plots``) and ``report.md`` in ``out`` from
    ``out``/results.csv. A metric the kind has but results.csv lacks (its rows were measured
    before the kind had it) is missing in every row: "n/a" in the tables. An emulated kind's
    runs without a clean fidelity verdict are left out of every figure and counted apart."""
    kind = experiment.kind
    results = read_results(out / RESULTS, kind)
    for metric in kind.metrics:
        if metric.name not in results:
            results[metric.name] = math.nan
    cell_ids = {cell.id for cell in experiment.cells()}
    current = results["cell"].isin(cell_ids)
    results = results[current]
    flagged = unfaithful_runs(kind, results)
    results = results[~results["cell"].isin(flagged["cell"])]
    cells = cell_means(experiment, results)
    summary = summarize(cells, [metric.name for metric in kind.metrics])
    with atomic_output(out / "summary.csv", newline="") as stream:
        summary.to_csv(stream, index=False)
    figures = list(kind.figures(experiment))
    if plots:
        plot(experiment, summary, out / "plots")
        for figure in figures:
            plot_time_figure(figure, out / "plots", experiment.name)
    found = headlines(experiment, cells)
    text = _markdown(experiment, results, summary, found, len(cell_ids), int(current.sum()),
                     int((~current).sum()), flagged, figures)
    atomic_write(out / "report.md", text)
    return Report(out / "report.md", found, int((~current).sum()), len(flagged))


def unfaithful_runs(kind: Kind, results: pd.DataFrame) -> pd.DataFrame:
    """The runs (one row per cell: sweep, parameter, value, policy, repetition, cell) of an
    emulated kind whose fidelity verdict is not clean, a missing verdict included; none for a
    kind that builds no network."""
    return results.loc[unfaithful(kind, results),
                       [*GROUP, "repetition", "cell"]].drop_duplicates("cell")


def _unfaithful_section(results: pd.DataFrame, flagged: pd.DataFrame) -> list[str]:
    """How many runs of each sweep value and policy the fidelity monitor did not pass, beside
    the runs kept."""
    keys = ["sweep", "value", "policy"]
    kept = results.drop_duplicates("cell").groupby(keys, sort=False).size()
    left = flagged.groupby(keys, sort=False).size()
    rows = [[*key, str(count), str(count + int(kept.get(key, 0)))]
            for key, count in left.items()]
    use = ("every figure of this report is from the other runs" if len(kept)
           else "this report has no run to show")
    return ["## Runs left out", "",
            f"{len(flagged)} of {len(flagged) + int(kept.sum())} "
            "runs have no clean fidelity verdict (the monitor flagged them, or they recorded "
            f"none): {use}.", "",
            markdown_table(["sweep", "value", "policy", "runs left out", "of runs"], rows), ""]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    # A markdown table by hand: pandas' to_markdown needs the tabulate package for this alone.
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |"
                     for line in lines)


def _markdown(experiment: Experiment, results: pd.DataFrame, summary: pd.DataFrame,
              found: list[Headline], cells: int, rows: int, left_out: int,
              flagged: pd.DataFrame, figures: list[TimeFigure] = ()) -> str:
    kind = experiment.kind
    base = experiment.base.model_dump(mode="json")
    parts = [f"# {experiment.name}", "", kind.about, ""]
    if experiment.quick:
        parts += ["**A quick run** (`--quick`): fewer repetitions and only each sweep's first "
                  "and last value; for checking the pipeline, not for conclusions.", ""]
    parts += [
        "## What was run", "",
        f"Experiment file `{experiment.file}`, kind `{kind.name}`, seed {experiment.seed}, "
        f"{experiment.repetitions} repetitions, {cells} cells (sweep × value × policy × "
        f"repetition), {rows} rows (a row per cell and period) in `results.csv`. "
        "A repetition's seed is derived from (seed, sweep, value, repetition) by numpy's "
        "SeedSequence, so all policies of a repetition see the same instance; each cell's "
        "seed is in `results.csv`.", "",
        "Base parameters (the kind's defaults with the file's `base`):", "",
        markdown_table(["parameter", "value", "meaning"],
               [[name, _value(value), kind.parameters.model_fields[name].description or ""]
                for name, value in base.items()]), "",
        markdown_table(["sweep", "varies", "values", "policies", "overrides"],
               [[sweep.name, sweep.parameter, ", ".join(sweep.labels), ", ".join(sweep.policies),
                 ", ".join(f"{k} = {_value(v)}" for k, v in sweep.overrides.items()) or "–"]
                for sweep in experiment.sweeps]), ""]
    if kind.constants:
        parts += ["The kind's constants (its code's, the same in every cell), which its "
                  "measurement and the figures below use:", "",
                  markdown_table(["constant", "value", "meaning"],
                                 [[c.name, c.value, c.meaning] for c in kind.constants]), ""]
    if left_out:
        parts += [f"{left_out} rows of `results.csv` belong to cells not in this experiment "
                  "(other parameters, or a fuller run) and are left out.", ""]
    if len(flagged):
        parts += _unfaithful_section(results, flagged)
    if found:
        parts += _headline_section(experiment, found)
    remarks = kind.remarks(results)
    if remarks:
        parts += ["## Remarks", "", *_remarks(remarks)]
    if figures:
        parts += ["## Over time", ""]
        for figure in figures:
            parts += [f"![{figure.title}](plots/{figure.name}.png)", "", figure.caption, ""]
    for sweep in experiment.sweeps:
        parts += _sweep_section(experiment, sweep, summary)
    return "\n".join(parts)


def _remarks(remarks: list[str | Table]) -> list[str]:
    """The remarks' lines: a sentence as an item of a list, a table under its caption."""
    lines = []
    for remark in remarks:
        if isinstance(remark, Table):
            if lines and lines[-1]:
                lines.append("")  # the list before it ends
            lines += [remark.caption, "", markdown_table(list(remark.header),
                                                         [list(row) for row in remark.rows]),
                      ""]
        else:
            lines.append(f"- {remark}")
    return lines + ([""] if lines[-1] else [])


def _headline_section(experiment: Experiment, found: list[Headline]) -> list[str]:
    parts = ["## The paper's results beside ours", "",
             "Ours is pooled over the sweep's values (the range over the values alone "
             "beside it); a relative comparison is the change in percent of the second "
             "term's magnitude.", "",
             markdown_table(["result", "sweep", "ours", "ours per value", "paper", "agreement"],
                    [[h.label, h.sweep, h.ours, h.per_value or "–", h.paper, h.agreement]
                     for h in found]), ""]
    parts += [f"- **{h.label}**: ours {h.ours}, the paper's {h.paper}. {h.why}"
              for h in found if h.why]
    kind = experiment.kind
    along = [h for h in found if h.ablation]
    if along:
        parts += ["", f"The same comparisons along the sweeps of {kind.ablation} "
                      f"({_parameter_label(kind, kind.ablation)}), an ablation showing where "
                      "the paper's ordering appears:", ""]
        parts += [f"- {h.label}: {h.ablation}" for h in along]
    return parts + [""]


def _sweep_section(experiment: Experiment, sweep: Sweep, summary: pd.DataFrame) -> list[str]:
    kind = experiment.kind
    parts = [f"## Sweep `{sweep.name}`: {_parameter_label(kind, sweep.parameter)}", ""]
    data = summary[summary["sweep"] == sweep.name]
    for name in kind.plots:
        metric = kind.metric(name)
        table = data[data["metric"] == name].set_index(["value", "policy"])
        rows = [[label] + [_estimate(table, label, policy) for policy in sweep.policies]
                for label in sweep.labels]
        parts += [f"### {metric.axis}", "",
                  f"![{sweep.name} {name}](plots/{sweep.name}-{name}.png)", "",
                  markdown_table([sweep.parameter, *sweep.policies], rows), ""]
    return parts


def _estimate(table: pd.DataFrame, label: str, policy: str) -> str:
    if (label, policy) not in table.index:
        return "–"
    mean, half = table.loc[(label, policy), ["mean", "ci95"]]
    if math.isnan(mean):
        return "n/a"
    if math.isnan(half) or half == 0:
        return f"{mean:.4g}"
    # The mean to the interval's precision: its two significant digits.
    decimals = max(0, 1 - math.floor(math.log10(half)))
    return f"{mean:.{decimals}f} ± {half:.{decimals}f}"


def whole(x: float) -> str:
    """``x`` to a whole number (of milliseconds, say; no sign on a 0); n/a when it is
    missing."""
    if pd.isna(x):
        return "n/a"
    text = f"{x:.0f}"
    return "0" if text == "-0" else text


def at_value(rows: pd.DataFrame) -> str:
    """``parameter = value``: the swept value ``rows`` (of ``results.csv``) share."""
    return f"{rows['parameter'].iloc[0]} = {rows['value'].iloc[0]}"


def swept_values(results: pd.DataFrame, by_number: bool = False
                 ) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """The rows of ``results`` (of ``results.csv``) of each sweep and value: the sweep's name,
    the value as :func:`at_value` words it, and its rows; in the rows' order, or with
    ``by_number`` by sweep name and then the value read as a number (a trailing percent sign
    left out; a value that is no number after the rest), not in the order the cells happened to
    finish in."""
    if by_number:
        order = pd.to_numeric(results["value"].astype(str).str.rstrip("%"), errors="coerce")
        results = results.assign(order=order).sort_values(["sweep", "order"], kind="stable")
    for (sweep, _), rows in results.groupby(["sweep", "value"], sort=False):
        yield sweep, at_value(rows), rows


def policy_means(rows: pd.DataFrame, policies: Iterable[str]
                 ) -> tuple[pd.DataFrame, pd.Series] | None:
    """The mean of each numeric column of ``rows`` per policy and each policy's number of
    rows (its runs); None unless every one of ``policies`` has rows."""
    means = rows.groupby("policy").mean(numeric_only=True)
    if not set(policies) <= set(means.index):
        return None
    return means, rows.groupby("policy").size()


def versus(means: pd.DataFrame, first: str, second: str, column: str, form: str) -> str:
    """``first``'s ``column`` against ``second``'s (rows of ``means``), each written by
    ``form``: "0.96 against 0.46"."""
    return (f"{format(means.loc[first, column], form)} against "
            f"{format(means.loc[second, column], form)}")


def against(means: pd.DataFrame, first: str, second: str,
            compared: Iterable[tuple[str, str, str]]) -> list[str]:
    """:func:`versus` for each (column, what it is, format) of ``compared``: "0.96 against
    0.46 Mbit/s pulled"."""
    return [f"{versus(means, first, second, column, form)} {what}"
            for column, what, form in compared]


def _value(value: object) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)
