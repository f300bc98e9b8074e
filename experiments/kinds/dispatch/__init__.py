"""The experiment kinds of dispatch: the model-level ones (access, bursts and lookups; capacity
near full load) and the emulated ones (access and failover, gray failures, lookups, rooms,
transcoding)."""
