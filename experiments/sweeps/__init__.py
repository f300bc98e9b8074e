"""Experiments: sweeps of a parameter, each cell run by a registered kind."""
