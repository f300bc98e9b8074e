"""surveillance's agents: the cameras."""

ROLES = {"camera": "a surveillance camera streaming video"}
