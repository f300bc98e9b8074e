"""Running an experiment's cells into ``results.csv``, resumably, on an executor
(:mod:`.executors`: this process, a local pool or a Dask cluster); this process alone writes."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from edgebed.files import atomic_output

from .executors import Executor, Serial
from .experiment import Experiment
from .kinds import Cell, Kind, unfaithful

RESULTS = "results.csv"
KEYS = ("experiment", "sweep", "parameter", "value", "policy", "repetition", "seed", "cell",
        "period", "periods")
# Read back as text: a label such as "1e-05" or a digest of digits must not become a number.
TEXT_KEYS = {"experiment": str, "sweep": str, "parameter": str, "value": str, "policy": str,
             "cell": str}


class ResultsMismatch(Exception):
    """``results.csv`` exists with other columns than this experiment's kind writes."""


@dataclass(frozen=True)
class Outcome:
    """What a run did: cells run now, cells already in ``results.csv``."""

    ran: int
    reused: int


def columns(kind: Kind) -> list[str]:
    """The header of ``kind``'s results: :data:`KEYS`, its metrics, then its text columns. A
    metric or text column named like a key (or like each other) would write that column twice
    and the table could not be read back (resumed)."""
    names = [metric.name for metric in kind.metrics] + list(kind.texts)
    taken = sorted((set(KEYS) & set(names)) | {name for name in names if names.count(name) > 1})
    if taken:
        raise ValueError(f"kind {kind.name}: metric(s) {', '.join(taken)} take the names of "
                         f"the runner's own columns ({', '.join(KEYS)}) or of each other; "
                         "rename them")
    return [*KEYS, *names]


def read_results(source: Path | io.StringIO, kind: Kind) -> pd.DataFrame:
    """``results.csv`` as a DataFrame: the label and text columns as text, as written (no "NA"
    or "None" taken for missing), the metrics as numbers, empty ones NaN."""
    return pd.read_csv(source, dtype=TEXT_KEYS | dict.fromkeys(kind.texts, str),
                       keep_default_na=False,
                       na_values={metric.name: [""] for metric in kind.metrics})


def run(experiment: Experiment, out: Path, *, fresh: bool = False,
        rerun_unfaithful: bool = False, console: Console | None = None,
        executor: Executor | None = None) -> Outcome:
    """Run every cell of ``experiment`` not yet in ``out``/results.csv (all of them with
    ``fresh``; with ``rerun_unfaithful`` also an emulated kind's cells whose run has no clean
    fidelity verdict, their rows replaced) on ``executor`` (default:
    :class:`~.executors.Serial`), with a progress bar on ``console``. Raises
    :class:`~.executors.ClusterUnavailable` before touching ``out`` if the executor cannot
    run the experiment's kind."""
    executor = executor or Serial()
    kind = experiment.kind
    executor.check(kind)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS
    if fresh:
        path.unlink(missing_ok=True)
    header = columns(kind)
    written = _completed_cells(path, kind)
    if rerun_unfaithful:
        written -= _drop_unfaithful(path, kind)
    cells = list(experiment.cells())
    todo = list({cell.id: cell for cell in cells if cell.id not in written}.values())
    reused = len({cell.id for cell in cells} & written)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                        console=console, transient=False)
    with progress, open(path, "ab") as results:
        if results.tell() == 0:
            os.write(results.fileno(), (",".join(header) + "\n").encode())
        task = progress.add_task(f"{experiment.name} {executor.describe()}",
                                 total=reused + len(todo), completed=reused)
        for cell, rows in executor.results(kind.run, todo, kind.emulated):
            if cell.id in written:
                continue
            if not rows:
                raise ValueError(f"kind {kind.name} returned no rows for {cell}")
            os.write(results.fileno(), _cell_rows(cell, rows, header).encode())
            written.add(cell.id)
            progress.advance(task)
    return Outcome(ran=len(todo), reused=reused)


def _cell_rows(cell: Cell, rows: Sequence[Mapping[str, object]], header: list[str]) -> str:
    """A cell's rows as CSV lines, numbered by period from 1; a metric missing or NaN is left
    empty. The csv module, not a DataFrame per cell: that took a tenth of a model-level
    cell's time, in the one process that writes for every worker."""
    keys = {"experiment": cell.experiment, "sweep": cell.sweep, "parameter": cell.parameter,
            "value": cell.value, "policy": cell.policy, "repetition": cell.repetition,
            "seed": cell.seed, "cell": cell.id, "periods": len(rows)}
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    for period, row in enumerate(rows, start=1):
        line = keys | {"period": period} | dict(row)
        writer.writerow([_field(line.get(name)) for name in header])
    return text.getvalue()


def _field(value: object) -> object:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _completed_cells(path: Path, kind: Kind) -> set[str]:
    """The ids of the cells ``path`` holds whole, after repairing a write cut short."""
    text = path.read_text() if path.exists() else ""
    whole = text[:text.rfind("\n") + 1]
    if not whole:
        path.unlink(missing_ok=True)  # not even the header made it
        return set()
    results = read_results(io.StringIO(whole), kind)
    header = columns(kind)
    if list(results.columns) != [name for name in header if name in results]:
        raise ResultsMismatch(f"{path} has the columns of another kind of experiment; "
                              "use --fresh to start over or --out for another directory")
    # Rows written before the kind had some metric go on with it empty ("n/a" in reports).
    grown = list(results.columns) != header
    results = results.reindex(columns=header)
    complete = results.groupby("cell")["period"].transform("size") == results["periods"]
    if whole != text or grown or not complete.all():
        with atomic_output(path, newline="") as stream:
            results[complete].to_csv(stream, index=False)
    return set(results.loc[complete, "cell"])


def _drop_unfaithful(path: Path, kind: Kind) -> set[str]:
    """Removes from ``path`` the rows of the cells whose run has no clean fidelity verdict;
    returns those cells' ids."""
    if not path.exists():
        return set()
    results = read_results(path, kind)
    flagged = unfaithful(kind, results)
    if flagged.any():
        with atomic_output(path, newline="") as stream:
            results[~flagged].to_csv(stream, index=False)
    return set(results.loc[flagged, "cell"])
