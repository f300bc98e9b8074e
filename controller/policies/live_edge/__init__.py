"""Seed 000, live-edge user allocation: the reconstructed QoE model and instance generator
(:mod:`.model`), the allocators LUA, DF, MHCP, Random and Optimal on it (:mod:`.allocators`), and
the controller policies running them on the controller's state (:mod:`.policies`)."""

from controller.policies.live_edge.policies import POLICIES

__all__ = ["POLICIES"]
