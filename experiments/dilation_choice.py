"""Choosing a run's time dilation: ``edgebed run --dilate auto`` calibrates the smallest factor
whose short run of the same scenario keeps a clean fidelity verdict, and a flagged run's
summary says the least factor its CPU's peak calls for."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from topologies.scenario import Scenario

# The factors tried, each twice the last: a factor's run takes that many times its virtual
# duration in real time, so doubling finds the smallest clean one in a few short runs.
FACTORS = (1, 2, 4, 8, 16, 32)
CALIBRATION_S = 5.0  # virtual seconds of a calibration run (the scenario's own if shorter)
# A clean run's CPU stays below this busy share: the monitor flags two seconds at 95%, and
# the rest is the headroom that keeps senders and relays on their schedules.
TARGET_BUSY = 0.8
CALIBRATION_DIR = "calibration"


@dataclass
class Trial:
    """One calibration run: its factor, whether its verdict was clean, its flags and where it
    is."""

    time_dilation: float
    clean: bool
    flags: list[str]
    run_dir: str


@dataclass
class Calibration:
    """The calibration runs in the order they ran, and the factor chosen (None: none of
    :data:`FACTORS` gave a clean run)."""

    trials: list[Trial] = field(default_factory=list)
    chosen: float | None = None


def calibration_duration(scenario: Scenario, duration: float | None = None) -> float:
    """A calibration run's virtual duration: :data:`CALIBRATION_S`, or the run's own when
    shorter (``duration`` when it overrides the scenario's)."""
    return min(CALIBRATION_S, duration or scenario.duration)


def calibrate(load: Callable[[float], Scenario], options, run,
              on_trial: Callable[[Trial], None] = lambda trial: None) -> Calibration:
    """Run the scenario ``load(factor)`` returns for a calibration run's duration at each of
    :data:`FACTORS` until one's verdict is clean. ``run(scenario, options)`` is
    :func:`experiments.runner.run_scenario`; the calibration runs go under
    ``options.runs_root / "calibration"``. A run that did not complete ends the search: its
    verdict says nothing about the factor."""
    calibration = Calibration()
    for factor in FACTORS:
        scenario = load(factor)
        result = run(scenario, replace(options, cli=False,
                                       duration=calibration_duration(scenario,
                                                                     options.duration),
                                       runs_root=Path(options.runs_root) / CALIBRATION_DIR))
        fidelity = result.summary.get("fidelity") or {}
        trial = Trial(factor, result.status == "completed" and bool(fidelity.get("ok")),
                      list(fidelity.get("flags") or []), str(result.run_dir))
        calibration.trials.append(trial)
        on_trial(trial)
        if result.status != "completed":
            raise RuntimeError(f"the calibration run at time dilation {factor:g} ended "
                               f"{result.status}: {result.summary.get('error')} "
                               f"(see {result.run_dir})")
        if trial.clean:
            calibration.chosen = factor
            break
    return calibration


def least_factor(fidelity: dict, factor: float) -> float | None:
    """For a flagged run at ``factor``: the least of :data:`FACTORS` above it that its CPU's
    peak calls for, the peak busy share brought under :data:`TARGET_BUSY` by slowing time.
    An estimate, and a lower bound: the traffic's cost per real second falls with the factor,
    the switch's idle wake-ups do not, and a saturated CPU hides how much more it was asked.
    None for a clean run, or when no factor tried is enough."""
    busy = fidelity.get("cpu_busy_max")
    if fidelity.get("ok") or busy is None:
        return None
    needed = factor * busy / TARGET_BUSY
    return next((candidate for candidate in FACTORS
                 if candidate > factor and candidate >= needed - 1e-9), None)


def least_factor_warning(fidelity: dict, factor: float) -> str | None:
    """The flagged run's summary line on the least factor (:func:`least_factor`)."""
    least = least_factor(fidelity, factor)
    if least is None:
        return None
    return (f"the CPU peaked at {fidelity['cpu_busy_max']:.0%} busy at time dilation "
            f"{factor:g}: under {TARGET_BUSY:.0%} needs at least {least:g}x (an estimate; "
            f"`edgebed run --dilate auto` calibrates the factor on short runs)")
