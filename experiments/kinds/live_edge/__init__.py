"""The experiment kinds of live-edge user allocation (LUA): the model-level kind, the emulated one, and the fit of
the model's unknowns to the paper's figures."""
