"""Seed 000's live-edge user allocation: the reconstructed QoE model and instance generator
(:mod:`.model`) and the allocators LUA, DF, MHCP, Random and Optimal (:mod:`.policies`). The
controller policies wrapping them are in :mod:`controller.policies.live_edge`."""
