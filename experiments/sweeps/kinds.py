"""What a kind of experiment is: the contract between the sweep runner and the code that runs
one cell."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from experiments import scenarios
from experiments.dilation_choice import CALIBRATION_DIR


@dataclass(frozen=True)
class Cell:
    """One run of one policy: a sweep's ``parameter`` at one value (``value``, its label), one
    repetition with its ``seed``, and the full validated ``parameters`` of the kind."""

    experiment: str
    sweep: str
    parameter: str
    value: str
    policy: str
    repetition: int
    seed: int
    parameters: BaseModel

    @property
    def id(self) -> str:
        """A digest of everything that decides the cell's outcome (kind parameters, policy,
        seed): a results row whose cell id is no longer among the experiment's cells was made
        under other parameters. An emulated cell's time dilation is not among them: it
        decides how slowly the run is carried out, and a run reads the same in virtual time
        at every factor (docs/concepts/virtual-time.md)."""
        parameters = self.parameters.model_dump(mode="json", exclude={"time_dilation"})
        text = json.dumps([self.policy, self.seed, parameters], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


DilationFactor = Annotated[float, Field(ge=1, le=1000)]


class EmulatedParameters(BaseModel):
    """What every emulated cell's parameters hold: the scenario it runs, the time dilation it
    runs at, and where its run directories go."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field(description="the scenario file")
    time_dilation: Union[DilationFactor, Literal["auto"]] = Field(
        1.0, description="run N times slower than real time (edgebed run --dilate N); auto "
                         "calibrates the least factor whose short run stays clean")
    runs_dir: str = Field("runs", description="where the runs' directories go")


@dataclass(frozen=True)
class Metric:
    """A column of the rows a kind returns: its name, a label for tables and plot axes, and its
    unit (empty for a pure number)."""

    name: str
    label: str
    unit: str = ""

    @property
    def axis(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


# An emulated run's fidelity verdict (experiments.fidelity), 1 when clean: a report keeps
# only the clean runs of an emulated kind (experiments.report).
FIDELITY = Metric("fidelity_ok", "runs the fidelity monitor passed")
DILATION = Metric("time_dilation", "the time dilation the run used")
# Every emulated kind's rows carry them (run_record).
EMULATED_METRICS = (FIDELITY, DILATION)


def unfaithful(kind: "Kind", results: pd.DataFrame) -> pd.Series:
    """Which rows of ``results`` belong to a run of an emulated ``kind`` without a clean
    fidelity verdict (a missing one included); none for a kind that builds no network."""
    if not kind.emulated:
        return pd.Series(False, index=results.index)
    return results[FIDELITY.name] != 1


@dataclass(frozen=True)
class Claim:
    """A result the paper reports, as a comparison ours can be measured by on one sweep:
    ``metric`` of ``policy`` against ``versus`` (another policy, or the same one for a
    comparison across values; empty for the metric's own value), as a relative change in
    percent or a difference in the metric's unit. ``values`` says which of the sweep's values
    count: ``all`` pooled (and each one alone, for the range), ``first`` or ``last`` only,
    ``last-vs-first`` (``policy`` at the last value against ``versus`` at the first) or
    ``last-vs-previous`` (against the one before the last). ``why`` is the reason, read off
    the model, to give when ours goes the other way: a text that holds for every run, or a
    function of the experiment and the claim's sweep's cell means that words it from them
    (and returns "" when its condition does not hold in those rows); ``quote`` the paper's
    sentence the figure comes from."""

    label: str
    metric: str
    policy: str
    versus: str
    relative: bool
    values: Literal["all", "first", "last", "last-vs-first", "last-vs-previous"] = "all"
    why: str | Callable[[Any, pd.DataFrame], str] = ""
    quote: str = ""

    def reason(self, experiment: Any, cells: pd.DataFrame) -> str:
        """``why`` for ``experiment`` whose sweep's cell means are ``cells``."""
        return self.why(experiment, cells) if callable(self.why) else self.why

    @property
    def policies(self) -> set[str]:
        """The policies the claim needs a sweep to run."""
        return {self.policy, self.versus} - {""}

    @property
    def across_values(self) -> bool:
        """Whether the claim compares one value of the sweep with another."""
        return self.values.startswith("last-vs-")


CellRunner = Callable[[Cell], Sequence[Mapping[str, object]]]


@dataclass(frozen=True)
class Panel:
    """One panel of a figure over time: ``lines`` maps a label to its (x, y) values;
    ``marks`` maps a label to the x of a moment drawn across the panel (an event: an impairment
    changing, a decision taken)."""

    title: str
    x_label: str
    y_label: str
    lines: Mapping[str, tuple[Sequence[float], Sequence[float]]]
    marks: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TimeFigure:
    """A figure of panels over time that a kind draws from runs of its own (results.csv holds
    only per-period rows): ``name`` names its file under ``plots/``, ``caption`` says in the
    report what it shows; ``columns`` panels per row."""

    name: str
    title: str
    caption: str
    panels: tuple[Panel, ...]
    columns: int = 2


@dataclass(frozen=True)
class Table:
    """A table among a kind's remarks, for figures the report computes from the rows beyond
    the summary's (sums over runs, shares, intervals, one metric less another): ``caption``
    says what it shows (markdown, above it; figures go in the cells), ``header`` and ``rows``
    hold the cells as they print."""

    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Constant:
    """A fixed figure of a kind's measurement or analysis, the same in every cell (not a
    parameter: changing it changes the code, not the experiment): its name in the code, its
    value as the report's text writes it, and what it is."""

    name: str
    value: str
    meaning: str


@dataclass(frozen=True)
class Kind:
    """A kind of experiment cell.

    ``run`` runs one cell and returns its rows, one per period, each holding ``metrics``
    (missing ones are left empty). ``plots`` names the metrics the report plots and tabulates.
    ``lines`` maps a plotted metric to a model's prediction of it (another metric): its
    figure draws the prediction as lines and the plotted metric as points with their
    intervals, as papers draw theory against simulation. ``claims`` are the paper's results
    an experiment file's ``paper:`` section may cite by key; ``ablation`` names a parameter whose sweeps every claim is also measured along, value
    by value. ``about`` is markdown opening the report (what a cell is, caveats), ``remarks``
    further markdown lines from the results, and :class:`Table` s of the figures they
    compute, ``constants`` the fixed figures its measurement and analysis use (the report
    tabulates them beside the parameters), ``figures`` the figures over time the report
    draws for an experiment (given the :class:`~experiments.sweeps.experiment.Experiment`).
    ``emulated`` says a cell builds a network on the machine it runs on (an ``edgebed run``):
    such cells run one per machine at a time (:mod:`~experiments.sweeps.executors`).
    ``texts`` names columns of text a cell's rows may carry beside the metrics: a record of
    the run (where each viewer was placed, say) that ``remarks`` can compare across cells and
    that is written to ``results.csv`` but neither averaged nor plotted."""

    name: str
    parameters: type[BaseModel]
    policies: tuple[str, ...]
    run: CellRunner
    metrics: tuple[Metric, ...]
    plots: tuple[str, ...]
    lines: Mapping[str, str] = field(default_factory=dict)
    claims: Mapping[str, Claim] = field(default_factory=dict)
    ablation: str | None = None
    about: str = ""
    remarks: Callable[[pd.DataFrame], list[str | Table]] = lambda results: []
    constants: tuple[Constant, ...] = ()
    figures: Callable[[Any], Sequence[TimeFigure]] = lambda experiment: ()
    emulated: bool = False
    texts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.emulated:
            return
        missing = [metric.name for metric in EMULATED_METRICS if metric not in self.metrics]
        if missing:
            raise ValueError(f"kind {self.name}: an emulated kind's rows carry the run's "
                             f"record ({', '.join(missing)} missing), or no report could keep "
                             "its clean runs")
        if not issubclass(self.parameters, EmulatedParameters):
            raise ValueError(f"kind {self.name}: an emulated kind's parameters are "
                             "EmulatedParameters (scenario, time dilation, runs directory)")

    def metric(self, name: str) -> Metric:
        return next(metric for metric in self.metrics if metric.name == name)


@dataclass(frozen=True)
class RunSummary:
    """What a scheme adds to the summary of one run whose controller ran one of its policies:
    ``name`` is the scheme's slug (its policies live in ``controller/policies/<slug>/``);
    ``summarize(run_dir, summary)`` is called once the run's tables are merged, with the
    summary so far, and returns what goes into ``summary.json`` as ``scheme``: a JSON-able
    dict whose ``title``, ``tables`` (each ``{"title", "columns", "rows"}``), ``notes`` (lines)
    and ``plots`` (file names in the run directory) ``edgebed run`` prints, beside whatever
    data the scheme keeps. A scheme declares its own in ``RUN_SUMMARIES`` of its module under
    ``experiments/kinds/``."""

    name: str
    summarize: Callable[[Path, dict], dict]



ROOT = Path(__file__).resolve().parents[2]


def edgebed_run(scenario: str, runs: Path, variables: Mapping[str, str],
                duration: float | None = None,
                time_dilation: float | str = 1) -> tuple[Path, dict]:
    """One ``edgebed run`` of ``scenario`` with its ``${VAR}`` values set from ``variables``
    (and its duration, when given) at ``time_dilation`` (a factor or ``"auto"``): the run's
    directory, made under ``runs``, and its summary. A run that fails raises, with its
    output."""
    # Run again (a cell after a failure, or by --fresh into another report), a scenario finds
    # its earlier runs beside it: its run is the directory this call made.
    earlier = set(runs.iterdir()) if runs.is_dir() else set()
    length = ["--duration", f"{duration:g}s"] if duration is not None else []
    dilate = [] if time_dilation == 1 else ["--dilate", f"{time_dilation}"]
    result = subprocess.run([sys.executable, "-m", "experiments.cli", "run", scenario, *length,
                             *dilate, "--runs-dir", str(runs)],
                            cwd=ROOT, env=dict(os.environ, **variables), capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise RuntimeError(f"the run of {scenario} failed:\n{result.stdout}{result.stderr}")
    [run_dir] = [path for path in runs.iterdir() if path.is_dir() and path not in earlier
                 and path.name != CALIBRATION_DIR]
    return run_dir, json.loads((run_dir / "summary.json").read_text())


def emulated_run(cell: Cell, scenario: str, duration: float, runs_dir: str,
                 variables: Mapping[str, str],
                 changes: Mapping[str, object] | None = None) -> tuple[Path, dict]:
    """:func:`edgebed_run` for ``cell`` (an emulated kind's cell): its policy and seed set as
    ``EDGEBED_POLICY`` and ``EDGEBED_SEED`` beside ``variables``, at the cell's time
    dilation, its run under ``runs_dir`` in a directory of the cell's own. With ``changes``
    (top-level keys of a scenario: a schedule the kind builds, say) the cell runs
    :func:`derived_scenario` instead of ``scenario``."""
    runs = Path(runs_dir) / f"{cell.experiment}-{cell.id}"
    variables = {"EDGEBED_POLICY": cell.policy, "EDGEBED_SEED": str(cell.seed % 2**32),
                 **variables}
    if changes:
        scenario = str(derived_scenario(scenario, runs, variables, changes))
    return edgebed_run(scenario, runs, variables, duration, cell.parameters.time_dilation)


def derived_scenario(scenario: str, runs: Path, variables: Mapping[str, str],
                     changes: Mapping[str, object]) -> Path:
    """The file a cell runs when it changes its ``scenario`` (relative to the checkout):
    ``scenario`` with the top-level keys of ``changes`` in place of its own and its variables
    expanded from the environment and ``variables``, written into the cell's directory
    ``runs`` beside its runs and checked like any scenario
    (:func:`experiments.scenarios.derive`: bad changes raise, naming the file's line and
    field)."""
    derived = (runs / f"{Path(scenario).stem}-derived.yaml").resolve()
    scenarios.derive(ROOT / scenario, derived, changes, dict(os.environ, **variables))
    return derived


def run_record(summary: dict) -> dict[str, object]:
    """What every emulated row carries from its run's summary (:data:`EMULATED_METRICS`):
    the fidelity verdict and the time dilation it ran at."""
    return {FIDELITY.name: int(summary["fidelity"]["ok"]),
            DILATION.name: summary.get("time_dilation", 1)}


def measured_run(variables: Callable[[Cell], Mapping[str, str]],
                 measure: Callable[[Path], dict[str, object]],
                 changes: Callable[[Cell], Mapping[str, object]] | None = None
                 ) -> Callable[[Cell], list[dict[str, object]]]:
    """A kind's ``run`` when each cell is one :func:`emulated_run` of its parameters'
    ``scenario`` for their ``duration`` under their ``runs_dir``, with the scenario variables
    ``variables(cell)`` and, when given, the scenario's top-level keys ``changes(cell)``
    replaced, and its one row is ``measure(run_dir)`` with the run's record."""
    def run(cell: Cell) -> list[dict[str, object]]:
        parameters = cell.parameters
        run_dir, summary = emulated_run(cell, parameters.scenario, parameters.duration,
                                        parameters.runs_dir, variables(cell),
                                        changes(cell) if changes else None)
        return [measure(run_dir) | run_record(summary)]
    return run
