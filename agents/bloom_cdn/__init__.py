"""bloom_cdn's agents: the media cloud's content nodes and its data center."""
