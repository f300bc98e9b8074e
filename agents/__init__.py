"""Programs that run inside the emulated hosts: traffic sources and sinks, probes, captures."""
