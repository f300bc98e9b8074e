"""The experiment kinds of bloom_cdn: the model-level kind and the emulated one."""
