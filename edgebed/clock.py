"""The run's clock: the one source of time and sleep for every process of a run.

A run may be dilated by a factor N (DieCast's time dilation factor): virtual time then passes N
times slower than real time, so every program that reads this clock sees a machine N times
faster. Virtual readings are ``epoch + (real - epoch) / N`` for both the wall clock and the
monotonic clock, with epochs every process of the run shares through its environment, so
timestamps taken in different processes (a sender's and a receiver's) still compare. At N = 1
the clock is the system's, reading for reading.
"""

from __future__ import annotations

import os
import time as _system
from collections.abc import Mapping
from dataclasses import dataclass

DILATION_ENV = "EDGEBED_TIME_DILATION"
REALTIME_EPOCH_ENV = "EDGEBED_CLOCK_EPOCH_NS"
MONOTONIC_EPOCH_ENV = "EDGEBED_CLOCK_MONOTONIC_EPOCH_NS"


@dataclass(frozen=True)
class Clock:
    """Virtual time at ``dilation`` real seconds per virtual second, equal to real time at the
    epochs (a CLOCK_REALTIME and a CLOCK_MONOTONIC reading taken at the same moment)."""

    dilation: float = 1.0
    realtime_epoch_ns: int = 0
    monotonic_epoch_ns: int = 0

    def __post_init__(self) -> None:
        if not self.dilation >= 1.0 or self.dilation == float("inf"):
            raise ValueError(f"time dilation must be a finite factor of at least 1, "
                             f"got {self.dilation!r}")

    @classmethod
    def starting_now(cls, dilation: float) -> Clock:
        """A clock dilated by ``dilation`` from this moment on."""
        return cls(float(dilation), _system.time_ns(), _system.monotonic_ns())

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Clock:
        """The clock a run's environment describes; undilated when it describes none."""
        dilation = environ.get(DILATION_ENV)
        if dilation is None:
            return cls()
        return cls(float(dilation), int(environ[REALTIME_EPOCH_ENV]),
                   int(environ[MONOTONIC_EPOCH_ENV]))

    def environment(self) -> dict[str, str]:
        """The variables a process started in this run reads its clock from."""
        return {DILATION_ENV: repr(self.dilation),
                REALTIME_EPOCH_ENV: str(self.realtime_epoch_ns),
                MONOTONIC_EPOCH_ENV: str(self.monotonic_epoch_ns)}

    @property
    def dilated(self) -> bool:
        """Whether virtual time differs from real time."""
        return self.dilation != 1.0

    def virtual_realtime_ns(self, real_ns: int) -> int:
        """The virtual wall-clock time of a real CLOCK_REALTIME reading (a kernel timestamp such
        as SO_TIMESTAMPNS's)."""
        if not self.dilated:
            return real_ns
        return self.realtime_epoch_ns + round((real_ns - self.realtime_epoch_ns) / self.dilation)

    def virtual_monotonic_ns(self, real_ns: int) -> int:
        """The virtual monotonic time of a real CLOCK_MONOTONIC reading."""
        if not self.dilated:
            return real_ns
        return self.monotonic_epoch_ns + round((real_ns - self.monotonic_epoch_ns)
                                               / self.dilation)

    def real_seconds(self, virtual_s: float) -> float:
        """The real length of a virtual duration: what to hand a timeout outside this clock
        (select, socket.settimeout, a subprocess's wait, a thread's wait)."""
        return virtual_s * self.dilation if self.dilated else virtual_s

    def real_ns(self, virtual_ns: int) -> int:
        """``real_seconds`` in whole nanoseconds, for a program that keeps its own time (the
        compiled relay's delays)."""
        return round(virtual_ns * self.dilation) if self.dilated else virtual_ns

    def virtual_seconds(self, real_s: float) -> float:
        """The virtual length of a real duration."""
        return real_s / self.dilation if self.dilated else real_s

    def time_ns(self) -> int:
        """Virtual wall-clock time, nanoseconds since the Unix epoch."""
        return self.virtual_realtime_ns(_system.time_ns())

    def time(self) -> float:
        """Virtual wall-clock time, seconds since the Unix epoch."""
        return _system.time() if not self.dilated else self.time_ns() / 1e9

    def monotonic_ns(self) -> int:
        """Virtual monotonic time, nanoseconds."""
        return self.virtual_monotonic_ns(_system.monotonic_ns())

    def monotonic(self) -> float:
        """Virtual monotonic time, seconds."""
        return _system.monotonic() if not self.dilated else self.monotonic_ns() / 1e9

    def sleep(self, virtual_s: float) -> None:
        """Sleep ``virtual_s`` virtual seconds."""
        _system.sleep(self.real_seconds(virtual_s))


_current = Clock.from_environment(os.environ)


def current() -> Clock:
    """This process's clock: the one its environment describes, unless ``use`` set another."""
    return _current


def use(clock: Clock) -> None:
    """Make ``clock`` this process's clock (the runner, once a run's dilation is known)."""
    global _current
    _current = clock


def time_ns() -> int:
    """Virtual wall-clock time, nanoseconds since the Unix epoch."""
    return _current.time_ns()


def time() -> float:
    """Virtual wall-clock time, seconds since the Unix epoch."""
    return _current.time()


def monotonic_ns() -> int:
    """Virtual monotonic time, nanoseconds."""
    return _current.monotonic_ns()


def monotonic() -> float:
    """Virtual monotonic time, seconds."""
    return _current.monotonic()


def sleep(virtual_s: float) -> None:
    """Sleep ``virtual_s`` virtual seconds."""
    _current.sleep(virtual_s)


def real_seconds(virtual_s: float) -> float:
    """The real length of a virtual duration, for a timeout handed to something outside this
    clock (select, socket.settimeout, a subprocess's or a thread's wait)."""
    return _current.real_seconds(virtual_s)


def real_timeout(virtual_s: float | None) -> float | None:
    """``real_seconds`` for a timeout that may be None (wait for ever)."""
    return None if virtual_s is None else _current.real_seconds(virtual_s)


def virtual_realtime_ns(real_ns: int) -> int:
    """The virtual wall-clock time of a kernel's CLOCK_REALTIME timestamp (SO_TIMESTAMPNS)."""
    return _current.virtual_realtime_ns(real_ns)


def real_elapsed() -> float:
    """Real elapsed seconds from an arbitrary origin (the performance counter), never dilated.

    For what costs real time on this machine whatever the run's dilation: a policy's
    computation, a solver's time budget, a benchmark. Dilating it would report a computation N
    times faster than the machine ran it."""
    return _system.perf_counter()


def real_elapsed_ns() -> int:
    """``real_elapsed`` in nanoseconds, never dilated."""
    return _system.perf_counter_ns()
