"""Every shipped experiment report is what the code makes of its own results.csv, and every
number in its prose comes from its data, its configuration or the paper's cited figures.

Rounding rule: a number written with d decimals (``0.34``, ``-84``, ``1.5``) stands for a data
value v when |v - x| <= 0.5 * 10^-d, i.e. v printed to d decimals could read x (its sign
ignored, as prose says "84% below" of a change of -84%); followed by a percent sign it may
also stand for 100·v (a share of 0.105 written 10.5%). Numbers in markdown tables count as
data: the tables are built from the rows (and from the kind's constants, the fixed figures its
code applies to them, which the report tabulates beside its parameters). Computed from the
rows too: the row and cell counts, each policy's mean of a metric over all rows, each cell's
mean over its periods, and the difference of two policies' means at one sweep value
(summary.csv). The 95 of the 95% intervals is the report's confidence level. Prose is every
other line.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import pandas as pd

from experiments import report
from experiments.sweeps import experiment as experiment_module
from experiments.sweeps.kinds import FIDELITY

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted((ROOT / "experiments").glob("*/*.yaml"))
EXPERIMENT_IDS = [f"{path.parent.name}/{path.stem}" for path in EXPERIMENTS]
# An ordinal (the 99th percentile) names a statistic, not a value.
NUMBER = re.compile(r"(?:(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.,])\d+(?:\.\d+)?)"
                    r"(?!\d|st\b|nd\b|rd\b|th\b)")


def _numbers(text: str) -> list[str]:
    return [token.replace(",", "") for token in NUMBER.findall(text)]


def _numbers_and_percents(text: str) -> list[tuple[str, bool]]:
    """Each number of ``text`` and whether a percent sign follows it (a share in percent)."""
    return [(match.group().replace(",", ""), text.startswith("%", match.end()))
            for match in NUMBER.finditer(text)]


def _values(text: str) -> set[float]:
    return {abs(float(token)) for token in _numbers(text)}


def _stands_for(written: str, values: set[float]) -> bool:
    x = abs(float(written))
    decimals = len(written.split(".")[1]) if "." in written else 0
    return any(abs(v - x) <= 0.5 * 10 ** -decimals + 1e-12 for v in values)


@pytest.fixture(autouse=True)
def _from_the_checkout(monkeypatch):
    # The report names its experiment file as given: relative to the checkout, as shipped.
    monkeypatch.chdir(ROOT)


def _render(path: Path, into: Path) -> tuple[str, str, object]:
    experiment = experiment_module.load(path.relative_to(ROOT))
    shipped = ROOT / experiment.report_directory
    if not (shipped / "results.csv").exists():
        pytest.skip(f"{path.relative_to(ROOT)} has not been run: no report to check")
    into.mkdir(parents=True)
    shutil.copy(shipped / "results.csv", into / "results.csv")
    report.write(experiment, into, plots=False)
    return ((shipped / "report.md").read_text(), (into / "report.md").read_text(),
            experiment)


def _cells(csv: Path) -> set[float]:
    """The numbers in ``csv``'s cells (read as a table: its commas separate, not group)."""
    cells = pd.unique(pd.read_csv(csv, dtype=str, keep_default_na=False).to_numpy().ravel())
    return _values(" ".join(cells))


def _computed(out: Path) -> set[float]:
    """Numbers the report computes from the rows beyond summary.csv's (see the rounding rule):
    pooled means, differences of means, how many runs a sweep or policy holds and how many
    runs have no clean fidelity verdict."""
    results = pd.read_csv(out / "results.csv")
    summary = pd.read_csv(out / "summary.csv")
    measured = [column for column in results.select_dtypes("number")
                if column not in ("repetition", "seed", "period", "periods")]
    pooled = results.groupby("policy")[measured].mean()
    per_cell = results.groupby("cell")[measured].mean()
    runs_per_group = [results.groupby(by).size() for by in ("sweep", "policy", ["sweep", "policy"])]
    unfaithful = (results.loc[results[FIDELITY.name] != 1, "cell"].nunique()
                  if FIDELITY.name in results else 0)
    values = {len(results), results["cell"].nunique(), unfaithful, report.CONFIDENCE * 100,
              *pooled.to_numpy().ravel(), *per_cell.to_numpy().ravel(),
              *(count for counts in runs_per_group for count in counts)}
    for _, same in summary.groupby(["sweep", "value", "metric"]):
        means = same["mean"].to_numpy()
        values |= {a - b for a in means for b in means}
        values |= {(a - b) / b for a in means for b in means if b}
    return {abs(float(v)) for v in values if pd.notna(v)}


def _scenarios(experiment) -> list[str]:
    """The text of the scenario files the experiment's configuration names."""
    named = re.findall(r"[\w./-]+\.yaml", str(experiment.base.model_dump(mode="json")))
    return [(ROOT / name).read_text() for name in named if (ROOT / name).is_file()]


def _prose(text: str) -> str:
    return "\n".join(line for line in text.splitlines()
                     if not line.startswith("|") and not line.startswith("!["))


def _tables(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("|"))


def _without_figures_over_time(text: str) -> str:
    """``text`` without its section of figures over time (up to the next section)."""
    return re.sub(r"## Over time\n.*?(?=^## )", "", text, count=1, flags=re.S | re.M)


@pytest.fixture(scope="module", params=EXPERIMENTS, ids=EXPERIMENT_IDS)
def rerendered(request, tmp_path_factory):
    """(experiment file, output directory, shipped report, rendered report, experiment): one
    experiment's report rendered again from its shipped results, once for both tests (the
    largest take over a minute)."""
    out = tmp_path_factory.mktemp("rendered") / "report"
    shipped, rendered, experiment = _render(request.param, out)
    return request.param, out, shipped, rendered, experiment


def test_the_shipped_report_is_its_results_rendered(rerendered):
    path, _, shipped, rendered, experiment = rerendered
    if "## Over time" in shipped and "## Over time" not in rendered:
        # Its figures over time need its runs, not on this machine: the rest must still agree.
        shipped = _without_figures_over_time(shipped)
    assert rendered == shipped, f"{experiment.report_directory}/report.md is stale: rerender it " \
                                f"with edgebed experiment {path.relative_to(ROOT)} --report-only"


def test_every_number_in_the_prose_comes_from_data_configuration_or_paper(rerendered):
    path, out, _, rendered, experiment = rerendered
    sources = [_tables(rendered), path.read_text(),
               str(experiment.base.model_dump(mode="json")), str(experiment.seed),
               *_scenarios(experiment)]
    values = (set().union(*map(_values, sources)) | _cells(out / "results.csv")
              | _cells(out / "summary.csv") | _computed(out))
    shares = {100 * v for v in values}
    # The kind's about is a constant of its code, the same before any run: its figures are the
    # design's (header sizes, the paper's scale), not measurements to trace to the rows.
    measured = _prose(rendered.replace(experiment.kind.about, ""))
    unexplained = sorted({token for token, percent in _numbers_and_percents(measured)
                          if not _stands_for(token, values)
                          and not (percent and _stands_for(token, shares))}, key=float)
    assert not unexplained, f"numbers in {experiment.name}'s prose from nowhere: {unexplained}"


def test_the_checker_catches_a_number_from_nowhere():
    values = _values("| lua | 0.34 ± 0.02 |")
    assert _stands_for("0.34", values)
    assert _stands_for("0.3", values)
    assert not _stands_for("0.57", values)
    assert not _numbers("the 99th percentile")
    assert _numbers_and_percents("10.5% of 3") == [("10.5", True), ("3", False)]


def test_a_csv_cell_is_read_whole(tmp_path):
    table = tmp_path / "results.csv"
    table.write_text("seed,x\n2031412568,0.5\n")
    assert {2031412568.0, 0.5} <= _cells(table)
