"""The user-space relay that gives a wired link its delay, jitter and burst loss."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from edgebed import clock

from ..model import Impairment
from ..naming import ENVIRONMENT_KEY
from . import tc


@dataclass(frozen=True)
class RelayLimit:
    """Packets/s per direction to which a relay alone (a wire between two hosts, nothing else
    running) met benchmarks/impairment.py's goals on the 2-core reference machine: mean delay
    error <= 0.5 ms, p99 <= +2 ms, every frame delivered. Traffic nearer than ``NEAR`` of a
    limit is warned about: delays may grow."""

    one_way: int  # traffic in one direction only
    both_ways: int  # as much traffic in each direction

    NEAR: ClassVar[float] = 0.8

    def near(self, pps: float, opposite_pps: float) -> bool:
        """Whether a direction carrying ``pps`` (the other ``opposite_pps``) nears what was
        measured: its own rate beyond the one-way limit, or both together beyond the
        both-ways one."""
        return (pps > self.NEAR * self.one_way
                or pps + opposite_pps > self.NEAR * 2 * self.both_ways)

    def __str__(self) -> str:
        return f"{self.one_way:,} packets/s one way, {self.both_ways:,} per direction both ways"


COMPILED, PYTHON = "compiled", "python"
RELAY_LIMITS = {COMPILED: RelayLimit(one_way=50_000, both_ways=50_000),
                PYTHON: RelayLimit(one_way=50_000, both_ways=30_000)}
# The compiled relay (wire_relay.c) that scripts/setup.sh builds into the venv.
COMPILED_RELAY = Path(sys.prefix) / "bin" / "edgebed-wire-relay"
# "python" or "compiled" picks the relay; unset, the compiled one when it is built.
RELAY_ENGINE_KEY = "EDGEBED_RELAY"
_warned_python = False
WIRE_TOWARD_A = "wa"
WIRE_TOWARD_B = "wb"


def relay_direction(impairment: Impairment) -> dict:
    """The relay's settings for one direction (rate and random loss are tc's, not the relay's).
    The relay holds as many frames as netem would without a rate (:func:`tc.netem_limit`):
    the link's rate limiter comes after the relay, so the relay holds whatever arrives."""
    burst = impairment.burst
    return {"delay": impairment.delay or 0.0, "jitter": impairment.jitter or 0.0,
            "distribution": impairment.distribution or "normal",
            "reorder": impairment.reorder is not False,
            "burst": burst.model_dump() if burst else None,
            "limit": tc.netem_limit(Impairment(delay=impairment.delay,
                                               jitter=impairment.jitter))}


def relay_engine() -> list[str]:
    """The extra arguments of ``topologies.impairments.wire`` for the relay to use: the compiled
    one when it is built (or asked for: then it must be), the Python one otherwise, said once
    on stderr since it caps the packet rate of every delayed link."""
    global _warned_python
    wanted = os.environ.get(RELAY_ENGINE_KEY, "")
    if wanted not in ("", PYTHON, COMPILED):
        raise ValueError(f"{RELAY_ENGINE_KEY}={wanted!r}: must be python or compiled")
    if wanted == PYTHON:
        return []
    if os.access(COMPILED_RELAY, os.X_OK):
        return ["--compiled", str(COMPILED_RELAY)]
    if wanted == COMPILED:
        raise RuntimeError(f"{RELAY_ENGINE_KEY}=compiled but {COMPILED_RELAY} is not built; "
                           "run scripts/setup.sh")
    if not _warned_python:
        _warned_python = True
        print(f"edgebed: the compiled relay is not built ({COMPILED_RELAY}; scripts/setup.sh "
              "builds it): delayed links use the Python relay, accurate to "
              f"{RELAY_LIMITS[PYTHON]}", file=sys.stderr, flush=True)
    return []


LATENESS_US = ("mean", "std", "p50", "p99", "max", "sum")


def virtual_lateness(late: dict | None, dilation: float) -> dict | None:
    """The compiled relay's lateness figures, which it measures in real microseconds (it keeps
    real time), in microseconds of a clock dilated by ``dilation``, as the Python relay's."""
    if not late or dilation == 1:
        return late
    scaled = {key: None if late.get(key) is None else late[key] / dilation
              for key in LATENESS_US}
    return late | scaled | {"sum_squares": late.get("sum_squares", 0) / dilation ** 2}


class Relay:
    """One wire's relay process, started inside the wire's namespace."""

    def __init__(self, wire_host, log: Path, prefix: str, seed: int,
                 forward: Impairment, reverse: Impairment):
        self.log = log
        self.status = log.with_suffix(".status.json")
        self._last_load: tuple[float, dict] | None = None
        engine = relay_engine()
        self.kind = COMPILED if engine else PYTHON
        config = {"seed": seed, "forward": relay_direction(forward),
                  "reverse": relay_direction(reverse)}
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as stream:
            self.process = wire_host.popen(
                [sys.executable, "-m", "topologies.impairments.wire", "--forward-in", WIRE_TOWARD_A,
                 "--forward-out", WIRE_TOWARD_B, "--config", json.dumps(config),
                 "--status", str(self.status), *engine],
                stdin=subprocess.PIPE, stdout=stream, stderr=subprocess.STDOUT,
                env=dict(os.environ, **{ENVIRONMENT_KEY: prefix}))

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Return once the relay forwards: it writes its first status right after opening its
        sockets. Until then the wire drops every frame, ARP included. The timeout only catches
        a relay that never starts: a VM under CPU emulation takes tens of seconds to start one."""
        deadline = clock.monotonic() + timeout_s
        while not self.status.exists():
            if self.process.poll() is not None or clock.monotonic() > deadline:
                raise RuntimeError(f"the relay of {self.log.stem} did not start; see {self.log}")
            clock.sleep(0.01)

    def update(self, direction: str, impairment: Impairment) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"the relay of {self.log.stem} has exited "
                               f"({self.process.returncode}); see {self.log}")
        line = json.dumps({direction: relay_direction(impairment)}) + "\n"
        self.process.stdin.write(line.encode())
        self.process.stdin.flush()

    def load(self) -> dict[str, dict]:
        """Per direction, frames per second since the last call, the 99th percentile of how
        late frames left so far (µs) and the frames the relay lost so far because it did not
        keep up; empty until the relay has written its status."""
        try:
            statistics = self._in_virtual_time(json.loads(self.status.read_text()))
            taken = self.status.stat().st_mtime
        except (OSError, ValueError):
            return {}
        previous, self._last_load = self._last_load, (taken, statistics)
        if previous is None or taken <= previous[0]:
            return {}
        elapsed = taken - previous[0]
        return {direction: {
            "pps": (statistics[direction]["frames_in"] - previous[1][direction]["frames_in"])
            / elapsed,
            "late_p99_us": (statistics[direction]["late_us"] or {}).get("p99"),
            "frames": statistics[direction]["frames_out"],
            "emulator_dropped": sum(statistics[direction].get(cause, 0) for cause in
                                    ("dropped_receive_queue", "dropped_queue_full"))}
            for direction in ("forward", "reverse")}

    def stop(self, timeout_s: float = 5.0) -> dict | None:
        """Stop the relay; returns the statistics it prints on the way out."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdin:
            self.process.stdin.close()
        # The log also holds the relay's acknowledgements of changes ({"applied": n}); its
        # statistics are the line with both directions.
        for line in reversed(self.log.read_text().splitlines()):
            try:
                statistics = json.loads(line)
            except ValueError:
                continue
            if isinstance(statistics, dict) and set(statistics) >= {"forward", "reverse"}:
                return self._in_virtual_time(statistics)
        return None

    def _in_virtual_time(self, statistics: dict) -> dict:
        """The relay's statistics with their lateness in the run's time (the compiled relay's
        is real)."""
        dilation = clock.current().dilation
        if self.kind != COMPILED or dilation == 1:
            return statistics
        return {direction: figures | {"late_us": virtual_lateness(figures.get("late_us"),
                                                                  dilation)}
                if direction in ("forward", "reverse") else figures
                for direction, figures in statistics.items()}
