"""The experiment kinds of dispatch: the model-level kind and the emulated ones (access and
failover, gray failures, lookups, rooms, transcoding)."""
