"""bloom_cdn: Bloom-filter content routing in a media cloud (slug ``bloom_cdn``)."""
