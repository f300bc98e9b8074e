"""surveillance's agents: the cameras."""
