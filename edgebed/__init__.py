"""The base layer: what every other layer shares and that imports nothing of the project.

Quantities and their units, whole-or-nothing file writes, tidy tables, discovery of a layer's
entries by convention, the run's clock, real-time scheduling and the control protocol's wire
messages.
"""
