"""Seed 002: Bloom-filter content routing in a media cloud (slug ``bloom_cdn``).

:mod:`.model` is the analytic queueing model of the routing strategies, :mod:`.bloom` the
Bloom filters and their synchronisation, :mod:`.chord` the Chord ring, :mod:`.simulation` the
discrete-event simulation of the whole CDN.
"""
