"""bloom_cdn: Bloom-filter content routing in a media cloud (slug ``bloom_cdn``).

:mod:`.model` is the analytic queueing model of the routing strategies, :mod:`.simulation` the
discrete-event simulation of the whole CDN. The Bloom filters and their synchronisation
(:mod:`controller.policies.bloom_cdn.bloom`) and the Chord ring (:mod:`controller.policies.bloom_cdn.chord`) are the content nodes' own data
structures, shared by the simulation and the emulated nodes (:mod:`agents.bloom_cdn_node`),
which as agents reach nothing of the controller's.
"""
