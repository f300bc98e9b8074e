"""The experiment kinds of ai_access: the model-level kind and the emulated one."""
