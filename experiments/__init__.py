"""Running scenarios: the runner, run directories, the run registry and the ``edgebed`` CLI."""
