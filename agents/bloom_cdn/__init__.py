"""bloom_cdn's agents: the media cloud's content nodes and its data center."""

ROLES = {"datacenter": "the media cloud's data center, where content nodes fetch from"}
