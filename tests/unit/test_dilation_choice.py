"""Choosing the time dilation: the calibration's search over doubling factors on short runs
(with a stand-in for the runner), and the least factor a flagged run's CPU peak calls for."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import dilation_choice, scenarios
from experiments.dilation_choice import calibrate, least_factor, least_factor_warning
from experiments.runner import RunOptions, RunResult

SCENARIO = """\
name: calibrated
duration: {duration}
topology:
  subnet: 10.0.0.0/24
  nodes:
    v1: {{role: viewer}}
    v2: {{role: viewer}}
  links:
    - endpoints: ["v1:eth1", "v2:eth1"]
"""


def loader(tmp_path: Path, duration: str = "30s"):
    path = tmp_path / "calibrated.yaml"
    path.write_text(SCENARIO.format(duration=duration))
    return lambda factor: scenarios.load(path, overrides={"time_dilation": factor})


class StandInRunner:
    """Runs nothing: a verdict per time dilation, clean from ``clean_from`` on; records what
    each run was asked."""

    def __init__(self, clean_from: float, status: str = "completed"):
        self.clean_from, self.status = clean_from, status
        self.asked: list[tuple[float, float, Path, bool]] = []

    def __call__(self, scenario, options: RunOptions) -> RunResult:
        factor = scenario.time_dilation
        self.asked.append((factor, options.duration, options.runs_root, options.cli))
        clean = factor >= self.clean_from
        fidelity = {"ok": clean, "flags": [] if clean else [f"the CPU was saturated at {factor:g}"],
                    "cpu_busy_max": 0.5 if clean else 1.0}
        return RunResult(self.status, options.runs_root / f"run-{factor:g}",
                         {"fidelity": fidelity, "error": "stand-in"})


def test_the_smallest_clean_factor_is_chosen_after_short_runs_of_the_doubling_factors(tmp_path):
    runner = StandInRunner(clean_from=3)
    options = RunOptions(runs_root=tmp_path / "runs", cli=True, duration=30.0)
    calibration = calibrate(loader(tmp_path), options, runner)
    assert calibration.chosen == 4
    assert [(t.time_dilation, t.clean) for t in calibration.trials] == [
        (1, False), (2, False), (4, True)]
    assert calibration.trials[0].flags == ["the CPU was saturated at 1"]
    # Short runs of the calibration's duration, never the CLI, in a directory of their own;
    # the options the final run gets are left as they were.
    calibration_dir = tmp_path / "runs" / dilation_choice.CALIBRATION_DIR
    assert runner.asked == [(factor, dilation_choice.CALIBRATION_S, calibration_dir, False)
                            for factor in (1, 2, 4)]
    assert options.cli and options.duration == 30.0 and options.runs_root == tmp_path / "runs"


def test_a_run_shorter_than_a_calibration_run_calibrates_on_its_own_duration(tmp_path):
    runner = StandInRunner(clean_from=1)
    calibration = calibrate(loader(tmp_path, "2s"), RunOptions(runs_root=tmp_path), runner)
    assert calibration.chosen == 1 and [asked[1] for asked in runner.asked] == [2.0]
    # --duration overrides the scenario's, for the calibration too.
    calibrate(loader(tmp_path), RunOptions(runs_root=tmp_path, duration=3.0), runner)
    assert runner.asked[-1][1] == 3.0


def test_no_clean_factor_chooses_none_after_trying_every_one(tmp_path):
    runner = StandInRunner(clean_from=1000)
    calibration = calibrate(loader(tmp_path), RunOptions(runs_root=tmp_path), runner)
    assert calibration.chosen is None
    assert [t.time_dilation for t in calibration.trials] == list(dilation_choice.FACTORS)


def test_a_calibration_run_that_fails_ends_the_search_with_its_error(tmp_path):
    runner = StandInRunner(clean_from=1, status="failed")
    with pytest.raises(RuntimeError, match="time dilation 1 ended failed: stand-in"):
        calibrate(loader(tmp_path), RunOptions(runs_root=tmp_path), runner)
    assert len(runner.asked) == 1


@pytest.mark.parametrize("busy, factor, least", [
    (1.0, 1, 2),  # saturated: at least the next factor
    (0.5, 1, 2),  # flagged below the target (not by the CPU): one step more
    (1.0, 2, 4),
    (0.9, 4, 8),  # 4 x 0.9 / 0.8 = 4.5
    (1.0, 32, None),  # nothing tried is larger
])
def test_a_flagged_run_s_least_factor_brings_its_cpu_peak_under_the_target(busy, factor, least):
    assert least_factor({"ok": False, "cpu_busy_max": busy}, factor) == least


def test_a_clean_run_or_one_without_cpu_samples_has_no_least_factor():
    assert least_factor({"ok": True, "cpu_busy_max": 1.0}, 1) is None
    assert least_factor({"ok": False, "cpu_busy_max": None}, 1) is None
    assert least_factor_warning({"ok": True, "cpu_busy_max": 1.0}, 1) is None


def test_the_least_factor_warning_says_the_peak_the_factor_and_that_it_is_an_estimate():
    warning = least_factor_warning({"ok": False, "cpu_busy_max": 1.0}, 1)
    assert warning.startswith("the CPU peaked at 100% busy at time dilation 1: under 80% needs "
                              "at least 2x (an estimate;")
    assert "--dilate auto" in warning
