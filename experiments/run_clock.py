"""A run's clock as the runner keeps it: started with the scenario's time dilation, handed to
every process the run starts, and stated in the manifest and the summary."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from edgebed import clock
from edgebed.clock import Clock
from topologies.scenario import Scenario

UNDILATED_SWITCH = ("the switches keep real time: their own timings (carrier detection, "
                    "OpenFlow fast failover, idle and hard timeouts, MAC learning's ageing) "
                    "appear {n:g} times faster in the run's virtual time")


def start_run_clock(scenario: Scenario,
                    environ: MutableMapping[str, str] = os.environ) -> Clock:
    """The run's clock, made this process's and exported through ``environ`` to every process
    started after it (agents, relays, the controller inherit it). An undilated run leaves
    both untouched: it runs on the system's own clocks."""
    if scenario.time_dilation == 1:
        return clock.current()
    started = Clock.starting_now(scenario.time_dilation)
    environ.update(started.environment())
    clock.use(started)
    return started


def stop_run_clock(environ: MutableMapping[str, str] = os.environ) -> None:
    """Back to the undilated clock once the run is over."""
    for name in Clock().environment():
        environ.pop(name, None)
    clock.use(Clock())


def manifest_entry(scenario: Scenario) -> dict:
    """What the manifest says of the run's time: its dilation factor."""
    return {"time_dilation": scenario.time_dilation}


def summary_notes(scenario: Scenario) -> list[str]:
    """What a dilated run's summary must say it could not dilate."""
    if scenario.time_dilation == 1:
        return []
    return [f"time dilated {scenario.time_dilation:g}x: "
            + UNDILATED_SWITCH.format(n=scenario.time_dilation)]
