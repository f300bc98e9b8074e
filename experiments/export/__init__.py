"""Scenarios written out for other emulation engines, for networks bigger than one machine.

Each target is a module here with ``export(scenario, scenario_file, out_dir)`` returning an
object with ``text()`` (the file to write) and ``unmapped`` (what the target cannot express);
:func:`targets` finds them by that convention, as the agents are found.
"""

from __future__ import annotations

import importlib
import pkgutil


class ExportError(ValueError):
    """The scenario is valid for edgebed but cannot be expressed in the target; the message
    says which node, link or field and why."""


def targets() -> list[str]:
    """The export targets: every module of this package with an ``export`` function."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__)
                  if callable(getattr(importlib.import_module(f"{__name__}.{info.name}"),
                                      "export", None)))


def exporter(target: str):
    """The ``export`` function of ``target`` (one of :func:`targets`)."""
    return importlib.import_module(f"{__name__}.{target}").export
