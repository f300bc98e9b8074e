"""Experiments: sweeps of a parameter, each cell run by a registered kind.

:mod:`.kinds` is what a kind provides, :mod:`.experiment` reads an experiment file into its
cells (and holds the registry of kinds), :mod:`.runner` runs the cells into ``results.csv``,
resumably, on one of :mod:`.executors` (this process, a local pool, a Dask cluster); the report
is :mod:`experiments.report`.
"""
