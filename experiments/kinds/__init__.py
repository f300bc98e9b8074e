"""The kinds of experiment cell, found by convention: every module or package directly in
``experiments/kinds/`` (a scheme's ``experiments/kinds/<slug>.py``, or ``<slug>_<variant>.py``)
that exposes ``KINDS``, an iterable of :class:`experiments.sweeps.kinds.Kind`, contributes them;
an experiment file's ``kind:`` names one by its ``name``."""

from __future__ import annotations

import sys

from experiments.sweeps.kinds import Kind
from topologies import discovery


def registered() -> dict[str, Kind]:
    """Every kind the modules of this package expose in ``KINDS``, by name."""
    return discovery.declared(sys.modules[__name__], "KINDS")
