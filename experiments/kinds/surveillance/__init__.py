"""The experiment kinds of surveillance: the model-level kind and the emulated one."""
