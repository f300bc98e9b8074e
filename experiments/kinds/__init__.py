"""The kinds of experiment cell, found by convention: every module in ``experiments/kinds/``
or in a scheme's package of them (``experiments/kinds/<slug>/model.py``, ``emulation.py``, ...;
a single ``experiments/kinds/<slug>.py`` will do) that exposes ``KINDS``, an iterable of
:class:`experiments.sweeps.kinds.Kind`, contributes them; an experiment file's ``kind:`` names
one by its ``name``. A module may also expose
``RUN_SUMMARIES`` (:class:`experiments.sweeps.kinds.RunSummary`, by scheme slug): what a single
``edgebed run`` adds to its summary when the controller ran one of that scheme's policies."""

from __future__ import annotations

import sys

from experiments.sweeps.kinds import Kind, RunSummary
from edgebed import discovery


def registered() -> dict[str, Kind]:
    """Every kind the modules of this package and its subpackages expose in ``KINDS``, by name."""
    return discovery.declared(sys.modules[__name__], "KINDS", nested=True)


def run_summaries() -> dict[str, RunSummary]:
    """Every scheme's run summary the modules of this package expose in ``RUN_SUMMARIES``, by
    scheme slug."""
    return discovery.declared(sys.modules[__name__], "RUN_SUMMARIES", nested=True)
