"""The end of a run's timeline as the processes the run starts see it: the moment on the run's
monotonic clock (:mod:`edgebed.clock`, virtual nanoseconds) after which the run is over and the
runner stops them. What happens past it (agents writing their tables, the runner stopping
hundreds of processes at once) is teardown, not the run, and no measurement judges it."""

from __future__ import annotations

import os
from collections.abc import Mapping

END_ENV = "EDGEBED_TIMELINE_END_NS"


def environment(end_ns: int) -> dict[str, str]:
    """The variable a process started on the timeline reads its end from."""
    return {END_ENV: str(end_ns)}


def end_ns(environ: Mapping[str, str] = os.environ) -> int | None:
    """The timeline's end this process was started with; None outside a run's timeline (an
    agent started by hand, the interactive CLI)."""
    value = environ.get(END_ENV)
    return None if value is None else int(value)
