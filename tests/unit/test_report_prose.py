"""Every shipped experiment report is what the code makes of its own results.csv, and every
number in its prose comes from its data, its configuration or the paper's cited figures.

Rounding rule: a number written with d decimals (``0.34``, ``-84``, ``1.5``) stands for a data
value v when |v - x| <= 0.5 * 10^-d, i.e. v printed to d decimals could read x (its sign
ignored, as prose says "84% below" of a change of -84%). Numbers in markdown tables count as
data: the tables are built from the rows. Computed from the rows too: the row and cell counts,
each policy's mean of a metric over all rows, and the difference of two policies' means at one
sweep value (summary.csv). The 95 of the 95% intervals is the report's confidence level. Prose
is every other line.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import pandas as pd

from experiments import report
from experiments.sweeps import experiment as experiment_module

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted((ROOT / "experiments").glob("*/*.yaml"))
EXPERIMENT_IDS = [f"{path.parent.name}/{path.stem}" for path in EXPERIMENTS]
NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.,])\d+(?:\.\d+)?")

# Reports whose prose still cites figures of earlier runs (the kinds' ABOUT and remark texts)
# or numbers this checker cannot trace (derived from the configuration, such as a transcoding
# delay G·(R − R_v)): the number check is expected to fail on them until that prose is reduced
# to the experiment's design or its numbers are computed in the report.
STALE_PROSE = {
    "ai_access-concurrency", "ai_access-emulation", "bloom_cdn-high", "bloom_cdn-low",
    "dispatch-failover", "dispatch-lookup", "dispatch-model", "dispatch-probing",
    "dispatch-relay", "dispatch-rooms", "dispatch-transcoding", "live_edge-capacity",
    "live_edge-emulation", "live_edge-fitted", "live_edge-model", "surveillance-large",
    "surveillance-model",
}


def _numbers(text: str) -> list[str]:
    return [token.replace(",", "") for token in NUMBER.findall(text)]


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
    into.mkdir(parents=True)
    shutil.copy(shipped / "results.csv", into / "results.csv")
    report.write(experiment, into, plots=False)
    return ((shipped / "report.md").read_text(), (into / "report.md").read_text(),
            experiment)


def _computed(out: Path) -> set[float]:
    """Numbers the report computes from the rows beyond summary.csv's (see the rounding rule)."""
    results = pd.read_csv(out / "results.csv")
    summary = pd.read_csv(out / "summary.csv")
    metrics = summary["metric"].unique()
    pooled = results.groupby("policy")[[m for m in metrics if m in results]].mean()
    values = {len(results), results["cell"].nunique(), report.CONFIDENCE * 100,
              *pooled.to_numpy().ravel()}
    for _, same in summary.groupby(["sweep", "value", "metric"]):
        means = same["mean"].to_numpy()
        values |= {a - b for a in means for b in means}
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


@pytest.mark.parametrize("path", EXPERIMENTS, ids=EXPERIMENT_IDS)
def test_the_shipped_report_is_its_results_rendered(path, tmp_path):
    shipped, rendered, experiment = _render(path, tmp_path / "report")
    if "## Over time" in shipped and "## Over time" not in rendered:
        pytest.skip(f"{experiment.name}'s figures over time need its runs, not on this machine")
    assert rendered == shipped, f"{experiment.report_directory}/report.md is stale: rerender it " \
                                f"with edgebed experiment {path.relative_to(ROOT)} --report-only"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=EXPERIMENT_IDS)
def test_every_number_in_the_prose_comes_from_data_configuration_or_paper(path, tmp_path,
                                                                           request):
    experiment = experiment_module.load(path.relative_to(ROOT))
    if experiment.name in STALE_PROSE:
        request.applymarker(pytest.mark.xfail(strict=True, reason="prose of earlier runs"))
    out = tmp_path / "report"
    _, rendered, _ = _render(path, out)
    sources = [_tables(rendered), path.read_text(), (out / "results.csv").read_text(),
               (out / "summary.csv").read_text(),
               str(experiment.base.model_dump(mode="json")), str(experiment.seed),
               *_scenarios(experiment)]
    values = set().union(*map(_values, sources)) | _computed(out)
    unexplained = sorted({token for token in _numbers(_prose(rendered))
                          if not _stands_for(token, values)}, key=float)
    assert not unexplained, f"numbers in {experiment.name}'s prose from nowhere: {unexplained}"


def test_the_checker_catches_a_number_from_nowhere():
    values = _values("| lua | 0.34 ± 0.02 |")
    assert _stands_for("0.34", values)
    assert _stands_for("0.3", values)
    assert not _stands_for("0.57", values)
